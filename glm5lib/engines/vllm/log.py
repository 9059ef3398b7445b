"""Read vLLM server logs into the same :class:`~glm5lib.logs.ServerLog` tables as SGLang's.

vLLM prints its scheduler state every few seconds (``log_stats``), in one of these shapes:

* V0 (``vllm/engine/metrics.py``, 0.4-0.10), with or without the bracket before the module and
  the trailing period::

    INFO 01-22 18:27:20 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation
    throughput: 41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache
    usage: 2.0%, CPU KV cache usage: 0.0%.

* V1 (``vllm/v1/metrics/loggers.py``, 0.8 on), one line per engine (data-parallel rank)::

    (APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt
    throughput: 0.0 tokens/s, Avg generation throughput: 1055.3 tokens/s, Running: 18 reqs,
    Waiting: 43 reqs, GPU KV cache usage: 95.9%, Prefix cache hit rate: 0.0%

* either of them under a custom logging format (``VLLM_LOGGING_CONFIG_PATH``, or an
  application that configures the ``vllm`` logger itself), e.g.
  ``2025-07-08 17:24:00 - vllm.engine.metrics - INFO - Avg prompt throughput: ...``.

The message is found wherever it sits in the line, and read key by key, so prefixes, container
timestamps and keys added by later releases (``MM cache hit rate``, ``MFU``...) do not break
it. Rows land in the ``decode`` table with SGLang's column names: ``running_req``,
``queue_req`` (Waiting / Pending), ``token_usage`` (the KV pool in use, a 0-1 fraction: the GPU
pool, or on CPU builds the CPU pool), ``gen_throughput``; vLLM's own quantities follow as extra
columns (``prompt_throughput``, ``swapped_req``, ``cpu_token_usage``, ``cache_hit_rate`` as a
fraction, ``mm_cache_hit_rate``, ``engine``).

Preemption warnings (V0's ``Sequence group N is preempted by PreemptionMode.RECOMPUTE mode
because there is not enough KV cache space ... total_num_cumulative_preemption=N``) land in the
``retractions`` table, SGLang's word for the same event. Start-up facts: ``non-default args:
{...}`` (or the older ``args: Namespace(...)``) become ``server_args``; ``max_num_seqs`` given
there becomes ``startup["max_running_requests"]``; the KV cache size in tokens (``GPU KV cache
size: 2,042,016 tokens``) becomes ``max_total_num_tokens`` (and ``device``, ``gpu`` or
``cpu``, where the line names it); ``Maximum concurrency for N tokens
per request: X`` becomes ``max_concurrency`` (and ``context_len``); ``# GPU blocks: N`` becomes
``num_gpu_blocks``. Fatal lines are classified as ``oom``, ``nccl`` or ``engine_dead``.

A file is read a piece at a time (:meth:`VllmParser.feed_chunk`): uvicorn access lines a
distinct line at a time (:mod:`glm5lib.logs.access`), stats lines of a shape learned from one
line read by its regex into columns (:mod:`glm5lib.engines.vllm.log_stats`), the rest line by line;
the line-by-line reader stays the reference, and tests check both give the same tables.
"""

from __future__ import annotations

import ast
import datetime as _dt
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from glm5lib.engines.lineparser import LineParser
from glm5lib.engines.vllm.log_stats import (
    ENGINE_RE,
    ISO_STAMP_RE,
    KEY_VALUE_RE,
    MAX_SHAPES,
    STATS_ANCHORS,
    VLLM_STAMP_RE,
    StatsShape,
    decode_frame,
    learn_shape,
    pool_usage,
    shape_columns,
    stat_name,
    stats_times,
)
from glm5lib.logs.access import access_frame, access_lines
from glm5lib.logs.chunked import ACCESS_RE, read_lines
from glm5lib.logs.engine import LogEngine
from glm5lib.logs.growing import GrowingTable
from glm5lib.logs.model import ServerLog, parser_facts
from glm5lib.logs.server_args import parse_server_args
from glm5lib.logs.text import split_chunk, strip_ansi
from glm5lib.masking import mask_text

__all__ = ["ENGINE", "VLLM_ERROR_KINDS", "VllmParser", "classify_vllm_fatal", "looks_like_vllm"]

#: error kinds a vLLM log can show, most specific first
VLLM_ERROR_KINDS = ("oom", "nan", "nccl", "engine_dead")

DECODE_COLUMNS = ("running_req", "num_token", "token_usage", "cuda_graph", "gen_throughput", "queue_req")
RETRACT_COLUMNS = ("retracted_reqs", "new_token_ratio_before", "new_token_ratio_after")

_MAX_SKIPPED_EXAMPLES = 20

# What stats lines and V0's hit rate lines hold, looked for in a chunk's bytes.
_STATS_NEEDLES = tuple(a.encode() for a in STATS_ANCHORS)
_V0_HIT = b"Prefix cache hit rate: GPU:"
# Lines tried per chunk for a new stats shape.
_STATS_TRIES = 4
_DIGITS_RE = re.compile(rb"[0-9]+")
# The unit of a time read from "YYYY-MM-DD HH:MM:SS" (pandas 3: microseconds; 2: nanoseconds).
_TEXT_UNIT = pd.Timestamp("2000-01-01 00:00:00").unit

_PREEMPT_RE = re.compile(
    r"Sequence group (\S+) is preempted by PreemptionMode\.(\w+) mode because there is not enough KV cache space"
    r"(?:.*?total_(?:num_)?cumulative_preemption(?:_cnt)?=(\d+))?"
)
_PREFIX_HIT_V0_RE = re.compile(r"Prefix cache hit rate: GPU: ([\d.]+)%, CPU: ([\d.]+)%")
_NON_DEFAULT_RE = re.compile(r"non-default args: (\{.*\})\s*$")
_NAMESPACE_RE = re.compile(r"\bargs: Namespace\((.*)\)\s*$")
_KV_TOKENS_RE = re.compile(r"(GPU|CPU|XPU|TPU|HPU)? ?KV cache size: ([\d,]+) tokens")
_MAX_CONC_RE = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.,]+)x")
_BLOCKS_RE = re.compile(r"# (GPU|CPU) blocks: (\d+)")
_VERSION_RE = re.compile(r"vLLM API server version ([\w.+\-]+)|Initializing an? (?:V1 )?LLM engine \(v([\w.+\-]+)\)")
_AVAILABLE_KV_RE = re.compile(r"Available KV cache memory: ([\d.]+) GiB")
_KV_CACHE_SPACE_RE = re.compile(r"KV cache space (?:is|of) ([\d.]+) ?GiB|kv_cache_size=([\d.]+)GiB")
_READY_RE = re.compile(r"Application startup complete|Uvicorn running on|Starting vLLM API server")
_IPV4_RE = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_PORT_RE = re.compile(r":\d+ - ")
_HTTP_RE = re.compile(r'INFO:\s+([\d.:\[\]a-f]+):\d+ - "(\w+) (\S+) HTTP/[\d.]+" (\d{3})')

_FATAL_RES = (
    ("oom", re.compile(r"OutOfMemoryError|CUDA out of memory|out of memory|CUBLAS_STATUS_ALLOC_FAILED|"
                       r"No available memory for the cache blocks|Insufficient memory")),
    ("nan", re.compile(r"\bNaN\b|nan in (?:logits|output)", re.IGNORECASE)),
    ("nccl", re.compile(r"NCCL error|DistBackendError|ncclUnhandled|ncclSystemError|ncclInternalError|NCCL watchdog|"
                        r"ProcessGroupNCCL.*(?:timeout|Timeout|error)")),
    ("engine_dead", re.compile(r"EngineDeadError|EngineCore encountered an issue|Engine core initialization failed|"
                               r"EngineCore failed to start|Engine loop is not running|Engine process failed to start|"
                               r"Worker proc \S+ died unexpectedly|AsyncEngineDeadError")),
)
_FATAL_PRECHECK = ("rror", "memory", "NaN", "nan in", "died", "NCCL", "nccl", "ngine")
# Words without which a pattern of _FATAL_RES cannot match (its search is skipped: most lines
# pass the precheck above by an "Engine" and no pattern would take them).
_FATAL_NEEDS = {
    "oom": ("emory", "CUBLAS_STATUS_ALLOC_FAILED"),
    "nccl": ("NCCL", "nccl", "DistBackendError"),
    "engine_dead": ("Engine", "died unexpectedly"),
}
_EXCEPTION_LINE_RE = re.compile(r"\b[\w.]*(?:Error|Exception)\b: ")
_NOT_FATAL_RE = re.compile(r"NCCL (?:INFO|version)|NCCL_\w+=|If reserved but unallocated|gpu_memory_utilization|"
                           r"Try increasing `gpu_memory_utilization`")


def classify_vllm_fatal(line: str) -> str | None:
    """The error kind a vLLM log line shows (``oom``, ``nan``, ``nccl``, ``engine_dead``), or None."""
    if not any(word in line for word in _FATAL_PRECHECK):
        return None
    lower = None
    for kind, pattern in _FATAL_RES:
        needs = _FATAL_NEEDS.get(kind)
        if needs is not None:
            if not any(word in line for word in needs):
                continue
        else:  # "nan", any case
            lower = line.lower() if lower is None else lower
            if "nan" not in lower:
                continue
        if pattern.search(line):
            if kind != "engine_dead" and _NOT_FATAL_RE.search(line) and "Error" not in line:
                continue
            return kind
    return None


# Lines only vLLM prints (SGLang logs can carry vLLM's own "Automatically detected platform"
# when SGLang imports vLLM kernels, so that one is not a mark).
_VLLM_MARKS = (
    "Avg prompt throughput:",
    "vLLM API server version",
    "non-default args:",
    "[loggers.py:",
    "(EngineCore",
    "(APIServer pid=",
    "vllm.entrypoints",
    "Initializing a V1 LLM engine",
    "Starting vLLM",
    "vllm.engine.",
)


def looks_like_vllm(head: str) -> bool:
    """True when the start of a log reads like a vLLM server's."""
    return any(mark in head for mark in _VLLM_MARKS)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _literal_dict(text: str) -> dict[str, Any]:
    try:
        value = ast.literal_eval(text)
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        pass
    # A value that is not a literal (an enum, an object repr): take each literal pair on its own.
    out: dict[str, Any] = {}
    for m in re.finditer(r"'(\w+)': ('(?:[^'\\]|\\.)*'|-?\d+(?:\.\d+)?|True|False|None|\[[^\]]*\])", text):
        try:
            out[m.group(1)] = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            out[m.group(1)] = m.group(2)
    return out


class VllmParser(LineParser):
    """Line-by-line reader of a vLLM log (the :class:`glm5lib.logs.LogParser` methods)."""

    def __init__(self, date: str | None = None) -> None:
        super().__init__("vllm")
        self.year = int(date[:4]) if date else _dt.date.today().year
        self.decode_rows: list[dict[str, Any]] = []
        self.decode_order: list[int] = []  # the line of each row of decode_rows
        # Stats lines read a chunk at a time (glm5lib.engines.vllm.log_stats), a part per shape and chunk.
        self.decode_bulk: list[dict[str, Any]] = []
        self._stats_shapes: list[StatsShape] = []
        self._stats_taken: list[int] = []  # lines each shape took so far
        self._stats_odd: set[bytes] = set()  # stats lines (but for digits) no shape was learned from
        self._stats_shapeless = False  # whether the last line tried fit no shape at all
        # Access lines read a chunk at a time: their line numbers and rows in _http_distinct.
        self.http_bulk: list[tuple[np.ndarray, np.ndarray]] = []
        self._http_distinct: dict[tuple[bytes, ...], int] = {}
        self.http_order: list[int] = []
        self._groups: dict[str, bool] = {}
        self.finished = False
        self._http_kept = GrowingTable()

    # -- lines ---------------------------------------------------------------------------------

    def feed(self, lines: Iterable[str], final: bool = True) -> None:
        for line in lines:
            self.lines += 1
            self._line(line.rstrip("\r\n"))

    def finish(self) -> None:
        """The input has ended: the last stats row takes no later prefix cache hit rate."""
        self.finished = True

    def feed_chunk(self, chunk: bytes, crs: bool) -> None:
        """Parse ``chunk`` (whole lines, ending with a newline): uvicorn access lines (most of a
        busy server's log) a distinct line at a time, stats lines of a learned shape by their
        shape's regex (:mod:`glm5lib.engines.vllm.log_stats`), the others line by line.

        An access line changes nothing but the ``http`` table (it has no time of its own), so
        the lines read in bulk only need their rows put in line order at the end; a group of
        them is read in bulk only when its first line, read line by line, gives one access row
        and nothing else, and its client is an IPv4 address (then no pattern here can read the
        port's digits as anything but a port)."""
        if crs or not chunk:
            self.feed_bulk(split_chunk(chunk, crs))
            return
        buf = b"\n" + chunk
        arr = np.frombuffer(buf, dtype=np.uint8)
        nl = np.flatnonzero(arr == 10)
        n = len(nl) - 1
        lines, distinct, codes, alike = access_lines(ACCESS_RE, buf, arr, nl, n, read_lines)
        if len(lines):
            # Each group's line (and so each line) read line by line by a parser of its own.
            reps, first = np.unique(alike, return_index=True)
            good = np.array([
                self._plain_access(buf[nl[r] + 1 : nl[r + 1]].decode("ascii"), distinct[codes[k]])
                for r, k in zip(reps.tolist(), first.tolist(), strict=True)
            ], dtype=bool)
            keep = good[np.searchsorted(reps, alike)]
            lines, codes = lines[keep], codes[keep]
        base = self.lines
        if len(lines):
            known = self._http_distinct
            remap = np.array([known.setdefault(row, len(known)) for row in distinct], dtype=np.int32)
            self.http_bulk.append((lines + base, remap[codes]))
        bulk = np.zeros(n, dtype=bool)
        bulk[lines] = True
        stats_idx, stats_time = self._stats_lines(buf, nl, base)
        bulk[stats_idx] = True
        nl_at = nl.tolist()
        slow = np.flatnonzero(~bulk)
        # Stats lines read in bulk before each line read here: they set the clock as they would
        # have line by line (the first time, the last time a line without one takes).
        before = np.searchsorted(stats_idx, slow).tolist() if len(stats_idx) else None
        seen = 0
        for j, i in enumerate(slow.tolist()):
            if before is not None and before[j] > seen:
                self._stats_clock(stats_time, seen, before[j])
                seen = before[j]
            self.lines = base + i + 1
            self._line(buf[nl_at[i] + 1 : nl_at[i + 1]].decode("utf-8", errors="replace").rstrip("\r\n"))
        if len(stats_idx) > seen:
            self._stats_clock(stats_time, seen, len(stats_idx))
        self.lines = base + n

    def _stats_clock(self, times: np.ndarray, lo: int, hi: int) -> None:
        """The clock after the stats lines ``lo..hi-1`` read in bulk (times as ``_stamp`` makes them)."""
        if self.first_time is None:
            self.first_time = pd.Timestamp(times[lo]).as_unit(_TEXT_UNIT)
        self.last_time = pd.Timestamp(times[hi - 1]).as_unit(_TEXT_UNIT)

    def _stats_lines(self, buf: bytes, nl: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
        """Stats lines of a chunk read by the regexes of learned shapes: their numbers and times
        (the rows go to ``decode_bulk``). Shapes are learned here from lines no shape takes.

        The row a V0 ``Prefix cache hit rate: GPU:`` line completes is the last row before it,
        and a drain may hold the last row back: the last line before such a line and the
        chunk's last stats line are left to the line-by-line reader, so that those rows are its."""
        empty = (np.empty(0, dtype=np.int64), np.empty(0, dtype="datetime64[ns]"))
        at = _find_all(buf, _STATS_NEEDLES)
        if not at:
            return empty
        cand = np.unique(np.searchsorted(nl, np.array(at, dtype=np.int64)) - 1)
        cand = cand[cand < len(nl) - 1]
        starts, ends = nl[cand] + 1, nl[cand + 1]
        pending = np.arange(len(cand))
        shapes = self._stats_shapes
        taken: list[tuple[StatsShape, np.ndarray, list[tuple[bytes, ...]]]] = []
        k = 0
        tries = 0
        while len(pending):
            if k == len(shapes):
                if len(shapes) >= MAX_SHAPES or tries >= _STATS_TRIES:
                    break
                # A shape from the first line that no shape takes (the next ones if it is odd;
                # lines like one no shape was learned from before, but for digits, are not tried).
                learned = None
                for p in pending[: 4 * _STATS_TRIES].tolist():
                    line = buf[int(starts[p]) : int(ends[p])]
                    odd = _DIGITS_RE.sub(b"", line)
                    if odd in self._stats_odd:
                        continue
                    tries += 1
                    learned = self._learn_stats(line)
                    if learned is not None or tries >= _STATS_TRIES:
                        break
                    # only a line whose words no shape fits marks its kind; one that failed for
                    # its values (a date that does not exist, say) leaves the next ones learnable
                    if len(self._stats_odd) < 1024 and self._stats_shapeless:
                        self._stats_odd.add(odd)
                if learned is None:
                    break
                shapes.append(learned)
                self._stats_taken.append(0)
            shape = shapes[k]
            k += 1
            took, rows = read_lines(shape.regex, buf, starts[pending], ends[pending])
            if rows:
                self._stats_taken[k - 1] += len(rows)
                taken.append((shape, pending[took], rows))
                keep = np.ones(len(pending), dtype=bool)
                keep[took] = False
                pending = pending[keep]
        if len(shapes) > 1:
            # The shapes that took the most lines first: most lines are tried against one regex.
            order = sorted(range(len(shapes)), key=lambda j: -self._stats_taken[j])
            shapes[:] = [shapes[j] for j in order]
            self._stats_taken[:] = [self._stats_taken[j] for j in order]
        if not taken:
            return empty
        parts = []
        for shape, idx, rows in taken:
            table = np.array(rows, dtype="S")
            times, good = stats_times(self.year, table[:, 0], table[:, 1], table[:, 2])
            parts.append((shape, cand[idx], table, times, good))
        # Left to the line-by-line reader: the last stats line, and the last before a V0 hit rate line.
        idx_all = np.sort(np.concatenate([p[1][p[4]] for p in parts]))
        if not len(idx_all):
            return empty
        demote = [int(idx_all[-1])]
        hits = _find_all(buf, (_V0_HIT,))
        if hits:
            hit_lines = np.searchsorted(nl, np.array(hits, dtype=np.int64)) - 1
            before = np.searchsorted(idx_all, hit_lines) - 1
            demote += idx_all[before[before >= 0]].tolist()
        demoted = np.array(demote, dtype=np.int64)
        out_idx, out_time = [], []
        for shape, idx, table, times, good in parts:
            good &= ~np.isin(idx, demoted)
            if not good.any():
                continue
            table, idx, times = table[good], idx[good], times[good]
            engine = table[:, 3].astype(np.int64) if shape.has_engine else None
            values = [table[:, c] for c in range(3 + shape.has_engine, table.shape[1])]
            self.decode_bulk.append({
                "_order": idx + base, "time": times, "engine": engine, "columns": shape_columns(shape, values),
            })
            out_idx.append(idx)
            out_time.append(times)
        if not out_idx:
            return empty
        idx = np.concatenate(out_idx)
        order = np.argsort(idx, kind="stable")
        return idx[order], np.concatenate(out_time)[order]

    def _learn_stats(self, raw: bytes) -> StatsShape | None:
        """A shape learned from one stats line, kept only when the row its regex reads is the
        row the line-by-line reader reads (and nothing else happens to the parser)."""
        self._stats_shapeless = True
        try:
            line = raw.decode("ascii")
        except UnicodeDecodeError:
            return None
        shape = learn_shape(line)
        if shape is None:
            return None
        self._stats_shapeless = False
        m = shape.regex.match(b"\n" + raw + b"\n")
        probe = VllmParser()
        probe.year = self.year
        probe._line(line)
        if m is None or len(probe.decode_rows) != 1 or probe.retract_rows or probe.errors or probe.http_rows:
            return None
        groups = m.groups()
        table = np.array([groups], dtype="S")
        times, good = stats_times(self.year, table[:, 0], table[:, 1], table[:, 2])
        if not good.all():
            return None
        row: dict[str, Any] = {
            "time": pd.Timestamp(times[0]).as_unit(_TEXT_UNIT),
            "engine": int(groups[3]) if shape.has_engine else np.nan,
        }
        values = [table[:, c] for c in range(3 + shape.has_engine, table.shape[1])]
        row.update({name: float(col[0]) for name, col in shape_columns(shape, values).items()})
        expected = probe.decode_rows[0]
        same = list(row) == list(expected) and all(
            (row[c] == expected[c] or (pd.isna(row[c]) and pd.isna(expected[c]))) and type(row[c]) is type(expected[c])
            for c in row
        )
        return shape if same and expected["time"].unit == _TEXT_UNIT else None

    def _plain_access(self, line: str, row: tuple[bytes, ...]) -> bool:
        """Whether ``line`` (an access line the regex reads as ``row``) is read line by line as
        one access row and nothing else, whatever its port."""
        key = _PORT_RE.sub(":", line, count=1)
        known = self._groups.get(key)
        if known is None:
            client, method, path, status = (v.decode("ascii") for v in row)
            probe = VllmParser()
            probe._line(line)
            known = bool(
                _IPV4_RE.fullmatch(client) and probe.http_rows == [[None, client, method, path, int(status)]]
                and not (probe.decode_rows or probe.retract_rows or probe.errors or probe.skipped)
                and probe.startup == {"engine": "vllm"} and not probe.server_args and not probe.became_ready
            )
            self._groups[key] = known
        return known

    def _stamp(self, line: str) -> tuple[pd.Timestamp | None, str]:
        """The line's time and its message (the text after vLLM's prefix, or the whole line).
        A time that does not exist (``02-30``, ``24:00:00``) is no time."""
        m = VLLM_STAMP_RE.search(line)
        if m:
            iso = ISO_STAMP_RE.search(line, 0, m.start())
            year = iso.group(1)[:4] if iso else str(self.year)
            return _timestamp(f"{year}-{m.group(2)}-{m.group(3)} {m.group(4)}"), line[m.end():]
        m = ISO_STAMP_RE.search(line)
        if m:
            frac = f".{m.group(3)[:6]}" if m.group(3) else ""
            return _timestamp(f"{m.group(1)} {m.group(2)}{frac}"), line
        return None, line

    def _line(self, line: str) -> None:
        if "\x1b" in line:  # vLLM colours its prefix when it thinks it writes to a terminal
            line = strip_ansi(line)
        if not line.strip():
            return
        stamp, msg = self._stamp(line)
        if stamp is not None:
            if self.first_time is None:
                self.first_time = stamp
            self.last_time = stamp
        for anchor in STATS_ANCHORS:
            at = msg.find(anchor)
            if at >= 0:
                self._stats(msg, at, stamp)
                return
        if "Prefix cache hit rate: GPU:" in msg:
            m = _PREFIX_HIT_V0_RE.search(msg)
            if m and self.decode_rows:
                self.decode_rows[-1]["cache_hit_rate"] = float(m.group(1)) / 100.0
            return
        if "is preempted by PreemptionMode" in msg:
            m = _PREEMPT_RE.search(msg)
            if m:
                self.retract_rows.append({
                    "time": stamp, "rank": "", "retracted_reqs": 1, "new_token_ratio_before": np.nan,
                    "new_token_ratio_after": np.nan, "preemption_mode": m.group(2).lower(),
                    "cumulative_preemptions": int(m.group(3)) if m.group(3) else np.nan,
                })
                return
        if "[shutdown]" in msg and ("trigger received signal" in msg or "shutdown triggered" in msg):
            self.stopping = True
        kind = classify_vllm_fatal(line)
        if kind is not None:
            if self.stopping and kind == "engine_dead":
                return  # stopped on purpose: the API server reports its engine gone as it shuts down
            self._error(kind, msg.strip(), line, stamp)
            return
        if self._startup(msg):
            if _READY_RE.search(msg) and "Application startup complete" in msg:
                self.became_ready = True
                # uvicorn's line carries no time: the last stamped line's is the nearest
                self.ready_at = self.ready_at or stamp or self.last_time
            return
        m = _HTTP_RE.search(line)
        if m:
            self.http_rows.append([stamp, m.group(1), m.group(2), m.group(3), int(m.group(4))])
            self.http_order.append(self.lines - 1)
            return
        if stamp is None:
            self.skipped += 1
            if len(self.skipped_examples) < _MAX_SKIPPED_EXAMPLES:
                self.skipped_examples.append(mask_text(line[:300]))

    def _stats(self, msg: str, at: int, stamp: pd.Timestamp | None) -> None:
        engine = ENGINE_RE.search(msg[max(0, at - 16):at])
        row: dict[str, Any] = {"time": stamp, "engine": int(engine.group(1)) if engine else np.nan}
        for key, value, _unit in KEY_VALUE_RE.findall(msg, at):
            name, fraction = stat_name(key)
            number = float(value) if "," not in value else _number(value)
            row[name] = number / 100.0 if fraction else number
        pool_usage(row)
        self.decode_rows.append(row)
        self.decode_order.append(self.lines - 1)
        if row.get("preemptions", 0) > 0:
            # V1 counts preemptions per logging interval in the stats line (no line per event).
            self.retract_rows.append({
                "time": stamp, "rank": "", "retracted_reqs": int(row["preemptions"]), "new_token_ratio_before": np.nan,
                "new_token_ratio_after": np.nan, "preemption_mode": "recompute", "cumulative_preemptions": np.nan,
            })

    def _error(self, kind: str, message: str, line: str, stamp: pd.Timestamp | None) -> None:
        last = self.errors[-1] if self.errors else None
        # One incident prints a traceback of many lines from several processes: a line of the
        # same kind within a few seconds of the last belongs to it.
        if last is not None and last["kind"] == kind and (
                stamp is None or last["time"] is None or abs((stamp - last["time"]).total_seconds()) <= 5):
            last["text"] += "\n" + mask_text(line)
            if _EXCEPTION_LINE_RE.search(message) and not _EXCEPTION_LINE_RE.search(last["message"]):
                last["message"] = mask_text(message)  # the exception line says more than the source line above it
            return
        self.errors.append({"time": stamp, "rank": "", "kind": kind, "message": mask_text(message), "text": mask_text(line)})

    def _startup(self, msg: str) -> bool:
        if "non-default args:" in msg:
            m = _NON_DEFAULT_RE.search(msg)
            if m:
                self.server_args.update(_literal_dict(m.group(1)))
                self._args_facts()
                return True
        if "args: Namespace(" in msg:
            m = _NAMESPACE_RE.search(msg)
            if m:
                self.server_args.update(parse_server_args("ServerArgs(" + m.group(1) + ")"))
                self._args_facts()
                return True
        found = False
        m = _KV_TOKENS_RE.search(msg) if "KV cache size: " in msg else None
        if m:
            tokens = int(m.group(2).replace(",", ""))
            self.startup.setdefault("max_total_num_tokens", tokens)
            self.startup.setdefault("kv_cache_tokens", tokens)
            if m.group(1):  # where the KV cache lives: vLLM's automatic batch sizes depend on it
                self.startup.setdefault("device", m.group(1).lower())
            found = True
        # 0.32 prints both on one line: "CPU KV cache size: N tokens, Maximum concurrency for ..."
        m = _MAX_CONC_RE.search(msg) if "Maximum concurrency for " in msg else None
        if m:
            self.startup.setdefault("context_len", int(m.group(1).replace(",", "")))
            self.startup.setdefault("max_concurrency", _number(m.group(2)))
            found = True
        if found:
            return True
        if "# GPU blocks:" in msg or "# CPU blocks:" in msg:
            for device, blocks in _BLOCKS_RE.findall(msg):
                self.startup.setdefault(f"num_{device.lower()}_blocks", int(blocks))
            return True
        m = _VERSION_RE.search(msg) if "vLLM API server version " in msg or "Initializing a" in msg else None
        if m:
            self.startup.setdefault("engine_version", m.group(1) or m.group(2))
            return True
        m = None
        if "KV cache" in msg or "kv_cache_size=" in msg:  # (what both patterns need)
            m = _AVAILABLE_KV_RE.search(msg) or _KV_CACHE_SPACE_RE.search(msg)
        if m:
            value = next(g for g in m.groups() if g)
            self.startup.setdefault("kv_cache_size_gb", float(value))
            return True
        return bool(_READY_RE.search(msg))

    def _args_facts(self) -> None:
        args = self.server_args
        if isinstance(args.get("max_num_seqs"), int):
            self.startup["max_running_requests"] = args["max_num_seqs"]
            self.startup["max_num_seqs"] = args["max_num_seqs"]
        if isinstance(args.get("max_num_batched_tokens"), int):
            self.startup["max_num_batched_tokens"] = args["max_num_batched_tokens"]
        model = args.get("model") or args.get("model_tag")
        if isinstance(model, str):
            self.startup.setdefault("model", model)

    # -- tables --------------------------------------------------------------------------------

    def build(self) -> ServerLog:
        startup = dict(self.startup)
        if "max_total_num_tokens" not in startup and "num_gpu_blocks" in startup:
            block = self.server_args.get("block_size")
            startup["max_total_num_tokens"] = startup["num_gpu_blocks"] * (block if isinstance(block, int) else 16)
        return ServerLog(
            **parser_facts(self),
            startup=startup,
            decode=self._decode_frame(),
            prefill=_empty(("new_seq", "new_token", "cached_token", "token_usage", "running_req", "queue_req")),
            retractions=_frame(self.retract_rows, RETRACT_COLUMNS),
            errors=self._errors_frame(),
            http=self._http_frame(),
        )

    def drain(self) -> ServerLog:
        """The rows read since the last drain, let go of here; the log's facts as so far.

        The last V0 stats row waits for the next drain while the input goes on: its prefix
        cache hit rate comes on a line of its own, which may be in the next piece."""
        held, held_order = [], []
        if not self.finished and self.decode_rows and "cache_hit_rate" not in self.decode_rows[-1]:
            # (The last row is one read line by line: _stats_lines leaves a chunk's last stats line so.)
            held.append(self.decode_rows.pop())
            held_order.append(self.decode_order.pop())
        slog = self.build()
        for rows in (self.decode_rows, self.decode_order, self.decode_bulk, self.retract_rows, self.errors,
                     self.http_rows, self.http_order, self.http_bulk):
            del rows[:]
        self.decode_rows.extend(held)
        self.decode_order.extend(held_order)
        self._http_kept = GrowingTable()
        return slog

    def _decode_frame(self) -> pd.DataFrame:
        joined = decode_frame(self.decode_rows, self.decode_order, self.decode_bulk) if self.decode_bulk else None
        if joined is not None:
            frame = _finish(joined, DECODE_COLUMNS)
        else:
            frame = _frame(self._all_decode_rows(), DECODE_COLUMNS)
        if frame.empty:
            return frame
        engines = frame["engine"].dropna()
        if len(engines) and engines.max() > 0:
            # Several engines (data parallel): each row is one engine's, labelled as SGLang labels DP ranks.
            frame["rank"] = ["" if pd.isna(e) else f"DP{int(e)}" for e in frame["engine"]]
        frame["cuda_graph"] = pd.array([pd.NA] * len(frame), dtype="boolean")
        return frame

    def _all_decode_rows(self) -> list[dict[str, Any]]:
        """The decode rows as the line-by-line reader makes them, those read in bulk too, in log order."""
        if not self.decode_bulk:
            return self.decode_rows
        made: list[tuple[int, dict[str, Any]]] = list(zip(self.decode_order, self.decode_rows, strict=True))
        for part in self.decode_bulk:
            names = list(part["columns"])
            values = [part["columns"][c].tolist() for c in names]
            engines = part["engine"].tolist() if part["engine"] is not None else None
            for k, (order, t) in enumerate(zip(part["_order"].tolist(), part["time"], strict=True)):
                row: dict[str, Any] = {"time": pd.Timestamp(t).as_unit(_TEXT_UNIT),
                                       "engine": engines[k] if engines is not None else np.nan}
                row.update((c, v[k]) for c, v in zip(names, values, strict=True))
                made.append((order, row))
        made.sort(key=lambda e: e[0])
        return [row for _, row in made]

    def _errors_frame(self) -> pd.DataFrame:
        cols = ["time", "rank", "kind", "message", "text"]
        if not self.errors:
            return _empty(("kind", "message", "text"))
        frame = pd.DataFrame(self.errors, columns=cols)
        frame["time"] = pd.to_datetime(frame["time"])
        return frame

    def _http_frame(self) -> pd.DataFrame:
        if not self.incremental:
            return self._http_rows_frame()
        # A follower: the access lines read since the last build are appended to the table
        # kept from it, so that an update costs what its new lines cost.
        if self.http_rows or self.http_bulk:
            self._http_kept.append(self._http_rows_frame())
            for rows in (self.http_rows, self.http_order, self.http_bulk):
                del rows[:]
        return self._http_kept.frame() if len(self._http_kept) else self._http_rows_frame()

    def _http_rows_frame(self) -> pd.DataFrame:
        """The access lines read since the last build (all of them when nobody builds again)."""
        cols = ["time", "client", "method", "path", "status"]
        if not self.http_rows and not self.http_bulk:
            return pd.DataFrame({c: pd.Series(dtype="datetime64[ns]" if c == "time" else object) for c in cols})
        unit = pd.to_datetime(pd.Series([None])).dtype  # as a table of access lines alone
        rows = None
        if self.http_rows:
            rows = pd.DataFrame(self.http_rows, columns=cols)
            rows["time"] = pd.to_datetime(rows["time"])
            unit = rows["time"].dtype
            if not self.http_bulk:
                return rows
        # Each column made once, in line order (no table of the rows read in bulk before this one).
        codes = np.concatenate([c for _, c in self.http_bulk])
        order = np.concatenate([np.array(self.http_order, dtype=np.int64)] + [o for o, _ in self.http_bulk])
        perm = np.argsort(order, kind="stable") if rows is not None or len(self.http_bulk) > 1 else None
        del order
        bulk = access_frame(list(self._http_distinct), np.arange(len(self._http_distinct)))
        columns: dict[str, Any] = {}
        for c in cols:
            if c == "time":
                values = np.full(len(codes), np.datetime64("NaT"), dtype=unit)  # no time of their own
            else:
                values = bulk[c].to_numpy(dtype=object if c != "status" else np.int64)[codes]
            if rows is not None:
                values = np.concatenate((rows[c].to_numpy(dtype=values.dtype), values))
            columns[c] = values[perm] if perm is not None else values
            del values
        return pd.DataFrame(columns)


def _timestamp(text: str) -> pd.Timestamp | None:
    try:
        return pd.Timestamp(text)
    except ValueError:
        return None


def _find_all(buf: bytes, needles: tuple[bytes, ...]) -> list[int]:
    """Where each of ``needles`` is in ``buf`` (bytes.find: a fast search, no regex)."""
    out: list[int] = []
    for needle in needles:
        at = buf.find(needle)
        while at >= 0:
            out.append(at)
            at = buf.find(needle, at + 1)
    return out


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="datetime64[ns]" if c == "time" else object) for c in ("time", "rank", *columns)})


def _frame(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    if not rows:
        return _empty(columns)
    frame = pd.DataFrame(rows)
    frame["time"] = pd.to_datetime(frame["time"])
    return _finish(frame, columns)


def _finish(frame: pd.DataFrame, columns: tuple[str, ...]) -> pd.DataFrame:
    """Rows (time typed) -> the table: rank, missing columns, columns in order."""
    if "rank" not in frame.columns:
        frame["rank"] = ""
    for c in columns:
        if c not in frame.columns:
            frame[c] = np.nan
    base = ["time", "rank", *columns]
    extras = [c for c in frame.columns if c not in base]
    return frame[base + extras].reset_index(drop=True)


def _new_parser(date: str | None = None, *, incremental: bool = True) -> VllmParser:
    parser = VllmParser(date=date)
    parser.incremental = incremental
    return parser


# the arguments that decide throughput, shown first in a log's digest
IMPORTANT_ARGS = (
    "model", "served_model_name", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
    "max_num_seqs", "max_num_batched_tokens", "max_model_len", "gpu_memory_utilization", "block_size",
    "kv_cache_dtype", "quantization", "enforce_eager", "enable_prefix_caching", "enable_chunked_prefill",
    "api_key",
)

ENGINE = LogEngine(name="vllm", detect=looks_like_vllm, new_parser=_new_parser,
                   cap_keys=("max_running_requests", "max_num_seqs"), important_args=IMPORTANT_ARGS)
