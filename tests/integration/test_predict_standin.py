"""The performance model forecasts its own stand-in: the workbook's story, cap 64 -> 1,024.

A baseline at the shipped cap (64) is measured on the stand-in at two levels; the model fitted on
it alone forecasts the fix (cap 1,024, CUDA graphs and radix cache off) at 1,024 concurrent
requests; the fix is then measured there. Short levels (64-token prompts, 128-token outputs)
keep it near a minute; each level's steady window is decode, as in the workbook's own levels.
"""

from __future__ import annotations

import pytest

from glm5lib import phase
from glm5lib.diagnose import prediction
from glm5lib.engines.sglang.config import ServerConfig

pytestmark = [pytest.mark.slow]

STORY = {"max_running_requests": 1024, "disable_cuda_graph": True, "disable_radix_cache": True}
WORKLOAD = {"input_len": 64, "output_len": 128, "warmup": 2, "progress": False, "gpu": False, "metrics": False}


@pytest.mark.timeout(600)
def test_the_baseline_model_forecasts_the_stand_ins_story_within_10_percent(tmp_path):
    base = ServerConfig.load("glm5-baseline")
    phase.measure_phase(base, tmp_path, "baseline", backend="sim", ready_timeout=120, concurrencies=[1, 64],
                        duration=8.0, **WORKLOAD)
    # stated before the fix is launched
    _, forecast = prediction.forecast_hypothesis(tmp_path, STORY, [1024])
    [before] = forecast.to_dict(orient="records")
    assert before["running"] == 1024 and before["binding_limit"] == "load" and before["extrapolated"]
    assert "disable_cuda_graph=True" in before["unseen_changes"]
    phase.measure_phase(base.with_changes(**STORY), tmp_path, "fix", backend="sim", ready_timeout=120,
                        concurrencies=[1024], duration=20.0, **WORKLOAD)
    frame = prediction.record_prediction(tmp_path, STORY)
    row = frame.set_index("concurrency").loc[1024]
    assert row["predicted"] == pytest.approx(before["predicted_tok_s"])
    assert abs(row["error"]) <= 0.10, f"forecast {row['predicted']:.0f} tok/s, measured {row['measured']:.0f}"
    assert bool(row["inside_band"])
    assert (tmp_path / "fix" / "prediction.csv").is_file()
