"""A level's batch read over the time each decode line stands for (glm5lib.diagnose.linetime)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from glm5lib.diagnose.linetime import line_seconds, running_quantile, weighted_quantile


def _lines(rows, source="log"):
    return pd.DataFrame([{"running_req": r, "gen_throughput": g, "source": source} for r, g in rows])


def test_step_paced_lines_weigh_by_the_seconds_they_stand_for():
    # six lines of a batch of 1,000 at 40 k tok/s (25 ms a step) and eight of a lone straggler at
    # 400 tok/s (2.5 ms a step): the straggler wrote more lines but stood for a tenth of the time
    lines = _lines([(1000, 40000.0)] * 6 + [(1, 400.0)] * 8)
    w = line_seconds(lines, per_steps=True)
    assert w[0] / w[-1] == pytest.approx(10.0)
    assert running_quantile(lines, 0.5, per_steps=True) == 1000
    assert running_quantile(lines, 0.05, per_steps=True) == 1
    assert float(lines["running_req"].median()) == 1  # what a median over lines says


def test_clock_paced_lines_and_gauges_weigh_alike():
    lines = _lines([(64, 8000.0), (4, 500.0), (64, 8000.0), (4, 500.0)])
    # an engine whose lines come every so many seconds: the plain quantile, interpolated
    assert running_quantile(lines, 0.5, per_steps=False) == pytest.approx(34.0)
    gauges = _lines([(64, 8000.0), (4, 500.0), (4, 500.0)], source="metrics")
    assert list(line_seconds(gauges, per_steps=True)) == [1.0, 1.0, 1.0]


def test_lines_without_a_rate_take_the_others_median_weight():
    lines = _lines([(100, 10000.0), (100, float("nan")), (50, 0.0)])
    w = line_seconds(lines, per_steps=True)
    assert w[1] == pytest.approx(w[0]) and w[2] == pytest.approx(w[0])


def test_weighted_quantile_drops_what_is_not_a_number():
    assert weighted_quantile([1.0, math.nan, 3.0], [1.0, 5.0, 3.0], 0.5) == 3.0
    assert math.isnan(weighted_quantile([math.nan], [1.0], 0.5))
