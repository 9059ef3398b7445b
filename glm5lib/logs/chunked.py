"""The chunked path: a log read a piece at a time, its frequent lines read by numpy and regexes.

A busy server's log is mostly uvicorn access lines, then ``Prefill batch`` and ``Decode batch``
lines. Here each piece of the file (whole lines, a few megabytes) is read over its raw bytes,
and the values land in column arrays: no Python object per line for those. Access lines are
read a distinct line at a time (:mod:`glm5lib.logs.access`: lines alike but for the port are
one), scheduler lines of a learned shape are split into columns by numpy, the shape's regex
reading one of them (:mod:`glm5lib.logs.fields`), and what those leave goes through one
compiled regex per line shape. Everything else (start-up, tracebacks, NCCL chatter, progress bars,
lines of a shape not seen yet, anything odd) goes to the line-by-line parser, which stays the
reference: the state it keeps (the clock, open tracebacks, a wrapped ``server_args`` line) is
applied at each boundary between the two exactly as a line-by-line read would apply it, and
tests check that both give the same tables.

The regexes here only take lines that the line-by-line parser would read the same way: pure
ASCII, no escape sequence, no ``[`` in an access line, no line-break character but the final
newline, and scheduler values without spaces, commas, brackets or a final dot. Any other line
is left to the line-by-line parser.
"""

from __future__ import annotations

import gc
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from glm5lib.logs.access import access_frame, access_lines
from glm5lib.logs.fields import Windows, split_lines
from glm5lib.logs.tables import convert_column, to_timestamps
from glm5lib.logs.text import PREFIX_RE, split_chunk

__all__ = [
    "ACCESS_RE",
    "decimals",
    "feed_chunk",
    "read_lines",
    "typed_frame",
]

# What no line read here may hold: a line break (other than its final newline, which the
# regexes look ahead to), an escape, a byte of a non-ASCII character, a "[" (so nothing is glued on).
_NOT = rb"\n\r\x0b\x0c\x1c-\x1f\x1b\x80-\xff\["
# One scheduler value, as SGLang's scheduler FAST_VALUE but over ASCII bytes.
_VALUE = rb"([^ \t," + _NOT + rb"()]*[^ \t,." + _NOT + rb"()])"
_PREFIX = (
    rb"\n\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)(?: ([A-Z][A-Z_]*\d+(?: [A-Z][A-Z_]*\d+)*))?\] "
)
_LINE_END = rb"\.?(?:, ?)?\r?(?=\n)"
# A uvicorn access line as the line-by-line fast path reads it (glm5lib.logs.text.UVICORN_RE
# after "INFO:  "): client, method, path, status; the rest of the line is anything allowed.
_NONSPACE = rb"[^ \t" + _NOT + rb"]"
ACCESS_RE = re.compile(
    rb"\nINFO:  [ \t]*+(" + _NONSPACE + rb"+?):\d++ - \"(\w++) (" + _NONSPACE + rb"++) [^\"" + _NOT + rb"]*+\" (\d\d\d)"
    rb"[^" + _NOT + rb"]*+\r?(?=\n)"
)
_BOOL_BYTES = (b"True", b"False", b"true", b"false")
# Bytes a plain number may hold (numpy then reads it as int() or float() would); 0 pads.
_NUMERIC = np.zeros(256, dtype=bool)
_NUMERIC[list(b"0123456789.-")] = True
_NUMERIC[0] = True
# Lines of one signature that no shape took before, few enough to go line by line untried.
_FEW_UNTAKEN = 64
# Fewer lines of a shape than this are read by its regex (splitting them costs more).
_FEW_TO_SPLIT = 24
# Lines whose prefixes the whole-file parse scans for the first dated time (as feed_bulk does).
_FIRST_TIME_LINES = 1000


_STAMP_DIGITS = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
_STAMP_SEPARATORS = {4: ord("-"), 7: ord("-"), 10: ord(" "), 13: ord(":"), 16: ord(":"), 19: ord(".")}


def _stamps(block: np.ndarray) -> np.ndarray:
    """Rows of bytes ``YYYY-MM-DD HH:MM:SS[.ffffff]`` -> datetime64[ns].

    Plain digit arithmetic for the usual stamps (numpy's string parser takes five times as
    long); anything unusual (out of range, another layout) goes to numpy's parser, which
    decides as it always did."""
    n, w = block.shape
    if w == 19 or 21 <= w <= 26:
        seps_ok = all((block[:, k] == c).all() for k, c in _STAMP_SEPARATORS.items() if k < w)
        d = block[:, _STAMP_DIGITS + list(range(20, w))].astype(np.int64) - 48
        if seps_ok and n and ((d >= 0) & (d <= 9)).all():
            year = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
            month, day = d[:, 4] * 10 + d[:, 5], d[:, 6] * 10 + d[:, 7]
            hour, minute, sec = d[:, 8] * 10 + d[:, 9], d[:, 10] * 10 + d[:, 11], d[:, 12] * 10 + d[:, 13]
            if (
                (year >= 1678).all() and (year <= 2261).all() and (month >= 1).all() and (month <= 12).all()
                and (day >= 1).all() and (hour <= 23).all() and (minute <= 59).all() and (sec <= 59).all()
            ):
                # Days since 1970 of each distinct date, by numpy (which refuses 2025-02-30).
                key = year * 10000 + month * 100 + day
                if (key == key[0]).all():  # (one date: the usual case in a piece, no sort)
                    dates, inverse = key[:1], np.zeros(n, dtype=np.int64)
                else:
                    dates, inverse = np.unique(key, return_inverse=True)
                try:
                    days = np.array(
                        [f"{v // 10000:04d}-{v // 100 % 100:02d}-{v % 100:02d}" for v in dates.tolist()],
                        dtype="datetime64[D]",
                    ).astype(np.int64)
                except ValueError:
                    days = None
                if days is not None:
                    ns = (days[inverse.ravel()] * 86400 + hour * 3600 + minute * 60 + sec) * 1_000_000_000
                    for k in range(14, d.shape[1]):  # the fraction of a second, digit by digit
                        ns += d[:, k] * 10 ** (8 - (k - 14))
                    return ns.view("datetime64[ns]")
    # (Through str: numpy 1.x crashes parsing a bad date from bytes instead of raising.)
    return np.ascontiguousarray(block).view(f"S{w}").ravel().astype(str).astype("datetime64[ns]")


class _ChunkShape:
    """A learned scheduler shape, as a regex over a chunk's bytes."""

    __slots__ = ("follow", "has_iter", "needle", "regex", "shape")

    def __init__(self, shape: Any, head: str, raw_keys: list[str], inner: int | None) -> None:
        self.shape = shape
        self.needle = head.encode("ascii")
        keys = [re.escape(k.encode("ascii")) for k in raw_keys]
        if inner is None:
            body = b", ".join(k + b": " + _VALUE for k in keys)
            pattern = _PREFIX + re.escape(self.needle) + rb"(?: \[(\d+)\])?[.,] " + body + _LINE_END
            self.has_iter = True
            self.follow = b" .,"
        else:
            inside = b", ".join(k + b": " + _VALUE for k in keys[:inner])
            body = b", ".join(k + b": " + _VALUE for k in keys[inner:])
            # "(?:(\[)(?!))?" never matches: the iteration group, None as on the other paths.
            pattern = (
                _PREFIX + re.escape(self.needle) + rb"(?:(\[)(?!))?\(mixed " + inside + rb"\)[.,] " + body + _LINE_END
            )
            self.has_iter = False
            self.follow = b"("
        self.regex = re.compile(pattern)


def _chunk_shapes(parser: Any) -> list[_ChunkShape]:
    """The parser's learned shapes as chunk regexes (compiled once, as they are learned)."""
    shapes: list[_ChunkShape] = parser.__dict__.setdefault("_chunk_shapes", [])
    for shape, head, raw_keys, inner in parser.learned[len(shapes) :]:
        try:
            shapes.append(_ChunkShape(shape, head, raw_keys, inner))
        except UnicodeEncodeError:
            shapes.append(None)  # a non-ASCII key: its lines go line by line
    return [s for s in shapes if s is not None]


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while one chunk is parsed (a fraction of a second),
    back to how it was after it, whatever happens.

    A chunk makes a few hundred thousand small tuples and no cycles: collections would walk
    them again and again for nothing (a third of the time). Between chunks it runs as usual."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def feed_chunk(parser: Any, chunk: bytes, crs: bool) -> None:
    """Parse ``chunk`` (whole lines, ending with a newline) into ``parser`` (a SGLang parser)."""
    if not chunk:
        return
    if not chunk.endswith(b"\n"):
        raise ValueError("a chunk must end with a newline")
    with _collector_paused():
        _feed_chunk(parser, chunk, crs)


def _feed_chunk(parser: Any, chunk: bytes, crs: bool) -> None:
    base = parser.lines
    buf = b"\n" + chunk
    arr = np.frombuffer(buf, dtype=np.uint8)
    nl = np.flatnonzero(arr == 10)  # nl[k] precedes line k; the last one ends the chunk
    n = len(nl) - 1
    if getattr(parser, "scan_first_time", False) and parser.first_time is None and base < _FIRST_TIME_LINES:
        _scan_first_time(parser, buf, nl, _FIRST_TIME_LINES - base, crs)

    # ---- find the lines of known shapes, in C
    kind = np.zeros(n, dtype=np.int8)  # 0: line by line, 1: scheduler, 2: access, 3: access demoted
    found: list[tuple[Any, ...]] = []
    if b"batch" in chunk:
        shapes = _chunk_shapes(parser)
        if shapes:
            found = _scheduler_lines(parser, shapes, buf, arr, nl)
            for _cs, idx, _table in found:
                kind[idx] = 1
    acc_idx, acc_rows, acc_codes, _ = access_lines(ACCESS_RE, buf, arr, nl, n, read_lines)
    if len(acc_idx):
        kind[acc_idx] = 2

    # Scheduler lines in line order with their times: they set the clock.
    if found:
        sched_idx = np.concatenate([f[1] for f in found])
        found = [(cs, idx, table, _times(table[0])) for cs, idx, table in found]  # typed once
        sched_time = np.concatenate([f[3] for f in found])
        order = np.argsort(sched_idx, kind="stable")
        sched_idx, sched_time = sched_idx[order], sched_time[order]
    else:
        sched_idx = np.empty(0, dtype=np.int64)
        sched_time = np.empty(0, dtype="datetime64[ns]")

    nl_at = nl.tolist()
    sched_at = sched_idx.tolist()
    clock_start = parser.last_time_str

    def settle(lo: int, hi: int, j: int) -> None:
        """What lines lo..hi-1, all read in bulk, do to the line-by-line parser's state
        (``j``: the index in sched_idx of the last scheduler line before ``hi``)."""
        if parser._args_buffer is not None:
            parser._try_finish_args(final=True)  # the first of them starts with "[" (see demote)
        if parser._open_blocks:
            parser._close_blocks()
        if j >= 0 and sched_at[j] >= lo:
            m = _PREFIX_STAMP.match(buf, nl_at[sched_at[j]] + 1)
            parser._set_clock(m.group(1).decode("ascii"))

    # ---- everything else, line by line
    gaps_a = np.flatnonzero(kind == 0)
    if (
        _one_line_per_newline(chunk, crs) and parser._args_buffer is None
        and not _may_start_args(chunk if 4 * len(gaps_a) > n else b"".join([buf[nl_at[i] : nl_at[i + 1]] for i in gaps_a.tolist()]))
    ):
        # All at once: no line here can hold a wrapped server_args line open across the lines
        # read in bulk, and each newline ends exactly one line. (Only lines left to the line-by-line
        # parser may start one: the others are read as scheduler or access lines, line by line too.)
        gaps = gaps_a.tolist()
        marks: list[tuple[int, str | None]] = []
        parser._feed(_Lines(buf, nl_at, kind, sched_at, gaps, crs), gaps, base=base, marks=marks)
        clock_pos = [-1, *(m[0] for m in marks)]
        clock_val = [clock_start, *(m[1] for m in marks)]
        extra_pos, extra_cum, extra = [], [], 0
    else:
        clock_pos, clock_val, extra_pos, extra_cum, extra = _runs(
            parser, buf, nl_at, kind, n, base, crs, sched_at, sched_idx, settle
        )
    parser.lines = base + n + extra
    _finish_chunk(parser, _BulkRows(found, kind, acc_idx, (acc_rows, acc_codes), sched_idx, sched_time,
                                    clock_pos, clock_val, extra_pos, extra_cum, base))


def _runs(parser, buf, nl_at, kind, n, base, crs, sched_at, sched_idx, settle):
    """The lines not read in bulk, run by run, when a run may leave the parser's state open."""

    def demote(b: int, extra: int) -> int:
        """Access lines after a wrapped ``server_args`` line belong to it (as line by line)."""
        while parser._args_buffer is not None and b < n and kind[b] == 2:
            parser._feed(split_chunk(buf[nl_at[b] + 1 : nl_at[b + 1] + 1], crs), base=base + b + extra)
            kind[b] = 3
            b += 1
        return b

    gap = kind == 0
    edges = np.diff(np.concatenate(([0], gap.view(np.int8), [0])))
    gap_starts_a, gap_ends_a = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    last_sched = (np.searchsorted(sched_idx, gap_starts_a) - 1).tolist()  # before each run
    gap_starts, gap_ends = gap_starts_a.tolist(), gap_ends_a.tolist()
    clock_pos: list[int] = [-1]
    clock_val: list[str | None] = [parser.last_time_str]
    extra_pos: list[int] = []
    extra_cum: list[int] = []
    extra = 0
    done = demote(0, 0)
    if done:
        clock_pos.append(done - 1)
        clock_val.append(parser.last_time_str)
    for a, b, j in zip(gap_starts, gap_ends, last_sched, strict=True):
        if a > done:
            settle(done, a, j)
        lines = split_chunk(buf[nl_at[a] + 1 : nl_at[b] + 1], crs)
        parser._feed(lines, base=base + a + extra)
        extra += len(lines) - (b - a)
        b = demote(b, extra)
        clock_pos.append(b - 1)
        clock_val.append(parser.last_time_str)
        extra_pos.append(b - 1)
        extra_cum.append(extra)
        done = b
    if done < n:
        settle(done, n, len(sched_at) - 1)
    return clock_pos, clock_val, extra_pos, extra_cum, extra


@dataclass(slots=True)
class _BulkRows:
    """What one chunk's bulk reading found, and where its lines sit in the whole log."""

    found: list[tuple[Any, ...]]  # per scheduler shape: (its chunk regex, line indices, table, times)
    kind: np.ndarray  # per line: 0 line by line, 1 scheduler, 2 access, 3 access demoted
    acc_idx: np.ndarray  # the access lines' indices
    acc_rows: tuple[Any, np.ndarray]  # the access lines' distinct rows and each line's code
    sched_idx: np.ndarray  # the scheduler lines' indices, in line order
    sched_time: np.ndarray  # their times (datetime64[ns])
    clock_pos: list[int]  # the last line of each run read line by line (-1: before the chunk)
    clock_val: list[str | None]  # the parser's clock after it
    extra_pos: list[int]  # the last line of each run that counted more lines than newlines
    extra_cum: list[int]  # the lines counted in excess up to it
    base: int  # the whole log's line number of the chunk's first line

    def real(self, idx: np.ndarray) -> np.ndarray:
        """Line numbers of the whole log (runs split at a carriage return count more lines)."""
        if not self.extra_pos:
            return idx + self.base
        k = np.searchsorted(np.array(self.extra_pos, dtype=np.int64), idx)
        cum = np.concatenate(([0], np.array(self.extra_cum, dtype=np.int64)))
        return idx + self.base + cum[k]


def _finish_chunk(parser: Any, bulk: _BulkRows) -> None:
    """Rows read in bulk into the parser's tables, at their places in the whole log."""
    real = bulk.real
    # ---- scheduler rows into the shapes' frames
    for cs, idx, table, times in bulk.found:
        cs.shape.raw.append(_raw_part(cs, real(idx), table, times))
    bulk.found = []

    # ---- access rows: each takes the clock of the last line before it that set one
    acc_idx = bulk.acc_idx
    keep = bulk.kind[acc_idx] == 2 if len(acc_idx) else np.empty(0, dtype=bool)
    if keep.any():
        distinct, codes = bulk.acc_rows
        if not keep.all():
            codes, acc_idx = codes[keep], acc_idx[keep]
        gap_time = to_timestamps(pd.Series(bulk.clock_val, dtype=object)).to_numpy(dtype="datetime64[ns]")
        pos = np.concatenate((np.array(bulk.clock_pos, dtype=np.int64), bulk.sched_idx))
        val = np.concatenate((gap_time, bulk.sched_time))
        order = np.argsort(pos, kind="stable")
        pos, val = pos[order], val[order]
        frame = access_frame(distinct, codes)
        frame.insert(0, "time", val[np.searchsorted(pos, acc_idx, side="right") - 1])
        frame.insert(0, "_order", real(acc_idx))
        parser.http_frames.append(frame)


_PREFIX_STAMP = re.compile(rb"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)")
# What may start a server_args line (which may be wrapped and hold lines after it).
_ARGS_HEADS = (b"server_args=", b"ServerArgs(")


def _may_start_args(chunk: bytes) -> bool:
    """Whether a line of ``chunk`` may start a server_args line (a substring search per head:
    ten times faster than one regex with an alternation, which has no literal prefix to skip by)."""
    return any(head in chunk for head in _ARGS_HEADS)

# Characters other than "\n" at which str.splitlines breaks, in UTF-8.
_OTHER_BREAKS = (b"\x0b", b"\x0c", b"\x1c", b"\x1d", b"\x1e", b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9")


def _one_line_per_newline(chunk: bytes, crs: bool) -> bool:
    """Whether each newline of ``chunk`` ends exactly one line (no other break counts, or none
    is there but the carriage return of a CRLF)."""
    if not crs:
        return True
    if b"\r" in chunk and chunk.count(b"\r") != chunk.count(b"\r\n"):  # (a search first: most pieces hold none)
        return False
    breaks = _OTHER_BREAKS[:5] if chunk.isascii() else _OTHER_BREAKS  # the last three are not ASCII
    return not any(b in chunk for b in breaks)


class _Lines:
    """The lines of a chunk as the line-by-line parser asks for them: a line left to it,
    decoded; a line read in bulk, the scheduler line whose time it leaves on the clock (the
    last one since the line-by-line parser's previous line), or "".

    The lines left to the parser are decoded at once (as the whole chunk would be: a newline
    is never part of a character), and the scheduler line before each run of lines read in
    bulk (what the parser asks for) is found for all of them at once."""

    __slots__ = ("before", "buf", "crs", "gaps", "kind", "nl", "sched", "texts")

    def __init__(self, buf: bytes, nl: list[int], kind: np.ndarray, sched: list[int], gaps: list[int], crs: bool):
        self.buf, self.nl, self.kind, self.sched, self.gaps, self.crs = buf, nl, kind, sched, gaps, crs
        texts = b"\n".join([buf[nl[i] + 1 : nl[i + 1]] for i in gaps]).decode("utf-8", errors="replace").split("\n")
        if crs:
            texts = [t[:-1] if t.endswith("\r") else t for t in texts]
        self.texts = dict(zip(gaps, texts, strict=True)) if gaps else {}
        # For the line just before each line left to the parser, when it was read in bulk: the
        # last scheduler line before it, unless a line left to the parser came after that one.
        self.before: dict[int, int] = {}
        if gaps:
            g = np.array(gaps, dtype=np.int64)
            prev = np.concatenate(([-1], g[:-1]))
            runs = g - 1 > prev
            s = np.array(sched, dtype=np.int64)
            j = np.searchsorted(s, g) - 1
            last = np.where(j >= 0, s[np.maximum(j, 0)] if len(s) else -1, -1)
            last = np.where(last > prev, last, -1)
            self.before = dict(zip((g[runs] - 1).tolist(), last[runs].tolist(), strict=True))

    def __len__(self) -> int:
        return len(self.nl) - 1

    def __getitem__(self, i: int) -> str:
        text = self.texts.get(i)
        if text is not None:
            return text
        if i < 0:
            i += len(self)
            text = self.texts.get(i)
            if text is not None:
                return text
        s = self.before.get(i)
        if s is None:
            j = bisect_right(self.sched, i) - 1
            if j < 0:
                return ""
            g = bisect_left(self.gaps, i) - 1
            if g >= 0 and self.gaps[g] > self.sched[j]:
                return ""  # a line read line by line came after it and set the clock itself
            s = self.sched[j]
        elif s < 0:
            return ""
        return self.buf[self.nl[s] + 1 : self.nl[s + 1]].decode("ascii")


def _holding_heads(arr: np.ndarray, nl: np.ndarray, heads: list[tuple[bytes, bytes]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each ``(head, follow)``: the lines holding ``"] " + head`` followed by one of the bytes
    ``follow``, and where that ``]`` first is in each: all found from one pass over the piece
    for its ``"] "`` (numpy, no Python per line), not one pass per head."""
    brackets = np.flatnonzero(arr[: max(len(arr) - 2, 0)] == 93)
    brackets = brackets[arr[brackets + 1] == 32]
    out = []
    for head, follow in heads:
        needle = b"] " + head
        at = brackets[brackets < len(arr) - len(needle)]
        for k in range(2, len(needle)):
            at = at[arr[at + k] == needle[k]]
        if follow:
            at = at[np.isin(arr[at + len(needle)], np.frombuffer(follow, dtype=np.uint8))]
        lines = np.searchsorted(nl, at) - 1
        first = np.concatenate(([True], lines[1:] != lines[:-1])) if len(lines) else np.empty(0, dtype=bool)
        out.append((lines[first], at[first]))
    return out


def read_lines(
    regex: re.Pattern[bytes], buf: bytes, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, list[Any]]:
    """Which of the lines ``buf[starts[k]:ends[k]]`` ``regex`` takes, and its groups for them.

    The lines are copied into a buffer of their own (a newline before each, the regex's
    anchor); when the regex takes all of them, findall says everything at once, otherwise
    finditer tells which."""
    group = b"\n" + b"\n".join([buf[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]) + b"\n"
    rows = regex.findall(group)
    if len(rows) == len(starts) or not rows:
        return np.arange(len(rows)), rows
    gnl = np.flatnonzero(np.frombuffer(group, dtype=np.uint8) == 10)
    at: list[int] = []
    rows = []
    for m in regex.finditer(group):
        at.append(m.start())
        rows.append(m.groups(b""))  # b"" where a group took no part, as findall gives
    return np.searchsorted(gnl, np.array(at, dtype=np.int64)), rows


def _scheduler_lines(
    parser: Any, shapes: list[_ChunkShape], buf: bytes, arr: np.ndarray, nl: np.ndarray
) -> list[tuple[_ChunkShape, np.ndarray, list[np.ndarray]]]:
    """(shape, line numbers, columns as bytes) of the scheduler lines of learned shapes.

    Lines holding a known head are grouped by their numbers of colons and commas (numpy, no
    Python per line), which tells shapes apart; each group's lines are copied into a buffer of
    their own and read by the regex of the shape that took that group before, so a regex is
    tried only on lines that are almost surely its own."""
    heads = sorted({(cs.needle, cs.follow) for cs in shapes})
    holding = _holding_heads(arr, nl, heads)
    head_of = np.concatenate([np.full(len(x[0]), k, dtype=np.int64) for k, x in enumerate(holding)])
    lines = np.concatenate([x[0] for x in holding])
    where = np.concatenate([x[1] for x in holding])
    if not len(lines):
        return []
    starts, ends = nl[lines] + 1, nl[lines + 1]
    if len(heads) == len(shapes):
        sig = head_of  # one shape per head: the head tells them apart
    else:
        # A line's head and its numbers of colons and spaces: lines of one shape share them
        # (values hold no space, so the spaces are the keys'), lines of two shapes seldom do.
        # A line's head, its number of colons after the head and a sum of the three bytes before
        # each (the keys' ends): lines of one shape share them, lines of two shapes seldom do
        # (and when they do, the group's lines are tried shape by shape all the same).
        at = np.flatnonzero(arr == 58)
        lo, hi = np.searchsorted(at, where), np.searchsorted(at, ends)
        code = np.zeros(len(at), dtype=np.uint64)
        for k in (1, 2, 3):
            code |= arr[np.maximum(at - k, 0)].astype(np.uint64) << np.uint64(8 * (k - 1))
        sums = np.concatenate((np.zeros(1, dtype=np.uint64), np.cumsum(code, dtype=np.uint64)))
        sig = (
            (head_of.astype(np.uint64) << np.uint64(56)) ^ (((hi - lo) & 0xFFFF).astype(np.uint64) << np.uint64(40))
            ^ ((sums[hi] - sums[lo]) & np.uint64((1 << 40) - 1))
        ).view(np.int64)
    order = np.argsort(sig, kind="stable")
    uniq, first = np.unique(sig[order], return_index=True)
    bounds = [*first.tolist(), len(order)]
    win = Windows(arr)
    memo: dict[int, _ChunkShape] = parser.__dict__.setdefault("_chunk_signatures", {})
    # Signatures whose lines no shape took all of, with the number of shapes there were then:
    # a few such lines (a line cut short, a clock without a date) go line by line at once
    # instead of through every shape's regex again in each piece, until a new shape is learned.
    untaken: dict[int, int] = parser.__dict__.setdefault("_chunk_untaken", {})
    taken: dict[int, tuple[_ChunkShape, list[np.ndarray], list[list[np.ndarray]]]] = {}
    for g, key in enumerate(uniq.tolist()):
        pending = order[bounds[g] : bounds[g + 1]]
        known = memo.get(key)
        head = heads[int(head_of[pending[0]])]
        others = [c for c in shapes if c is not known and (c.needle, c.follow) == head]  # the group's head only
        for cs in ([known] if known is not None else []) + others:
            if cs is not known and untaken.get(key) == len(shapes) and len(pending) < _FEW_UNTAKEN:
                break
            parts: list[tuple[np.ndarray, list[np.ndarray]]] = []
            split = None
            if len(pending) >= _FEW_TO_SPLIT:
                split = split_lines(cs.regex, buf, win, starts[pending], ends[pending], where[pending])
            if split is not None and len(split[0]):
                parts.append((pending[split[0]], split[1]))
                rest = np.ones(len(pending), dtype=bool)
                rest[split[0]] = False
                pending = pending[rest]
            if len(pending):
                at, rows = read_lines(cs.regex, buf, starts[pending], ends[pending])
                if rows:
                    table = np.array(rows, dtype="S")
                    hit = np.zeros(len(pending), dtype=bool)
                    hit[at] = True
                    parts.append((pending[hit], [table[:, k] for k in range(table.shape[1])]))
                    pending = pending[~hit]
            if not parts:
                continue
            memo[key] = cs
            entry = taken.setdefault(id(cs), (cs, [], []))
            for took, cols in parts:
                entry[1].append(lines[took])
                entry[2].append(cols)
            if not len(pending):
                break
        else:
            if len(pending):
                untaken[key] = len(shapes)
    found = []
    for cs, idx_parts, col_parts in taken.values():
        idx = np.concatenate(idx_parts)
        cols = [np.concatenate(c) for c in zip(*col_parts, strict=True)] if len(col_parts) > 1 else col_parts[0]
        if len(idx_parts) > 1:
            back = np.argsort(idx, kind="stable")
            idx, cols = idx[back], [c[back] for c in cols]
        found.append((cs, idx, cols))
    return found


def _scan_first_time(parser: Any, buf: bytes, nl: np.ndarray, count: int, crs: bool) -> None:
    """The first dated prefix among the log's first lines (as the whole-file parse reads it)."""
    end = nl[min(count, len(nl) - 1)]
    for line in split_chunk(buf[1 : end + 1], crs)[:count]:
        m = PREFIX_RE.match(line)
        if m is not None and m.group(1):
            parser.first_time = f"{m.group(1)} {m.group(2).replace(',', '.')}"
            return


def _times(col: np.ndarray) -> np.ndarray:
    """Prefix times (an array of ASCII bytes) -> datetime64[ns], as the line-by-line path types them."""
    col = np.ascontiguousarray(col)
    block = col.view(np.uint8).reshape(len(col), col.itemsize)
    try:
        if len(col) and (block[:, -1] != 0).all():
            # Every stamp as wide as the widest (the usual case): digit arithmetic.
            return _stamps(block)
        return col.astype(str).astype("datetime64[ns]")  # (through str, as in _stamps)
    except ValueError:
        return to_timestamps(pd.Series(col.astype(str).astype(object))).to_numpy(dtype="datetime64[ns]")


def _ranks(col: np.ndarray) -> np.ndarray:
    """Rank labels (ASCII bytes, b"" for none) -> an object array of str."""
    distinct, inverse = np.unique(col, return_inverse=True)
    names = np.array([v.decode("ascii") for v in distinct], dtype=object)
    return names[inverse.ravel()]


def _column(col: np.ndarray) -> Any:
    """Raw values of one column (bytes) -> the typed array the line-by-line path makes of them."""
    col = np.ascontiguousarray(col)
    sample = col[0]
    if sample in _BOOL_BYTES:
        trues = col == b"True"
        if (trues | (col == b"False")).all():
            return trues
    elif sample.endswith(b"%"):
        # "12.50%" -> 0.125 (as a fraction), when every value is a plain number and a "%".
        width = col.itemsize
        block = col.view(np.uint8).reshape(len(col), width)
        ends = width - 1 - np.argmax(block[:, ::-1] != 0, axis=1)  # the last byte of each value
        if (block[np.arange(len(col)), ends] == ord("%")).all():
            block = block.copy()
            block[np.arange(len(col)), ends] = 0
            stripped = block.view(f"S{width}").ravel()
            if _NUMERIC[block].all():
                fast = decimals(stripped, as_int=False)
                if fast is not None:
                    return fast / 100.0
                try:
                    return stripped.astype(np.float64) / 100.0
                except (ValueError, OverflowError):
                    pass
    elif _NUMERIC[col.view(np.uint8)].all():
        as_int = b"." not in sample and b"e" not in sample
        fast = decimals(col, as_int)
        if fast is not None:
            return fast
        if as_int:
            try:
                return col.astype(np.int64)
            except (ValueError, OverflowError):
                pass
        try:
            return col.astype(np.float64)
        except (ValueError, OverflowError):
            pass
    return convert_column(col.astype(str).astype(object))


# Powers of ten as floats, each exact (10**22 is the last one a float holds exactly).
_POW10 = np.array([float(10**k) for k in range(23)])


def decimals(col: np.ndarray, as_int: bool) -> np.ndarray | None:
    """Plain decimals (digits and at most one ".", 15 digits at most; bytes) -> int64 (when
    ``as_int`` and no value has a ".") or float64, by digit arithmetic; None for anything else
    (then numpy's parser decides, as before).

    The same numbers as numpy's parser: an integer of 15 digits is exact in a float, and the
    quotient of two exact floats is correctly rounded, as a parsed decimal is."""
    width = col.itemsize
    block = np.ascontiguousarray(col.view(np.uint8).reshape(len(col), width).T)  # a row per position
    digit = (block >= 48) & (block <= 57)
    dot = block == 46
    pad = block == 0
    if not len(col) or not (digit | dot | pad).all() or (pad[:-1] & ~pad[1:]).any():
        return None  # another byte, or a NUL byte inside a value
    ndots = dot.sum(axis=0)
    ndigits = digit.sum(axis=0)
    if ndots.max() > 1 or ndigits.min() == 0 or ndigits.max() > 15:
        return None
    n = len(col)
    has_dots = bool(ndots.any())
    values = block - np.uint8(48)  # a digit's value where there is a digit
    value = np.zeros(n, dtype=np.int64)
    for j in range(width):  # (in place, where each row has a digit: no array made per position)
        d = digit[j]
        np.multiply(value, 10, out=value, where=d)
        np.add(value, values[j], out=value, where=d)
    if as_int and not has_dots:
        return value
    frac = np.zeros(n, dtype=np.int64)
    if has_dots:
        # The digits after the dot: all of them but those before it, which are all the bytes
        # before it (only digits come before the dot: pads only end a value).
        frac = np.where(ndots > 0, ndigits - np.argmax(dot, axis=0), 0)
    return value / _POW10[frac]


def _raw_part(cs: _ChunkShape, order: np.ndarray, cols: list[np.ndarray], times: np.ndarray) -> dict[str, Any]:
    """A shape's rows of one chunk (columns of bytes: time, rank, iteration, values...), with
    times and ranks typed and values kept as bytes until the shape's columns are typed."""
    iters = cols[2]
    return {
        "_order": order,
        "time": times,
        "rank": _ranks(cols[1]),
        "iter": np.where(iters == b"", None, iters.astype(str).astype(object)) if (iters != b"").any() else None,
        "values": [np.ascontiguousarray(c) for c in cols[3:]],
    }


def _as_bytes(values: np.ndarray) -> np.ndarray:
    """Values read line by line (an object array of str) as ASCII bytes, when that keeps them
    exactly (every value a non-empty str of ASCII without a NUL byte); else as they are."""
    items = values.tolist()
    try:
        joined = "".join(items)
    except TypeError:
        return values  # None or a non-str value among them
    if not joined.isascii() or "\x00" in joined or not all(items):
        return values
    return np.array(items, dtype="S") if items else np.empty(0, dtype="S1")


def typed_frame(columns: tuple[str, ...], pieces: list[dict[str, Any]]) -> pd.DataFrame:
    """Rows of one shape, read in bulk or line by line, as one typed table: each column is
    typed over all its values at once, as a line-by-line read types it (a text value among
    numbers keeps the whole column as text, wherever it was read)."""
    n = [len(p["_order"]) for p in pieces]
    cols: dict[str, Any] = {
        "_order": np.concatenate([p["_order"] for p in pieces]),
        "time": np.concatenate([p["time"] for p in pieces]),
        "rank": np.concatenate([p["rank"] for p in pieces]),
    }
    if any(p["iter"] is not None for p in pieces):
        cols["iter"] = convert_column(np.concatenate([
            p["iter"] if p["iter"] is not None else np.full(k, None, dtype=object) for p, k in zip(pieces, n, strict=True)
        ]))
    for k, name in enumerate(columns):
        values = [p["values"][k] for p in pieces]
        if any(v.dtype.kind == "S" and len(v) for v in values):
            # Text read line by line joins the bytes read in bulk where it reads the same as bytes.
            values = [v if v.dtype.kind == "S" else _as_bytes(v) for v in values]
        if all(v.dtype.kind == "S" for v in values):
            cols[name] = _column(np.concatenate(values))
        else:
            cols[name] = convert_column(
                np.concatenate([v.astype(str).astype(object) if v.dtype.kind == "S" else v for v in values])
            )
    frame = pd.DataFrame(cols)
    order = cols["_order"]
    if len(pieces) > 1 and (np.diff(order) < 0).any():
        # Lines read line by line fall between pieces read in bulk: back into log order.
        frame = frame.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)
    return frame
