"""The forecast that cannot be given, and the one launch that settles it, on the stand-in.

A baseline at the shipped cap (64, CUDA graphs on) is measured on the stand-in at two levels; the
model fitted on it alone cannot forecast the workbook's fix (cap 1,024, graphs and radix cache off)
because no step of the baseline ran eagerly, and says which measurement would settle it: the
engine's offline step benchmark with graphs off. ``stepbench.settle_forecast`` takes it (the
stand-in's ``bench_one_batch``, a subprocess that prints SGLang's format and says it is the
stand-in), the model reads it beside the phase, and the forecast is given; the fix is then measured.
The same holds for a prefill chunk raised under long prompts: the phase alone cannot split a prefill
forward's cost into its fixed part and its tokens, the benchmark's forwards of two sizes do.

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
from glm5lib.diagnose.model.prefill import read_prefill
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


@pytest.mark.timeout(600)
def test_a_step_profile_prices_a_prefill_chunk_change_before_it_is_launched(tmp_path):
    # long prompts under a narrow chunk: four prefill forwards a prompt, a fixed cost each; outputs shorter
    # than the decode lines' interval (40 steps), so every line spans a prefill and reads slower than the step
    base = ServerConfig.load("glm5-baseline").with_changes(chunked_prefill_size=256)
    wide = {"chunked_prefill_size": 1024}
    load = {**WORKLOAD, "input_len": 1024, "output_len": 32}
    phase.measure_phase(base, tmp_path, "baseline", backend="sim", ready_timeout=120, concurrencies=[1, 8],
                        duration=12.0, **load)
    blind = PerfModel.fit_phase(tmp_path / "baseline").forecast(wide, [1, 8])
    assert not any(f.given for f in blind)
    assert all(f.measurement == {"kind": "step_profile", "batches": [1, 4], "graphs_off": None} for f in blind)
    assert all(f.needs.startswith("the fixed cost of one prefill forward") for f in blind), blind[0].needs

    model, forecasts, taken = stepbench.settle_forecast(tmp_path, "baseline", wide, [1, 8])
    assert taken is not None and model.prefill is not None, model.describe()
    profile = pd.read_csv(taken)
    # a request alone: what its four forwards took, less its tokens, is the stand-in's own fixed part a
    # forward (the benchmark's), read through the offline decode step, not the lines' slower one
    _per_token, offline_fixed, _spread, _source = read_prefill(profile)
    assert model.prefill.fixed_at(1) == pytest.approx(offline_fixed, rel=0.3), model.prefill.describe()
    assert profile["prefill_ms"].notna().sum() >= 2 and {1, 4, 8} <= set(profile["batch"])
    assert all(f.given for f in forecasts), [f.needs for f in forecasts]
    assert all(any("prefill chunk 256 -> 1,024" in s for s in f.sources) for f in forecasts)
    # fewer forwards a prompt: more than the phase's own step gives, and a shorter wait for the first token
    for f, same in zip(forecasts, model.forecast({}, [1, 8]), strict=True):
        assert f.predicted_tok_s > same.predicted_tok_s and f.ttft_ms < same.ttft_ms

    phase.measure_phase(base.with_changes(**wide), tmp_path, "fix", backend="sim", ready_timeout=120,
                        concurrencies=[1, 8], duration=12.0, **load)
    frame = prediction.record_prediction(tmp_path, wide).set_index("concurrency")
    for f in forecasts:
        row = frame.loc[f.concurrency]
        assert row["predicted"] == pytest.approx(f.predicted_tok_s) and bool(row["given"])
        assert bool(row["inside_band"]), (row, model.describe())
