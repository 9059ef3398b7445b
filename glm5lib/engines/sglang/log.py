"""The SGLang engine: its log lines into :class:`glm5lib.logs.ServerLog`'s tables.

:class:`_Parser` is a line-at-a-time state machine (the reference path), with a per-line fast
path for scheduler shapes seen before, retractions, uvicorn access lines and traceback bodies,
and the chunked path of :mod:`glm5lib.logs.chunked` for files read a piece at a time
(:meth:`_Parser.feed_chunk`); all three give the same rows.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from itertools import pairwise
from typing import Any

import numpy as np
import pandas as pd

from glm5lib.engines.sglang.digest import IMPORTANT_ARGS, args_digest
from glm5lib.engines.sglang.scheduler import (
    DECODE_COLUMNS,
    FAST_VALUE,
    PREFILL_COLUMNS,
    RETRACT_COLUMNS,
    RETRACT_FAST_RE,
    SHAPE_PREFIX,
    Shape,
    bucket_key,
    column_name,
    parse_scheduler_msg,
    shape_regex,
)
from glm5lib.engines.sglang.startup import read_startup
from glm5lib.logs.chunked import feed_chunk, typed_frame
from glm5lib.logs.engine import LogEngine
from glm5lib.logs.fatal import classify_fatal
from glm5lib.logs.growing import GrowingTable
from glm5lib.logs.model import ServerLog
from glm5lib.logs.server_args import closes, parse_server_args
from glm5lib.logs.tables import (
    block_row,
    empty_frame,
    errors_frame,
    fill_hybrid,
    http_frame,
    to_timestamps,
)
from glm5lib.logs.text import (
    ANSI_RE,
    CUT_PREFIX_RE,
    GLOG_RE,
    GLUED_SEARCH_RE,
    GPU_PREFIX_RE,
    OTHER_RUNTIME_RE,
    PREFIX_RE,
    RANK_ONLY_PREFIX_RE,
    TRACEBACK,
    UVICORN_RE,
    is_nccl,
    is_tqdm,
)
from glm5lib.masking import mask_text

#: the first line SGLang logs when asked to stop (0.5.16: "SIGTERM received. signum=None frame=None.
#: Draining requests and shutting down..."); what it logs after it is the stop, not a fault
SHUTDOWN_MARKERS = ("SIGTERM received", "Received sigterm", "Received SIGTERM")
#: uvicorn's own level prefix before a marker ("INFO:     Received SIGTERM, exiting." with tokenizer workers)
_UVICORN_LEVEL_RE = re.compile(r"(?:INFO|WARNING|ERROR):\s+")


def _is_shutdown(msg: str) -> bool:
    """The first line of a stop that was asked for, however SGLang's processes print it."""
    if "Draining requests and shutting down" in msg:
        return True
    m = _UVICORN_LEVEL_RE.match(msg)
    return (msg[m.end():] if m else msg).startswith(SHUTDOWN_MARKERS)

__all__ = ["ENGINE", "SGLangParser"]

log = logging.getLogger(__name__)

_MAX_SKIPPED_EXAMPLES = 20
# Lines near a whole file's start where its first dated time is looked for.
_FIRST_TIME_LINES = 1000
_FALLBACK_DATE = "1970-01-01"
_STANDIN_RE = re.compile(r"glm5lib stand-in server \(not SGLang\): profile '([^']*)' \(([^)]*)\)")

class _Parser:
    """Line-at-a-time state machine; rows are kept raw and typed in bulk by :meth:`build`."""

    def __init__(self, date: str | None = None) -> None:
        self.date = date
        self.date_given = date is not None
        self.last_date: str | None = date
        self.last_time_str: str | None = None
        self.last_clock: str | None = None
        self.lines = 0
        self.skipped = 0
        self.skipped_examples: list[str] = []
        self.server_args: dict[str, Any] = {}
        self.server_args_incomplete = False
        self._args_buffer: str | None = None
        self.startup: dict[str, Any] = {}
        self._startup_other: dict[str, Any] = {}
        self.ready_at: str | None = None
        self.became_ready = False
        self.standin: str | None = None
        self.standin_path: str | None = None
        self.first_time: str | None = None
        # Scheduler rows, grouped by shape; learned shapes also get a full-line regex.
        self.shapes: dict[tuple[str, tuple[str, ...]], Shape] = {}
        self._fast: dict[int, list[tuple[Any, Any, Any]]] = {}
        self._fast_patterns: dict[str, tuple[Any, Any, Any]] = {}
        self._retract_shape: Shape | None = None
        # Access lines read line by line: (line index, time, client, method, path, status).
        self.http_rows: list[tuple[int, str | None, str, str, str, int]] = []
        # Access lines read a chunk at a time, as tables with an "_order" column.
        self.http_frames: list[pd.DataFrame] = []
        self._http_done: Any = None  # a follower's GrowingTable, or the table of one build
        # Shapes learned so far, for the chunked path: (shape, head, raw keys, keys inside
        # "(mixed ...)" or None).
        self.learned: list[tuple[Shape, str, list[str], int | None]] = []
        self.errors: list[dict[str, Any]] = []
        self._open_blocks: list[dict[str, Any]] = []
        self._block_body_started = False
        self._tables: dict[str, GrowingTable] = {}  # a follower's tables, kept between builds
        self._errors_kept = 0  # error rows in self._tables["errors"]
        # A follower builds again and again: it keeps the tables and hands out copies.
        self.reuse_frames = True
        self.scan_first_time = False
        self._cache_errors: tuple[int, pd.DataFrame] | None = None

    # ---- helpers
    def _skip(self, line: str) -> None:
        self.skipped += 1
        if len(self.skipped_examples) < _MAX_SKIPPED_EXAMPLES:
            self.skipped_examples.append(mask_text(line[:300]))

    def _stamp(self, date: str | None, clock: str) -> str:
        clock = clock.replace(",", ".")
        if date is None:
            base = self.last_date or _FALLBACK_DATE
            # A time-only log that passes midnight: the clock goes backwards by hours.
            if self.last_clock is not None and clock < self.last_clock and self.last_clock[:2] >= "12" and clock[:2] < "12":
                base = (pd.Timestamp(base) + pd.Timedelta(days=1)).strftime("%Y-%m-%d")
            self.last_date = base
            date = base
        else:
            self.last_date = date
        self.last_clock = clock
        stamp = f"{date} {clock}"
        self.last_time_str = stamp
        if self.first_time is None:
            self.first_time = stamp
        return stamp

    # ---- main entry
    def feed(self, lines: Iterable[str], final: bool = True) -> None:
        """Parse ``lines`` in order; ``final`` says the last one may be cut off."""
        lines = lines if isinstance(lines, list) else list(lines)
        if final and lines:
            self._feed(lines[:-1])
            index = self.lines
            self._slow(lines[-1], index, cut=True)
            self.lines = index + 1
        else:
            self._feed(lines)

    def _slow(self, line: str, index: int, cut: bool = False) -> None:
        self.lines = index
        try:
            self._line(line, cut=cut)
        except Exception as exc:  # pragma: no cover - a parser bug must not lose the log
            log.debug("could not parse line %r: %s", line[:200], exc)
            self._skip(line)

    def _feed(
        self, lines: list[str], indices: list[int] | None = None, base: int | None = None,
        marks: list[tuple[int, str | None]] | None = None,
    ) -> None:
        """Parse ``lines`` (or only those at ``indices``, the others having been parsed in bulk;
        ``lines[k]`` of such a line is the line whose time it leaves on the clock, or "").
        ``marks`` gets (index, clock) at the end of each run of lines parsed here."""
        if base is None:
            base = self.lines
        fast = self._fast
        get = fast.get
        timed_line: str | None = None  # the last line the fast path took, for the clock
        args_open = self._args_buffer is not None
        blocks_open = bool(self._open_blocks)
        prev = -1
        for i in range(len(lines)) if indices is None else indices:
            line = lines[i]
            if indices is not None and i != prev + 1 and i > 0:
                # Lines parsed in bulk came in between: they set the clock and end tracebacks.
                timed_line = self._after_bulk(lines, i, prev, timed_line, marks, blocks_open, args_open)
                blocks_open = args_open = False
            prev = i
            # Fast path: a scheduler line of a shape seen before: one regex match, no state.
            if "batch" in line and not args_open:
                bucket = get(bucket_key(line))
                if bucket is not None:
                    m = None
                    for match, order_append, rows_append in bucket:
                        m = match(line)
                        if m is not None:
                            order_append(base + i)
                            rows_append(m.groups())
                            timed_line = line
                            if blocks_open:
                                self._close_blocks()
                                blocks_open = False
                            break
                    if m is not None:
                        continue
            if not args_open and "pool is full" in line:
                # Retractions (one a minute on an overloaded server): one regex, as above.
                rm = RETRACT_FAST_RE.match(line)
                if rm is not None:
                    self._retract_fast(base + i, rm.groups())
                    timed_line = line
                    if blocks_open:
                        self._close_blocks()
                        blocks_open = False
                    continue
            if not blocks_open and not args_open and line[:1] in ("I", "\x1b"):
                # uvicorn access lines are the next most frequent: one regex, no dispatch
                # (coloured ones too), unless a "[" may start a line glued on, which _line splits.
                plain = line if line[0] == "I" else ANSI_RE.sub("", line)
                if plain.startswith("INFO:  ") and plain.find("[", 1) < 0:
                    um = UVICORN_RE.match(plain)
                    if um is not None:
                        if timed_line is not None:
                            self._sync_clock(timed_line)
                            timed_line = None
                        client, _port, method, target, status = um.groups()
                        self.http_rows.append((base + i, self.last_time_str, client, method, target, int(status)))
                        continue
            if (
                blocks_open and not args_open and line[:1] == " " and "[" not in line and "\x1b" not in line
                and "\r" not in line and "NCCL " not in line and not line.isspace()
            ):
                # A traceback's body ("  File ...", "    code"): nothing glued on, no uvicorn,
                # NCCL or glog line; it goes to the open blocks as _line would put it there.
                self._block_body_started = True
                for block in self._open_blocks:
                    block["lines"].append(line)
                continue
            if timed_line is not None:
                # Read lazily, once before a line that is not taken fast (a line with only a
                # clock, or only a rank, takes the date or the time from it).
                self._sync_clock(timed_line)
                timed_line = None
            self._slow(line, base + i)
            args_open = self._args_buffer is not None
            blocks_open = bool(self._open_blocks)
        self._end_feed(lines, indices is not None, prev, timed_line, marks, blocks_open, base)

    def _after_bulk(
        self, lines: list[str], i: int, prev: int, timed_line: str | None,
        marks: list[tuple[int, str | None]] | None, blocks_open: bool, args_open: bool,
    ) -> str:
        """What the lines read in bulk between ``prev`` and ``i`` did: the run before them marked,
        tracebacks and a wrapped server_args line ended; returns the line whose time they leave
        on the clock (read lazily, as the fast path's)."""
        if marks is not None and prev >= 0:
            if timed_line is not None:
                self._sync_clock(timed_line)
            marks.append((prev, self.last_time_str))
        timed_line = lines[i - 1]
        if blocks_open:
            self._close_blocks()
        if args_open:
            self._try_finish_args(final=True)
        return timed_line

    def _end_feed(
        self, lines: list[str], bulk: bool, prev: int, timed_line: str | None,
        marks: list[tuple[int, str | None]] | None, blocks_open: bool, base: int,
    ) -> None:
        """After the last line parsed here: the last run marked, the lines read in bulk after it
        (``bulk``: some were) ending tracebacks, the line count and the clock brought up to date."""
        if marks is not None and prev >= 0:
            if timed_line is not None:
                self._sync_clock(timed_line)
                timed_line = None
            marks.append((prev, self.last_time_str))
        if bulk and prev != len(lines) - 1 and lines:
            timed_line = lines[-1]
            if blocks_open:
                self._close_blocks()
        self.lines = base + len(lines)
        if timed_line is not None:
            self._sync_clock(timed_line)

    def _set_clock(self, stamp: str) -> None:
        """The clock after a dated line read in bulk (as :meth:`_stamp` would set it)."""
        self.last_date, self.last_clock, self.last_time_str = stamp[:10], stamp[11:], stamp
        if self.first_time is None:
            self.first_time = stamp

    def _sync_clock(self, line: str) -> None:
        # The lines given here were taken by the fast or bulk path, so they start with a
        # "[YYYY-MM-DD HH:MM:SS" prefix those paths checked: cut date and clock out by position
        # (this runs once per uvicorn line), as _stamp would for a dated line.
        if line[20:21] in ("]", " ") and line[0] == "[" and line[11] == " " and line[14] == ":" and line[17] == ":":
            self.last_date = line[1:11]
            self.last_clock = line[12:20]
            self.last_time_str = stamp = line[1:20]
            if self.first_time is None:
                self.first_time = stamp
            return
        m = PREFIX_RE.match(line)
        if m is not None:
            self._stamp(m.group(1), m.group(2))

    def _line(self, raw: str, cut: bool = False) -> None:
        line = raw.rstrip("\r\n")
        if "\x1b" in line:
            line = ANSI_RE.sub("", line)
        glued = line.find("[", 1)
        if glued > 0:
            gm = GLUED_SEARCH_RE.search(line, glued)
            if gm is not None:
                # A log line glued onto a progress bar or onto another line: two lines.
                self._line(line[: gm.start()], cut=False)
                self._line(line[gm.start() :], cut=cut)
                return
        if not line.strip():
            if self._args_buffer is not None:
                return
            if self._open_blocks:
                self._block_text("")
            return
        if self._args_buffer is not None and not line.startswith("["):
            self._args_buffer += line
            self._try_finish_args(final=False)
            return
        if self._args_buffer is not None:
            self._try_finish_args(final=True)

        if line[0] == "[":
            m = PREFIX_RE.match(line)
            if m is not None:
                msg = line[m.end() :]
                stamp = self._stamp(m.group(1), m.group(2))
                rank = m.group(3).strip()
                if m.group(4) is not None and not rank:
                    rank = f"TP{m.group(4)}"
                self._message(msg, stamp, rank, line, cut)
                return
            g = GPU_PREFIX_RE.match(line)
            if g is not None:
                self._message(line[g.end() :], self.last_time_str, f"TP{g.group(1)}", line, cut)
                return
            g = RANK_ONLY_PREFIX_RE.match(line)
            if g is not None:
                self._message(line[g.end() :], self.last_time_str, g.group(1), line, cut)
                return
        elif line[0].isdigit():
            m = CUT_PREFIX_RE.match(line)
            if m is not None:
                self._message(line[m.end() :], self._stamp(m.group(1), m.group(2)), m.group(3).strip(), line, cut)
                return
        self._unprefixed(line, cut)

    def _message(self, msg: str, stamp: str, rank: str, line: str, cut: bool) -> None:
        # Decode lines dominate a long log: test for them first, with the cheapest checks.
        if msg.startswith("Decode batch"):
            self._close_blocks()
            self._scheduler("decode", msg, stamp, rank, line, cut)
            return
        if msg.startswith("Prefill batch") or msg.startswith("new fill batch"):
            self._close_blocks()
            self._scheduler("prefill", msg, stamp, rank, line, cut)
            return
        if msg.startswith("KV cache pool is full"):
            self._close_blocks()
            self._retract(msg, stamp, rank, line)
            return
        if msg.startswith(("INFO:", "WARNING:", "ERROR:")):
            um = UVICORN_RE.match(msg)
            if um is not None:
                self._close_blocks()
                self.http_rows.append((self.lines, stamp, um.group(1), um.group(3), um.group(4), int(um.group(5))))
                return
        if _is_shutdown(msg):
            self._close_blocks()
            self.startup.setdefault("shutdown_requested_at", stamp)
            return
        kind = classify_fatal(msg)
        if TRACEBACK in msg or (kind is not None and kind in ("scheduler_exception",) and msg.rstrip().endswith(":")):
            self._open_block(kind, stamp, rank, msg)
            return
        self._close_blocks()
        if kind is not None:
            self._fault(
                {"time": stamp, "rank": rank, "kind": kind, "message": msg.strip(), "text": msg.strip()}
            )
            return
        if msg.startswith("server_args=") or msg.startswith("ServerArgs("):
            self._args_buffer = msg
            self._try_finish_args(final=cut)
            return
        if "glm5lib stand-in server" in msg:
            sm = _STANDIN_RE.search(msg)
            if sm:
                self.standin, self.standin_path = sm.group(1), sm.group(2)
            return
        if "ready to roll" in msg:
            self.became_ready = True
            if self.ready_at is None:
                self.ready_at = stamp
            return
        read_startup(self.startup, self._startup_other, msg, rank, cut)

    def _unprefixed(self, line: str, cut: bool) -> None:
        if self._open_blocks and _is_shutdown(line.strip()):
            self._close_blocks()  # the stop's first line ends a traceback before it
        if self._open_blocks:
            if UVICORN_RE.match(line) or is_nccl(line) or GLOG_RE.match(line):
                self._close_blocks()
            else:
                self._block_text(line)
                return
        stripped = line.strip()
        if stripped.startswith(TRACEBACK) or stripped.startswith("Traceback"):
            self._open_block(None, self.last_time_str, "", stripped)
            return
        if _is_shutdown(stripped):
            # 0.5.16 with several tokenizer workers: each process prints the marker undated
            self.startup.setdefault("shutdown_requested_at", self.last_time_str)
            return
        um = UVICORN_RE.match(line)
        if um is not None:
            self.http_rows.append(
                (self.lines, self.last_time_str, um.group(1), um.group(3), um.group(4), int(um.group(5)))
            )
            return
        if is_nccl(line) or GLOG_RE.match(line) or OTHER_RUNTIME_RE.match(line):
            kind = classify_fatal(line)
            if kind is not None:
                self._fault(
                    {"time": self.last_time_str, "rank": "", "kind": kind, "message": stripped, "text": stripped}
                )
            return
        kind = classify_fatal(line)
        if kind == "scheduler_exception" and stripped.endswith(":"):
            # "Exception in ControllerSingle:" (2024): the traceback follows on the next lines.
            self._open_block(kind, self.last_time_str, "", stripped)
            return
        if kind is not None:
            self._fault(
                {"time": self.last_time_str, "rank": "", "kind": kind, "message": stripped, "text": stripped}
            )
            return
        if is_tqdm(line) or stripped.startswith(("INFO:", "WARNING:", "ERROR:", "DEBUG:")):
            return
        if stripped.startswith("#running-req:"):
            # The earliest 2024 builds logged decode stats without a "Decode batch" head.
            self._message("Decode batch. " + stripped, self.last_time_str, "", line, cut)
            return
        # A bare scheduler or startup line (some wrappers drop the prefix).
        if stripped.startswith('File "') or stripped.startswith("File '"):
            # A traceback pasted without its first line.
            self._open_block(None, self.last_time_str, "", stripped)
            self._block_body_started = True
            return
        if stripped.startswith(("Decode batch", "Prefill batch", "new fill batch", "KV cache pool is full", "server_args=", "Load weight", "KV Cache is allocated", "Capture ", "max_total_num_tokens=", "The server is fired up")):
            self._message(stripped, self.last_time_str, "", line, cut)
            return
        if "glm5lib stand-in server" in line:
            self._message(stripped, self.last_time_str, "", line, cut)
            return
        self._skip(line)

    # ---- scheduler
    def _shape(self, kind: str, keys: tuple[str, ...]) -> Shape:
        shape = self.shapes.get((kind, keys))
        if shape is None:
            shape = self.shapes[(kind, keys)] = Shape(kind, keys)
        return shape

    def _add(self, kind: str, keys: tuple[str, ...], vals: tuple[str, ...], stamp: str, rank: str, it: str | None = None) -> None:
        shape = self._shape(kind, keys)
        shape.order.append(self.lines)
        shape.rows.append((stamp, rank, it, *vals))

    def _scheduler(self, kind: str, msg: str, stamp: str, rank: str, line: str, cut: bool) -> None:
        if cut and "#queue" not in msg and "#remaining_req" not in msg:
            # The final line of a file still being written, or of a cut paste.
            self._skip(line)
            return
        parsed = parse_scheduler_msg(msg)
        if parsed is None:
            self._skip(line)
            return
        keys, vals, it, raw_keys, head = parsed
        self._add(kind, keys, vals, stamp, rank, it)
        if raw_keys is None and it is None and keys[0].startswith("mixed_") and len(self._fast_patterns) < 256:
            entry = self._learn_mixed(keys, vals, head, msg, line)
            if entry is not None:
                bucket = self._fast.setdefault(bucket_key(line), [])
                if entry not in bucket:
                    bucket.append(entry)
        if raw_keys is not None and len(self._fast_patterns) < 256:
            entry = self._learn(kind, keys, head, raw_keys, line)
            if entry is not None:
                bucket = self._fast.setdefault(bucket_key(line), [])
                if entry not in bucket:
                    bucket.append(entry)

    def _learn(self, kind: str, keys: tuple[str, ...], head: str, raw_keys: list[str], line: str) -> Any:
        regex = shape_regex(head, raw_keys)
        entry = self._fast_patterns.get(regex.pattern)
        if entry is None and regex.match(line):
            shape = self._shape(kind, keys)
            entry = self._fast_patterns[regex.pattern] = (regex.match, shape.order.append, shape.rows.append)
            self.learned.append((shape, head, list(raw_keys), None))
        return entry

    def _learn_mixed(self, keys: tuple[str, ...], vals: tuple[str, ...], head: str, msg: str, line: str) -> Any:
        """A fast-path regex for ``Prefill batch(mixed #running-req: N). #new-seq: ...`` lines
        (one in a few dozen lines of a busy server's log), learned from one parsed line.

        Values may not hold spaces, commas, brackets or a final dot, so that every line it
        matches splits into the same keys and values as :func:`parse_scheduler_msg` gives;
        others go line by line."""
        rest = msg[len(head) :]
        close = rest.find(")")
        if not rest.startswith("(mixed ") or close < 0 or rest[close + 1 : close + 3] not in (". ", ", "):
            return None
        inner_parts = rest[len("(mixed ") : close].split(", ")
        parts = [*inner_parts, *rest[close + 3 :].rstrip(", ").split(", ")]
        raw_keys = [p.rpartition(": ")[0] for p in parts]
        if len(raw_keys) != len(keys) or any(not k or k != k.strip() or any(c in k for c in "[\x1b,:()") for k in raw_keys):
            return None
        value = FAST_VALUE
        inner = ", ".join(re.escape(k) + ": " + value for k in raw_keys[: len(inner_parts)])
        body = ", ".join(re.escape(k) + ": " + value for k in raw_keys[len(inner_parts) :])
        # "(?:(\[)(?!))?" never matches: the iteration group, None as on the slow path.
        pattern = SHAPE_PREFIX + re.escape(head) + r"(?:(\[)(?!))?\(mixed " + inner + r"\)[.,] " + body + r"\.?(?:, ?)?$"
        entry = self._fast_patterns.get(pattern)
        if entry is None:
            regex = re.compile(pattern)
            m = regex.match(line)
            if m is None or m.groups()[3:] != vals:
                return None
            shape = self._shape("prefill", keys)
            entry = self._fast_patterns[pattern] = (regex.match, shape.order.append, shape.rows.append)
            self.learned.append((shape, head, raw_keys, len(inner_parts)))
        return entry

    def feed_chunk(self, chunk: bytes, crs: bool) -> None:
        """Parse a piece of a file made of whole lines (it ends with a newline); ``crs`` says the
        file holds a carriage return somewhere, so lines also break where ``str.splitlines``
        breaks. Scheduler and access lines are read by whole-buffer regexes, the rest line by
        line (see :mod:`glm5lib.logs.chunked`)."""
        feed_chunk(self, chunk, crs)

    def feed_bulk(self, lines: list[str]) -> None:
        """Parse complete lines of a whole file (or of its start): as :meth:`feed` of lines
        none of which is cut, taking the first time from the first dated line near the start
        of a whole file (as the chunked path does)."""
        if self.scan_first_time and self.first_time is None and self.lines < _FIRST_TIME_LINES:
            for line in lines[: _FIRST_TIME_LINES - self.lines]:
                m = PREFIX_RE.match(line)
                if m is not None and m.group(1):
                    self.first_time = f"{m.group(1)} {m.group(2).replace(',', '.')}"
                    break
        self._feed(lines)

    def finish(self) -> None:
        """The input has ended: close an open traceback and a pending ``server_args`` line."""
        self._close_blocks()
        if self._args_buffer is not None:
            self._try_finish_args(final=True)

    def _retract_fast(self, index: int, groups: tuple[str | None, ...]) -> None:
        shape = self._retract_shape
        if shape is None:
            shape = self._retract_shape = self._shape("retract", RETRACT_COLUMNS)
        shape.order.append(index)
        shape.rows.append(groups)

    def _retract(self, msg: str, stamp: str, rank: str, line: str) -> None:
        body = msg.split("Retract requests.", 1)[1] if "Retract requests." in msg else msg.split(".", 1)[-1]
        keys: list[str] = []
        vals: list[str] = []
        for part in body.strip().rstrip(".,").split(", "):
            key, sep, val = part.partition(": ")
            if not sep:
                continue
            key = key.strip()
            if "->" in val and "new_token_ratio" in key:
                before, _, after = val.partition("->")
                keys += ["new_token_ratio_before", "new_token_ratio_after"]
                vals += [before.strip(), after.strip().rstrip(".,")]
            else:
                keys.append(column_name(key))
                vals.append(val.strip().rstrip(".,"))
        if "retracted_reqs" not in keys:
            self._skip(line)
            return
        self._add("retract", tuple(keys), tuple(vals), stamp, rank)

    # ---- server args
    def _try_finish_args(self, final: bool) -> None:
        buf = self._args_buffer or ""
        closed = closes(buf.split("ServerArgs(", 1)[-1].replace("\n", ""))
        if closed or final:
            parsed = parse_server_args(buf)
            if not self.server_args or len(parsed) >= len(self.server_args):
                self.server_args = dict(parsed)
                self.server_args_incomplete = parsed.incomplete
            self._args_buffer = None

    # ---- tracebacks
    def _open_block(self, kind: str | None, stamp: str | None, rank: str, first: str) -> None:
        if self._open_blocks and self._block_body_started:
            # A second traceback in the body: chained ("During handling...") or another rank's.
            if first.strip().startswith("Traceback") and not rank:
                self._block_text(first)
                return
            self._close_blocks()
        self._open_blocks.append({"time": stamp, "rank": rank, "head": kind, "lines": [first.strip()]})

    def _block_text(self, line: str) -> None:
        if line.strip():
            self._block_body_started = True
        for block in self._open_blocks:
            block["lines"].append(line)

    def _fault(self, row: dict[str, Any]) -> None:
        """An error row, unless the server was already stopping: what SGLang logs after it was told
        to stop (0.5.16: its scheduler "crashed with exit code -15", SIGQUIT, kill_process_tree) is
        the stop that was asked for, counted in ``startup['errors_during_shutdown']``."""
        if "shutdown_requested_at" in self.startup:
            self.startup["errors_during_shutdown"] = self.startup.get("errors_during_shutdown", 0) + 1
            return
        self.errors.append(row)

    def _close_blocks(self) -> None:
        if not self._open_blocks:
            return
        for block in self._open_blocks:
            self._fault(block_row(block))
        self._open_blocks = []
        self._block_body_started = False

    # ---- tables
    def build(self) -> ServerLog:
        errors = self._errors_table()
        server_args = dict(self.server_args)
        incomplete = self.server_args_incomplete
        if self._args_buffer is not None:
            parsed = parse_server_args(self._args_buffer)
            if len(parsed) >= len(server_args):
                server_args, incomplete = dict(parsed), parsed.incomplete
        return ServerLog(
            server_args=server_args,
            server_args_incomplete=incomplete,
            startup={**self._startup_other, **self.startup},
            ready_at=_timestamp(self.ready_at),
            decode=self._frame("decode", DECODE_COLUMNS),
            prefill=self._frame("prefill", PREFILL_COLUMNS),
            retractions=self._frame("retract", RETRACT_COLUMNS),
            errors=errors,
            http=self._http_table(),
            skipped=self.skipped,
            skipped_examples=list(self.skipped_examples),
            standin=self.standin,
            standin_path=self.standin_path,
            became_ready=self.became_ready,
            lines=self.lines,
            first_time=_timestamp(self.first_time),
            last_time=_timestamp(self.last_time_str),
        )

    def drain(self) -> ServerLog:
        """The rows read since the last drain (a traceback still open waits until it closes),
        let go of here; the log's facts (server args, start-up, times) as so far."""
        open_blocks, self._open_blocks = self._open_blocks, []
        try:
            slog = self.build()
        finally:
            self._open_blocks = open_blocks
        self.errors = []
        self._errors_kept = 0
        for shape in self.shapes.values():
            del shape.rows[:], shape.order[:], shape.raw[:], shape.frames[:]
        del self.http_rows[:]
        self.http_frames = []
        self._http_done = None
        self._tables.clear()
        return slog

    def _errors_table(self) -> pd.DataFrame:
        """The error rows so far, tracebacks still open included (as they read so far)."""
        open_rows = [block_row(b) for b in self._open_blocks]
        if not self.reuse_frames:
            return errors_frame(list(self.errors) + open_rows)
        # A follower: closed rows are appended to the table kept from earlier builds.
        table = self._tables.get("errors")
        if table is None:
            table = self._tables["errors"] = GrowingTable()
        if len(self.errors) > self._errors_kept:
            table.append(errors_frame(self.errors[self._errors_kept :]))
            self._errors_kept = len(self.errors)
        if not len(table):
            return errors_frame(open_rows)
        if open_rows:
            return pd.concat([table.frame(), errors_frame(open_rows)], ignore_index=True, sort=False)
        return table.frame()

    def _http_table(self) -> pd.DataFrame:
        """The access lines read so far, in log order. What was read since the last build is
        added to the table kept from it (a follower builds again and again)."""
        if not self.http_frames and self._http_done is None:
            return http_frame([r[1:] for r in self.http_rows])  # all read line by line
        new = list(self.http_frames)
        if self.http_rows:
            rows = http_frame([r[1:] for r in self.http_rows])
            rows.insert(0, "_order", np.array([r[0] for r in self.http_rows], dtype=np.int64))
            new.append(rows)
            del self.http_rows[:]
        self.http_frames = []
        new = [f for f in new if len(f)]
        if new:
            # Lines read line by line fall between those read in bulk (all of them after what
            # earlier builds kept): joined in line order, a column at a time.
            if len(new) == 1:
                part = new[0]
            elif all(a["_order"].iat[-1] < b["_order"].iat[0] for a, b in pairwise(new)):
                part = pd.concat(new, ignore_index=True, sort=False)  # in order already
            else:
                part = _joined(new)
            del new
            part = part.assign(time=to_timestamps(part["time"]).to_numpy())
            part.pop("_order")
            if self.reuse_frames:
                # A follower: the rows are appended to the table kept from earlier builds.
                if self._http_done is None:
                    self._http_done = GrowingTable()
                self._http_done.append(part)
            else:
                self._http_done = part
            del part
        if self._http_done is None:
            return http_frame([])
        if self.reuse_frames:
            return self._http_done.frame()
        # Nobody builds again: the kept table becomes the result, without a copy.
        frame, self._http_done = self._http_done, None
        return frame.reset_index(drop=True) if not isinstance(frame.index, pd.RangeIndex) or frame.index.start else frame

    def _frame(self, kind: str, columns: tuple[str, ...]) -> pd.DataFrame:
        if self.reuse_frames:
            return self._grown_frame(kind, columns)
        shapes = [sh for sh in self.shapes.values() if sh.kind == kind and (sh.rows or sh.frames or sh.raw)]
        parts = _typed_parts(shapes)
        if not parts:
            return empty_frame(["time", "rank", *columns])
        # Nobody builds again: rows go into log order a column at a time, so that the table
        # is made once (a join then a take would make it twice), and the parts go before the
        # take below copies the table, so that two copies of it are alive at most, not three.
        parts.sort(key=lambda f: int(f["_order"].min()))
        frame = parts[0] if len(parts) == 1 else _joined(parts)
        for shape in shapes:
            shape.frames.clear()
        parts.clear()
        return _finished(frame, kind, columns)

    def _grown_frame(self, kind: str, columns: tuple[str, ...]) -> pd.DataFrame:
        """A follower's table: the rows typed since the last build are appended to the table
        kept from it (:class:`GrowingTable`), so that a build costs what its new rows cost."""
        shapes = [sh for sh in self.shapes.values() if sh.kind == kind and (sh.rows or sh.raw)]
        table = self._tables.get(kind)
        if table is None:
            table = self._tables[kind] = GrowingTable(refinish=lambda f: _finished(f, kind, columns, ordered=True))
        if shapes:
            parts = _typed_parts(shapes)
            for shape in shapes:
                shape.frames.clear()  # kept by the table from now on
            parts.sort(key=lambda f: int(f["_order"].min()))
            single = len(parts) == 1
            frame = parts[0] if single else pd.concat(parts, ignore_index=True, sort=False)
            table.append(_finished(frame, kind, columns, ordered=single))
        if not len(table):
            return empty_frame(["time", "rank", *columns])
        return table.frame()



def _typed_parts(shapes: list[Any]) -> list[pd.DataFrame]:
    """The shapes' typed tables: the rows read since the last build typed (a follower builds
    often), with the tables typed before."""
    parts = []
    for shape in shapes:
        if shape.rows or shape.raw:
            pieces = list(shape.raw)
            if shape.rows:
                table = np.empty((len(shape.rows), 3 + len(shape.columns)), dtype=object)
                table[:] = shape.rows
                ranks = table[:, 1]
                ranks[np.equal(ranks, None)] = ""
                pieces.append({
                    "_order": np.array(shape.order, dtype=np.int64),
                    "time": to_timestamps(pd.Series(table[:, 0], dtype=object)).to_numpy(),
                    "rank": ranks,
                    "iter": None if np.equal(table[:, 2], None).all() else table[:, 2],
                    "values": [table[:, 3 + k] for k in range(len(shape.columns))],
                })
            shape.frames.append(typed_frame(shape.columns, pieces))
            del shape.rows[:], shape.order[:], shape.raw[:]  # the fast path keeps appending to these lists
            if len(shape.frames) > 8:
                shape.frames[:] = [pd.concat(shape.frames, ignore_index=True, sort=False)]
        if len(shape.frames) > 1 and any("iter" in f.columns for f in shape.frames):
            # Rows of one shape, with and without iteration numbers, read by different paths:
            # every part gets the column, so it lands where one frame of the shape puts it.
            for f in shape.frames:
                if "iter" not in f.columns:
                    f.insert(3, "iter", np.nan)
        parts.extend(shape.frames)
    return parts


def _finished(frame: pd.DataFrame, kind: str, columns: tuple[str, ...], ordered: bool = True) -> pd.DataFrame:
    """Joined scheduler rows -> the table: times typed, hybrid pools filled, missing columns
    added, columns (then extras, in the order the log first shows them) and, unless
    ``ordered``, rows (by their ``_order``) put in order by one take."""
    base = ["time", "rank", *columns]
    if "iter" in frame.columns and frame["iter"].isna().all():
        frame = frame.drop(columns="iter")
    frame["time"] = to_timestamps(frame["time"])
    if kind in ("decode", "prefill"):
        fill_hybrid(frame)
    for c in columns:
        if c not in frame.columns:
            frame[c] = pd.array([pd.NA] * len(frame), dtype="boolean") if c == "cuda_graph" else np.nan
    if "cuda_graph" in frame.columns and frame["cuda_graph"].dtype == object:
        try:
            frame["cuda_graph"] = frame["cuda_graph"].astype("boolean")
        except (TypeError, ValueError):
            pass  # a mangled value ("True0") among them: the column stays as read, as other columns do
    extras = [c for c in frame.columns if c not in base and c != "_order"]
    keep = [frame.columns.get_loc(c) for c in base + extras]
    if ordered or "_order" not in frame.columns:
        return frame.iloc[:, keep]
    perm = np.argsort(frame["_order"].to_numpy(), kind="stable")
    frame = frame.iloc[perm, keep]
    frame.index = pd.RangeIndex(len(frame))
    return frame



def _joined(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """``pd.concat(parts)`` in the order of the ``_order`` column, made a column at a time:
    each column joined as concat joins it (a part without it fills it as concat does), then
    put in order, so that only one column is ever there twice."""
    order = np.concatenate([p["_order"].to_numpy() for p in parts])
    perm = np.argsort(order, kind="stable")
    del order
    names: dict[str, None] = {}
    for p in parts:
        names.update(dict.fromkeys(p.columns))
    columns: dict[str, Any] = {}
    for name in names:
        if all(name in p.columns for p in parts):
            arrays = [p[name].array for p in parts]
            kinds = {a.dtype for a in arrays if isinstance(a, pd.arrays.NumpyExtensionArray)}
            if len(kinds) == 1 and len(arrays) == sum(isinstance(a, pd.arrays.NumpyExtensionArray) for a in arrays):
                dtype = kinds.pop()
                if dtype.kind in "iufbM":
                    # One numpy type in every part: joined as concat joins it, without its frames.
                    columns[name] = _unconsolidated(np.concatenate([a.to_numpy() for a in arrays])[perm])
                    del arrays
                    continue
            del arrays
            # Every part has it: the column is its parts' columns joined (as the tables' concat joins them).
            columns[name] = pd.concat([p[name] for p in parts], ignore_index=True).array.take(perm)
            continue
        if all(p[name].dtype in (np.float64, np.int64) for p in parts if name in p.columns):
            # Numbers, missing from some parts: floats with NaN there (as concat fills them).
            columns[name] = _unconsolidated(np.concatenate([
                p[name].to_numpy(dtype=np.float64) if name in p.columns else np.full(len(p), np.nan) for p in parts
            ])[perm])
            continue
        pieces = [p[[name]] if name in p.columns else pd.DataFrame(index=pd.RangeIndex(len(p))) for p in parts]
        joined = pd.concat(pieces, ignore_index=True, sort=False)[name]
        columns[name] = joined.array.take(perm)
        del pieces, joined
    return pd.DataFrame(columns, copy=False)


def _unconsolidated(values: np.ndarray) -> Any:
    """A column for ``pd.DataFrame(columns, copy=False)`` that it keeps as it is (numpy arrays of
    one type it would copy into one block: the whole table twice at once)."""
    return pd.arrays.NumpyExtensionArray(values)


def _timestamp(stamp: str | None) -> pd.Timestamp | None:
    """A stamp as printed -> Timestamp; None when there is none or it is no date (2025-02-30)."""
    if not stamp:
        return None
    try:
        return pd.Timestamp(stamp)
    except ValueError:
        return None


# The public name of the parser, for other engines' adapters and for tests.
SGLangParser = _Parser

# What only SGLang (or glm5lib's stand-in, which writes SGLang's lines) prints.
_SGLANG_MARKS = (
    "server_args=ServerArgs(",
    "Decode batch",
    "Prefill batch",
    "glm5lib stand-in server",
    "sglang",
    "The server is fired up and ready to roll",
)


def _detect(head: str) -> bool:
    return any(mark in head for mark in _SGLANG_MARKS)


def _new_parser(date: str | None = None, *, incremental: bool = True) -> _Parser:
    parser = _Parser(date=date)
    # A follower builds again and again and keeps its tables; a whole parse builds once, and
    # takes its first time from the first dated line near its start.
    parser.reuse_frames = incremental
    parser.scan_first_time = not incremental
    return parser


ENGINE = LogEngine(name="sglang", detect=_detect, new_parser=_new_parser, cap_keys=("max_running_requests",),
                   important_args=IMPORTANT_ARGS, args_digest=args_digest)
