"""The soak benchmark's short variant: 256 streams for 20 s against the stand-in.

Every request sent is accounted for (completed + failed + cancelled), the client's open file
descriptors come back to where they were, and neither they nor its memory climb while the level
runs (benchmarks/bench_soak.py runs 2,048 streams for 10 minutes and prints the same figures).
"""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def bench_soak(load_benchmark):
    return load_benchmark("bench_soak")


@pytest.fixture(autouse=True)
def _no_leftovers(no_leftover_processes):
    yield


@pytest.mark.slow
def test_soak_short(bench_soak, tmp_path):
    out = bench_soak.soak(256, 20.0, output_len=32, sample_every=1.0, run_dir=tmp_path)
    assert out["completed"] > 256  # the streams turned over, not just one request each
    assert out["failed"] == 0
    assert out["completed"] + out["failed"] + out["cancelled"] == out["sent"]
    assert out["issued"] <= out["sent"]
    assert out["fds_after"] <= out["fds_before"] + 2
    during = [s for s in out["samples"] if s[0] <= out["load_end_s"]]
    assert len(during) >= 10
    rss_mib, fds = bench_soak.second_half_growth(during)
    assert fds <= 2  # 256 connections held open, not one more per request
    # no record is kept in memory (the level's figures are read back from requests.jsonl); a leak
    # per request, chunk or connection would be tens of MiB over this half
    assert rss_mib < 12
