"""The machine-noise benchmark's arithmetic (a short run on a real core: tests/integration/)."""

from __future__ import annotations

import math

import numpy as np
import pytest


@pytest.fixture(scope="module")
def bench(load_benchmark):
    return load_benchmark("bench_machine_noise")


def test_a_steady_host_reads_no_noise_and_a_slow_stretch_reads_as_drift(bench):
    steady = {0: np.full(30, 100.0)}
    table = bench.summarise(steady, 2.0, [6.0]).iloc[0]
    assert table["cv"] == 0 and table["cv_6s"] == 0 and table["resolves_6s"] == 0 and table["drift"] == 0
    # the last third 20% slower: drift -20%, and 6-s blocks (3 windows) still tell the two apart
    slowing = {0: np.r_[np.full(20, 100.0), np.full(10, 80.0)]}
    row = bench.summarise(slowing, 2.0, [6.0]).iloc[0]
    assert row["drift"] == pytest.approx(-0.2) and row["max_over_min"] == pytest.approx(1.25)
    assert row["cv_6s"] > 0 and row["resolves_6s"] == pytest.approx(2 * math.sqrt(2) * row["cv_6s"])


def test_blocks_average_the_windows_so_alternating_windows_cancel(bench):
    alternating = np.tile([90.0, 110.0], 15)
    assert bench.block_cv(alternating, 1.0, 1.0) == pytest.approx(np.std(alternating, ddof=1) / 100.0)
    assert bench.block_cv(alternating, 1.0, 2.0) == pytest.approx(0.0)
    # fewer than three blocks: no estimate rather than one from two numbers
    assert math.isnan(bench.block_cv(alternating, 1.0, 12.0))


def test_cores_that_move_together_correlate_and_opposite_ones_do_not(bench):
    a = np.array([1.0, 2.0, 3.0, 2.0, 1.0])
    [(i, j, same)] = bench.correlations({0: a, 1: 2 * a})
    [(_, _, opposite)] = bench.correlations({0: a, 1: -a})
    assert (i, j) == (0, 1) and same == pytest.approx(1.0) and opposite == pytest.approx(-1.0)
