"""A site-packages-like folder holding an ``sglang`` with the one file the shipped diff edits,
for the patching tests and the fault matrix's patched phase."""

from __future__ import annotations

from pathlib import Path

#: the file the shipped diff edits, relative to site-packages
MODEL_RUNNER_PATH = "sglang/srt/model_executor/model_runner.py"

# The shape of SGLang 0.5.x's ModelRunner._should_run_flashinfer_autotune (see the shipped
# diff's header for the source); surrounding code shortened.
MODEL_RUNNER = '''class ModelRunner:
    def _should_run_flashinfer_autotune(self) -> bool:
        """Check if flashinfer autotune should be run."""
        if self.server_args.disable_flashinfer_autotune:
            return False

        backend_str = self.server_args.moe_runner_backend
        if backend_str not in [
            "flashinfer_trtllm",
            "flashinfer_mxfp4",
            # TODO: flashinfer_cutlass will cause some flashinfer compilation errors. To be fixed.
            # "flashinfer_cutlass",
        ]:
            return False

        return True
'''


def make_site(root: Path) -> Path:
    """``root`` made a site-packages holding ``sglang`` and its unpatched model_runner.py; returns
    that file."""
    target = root / MODEL_RUNNER_PATH
    target.parent.mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text("")
    target.write_text(MODEL_RUNNER)
    return target
