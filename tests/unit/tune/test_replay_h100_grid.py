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
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from glm5lib import rundir, tune
from glm5lib.engines.sglang.config import ServerConfig

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h100-sglang-next"
GRID = pd.read_csv(EXAMPLE / "grid" / rundir.TUNE_CSV).sort_values("value")
STEADY = GRID[GRID["value"] <= 192]
INTERPOLATED = ("output_throughput", "median_tpot_ms", "median_itl_ms", "median_ttft_ms")
LEVER = "max_running_requests"
WORKLOAD = tune.Workload(256, 256, 256, 20.0, warmup=4, sweep_options={"range_ratio": 0.5})


def _sweep(phase: str) -> pd.DataFrame:
    return pd.read_csv(EXAMPLE / "grid" / phase / rundir.SWEEP)


def _nearest(value: float) -> pd.Series:
    x = np.log(STEADY["value"].astype(float).to_numpy())
    return STEADY.iloc[int(np.argmin(abs(x - np.log(value))))]


def _at(value: float) -> pd.DataFrame:
    """The grid's level at ``value``: linear in log(value) between the steady grid points."""
    x = np.log(STEADY["value"].astype(float).to_numpy())
    row = _sweep(_nearest(value)["phase"]).iloc[[-1]].copy()
    for column in INTERPOLATED:
        ys = [_sweep(p).iloc[-1][column] for p in STEADY["phase"]]
        row[column] = float(np.interp(np.log(value), x, np.asarray(ys, dtype=float)))
    return row


def _replay(run_dir: Path, launches: list[float]):
    def measure(changes, phase, extra_levels=()):
        value = float(changes[LEVER])
        launches.append(value)
        folder = run_dir / phase
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name in (rundir.SERVER_LOG, rundir.CONFIG, "server_info.json"):
            src = EXAMPLE / "grid" / _nearest(value)["phase"] / name
            if src.exists():
                shutil.copy(src, folder / name)
        _at(value).to_csv(folder / rundir.SWEEP, index=False)
        return folder

    return measure


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
    goal = tune.Goal.parse([f"median_tpot_ms<={limit:g}"])
    launches: list[float] = []
    result = tune.tune(base, tmp_path, goal, WORKLOAD, backend="sglang", max_launches=4,
                       levers=[f"{LEVER}=64:256"], measure=_replay(tmp_path, launches))
    shown = result.candidates[["value", "objective", "median_tpot_ms", "slo_met"]]
    assert launches[0] == 64 and len(launches) == result.launches <= 4, launches
    assert result.best is not None, shown
    picked = float(result.best["changes"][LEVER])
    met = STEADY[STEADY["median_tpot_ms"] <= limit]
    best = float(met["output_throughput"].max())
    assert float(_at(picked)["output_throughput"].iloc[0]) >= 0.95 * best, (picked, best, shown)
    assert float(_at(picked)["median_tpot_ms"].iloc[0]) <= limit, shown
