"""The tuner's search replayed on the grid real SGLang 0.5.16 measured on one H100
(``data/examples/h100-sglang-next/grid/``: ``max_running_requests`` 64-256 at 256 concurrent
requests of 256 input tokens and 128-256 output tokens drawn over a range, 20-s levels), and the
live search of the same sitting (``tune/``) judged against it.

Output lengths drawn over a range break the cohorts a closed loop of equal requests forms, so every
cap up to 192 held its batch and throughput rose with the cap (6,845 tok/s at 64 to 12,825 at 192;
cap 256 swung between 81 and 256 running and is no anchor). Median TPOT rose with it, 9.4 ms at 64
to 14.3 at 192: under 10 ms only cap 64 of the grid meets the limit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from grid_replay import GridReplay

from glm5lib import rundir, tune
from glm5lib.engines.sglang.config import ServerConfig

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h100-sglang-next"
GRID = pd.read_csv(EXAMPLE / "grid" / rundir.TUNE_CSV).sort_values("value")
STEADY = GRID[GRID["value"] <= 192]
LEVER = "max_running_requests"
REPLAY = GridReplay(EXAMPLE / "grid", STEADY, LEVER)
WORKLOAD = tune.Workload(256, 256, 256, 20.0, warmup=4, sweep_options={"range_ratio": 0.5})


def test_the_grid_is_the_one_recorded_and_its_steady_points_rise_with_the_cap():
    assert list(GRID["value"]) == [64, 96, 128, 160, 192, 256]
    assert STEADY["output_throughput"].is_monotonic_increasing
    assert STEADY["median_tpot_ms"].is_monotonic_increasing
    assert list(GRID.loc[GRID["median_tpot_ms"] <= 10, "value"]) == [64]


def test_the_live_search_beat_the_grids_best_under_the_limit_in_two_launches_and_held_on_recheck():
    """The sitting's own ``glm5 tune``: from cap 64, one forecast launch (cap 71, 7,457 tok/s at
    9.7 ms forecast; 7,329 at 9.6 measured), then the recheck (7,389 at 9.7 ms); the grid's best
    under 10 ms is cap 64 at 6,845."""
    result = json.loads((EXAMPLE / "tune" / "tune-result.json").read_text())
    best_in_grid = float(GRID.loc[GRID["median_tpot_ms"] <= 10, "output_throughput"].max())
    assert result["launches"] <= 4
    assert result["recheck"]["slo_met"] and result["recheck"]["median_tpot_ms"] <= 10
    assert result["recheck"]["output_throughput"] >= 0.95 * best_in_grid
    row = pd.read_csv(EXAMPLE / "tune" / rundir.TUNE_CSV).set_index("phase").loc["tune-2"]
    assert abs(row["predicted_objective"] / row["objective"] - 1) < 0.05


@pytest.mark.parametrize("limit", [10.0, 11.0, 12.0, 13.0, 15.0])
def test_the_search_reaches_95_percent_of_the_h100_grids_best_in_four_launches(tmp_path, limit):
    base = ServerConfig.load(EXAMPLE / "capped-config.json")
    REPLAY.check_search(tmp_path, base, WORKLOAD, limit, low=64, high=256)
