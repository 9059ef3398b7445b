"""Per-level statistics from request records, with bench_serving's field names.

Throughput is measured over a steady-state window (:func:`steady_window`): it starts when the
ramp-up is over (the whole load streaming, or the server's running batch first full) and ends
at the deadline of a duration-bound level whose in-flight requests were cancelled there, or
else where the drain begins (the last request issued). Output tokens are the server-reported
cumulative counts of the chunks that arrived inside the window, so a level shorter than one
request's lifetime still measures the decode rate. Where a server gave only a final usage
count, that count is spread evenly over the request's chunks (``token_source`` says so); chunks
are never taken for tokens. bench_serving's own figure (finished requests' tokens over the
whole level) is kept as ``output_throughput_overall``.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from glm5lib.loadgen.client import RequestRecord

__all__ = ["SWEEP_COLUMNS", "level_stats", "steady_window"]

SWEEP_COLUMNS = [
    "concurrency",
    "max_concurrency",
    "request_rate",
    "mode",
    "completed",
    "failed",
    "cancelled",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "input_throughput",
    "output_throughput",
    "total_throughput",
    "output_throughput_overall",
    "mean_concurrency",
    *[
        f"{stat}_{metric}_ms"
        for metric in ("ttft", "itl", "tpot", "e2e_latency")
        for stat in ("mean", "median", "p90", "p99")
    ],
    "start_time",
    "end_time",
    "window_start",
    "window_end",
    "window_note",
    "token_source",
    "client_cpu_pct",
    "loop_lag_p99_ms",
    "loop_lag_itl_ratio",
    "client_bound",
    "error_summary",
    "api",
    "input_len",
    "output_len",
    "level_id",
]


def _token_steps(rec: RequestRecord) -> tuple[list[float], list[float]]:
    """(times, tokens added at each time) for one request."""
    times = rec.chunk_times
    if not times:
        return [], []
    toks = rec.chunk_tokens
    if toks and toks[-1] is not None and all(t is not None for t in toks):
        steps, prev = [], 0
        for t in toks:
            steps.append(float(t - prev))  # type: ignore[operator]
            prev = t  # type: ignore[assignment]
        return times, steps
    if rec.output_tokens:
        each = rec.output_tokens / len(times)
        return times, [each] * len(times)
    return times, [0.0] * len(times)


def _streaming_peak(records: Sequence[RequestRecord]) -> tuple[float | None, int]:
    """(first time the number of streaming requests reached its peak, the peak).

    A request streams from its first token to its end (finished, failed or cancelled).
    """
    events: list[tuple[float, int]] = []
    for r in records:
        if r.first_token is None:
            continue
        events.append((r.first_token, 1))
        if r.end is not None:
            events.append((r.end, -1))
    if not events:
        return None, 0
    # At equal times an end is counted before a start, so a hand-over is not a peak.
    events.sort(key=lambda e: (e[0], e[1]))
    count = peak = 0
    at: float | None = None
    for t, step in events:
        count += step
        if count > peak:
            peak, at = count, t
    return at, peak


def _last_at_or_before(times: list[float], limit: float) -> list[float]:
    """The last of the (sorted) ``times`` at or before ``limit``, as a list of 0 or 1."""
    i = bisect.bisect_right(times, limit)
    return [times[i - 1]] if i else []


def steady_window(
    records: Sequence[RequestRecord],
    concurrency: int,
    last_issue: float | None,
    *,
    deadline: float | None = None,
    closed: bool = True,
) -> tuple[float, float, str]:
    """Choose the steady-state window of a level: ``(start, end, note)``.

    Start (ramp-up over), the earlier of two signals: every one of the first ``concurrency``
    requests issued has had its first token (the whole load is streaming), and the number of
    requests streaming at once first reached its peak for the level (on a server that admits
    fewer than ``concurrency``, its running batch first filled while the rest wait in its
    queue). An open-loop level starts at the first completion instead when that comes earlier
    (from then on arrivals and departures balance).

    End: where the level was cut at its deadline and in-flight requests were cancelled, the
    deadline (the load was still established up to it); otherwise the start of the drain, the
    moment the last request was issued (from then on the in-flight count only falls), or the
    first completion when that is later (nothing had left before it); the end is then moved
    back to the last token arrival at or before it, and tokens are counted over ``(start,
    end]``, so a short window spans whole decode steps. When this leaves no window, the whole
    level is used and the note says so.
    """
    starts = [r.start for r in records if r.start is not None]
    ends = [r.end for r in records if r.end is not None]
    level_start = min(starts) if starts else 0.0
    level_end = max(ends) if ends else level_start
    if not any(r.first_token is not None for r in records):
        return level_start, level_end, "whole level (no tokens)"

    # -- start
    candidates: list[tuple[float, str]] = []
    issued = sorted((r for r in records if r.start is not None), key=lambda r: r.start)  # type: ignore[arg-type,return-value]
    first = [r for r in issued[:concurrency] if not (r.status == "error" and r.first_token is None)]
    if first and all(r.first_token is not None for r in first):
        candidates.append(
            (max(r.first_token for r in first), f"all first {len(first)} requests streaming")  # type: ignore[type-var]
        )
    peak_at, peak = _streaming_peak(records)
    if peak_at is not None:
        candidates.append((peak_at, f"streaming count first at its peak of {peak}"))
    completions = sorted(r.end for r in records if r.status == "ok" and r.end is not None)
    first_done = completions[0] if completions else None
    if not closed and first_done is not None:
        candidates.append((first_done, "first completion"))
    ws, why_start = min(candidates)

    # -- end
    cancelled = [r.end for r in records if r.status == "cancelled" and r.end is not None]
    if cancelled:
        we = min(cancelled) if deadline is None else min(deadline, min(cancelled))
        why_end = f"deadline, {len(cancelled)} in flight cancelled"
    else:
        ends_at = [(t, why) for t, why in ((last_issue, "last request issued"), (first_done, "first completion"))
                   if t is not None]
        if ends_at:
            we, why_end = max(ends_at)
        else:
            we, why_end = level_end, "end of level"
        why_end += ", drain dropped"
    we = min(we, level_end)
    # Tokens arrive in steps (one per decode iteration, for every stream at once), so the window
    # runs from one arrival (the ramp-up's last first token) to the last arrival before its end:
    # N steps counted over N step intervals, not over a fraction more.
    last_arrival = max(
        (t for r in records for t in _last_at_or_before(r.chunk_times, we) if t > ws), default=None
    )
    if last_arrival is not None:
        we = last_arrival
    if we <= ws:
        return level_start, level_end, (
            f"whole level (no steady state: ramp-up over at +{ws - level_start:.2f} s "
            f"({why_start}), load ended at +{we - level_start:.2f} s ({why_end}))"
        )
    return ws, we, (
        f"steady {we - ws:.2f} s of {level_end - level_start:.2f}: from +{ws - level_start:.2f} s "
        f"({why_start}) to +{we - level_start:.2f} s ({why_end})"
    )


def _pct(values: Any, prefix: str, out: dict[str, Any]) -> None:
    arr = np.asarray(values, dtype=float) * 1000.0
    if arr.size == 0:
        for stat in ("mean", "median", "p90", "p99"):
            out[f"{stat}_{prefix}_ms"] = float("nan")
        return
    out[f"mean_{prefix}_ms"] = float(arr.mean())
    out[f"median_{prefix}_ms"] = float(np.median(arr))
    out[f"p90_{prefix}_ms"] = float(np.percentile(arr, 90))
    out[f"p99_{prefix}_ms"] = float(np.percentile(arr, 99))


def error_summary(records: Sequence[RequestRecord], limit: int = 5) -> str:
    """``'12x HTTP 500: ...; 3x disconnected ...'`` for the failed requests."""
    counts = Counter(r.error or "unknown error" for r in records if r.status == "error")
    parts = [f"{n}x {msg}" for msg, n in counts.most_common(limit)]
    if len(counts) > limit:
        parts.append(f"... {len(counts) - limit} more kinds")
    return "; ".join(parts)


def level_stats(
    records: Sequence[RequestRecord],
    *,
    concurrency: int,
    last_issue: float | None,
    deadline: float | None = None,
    closed: bool = True,
) -> dict[str, Any]:
    """The sweep.csv figures for one level's (non-warm-up) records.

    ``output_throughput``, ``input_throughput``, ``total_throughput`` and ``request_throughput``
    are over the steady-state window (see :func:`steady_window`; ``deadline`` is when a
    duration-bound level stopped, ``closed`` False for open-loop arrivals);
    ``output_throughput_overall`` is bench_serving's figure, finished requests' tokens over the
    whole level.
    """
    ok = [r for r in records if r.status == "ok"]
    row: dict[str, Any] = {
        "completed": len(ok),
        "failed": sum(r.status == "error" for r in records),
        "cancelled": sum(r.status == "cancelled" for r in records),
    }
    starts = [r.start for r in records if r.start is not None]
    ends = [r.end for r in records if r.end is not None]
    start = min(starts) if starts else float("nan")
    end = max(ends) if ends else float("nan")
    row["start_time"], row["end_time"] = start, end
    row["duration"] = end - start if starts and ends else float("nan")
    row["total_input_tokens"] = int(sum(r.prompt_tokens or 0 for r in ok))
    row["total_output_tokens"] = int(sum(r.output_tokens or 0 for r in ok))

    ws, we, note = steady_window(records, concurrency, last_issue, deadline=deadline, closed=closed)
    row["window_start"], row["window_end"], row["window_note"] = ws, we, note
    span = we - ws
    out_tokens = 0.0
    in_tokens = 0
    inflight = 0.0
    for r in records:
        times, steps = _token_steps(r)
        if times:
            a = np.asarray(times)
            mask = (a > ws) & (a <= we)  # the step at ws ended the ramp-up
            if mask.any():
                out_tokens += float(np.asarray(steps)[mask].sum())
        if r.first_token is not None and ws < r.first_token <= we:
            in_tokens += r.prompt_tokens or 0
        if r.start is not None and r.end is not None:
            inflight += max(0.0, min(r.end, we) - max(r.start, ws))
    done_in_window = sum(1 for r in ok if r.end is not None and ws < r.end <= we)
    if span > 0:
        row["output_throughput"] = out_tokens / span
        row["input_throughput"] = in_tokens / span
        row["request_throughput"] = done_in_window / span
        row["mean_concurrency"] = inflight / span
    else:
        for k in ("output_throughput", "input_throughput", "request_throughput", "mean_concurrency"):
            row[k] = float("nan")
    row["total_throughput"] = row["output_throughput"] + row["input_throughput"]
    dur = row["duration"]
    row["output_throughput_overall"] = row["total_output_tokens"] / dur if dur and dur > 0 else float("nan")

    sources = {r.token_source for r in records if r.chunk_times}
    row["token_source"] = sources.pop() if len(sources) == 1 else ("mixed" if sources else "none")

    # TTFT, ITL and TPOT are measured by every request that streamed, including those cut at a
    # duration-bound level's deadline (TPOT so far: up to its last chunk), so a level shorter than
    # one request's lifetime still reports latency; end-to-end latency needs a finished request.
    streamed = [r for r in records if r.status in ("ok", "cancelled")]
    ttft = [t for t in (r.ttft for r in streamed) if t is not None]
    e2e = [r.end - r.start for r in ok if r.end is not None and r.start is not None]
    tpot = [t for t in (r.tpot for r in streamed) if t is not None]
    itl_parts = [np.diff(r.chunk_times) for r in streamed if len(r.chunk_times) > 1]
    itl = np.concatenate(itl_parts) if itl_parts else np.empty(0)
    _pct(ttft, "ttft", row)
    _pct(itl, "itl", row)
    _pct(tpot, "tpot", row)
    _pct(e2e, "e2e_latency", row)
    row["error_summary"] = error_summary(records)
    return row
