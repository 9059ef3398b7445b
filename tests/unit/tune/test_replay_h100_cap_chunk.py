"""The tuner on real SGLang 0.5.16 on one H100 where two limits hold at once
(``data/examples/h100-sglang-tune-cap-chunk/``): a running cap of 32 and a 512-token prefill chunk,
128 concurrent requests of 1,024-2,048 prompt and 64-128 output tokens, limit ``median_tpot_ms<=20``.
The live search (``tune/``), the grid measured after it (``grid/``: caps 48-128), the model's forecast
of the grid from the search's first launch alone, and the search replayed on the landscape under
other limits.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from grid_replay import GridReplay

from glm5lib import rundir, tune
from glm5lib.diagnose.model import PerfModel
from glm5lib.engines.sglang.config import ServerConfig
from glm5lib.tune.model import perfmodel_forecaster

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h100-sglang-tune-cap-chunk"
LEVER = "max_running_requests"
TUNE = pd.read_csv(EXAMPLE / "tune" / rundir.TUNE_CSV).set_index("phase")
GRID = pd.read_csv(EXAMPLE / "grid" / rundir.TUNE_CSV).sort_values("value")
# the landscape: the search's first launch (the cap as given) and the grid, each phase a folder of the run
LANDSCAPE = pd.concat([
    pd.DataFrame([{"value": 32, "phase": "tune/tune-1", **TUNE.loc["tune-1", ["output_throughput", "median_tpot_ms"]]}]),
    GRID.assign(phase="grid/" + GRID["phase"])[["value", "phase", "output_throughput", "median_tpot_ms"]],
], ignore_index=True)
REPLAY = GridReplay(EXAMPLE, LANDSCAPE, LEVER)
WORKLOAD = tune.Workload(128, 2048, 128, 20.0, warmup=4, sweep_options={"range_ratio": 0.5})


def test_the_landscape_trades_throughput_for_time_per_token_and_only_the_cap_as_given_meets_20_ms():
    assert list(LANDSCAPE["value"]) == [32, 48, 64, 96, 128]
    assert LANDSCAPE["output_throughput"].is_monotonic_increasing
    assert LANDSCAPE["median_tpot_ms"].is_monotonic_increasing
    assert list(LANDSCAPE.loc[LANDSCAPE["median_tpot_ms"] <= 20, "value"]) == [32]
    # the same configuration launched twice reads the same: lengths drawn over a range break cohorts
    assert TUNE.loc["tune-check", "output_throughput"] == pytest.approx(TUNE.loc["tune-1", "output_throughput"], rel=0.01)
    assert TUNE.loc["tune-2", "output_throughput"] == pytest.approx(float(GRID.set_index("value").loc[64, "output_throughput"]),
                                                                    rel=0.01)


def test_the_live_search_kept_the_cap_as_given_in_two_launches_and_it_held_on_recheck():
    result = json.loads((EXAMPLE / "tune" / rundir.TUNE_RESULT).read_text())
    assert result["launches"] == 2 and result["best"]["changes"] == {LEVER: 32}
    assert "no untried value is forecast to meet the limits better" in result["stopped"]
    assert result["recheck"]["slo_met"] and result["recheck"]["median_tpot_ms"] <= 20


def test_one_launch_forecast_the_grid_it_never_ran():
    """From the cap of 32 alone (its level at 128 and the warm-up level), the model the tuner uses
    forecast each cap of the grid: time per token within 5% up to 4x the batch it saw (+0.2% to +4.2%),
    throughput within 10% (+1.2% to +8.1%)."""
    forecast = perfmodel_forecaster(EXAMPLE / "tune", engine="sglang", concurrency=128, input_len=2048,
                                    output_len=128, metrics=["median_tpot_ms"])
    scale = {k: float(TUNE.loc["tune-1", k]) / forecast("tune-1", {LEVER: 32})[k]
             for k in ("objective", "median_tpot_ms")}  # anchored on the launch, as the tuner reads it
    for _, row in GRID.iterrows():
        f = forecast("tune-1", {LEVER: int(row["value"])})
        assert f["given"]
        assert f["median_tpot_ms"] * scale["median_tpot_ms"] == pytest.approx(row["median_tpot_ms"], rel=0.05)
        assert f["objective"] * scale["objective"] == pytest.approx(row["output_throughput"], rel=0.10)


def test_the_wait_for_a_first_token_beyond_the_one_free_level_is_bounded_by_its_edges():
    """The launch's only level free of the cap's queue is its warm-up (8 running): the TTFT line's
    slope is not in the evidence. At a cap of 128 nothing queues behind the cap, and the measured
    mean TTFT lies between the flat line and the line through that level and zero."""
    model = PerfModel.fit_phase(EXAMPLE / "tune" / "tune-1")
    assert model.ttft_line.anchor is not None and model.ttft_line.per_token_ms == 0.0
    row = pd.read_csv(EXAMPLE / "grid" / "grid-4" / rundir.SWEEP).iloc[-1]
    (f,) = model.forecast({LEVER: 128}, [128], input_len=int(row["mean_prompt_tokens"]), output_len=96)
    assert f.ttft_ms < row["mean_ttft_ms"] < f.ttft_high_ms


@pytest.mark.parametrize("limit", [20.0, 26.0, 32.0, 45.0, 55.0])
def test_the_search_reaches_95_percent_of_the_landscapes_best_in_four_launches(tmp_path, limit):
    base = ServerConfig.load(EXAMPLE / "capped-config.json")
    REPLAY.check_search(tmp_path, base, WORKLOAD, limit, low=32, high=128)
