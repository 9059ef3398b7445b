"""Per-level latency from requests cut at a duration-bound level's deadline (glm5lib.loadgen.metrics)."""

from __future__ import annotations

import json
import math

import pytest

from glm5lib.loadgen.client import RequestRecord
from glm5lib.loadgen.metrics import level_stats


def _cut(index: int, start: float, first: float, step: float, tokens: int, deadline: float) -> RequestRecord:
    """A request that streamed one token per ``step`` s from ``first`` until it was cancelled."""
    rec = RequestRecord(level=4, index=index, start=start, first_token=first, end=deadline, status="cancelled")
    rec.chunk_times = [first + i * step for i in range(tokens)]
    rec.chunk_tokens = list(range(1, tokens + 1))
    rec.output_tokens = tokens
    rec.token_source = "chunk"
    return rec


def test_a_level_with_no_finished_request_still_reports_latency():
    recs = [_cut(i, 0.0, 0.2 + 0.01 * i, 0.05, 40, 3.0) for i in range(4)]
    row = level_stats(recs, concurrency=4, last_issue=0.0, deadline=3.0)
    assert row["completed"] == 0 and row["failed"] == 0 and row["cancelled"] == 4
    assert row["median_ttft_ms"] == pytest.approx(215.0)
    assert row["median_tpot_ms"] == pytest.approx(50.0)
    assert row["median_itl_ms"] == pytest.approx(50.0)
    assert math.isnan(row["median_e2e_latency_ms"])  # no request finished
    assert row["output_throughput"] > 0


def test_tpot_so_far_of_a_cut_request_and_its_record():
    rec = _cut(0, 10.0, 10.5, 0.1, 11, 12.0)
    assert rec.cut_at_deadline and rec.ttft == pytest.approx(0.5)
    assert rec.tpot == pytest.approx(0.1)  # 10 intervals over 10 tokens after the first
    line = json.loads(rec.to_json())
    assert line["cut_at_deadline"] is True
    assert line["ttft"] == pytest.approx(0.5) and line["tpot"] == pytest.approx(0.1)


def test_no_tpot_without_a_server_count_or_from_a_failed_request():
    rec = _cut(0, 0.0, 0.5, 0.1, 5, 2.0)
    rec.chunk_tokens = [None] * 5  # usage only at the end, which a cut request never gets
    assert rec.tpot is None and rec.ttft == pytest.approx(0.5)
    failed = _cut(1, 0.0, 0.5, 0.1, 5, 2.0)
    failed.status = "error"
    assert failed.tpot is None and not failed.cut_at_deadline
    one = _cut(2, 0.0, 0.5, 0.1, 1, 2.0)
    assert one.tpot is None


def test_finished_requests_keep_bench_servings_tpot():
    rec = RequestRecord(level=1, index=0, start=0.0, first_token=0.1, end=1.1, status="ok", output_tokens=11)
    assert rec.tpot == pytest.approx(0.1) and not rec.cut_at_deadline


def test_duration_bound_sweep_on_the_stand_in_reports_latency_of_cut_requests(tmp_path):
    from glm5lib.loadgen import run_sweep
    from glm5lib.server import run_standin

    with run_standin("--max-running-requests", "64", log_path=tmp_path / "server.log") as srv:
        df = run_sweep(srv.base_url, [8], input_len=32, output_len=4000, duration=2.0, warmup=0,
                       run_dir=tmp_path, progress=False)
    row = df.iloc[0]
    assert row["completed"] == 0 and row["cancelled"] == 8
    assert row["median_ttft_ms"] > 0 and row["median_tpot_ms"] > 0
    recs = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 8 and all(r["cut_at_deadline"] for r in recs)
    streamed = [r for r in recs if len(r["chunk_times"]) > 1]
    assert streamed and all(r["tpot"] > 0 for r in streamed)
