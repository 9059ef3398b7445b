"""Per-level latency from requests cut at a duration-bound level's deadline (glm5lib.loadgen.metrics)."""

from __future__ import annotations

import json
import math

import numpy as np
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
    from glm5lib.engines.sim import run_standin
    from glm5lib.loadgen import run_sweep

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
    # the figures the sweep read back from the file are those of the records held in memory
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    exact = _exact_stats([RequestRecord.from_json(line) for line in lines], 8, None)
    for key in [f"{s}_{m}_ms" for m in ("ttft", "itl", "tpot") for s in ("mean", "median", "p90", "p99")]:
        assert row[key] == pytest.approx(exact[key], rel=1e-12), key


# ------------------------------------------------------------------ streaming against exact
# The figures as they were computed with every record of the level in memory (the reference the
# two-pass, re-read computation must reproduce).


def _exact_window(records, concurrency, last_issue, deadline, closed):
    starts = [r.start for r in records if r.start is not None]
    ends = [r.end for r in records if r.end is not None]
    level_start = min(starts) if starts else 0.0
    level_end = max(ends) if ends else level_start
    if not any(r.first_token is not None for r in records):
        return level_start, level_end
    candidates = []
    issued = sorted((r for r in records if r.start is not None), key=lambda r: r.start)
    first = [r for r in issued[:concurrency] if not (r.status == "error" and r.first_token is None)]
    if first and all(r.first_token is not None for r in first):
        candidates.append(max(r.first_token for r in first))
    events = sorted([(r.first_token, 1) for r in records if r.first_token is not None]
                    + [(r.end, -1) for r in records if r.first_token is not None and r.end is not None])
    count = peak = 0
    for t, step in events:
        count += step
        if count > peak:
            peak, at = count, t
    if peak:
        candidates.append(at)
    done = sorted(r.end for r in records if r.status == "ok" and r.end is not None)
    if not closed and done:
        candidates.append(done[0])
    ws = min(candidates)
    cancelled = [r.end for r in records if r.status == "cancelled" and r.end is not None]
    if cancelled:
        we = min(cancelled) if deadline is None else min(deadline, min(cancelled))
    else:
        ends_at = [t for t in (last_issue, done[0] if done else None) if t is not None]
        we = max(ends_at) if ends_at else level_end
    we = min(we, level_end)
    if closed:  # back to the last time the streaming count climbed back to (95% of) its level at ws
        level = sum(step for t, step in events if t <= ws)
        near, count, back = level - int(0.05 * level), level, None
        running = [sum(step for _, step in events[:k + 1]) for k in range(len(events))]
        if level < max(running) - int(0.05 * max(running)):  # under its peak at the start: not in step
            near = None
        for t, step in events:
            if near is not None and ws < t <= we and count < near <= count + step:
                back = t
            count += step if t > ws else 0
        ok = [r.end - r.start for r in records if r.status == "ok" and r.end is not None]
        cycle = float(np.median(ok)) if ok else float("inf")
        we = back if back is not None and 0 < we - back <= cycle else we
    arrivals = [t for r in records for t in r.chunk_times if ws < t <= we]
    if arrivals:
        we = max(arrivals)
    return (level_start, level_end) if we <= ws else (ws, we)


def _exact_stats(records, concurrency, last_issue, deadline=None, closed=True):
    ok = [r for r in records if r.status == "ok"]
    ws, we = _exact_window(records, concurrency, last_issue, deadline, closed)
    out = {"completed": len(ok), "failed": sum(r.status == "error" for r in records),
           "cancelled": sum(r.status == "cancelled" for r in records),
           "total_input_tokens": sum(r.prompt_tokens or 0 for r in ok),
           "total_output_tokens": sum(r.output_tokens or 0 for r in ok),
           "window_start": ws, "window_end": we}
    tokens = 0.0
    for r in records:
        known = r.chunk_tokens and all(t is not None for t in r.chunk_tokens)
        steps = (np.diff([0, *r.chunk_tokens]) if known
                 else [(r.output_tokens or 0) / max(len(r.chunk_times), 1)] * len(r.chunk_times))
        tokens += sum(s for t, s in zip(r.chunk_times, steps, strict=True) if ws < t <= we)
    span = we - ws
    out["output_throughput"] = tokens / span
    out["input_throughput"] = sum(r.prompt_tokens or 0 for r in records
                                  if r.first_token is not None and ws < r.first_token <= we) / span
    out["request_throughput"] = sum(1 for r in ok if ws < r.end <= we) / span
    out["mean_concurrency"] = sum(max(0.0, min(r.end, we) - max(r.start, ws)) for r in records) / span
    streamed = [r for r in records if r.status in ("ok", "cancelled")]
    series = {
        "ttft": [r.ttft for r in streamed if r.ttft is not None],
        "tpot": [r.tpot for r in streamed if r.tpot is not None],
        "itl": [b - a for r in streamed for a, b in zip(r.chunk_times, r.chunk_times[1:], strict=False)],
        "e2e_latency": [r.end - r.start for r in ok],
    }
    for name, values in series.items():
        arr = np.asarray(values) * 1000.0
        if not arr.size:
            continue
        out[f"mean_{name}_ms"], out[f"median_{name}_ms"] = arr.mean(), np.median(arr)
        out[f"p90_{name}_ms"], out[f"p99_{name}_ms"] = np.percentile(arr, 90), np.percentile(arr, 99)
    return out


def _recorded_set(seed=7, n=600, concurrency=64):
    """A level as a sweep records it: streams in decode steps, some finished, some failed (with
    and without tokens, some with usage only at the end), the rest cut at the deadline."""
    rng = np.random.default_rng(seed)
    recs, deadline = [], 30.0
    for i in range(n):
        start = float(rng.uniform(0, 25)) if i >= concurrency else 0.001 * i
        first = start + float(rng.uniform(0.05, 0.5))
        steps = int(rng.integers(2, 80))
        times = [first + k * 0.02 + float(rng.uniform(0, 0.004)) for k in range(steps)]
        status = rng.choice(["ok", "ok", "ok", "cancelled", "error"])
        times = [t for t in times if t < deadline]
        rec = RequestRecord(level=concurrency, index=i, start=start, status=str(status), prompt_tokens=16)
        if status == "error" and i % 2:
            times = []
            rec.error = "HTTP 503: busy" if i % 3 else "disconnected after 0 chunks"
        elif status == "error":
            rec.error = "timeout after some chunks"
        rec.chunk_times = times
        rec.first_token = times[0] if times else None
        usage_at_end = i % 7 == 0
        rec.chunk_tokens = [None] * len(times) if usage_at_end else [2 * (k + 1) for k in range(len(times))]
        rec.output_tokens = 2 * len(times) if times else None
        rec.token_source = ("final_usage" if usage_at_end else "chunk") if times else "none"
        rec.end = deadline + 0.001 if status == "cancelled" else (times[-1] if times else start + 0.01)
        recs.append(rec)
    return recs, deadline


@pytest.mark.parametrize("cut", [True, False])
def test_streamed_level_stats_equal_the_exact_ones_on_a_recorded_set(tmp_path, cut):
    recs, deadline = _recorded_set()
    if not cut:  # a count-bound level: nothing cancelled, the window ends at the last issue
        for r in recs:
            r.status = "ok" if r.status == "cancelled" else r.status
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(r.to_json() + "\n" for r in recs))
    reads = []

    def again():  # as a sweep reads its level back from requests.jsonl
        reads.append(1)
        with path.open() as lines:
            yield from (RequestRecord.from_json(line) for line in lines)

    kw = {"concurrency": 64, "last_issue": 25.0, "deadline": deadline if cut else None}
    streamed = level_stats(again, **kw)
    assert len(reads) == 2  # two passes over the file; no list of the records was kept
    assert streamed == level_stats(recs, **kw)  # from the file as from memory, to the last bit
    exact = _exact_stats(recs, **kw)
    assert streamed["window_note"].startswith("steady")
    assert streamed["failed"] > 0 and streamed["completed"] > 0 and (streamed["cancelled"] > 0) == cut
    for key, value in exact.items():
        assert streamed[key] == pytest.approx(value, rel=1e-12), key
    assert "x HTTP 503: busy" in streamed["error_summary"]
    assert streamed["token_source"] == "mixed"


def test_tpot_is_never_zero_because_tokens_came_in_a_burst():
    # cut at the deadline after one burst of 8 tokens: no interval to measure, not 0 ms per token
    burst = _cut(0, 0.0, 1.0, 0.0, 1, 2.0)
    burst.chunk_tokens = [8]
    assert burst.tpot is None
    # two chunks of 1 and 9 tokens, 0.9 s apart: 0.1 s for each of the 9 tokens after the first chunk
    two = _cut(1, 0.0, 1.0, 0.9, 2, 2.0)
    two.chunk_tokens = [1, 10]
    assert two.tpot == pytest.approx(0.1)
    # a first chunk of 5 tokens then 5 more over 1 s: 0.2 s each, not (1 s / 9)
    late = RequestRecord(level=1, index=0, start=0.0, first_token=1.0, end=2.0, status="ok", output_tokens=10,
                         chunk_times=[1.0, 2.0], chunk_tokens=[5, 10], token_source="chunk")
    assert late.tpot == pytest.approx(0.2)
    # a finished request whose whole output came in one chunk (usage only at the end)
    whole = RequestRecord(level=1, index=1, start=0.0, first_token=1.0, end=1.0, status="ok", output_tokens=64,
                          chunk_times=[1.0], chunk_tokens=[None], token_source="final_usage")
    assert whole.tpot is None
    # a level of burst-cut requests beside measurable ones: the median is the measurable ones', not 0
    recs = [_cut(i, 0.0, 0.5, 0.05, 20, 2.0) for i in range(3)]
    for i in range(3, 9):
        cut = _cut(i, 0.0, 1.9, 0.0, 1, 2.0)
        cut.chunk_tokens = [6]
        recs.append(cut)
    row = level_stats(recs, concurrency=9, last_issue=0.0, deadline=2.0)
    assert row["median_tpot_ms"] == pytest.approx(50.0)
