"""Parse a whole log: read it, find which engine wrote it, hand its lines to that engine."""

from __future__ import annotations

import os

from glm5lib.logs.engine import resolve_engine
from glm5lib.logs.model import ServerLog
from glm5lib.logs.text import read_source, split_bytes, split_text

__all__ = ["parse_log"]


def parse_log(
    path_or_text: str | os.PathLike[str] | bytes, *, date: str | None = None, engine: str = "auto"
) -> ServerLog:
    """Parse a whole server log (a path, the text, or bytes) into a :class:`ServerLog`.

    ``date`` (``YYYY-MM-DD``) dates the lines of old builds that print only ``HH:MM:SS``;
    without it such lines get the date of the last dated line, or 1970-01-01. ``engine`` is
    ``"auto"`` (told from the log's first lines), ``"sglang"`` or another installed engine
    (:func:`glm5lib.logs.engine.available_engines`); every engine fills the same tables.
    """
    source = read_source(path_or_text)
    adapter = resolve_engine(engine, source)
    lines = split_bytes(source) if isinstance(source, bytes) else split_text(source)
    del source
    return _parse_lines(adapter.new_parser(date, incremental=False), lines)


def _parse_lines(parser, lines: list[str]) -> ServerLog:
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
