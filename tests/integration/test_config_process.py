"""glm5lib.engines.sglang.config from a fresh interpreter (a process: an integration test)."""

from __future__ import annotations

import subprocess
import sys


def test_python_m_glm5lib_config_runs():
    done = subprocess.run(
        [sys.executable, "-c", "from glm5lib.engines.sglang.config import ServerConfig as S; print(S.load('glm5-fix').to_argv())"],
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # the fix on the default release, 0.5.23: CUDA graphs off without the deprecated switch
    assert "'--cuda-graph-backend-decode', 'disabled', '--cuda-graph-backend-prefill', 'disabled'" in done.stdout
    assert "--disable-cuda-graph" not in done.stdout
