"""The forecast that cannot be given, and the one launch that settles it, on the stand-in.

A baseline at the shipped cap (64, CUDA graphs on) is measured on the stand-in at two levels; the
model fitted on it alone cannot forecast the workbook's fix (cap 1,024, graphs and radix cache off)
because no step of the baseline ran eagerly, and says which measurement would settle it: the
engine's offline step benchmark with graphs off. ``stepbench.settle_forecast`` takes it (the
stand-in's ``bench_one_batch``, a subprocess that prints SGLang's format and says it is the
stand-in), the model reads it beside the phase, and the forecast is given; the fix is then measured.

The stand-in's benchmark and its server run the same step formula, so how close the forecast comes
here checks the plumbing (the benchmark's command, its output read, the profile read against the
phase's levels), not the model: the model is judged on real engines (tests/unit/diagnose/
test_model_recorded.py, tests/integration/test_vllm_predict.py).
"""

from __future__ import annotations

import pandas as pd
import pytest

from glm5lib import phase, rundir, stepbench
from glm5lib.diagnose import prediction
from glm5lib.diagnose.model import PerfModel
from glm5lib.engines.sglang.config import ServerConfig

pytestmark = [pytest.mark.slow]

STORY = {"max_running_requests": 1024, "disable_cuda_graph": True, "disable_radix_cache": True}
WORKLOAD = {"input_len": 64, "output_len": 128, "warmup": 2, "progress": False, "gpu": False, "metrics": False}


@pytest.mark.timeout(600)
def test_a_step_profile_settles_the_graphs_off_forecast_before_the_fix_is_launched(tmp_path):
    base = ServerConfig.load("glm5-baseline")
    phase.measure_phase(base, tmp_path, "baseline", backend="sim", ready_timeout=120, concurrencies=[1, 64],
                        duration=8.0, **WORKLOAD)
    [blind] = PerfModel.fit_phase(tmp_path / "baseline").forecast(STORY, [1024])
    assert not blind.given and blind.measurement == {"kind": "step_profile", "batches": [1024], "graphs_off": True}
    assert "python -m glm5lib.sim.bench" in blind.needs and "--batch-size 1024" in blind.needs
    # graphs off in the spelling of the release the config names (0.5.23 spells it per backend)
    assert "--disable-cuda-graph" in blind.needs or "--cuda-graph-backend-decode disabled" in blind.needs

    model, [f], taken = stepbench.settle_forecast(tmp_path, "baseline", STORY, [1024])
    assert taken == tmp_path / "baseline" / rundir.STEP_PROFILE
    profile = pd.read_csv(taken)
    assert {1, 64, 1024} <= set(profile["batch"]) and not profile["graphs"].astype(bool).any()
    assert "stand-in" in (tmp_path / "baseline" / rundir.STEP_PROFILE_LOG).read_text()
    assert f.given and f.eager and any("step profile" in s for s in f.sources), model.describe()

    phase.measure_phase(base.with_changes(**STORY), tmp_path, "fix", backend="sim", ready_timeout=120,
                        concurrencies=[1024], duration=20.0, **WORKLOAD)
    row = prediction.record_prediction(tmp_path, STORY).set_index("concurrency").loc[1024]
    assert row["predicted"] == pytest.approx(f.predicted_tok_s) and bool(row["given"])
    assert bool(row["inside_band"]), row
    # a second call finds the profile and launches nothing more
    _, _, again = stepbench.settle_forecast(tmp_path, "baseline", STORY, [1024])
    assert again is None
