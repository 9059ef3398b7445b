"""vLLM stats lines of a learned shape read a chunk at a time, their values into columns.

A busy vLLM server prints a stats line every few seconds per engine, all alike but for the
time and the numbers::

    (APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt
    throughput: 0.0 tokens/s, Avg generation throughput: 1055.3 tokens/s, Running: 18 reqs,
    Waiting: 43 reqs, GPU KV cache usage: 95.9%, Prefix cache hit rate: 0.0%

The line-by-line reader (:class:`glm5lib.engines.vllm.log.VllmParser`) stays the reference. A shape is
learned from one line it reads: the line's prefix is vLLM's default one, its message the
stats keys alone, each value a plain decimal, and the row built from the shape's regex is the
row the line-by-line reader builds. The shape's regex then reads the lines of that shape a
chunk at a time (one ``findall`` over those lines), and the values become float columns by
numpy. Anything else (another prefix, an odd value, a key that is not a plain word) is left to
the line-by-line reader. The rows read here are joined to the others as ``pd.DataFrame`` of
all rows in log order would join them (:func:`decode_frame`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from glm5lib.logs.chunked import decimals

__all__ = [
    "ENGINE_RE",
    "FRACTIONS",
    "ISO_STAMP_RE",
    "KEY_VALUE_RE",
    "STATS_ANCHORS",
    "STAT_KEYS",
    "VLLM_STAMP_RE",
    "StatsShape",
    "decode_frame",
    "learn_shape",
    "shape_columns",
    "stat_name",
    "stats_times",
]

# The stats message starts here in every release (V1 puts "Engine NNN: " in front).
STATS_ANCHORS = ("Avg prompt throughput:", "Avg prefill throughput:")
ENGINE_RE = re.compile(r"Engine (\d+): $")
KEY_VALUE_RE = re.compile(r"([A-Za-z][A-Za-z ]*?): (-?[\d,]*\.?\d+)\s*(tokens/s|reqs|%)?")
STAT_KEYS = {
    "Avg prompt throughput": "prompt_throughput",
    "Avg prefill throughput": "prompt_throughput",
    "Avg generation throughput": "gen_throughput",
    "Avg decode throughput": "gen_throughput",
    "Running": "running_req",
    "Waiting": "queue_req",
    "Pending": "queue_req",
    "Swapped": "swapped_req",
    "Preempted": "preempted_req",
    "Preemptions": "preemptions",
    "Deferred": "deferred_req",
    "Corrupted": "corrupted_req",
    "GPU KV cache usage": "gpu_token_usage",
    "CPU KV cache usage": "cpu_token_usage",
    "KV cache usage": "kv_token_usage",
    "XPU KV cache usage": "kv_token_usage",
    "Prefix cache hit rate": "cache_hit_rate",
    "MM cache hit rate": "mm_cache_hit_rate",
}
FRACTIONS = {"gpu_token_usage", "cpu_token_usage", "kv_token_usage", "cache_hit_rate", "mm_cache_hit_rate"}
# Keys as printed -> (column name, whether a percentage), as the stats lines show them.
_KEY_NAMES: dict[str, tuple[str, bool]] = {}

# vLLM's default format: "INFO 05-19 10:13:11 [loggers.py:271] " (0.8+) or "INFO 02-28 21:48:18
# metrics.py:161] " (older); a custom format usually carries a full ISO date.
VLLM_STAMP_RE = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d:\d\d:\d\d)(?:\.\d+)? \[?[\w.]+\.py:\d+\] ")
ISO_STAMP_RE = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?")

# What a learned shape allows before vLLM's prefix: nothing, or a process label.
_PROC = r"(?:\([A-Za-z0-9_]++ pid=[0-9]++\) )?"
_PROC_RE = re.compile(_PROC)
_ENGINE_HEAD_RE = re.compile(r"Engine ([0-9]{1,6}): ")
# A value as read here: the same span as KEY_VALUE_RE's value wherever this is followed by a
# unit, ", ", "." or the line's end.
_VALUE = r"(-?[0-9]++(?:\.[0-9]++)?+)"
_VALUE_RE = re.compile(_VALUE)
_UNITS = ("", " tokens/s", " reqs", "%")
# Shapes learned at most (a log of odd lines does not make a regex per line).
MAX_SHAPES = 64


def stat_name(key: str) -> tuple[str, bool]:
    """A stats key as printed -> (its column name, whether it is a percentage)."""
    known = _KEY_NAMES.get(key)
    if known is None:
        name = STAT_KEYS.get(key.strip())
        if name is None:
            name = re.sub(r"[^0-9a-z]+", "_", key.strip().lower()).strip("_")
        known = (name, name in FRACTIONS)
        if len(_KEY_NAMES) < 4096:
            _KEY_NAMES[key] = known
    return known


class StatsShape:
    """A learned stats line shape: its regex over a chunk's lines (each after a newline) with
    groups month, day, clock, engine (when the shape names one), then the values; and which
    value each column of the row takes (``plan``: name, value index, whether a percentage)."""

    __slots__ = ("has_engine", "plan", "regex")

    def __init__(self, regex: re.Pattern[bytes], has_engine: bool, plan: list[tuple[str, int, bool]]) -> None:
        self.regex, self.has_engine, self.plan = regex, has_engine, plan


def _plan(keys: list[str]) -> list[tuple[str, int, bool]] | None:
    """The row's columns (after time and engine) for a line of these keys, as the line-by-line
    reader builds it: a later key of the same name takes its place, the pool's usage becomes
    ``token_usage`` at the end. None for a shape left to the line-by-line reader."""
    row: dict[str, tuple[int, bool]] = {}
    for k, key in enumerate(keys):
        name, fraction = stat_name(key)
        if name in ("time", "engine", "rank", "preemptions"):
            return None  # (preemptions also make a retraction row)
        row[name] = (k, fraction)
    pool_usage(row)
    return [(name, k, fraction) for name, (k, fraction) in row.items()]


def pool_usage(row: dict[str, Any]) -> None:
    """Name the KV pool's usage ``token_usage`` in a stats row, in place (the GPU's, else the
    one named kv, else the CPU's: CPU builds of V1 keep their KV cache in host memory and name
    it so); a second usage key is dropped."""
    for key in ("gpu_token_usage", "kv_token_usage", "cpu_token_usage"):
        if key in row:
            row["token_usage"] = row.pop(key)
            break
    row.pop("kv_token_usage", None)


def learn_shape(line: str) -> StatsShape | None:
    """The shape of one stats line (as the line-by-line reader gets it: no line break, no
    escape), or None when its lines are to be read line by line."""
    if not line.isascii() or "\x1b" in line or "\n" in line or "\r" in line:
        return None
    m = VLLM_STAMP_RE.search(line)
    if m is None or _PROC_RE.fullmatch(line, 0, m.start()) is None:
        return None
    msg = line[m.end() :]
    at = -1
    for anchor in STATS_ANCHORS:
        at = msg.find(anchor)
        if at >= 0:
            break
    if at < 0:
        return None
    head = msg[:at]
    if head and _ENGINE_HEAD_RE.fullmatch(head) is None:
        return None
    parts = list(KEY_VALUE_RE.finditer(msg, at))
    if not parts or parts[0].start() != at:
        return None
    body: list[bytes] = []
    keys: list[str] = []
    end = at
    for k, p in enumerate(parts):
        unit = msg[p.end(2) : p.end()]
        if (k and msg[end : p.start()] != ", ") or _VALUE_RE.fullmatch(p.group(2)) is None or unit not in _UNITS:
            return None
        keys.append(p.group(1))
        body.append(re.escape(p.group(1).encode()) + b": " + _VALUE.encode() + re.escape(unit.encode()))
        end = p.end()
    tail = msg[end:]
    if tail not in ("", "."):
        return None
    plan = _plan(keys)
    if plan is None:
        return None
    pattern = (
        b"\n" + _PROC.encode() + m.group(1).encode()
        # (possessive: as fast as the regex can be; "[\w.]+\.py:" as VLLM_STAMP_RE reads it)
        + rb" ([0-9][0-9])-([0-9][0-9]) ([0-9][0-9]:[0-9][0-9]:[0-9][0-9])(?:\.[0-9]++)? \[?[A-Za-z0-9_.]++(?<=[A-Za-z0-9_.]\.py):[0-9]++\] "
        + (rb"Engine ([0-9]{1,6}): " if head else b"")
        + b", ".join(body) + re.escape(tail.encode()) + rb"(?=\n)"
    )
    return StatsShape(re.compile(pattern), bool(head), plan)


def _digits(col: np.ndarray, width: int) -> np.ndarray:
    """A column of ``width`` ASCII bytes each -> rows of their values less 48 (digits: 0-9)."""
    block = np.ascontiguousarray(col.astype(f"S{width}")).view(np.uint8).reshape(len(col), width)
    return block.astype(np.int64) - 48


def stats_times(year: int, month: np.ndarray, day: np.ndarray, clock: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(datetime64[ns] times, which are good) of ``MM``, ``DD`` and ``HH:MM:SS`` columns (bytes)
    in ``year``; a date or clock that does not exist is not good (the line-by-line reader
    decides on it)."""
    mm = _digits(month, 2)
    dd = _digits(day, 2)
    cl = _digits(clock, 8)
    hour, minute, sec = cl[:, 0] * 10 + cl[:, 1], cl[:, 3] * 10 + cl[:, 4], cl[:, 6] * 10 + cl[:, 7]
    good = (hour <= 23) & (minute <= 59) & (sec <= 59)
    dates, inverse = np.unique((mm[:, 0] * 10 + mm[:, 1]) * 100 + dd[:, 0] * 10 + dd[:, 1], return_inverse=True)
    days = np.zeros(len(dates), dtype=np.int64)
    valid = np.zeros(len(dates), dtype=bool)
    for k, v in enumerate(dates.tolist()):
        try:
            days[k] = np.datetime64(f"{year:04d}-{v // 100:02d}-{v % 100:02d}", "D").astype(np.int64)
            valid[k] = 1 <= v // 100 <= 12 and 1 <= v % 100 <= 31
        except ValueError:
            pass
    inverse = inverse.ravel()
    good &= valid[inverse]
    ns = (days[inverse] * 86400 + hour * 3600 + minute * 60 + sec) * 1_000_000_000
    return ns.view("datetime64[ns]"), good


def shape_columns(shape: StatsShape, values: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The row's columns (after time and engine) from a shape's value columns (bytes), as the
    line-by-line reader computes each value (``float``, then ``/ 100`` for a percentage)."""
    out: dict[str, np.ndarray] = {}
    floats: dict[int, np.ndarray] = {}
    for name, k, fraction in shape.plan:
        if k not in floats:
            col = np.ascontiguousarray(values[k])
            fast = decimals(col, as_int=False)  # digit arithmetic: the same floats as float()
            floats[k] = fast if fast is not None else col.astype(np.float64)
        out[name] = floats[k] / 100.0 if fraction else floats[k]
    return out


def _time_dtype(rows: list[dict[str, Any]]) -> Any:
    """The type of the time column of ``pd.DataFrame`` of the rows read line by line and those
    read in bulk (times from a ``YYYY-MM-DD HH:MM:SS`` text, as the line-by-line reader makes
    them): a table of one row of each kind of time there is, typed the same way."""
    units = {}
    none = False
    for row in rows:
        t = row.get("time")
        if t is None:
            none = True
        elif isinstance(t, pd.Timestamp):
            units.setdefault(t.unit, t)
        else:
            return None
    probe = [pd.Timestamp("2000-01-01 00:00:00"), *units.values()] + ([None] if none else [])
    return pd.to_datetime(pd.DataFrame([{"time": t} for t in probe])["time"]).dtype


def decode_frame(rows: list[dict[str, Any]], order: list[int], bulk: list[dict[str, Any]]) -> pd.DataFrame | None:
    """``pd.DataFrame`` of all rows in log order with its time column typed (as the line-by-line
    reader's rows give it): ``rows`` read line by line at lines ``order``, ``bulk`` parts read
    here (``_order``, ``time``, ``engine`` or None, ``columns``). None when a column of the rows
    read line by line is not one this joins (then the caller makes the rows and joins them)."""
    dtype = _time_dtype(rows)
    if dtype is None or getattr(dtype, "kind", "") != "M":
        return None
    # Columns in the order the rows first show them.
    events = [(o, k, list(r)) for k, (o, r) in enumerate(zip(order, rows, strict=True))]
    events += [(int(p["_order"][0]), -1, ["time", "engine", *p["columns"]]) for p in bulk if len(p["_order"])]
    events.sort(key=lambda e: e[0])
    names: dict[str, None] = {}
    for _o, _k, keys in events:
        names.update(dict.fromkeys(keys))
    slow = None
    if rows:
        slow = pd.DataFrame(rows)
        slow["time"] = pd.to_datetime(slow["time"])
        for c in slow.columns:
            if c != "time" and slow[c].dtype.kind not in "if":
                return None
    all_order = np.concatenate([np.array(order, dtype=np.int64)] + [p["_order"] for p in bulk])
    perm = np.argsort(all_order, kind="stable")
    del all_order
    n_slow = len(rows)
    columns: dict[str, Any] = {}
    for name in names:
        pieces = []
        if n_slow:
            if name in slow.columns:
                col = slow[name].to_numpy()
                pieces.append(col.astype(dtype) if name == "time" else col)
            else:
                pieces.append(np.full(n_slow, np.nan))
        for p in bulk:
            n = len(p["_order"])
            if name == "time":
                pieces.append(p["time"].astype(dtype))
            elif name == "engine":
                pieces.append(p["engine"] if p["engine"] is not None else np.full(n, np.nan))
            else:
                pieces.append(p["columns"].get(name, np.full(n, np.nan)))
        if name == "time":
            values = np.concatenate(pieces).astype(dtype)
        else:
            values = np.concatenate(pieces)
        columns[name] = values[perm]
    return pd.DataFrame(columns)
