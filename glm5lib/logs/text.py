"""Reading a log's bytes or text into lines, and recognising lines by their look.

Prefixes (``[2025-01-01 12:00:00 TP0]`` and the cut or trimmed forms a paste leaves), uvicorn
access lines, glog and NCCL chatter, tqdm progress bars, ANSI colours and exception lines are
recognised here; what a line *means* is decided by the engine's parser.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# --------------------------------------------------------------------------------------------
# Line-level recognition

__all__ = [
    "ANSI_RE",
    "CUT_PREFIX_RE",
    "EXC_LINE_RE",
    "GLOG_RE",
    "GLUED_SEARCH_RE",
    "GPU_PREFIX_RE",
    "OTHER_RUNTIME_RE",
    "PREFIX_RE",
    "RANK_ONLY_PREFIX_RE",
    "TRACEBACK",
    "UVICORN_RE",
    "is_nccl",
    "is_tqdm",
    "read_source",
    "read_text",
    "resolve_source",
    "split_bytes",
    "split_chunk",
    "split_text",
    "strip_ansi",
]

ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# The parts of SGLang's prefix, which its whole, cut and trimmed forms below share: the date,
# the time (to the second or finer), a rank ("TP3"), the ranks after the time (" DP0 TP3") and
# the GPU tag of 2024 builds.
_DATE = r"\d{4}-\d\d-\d\d"
_CLOCK = r"\d\d:\d\d:\d\d(?:[.,]\d{1,6})?"
_RANK = r"[A-Z][A-Z_]*\d+"
_RANKS = f"(?: {_RANK})*"
_GPU_TAG = r"\[gpu(?:_id)?=(\d+)\] ?"
# [2025-01-01 12:00:00.123 DP0 TP3] or [12:00:00 TP0] or [2025-01-01 12:00:00] -- then an
# optional "[gpu_id=0] " (2024 builds) and an optional "INFO file.py:12: " (2026 root handler).
PREFIX_RE = re.compile(
    rf"\[(?:({_DATE}) )?({_CLOCK})({_RANKS})\] ?"
    rf"(?:{_GPU_TAG})?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.<>-]+:\d+: )?"
)
GPU_PREFIX_RE = re.compile(_GPU_TAG)
# "[TP0] message": a prefix whose time was trimmed away when pasted.
RANK_ONLY_PREFIX_RE = re.compile(rf"\[({_RANK}{_RANKS})\] ")
# "2026-05-24 03:51:44 TP0] message": a prefix whose "[" was cut off when pasted.
CUT_PREFIX_RE = re.compile(rf"({_DATE}) ({_CLOCK})({_RANKS})\] ")
GLUED_SEARCH_RE = re.compile(rf"\[(?:{_DATE} )?{_CLOCK}{_RANKS}\] ")
UVICORN_RE = re.compile(
    r'^(?:INFO|WARNING|ERROR):\s+(\S+?):(\d+) - "(\w+) (\S+) [^"]*" (\d{3})'
)
GLOG_RE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ")
OTHER_RUNTIME_RE = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d")
_NCCL_RE = re.compile(r"^\S+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN)|NCCL (?:INFO|WARN|version)")
_TQDM_RE = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\|\s*\d+/\d+ \[|it/s\]|s/it\]")
EXC_LINE_RE = re.compile(
    r"^\s*((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure|Warning)|"
    r"AssertionError|KeyboardInterrupt|StopIteration)(?::\s?(.*)|\s*$)"
)
TRACEBACK = "Traceback (most recent call last):"


def is_nccl(line: str) -> bool:
    # Every alternative of the regex holds "NCCL ": a substring test spares most lines its scan.
    return "NCCL " in line and _NCCL_RE.search(line) is not None


def is_tqdm(line: str) -> bool:
    # Likewise: every alternative holds "|" or "it/s]" or "s/it]".
    return ("|" in line or "it/s]" in line or "s/it]" in line) and _TQDM_RE.search(line) is not None


def strip_ansi(text: str) -> str:
    return ANSI_RE.sub("", text) if "\x1b" in text else text



def split_text(text: str) -> list[str]:
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


def read_source(path_or_text: str | os.PathLike[str] | bytes) -> str | bytes:
    """The log: bytes when read from a file (or given as bytes), else the text given."""
    source = resolve_source(path_or_text)
    return source.read_bytes() if isinstance(source, Path) else source


def resolve_source(path_or_text: str | os.PathLike[str] | bytes) -> Path | str | bytes:
    """The log as given: the file's path, the text, or the bytes; FileNotFoundError for a path
    (or a name that looks like one) with no file, TypeError for anything else."""
    if isinstance(path_or_text, bytes):
        return path_or_text
    if isinstance(path_or_text, os.PathLike):
        path = Path(path_or_text)
        if not path.is_file():
            raise FileNotFoundError(f"server log {str(path)!r} does not exist (pass a path or the log text)")
        return path
    if not isinstance(path_or_text, str):
        raise TypeError(
            f"expected a path or the log text, got {type(path_or_text).__name__}"
        )
    if "\n" not in path_or_text and len(path_or_text) < 4096 and not path_or_text.lstrip().startswith("["):
        path = Path(path_or_text)
        try:
            if path.is_file():
                return path
        except OSError:
            pass
        if path.suffix in (".log", ".txt", ".out", ".jsonl", ".json") and not any(c.isspace() for c in path_or_text):
            raise FileNotFoundError(f"server log {path_or_text!r} does not exist (pass a path or the log text)")
    return path_or_text


def read_text(path_or_text: str | os.PathLike[str] | bytes) -> str:
    source = read_source(path_or_text)
    return source.decode("utf-8", errors="replace") if isinstance(source, bytes) else source


def split_chunk(chunk: bytes, crs: bool) -> list[str]:
    """The lines of ``chunk`` (whole lines of a file, ending with a newline), split as
    :func:`split_bytes` splits the whole file; ``crs``: the file holds a carriage return."""
    text = chunk.decode("utf-8", errors="replace")
    if crs and not (text.isascii() and _ASCII_BREAK_RE.search(text) is None):
        return text.splitlines()
    lines = text.split("\n")
    lines.pop()  # the empty string after the final newline
    return lines


_DECODE_CHUNK = 1 << 20
# The ASCII characters str.splitlines() breaks at, besides "\n".
_ASCII_BREAKS_BUT_NL = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e")
_ASCII_BREAK_RE = re.compile("[\r\x0b\x0c\x1c-\x1e]")


def split_bytes(raw: bytes) -> list[str]:
    """``split_text(raw.decode("utf-8", errors="replace"))``, decoded a megabyte at a time.

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

