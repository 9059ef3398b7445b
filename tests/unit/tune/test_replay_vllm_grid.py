"""The tuner's search replayed on the landscape real vLLM measured (``tests/fixtures/tune/vllm-grid/``).

The live test (``tests/integration/test_tune_vllm.py``) runs the tuner on real vLLM, where
launches of one configuration differ by 15-30% even with the engine and the client on their own
cores (in an earlier recording, the point at 24 read 2,213 then 2,650 tok/s; at 32, 3,406 then
2,840): what the tuner reaches there is the search's quality plus that draw. Here the draw is taken
out: each candidate the tuner launches is answered with the recorded grid's level at that value
(throughput and latencies linear in log(value) between the two neighbouring grid points, the scale
the live test judges on), so the search itself must reach the issue's bar, 95% of the grid's best
limit-meeting point, in at most 4 launches: with the defaults, and with the margin a noisy host
asks for. No process is started.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from grid_replay import GridReplay

from glm5lib import rundir, tune
from glm5lib.engines import vllm as ev

FIXTURE = Path(__file__).parents[2] / "fixtures" / "tune" / "vllm-grid"
META = json.loads((FIXTURE / "meta.json").read_text())
GRID = pd.read_csv(FIXTURE / rundir.TUNE_CSV)
GRID = GRID[GRID["kind"] == "grid"].sort_values("value")
REPLAY = GridReplay(FIXTURE, GRID, META["lever"], evidence=())


def _grid_best() -> float:
    met = GRID[GRID["slo_met"].astype(bool)]
    return float(met["objective"].max())


def test_the_replay_answers_with_the_grids_own_points_and_between_them():
    for _, point in GRID.iterrows():
        assert REPLAY.figure(point["value"]) == pytest.approx(point["output_throughput"])
    lo, hi = GRID.iloc[4], GRID.iloc[5]  # 16 and 24
    between = REPLAY.figure(float(np.sqrt(lo["value"] * hi["value"])))
    assert between == pytest.approx((lo["output_throughput"] + hi["output_throughput"]) / 2)


@pytest.mark.parametrize("margin, noise", [(0.15, 0.1), (0.03, 0.03)])
def test_the_search_reaches_95_percent_of_the_recorded_grids_best_in_four_launches(tmp_path, margin, noise):
    base = ev.VllmConfig.load(META["config"])
    workload = tune.Workload(META["concurrency"], META["input_len"], META["output_len"], META["duration"],
                             api="completions", warmup=META.get("warmup", 2), sweep_options={"token_ids": False})
    goal = tune.Goal.parse(META["slo"])
    launches: list[float] = []
    measure = REPLAY.measure(tmp_path, launches)
    top = max(META["values"])
    measure({META["lever"]: top}, "first")  # the live test's first launch: the configuration as given
    space = f"{META['lever']}={min(META['values'])}:{top}"
    result = tune.tune(base, tmp_path, goal, workload, backend="vllm", max_launches=3, levers=[space],
                       evidence_phase="first", noise=noise, margin=margin, measure=measure)
    assert len(launches) == 1 + result.launches <= 4, launches
    assert result.best is not None, result.candidates
    picked = float(result.best["changes"][META["lever"]])
    reached = REPLAY.figure(picked)
    shown = result.candidates[["value", "objective", "median_tpot_ms", "slo_met"]]
    assert reached >= 0.95 * _grid_best(), (picked, reached, _grid_best(), shown)
    assert REPLAY.figure(picked, "median_tpot_ms") <= goal.limits[0].value, shown
