"""Regenerating the SGLang flag catalogues reproduces the committed JSON; importing config reads none.

These run processes (the generator, a release's own parser in its environment under ``.engines/``,
a fresh interpreter), so they are integration tests; what the files hold is checked in
``tests/unit/engines/sglang/config/test_catalogues.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from glm5lib.engines.sglang.config import _releases as releases

REPO = Path(__file__).resolve().parents[2]
ENGINES = REPO / ".engines"


def _catalogue_path(release: str) -> Path:
    return REPO.joinpath("glm5lib", *releases.CATALOGUE_DIR, releases.BUNDLED_RELEASES[release])


def _generate(args: list[str], out: Path) -> str:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "build_sglang_flags.py"), *args, "-o", str(out)],
                          capture_output=True, text=True, timeout=280, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return out.read_text()


def test_regenerating_0_5_9_from_its_wheel_reproduces_the_committed_file(tmp_path):
    """0.5.9's catalogue is read statically from the wheel's server_args.py (nothing imported)."""
    wheel = ENGINES / "wheels-sglang" / "sglang-0.5.9-py3-none-any.whl"
    if not wheel.is_file():
        pytest.skip(f"no {wheel.name} in .engines/wheels-sglang (make sglang-envs downloads it)")
    with zipfile.ZipFile(wheel) as archive:
        archive.extract("sglang/srt/server_args.py", tmp_path)
    source = releases.read_catalogue_file("0.5.9")["source"]
    text = _generate([str(tmp_path), "--version", "0.5.9", "--origin", source["origin"]], tmp_path / "out.json")
    assert text == _catalogue_path("0.5.9").read_text()


@pytest.mark.parametrize("release", ["0.5.8", "0.5.16", "0.5.23"])
def test_regenerating_from_the_release_own_parser_reproduces_the_committed_file(release, tmp_path):
    """0.5.8's, 0.5.16's and 0.5.23's catalogues are read off the release's own parser, in its environment."""
    stamp = ENGINES / f"sglang-{release}" / "glm5-env.json"
    if not stamp.is_file():
        pytest.skip(f"no SGLang {release} environment: run 'make sglang-envs' ({stamp} missing)")
    record = json.loads(stamp.read_text())
    if record.get("status") != "ok" or not shutil.which(record.get("python", "")):
        pytest.skip(f"SGLang {release} environment not usable: {record.get('reason', '')[:300]}")
    source = releases.read_catalogue_file(release)["source"]
    args = ["--python", record["python"], "--version", release, "--origin", source["origin"],
            "--wheel-sha256", source["wheel_sha256"]]
    text = _generate(args, tmp_path / "out.json")
    assert text == _catalogue_path(release).read_text()


def test_importing_the_config_package_reads_no_catalogue():
    code = (
        "import glm5lib.engines.sglang.config as c, glm5lib.engines.sglang.config._releases as r\n"
        "assert r._bundled.cache_info().currsize == 0, 'a catalogue was read at import time'\n"
        "flags = c.SGLANG_FLAGS\n"
        "assert r._bundled.cache_info().currsize == 1 and len(flags) > 500\n"
        "assert c.SGLANG_SOURCE['version'] == c.DEFAULT_RELEASE\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          check=False, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
