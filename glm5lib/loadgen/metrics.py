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

The records can be a list or a source that reads them again on each call (a sweep re-reads a
level's lines of requests.jsonl): the figures are made in two passes, the first folding each
record into compact numeric columns (8 bytes a value; the inter-token intervals one value a
token), the second counting the tokens of each request inside the window, so a long level
needs no request's record in memory at once.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from glm5lib.loadgen.client import RequestRecord

__all__ = ["CYCLE_SLACK", "SUB_CYCLE", "SWEEP_COLUMNS", "Records", "cycle_climbs", "error_summary", "level_stats",
           "steady_window"]

#: A level's records: a list, or a callable that gives them again (in the same order) each call.
Records = Sequence[RequestRecord] | Callable[[], Iterable[RequestRecord]]

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
    # added after level_id, so older sweep.csv files keep their columns' places
    "steady",
    "steady_note",
    "extended_s",
    "tpot_requests",
    "mean_prompt_tokens",
    "prompt_length_ratio",
    "prompt_source",
    "loop_lag_p50_ms",
    "loop_lag_max_ms",
    "host_cpus",
    "host_cpu_pct",
    "others_cpu_pct",
    "other_processes",
    "server_cpus",
]

#: A steady window shorter than this share of its level (and than :data:`MIN_WINDOW_S`), or one
#: in which no token arrived, measures nothing: the level is reported whole, marked not steady.
MIN_WINDOW_SHARE = 0.1
MIN_WINDOW_S = 1.0

#: What a window note says of a closed-loop window in which the streaming count never fell and
#: came back to its level at the start: it holds the decode of the requests streaming then, not
#: the prefill of the ones that follow them, and reads above the rate the loop sustains.
SUB_CYCLE = "less than one cycle of the load (decode without the prefill that follows it)"
#: How far under its level at the window's start the streaming count may stay and still count as
#: back at it (a share of that level): the point in the load's cycle where the window ends.
CYCLE_SLACK = 0.05

_NAN = float("nan")
_OK, _ERROR, _CANCELLED = 0, 1, 2
_STATUS = {"ok": _OK, "cancelled": _CANCELLED}


def _again(records: Records) -> Callable[[], Iterable[RequestRecord]]:
    return records if callable(records) else (lambda: records)


def _f(value: float | None) -> float:
    return _NAN if value is None else float(value)


class _Columns:
    """A level's records folded into numeric columns, in the records' order."""

    def __init__(self, records: Iterable[RequestRecord]) -> None:
        self.start, self.first_token, self.end = array("d"), array("d"), array("d")
        self.prompt, self.output, self.ttft, self.tpot = array("d"), array("d"), array("d"), array("d")
        self.asked = array("d")
        self.status = array("b")
        self.itl = array("d")  # every gap between two chunks of a request that streamed
        self.errors: Counter[str] = Counter()
        self.sources: set[str] = set()
        for rec in records:
            self.add(rec)
        self.np = {name: np.frombuffer(getattr(self, name), dtype=float) if len(getattr(self, name)) else
                   np.empty(0) for name in ("start", "first_token", "end", "prompt", "output", "ttft", "tpot",
                                            "asked")}
        self.code = np.frombuffer(self.status, dtype=np.int8) if len(self.status) else np.empty(0, np.int8)

    def add(self, rec: RequestRecord) -> None:
        status = _STATUS.get(rec.status, _ERROR)
        self.status.append(status)
        self.start.append(_f(rec.start))
        self.first_token.append(_f(rec.first_token))
        self.end.append(_f(rec.end))
        self.prompt.append(_f(rec.prompt_tokens))
        self.asked.append(_f(rec.asked_input_tokens))
        self.output.append(_f(rec.output_tokens))
        self.ttft.append(_f(rec.ttft) if status != _ERROR else _NAN)
        self.tpot.append(_f(rec.tpot) if status != _ERROR else _NAN)
        if status == _ERROR:
            self.errors[rec.error or "unknown error"] += 1
        if rec.chunk_times:
            self.sources.add(rec.token_source)
            if status != _ERROR and len(rec.chunk_times) > 1:
                self.itl.frombytes(np.diff(rec.chunk_times).tobytes())


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


def _streaming_events(cols: _Columns) -> tuple[np.ndarray, np.ndarray]:
    """(event times, requests streaming just after each). A request streams from its first token to
    its end (finished, failed or cancelled); at equal times an end is counted before a start, so a
    hand-over is not a peak."""
    first, end = cols.np["first_token"], cols.np["end"]
    streamed = ~np.isnan(first)
    ends = end[streamed & ~np.isnan(end)]
    times = np.concatenate([first[streamed], ends])
    steps = np.concatenate([np.ones(int(streamed.sum()), np.int64), -np.ones(ends.size, np.int64)])
    order = np.lexsort((steps, times))
    return times[order], np.cumsum(steps[order])


def _streaming_peak(times: np.ndarray, count: np.ndarray) -> tuple[float | None, int]:
    """(first time the number of streaming requests reached its peak, the peak), of
    :func:`_streaming_events`."""
    if not times.size:
        return None, 0
    at = int(np.argmax(count))
    if count[at] <= 0:
        return None, 0
    return float(times[at]), int(count[at])


def cycle_climbs(count: np.ndarray, level: float, start: int) -> np.ndarray:
    """The indices after ``start`` at which a streaming count ``count`` climbed back to ``level``
    (within :data:`CYCLE_SLACK`): the points of a closed loop's cycle where its level at ``start``
    recurs. The window (:func:`steady_window`) and the live steady-state test
    (:mod:`glm5lib.loadgen.constraints`) both end on them."""
    near = level - math.floor(CYCLE_SLACK * level)  # a stray early finisher does not hide a cycle
    after = np.arange(start + 1, count.size)
    return after[(count[after] >= near) & (count[after - 1] < near)]


def _phase_end(times: np.ndarray, count: np.ndarray, ws: float, we: float) -> tuple[float | None, int]:
    """The last time in ``(ws, we]`` at which the streaming count climbed back to what it was at ``ws``.

    A closed loop of like requests moves in cycles: the requests streaming at the window's start
    finish, their successors wait for their prefill, then stream in turn. A window from one point
    of that cycle to another point of it counts the decode of every cycle but not every prefill
    (or the reverse), and its rate depends on where the level's deadline fell. Ended where the
    count regains its level at the start, the window spans whole cycles. Returns that time (None:
    it never did, the window holds less than one cycle) and the count; ``(None, 0)`` where the count
    at the start was under its peak (requests had finished before the last of the first streamed:
    the loop does not move in step, and a window's end falls at no particular point of a cycle).
    """
    at_start = int(np.searchsorted(times, ws, side="right"))
    if at_start == 0:
        return None, 0
    level, peak = int(count[at_start - 1]), int(count.max())
    if level < peak - math.floor(CYCLE_SLACK * peak):
        return None, 0
    climbs = cycle_climbs(count[:np.searchsorted(times, we, side="right")], level, at_start - 1)
    return (float(times[climbs[-1]]) if climbs.size else None), level


def _chunk_pass(again: Callable[[], Iterable[RequestRecord]], windows: list[tuple[float, float]],
                ) -> list[tuple[float | None, float]]:
    """For each ``(a, b)`` window: (the last token arrival in ``(a, b]``, the tokens that arrived in it)."""
    last: list[float | None] = [None] * len(windows)
    tokens = [0.0] * len(windows)
    for rec in again():
        times, steps = _token_steps(rec)
        if not times:
            continue
        arr = np.asarray(times)
        for k, (a, b) in enumerate(windows):
            i = bisect.bisect_right(times, b)
            if i and times[i - 1] > a and (last[k] is None or times[i - 1] > last[k]):  # type: ignore[operator]
                last[k] = times[i - 1]
            mask = (arr > a) & (arr <= b)  # the step at a ended the ramp-up
            if mask.any():
                tokens[k] += float(np.asarray(steps)[mask].sum())
    return list(zip(last, tokens, strict=True))


def _window(
    cols: _Columns,
    again: Callable[[], Iterable[RequestRecord]],
    concurrency: int,
    last_issue: float | None,
    *,
    deadline: float | None,
    closed: bool,
    unsteady: str | None = None,
) -> tuple[float, float, str, float]:
    """:func:`steady_window`'s ``(start, end, note)`` and the output tokens that arrived in it."""
    c = cols.np
    has_start, has_end = ~np.isnan(c["start"]), ~np.isnan(c["end"])
    level_start = float(c["start"][has_start].min()) if has_start.any() else 0.0
    level_end = float(c["end"][has_end].max()) if has_end.any() else level_start
    whole = (level_start, level_end)
    if np.isnan(c["first_token"]).all():
        return level_start, level_end, "whole level (no tokens)", _chunk_pass(again, [whole])[0][1]

    # -- start
    candidates: list[tuple[float, str]] = []
    issued = np.flatnonzero(has_start)
    issued = issued[np.argsort(c["start"][issued], kind="stable")][:concurrency]
    first = issued[~((cols.code[issued] == _ERROR) & np.isnan(c["first_token"][issued]))]
    if first.size and not np.isnan(c["first_token"][first]).any():
        candidates.append((float(c["first_token"][first].max()), f"all first {first.size} requests streaming"))
    events = _streaming_events(cols)
    peak_at, peak = _streaming_peak(*events)
    if peak_at is not None:
        candidates.append((peak_at, f"streaming count first at its peak of {peak}"))
    done = c["end"][(cols.code == _OK) & has_end]
    first_done = float(done.min()) if done.size else None
    if not closed and first_done is not None:
        candidates.append((first_done, "first completion"))
    ws, why_start = min(candidates)

    # -- end
    cancelled = c["end"][(cols.code == _CANCELLED) & has_end]
    if cancelled.size:
        we = float(cancelled.min()) if deadline is None else min(deadline, float(cancelled.min()))
        why_end = f"deadline, {cancelled.size} in flight cancelled"
    else:
        ends_at = [(t, why) for t, why in ((last_issue, "last request issued"), (first_done, "first completion"))
                   if t is not None]
        if ends_at:
            we, why_end = max(ends_at)
        else:
            we, why_end = level_end, "end of level"
        why_end += ", drain dropped"
    we = min(we, level_end)
    if closed and not unsteady:
        back, streaming = _phase_end(*events, ws, we)
        ok = (cols.code == _OK) & has_end
        cycle = float(np.median(c["end"][ok] - c["start"][ok])) if ok.any() else math.inf
        if back is None and streaming:
            why_end += f"; {SUB_CYCLE}: {streaming} streamed at its start"
        elif back is not None and 0 < we - back <= cycle:  # further back is a lull, not a point of a cycle
            we, why_end = back, f"{why_end}; moved back to where {streaming} streamed again, as at its start"
    # Tokens arrive in steps (one per decode iteration, for every stream at once), so the window
    # runs from one arrival (the ramp-up's last first token) to the last arrival before its end:
    # N steps counted over N step intervals, not over a fraction more. No token arrived between
    # that arrival and the first end, so the tokens counted up to either are the same.
    (last_arrival, tokens), (_, whole_tokens) = _chunk_pass(again, [(ws, we), whole])
    if last_arrival is not None:
        we = last_arrival
    if unsteady:
        return level_start, level_end, f"whole level (not steady: {unsteady})", whole_tokens
    if we <= ws:
        return level_start, level_end, (
            f"whole level (no steady state: ramp-up over at +{ws - level_start:.2f} s "
            f"({why_start}), load ended at +{we - level_start:.2f} s ({why_end}))"
        ), whole_tokens
    level_span = level_end - level_start
    if whole_tokens > 0 and (tokens <= 0 or (we - ws < MIN_WINDOW_SHARE * level_span and we - ws < MIN_WINDOW_S)):
        return level_start, level_end, (
            f"whole level (not steady: the steady window from +{ws - level_start:.2f} s ({why_start}) to "
            f"+{we - level_start:.2f} s ({why_end}) spans {we - ws:.2f} s of {level_span:.2f} and holds "
            f"{tokens:.0f} of the {whole_tokens:.0f} tokens streamed)"
        ), whole_tokens
    return ws, we, (
        f"steady {we - ws:.2f} s of {level_end - level_start:.2f}: from +{ws - level_start:.2f} s "
        f"({why_start}) to +{we - level_start:.2f} s ({why_end})"
    ), tokens


def steady_window(
    records: Records,
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
    first completion when that is later (nothing had left before it). In a closed loop the end
    is then moved back to the last moment the count of requests streaming climbed back to its
    level at the start (:func:`cycle_climbs`), so the window spans whole cycles of the load,
    prefills and decodes alike; by at most a finished request's median latency (a longer spell
    under that level is a lull of the server, not a point of a cycle). Where it never did, the
    note says the window holds less than one cycle (:data:`SUB_CYCLE`). The end is then moved
    back to the last token arrival at or before it, and tokens are counted over ``(start,
    end]``, so a short window spans whole decode steps. When this leaves no window, the whole
    level is used and the note says so.
    """
    again = _again(records)
    ws, we, note, _ = _window(_Columns(again()), again, concurrency, last_issue, deadline=deadline, closed=closed)
    return ws, we, note


def _pct(values: np.ndarray, prefix: str, out: dict[str, Any]) -> None:
    arr = np.asarray(values, dtype=float) * 1000.0
    if arr.size == 0:
        for stat in ("mean", "median", "p90", "p99"):
            out[f"{stat}_{prefix}_ms"] = _NAN
        return
    out[f"mean_{prefix}_ms"] = float(arr.mean())
    out[f"median_{prefix}_ms"] = float(np.median(arr))
    out[f"p90_{prefix}_ms"] = float(np.percentile(arr, 90))
    out[f"p99_{prefix}_ms"] = float(np.percentile(arr, 99))


def _summary(counts: Counter[str], limit: int) -> str:
    parts = [f"{n}x {msg}" for msg, n in counts.most_common(limit)]
    if len(counts) > limit:
        parts.append(f"... {len(counts) - limit} more kinds")
    return "; ".join(parts)


def error_summary(records: Iterable[RequestRecord], limit: int = 5) -> str:
    """``'12x HTTP 500: ...; 3x disconnected ...'`` for the failed requests."""
    return _summary(Counter(r.error or "unknown error" for r in records if r.status == "error"), limit)


def level_stats(
    records: Records,
    *,
    concurrency: int,
    last_issue: float | None,
    deadline: float | None = None,
    closed: bool = True,
    unsteady: str | None = None,
) -> dict[str, Any]:
    """The sweep.csv figures for one level's (non-warm-up) records.

    ``records`` is a list, or a callable giving them again in the same order each time (read
    twice: see the module docstring). ``output_throughput``, ``input_throughput``,
    ``total_throughput`` and ``request_throughput`` are over the steady-state window (see
    :func:`steady_window`; ``deadline`` is when a duration-bound level stopped, ``closed`` False
    for open-loop arrivals); ``output_throughput_overall`` is bench_serving's figure, finished
    requests' tokens over the whole level. A level the sweep found not steady (``unsteady``: the
    reason), or whose steady window is too short or holds no token, is measured over its whole
    length: ``steady`` is False and ``window_note`` says why, so a level in which tokens streamed
    never reads 0 tok/s. ``tpot_requests`` counts the requests that could measure a TPOT (at least
    one token after their first chunk); ``mean_prompt_tokens`` and ``prompt_length_ratio`` (the
    server's prompt tokens over the lengths asked) say how close the prompts came.
    """
    again = _again(records)
    cols = _Columns(again())
    c, code = cols.np, cols.code
    ok = code == _OK
    row: dict[str, Any] = {
        "completed": int(ok.sum()),
        "failed": int((code == _ERROR).sum()),
        "cancelled": int((code == _CANCELLED).sum()),
    }
    has_start, has_end = ~np.isnan(c["start"]), ~np.isnan(c["end"])
    start = float(c["start"][has_start].min()) if has_start.any() else _NAN
    end = float(c["end"][has_end].max()) if has_end.any() else _NAN
    row["start_time"], row["end_time"] = start, end
    row["duration"] = end - start if has_start.any() and has_end.any() else _NAN
    row["total_input_tokens"] = int(np.nan_to_num(c["prompt"][ok]).sum())
    row["total_output_tokens"] = int(np.nan_to_num(c["output"][ok]).sum())

    ws, we, note, out_tokens = _window(cols, again, concurrency, last_issue, deadline=deadline, closed=closed,
                                       unsteady=unsteady)
    row["window_start"], row["window_end"], row["window_note"] = ws, we, note
    row["steady"] = note.startswith("steady")
    row["steady_note"] = note[len("whole level ("):-1] if note.startswith("whole level (") else note
    span = we - ws
    first = c["first_token"]
    in_window = ~np.isnan(first) & (first > ws) & (first <= we)
    in_tokens = int(np.nan_to_num(c["prompt"][in_window]).sum())
    both = has_start & has_end
    overlap = np.minimum(c["end"][both], we) - np.maximum(c["start"][both], ws)
    inflight = sum(np.maximum(overlap, 0.0).tolist())  # summed in order, as one would by hand
    done_in_window = int((ok & has_end & (c["end"] > ws) & (c["end"] <= we)).sum())
    if span > 0:
        row["output_throughput"] = out_tokens / span
        row["input_throughput"] = in_tokens / span
        row["request_throughput"] = done_in_window / span
        row["mean_concurrency"] = inflight / span
    else:
        for k in ("output_throughput", "input_throughput", "request_throughput", "mean_concurrency"):
            row[k] = _NAN
    row["total_throughput"] = row["output_throughput"] + row["input_throughput"]
    dur = row["duration"]
    row["output_throughput_overall"] = row["total_output_tokens"] / dur if dur and dur > 0 else _NAN

    sources = cols.sources
    row["token_source"] = sources.pop() if len(sources) == 1 else ("mixed" if sources else "none")

    # TTFT, ITL and TPOT are measured by every request that streamed, including those cut at a
    # duration-bound level's deadline (TPOT so far: up to its last chunk), so a level shorter than
    # one request's lifetime still reports latency; end-to-end latency needs a finished request.
    e2e = (c["end"] - c["start"])[ok & both]
    _pct(c["ttft"][~np.isnan(c["ttft"])], "ttft", row)
    _pct(np.frombuffer(cols.itl, dtype=float) if len(cols.itl) else np.empty(0), "itl", row)
    _pct(c["tpot"][~np.isnan(c["tpot"])], "tpot", row)
    row["tpot_requests"] = int((~np.isnan(c["tpot"])).sum())
    prompt, asked = c["prompt"], c["asked"]
    known = ~np.isnan(prompt) & (prompt > 0)
    row["mean_prompt_tokens"] = float(prompt[known].mean()) if known.any() else _NAN
    both_known = known & ~np.isnan(asked) & (asked > 0)
    row["prompt_length_ratio"] = (float(prompt[both_known].sum() / asked[both_known].sum())
                                  if both_known.any() else _NAN)
    _pct(e2e, "e2e_latency", row)
    row["error_summary"] = _summary(cols.errors, 5)
    return row
