"""Logs that are still being written (:class:`LogFollower`), and log times as epoch seconds."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib.logs.engine import LogParser, log_adapter, resolve_engine
from glm5lib.logs.model import ServerLog
from glm5lib.logs.text import split_text

__all__ = ["LogFollower", "follow_log", "to_epoch"]

log = logging.getLogger(__name__)


class LogFollower:
    """Incremental reader of a log a running server is still writing.

    Each :meth:`update` reads only the bytes appended since the last call, parses the complete
    lines among them (a partial last line waits for its newline) and returns the
    :class:`ServerLog` so far. A file that shrinks (rotated or truncated) is read again from
    its start.
    """

    def __init__(self, path: str | os.PathLike[str], *, date: str | None = None, engine: str = "auto") -> None:
        self.path = Path(path)
        self._date = date
        if engine != "auto":
            log_adapter(engine)  # a bad name fails here, not at the first update
        self._engine_name = engine
        self._reset()

    def _reset(self) -> None:
        self._parser: LogParser | None = None
        self._offset = 0
        self._pending = b""

    def _parser_for(self, head: bytes) -> LogParser:
        if self._parser is None:
            engine = resolve_engine(self._engine_name, head)
            self._parser = engine.parser(self._date, incremental=True)
        return self._parser

    def _build(self) -> ServerLog:
        if self._parser is None:
            # Nothing read yet: an empty log, without settling which engine wrote it.
            return resolve_engine(self._engine_name, b"").parser(self._date, incremental=True).build()
        return self._parser.build()

    @property
    def offset(self) -> int:
        """Bytes of the file consumed so far (complete lines only)."""
        return self._offset - len(self._pending)

    def update(self) -> ServerLog:
        """Read what was appended, return the :class:`ServerLog` so far."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return self._build()
        if size < self._offset:
            log.info("%s shrank (%d < %d bytes): reading it again from the start", self.path, size, self._offset)
            self._reset()
        if size > self._offset:
            with self.path.open("rb") as fh:
                fh.seek(self._offset)
                data = fh.read(size - self._offset)
            self._offset += len(data)
            data = self._pending + data
            parser = self._parser_for(data)
            feed_chunk = getattr(parser, "feed_chunk", None)
            if feed_chunk is not None:
                # Whole lines in bulk, as parse_log reads a file (a progress bar redrawn with
                # "\r" waits for its newline).
                cut = data.rfind(b"\n") + 1
                self._pending = data[cut:]
                if cut:
                    feed_chunk(data[:cut], b"\r" in data[:cut])
                return self._build()
            cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
            if cut < 0:
                self._pending = data
            else:
                self._pending = data[cut + 1 :]
                text = data[: cut + 1].decode("utf-8", errors="replace")
                lines = split_text(text)
                if lines and lines[-1] == "":
                    lines.pop()
                parser.feed(lines, final=False)
        return self._build()

    def finish(self) -> ServerLog:
        """Parse the pending partial line too (the server has stopped writing)."""
        self.update()
        if self._pending:
            head, self._pending = self._pending, b""
            self._parser_for(head).feed(split_text(head.decode("utf-8", errors="replace")), final=True)
        parser = self._parser_for(b"")
        parser.finish()
        return parser.build()


def follow_log(path: str | os.PathLike[str], *, date: str | None = None, engine: str = "auto") -> LogFollower:
    """A :class:`LogFollower` for ``path`` (which may not exist yet); ``engine`` as for
    :func:`glm5lib.logs.parse_log`, told from the first lines read when ``"auto"``."""
    return LogFollower(path, date=date, engine=engine)


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
    hours = s.dt.floor("h")
    offsets = {}
    for hour in hours.dropna().unique():
        wall = pd.Timestamp(hour)
        offsets[wall] = time.mktime(wall.timetuple()) - (wall - _EPOCH).total_seconds()
    return (_utc_seconds(s) + hours.map(offsets).astype(float)).rename(name)


_EPOCH = pd.Timestamp("1970-01-01")


def _utc_seconds(naive: pd.Series) -> pd.Series:
    """Naive timestamps read as UTC -> float seconds since the epoch (NaT -> NaN)."""
    return (naive - _EPOCH).dt.total_seconds()

