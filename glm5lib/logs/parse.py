"""Parse a whole log: find which engine wrote it, hand it to that engine a piece at a time.

A file is read in pieces of :data:`CHUNK_BYTES` cut after a newline, so memory stays bounded
whatever the file's size: beyond the tables themselves, a parse holds a few pieces' worth.
:func:`iter_log` hands the tables out a piece at a time, so that nothing grows with the file.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from tqdm.auto import tqdm

from glm5lib.logs.engine import DETECT_BYTES, LogParser, resolve_engine
from glm5lib.logs.model import ServerLog
from glm5lib.logs.text import resolve_source, split_chunk, split_text

__all__ = ["CHUNK_BYTES", "PROGRESS_BYTES", "STREAM_BYTES", "iter_log", "parse_log"]

#: Bytes read and parsed at a time.
CHUNK_BYTES = 4 << 20
#: The first piece is smaller (shapes of scheduler lines are learned from it) but holds at
#: least this many lines when the log has them.
_FIRST_CHUNK_BYTES = 256 << 10
_FIRST_CHUNK_LINES = 1000
#: Logs at least this large show a progress bar unless told otherwise.
PROGRESS_BYTES = 256 << 20
#: Bytes of log behind each :class:`ServerLog` that :func:`iter_log` yields.
STREAM_BYTES = 64 << 20


def parse_log(
    path_or_text: str | os.PathLike[str] | bytes,
    *,
    date: str | None = None,
    engine: str = "auto",
    progress: bool | None = None,
) -> ServerLog:
    """Parse a whole server log (a path, the text, or bytes) into a :class:`ServerLog`.

    ``date`` (``YYYY-MM-DD``) dates the lines of old builds that print only ``HH:MM:SS``;
    without it such lines get the date of the last dated line, or 1970-01-01. ``engine`` is
    ``"auto"`` (told from the log's first lines), ``"sglang"`` or another installed engine
    (:func:`glm5lib.logs.available_engines`); every engine fills the same tables.
    ``progress`` shows a progress bar (by default for logs of :data:`PROGRESS_BYTES` or more).
    """
    source = resolve_source(path_or_text)
    if isinstance(source, str):
        try:
            source = source.encode("utf-8")
        except UnicodeEncodeError:
            # Lone surrogates: no bytes decode back to this text; split it as it is.
            adapter = resolve_engine(engine, source)
            return _parse_lines(adapter.parser(date, incremental=False), split_text(source))
    with _opened(source) as (read, size, crs, head):
        return _parse_stream(read, size, crs, head, date, engine, progress)


@contextlib.contextmanager
def _opened(source: Path | bytes) -> Iterator[tuple[Callable[[int], bytes], int, bool, bytes]]:
    """``(read, size, holds a carriage return, head)`` of a log file or of bytes in memory."""
    if isinstance(source, Path):
        with source.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            crs = _holds_cr(fh)
            head = fh.read(DETECT_BYTES)
            fh.seek(0)
            yield fh.read, size, crs, head
    else:
        yield io.BytesIO(source).read, len(source), b"\r" in source, source[:DETECT_BYTES]


def _holds_cr(fh: io.BufferedReader) -> bool:
    """Whether the file holds a carriage return (then lines also break where
    ``str.splitlines`` breaks, as for the whole text), read a piece at a time; rewinds."""
    try:
        while True:
            piece = fh.read(CHUNK_BYTES)
            if not piece:
                return False
            if b"\r" in piece:
                return True
    finally:
        fh.seek(0)


def _parse_stream(
    read: Callable[[int], bytes],
    size: int,
    crs: bool,
    head: bytes,
    date: str | None,
    engine: str,
    progress: bool | None,
) -> ServerLog:
    parser = resolve_engine(engine, head).parser(date, incremental=False)
    for _ in _feed_stream(parser, read, size, crs, progress):
        pass
    return parser.build()


def _feed_stream(
    parser: LogParser, read: Callable[[int], bytes], size: int, crs: bool, progress: bool | None,
    most: int | None = None,
) -> Iterator[int]:
    """Feed the file to ``parser`` a piece at a time; yields the bytes read after each piece,
    and finishes the parser after the last."""
    feed_chunk = getattr(parser, "feed_chunk", None)
    show = size >= PROGRESS_BYTES if progress is None else progress
    done = 0
    with tqdm(total=size, unit="B", unit_scale=True, desc="parsing log", disable=not show, leave=False) as bar:
        pieces = _pieces(read, most)
        while True:
            try:
                chunk = next(pieces)
            except StopIteration as stop:
                tail: bytes = stop.value
                break
            if feed_chunk is not None:
                feed_chunk(chunk, crs)
            else:
                parser.feed_bulk(split_chunk(chunk, crs))
            bar.update(len(chunk))
            done += len(chunk)
            yield done
        bar.update(len(tail))
    if tail:
        # The last line has no newline: it may be cut off, and is read with care.
        text = tail.decode("utf-8", errors="replace")
        lines = text.splitlines() if crs else [text]
        if crs and text.endswith("\r"):
            parser.feed_bulk(lines)
        else:
            parser.feed_bulk(lines[:-1])
            parser.feed(lines[-1:], final=True)
    parser.finish()
    yield done + len(tail)


def iter_log(
    path_or_text: str | os.PathLike[str] | bytes,
    *,
    date: str | None = None,
    engine: str = "auto",
    progress: bool | None = None,
    piece_bytes: int = STREAM_BYTES,
) -> Iterator[ServerLog]:
    """Parse a log of any size in bounded memory: one :class:`ServerLog` per piece of about
    ``piece_bytes`` bytes, holding only the rows of that piece's lines.

    Tables, columns and types are those of :func:`parse_log` (each piece's columns typed on
    their own, as a follower types what it reads); ``server_args``, ``startup``, ``ready_at``,
    ``lines``, ``skipped`` and the times are the log's so far. A traceback still open at a
    piece's end is reported in the piece that closes it. Concatenating the pieces' tables
    gives :func:`parse_log`'s rows; memory holds a few pieces' worth, whatever the size.
    """
    if piece_bytes < 1:
        raise ValueError(f"piece_bytes must be at least 1, not {piece_bytes}")
    source = resolve_source(path_or_text)
    if isinstance(source, str):
        try:
            source = source.encode("utf-8")
        except UnicodeEncodeError:
            # Lone surrogates: the text is in memory already; it is read as parse_log reads it.
            yield parse_log(source, date=date, engine=engine, progress=progress)
            return
    with _opened(source) as (read, size, crs, head):
        yield from _stream(read, size, crs, head, date, engine, progress, piece_bytes)


def _stream(read, size, crs, head, date, engine, progress, piece_bytes) -> Iterator[ServerLog]:
    parser = resolve_engine(engine, head).parser(date, incremental=False)
    last = 0
    for done in _feed_stream(parser, read, size, crs, progress, piece_bytes):
        if done - last >= piece_bytes:
            last = done
            yield parser.drain()
    yield parser.drain()


def _pieces(read: Callable[[int], bytes], most: int | None = None) -> Iterator[bytes]:
    """Pieces of whole lines (each ends with a newline, about :data:`CHUNK_BYTES` or ``most``
    bytes if fewer); returns what follows the last newline."""
    pending = b""
    first = True
    size = CHUNK_BYTES if most is None else max(1, min(most, CHUNK_BYTES))
    while True:
        data = read(min(_FIRST_CHUNK_BYTES, size) if first else size)
        if not data:
            cut = pending.rfind(b"\n") + 1
            if cut:
                yield pending[:cut]
            return pending[cut:]
        data = pending + data if pending else data
        if first and data.count(b"\n") < _FIRST_CHUNK_LINES:
            pending = data  # the first piece: read on until it holds enough lines
            continue
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            pending = data  # one very long line: read on
            continue
        first = False
        pending = data[cut:]
        yield data[:cut]
        del data


def _parse_lines(parser: LogParser, lines: list[str]) -> ServerLog:
    """Parse the lines of a whole log, as split_text gives them."""
    cut = bool(lines) and lines[-1] != ""
    if not cut and lines:
        lines.pop()
    if cut:
        # The final line may be cut off: it is parsed on its own, with care.
        parser.feed_bulk(lines[:-1])
        parser.feed(lines[-1:], final=True)
    else:
        parser.feed_bulk(lines)
    parser.finish()
    return parser.build()

