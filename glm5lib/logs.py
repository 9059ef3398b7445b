"""Parse SGLang server logs and bench_serving output into tidy pandas tables.

SGLang says a great deal about itself while it runs: its resolved arguments, how much memory
the weights, the KV cache and the CUDA graphs took, and every few decode steps how many
requests are running, how full the KV pool is and how many tokens per second it generates.
This module turns that text into data:

* :func:`parse_server_args` reads a ``server_args=ServerArgs(...)`` line (wrapped or cut off
  when pasted) into a dict of Python values;
* :func:`parse_log` reads a whole log into a :class:`ServerLog` (server args, startup facts,
  readiness, decode/prefill/retraction tables, fatal errors);
* :func:`follow_log` reads a log that a running server is still writing, a piece at a time;
* :func:`parse_bench_result` reads ``bench_serving`` JSONL files and printed result blocks;
* :func:`classify_fatal` tells whether a single line is a fatal signature (OOM, NaN, NCCL...).

Formats drift between SGLang releases (2024 to 2026), so scheduler lines are parsed by key:
known keys get fixed snake_case column names, unknown keys become extra columns. Garbage never
raises: lines that cannot be understood are counted in ``ServerLog.skipped`` with examples.

Times in the tables are naive :class:`pandas.Timestamp` values as printed in the log (the
server's local clock); :func:`to_epoch` converts them for alignment with telemetry.
"""

from __future__ import annotations

import argparse
import ast
import gc
import io
import json
import logging
import math
import os
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "ERROR_KINDS",
    "IMPORTANT_ARGS",
    "LogFollower",
    "ServerArgs",
    "ServerLog",
    "classify_fatal",
    "follow_log",
    "mask_secrets",
    "mask_text",
    "parse_bench_result",
    "parse_log",
    "parse_server_args",
    "register_cli",
    "to_epoch",
]

log = logging.getLogger(__name__)

ERROR_KINDS = ("oom", "nan", "nccl", "scheduler_exception", "health_check", "sigquit", "other")
MASK = "***"
_MAX_SKIPPED_EXAMPLES = 20
_FALLBACK_DATE = "1970-01-01"

# --------------------------------------------------------------------------------------------
# Secrets


_SECRET_KEY_RE = re.compile(
    r"(?:^|_)(?:api_key|apikey|key|token|secret|password|passwd|credential|credentials|auth)$"
    r"|(?:^|_)(?:hf_token|access_token|auth_token|secret_key|access_key)(?:$|_)",
    re.IGNORECASE,
)
# Keys that end like secrets but hold none (a tokenizer mode, a metrics header name...).
_NOT_SECRET_KEYS = frozenset({"tokenizer_metrics_custom_labels_header", "radix_eviction_key"})
_SECRET_VALUE_RE = re.compile(
    r"^(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abpr]-[A-Za-z0-9-]{10,}|Bearer\s+\S+|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)$"
)
_SECRET_IN_TEXT_RE = re.compile(
    r"(?P<key>\b(?:[a-z_]*api_key|hf_token|access_token|auth_token|api_token|secret_key|secret|password)\s*[=:]\s*)"
    r"(?P<q>['\"]?)(?P<val>(?!None\b)[^'\",\s)]+)(?P=q)",
    re.IGNORECASE,
)
_TOKEN_IN_TEXT_RE = re.compile(r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,})")


def _is_secret_key(key: str) -> bool:
    return key not in _NOT_SECRET_KEYS and bool(_SECRET_KEY_RE.search(key))


def mask_secrets(data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` with secrets replaced by ``"***"``.

    A value is masked when its key names a secret (``api_key``, ``admin_api_key``, ``hf_token``,
    ``*_secret``, ``password``...) and the value is set (not None, not empty), or when the value
    itself looks like a credential (``hf_...``, ``sk-...``, ``Bearer ...``). Nested dicts and
    lists are masked too. Keys such as ``max_total_tokens`` are not secrets and are kept.
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"mask_secrets expects a mapping (e.g. server_args), got {type(data).__name__}")
    return {k: _mask_value(v, str(k)) for k, v in data.items()}


def _mask_value(value: Any, key: str | None) -> Any:
    if key is not None and _is_secret_key(key) and value not in (None, "", [], {}, False):
        return MASK
    if isinstance(value, Mapping):
        return {k: _mask_value(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_mask_value(v, None) for v in value)
    if isinstance(value, str) and _SECRET_VALUE_RE.match(value.strip()):
        return MASK
    return value


def mask_text(text: str) -> str:
    """``text`` with ``api_key='...'``-style assignments and credential-looking words masked."""
    if not text:
        return text
    text = _SECRET_IN_TEXT_RE.sub(lambda m: f"{m['key']}{m['q']}{MASK}{m['q']}", text)
    return _TOKEN_IN_TEXT_RE.sub(MASK, text)


# --------------------------------------------------------------------------------------------
# Server arguments


class ServerArgs(dict):
    """The dict :func:`parse_server_args` returns; ``incomplete`` is True when the text was cut."""

    incomplete: bool = False
    unparsed: list[str]

    def __init__(self, *args: Any, incomplete: bool = False, unparsed: Iterable[str] = (), **kw: Any):
        super().__init__(*args, **kw)
        self.incomplete = incomplete
        self.unparsed = list(unparsed)

    def masked(self) -> dict[str, Any]:
        """A plain dict copy with secrets masked (what to display or save)."""
        return mask_secrets(self)

    def __repr__(self) -> str:
        # Never print a secret by accident, e.g. when a notebook shows the object.
        tail = ", incomplete=True" if self.incomplete else ""
        return f"ServerArgs({dict.__repr__(self.masked())}{tail})"


_TOKEN_SCAN_RE = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|[\[\](){},<>]|['\"]")
_FIELD_NAME_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$", re.DOTALL)
_CLOSERS = {"]": "[", ")": "(", "}": "{", ">": "<"}


def parse_server_args(text: str) -> ServerArgs:
    """Read SGLang's ``server_args=ServerArgs(...)`` line (or the bare ``ServerArgs(...)`` repr).

    Values become Python values (int, float, bool, None, str, list, dict); a value that is not
    a Python literal (an enum repr, an object) is kept as its text. Lines wrapped by a terminal
    or a paste are joined. A truncated text yields every complete ``name=value`` it holds and
    the result's ``incomplete`` attribute is True. Secrets are kept in the dict (so a server can
    be relaunched) but masked by its ``repr`` and by :meth:`ServerArgs.masked`.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_server_args expects the log text as str, got {type(text).__name__}")
    text = _strip_ansi(text)
    start = text.find("ServerArgs(")
    if start >= 0:
        body = text[start + len("ServerArgs(") :]
    else:
        body = text.split("server_args=", 1)[1] if "server_args=" in text else text
    # A terminal or a paste wraps the line; the repr itself never holds a raw newline.
    body = body.replace("\r", "").replace("\n", "")
    pieces, closed = _split_top_level(body)
    result: dict[str, Any] = {}
    unparsed: list[str] = []
    incomplete = not closed
    for i, piece in enumerate(pieces):
        m = _FIELD_NAME_RE.match(piece)
        last_open = (not closed) and i == len(pieces) - 1
        if not m:
            if piece.strip():
                unparsed.append(piece.strip())
                incomplete = True
            continue
        name, raw = m.group(1), m.group(2).strip()
        if last_open:
            # The final piece of a cut text may itself be cut ("max_running_requests=10" of 1024).
            incomplete = True
            continue
        result[name] = _literal(raw)
    if not result and start < 0 and "server_args=" not in text:
        incomplete = True
    return ServerArgs(result, incomplete=incomplete, unparsed=unparsed)


def _split_top_level(body: str) -> tuple[list[str], bool]:
    """Split ``a=1, b=[1, 2], c='x, y')...`` at top-level commas; True when the ``)`` was seen."""
    pieces: list[str] = []
    stack: list[str] = []
    start = 0
    for m in _TOKEN_SCAN_RE.finditer(body):
        tok = m.group()
        if len(tok) > 1 or tok in "'\"":
            if len(tok) == 1:
                # An unterminated quote: the rest of the text is a cut-off string.
                pieces.append(body[start:])
                return pieces, False
            continue
        if tok in "[({":
            stack.append(tok)
        elif tok == "<":
            # Enum reprs such as <LoadFormat.AUTO: 'auto'>; a lone '<' elsewhere is harmless.
            if body[m.end() : m.end() + 1].isalpha():
                stack.append(tok)
        elif tok in "])}>":
            if stack and stack[-1] == _CLOSERS[tok]:
                stack.pop()
            elif tok == ")" and not stack:
                pieces.append(body[start : m.start()])
                return pieces, True
        elif tok == "," and not stack:
            pieces.append(body[start : m.start()])
            start = m.end()
    pieces.append(body[start:])
    return pieces, False


_SIMPLE_LITERALS = {"None": None, "True": True, "False": False, "inf": math.inf, "nan": math.nan}


def _literal(raw: str) -> Any:
    if raw in _SIMPLE_LITERALS:
        return _SIMPLE_LITERALS[raw]
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    if raw.startswith("<") and raw.endswith(">"):
        m = re.match(r"<[\w.]+: (.*)>$", raw)
        if m:
            try:
                return ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return m.group(1)
    return raw


# --------------------------------------------------------------------------------------------
# Line-level recognition

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# [2025-01-01 12:00:00.123 DP0 TP3] or [12:00:00 TP0] or [2025-01-01 12:00:00] -- then an
# optional "[gpu_id=0] " (2024 builds) and an optional "INFO file.py:12: " (2026 root handler).
_PREFIX_RE = re.compile(
    r"\[(?:(\d{4}-\d\d-\d\d) )?(\d\d:\d\d:\d\d(?:[.,]\d{1,6})?)((?: [A-Z][A-Z_]*\d+)*)\] ?"
    r"(?:\[gpu(?:_id)?=(\d+)\] ?)?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.<>-]+:\d+: )?"
)
_GPU_PREFIX_RE = re.compile(r"\[gpu(?:_id)?=(\d+)\] ?")
# "[TP0] message": a prefix whose time was trimmed away when pasted.
_RANK_ONLY_PREFIX_RE = re.compile(r"\[([A-Z][A-Z_]*\d+(?: [A-Z][A-Z_]*\d+)*)\] ")
# "2026-05-24 03:51:44 TP0] message": a prefix whose "[" was cut off when pasted.
_CUT_PREFIX_RE = re.compile(r"(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d(?:[.,]\d{1,6})?)((?: [A-Z][A-Z_]*\d+)*)\] ")
_GLUED_SEARCH_RE = re.compile(r"\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d{1,6})?(?: [A-Z][A-Z_]*\d+)*\] ")
_UVICORN_RE = re.compile(
    r'^(?:INFO|WARNING|ERROR):\s+(\S+?):(\d+) - "(\w+) (\S+) [^"]*" (\d{3})'
)
_GLOG_RE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ")
_OTHER_RUNTIME_RE = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d")
_NCCL_RE = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN)|NCCL (?:INFO|WARN|version)")
_TQDM_RE = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\|\s*\d+/\d+ \[|it/s\]|s/it\]")
_EXC_LINE_RE = re.compile(
    r"^\s*((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning)|"
    r"AssertionError|KeyboardInterrupt|StopIteration)(?::\s?(.*)|\s*$)"
)
_TRACEBACK = "Traceback (most recent call last):"


def _is_nccl(line: str) -> bool:
    # Every alternative of the regex holds "NCCL ": a substring test spares most lines its scan.
    return "NCCL " in line and _NCCL_RE.search(line) is not None


def _is_tqdm(line: str) -> bool:
    # Likewise: every alternative holds "|" or "it/s]" or "s/it]".
    return ("|" in line or "it/s]" in line or "s/it]" in line) and _TQDM_RE.search(line) is not None


def _strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text) if "\x1b" in text else text


# Fatal signatures, in the order a block is classified: the most specific cause wins.
_FATAL_SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "oom",
        (
            "CUDA out of memory",
            "OutOfMemoryError",
            "CUDA error: out of memory",
            "Not enough memory. Please try to increase --mem-fraction-static",
            "RuntimeError: Not enough memory",
            "HIP out of memory",
        ),
    ),
    ("nan", ("NaN in the logits", "nan in the logits")),
    (
        "nccl",
        (
            "NCCL error",
            "ncclUnhandledCudaError",
            "ncclSystemError",
            "ncclInternalError",
            "ncclInvalidUsage",
            "ncclRemoteError",
            "DistBackendError",
            "Watchdog caught collective operation timeout",
        ),
    ),
    ("health_check", ("Health check failed",)),
    (
        "scheduler_exception",
        (
            "Scheduler hit an exception",
            "hit an exception:",
            "Exception in ControllerSingle",
            "Exception in ControllerMulti",
            "Exception in ModelTpServer",
            "Exception in run_tp_server",
        ),
    ),
    ("sigquit", ("Received sigquit from a child process", "kill_process_tree called")),
)
_FATAL_PRECHECK = ("memory", "NaN", "nan in", "NCCL", "nccl", "DistBackend", "Watchdog", "Health", "xception", "sigquit", "kill_process_tree")


def _may_be_fatal(line: str) -> bool:
    """Whether ``line`` holds any of _FATAL_PRECHECK: the same tests written out, two to four
    times faster than a generator over the tuple (this runs on most lines that are not
    scheduler lines; tests check the two agree)."""
    return (
        "memory" in line or "NaN" in line or "nan in" in line or "NCCL" in line or "nccl" in line
        or "DistBackend" in line or "Watchdog" in line or "Health" in line or "xception" in line
        or "sigquit" in line or "kill_process_tree" in line
    )


def classify_fatal(line: str) -> str | None:
    """The fatal kind a single log line signals (``oom``, ``nan``, ``nccl``, ``health_check``,
    ``scheduler_exception``, ``sigquit``), or None for an ordinary line.

    Cheap enough to call on every line a starting server prints. A bare ``Traceback`` is not
    fatal by itself (libraries print warnings with tracebacks); its cause line is.
    """
    if not isinstance(line, str) or not line:
        return None
    if not _may_be_fatal(line):
        return None
    line = _strip_ansi(line)
    for kind, needles in _FATAL_SIGNATURES:
        for needle in needles:
            if needle in line:
                return kind
    return None


def _classify_block(text: str) -> str:
    kind = classify_fatal(text)
    return kind or "other"


# --------------------------------------------------------------------------------------------
# Scheduler lines

# Known keys -> column names. Anything else is snake_cased by _column_name.
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
_DECODE_COLUMNS = ("running_req", "num_token", "token_usage", "cuda_graph", "gen_throughput", "queue_req")
_PREFILL_COLUMNS = ("new_seq", "new_token", "cached_token", "token_usage", "running_req", "queue_req")
_RETRACT_COLUMNS = ("retracted_reqs", "new_token_ratio_before", "new_token_ratio_after")
_BOOL_VALUES = {"True": True, "False": False, "true": True, "false": False}


def _column_name(key: str, _cache: dict[str, str] = {}) -> str:  # noqa: B006 - a memo
    name = _cache.get(key)
    if name is None:
        name = _KEY_MAP.get(key)
        if name is None:
            name = re.sub(r"[^0-9a-zA-Z]+", "_", key.replace("%", "pct")).strip("_").lower() or "value"
        _cache[key] = name
    return name


# A dated prefix in the form a learned shape regex accepts (others take the general path).
_SHAPE_PREFIX = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})?)(?: ([A-Z][A-Z_]*\d+(?: [A-Z][A-Z_]*\d+)*))?\] "


_SHAPE_PREFIX_RE = re.compile(_SHAPE_PREFIX)
_TO_TABS = str.maketrans({":": "\t", ",": "\t"})
_BULK_CHUNK = 16384  # lines (about 3 MB)
_TO_TABS_BYTES = bytes.maketrans(b":,", b"\t\t")
_TO_TABS_IT = str.maketrans({":": "\t", ",": "\t", "[": "\t", "]": "\t"})
_TO_TABS_IT_BYTES = bytes.maketrans(b":,[]", b"\t\t\t\t")
_RANK_LABELS_RE = re.compile(r"[A-Z][A-Z_]*\d+(?: [A-Z][A-Z_]*\d+)*")
# A value in a fast-path regex: no space, comma, bracket or final dot, so that its groups are
# what the slow path reads.
_FAST_VALUE = r"([^\s,()\[\x1b]*[^\s,().\[\x1b])"
# The retraction line of 2024 to 2026 builds, for the fast path of _Parser._feed (no ">" in
# its values, whose "->" splits one in two); "(?:(\[)(?!))?" never matches: the iteration
# group, None as on the slow path.
_RETRACT_FAST_RE = re.compile(
    _SHAPE_PREFIX + r"(?:(\[)(?!))?KV cache pool is full\. Retract requests\. "
    r"#retracted_reqs: ([^\s,()\[\x1b>]*[^\s,().\[\x1b>]), "
    r"#new_token_ratio: ([^\s,()\[\x1b>]*[^\s,().\[\x1b>]) -> ([^\s,()\[\x1b>]*[^\s,().\[\x1b>])\.?,?$"
)


def _bucket_key(line: str) -> int:
    # Lines of one shape have the same number of commas and "batch" at the same place.
    return (line.count(":") << 20) | (line.count(",") << 12) | line.find("batch")


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


class _Shape:
    """All scheduler rows of one kind with the same keys; rows are (time, rank, iter, *values),
    frames are blocks of rows already typed by the bulk path."""

    __slots__ = ("columns", "frames", "kind", "order", "rows")

    def __init__(self, kind: str, columns: tuple[str, ...]) -> None:
        self.kind = kind
        self.columns = columns
        self.order: list[int] = []
        self.rows: list[tuple[Any, ...]] = []
        self.frames: list[pd.DataFrame] = []


def _parse_scheduler_msg(
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


def _shape_regex(head: str, raw_keys: list[str]) -> re.Pattern[str]:
    """A full-line regex for scheduler lines with exactly these keys (the fast path)."""
    body = ", ".join(re.escape(k) + ": ([^,]*)" for k in raw_keys[:-1])
    last = re.escape(raw_keys[-1]) + r": ([^,]*?)\.?"
    body = f"{body}, {last}" if body else last
    return re.compile(_SHAPE_PREFIX + re.escape(head) + r"(?: \[(\d+)\])?[.,] " + body + r"(?:, ?)?$")


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
        keys.append(_column_name(key))
        vals.append(val)
    return tuple(keys), tuple(vals)


def _convert_column(col: Any) -> Any:
    """Raw string values of one column (an object array, None where absent) -> a typed array."""
    col = np.asarray(col, dtype=object)
    nulls = np.equal(col, None)
    has_nulls = bool(nulls.any())
    if has_nulls and nulls.all():
        return col
    sample = col[np.argmin(nulls)] if has_nulls else col[0]
    if sample in _BOOL_VALUES:
        if not has_nulls:
            trues = col == "True"
            if (trues | (col == "False")).all():
                return trues
        return pd.array([_BOOL_VALUES.get(v) if v is not None else None for v in col], dtype="boolean")
    if isinstance(sample, str) and sample.endswith("%"):
        cleaned = [v[:-1] if isinstance(v, str) and v.endswith("%") else v for v in col]
        return pd.to_numeric(pd.Series(cleaned, dtype=object), errors="coerce").to_numpy(dtype=float) / 100.0
    if not has_nulls:
        if isinstance(sample, str) and "." not in sample and "e" not in sample:
            try:
                return col.astype(np.int64)
            except (ValueError, TypeError, OverflowError):
                pass
        try:
            return col.astype(np.float64)
        except (ValueError, TypeError, OverflowError):
            pass
    converted = pd.to_numeric(pd.Series(col, dtype=object), errors="coerce")
    if int(converted.isna().sum()) > int(nulls.sum()):
        return col  # text values: keep them as text
    return converted.to_numpy()


# --------------------------------------------------------------------------------------------
# The result


@dataclass
class ServerLog:
    """Everything :func:`parse_log` reads from one SGLang server log.

    Tables (pandas DataFrames, one row per log line, in log order):

    * ``decode``: ``time, rank, running_req, num_token, token_usage, cuda_graph, gen_throughput,
      queue_req`` then whatever else the SGLang version printed (``largest_len``, ``accept_len``,
      ``accept_rate``, ``full_token``, ``swa_token``..., ``est_decode_tflops_per_gpu``,
      ``fwd_occupancy``, ``iter``...). ``cuda_graph`` is a nullable boolean (2024 lines do not
      say; ``cpu graph``/``npu graph`` land here too). Hybrid models fill ``num_token`` and
      ``token_usage`` from the fuller pool, as SGLang's own metrics do.
    * ``prefill``: ``time, rank, new_seq, new_token, cached_token, token_usage, running_req,
      queue_req`` then extras (``cache_hit_rate`` as a fraction, ``input_throughput``...).
    * ``retractions``: ``time, rank, retracted_reqs, new_token_ratio_before, new_token_ratio_after``.
    * ``errors``: ``time, rank, kind, message, text``; ``kind`` in :data:`ERROR_KINDS`, ``message``
      the final exception line, ``text`` the whole (masked) traceback.
    * ``http``: uvicorn access lines: ``time, client, method, path, status``.

    ``time`` is the naive timestamp printed in the log (NaT when a line had none; lines of builds
    that print only the clock get the ``date`` given to :func:`parse_log`, else the last date
    seen, else 1970-01-01). ``rank`` is the rank label as printed (``"TP0"``, ``"DP1 TP1"``,
    ``"TP0 EP0"``), ``""`` when the server ran without parallelism. ``startup`` holds facts such
    as ``max_total_num_tokens``, ``max_running_requests``, ``context_len``, ``kv_cache_tokens``,
    ``kv_cache_size_gb``, ``weight_load_time_s``, ``weight_mem_usage_gb``,
    ``cuda_graph_capture_time_s``, ``cuda_graph_batch_sizes``, ``available_gpu_mem_gb``; the
    first rank's value wins. ``standin`` is the profile name when the log comes from glm5lib's
    stand-in server (its first line says so), else None.
    """

    server_args: dict[str, Any] = field(default_factory=dict)
    server_args_incomplete: bool = False
    startup: dict[str, Any] = field(default_factory=dict)
    ready_at: pd.Timestamp | None = None
    decode: pd.DataFrame = field(default_factory=pd.DataFrame)
    prefill: pd.DataFrame = field(default_factory=pd.DataFrame)
    retractions: pd.DataFrame = field(default_factory=pd.DataFrame)
    errors: pd.DataFrame = field(default_factory=pd.DataFrame)
    http: pd.DataFrame = field(default_factory=pd.DataFrame)
    skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)
    standin: str | None = None
    standin_path: str | None = None
    became_ready: bool = False
    lines: int = 0
    first_time: pd.Timestamp | None = None
    last_time: pd.Timestamp | None = None

    @property
    def ready(self) -> bool:
        """True when the log says the server became ready (even if that line had no time)."""
        return self.became_ready or self.ready_at is not None

    @property
    def fatal(self) -> bool:
        """True when the log holds at least one error row."""
        return not self.errors.empty

    def crash_cause(self) -> str | None:
        """The most specific error kind in the log (oom before nccl before sigquit...), or None."""
        if self.errors.empty:
            return None
        kinds = set(self.errors["kind"])
        for kind in ERROR_KINDS:
            if kind in kinds:
                return kind
        return None

    def masked_server_args(self) -> dict[str, Any]:
        """The server args with secrets masked (what to display or save)."""
        return mask_secrets(self.server_args)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready digest: the args that matter, startup facts, decode stats and errors."""
        return _summary(self)

    def __repr__(self) -> str:
        return (
            f"ServerLog(lines={self.lines}, server_args={len(self.server_args)} fields"
            f"{' (incomplete)' if self.server_args_incomplete else ''}, ready_at={self.ready_at}, "
            f"decode={len(self.decode)} rows, prefill={len(self.prefill)} rows, "
            f"retractions={len(self.retractions)}, errors={len(self.errors)}, skipped={self.skipped}"
            f"{f', standin={self.standin!r}' if self.standin else ''})"
        )


# --------------------------------------------------------------------------------------------
# The parser


_STANDIN_RE = re.compile(r"glm5lib stand-in server \(not SGLang\): profile '([^']*)' \(([^)]*)\)")
_KV_EQ_RE = re.compile(r"([A-Za-z_][\w ]*?)\s*=\s*([^,]+?)(?=,\s*[A-Za-z_][\w ]*\s*=|[,.]?\s*$)")
_NUM_UNIT_RE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(GB|GiB|MB|s|ms|%)?\.?$")
_BS_LIST_RE = re.compile(r"bs \[([\d,\s]*)\]|bs=\[([\d,\s]*)\]|\[([\d,\s]+)\]")


def _typed(value: str) -> Any:
    value = value.strip().rstrip(".")
    m = _NUM_UNIT_RE.match(value)
    if m:
        num = m.group(1)
        return int(num) if num.lstrip("-").isdigit() else float(num)
    if value in _SIMPLE_LITERALS:
        return _SIMPLE_LITERALS[value]
    return value


def _kv_pairs(text: str) -> dict[str, Any]:
    """``a=1, avail mem=3.5 GB, type=Cls`` -> {"a": 1, "avail_mem_gb": 3.5, "type": "Cls"}."""
    out: dict[str, Any] = {}
    for m in _KV_EQ_RE.finditer(text):
        key = m.group(1).strip().lower().replace(" ", "_")
        raw = m.group(2).strip()
        unit = _NUM_UNIT_RE.match(raw.rstrip("."))
        if unit and unit.group(2):
            key = f"{key}_{unit.group(2).lower().replace('gib', 'gb')}"
            if unit.group(2) == "%":
                key = key[:-2] + "_pct"
        out[key] = _typed(raw)
    return out


_FIRST_RANK_RE = re.compile(r"(?:[A-Z][A-Z_]*0(?: |$))*")
_GB_RE = re.compile(r"(avail mem|mem usage|K size|V size|KV size)\s*[=:]\s*(\d+(?:\.\d+)?)\s*GB", re.IGNORECASE)
_ELAPSED_RE = re.compile(r"(?:[Tt]ime elapsed|elapsed)\s*[:=]\s*(\d+(?:\.\d+)?)\s*s")


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
        self.shapes: dict[tuple[str, tuple[str, ...]], _Shape] = {}
        self._fast: dict[int, list[tuple[Any, Any, Any]]] = {}
        self._fast_patterns: dict[str, tuple[Any, Any, Any]] = {}
        self._bulk_shapes: dict[str, tuple[_Shape, re.Pattern[str]]] = {}
        self._retract_shape: _Shape | None = None
        self.http_rows: list[tuple[str, str, str, str, int]] = []
        self.errors: list[dict[str, Any]] = []
        self._open_blocks: list[dict[str, Any]] = []
        self._block_body_started = False
        self._cache: dict[str, tuple[int, pd.DataFrame]] = {}
        # A follower builds again and again: it keeps the tables and hands out copies.
        self.reuse_frames = True
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

    def _feed(self, lines: list[str], indices: list[int] | None = None, base: int | None = None) -> None:
        """Parse ``lines`` (or only those at ``indices``, the others having been parsed in bulk)."""
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
                timed_line = lines[i - 1]
                if blocks_open:
                    self._close_blocks()
                    blocks_open = False
                if args_open:
                    self._try_finish_args(final=True)
                    args_open = False
            prev = i
            # Fast path: a scheduler line of a shape seen before: one regex match, no state.
            if "batch" in line and not args_open:
                bucket = get(_bucket_key(line))
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
                rm = _RETRACT_FAST_RE.match(line)
                if rm is not None:
                    self._retract_fast(base + i, rm.groups())
                    timed_line = line
                    if blocks_open:
                        self._close_blocks()
                        blocks_open = False
                    continue
            if not blocks_open and not args_open and line[:1] in ("I", "\x1b"):
                # uvicorn access lines are the next most frequent: one regex, no dispatch
                # (coloured ones too, unless something is glued on, which _line splits).
                plain = line if line[0] == "I" else _ANSI_RE.sub("", line)
                if plain.startswith("INFO:  ") and (plain is line or plain.find("[", 1) < 0):
                    um = _UVICORN_RE.match(plain)
                    if um is not None:
                        if timed_line is not None:
                            self._sync_clock(timed_line)
                            timed_line = None
                        client, _port, method, target, status = um.groups()
                        self.http_rows.append((self.last_time_str, client, method, target, int(status)))
                        continue
            if timed_line is not None:
                # The clock matters only to a line without its own time: read it lazily.
                if line[:1] != "[":
                    self._sync_clock(timed_line)
                timed_line = None
            self._slow(line, base + i)
            args_open = self._args_buffer is not None
            blocks_open = bool(self._open_blocks)
        if indices is not None and prev != len(lines) - 1 and lines:
            timed_line = lines[-1]
            if blocks_open:
                self._close_blocks()
        self.lines = base + len(lines)
        if timed_line is not None:
            self._sync_clock(timed_line)

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
        m = _PREFIX_RE.match(line)
        if m is not None:
            self._stamp(m.group(1), m.group(2))

    def _line(self, raw: str, cut: bool = False) -> None:
        line = raw.rstrip("\r\n")
        if "\x1b" in line:
            line = _ANSI_RE.sub("", line)
        glued = line.find("[", 1)
        if glued > 0:
            gm = _GLUED_SEARCH_RE.search(line, glued)
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
            m = _PREFIX_RE.match(line)
            if m is not None:
                msg = line[m.end() :]
                stamp = self._stamp(m.group(1), m.group(2))
                rank = m.group(3).strip()
                if m.group(4) is not None and not rank:
                    rank = f"TP{m.group(4)}"
                self._message(msg, stamp, rank, line, cut)
                return
            g = _GPU_PREFIX_RE.match(line)
            if g is not None:
                self._message(line[g.end() :], self.last_time_str, f"TP{g.group(1)}", line, cut)
                return
            g = _RANK_ONLY_PREFIX_RE.match(line)
            if g is not None:
                self._message(line[g.end() :], self.last_time_str, g.group(1), line, cut)
                return
        elif line[0].isdigit():
            m = _CUT_PREFIX_RE.match(line)
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
            um = _UVICORN_RE.match(msg)
            if um is not None:
                self._close_blocks()
                self.http_rows.append((stamp, um.group(1), um.group(3), um.group(4), int(um.group(5))))
                return
        kind = classify_fatal(msg)
        if _TRACEBACK in msg or (kind is not None and kind in ("scheduler_exception",) and msg.rstrip().endswith(":")):
            self._open_block(kind, stamp, rank, msg)
            return
        self._close_blocks()
        if kind is not None:
            self.errors.append(
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
        self._startup(msg, rank, cut)

    def _unprefixed(self, line: str, cut: bool) -> None:
        if self._open_blocks:
            if _UVICORN_RE.match(line) or _is_nccl(line) or _GLOG_RE.match(line):
                self._close_blocks()
            else:
                self._block_text(line)
                return
        stripped = line.strip()
        if stripped.startswith(_TRACEBACK) or stripped.startswith("Traceback"):
            self._open_block(None, self.last_time_str, "", stripped)
            return
        um = _UVICORN_RE.match(line)
        if um is not None:
            self.http_rows.append(
                (self.last_time_str, um.group(1), um.group(3), um.group(4), int(um.group(5)))
            )
            return
        if _is_nccl(line) or _GLOG_RE.match(line) or _OTHER_RUNTIME_RE.match(line):
            kind = classify_fatal(line)
            if kind is not None:
                self.errors.append(
                    {"time": self.last_time_str, "rank": "", "kind": kind, "message": stripped, "text": stripped}
                )
            return
        kind = classify_fatal(line)
        if kind == "scheduler_exception" and stripped.endswith(":"):
            # "Exception in ControllerSingle:" (2024): the traceback follows on the next lines.
            self._open_block(kind, self.last_time_str, "", stripped)
            return
        if kind is not None:
            self.errors.append(
                {"time": self.last_time_str, "rank": "", "kind": kind, "message": stripped, "text": stripped}
            )
            return
        if _is_tqdm(line) or stripped.startswith(("INFO:", "WARNING:", "ERROR:", "DEBUG:")):
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
    def _shape(self, kind: str, keys: tuple[str, ...]) -> _Shape:
        shape = self.shapes.get((kind, keys))
        if shape is None:
            shape = self.shapes[(kind, keys)] = _Shape(kind, keys)
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
        parsed = _parse_scheduler_msg(msg)
        if parsed is None:
            self._skip(line)
            return
        keys, vals, it, raw_keys, head = parsed
        self._add(kind, keys, vals, stamp, rank, it)
        if raw_keys is None and it is None and keys[0].startswith("mixed_") and len(self._fast_patterns) < 256:
            entry = self._learn_mixed(keys, vals, head, msg, line)
            if entry is not None:
                bucket = self._fast.setdefault(_bucket_key(line), [])
                if entry not in bucket:
                    bucket.append(entry)
        if raw_keys is not None and len(self._fast_patterns) < 256:
            entry = self._learn(kind, keys, head, raw_keys, line)
            if entry is not None:
                bucket = self._fast.setdefault(_bucket_key(line), [])
                if entry not in bucket:
                    bucket.append(entry)

    def _learn(self, kind: str, keys: tuple[str, ...], head: str, raw_keys: list[str], line: str) -> Any:
        regex = _shape_regex(head, raw_keys)
        entry = self._fast_patterns.get(regex.pattern)
        if entry is None and regex.match(line):
            shape = self._shape(kind, keys)
            entry = self._fast_patterns[regex.pattern] = (regex.match, shape.order.append, shape.rows.append)
            # No "^": a leading literal lets the regex engine skip ahead quickly.
            self._bulk_shapes[regex.pattern] = (shape, re.compile(regex.pattern, re.MULTILINE))
        return entry

    def _learn_mixed(self, keys: tuple[str, ...], vals: tuple[str, ...], head: str, msg: str, line: str) -> Any:
        """A fast-path regex for ``Prefill batch(mixed #running-req: N). #new-seq: ...`` lines
        (one in a few dozen lines of a busy server's log), learned from one parsed line.

        Values may not hold spaces, commas, brackets or a final dot, so that every line it
        matches splits into the same keys and values as :func:`_parse_scheduler_msg` gives;
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
        value = _FAST_VALUE
        inner = ", ".join(re.escape(k) + ": " + value for k in raw_keys[: len(inner_parts)])
        body = ", ".join(re.escape(k) + ": " + value for k in raw_keys[len(inner_parts) :])
        # "(?:(\[)(?!))?" never matches: the iteration group, None as on the slow path.
        pattern = _SHAPE_PREFIX + re.escape(head) + r"(?:(\[)(?!))?\(mixed " + inner + r"\)[.,] " + body + r"\.?(?:, ?)?$"
        entry = self._fast_patterns.get(pattern)
        if entry is None:
            regex = re.compile(pattern)
            m = regex.match(line)
            if m is None or m.groups()[3:] != vals:
                return None
            shape = self._shape("prefill", keys)
            entry = self._fast_patterns[pattern] = (regex.match, shape.order.append, shape.rows.append)
        return entry

    # ---- bulk parsing of a whole file
    def feed_bulk(self, lines: list[str]) -> None:
        """Parse a whole file: scheduler lines of one shape are parsed together in C (regex
        substitution into tab-separated text, then pandas' CSV reader); the rest line by line."""
        base = self.lines
        if self.first_time is None:
            for line in lines[:1000]:
                m = _PREFIX_RE.match(line)
                if m is not None and m.group(1):
                    self.first_time = f"{m.group(1)} {m.group(2).replace(',', '.')}"
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
                left = self._bulk_group(lines, idx, base)
                if left is None or len(left) == 0 or len(left) == len(idx):
                    break
                idx = left
            if left is None or len(left):
                rest.append(idx if left is None else left)
        rest_idx = np.sort(np.concatenate(rest)) if rest else np.empty(0, dtype=np.int64)
        self._feed(lines, rest_idx.tolist(), base)
        self.lines = base + len(lines)

    def _bulk_group(self, lines: list[str], idx: np.ndarray, base: int) -> np.ndarray | None:
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
        if self._learn(kind, keys, head, raw_keys, first) is None:
            return None
        shape, _bulk_re = self._bulk_shapes[_shape_regex(head, raw_keys).pattern]
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

    def _retract_fast(self, index: int, groups: tuple[str | None, ...]) -> None:
        shape = self._retract_shape
        if shape is None:
            shape = self._retract_shape = self._shape("retract", _RETRACT_COLUMNS)
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
                keys.append(_column_name(key))
                vals.append(val.strip().rstrip(".,"))
        if "retracted_reqs" not in keys:
            self._skip(line)
            return
        self._add("retract", tuple(keys), tuple(vals), stamp, rank)

    # ---- server args
    def _try_finish_args(self, final: bool) -> None:
        buf = self._args_buffer or ""
        _pieces, closed = _split_top_level(buf.split("ServerArgs(", 1)[-1].replace("\n", ""))
        if closed or final:
            parsed = parse_server_args(buf)
            if not self.server_args or len(parsed) >= len(self.server_args):
                self.server_args = dict(parsed)
                self.server_args_incomplete = parsed.incomplete
            self._args_buffer = None

    # ---- startup facts
    def _startup(self, msg: str, rank: str, cut: bool = False) -> None:
        # Facts from the first rank (all labels 0, or none) win; other ranks only fill gaps.
        first_rank = _FIRST_RANK_RE.fullmatch(rank) is not None
        s = self.startup if first_rank else self._startup_other
        if msg.startswith("Load weight begin"):
            m = _GB_RE.search(msg)
            if m and first_rank:
                s.setdefault("load_weight_begin_avail_mem_gb", float(m.group(2)))
            return
        if msg.startswith("Load weight end"):
            if not first_rank and "weight_load_time_s" in s:
                return
            kv = _kv_pairs(msg.split(".", 1)[1] if "." in msg else msg)
            key = "weight" if "weight_load_time_s" not in s else "draft_weight"
            if "elapsed_s" in kv:
                s[f"{key}_load_time_s"] = kv.pop("elapsed_s")
            for name, val in kv.items():
                s.setdefault(f"{key}_{name}" if key == "draft_weight" else _weight_key(name), val)
            return
        if msg.startswith("KV Cache is allocated") or "KV Cache is allocated" in msg:
            if "kv_cache_tokens" in s and not first_rank:
                return
            m = re.search(r"#tokens:\s*(\d+)", msg)
            if m:
                s["kv_cache_tokens"] = int(m.group(1))
            m = re.search(r"dtype:\s*([\w.]+)", msg)
            if m:
                s["kv_cache_dtype"] = m.group(1)
            sizes = {k.lower().replace(" ", "_"): float(v) for k, v in _GB_RE.findall(msg)}
            for k, v in sizes.items():
                s[f"kv_cache_{k}_gb".replace("kv_cache_kv_size", "kv_cache_size").replace("_size_gb", "_size_gb")] = v
            total = sizes.get("kv_size", sizes.get("k_size", 0.0) + sizes.get("v_size", 0.0))
            if total:
                s["kv_cache_size_gb"] = round(total, 4)
            return
        if "mem usage:" in msg and "KVPool" in msg:
            m = re.search(r"(\w*KVPool) mem usage:\s*(\d+(?:\.\d+)?)\s*GB", msg)
            if m:
                s.setdefault("kv_cache_size_gb", float(m.group(2)))
            for k, v in re.findall(r"(swa size|full size):\s*(\d+)", msg):
                s.setdefault(f"kv_cache_{k.replace(' ', '_')}_tokens", int(v))
            return
        if msg.startswith("Memory pool end"):
            m = _GB_RE.search(msg)
            if m and "memory_pool_end_avail_mem_gb" not in s:
                s["memory_pool_end_avail_mem_gb"] = float(m.group(2))
            return
        low = msg.lower()
        if low.startswith("capture") and "graph" in low:
            stage = "draft_cuda_graph" if "draft" in low else "cuda_graph"
            if "piecewise" in low:
                stage = "piecewise_cuda_graph"
            bs = _BS_LIST_RE.search(msg)
            if bs and (" bs" in msg or "bs=" in msg or "num tokens" in msg):
                nums = bs.group(1) or bs.group(2) or bs.group(3) or ""
                what = "num_tokens" if "num tokens" in msg else "batch_sizes"
                s.setdefault(f"{stage}_{what}", [int(x) for x in re.findall(r"\d+", nums)])
            if " end" in low:
                if f"{stage}_capture_time_s" in s:
                    return
                m = _ELAPSED_RE.search(msg)
                if m:
                    s[f"{stage}_capture_time_s"] = float(m.group(1))
                for k, v in _GB_RE.findall(msg):
                    s[f"{stage}_{k.lower().replace(' ', '_')}_gb"] = float(v)
            elif " begin" in low:
                m = _GB_RE.search(msg)
                if m:
                    s.setdefault(f"{stage}_begin_avail_mem_gb", float(m.group(2)))
            return
        if msg.startswith("max_total_num_tokens="):
            if "max_total_num_tokens" in s and not first_rank:
                return
            pairs = list(_kv_pairs(msg).items())
            if cut and pairs:
                pairs.pop()  # the last value of a cut-off line may itself be cut
            for name, val in pairs:
                s[name] = val
            return
        if msg.startswith("Init torch distributed ends"):
            kv = _kv_pairs(msg.split(".", 1)[1] if "." in msg else "")
            if "elapsed_s" in kv:
                s.setdefault("init_torch_distributed_time_s", kv["elapsed_s"])
            if "mem_usage_gb" in kv:
                s.setdefault("init_torch_distributed_mem_usage_gb", kv["mem_usage_gb"])
            return
        if msg.startswith("Engine startup timings"):
            body = msg.split(":", 1)[1] if ":" in msg else ""
            s.setdefault("startup_timings_s", {k: v for k, v in _kv_pairs(body).items()})
            return

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

    def _close_blocks(self) -> None:
        if not self._open_blocks:
            return
        for block in self._open_blocks:
            self.errors.append(_block_row(block))
        self._open_blocks = []
        self._block_body_started = False

    # ---- tables
    def build(self) -> ServerLog:
        errors = list(self.errors) + [_block_row(b) for b in self._open_blocks]
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
            ready_at=pd.Timestamp(self.ready_at) if self.ready_at else None,
            decode=self._frame("decode", _DECODE_COLUMNS),
            prefill=self._frame("prefill", _PREFILL_COLUMNS),
            retractions=self._frame("retract", _RETRACT_COLUMNS),
            errors=self._errors_frame(errors),
            http=self._http_frame(),
            skipped=self.skipped,
            skipped_examples=list(self.skipped_examples),
            standin=self.standin,
            standin_path=self.standin_path,
            became_ready=self.became_ready,
            lines=self.lines,
            first_time=pd.Timestamp(self.first_time) if self.first_time else None,
            last_time=pd.Timestamp(self.last_time_str) if self.last_time_str else None,
        )

    def _frame(self, kind: str, columns: tuple[str, ...]) -> pd.DataFrame:
        shapes = [sh for sh in self.shapes.values() if sh.kind == kind and (sh.rows or sh.frames)]
        total = sum(len(sh.rows) + sum(len(f) for f in sh.frames) for sh in shapes)
        cached = self._cache.get(kind)
        if cached is not None and cached[0] == total:
            return cached[1].copy()
        parts = []
        for shape in shapes:
            if shape.rows:
                # Type only the rows added since the last build (a follower builds often).
                table = np.empty((len(shape.rows), 3 + len(shape.columns)), dtype=object)
                table[:] = shape.rows
                cols: dict[str, Any] = {"_order": np.array(shape.order, dtype=np.int64)}
                cols["time"] = _to_timestamps(pd.Series(table[:, 0], dtype=object)).to_numpy()
                ranks = table[:, 1]
                ranks[np.equal(ranks, None)] = ""
                cols["rank"] = ranks
                if not np.equal(table[:, 2], None).all():
                    cols["iter"] = _convert_column(table[:, 2])
                for k, key in enumerate(shape.columns):
                    cols[key] = _convert_column(table[:, 3 + k])
                shape.frames.append(pd.DataFrame(cols))
                del shape.rows[:], shape.order[:]  # the fast path keeps appending to these lists
                if len(shape.frames) > 8:
                    shape.frames[:] = [pd.concat(shape.frames, ignore_index=True, sort=False)]
            if len(shape.frames) > 1 and any("iter" in f.columns for f in shape.frames):
                # Rows of one shape, with and without iteration numbers, read by different paths:
                # every part gets the column, so it lands where one frame of the shape puts it.
                for f in shape.frames:
                    if "iter" not in f.columns:
                        f.insert(3, "iter", np.nan)
            parts.extend(shape.frames)
        base = ["time", "rank", *columns]
        if not parts:
            frame = pd.DataFrame({c: pd.Series(dtype="datetime64[ns]" if c == "time" else object) for c in base})
        else:
            # Extra columns appear in the order the log first shows them, whichever path read them.
            parts.sort(key=lambda f: int(f["_order"].min()))
            # Columns are fixed up first (none of it depends on row order), then one take puts
            # rows into log order and columns into their order (each take is a full copy).
            frame = parts[0].copy() if len(parts) == 1 else pd.concat(parts, ignore_index=True, sort=False)
            if "iter" in frame.columns and frame["iter"].isna().all():
                frame = frame.drop(columns="iter")
            frame["time"] = _to_timestamps(frame["time"])
            if kind in ("decode", "prefill"):
                _fill_hybrid(frame)
            for c in columns:
                if c not in frame.columns:
                    frame[c] = pd.array([pd.NA] * len(frame), dtype="boolean") if c == "cuda_graph" else np.nan
            if "cuda_graph" in frame.columns and frame["cuda_graph"].dtype == object:
                frame["cuda_graph"] = frame["cuda_graph"].astype("boolean")
            extras = [c for c in frame.columns if c not in base and c != "_order"]
            keep = [frame.columns.get_loc(c) for c in base + extras]
            if len(parts) == 1:
                frame = frame.iloc[:, keep]
            else:
                perm = np.argsort(frame["_order"].to_numpy(), kind="stable")
                frame = frame.iloc[perm, keep]
                frame.index = pd.RangeIndex(len(frame))
        if not self.reuse_frames:
            return frame  # nobody keeps this parser: no copy to protect a cache
        self._cache[kind] = (total, frame)
        return frame.copy()

    def _errors_frame(self, errors: list[dict[str, Any]]) -> pd.DataFrame:
        cols = ["time", "rank", "kind", "message", "text"]
        if not errors:
            return pd.DataFrame({c: pd.Series(dtype="datetime64[ns]" if c == "time" else object) for c in cols})
        frame = pd.DataFrame(errors, columns=cols)
        frame["time"] = _to_timestamps(frame["time"])
        return frame

    def _http_frame(self) -> pd.DataFrame:
        cols = ["time", "client", "method", "path", "status"]
        if not self.http_rows:
            return pd.DataFrame({c: pd.Series(dtype="datetime64[ns]" if c == "time" else object) for c in cols})
        frame = pd.DataFrame(self.http_rows, columns=cols)
        frame["time"] = _to_timestamps(frame["time"])
        return frame


def _weight_key(name: str) -> str:
    return {
        "avail_mem_gb": "weight_avail_mem_gb",
        "mem_usage_gb": "weight_mem_usage_gb",
        "type": "model_class",
        "dtype": "weight_dtype",
        "quant": "weight_quant",
        "quant_algo": "weight_quant_algo",
    }.get(name, f"weight_{name}")


def _block_row(block: dict[str, Any]) -> dict[str, Any]:
    lines = [ln for ln in block["lines"]]
    while lines and not lines[-1].strip():
        lines.pop()
    text = mask_text("\n".join(lines))
    message = ""
    for ln in reversed(lines):
        if _EXC_LINE_RE.match(ln) and not ln.strip().startswith(("File ", "Traceback")):
            message = ln.strip()
            break
    if not message:
        # No exception line (the traceback was cut off): the head says most.
        message = next((ln.strip() for ln in lines if ln.strip()), "")
    kind = _classify_block(text)
    if kind == "other" and block.get("head"):
        kind = block["head"]
    return {"time": block["time"], "rank": block["rank"], "kind": kind, "message": mask_text(message), "text": text}


def _fill_hybrid(frame: pd.DataFrame) -> None:
    """Hybrid (SWA / mamba) models log per-pool counts; fill the common columns as SGLang's
    metrics do: the fuller pool counts."""
    for col, parts in (("num_token", ("full_token", "swa_token")), ("token_usage", ("full_token_usage", "swa_token_usage"))):
        present = [p for p in parts if p in frame.columns]
        if not present:
            continue
        filled = pd.concat([pd.to_numeric(frame[p], errors="coerce") for p in present], axis=1).max(axis=1)
        if col not in frame.columns:
            frame[col] = filled
        elif pd.api.types.is_numeric_dtype(frame[col].dtype):
            frame[col] = frame[col].fillna(filled)


def _to_timestamps(values: Any) -> pd.Series:
    series = pd.Series(values, dtype=object) if not isinstance(values, pd.Series) else values
    if pd.api.types.is_datetime64_dtype(series.dtype):
        return series
    try:
        return pd.Series(np.array(series.to_numpy(), dtype="datetime64[ns]"), index=series.index)
    except (ValueError, TypeError):
        pass
    try:
        return pd.to_datetime(series, format="ISO8601")
    except (ValueError, TypeError):
        return pd.to_datetime(series, errors="coerce", format="mixed")


# --------------------------------------------------------------------------------------------
# Public entry points


def _split_text(text: str) -> list[str]:
    """Lines of ``text``, split at \\n, \\r\\n and the \\r of progress-bar redraws; a final
    empty string when the text ends with a newline (so a cut-off last line can be told)."""
    # ANSI colours and lines glued onto progress bars are handled line by line (rare, and a
    # whole-text substitution would cost more than the parse).
    if "\r" not in text:
        return text.split("\n")
    lines = text.splitlines()
    if text.endswith(("\n", "\r")):
        lines.append("")
    return lines


def _read_source(path_or_text: str | os.PathLike[str] | bytes) -> str | bytes:
    """The log: bytes when read from a file (or given as bytes), else the text given."""
    if isinstance(path_or_text, bytes):
        return path_or_text
    if isinstance(path_or_text, os.PathLike):
        path = Path(path_or_text)
        if not path.is_file():
            raise FileNotFoundError(f"server log {str(path)!r} does not exist (pass a path or the log text)")
        return path.read_bytes()
    if not isinstance(path_or_text, str):
        raise TypeError(
            f"expected a path or the log text, got {type(path_or_text).__name__}"
        )
    if "\n" not in path_or_text and len(path_or_text) < 4096 and not path_or_text.lstrip().startswith("["):
        path = Path(path_or_text)
        try:
            if path.is_file():
                return path.read_bytes()
        except OSError:
            pass
        if path.suffix in (".log", ".txt", ".out", ".jsonl", ".json") and not any(c.isspace() for c in path_or_text):
            raise FileNotFoundError(f"server log {path_or_text!r} does not exist (pass a path or the log text)")
    return path_or_text


def _read_text(path_or_text: str | os.PathLike[str] | bytes) -> str:
    source = _read_source(path_or_text)
    return source.decode("utf-8", errors="replace") if isinstance(source, bytes) else source


_DECODE_CHUNK = 1 << 20
# The ASCII characters str.splitlines() breaks at, besides "\n".
_ASCII_BREAKS_BUT_NL = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")


def _split_bytes(raw: bytes) -> list[str]:
    """``_split_text(raw.decode("utf-8", errors="replace"))``, decoded a megabyte at a time.

    One progress-bar character would make the whole text a two-bytes-per-character string
    (twice the memory, slower to split); decoded in pieces cut after a newline, only the
    pieces that hold one are. A newline byte is never part of a multi-byte character, and a
    cut after "\n" keeps "\r\n" whole, so the pieces split exactly as the whole text would."""
    if not raw:
        return [""]
    crs = b"\r" in raw
    lines: list[str] = []
    n = len(raw)
    start = 0
    while start < n:
        end = raw.find(b"\n", min(start + _DECODE_CHUNK, n) - 1)
        end = n if end < 0 else end + 1
        piece = raw[start:end].decode("utf-8", errors="replace")
        if crs and not (piece.isascii() and not any(c in piece for c in _ASCII_BREAKS_BUT_NL)):
            lines += piece.splitlines()
        elif crs:
            # No character here that splitlines() breaks at but "\n" (one "\r" of a progress
            # bar elsewhere in the log is enough to get here): split() gives the same lines,
            # faster, with an empty string after a final newline, which the final append
            # below adds back where splitlines() would leave it out.
            parts = piece.split("\n")
            if piece.endswith("\n"):
                parts.pop()
            lines += parts
        else:
            parts = piece.split("\n")
            if end < n:
                parts.pop()  # the empty string after the piece's final newline
            lines += parts
        start = end
    if crs and raw.endswith((b"\n", b"\r")):
        lines.append("")
    return lines


def parse_log(path_or_text: str | os.PathLike[str] | bytes, *, date: str | None = None) -> ServerLog:
    """Parse a whole SGLang server log (a path, the text, or bytes) into a :class:`ServerLog`.

    ``date`` (``YYYY-MM-DD``) dates the lines of old builds that print only ``HH:MM:SS``;
    without it such lines get the date of the last dated line, or 1970-01-01.
    """
    source = _read_source(path_or_text)
    # Millions of small objects and no cycles: the cyclic collector would only slow this down.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        lines = _split_bytes(source) if isinstance(source, bytes) else _split_text(source)
        del source
        return _parse_lines(lines, date)
    finally:
        if gc_was_enabled:
            gc.enable()


def _parse_lines(lines: list[str], date: str | None) -> ServerLog:
    """Parse the lines of a whole log, as _split_text gives them."""
    parser = _Parser(date=date)
    parser.reuse_frames = False
    cut = bool(lines) and lines[-1] != ""
    if not cut and lines:
        lines.pop()
    if cut:
        # The final line may be cut off: it is parsed on its own, with care.
        parser.feed_bulk(lines[:-1])
        parser.feed(lines[-1:], final=True)
    else:
        parser.feed_bulk(lines)
    parser._close_blocks()
    if parser._args_buffer is not None:
        parser._try_finish_args(final=True)
    return parser.build()


class LogFollower:
    """Incremental reader of a log a running server is still writing.

    Each :meth:`update` reads only the bytes appended since the last call, parses the complete
    lines among them (a partial last line waits for its newline) and returns the
    :class:`ServerLog` so far. A file that shrinks (rotated or truncated) is read again from
    its start.
    """

    def __init__(self, path: str | os.PathLike[str], *, date: str | None = None) -> None:
        self.path = Path(path)
        self._date = date
        self._reset()

    def _reset(self) -> None:
        self._parser = _Parser(date=self._date)
        self._offset = 0
        self._pending = b""

    @property
    def offset(self) -> int:
        """Bytes of the file consumed so far (complete lines only)."""
        return self._offset - len(self._pending)

    def update(self) -> ServerLog:
        """Read what was appended, return the :class:`ServerLog` so far."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return self._parser.build()
        if size < self._offset:
            log.info("%s shrank (%d < %d bytes): reading it again from the start", self.path, size, self._offset)
            self._reset()
        if size > self._offset:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read(size - self._offset)
            self._offset += len(data)
            data = self._pending + data
            cut = data.rfind(b"\n")
            cr = data.rfind(b"\r")
            cut = max(cut, cr)
            if cut < 0:
                self._pending = data
            else:
                self._pending = data[cut + 1 :]
                text = data[: cut + 1].decode("utf-8", errors="replace")
                lines = _split_text(text)
                if lines and lines[-1] == "":
                    lines.pop()
                self._parser.feed(lines, final=False)
        return self._parser.build()

    def finish(self) -> ServerLog:
        """Parse the pending partial line too (the server has stopped writing)."""
        self.update()
        if self._pending:
            text = self._pending.decode("utf-8", errors="replace")
            self._pending = b""
            self._parser.feed(_split_text(text), final=True)
        self._parser._close_blocks()
        return self._parser.build()


def follow_log(path: str | os.PathLike[str], *, date: str | None = None) -> LogFollower:
    """A :class:`LogFollower` for ``path`` (which may not exist yet)."""
    return LogFollower(path, date=date)


def to_epoch(series: pd.Series | pd.Timestamp | Any, tz: str | None = None) -> Any:
    """Log times (naive, the server's local clock) -> float Unix epoch seconds.

    ``tz`` names the server's time zone (e.g. ``"Europe/Berlin"``); by default this machine's
    local zone, which is right when the log was written here. NaT becomes NaN.
    """
    if isinstance(series, pd.Timestamp | str):
        return float(to_epoch(pd.Series([pd.Timestamp(series)]), tz=tz).iloc[0])
    s = pd.to_datetime(pd.Series(series))
    name = getattr(series, "name", None)
    if s.dt.tz is not None:
        return _utc_seconds(s.dt.tz_convert("UTC").dt.tz_localize(None)).rename(name)
    if tz is not None:
        local = s.dt.tz_localize(tz, ambiguous="NaT", nonexistent="shift_forward")
        return _utc_seconds(local.dt.tz_convert("UTC").dt.tz_localize(None)).rename(name)
    # This machine's zone: its UTC offset per hour of wall time (DST-aware through mktime),
    # computed once per distinct hour, so a long log converts at vectorised speed.
    import time as _time

    hours = s.dt.floor("h")
    offsets = {}
    for hour in hours.dropna().unique():
        wall = pd.Timestamp(hour)
        offsets[wall] = _time.mktime(wall.timetuple()) - (wall - _EPOCH).total_seconds()
    return (_utc_seconds(s) + hours.map(offsets).astype(float)).rename(name)


_EPOCH = pd.Timestamp("1970-01-01")


def _utc_seconds(naive: pd.Series) -> pd.Series:
    """Naive timestamps read as UTC -> float seconds since the epoch (NaT -> NaN)."""
    return (naive - _EPOCH).dt.total_seconds()


# --------------------------------------------------------------------------------------------
# bench_serving results

_BENCH_LABELS = {
    "backend": "backend",
    "traffic request rate": "request_rate",
    "request rate": "request_rate",
    "max request concurrency": "max_concurrency",
    "max reqeuest concurrency": "max_concurrency",
    "successful requests": "completed",
    "failed requests": "failed",
    "benchmark duration (s)": "duration",
    "total input tokens": "total_input_tokens",
    "total input text tokens": "total_input_text_tokens",
    "total input vision tokens": "total_input_vision_tokens",
    "total generated tokens": "total_output_tokens",
    "total generated tokens (retokenized)": "total_output_tokens_retokenized",
    "request throughput (req/s)": "request_throughput",
    "input token throughput (tok/s)": "input_throughput",
    "output token throughput (tok/s)": "output_throughput",
    "peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "peak concurrent requests": "max_concurrent_requests",
    "total token throughput (tok/s)": "total_throughput",
    "total throughput (tok/s)": "total_throughput",
    "concurrency": "concurrency",
    "accept length": "accept_length",
    "request rate configured (rps)": "request_rate",
    "maximum request concurrency": "max_concurrency",
}
_BENCH_METRIC_RE = re.compile(
    r"^(mean|median|std|p\d+(?:\.\d+)?|max|min) (e2e latency|e2el|ttft|tpot|itl) \(ms\)$"
)
_BENCH_METRIC_NAMES = {"e2e latency": "e2e_latency", "e2el": "e2el", "ttft": "ttft", "tpot": "tpot", "itl": "itl"}
_BENCH_HEADER_RE = re.compile(r"^=+\s*Serving Benchmark Result\s*=+\s*$")


def parse_bench_result(path_or_text: str | os.PathLike[str] | bytes) -> pd.DataFrame:
    """bench_serving output -> one row per run, with bench_serving's own field names.

    Reads its ``--output-file`` JSONL (one JSON object per line) and its printed
    ``Serving Benchmark Result`` blocks (mixed in any other output). Each row has ``tool``:
    ``"sglang"``, or ``"vllm"`` for a ``vllm bench serve`` block or JSON record (its latency
    fields keep vLLM's names, e.g. ``mean_e2el_ms``), and ``source``: ``"jsonl"`` or ``"printed"``.
    """
    text = _strip_ansi(_read_text(path_or_text))
    rows: list[dict[str, Any]] = []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and ("completed" in obj or "output_throughput" in obj):
                obj = dict(obj)
                obj.setdefault("tool", _bench_tool_json(obj))
                obj.setdefault("source", "jsonl")
                rows.append(obj)
            i += 1
            continue
        if _BENCH_HEADER_RE.match(line):
            row, i = _bench_block(lines, i + 1)
            if row:
                rows.append(row)
            continue
        i += 1
    if not rows and text.strip().startswith("[") and text.strip().endswith("]"):
        try:
            arr = json.loads(text)
            rows = [dict(o, tool=_bench_tool_json(o), source="jsonl") for o in arr if isinstance(o, dict)]
        except ValueError:
            pass
    if not rows:
        return pd.DataFrame(columns=["tool", "source", "backend", "completed", "duration", "output_throughput"])
    frame = pd.DataFrame(rows)
    lead = [c for c in ("tool", "source", "backend", "max_concurrency", "request_rate", "completed") if c in frame.columns]
    return frame[lead + [c for c in frame.columns if c not in lead]]


def _bench_tool_json(obj: Mapping[str, Any]) -> str:
    if any(k in obj for k in ("mean_e2el_ms", "model_id", "tokenizer_id", "burstiness", "num_prompts")) and "dataset_name" not in obj:
        return "vllm"
    if "mean_e2el_ms" in obj and "mean_e2e_latency_ms" not in obj:
        return "vllm"
    return "sglang"


def _bench_block(lines: list[str], i: int) -> tuple[dict[str, Any], int]:
    row: dict[str, Any] = {}
    labels_seen: set[str] = set()
    while i < len(lines):
        raw = lines[i].strip()
        if not raw:
            i += 1
            continue
        if set(raw) == {"="}:
            i += 1
            break
        if _BENCH_HEADER_RE.match(raw) or raw.startswith(("{", "[")):
            break  # the next block or a JSON record: this block was cut off
        if raw.startswith("-") or raw.startswith("="):
            i += 1
            continue
        label, sep, value = raw.partition(":")
        if not sep or len(label) > 60:
            break
        label = label.strip().lower()
        labels_seen.add(label)
        value = value.strip()
        name = _BENCH_LABELS.get(label)
        if name is None:
            m = _BENCH_METRIC_RE.match(label)
            if m:
                stat, metric = m.group(1), _BENCH_METRIC_NAMES[m.group(2)]
                name = f"{stat}_{metric}_ms"
            else:
                name = re.sub(r"[^0-9a-z]+", "_", label).strip("_")
        row[name] = _bench_value(value)
        i += 1
    is_vllm = "failed requests" in labels_seen or "request rate configured (rps)" in labels_seen or (
        "backend" not in labels_seen and any(k.endswith("e2el (ms)") for k in labels_seen)
    )
    row["tool"] = "vllm" if is_vllm else "sglang"
    row["source"] = "printed"
    if not is_vllm:
        # SGLang names the end-to-end latency e2e_latency in its JSON.
        row = {k.replace("_e2el_ms", "_e2e_latency_ms"): v for k, v in row.items()}
    return row, i


def _bench_value(value: str) -> Any:
    # Keep the number when a pasted block carries a note after it ("0   <<< new line").
    first = value.split(maxsplit=1)[0] if value.strip() else value
    if first != value and first[:1].isdigit():
        value = first
    if value in ("inf", "Inf"):
        return math.inf
    if value in ("None", "none", "N/A"):
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


# --------------------------------------------------------------------------------------------
# Summary and the `glm5 logs` command

# The arguments that decide throughput (see the diagnosis notes), shown first.
IMPORTANT_ARGS = (
    "model_path",
    "served_model_name",
    "tp_size",
    "dp_size",
    "ep_size",
    "pp_size",
    "max_running_requests",
    "max_total_tokens",
    "mem_fraction_static",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "schedule_policy",
    "page_size",
    "kv_cache_dtype",
    "quantization",
    "attention_backend",
    "decode_attention_backend",
    "prefill_attention_backend",
    "moe_runner_backend",
    "fp4_gemm_runner_backend",
    "enable_flashinfer_allreduce_fusion",
    "disable_radix_cache",
    "disable_cuda_graph",
    "cuda_graph_max_bs",
    "enable_dp_attention",
    "speculative_algorithm",
    "enable_metrics",
    "api_key",
)


def _summary(slog: ServerLog) -> dict[str, Any]:
    args = mask_secrets(slog.server_args)
    important = {k: args[k] for k in IMPORTANT_ARGS if k in args}
    out: dict[str, Any] = {
        "lines": slog.lines,
        "standin": slog.standin,
        "first_time": _iso(slog.first_time),
        "last_time": _iso(slog.last_time),
        "ready_at": _iso(slog.ready_at),
        "server_args": important,
        "server_args_fields": len(slog.server_args),
        "server_args_incomplete": slog.server_args_incomplete,
        "startup": slog.startup,
        "skipped": slog.skipped,
    }
    d = slog.decode
    if not d.empty:
        # Mangled logs can leave text in a numeric column: statistics skip it.
        d = d.copy()
        for col in ("running_req", "queue_req", "token_usage", "gen_throughput"):
            d[col] = pd.to_numeric(d[col], errors="coerce")
        busy = d[d["running_req"] > 0]
        out["decode"] = {
            "rows": len(d),
            "max_running_req": _num(d["running_req"].max()),
            "mean_running_req_busy": _num(busy["running_req"].mean()) if not busy.empty else None,
            "max_queue_req": _num(d["queue_req"].max()),
            "max_token_usage": _num(d["token_usage"].max()),
            "max_gen_throughput": _num(d["gen_throughput"].max()),
            "mean_gen_throughput_busy": _num(busy["gen_throughput"].mean()) if not busy.empty else None,
            "cuda_graph_share": _num(pd.to_numeric(d["cuda_graph"], errors="coerce").mean()),
        }
        cap = slog.startup.get("max_running_requests", slog.server_args.get("max_running_requests"))
        if isinstance(cap, int) and cap > 0:
            out["decode"]["rows_at_running_cap"] = int((d["running_req"] >= cap).sum())
    else:
        out["decode"] = {"rows": 0}
    out["prefill"] = {"rows": len(slog.prefill)}
    out["retractions"] = {
        "rows": len(slog.retractions),
        "retracted_reqs": _num(pd.to_numeric(slog.retractions["retracted_reqs"], errors="coerce").sum())
        if not slog.retractions.empty
        else 0,
    }
    out["errors"] = [
        {"time": _iso(r.time), "rank": r.rank, "kind": r.kind, "message": r.message}
        for r in slog.errors.itertuples(index=False)
    ]
    out["crash_cause"] = slog.crash_cause()
    return out


def _iso(ts: Any) -> str | None:
    if ts is None or (isinstance(ts, float) and math.isnan(ts)) or ts is pd.NaT:
        return None
    return pd.Timestamp(ts).isoformat(sep=" ")


def _num(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, np.integer | int) and not isinstance(value, bool):
        return int(value)
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else round(f, 4)


def _format_summary(s: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = buf.write
    w(f"lines: {s['lines']}  skipped: {s['skipped']}\n")
    if s["standin"]:
        w(f"stand-in profile: {s['standin']} (not a real SGLang server)\n")
    w(f"time: {s['first_time']} .. {s['last_time']}  ready at: {s['ready_at'] or 'never'}\n")
    w(f"\nserver args ({s['server_args_fields']} fields{', incomplete' if s['server_args_incomplete'] else ''}):\n")
    for k, v in s["server_args"].items():
        w(f"  {k} = {v!r}\n")
    w("\nstartup:\n")
    for k, v in s["startup"].items():
        w(f"  {k} = {v}\n")
    w("\ndecode:\n")
    for k, v in s["decode"].items():
        w(f"  {k} = {v}\n")
    w(f"\nprefill rows: {s['prefill']['rows']}  retractions: {s['retractions']['rows']} "
      f"({s['retractions']['retracted_reqs']} requests)\n")
    w(f"\nerrors: {len(s['errors'])}" + (f"  (cause: {s['crash_cause']})" if s["crash_cause"] else "") + "\n")
    for e in s["errors"][:20]:
        w(f"  [{e['time']} {e['rank']}] {e['kind']}: {e['message'][:200]}\n")
    return buf.getvalue()


def _cmd_logs(args: argparse.Namespace) -> int:
    from glm5lib.errors import ConfigError

    path = Path(args.file)
    if not path.is_file():
        raise ConfigError(f"log file {args.file!r} does not exist", field="file")
    slog = parse_log(path)
    summary = slog.summary()
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(_format_summary(summary), end="")
    return 0


def register_cli(sub: Any) -> None:
    """Add ``glm5 logs FILE [--json]``: a summary of an SGLang server log."""
    p = sub.add_parser(
        "logs",
        help="summarise an SGLang server log (args that matter, startup, decode stats, errors)",
        description="Parse an SGLang server log and print what matters for throughput.",
    )
    p.add_argument("file", help="the server log (e.g. data/runs/<run>/<phase>/server.log)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=_cmd_logs)
