"""A step benchmark that fails keeps what an earlier one measured, and says why it failed.

Run for real: the SGLang phase of data/examples/h100-sglang-next asks for its engine's benchmark
in an interpreter without SGLang, so the subprocess starts and fails at its import.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from glm5lib import rundir, stepbench
from glm5lib.errors import ServerLaunchError

EXAMPLES = Path(__file__).resolve().parents[2] / "data" / "examples"


def test_a_benchmark_that_cannot_start_keeps_the_earlier_profiles_output(tmp_path):
    """The earlier profile's log and rows stay: a failed take appends its own output and says why
    (here: SGLang is not installed in the interpreter given), and a later take keeps the batches
    it did not measure again."""
    run = tmp_path / "run"
    shutil.copytree(EXAMPLES / "h100-sglang-next" / "baseline", run / "baseline")
    before = (run / "baseline" / rundir.STEP_PROFILE_LOG).read_text()
    with pytest.raises(ServerLaunchError) as err:
        stepbench.take_step_profile(run, "baseline", [1024], python=sys.executable, timeout=120)
    assert err.value.cause == "not_installed" and "No module named" in str(err.value)
    after = (run / "baseline" / rundir.STEP_PROFILE_LOG).read_text()
    assert after.startswith(before) and "--batch-size" in after[len(before):]
    old = pd.read_csv(run / "baseline" / rundir.STEP_PROFILE)
    new = old[old["batch"] == 64].assign(step_ms=1.0)
    merged = stepbench._merged(run / "baseline" / rundir.STEP_PROFILE, new)
    assert sorted(merged["batch"]) == sorted(old["batch"])
    assert float(merged.loc[merged["batch"] == 64, "step_ms"].iloc[0]) == 1.0
