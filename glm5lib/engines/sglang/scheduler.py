"""SGLang's scheduler lines (``Decode batch``, ``Prefill batch``, retractions) into raw rows.

Lines are read by key, so formats of any release (2024 to 2026) land in the same columns:
known keys get fixed snake_case names (:data:`_KEY_MAP`), unknown ones are snake_cased. Once a
line of a shape has been read, a full-line regex for that shape is learned, and later lines of
it cost one match (the fast path of the parser and the bulk path both use it).
"""

from __future__ import annotations

import re
from typing import Any

import pandas as pd

__all__ = [
    "DECODE_COLUMNS",
    "FAST_VALUE",
    "PREFILL_COLUMNS",
    "RETRACT_COLUMNS",
    "RETRACT_FAST_RE",
    "SHAPE_PREFIX",
    "Shape",
    "bucket_key",
    "column_name",
    "parse_scheduler_msg",
    "shape_regex",
]

# Known keys -> column names. Anything else is snake_cased by column_name.
_KEY_MAP = {
    "#running-req": "running_req",
    "#token": "num_token",
    "token usage": "token_usage",
    "cuda graph": "cuda_graph",
    "cpu graph": "cuda_graph",
    "npu graph": "cuda_graph",
    "gen throughput (token/s)": "gen_throughput",
    "#queue-req": "queue_req",
    "#queue": "queue_req",
    "#new-seq": "new_seq",
    "#new-token": "new_token",
    "#cached-token": "cached_token",
    "cache hit rate": "cache_hit_rate",
    "largest-len": "largest_len",
    "accept len": "accept_len",
    "accept rate": "accept_rate",
    "#full token": "full_token",
    "full token usage": "full_token_usage",
    "#swa token": "swa_token",
    "swa token usage": "swa_token_usage",
    "mamba num": "mamba_num",
    "mamba usage": "mamba_usage",
    "pre-allocated usage": "pre_allocated_usage",
    "#prealloc-req": "prealloc_req",
    "#transfer-req": "transfer_req",
    "#retracted-req": "retracted_req",
    "#inflight-req": "inflight_req",
    "#pending-token": "pending_token",
    "input throughput (token/s)": "input_throughput",
    "est. decode TFLOPS/s (per GPU)": "est_decode_tflops_per_gpu",
    "est. prefill TFLOPS/s (per GPU)": "est_prefill_tflops_per_gpu",
    "est. read BW (GB/s per GPU)": "est_read_bw_gb_s_per_gpu",
    "est. write BW (GB/s per GPU)": "est_write_bw_gb_s_per_gpu",
    "fwd occupancy": "fwd_occupancy",
    # Very old "new fill batch" lines (early 2024).
    "#seq": "new_seq",
    "#cached_token": "cached_token",
    "#new_token": "new_token",
    "#remaining_req": "queue_req",
    "#running_req": "running_req",
    "tree_cache_hit_rate": "cache_hit_rate",
    # Retraction lines.
    "#retracted_reqs": "retracted_reqs",
    "#aborted_retracted_reqs": "aborted_retracted_reqs",
}
DECODE_COLUMNS = ("running_req", "num_token", "token_usage", "cuda_graph", "gen_throughput", "queue_req")
PREFILL_COLUMNS = ("new_seq", "new_token", "cached_token", "token_usage", "running_req", "queue_req")
RETRACT_COLUMNS = ("retracted_reqs", "new_token_ratio_before", "new_token_ratio_after")


def column_name(key: str, _cache: dict[str, str] = {}) -> str:  # noqa: B006 - a memo
    name = _cache.get(key)
    if name is None:
        name = _KEY_MAP.get(key)
        if name is None:
            name = re.sub(r"[^0-9a-zA-Z]+", "_", key.replace("%", "pct")).strip("_").lower() or "value"
        _cache[key] = name
    return name


# A dated prefix in the form a learned shape regex accepts (others take the general path).
SHAPE_PREFIX = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)(?: ([A-Z][A-Z_]*\d+(?: [A-Z][A-Z_]*\d+)*))?\] "


_SHAPE_PREFIX_RE = re.compile(SHAPE_PREFIX)
# A value in a fast-path regex: no space, comma, bracket or final dot, so that its groups are
# what the slow path reads.
FAST_VALUE = r"([^\s,()\[\x1b]*[^\s,().\[\x1b])"
# The retraction line of 2024 to 2026 builds, for the fast path of _Parser._feed (no ">" in
# its values, whose "->" splits one in two); "(?:(\[)(?!))?" never matches: the iteration
# group, None as on the slow path.
RETRACT_FAST_RE = re.compile(
    SHAPE_PREFIX + r"(?:(\[)(?!))?KV cache pool is full\. Retract requests\. "
    r"#retracted_reqs: ([^\s,()\[\x1b>]*[^\s,().\[\x1b>]), "
    r"#new_token_ratio: ([^\s,()\[\x1b>]*[^\s,().\[\x1b>]) -> ([^\s,()\[\x1b>]*[^\s,().\[\x1b>])\.?,?$"
)


def bucket_key(line: str) -> int:
    # Lines of one shape have the same number of commas and "batch" at the same place.
    return (line.count(":") << 20) | (line.count(",") << 12) | line.find("batch")


class Shape:
    """All scheduler rows of one kind with the same keys; rows are (time, rank, iter, *values)
    read line by line, raw are pieces read in bulk with their values still as bytes, frames
    are rows already typed (values of a column are typed all together, as one read would)."""

    __slots__ = ("columns", "frames", "kind", "order", "raw", "rows")

    def __init__(self, kind: str, columns: tuple[str, ...]) -> None:
        self.kind = kind
        self.columns = columns
        self.order: list[int] = []
        self.rows: list[tuple[Any, ...]] = []
        self.raw: list[dict[str, Any]] = []
        self.frames: list[pd.DataFrame] = []


def parse_scheduler_msg(
    msg: str,
) -> tuple[tuple[str, ...], tuple[str, ...], str | None, list[str] | None, str] | None:
    """A scheduler message -> (columns, raw values, iteration, raw keys or None, head).

    Raw keys are given only for a shape a full-line regex can match (the fast paths)."""
    head_end = msg.find("batch") + len("batch")
    rest = msg[head_end:]
    extra_keys: list[str] = []
    extra_vals: list[str] = []
    it = None
    if rest.startswith(" ["):
        close = rest.find("]")
        if close > 0 and rest[2:close].isdigit():
            it = rest[2:close]
            rest = rest[close + 1 :]
    learnable = rest[:2] in (". ", ", ") and not msg.startswith("new fill")
    if rest.startswith("(mixed"):
        learnable = False
        close = rest.find(")")
        inner = rest[len("(mixed") : close] if close > 0 else ""
        parsed_inner = _parse_kv_body(inner)
        if parsed_inner is not None:
            extra_keys.extend(f"mixed_{k}" for k in parsed_inner[0])
            extra_vals.extend(parsed_inner[1])
        rest = rest[close + 1 :] if close > 0 else ""
    rest = rest.lstrip(".,").strip()
    if msg.startswith("new fill batch"):
        rest = rest.replace(". ", ", ").rstrip(".")
    parsed = _parse_kv_body(rest)
    if parsed is None:
        return None
    keys, vals = parsed
    if extra_keys:
        keys = tuple(extra_keys) + keys
        vals = tuple(extra_vals) + vals
    if not keys or len(set(keys)) != len(keys):
        return None
    raw_keys = None
    if learnable:
        raw_keys = [p.rpartition(": ")[0].strip() for p in rest.strip().rstrip(",").strip().split(", ")]
    return keys, vals, it, raw_keys, msg[: msg.find("batch") + len("batch")]


def shape_regex(head: str, raw_keys: list[str]) -> re.Pattern[str]:
    """A full-line regex for scheduler lines with exactly these keys (the fast path).

    Values are plain (:data:`FAST_VALUE`), so that a line it matches gives the values
    :func:`parse_scheduler_msg` gives; a line with an empty, spaced or dotted value is left
    to it."""
    body = ", ".join(re.escape(k) + ": " + FAST_VALUE for k in raw_keys)
    return re.compile(SHAPE_PREFIX + re.escape(head) + r"(?: \[(\d+)\])?[.,] " + body + r"\.?(?:, ?)?$")


def _parse_kv_body(body: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``#a: 1, b c: 2.5, d: True, `` -> (columns, raw values); None when a part is malformed."""
    body = body.strip().rstrip(",").strip()
    if not body:
        return (), ()
    keys: list[str] = []
    vals: list[str] = []
    for part in body.split(", "):
        key, sep, val = part.rpartition(": ")
        if not sep:
            return None
        key = key.strip()
        val = val.strip().rstrip(".,")
        if not key or not val:
            return None
        keys.append(column_name(key))
        vals.append(val)
    return tuple(keys), tuple(vals)


