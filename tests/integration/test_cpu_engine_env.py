"""scripts/cpu_engine_env.sh, what the CPU engines' installs share, sourced with a stand-in interpreter."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# `python -m venv DIR` makes DIR/bin/python, which logs what it is asked to do
FAKE_PYTHON = """#!/usr/bin/env bash
mkdir -p "$3/bin"
printf '#!/usr/bin/env bash\\necho "$*" >> "%s/pip.log"\\n' "$(dirname "$3")" > "$3/bin/python"
chmod +x "$3/bin/python"
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_shared_install_settings_and_a_new_environment(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    engines = tmp_path / "engines"
    script = ('set -euo pipefail; source scripts/cpu_engine_env.sh toy; new_venv "$ENGINES/cons.txt"; '
              'echo "$VENV|$WHEELS|$TORCH_VERSION|${TORCH_EXTRA[*]}|${PIP[*]}"')
    env = {"PATH": "/usr/bin:/bin", "ENGINES": str(engines), "PYTHON": str(fake),
           "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cpu"}
    out = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    venv, wheels, torch, extra, pip = out.stdout.strip().split("|")
    assert (venv, wheels) == (f"{engines}/toy", f"{engines}/wheels")
    assert extra == "--extra-index-url https://download.pytorch.org/whl/cpu"
    assert pip == f"{engines}/toy/bin/python -m pip --disable-pip-version-check"
    assert (engines / "cons.txt").read_text() == f"torch=={torch}+cpu\n"
    assert (engines / "wheels").is_dir()
    assert (engines / "pip.log").read_text() == "-m pip --disable-pip-version-check install -q --upgrade pip\n"
    env.pop("TORCH_INDEX_URL")
    out = subprocess.run(["bash", "-c", 'source scripts/cpu_engine_env.sh toy; echo "[${TORCH_EXTRA[*]}]"'],
                         cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
