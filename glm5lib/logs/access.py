"""Uvicorn access lines of a chunk, read a distinct line at a time.

A busy server's log is mostly access lines, and they differ in little but the client's port:
``INFO:     127.0.0.1:53312 - "POST /generate HTTP/1.1" 200 OK``. Here the lines of a chunk
that look like one are cut, by numpy, around the port's digits; lines alike but for those
digits form a group (a hash of the rest, then a byte-for-byte check), and the access regex
reads one line of each group. The regex treats every line of a group alike: it reads the
port as digits up to the space before ``- "`` whatever their number, and the rest of the line
is the same bytes. A group whose line the regex reads another way, and every line too long or
odd to be cut this way, is read by the regex line by line, as before.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["access_frame", "access_lines"]

_ACCESS_HEAD = b"INFO:  "
_SEPARATOR = b' - "'
# Lines longer than this around the port are read by the regex (a long path or user agent).
_MAX_CLIENT = 64
_MAX_REST = 248
_MAX_PORT = 5
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)
# Widths around the port, and distinct lines of one width, looked for one at a time before
# the rest are hashed.
_CLASSES = 8
_ROUNDS = 4


def _positions(arr: np.ndarray, needle: bytes, anchor: int) -> np.ndarray:
    """Where ``needle`` starts in ``arr`` (numpy, no Python per byte), found from its byte at
    ``anchor`` (best a rare one)."""
    at = np.flatnonzero(arr[anchor : len(arr) - len(needle) + anchor + 1] == needle[anchor])
    for k, c in enumerate(needle):
        if k != anchor:
            at = at[arr[np.minimum(at + k, len(arr) - 1)] == c]
    return at


def _gather(arr: np.ndarray, starts: np.ndarray, widths: np.ndarray, width: int) -> np.ndarray:
    """Rows of ``width`` bytes from ``starts`` (0 past each row's own width): whole rows of a
    sliding window taken at once, much faster than a gather byte by byte."""
    if len(arr) < int(starts.max(initial=0)) + width:
        arr = np.concatenate((arr, np.zeros(width, dtype=np.uint8)))
    block = np.lib.stride_tricks.sliding_window_view(arr, width)[starts]
    block *= np.arange(width) < widths[:, None]
    return block


def _hashes(block: np.ndarray) -> np.ndarray:
    """One 64-bit hash per row of bytes (rows a multiple of 8 bytes wide)."""
    words = np.ascontiguousarray(block).view(np.uint64)
    h = np.zeros(len(words), dtype=np.uint64)
    for k in range(words.shape[1]):
        h = (h ^ words[:, k]) * _MULTIPLIER
        h ^= h >> np.uint64(29)
    return h


def _exact(arr: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """Rows of exactly ``width`` bytes from ``starts``, each as one value (compared as bytes)."""
    short = int(starts.max(initial=0)) + width - len(arr)
    if short > 0:
        arr = np.concatenate((arr, np.zeros(short, dtype=np.uint8)))
    rows = np.lib.stride_tricks.sliding_window_view(arr, width)[starts]
    return rows.view(f"V{width}").ravel()


def _alike(
    arr: np.ndarray, starts: np.ndarray, seps: np.ndarray, client_w: np.ndarray, rest_w: np.ndarray, sel: np.ndarray
) -> np.ndarray:
    """For each line, the line (its index) it is the same as but for the port's digits, or -1.

    Lines of one width around the port are compared with one of them a part at a time (each
    row at once, byte for byte); a busy server's lines are a few distinct ones, so a few
    rounds take them all. What is left after that is grouped by a hash of its bytes, checked
    the same way."""
    rep = np.full(len(starts), -1, dtype=np.int64)
    key = client_w * 65536 + rest_w
    left: list[np.ndarray] = []
    todo = sel
    for _ in range(_CLASSES):
        if not len(todo):
            break
        in_class = key[todo] == key[todo[0]]
        members, todo = todo[in_class], todo[~in_class]
        client = _exact(arr, starts[members], int(client_w[members[0]]))
        rest = _exact(arr, seps[members], int(rest_w[members[0]]))
        pending = np.arange(len(members))
        for k in range(_ROUNDS):
            if not len(pending):
                break
            r = pending[0]
            if k == 0:  # all of them: no copy
                same = (client == client[r]) & (rest == rest[r])
            else:
                same = (client[pending] == client[r]) & (rest[pending] == rest[r])
            rep[members[pending[same]]] = members[r]
            pending = pending[~same]
        if len(pending):
            left.append(members[pending])
    if len(todo):
        left.append(todo)
    if left:
        _hashed(arr, starts, seps, client_w, rest_w, np.concatenate(left), rep)
    return rep


def _hashed(
    arr: np.ndarray, starts: np.ndarray, seps: np.ndarray, client_w: np.ndarray, rest_w: np.ndarray,
    sel: np.ndarray, rep: np.ndarray,
) -> None:
    """``rep`` for the lines ``sel``: grouped by a hash of their bytes but the port's, each
    group's lines checked byte for byte against its first."""
    wc = -(-int(client_w[sel].max()) // 8) * 8
    wr = -(-int(rest_w[sel].max()) // 8) * 8
    block = np.concatenate(
        (_gather(arr, starts[sel], client_w[sel], wc), _gather(arr, seps[sel], rest_w[sel], wr)), axis=1
    )
    h = _hashes(block) ^ (client_w[sel].astype(np.uint64) << np.uint64(40)) ^ rest_w[sel].astype(np.uint64)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.ravel()
    words = block.view(np.uint64)
    same = (words == words[first[inverse]]).all(axis=1)
    same &= (client_w[sel] == client_w[sel][first[inverse]]) & (rest_w[sel] == rest_w[sel][first[inverse]])
    rep[sel[same]] = sel[first[inverse]][same]


def access_lines(
    regex: re.Pattern[bytes], buf: bytes, arr: np.ndarray, nl: np.ndarray, n: int, read_lines: Any
) -> tuple[np.ndarray, list[tuple[bytes, ...]], np.ndarray, np.ndarray]:
    """Line numbers of the access lines of a chunk that ``regex`` takes, the distinct
    ``(client, method, path, status)`` rows among them, each line's row in that list, and for
    each line one of its group (a line the same but for the port's digits; or itself).

    ``buf`` is the chunk after a newline, ``arr`` its bytes, ``nl`` the newlines (``nl[k]``
    precedes line ``k``), ``read_lines(regex, buf, starts, ends)`` the line-by-line regex read
    (which lines it takes, and their groups)."""
    empty = (np.empty(0, dtype=np.int64), [], np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    if b"\n" + _ACCESS_HEAD not in buf:
        return empty
    starts = nl[:-1] + 1
    last = len(arr) - 1
    cand = np.ones(n, dtype=bool)
    for k, c in enumerate(_ACCESS_HEAD):
        cand &= arr[np.minimum(starts + k, last)] == c
    seps = _positions(arr, _SEPARATOR, 3)
    sep_line = np.searchsorted(nl, seps) - 1
    first = np.concatenate(([True], sep_line[1:] != sep_line[:-1])) if len(seps) else np.empty(0, dtype=bool)
    seps, sep_line = seps[first], sep_line[first]  # the first separator of each line
    keep = cand[sep_line]
    seps, lines = seps[keep], sep_line[keep]
    if not len(lines):
        return empty
    starts, ends = starts[lines], nl[lines + 1]

    # The port: digits between the last colon before the separator and the separator.
    # (Looked for in the few bytes before the separator: a port has 5 digits at most.)
    before = _gather(arr, seps - _MAX_PORT - 1, np.full(len(seps), _MAX_PORT + 1), _MAX_PORT + 1)[:, ::-1]
    is_colon = before == 58
    colon = np.where(is_colon.any(axis=1), seps - 1 - np.argmax(is_colon, axis=1), -1)
    port = seps - colon - 1
    client_w, rest_w = colon - starts, ends - seps
    ok = (colon > starts) & (port >= 1) & (port <= _MAX_PORT) & (client_w <= _MAX_CLIENT) & (rest_w <= _MAX_REST)
    digits = _gather(arr, colon + 1, port, _MAX_PORT)
    ok &= ((digits >= 48) & (digits <= 57) | (np.arange(_MAX_PORT) >= port[:, None])).all(axis=1)

    codes = np.full(len(lines), -1, dtype=np.int64)
    alike = lines.copy()
    index: dict[tuple[bytes, ...], int] = {}  # distinct rows, numbered
    sel = np.flatnonzero(ok)
    if len(sel):
        rep = _alike(arr, starts, seps, client_w, rest_w, sel)
        grouped = np.flatnonzero(rep >= 0)
        reps = np.unique(rep[grouped])
        code_of = np.full(len(lines), -1, dtype=np.int64)
        for i in reps.tolist():
            m = regex.match(buf, int(nl[lines[i]]))
            if m is not None and m.end(1) == colon[i] and m.end() == ends[i]:
                code_of[i] = index.setdefault(m.groups(), len(index))
        codes[grouped] = code_of[rep[grouped]]
        alike[grouped] = lines[rep[grouped]]
    rest = np.flatnonzero(codes < 0)
    if len(rest):
        at, rows = read_lines(regex, buf, starts[rest], ends[rest])
        taken = np.zeros(len(rest), dtype=bool)
        taken[at] = True
        codes[rest[at]] = [index.setdefault(row, len(index)) for row in rows]
        if not taken.all():
            keep = codes >= 0
            lines, codes, alike = lines[keep], codes[keep], alike[keep]
    return lines, list(index), codes, alike


def access_frame(distinct: list[tuple[bytes, ...]], codes: np.ndarray) -> pd.DataFrame:
    """Distinct ``(client, method, path, status)`` rows (ASCII bytes) and each line's row in
    them -> ``client, method, path, status`` columns (each distinct value decoded once)."""
    if not distinct:
        return pd.DataFrame({c: np.empty(0, dtype=object) for c in ("client", "method", "path")}
                            | {"status": np.empty(0, dtype=np.int64)})
    client, method, path, status = zip(*distinct, strict=True)
    return pd.DataFrame(
        {
            "client": _decoded(client)[codes],
            "method": _decoded(method)[codes],
            "path": _decoded(path)[codes],
            "status": _statuses(status)[codes],
        }
    )


def _decoded(values: tuple[bytes, ...]) -> np.ndarray:
    return np.array([v.decode("ascii") for v in values], dtype=object)


def _statuses(values: tuple[bytes, ...]) -> np.ndarray:
    """Three-digit HTTP statuses (ASCII bytes) -> int64, by digit arithmetic."""
    d = np.frombuffer(b"".join(values), dtype=np.uint8).reshape(-1, 3).astype(np.int64) - 48
    return d[:, 0] * 100 + d[:, 1] * 10 + d[:, 2]
