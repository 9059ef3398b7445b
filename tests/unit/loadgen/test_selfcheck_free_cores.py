"""The client self-check judges a lagging client against the host's free cores (the H200 run's
false alarm: 16 cores, 80% idle, 'the client was starved of CPU')."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from glm5lib.loadgen.selfcheck import client_limited, free_cores, judge_levels

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h200-sglang"


@pytest.mark.parametrize("cpu, lag, itl, spare, p50, bound", [
    (44.0, 13.9, 5.3, 12.8, 0.6, False),   # H200 host, 256 streams: bursts, not starvation
    (44.0, 13.9, 5.3, 12.8, 6.0, True),    # the loop late by a whole interval at the median: the limit
    (25.0, 90.0, 73.0, 0.3, 1.0, True),    # two busy cores: starved all the same
    (25.0, 90.0, 73.0, None, None, True),  # host unknown: judged as before
    (95.0, 60.0, 73.0, 12.0, 1.0, True),   # a saturated core is the limit whatever the host has free
])
def test_lag_is_judged_against_free_cores(cpu, lag, itl, spare, p50, bound):
    assert client_limited(cpu, lag, itl, spare, p50)[0] is bound


def test_free_cores():
    assert free_cores(16, 20.0) == pytest.approx(12.8)
    assert free_cores(2, 100.0) == 0.0
    assert pd.isna(free_cores(None, 10.0))


def test_the_recorded_h200_levels_are_judged_again():
    sweep = pd.read_csv(EXAMPLE / "grid" / "grid-1" / "sweep.csv")
    assert bool(sweep["client_bound"].iloc[0])  # as recorded, before the host's free cores counted
    assert not judge_levels(sweep)["client_bound"].astype(bool).any()
