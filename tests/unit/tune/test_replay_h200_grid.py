"""The tuner's search replayed on the grid real SGLang 0.5.16 measured on one H200
(``data/examples/h200-sglang/grid/``: ``max_running_requests`` 64-192 at 256 concurrent requests
of 256 + 256 tokens, 25-s levels).

Each candidate the tuner launches is answered with the recorded grid's level at that value
(throughput and latencies linear in log(value) between neighbouring grid points) and the nearest
point's own server log, config and server info, so the evidence the tuner reads is the engine's.
No process is started. Under a median TPOT of at most 8 to 15 ms (the grid's best meeting point is
cap 96, 11,189 tok/s at 7.9 ms, under 8 ms, and cap 128, 14,076 tok/s at 8.7 ms, above) the search
must reach 95% of it in at most 4 launches, starting from the capped baseline's 64.

With fixed output lengths in a closed loop the running batch comes in cohorts (under cap 160, 160
then 96), so caps between half the load and the load run fewer on average than 128 does, and
throughput is not monotone in the cap; output lengths drawn over a range (``range_ratio``) break the
cohorts, and the grid was not recorded that way. A search that took throughput to rise with the cap
settled above 128 at 89-90% of the grid's best under 11-12 ms. The tuner now reads every candidate it measured through the performance
model (its levels; a level whose batch swung is no anchor) and measures where the model cannot
forecast, so it reaches the grid's best at 11-15 ms as at 9-10.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from grid_replay import GridReplay

from glm5lib import rundir, tune
from glm5lib.engines.sglang.config import ServerConfig

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h200-sglang"
GRID = pd.read_csv(EXAMPLE / "grid" / rundir.TUNE_CSV).sort_values("value")
LEVER = "max_running_requests"
REPLAY = GridReplay(EXAMPLE / "grid", GRID, LEVER)


def test_the_grid_is_the_one_recorded():
    assert list(GRID["value"]) == [64, 96, 128, 160, 192]
    for _, point in GRID.iterrows():
        assert REPLAY.figure(point["value"]) == pytest.approx(point["output_throughput"])


@pytest.mark.parametrize("limit", [8.0, 9.0, 10.0, 11.0, 12.0, 15.0])
def test_the_search_reaches_95_percent_of_the_gpu_grids_best_in_four_launches(tmp_path, limit):
    base = ServerConfig.load(EXAMPLE / "capped-config.json")
    REPLAY.check_search(tmp_path, base, tune.Workload(256, 256, 256, 25.0, warmup=4), limit, low=64, high=256)
