from __future__ import annotations

import json

import pytest
from sglang_site import MODEL_RUNNER, make_site

from glm5lib import patching
from glm5lib.errors import ConfigError, PatchError

SHIPPED = "sglang-flashinfer-cutlass-moe-autotune"

@pytest.fixture
def site(tmp_path):
    """A site-packages-like folder holding an 'sglang' with the file the shipped diff edits."""
    root = tmp_path / "site-packages"
    make_site(root)
    return root


def test_shipped_patch_applies_records_and_reverts(site, tmp_path):
    target = site / "sglang/srt/model_executor/model_runner.py"
    record_dir = tmp_path / "run" / "fix"
    p = patching.SourcePatch(SHIPPED, root=site, record_dir=record_dir)
    assert p.files == ["sglang/srt/model_executor/model_runner.py"]
    p.apply()
    patched = target.read_text()
    assert '            "flashinfer_cutlass",\n        ]:' in patched
    assert "# \"flashinfer_cutlass\"" not in patched
    record = json.loads((record_dir / patching.PATCH_RECORD).read_text())
    assert record["status"] == "applied"
    assert record["files"] == p.files
    assert record["file_sha256_before"] != record["file_sha256_after"]
    assert (record_dir / f"{SHIPPED}.diff").read_text() == p.diff
    saved = record_dir / "patch-originals" / "sglang/srt/model_executor/model_runner.py"
    assert saved.read_text() == MODEL_RUNNER
    p.revert()
    assert target.read_text() == MODEL_RUNNER
    record = json.loads((record_dir / patching.PATCH_RECORD).read_text())
    assert record["status"] == "reverted" and record["reverted_at"]


def test_context_manager_reverts_when_the_body_raises(site):
    target = site / "sglang/srt/model_executor/model_runner.py"
    with pytest.raises(RuntimeError, match="server crashed"), patching.SourcePatch(SHIPPED, root=site) as p:
        assert p.applied
        assert target.read_text() != MODEL_RUNNER
        raise RuntimeError("server crashed")
    assert target.read_text() == MODEL_RUNNER


def test_patch_for_another_version_is_refused_and_nothing_changes(site):
    target = site / "sglang/srt/model_executor/model_runner.py"
    other = MODEL_RUNNER.replace('"flashinfer_mxfp4",', '"flashinfer_mxfp4", "flashinfer_cutedsl",')
    target.write_text(other)
    p = patching.SourcePatch(SHIPPED, root=site)
    with pytest.raises(PatchError, match="does not apply cleanly") as exc:
        p.apply()
    assert "FAILED" in str(exc.value)
    assert target.read_text() == other


def test_already_applied_patch_is_named_as_such(site):
    first = patching.SourcePatch(SHIPPED, root=site)
    first.apply()
    with pytest.raises(PatchError, match="already applied"):
        patching.SourcePatch(SHIPPED, root=site).check()
    first.revert()


def test_missing_file_names_the_version_problem(tmp_path):
    (tmp_path / "sglang").mkdir()
    with pytest.raises(PatchError, match="another version"):
        patching.SourcePatch(SHIPPED, root=tmp_path).check()


def test_package_root_is_found_without_import(site, monkeypatch):
    monkeypatch.syspath_prepend(str(site))
    import importlib

    importlib.invalidate_caches()
    assert patching.package_root("sglang") == site.resolve()
    with pytest.raises(PatchError, match="not installed"):
        patching.package_root("no_such_package_glm5_test")


def test_diffs_escaping_the_package_or_not_diffs_are_rejected():
    with pytest.raises(PatchError, match="outside the package"):
        patching.patched_files("--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-a\n+b\n")
    with pytest.raises(PatchError, match="not a unified diff"):
        patching.patched_files("hello\nworld\n")
    with pytest.raises(ConfigError, match="no patch named"):
        patching.shipped_patch("no-such-patch")
    assert SHIPPED in patching.shipped_patches()


def test_record_modelled_says_not_applied(tmp_path):
    record = patching.record_modelled(SHIPPED, tmp_path)
    saved = json.loads((tmp_path / patching.PATCH_RECORD).read_text())
    assert record.status == saved["status"] == "modelled"
    assert "stand-in" in saved["note"]
    assert saved["files"] == ["sglang/srt/model_executor/model_runner.py"]


def _release(site, version):
    (site / f"sglang-{version}.dist-info").mkdir()


def test_change_already_upstream_is_reported_and_nothing_is_applied(site, tmp_path):
    # as in 0.5.23: the function moved to runner/flashinfer_autotune.py and lists the backend
    (site / "sglang/srt/model_executor/model_runner.py").write_text("class ModelRunner:\n    pass\n")
    moved = site / "sglang/srt/model_executor/runner/flashinfer_autotune.py"
    moved.parent.mkdir()
    moved.write_text(
        "def should_run_flashinfer_autotune(backend_str):\n"
        "    moe_needs_autotune = backend_str in [\n"
        '        "flashinfer_trtllm",\n        "flashinfer_trtllm_routed",\n'
        '        "flashinfer_mxfp4",\n        "flashinfer_cutlass",\n    ]\n'
        "    if not moe_needs_autotune:\n        return False\n    return True\n"
    )
    _release(site, "0.5.23")
    before = moved.read_text()
    p = patching.SourcePatch(SHIPPED, root=site, record_dir=tmp_path / "rec")
    record = p.apply()
    assert record.status == "upstream" and p.upstream
    assert "0.5.23" in record.note
    assert "sglang/srt/model_executor/runner/flashinfer_autotune.py:6" in record.note
    assert moved.read_text() == before
    assert json.loads((tmp_path / "rec" / "patch.json").read_text())["status"] == "upstream"
    p.revert()  # nothing to undo
    assert moved.read_text() == before


def test_code_that_moved_is_found_and_named(site):
    (site / "sglang/srt/model_executor/model_runner.py").write_text("class ModelRunner:\n    pass\n")
    moved = site / "sglang/srt/model_executor/autotune.py"
    moved.write_text(MODEL_RUNNER)
    _release(site, "0.5.99")
    with pytest.raises(PatchError, match=r"0\.5\.99 the code this diff changes moved to sglang/srt/model_executor/autotune\.py:\d+"):
        patching.SourcePatch(SHIPPED, root=site).check()
    assert moved.read_text() == MODEL_RUNNER
