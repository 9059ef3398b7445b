"""The whole-file fast path: scheduler lines of one shape parsed together in C.

Lines are bucketed by a cheap key (counts of ``:`` and ``,``, where ``batch`` sits); each big
bucket's lines are checked against the shape of its first line, turned into tab-separated text
by one ``bytes.translate`` and read by pandas' CSV reader; their times come from fixed-width
prefix columns by digit arithmetic. Whatever does not fit exactly is left to the line-by-line
parser, which stays the reference: tests check both give the same tables.
"""

from __future__ import annotations

import io
import re
import warnings
from itertools import compress, repeat
from operator import itemgetter
from typing import Any

import numpy as np
import pandas as pd

from glm5lib.logs.scheduler import (
    _SHAPE_PREFIX_RE,
    _convert_column,
    _parse_scheduler_msg,
    _shape_regex,
)
from glm5lib.logs.text import _PREFIX_RE

__all__ = ["feed_bulk"]

_TO_TABS = str.maketrans({":": "\t", ",": "\t"})
_BULK_CHUNK = 16384  # lines (about 3 MB)
_TO_TABS_BYTES = bytes.maketrans(b":,", b"\t\t")
_TO_TABS_IT = str.maketrans({":": "\t", ",": "\t", "[": "\t", "]": "\t"})
_TO_TABS_IT_BYTES = bytes.maketrans(b":,[]", b"\t\t\t\t")
_RANK_LABELS_RE = re.compile(r"[A-Z][A-Z_]*\d+(?: [A-Z][A-Z_]*\d+)*")


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
                dates, inverse = np.unique(year * 10000 + month * 100 + day, return_inverse=True)
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
    return np.ascontiguousarray(block).view(f"S{w}").ravel().astype("datetime64[ns]")


def _prefix_columns(group: list[str], t0: int, t1: int, r0: int, r1: int) -> tuple[Any, Any]:
    """Times (datetime64) and rank labels of lines whose prefixes all have the same layout;
    ValueError when a line does not fit it."""
    n = len(group)
    # The prefixes alone, sliced in C, one fixed-width record each: a line shorter than its
    # prefix shows in the total length.
    head = "".join(map(itemgetter(slice(0, r1 + 1)), group))
    if len(head) == n * (r1 + 1) and head.isascii():
        cols = np.frombuffer(head.encode("ascii"), dtype=np.uint8).reshape(n, r1 + 1)
        if not ((cols[:, r1] == ord("]")).all() and (cols[:, 0] == ord("[")).all()):
            raise ValueError("prefixes differ")
        if r1 > r0 and not (cols[:, t1:r0] == ord(" ")).all():
            raise ValueError("no space between time and rank")
        times = _stamps(cols[:, t0:t1])
        if r1 == r0:
            return times, None
        raw = np.ascontiguousarray(cols[:, r0:r1]).view(f"S{r1 - r0}").ravel()
        if (raw == raw[0]).all():
            # One rank (the usual case: only the first rank logs), no sort needed.
            label = raw[0].decode("ascii")
            if not _RANK_LABELS_RE.fullmatch(label):
                raise ValueError("not rank labels")
            return times, np.full(n, label, dtype=object)
        uniques, inverse = np.unique(raw, return_inverse=True)
        labels = [u.decode("ascii") for u in uniques]
        if not all(_RANK_LABELS_RE.fullmatch(lbl) for lbl in labels):
            raise ValueError("not rank labels")
        return times, np.array(labels, dtype=object)[inverse.ravel()]
    if {line[r1 : r1 + 1] for line in group} != {"]"} or {line[:1] for line in group} != {"["}:
        raise ValueError("prefixes differ")
    if r1 > r0 and {line[t1:r0] for line in group} != {" "}:
        raise ValueError("no space between time and rank")
    times = np.array([line[t0:t1] for line in group], dtype="datetime64[ns]")
    if r1 == r0:
        return times, None
    ranks = [line[r0:r1] for line in group]
    if not all(_RANK_LABELS_RE.fullmatch(r) for r in set(ranks)):
        raise ValueError("not rank labels")
    return times, np.array(ranks, dtype=object)




def feed_bulk(parser: Any, lines: list[str]) -> None:
    """Parse a whole file: scheduler lines of one shape are parsed together in C (regex
    substitution into tab-separated text, then pandas' CSV reader); the rest line by line."""
    base = parser.lines
    if parser.first_time is None:
        for line in lines[:1000]:
            m = _PREFIX_RE.match(line)
            if m is not None and m.group(1):
                parser.first_time = f"{m.group(1)} {m.group(2).replace(',', '.')}"
                break
    # The bucket key of _bucket_key for every line at once: map() over str methods runs
    # in C (no bytecode per line), numpy combines the three columns; -1 = not a scheduler line.
    # Colons and commas are counted only on the lines that hold "batch" (itertools.compress
    # picks them in C).
    n = len(lines)
    where = np.fromiter(map(str.find, lines, repeat("batch")), dtype=np.int64, count=n)
    has = where >= 0
    m, picks = int(has.sum()), has.tolist()
    karr = np.full(n, -1, dtype=np.int64)
    karr[has] = (
        (np.fromiter(map(str.count, compress(lines, picks), repeat(":")), dtype=np.int64, count=m) << 20)
        | (np.fromiter(map(str.count, compress(lines, picks), repeat(",")), dtype=np.int64, count=m) << 12)
        | where[has]
    )
    del where, has, picks
    order = np.argsort(karr, kind="stable")
    sorted_keys = karr[order]
    uniq, starts = np.unique(sorted_keys, return_index=True)
    bounds = [*starts.tolist(), len(order)]
    rest: list[np.ndarray] = []
    for g, key in enumerate(uniq.tolist()):
        idx = order[bounds[g] : bounds[g + 1]]
        if key < 0 or len(idx) < 64:
            rest.append(idx)
            continue
        # Several shapes may share a bucket: peel off one shape at a time.
        for _round in range(8):
            left = _bulk_group(parser, lines, idx, base)
            if left is None or len(left) == 0 or len(left) == len(idx):
                break
            idx = left
        if left is None or len(left):
            rest.append(idx if left is None else left)
    rest_idx = np.sort(np.concatenate(rest)) if rest else np.empty(0, dtype=np.int64)
    parser._feed(lines, rest_idx.tolist(), base)
    parser.lines = base + len(lines)

def _bulk_group(parser: Any, lines: list[str], idx: np.ndarray, base: int) -> np.ndarray | None:
    """Parse the lines at ``idx`` that have the first one's shape; the indices left over
    (empty when all were parsed), or None when none could be parsed in bulk."""
    first = lines[int(idx[0])]
    m = _SHAPE_PREFIX_RE.match(first)
    if m is None:
        return None
    msg = first[m.end() :]
    if msg.startswith("Decode batch"):
        kind = "decode"
    elif msg.startswith("Prefill batch"):
        kind = "prefill"
    else:
        return None
    parsed = _parse_scheduler_msg(msg)
    if parsed is None or parsed[3] is None:
        return None
    keys, _vals, _it, raw_keys, head = parsed
    if parser._learn(kind, keys, head, raw_keys, first) is None:
        return None
    shape, _bulk_re = parser._bulk_shapes[_shape_regex(head, raw_keys).pattern]
    if any(":" in k or "," in k for k in raw_keys) or any(":" in v or "," in v for v in _vals):
        return None
    table, table_b = _TO_TABS, _TO_TABS_BYTES
    if _it is None:
        needles = [f"] {head}{msg[len(head)]} {raw_keys[0]}: "]
    else:
        # "Decode batch [123], #running-req: ..." (data-parallel builds): brackets become
        # tabs as well, so that the iteration number sits in a field of its own.
        if any("[" in x or "]" in x for x in (*raw_keys, *_vals)):
            return None
        close = msg.find("]", len(head))
        sep = msg[close + 1 : close + 2]
        if sep not in (",", "."):
            return None
        table, table_b = _TO_TABS_IT, _TO_TABS_IT_BYTES
        needles = [f"] {head} [", f"]{sep} {raw_keys[0]}: "]
    needles += [f", {k}: " for k in raw_keys[1:]]
    # One C pass turns ":" and "," into tabs; keys and values then sit in fixed fields whose
    # places the first line gives. Keys are checked by counting, values by their dtype.
    tr_first = first.translate(table).split("\t")
    value_fields: list[int] = []
    pos = 0
    for key, val in zip(raw_keys, _vals, strict=True):
        while pos < len(tr_first) and not tr_first[pos].rstrip().endswith(key):
            pos += 1
        if pos + 1 >= len(tr_first) or tr_first[pos + 1].strip().rstrip(".") != val:
            return None
        value_fields.append(pos + 1)
        pos += 2
    # A trailing separator after the last value (", " in 0.5.x): every line must end with it
    # exactly, or a line with something glued on there would be read while it is skipped
    # line by line.
    tail_at = sum(len(f) + 1 for f in tr_first[: value_fields[-1] + 1]) - 1
    tail = first[tail_at:] if value_fields[-1] + 1 < len(tr_first) else ""
    tail_b, tail_nl = tail.encode("utf-8", errors="surrogatepass"), (tail + "\n").encode("utf-8", errors="surrogatepass")
    names = list(shape.columns)
    if _it is not None:
        it_field = next(
            (k for k in range(1, value_fields[0]) if tr_first[k] == _it and tr_first[k - 1].rstrip().endswith(head)),
            None,
        )
        if it_field is None:
            return None
        value_fields.insert(0, it_field)
        names.insert(0, "iter")
    fields_per_line = len(tr_first)
    t0, t1 = m.span(1)
    r0, r1 = m.span(2) if m.group(2) else (t1, t1)

    needles_b = [x.encode("utf-8", errors="surrogatepass") for x in needles]
    commas = first.count(",")

    def parse_chunk(group: list[str], idx: np.ndarray) -> tuple[pd.DataFrame | None, np.ndarray] | None:
        """(frame of the lines of this shape, indices left over); None: none of it in bulk."""
        left = idx[:0]
        # Bytes from here on: counting, translating and pandas' CSV reader are all faster
        # on bytes (read_csv would otherwise encode a str itself), and ":" and "," never
        # occur inside a multi-byte UTF-8 character.
        data = "\n".join(group).encode("utf-8", errors="surrogatepass")
        if b"\t" in data:
            return None
        n = len(group)
        if any(data.count(x) != n for x in needles_b) or (
            tail and (data.count(tail_nl) != n - 1 or not data.endswith(tail_b))
        ):
            # Shapes share the bucket: peel this one off (one C-level map per needle).
            has = np.fromiter(map(str.count, group, repeat(",")), dtype=np.int64, count=n) == commas
            for needle in needles:
                has &= np.fromiter(map(str.__contains__, group, repeat(needle)), dtype=bool, count=n)
            if tail:
                has &= np.fromiter(map(str.endswith, group, repeat(tail)), dtype=bool, count=n)
            if not has.any():
                return None, idx
            left = idx[~has]
            idx = idx[has]
            group = [g for g, h in zip(group, has.tolist(), strict=True) if h]
            data = "\n".join(group).encode("utf-8", errors="surrogatepass")
            n = len(group)
            if any(data.count(x) != n for x in needles_b) or (
                tail and (data.count(tail_nl) != n - 1 or not data.endswith(tail_b))
            ):
                return None
        tsv = data.translate(table_b)
        del data
        if tsv.count(b"\t") != n * (fields_per_line - 1):
            return None
        try:
            times, ranks = _prefix_columns(group, t0, t1, r0, r1)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                frame = pd.read_csv(
                    io.BytesIO(tsv), sep="\t", header=None, engine="c", index_col=False,
                    usecols=value_fields, quoting=3, skipinitialspace=True,
                    keep_default_na=False, na_values=[""], low_memory=False, encoding="utf-8",
                )
        except (ValueError, TypeError, UnicodeError, pd.errors.ParserError, Warning):
            return None
        del tsv
        if len(frame) != n:
            return None
        frame.columns = names
        frame.insert(0, "rank", ranks if ranks is not None else "")
        frame.insert(0, "time", times)
        for col in names:
            dtype = frame[col].dtype
            if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)):
                raw = frame[col].to_numpy(dtype=object, na_value=None)
                raw = np.array([v.rstrip(".") if isinstance(v, str) else v for v in raw], dtype=object)
                converted = _convert_column(raw)
                if getattr(converted, "dtype", None) is np.dtype(object):
                    return None  # text where a value belongs: misaligned, line by line instead
                frame[col] = converted
        frame.insert(0, "_order", idx + base)
        return frame, left

    # In chunks of a few megabytes: the temporary texts are then reused memory that stays in
    # cache, rather than hundreds of megabytes of fresh pages for the kernel to fault in.
    group_all = list(map(lines.__getitem__, idx.tolist()))
    frames: list[pd.DataFrame] = []
    lefts: list[np.ndarray] = []
    for c0 in range(0, len(group_all), _BULK_CHUNK):
        result = parse_chunk(group_all[c0 : c0 + _BULK_CHUNK], idx[c0 : c0 + _BULK_CHUNK])
        if result is None:
            return None  # the whole group line by line, as if it had been one chunk
        if result[0] is not None:
            frames.append(result[0])
        lefts.append(result[1])
    if not frames:
        return None
    shape.frames.extend(frames)
    return np.concatenate(lefts)
