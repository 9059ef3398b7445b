"""Scheduler lines of one learned shape split into value columns by numpy, no regex per line.

Lines of one shape (``Decode batch, #running-req: 5, #token: 900, ...``) hold the same bytes
but for their prefix (time and rank) and their values. The shape's regex reads one line; from
it the bytes between the values are known, and every other line is read by walking from
value to value a column at a time: a value runs up to the first byte a value may not hold,
and the bytes after it must be the same as on the line the regex read. A line for which any
of this fails (a prefix of another layout, an iteration number, a value too long or empty)
is left to the regex, which decides as before; a line read here is one the regex reads the
same way (its values hold none of the bytes that end one, so each value ends where it does
here, and everything else is the same bytes as a line it took).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

__all__ = ["Windows", "split_lines"]

# Bytes no value holds (glm5lib.logs.chunked._VALUE): a value ends at the first of them.
_ENDS = np.zeros(256, dtype=bool)
_ENDS[list(b" \t,()[\n\r\x0b\x0c\x1b")] = True
_ENDS[0x1C:0x20] = True
_ENDS[0x80:] = True
_DIGIT = np.zeros(256, dtype=bool)
_DIGIT[list(b"0123456789")] = True
# Widest rows of bytes a Windows gathers through its one view.
_WIDE = 128
# Values longer than this go to the regex.
_MAX_VALUE = 23
# Values are looked for in a window this wide first (most are), then in a wider one.
_SHORT_VALUE = 15
# A word's first bytes, 0 to 8 of them (made from bytes: the same on any byte order).
_LOW_BYTES = np.frombuffer(b"".join(b"\xff" * w + b"\0" * (8 - w) for w in range(9)), dtype=np.uint64)
# A stamp is "YYYY-MM-DD HH:MM:SS" and up to 6 digits of a fraction.
_STAMP_SEPARATORS = {4: ord("-"), 7: ord("-"), 10: ord(" "), 13: ord(":"), 16: ord(":")}
_STAMP_DIGITS = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18]
_RANK_RE = re.compile(rb"[A-Z][A-Z_]*\d+(?: [A-Z][A-Z_]*\d+)*")


class Windows:
    """Rows of bytes of a chunk from any positions, up to :data:`_WIDE` wide: one strided view
    made once, so that each gather is one fancy index (making a view per gather costs more than
    a small gather)."""

    __slots__ = ("arr", "view")

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr
        padded = np.concatenate((arr, np.zeros(_WIDE, dtype=np.uint8)))
        self.view = np.lib.stride_tricks.as_strided(padded, shape=(len(arr), _WIDE), strides=(1, 1), writeable=False)

    def rows(self, starts: np.ndarray, width: int) -> np.ndarray:
        """Rows of ``width`` bytes from ``starts`` (past the chunk's end: 0)."""
        if width <= _WIDE:
            return self.view[:, :width][np.minimum(starts, len(self.arr) - 1)]
        arr = np.concatenate((self.arr, np.zeros(width, dtype=np.uint8)))
        return np.lib.stride_tricks.sliding_window_view(arr, width)[np.minimum(starts, len(self.arr) - 1)]


def _same(block: np.ndarray, expected: bytes) -> np.ndarray:
    """Which rows of bytes are ``expected`` (a byte-for-byte comparison of each row at once)."""
    rows = np.ascontiguousarray(block).view(f"V{len(expected)}").ravel()
    return rows == np.void(expected)


def _text(block: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Rows of bytes cut at their widths -> an array of bytes strings."""
    width = max(int(widths.max(initial=0)), 1)
    block = block[:, :width] * (np.arange(width) < widths[:, None])  # (0 past each width)
    return np.ascontiguousarray(block).view(f"S{width}").ravel()


def _same_words(block: np.ndarray, expected: bytes) -> np.ndarray:
    """Which rows of bytes (a multiple of 8 wide, contiguous) start with ``expected``: a word at a time."""
    width = -(-len(expected) // 8) * 8
    words = block.view(np.uint64)
    want = np.frombuffer(expected.ljust(width, b"\0"), dtype=np.uint64)
    mask = np.frombuffer(b"\xff" * len(expected) + b"\0" * (width - len(expected)), dtype=np.uint64)
    same = ((words[:, 0] ^ want[0]) & mask[0]) == 0
    for j in range(1, width // 8):
        same &= ((words[:, j] ^ want[j]) & mask[j]) == 0  # (words past the expected bytes: not looked at)
    return same


def _short_text(block: np.ndarray, widths: np.ndarray) -> np.ndarray:
    """Rows of 16 bytes cut at their widths (15 at most) -> an array of bytes strings, by
    masking whole words."""
    width = int(widths.max(initial=0))
    words = block.view(np.uint64)
    if width <= 8:
        out = (words[:, 0] & _LOW_BYTES[widths]).view("S8")
    else:
        both = np.empty((len(block), 2), dtype=np.uint64)
        np.bitwise_and(words[:, 0], _LOW_BYTES[np.minimum(widths, 8)], out=both[:, 0])
        np.bitwise_and(words[:, 1], _LOW_BYTES[np.maximum(widths - 8, 0)], out=both[:, 1])
        out = both.view("S16").ravel()
    width = max(width, 1)
    return out if out.itemsize == width else out.astype(f"S{width}")


def _value_ends(block: np.ndarray) -> np.ndarray:
    """``_ENDS[block]`` for a contiguous block, by comparisons (several times faster than the
    table's lookup byte by byte)."""
    ends = block >= 0x80
    ends |= (block - np.uint8(0x09)) <= 4  # \t \n \x0b \x0c \r
    ends |= (block - np.uint8(0x1B)) <= 5  # \x1b \x1c-\x1f " "
    ends |= (block - np.uint8(0x28)) <= 1  # ( )
    ends |= block == 0x2C  # ,
    ends |= block == 0x5B  # [
    return ends


def split_lines(
    regex: re.Pattern[bytes], buf: bytes, win: Windows, starts: np.ndarray, ends: np.ndarray, heads: np.ndarray
) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """Which of the lines ``buf[starts[k]:ends[k]]`` (``win``: its bytes; each after a newline; ``heads[k]`` the
    position of the ``]`` before the shape's head) are read here, and their columns (time,
    rank, iteration, values..., as bytes), or None when the first line shows that this shape
    is not one to read here (the regex does not take it, or it has an iteration number)."""
    m = regex.match(buf, int(starts[0]) - 1)
    if m is None or m.end() != ends[0] or m.group(3):
        return None
    if (m.end(2) if m.start(2) >= 0 else m.end(1)) != heads[0]:
        return None
    nvalues = len(m.groups()) - 3
    # The bytes of the first line between its values (and from its head to the first).
    gaps: list[bytes] = []
    at = int(heads[0])
    for g in range(4, 4 + nvalues):
        gaps.append(buf[at : m.start(g)])
        at = m.end(g)
    tail = buf[at : int(ends[0])]
    first_tail = tail[:1] == b"."
    n = len(starts)
    ok = np.ones(n, dtype=bool)

    # ---- the prefix: "[" stamp (" " rank)? "]"
    stamp = win.rows(starts + 1, 27)
    for k, c in _STAMP_SEPARATORS.items():
        ok &= stamp[:, k] == c
    ok &= _DIGIT[stamp[:, _STAMP_DIGITS]].all(axis=1)
    frac = stamp[:, 19] == ord(".")
    digits = _DIGIT[stamp[:, 20:27]]
    nfrac = np.where(frac, np.argmin(np.concatenate((digits, np.zeros((n, 1), dtype=bool)), axis=1), axis=1), 0)
    ok &= ~frac | ((nfrac >= 1) & (nfrac <= 6))
    stamp_w = 19 + np.where(frac, nfrac + 1, 0)
    after = starts + 1 + stamp_w  # "]" or the space before a rank
    rank_w = heads - after - 1
    ok &= (after == heads) | ((win.arr[np.minimum(after, len(win.arr) - 1)] == 32) & (rank_w >= 1))
    rank_w = np.maximum(rank_w, 0)
    rank_w = np.where(ok, rank_w, 0)
    width = int(rank_w.max(initial=0))
    ranks = _text(win.rows(after + 1, width), rank_w) if width else np.zeros(n, dtype="S1")
    if width:
        for value in np.unique(ranks[ok]).tolist():
            if value and _RANK_RE.fullmatch(value) is None:
                ok &= ranks != value

    # ---- the values, a column at a time
    columns: list[np.ndarray] = []
    at_a = heads.astype(np.int64)
    every = np.arange(n)
    data = win.arr
    top = len(data) - 1
    for k, gap in enumerate(gaps):
        # The bytes before the value, compared eight at a time, then the value's window (short:
        # most values are), each one gather.
        g = len(gap)
        block = win.rows(at_a, -(-(g + _SHORT_VALUE + 1) // 8) * 8)
        if g:
            ok &= _same_words(block, gap)
        window = np.ascontiguousarray(block[:, g : g + _SHORT_VALUE + 1])
        # The value ends at the first byte no value holds; none in the window, or none before
        # it (an empty value), both give 0 and leave the line to the regex.
        ends_w = _value_ends(window)
        width_a = np.argmax(ends_w, axis=1)
        longer = np.flatnonzero(~ends_w[every, width_a])  # no end in the short window
        wide = None
        if len(longer):
            wide = win.rows(at_a[longer] + g, _MAX_VALUE + 1)
            width_a[longer] = np.argmax(_ENDS[wide], axis=1)
        start = at_a + g
        ok &= width_a >= 1
        last = data[np.minimum(start + width_a - 1, top)]
        if k == nvalues - 1 and first_tail:
            # The last value before the line's end: one "." after it is the line's own.
            width_a = np.where(last == ord("."), width_a - 1, width_a)
            ok &= width_a >= 1
            last = data[np.minimum(np.maximum(start + width_a - 1, 0), top)]
        ok &= last != ord(".")
        if wide is None:
            columns.append(_short_text(window, np.where(ok, width_a, 0)))
        else:
            short = np.ones(n, dtype=bool)
            short[longer] = False
            column = _short_text(window, np.where(ok & short, np.minimum(width_a, _SHORT_VALUE), 0))
            long_text = _text(wide, np.where(ok[longer], width_a[longer], 0))
            if long_text.itemsize > column.itemsize:
                column = column.astype(long_text.dtype)
            column[longer] = long_text
            columns.append(column)
        at_a = start + width_a
    if tail:
        block = win.rows(at_a, len(tail))
        ok &= _same(block, tail)
    ok &= at_a + len(tail) == ends

    take = np.flatnonzero(ok)
    times = _text(stamp, np.where(ok, stamp_w, 0))
    out: list[Any] = [times[take], ranks[take], np.zeros(len(take), dtype="S1")]
    out.extend(c[take] for c in columns)
    return take, out
