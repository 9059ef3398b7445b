"""What the line-by-line log parsers of vLLM and transformers serve share: the facts
:func:`glm5lib.logs.model.parser_facts` reads off a parser, the rows every log yields, and
``feed_bulk`` as ``feed`` of complete lines."""

from __future__ import annotations

from typing import Any

import pandas as pd

__all__ = ["LineParser"]


class LineParser:
    """The state one engine's log parser starts from; ``startup`` names the engine."""

    def __init__(self, engine: str) -> None:
        self.server_args: dict[str, Any] = {}
        self.startup: dict[str, Any] = {"engine": engine}
        self.retract_rows: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.http_rows: list[list[Any]] = []
        self.ready_at: pd.Timestamp | None = None
        self.became_ready = False
        self.lines = 0
        self.skipped = 0
        self.skipped_examples: list[str] = []
        self.stopping = False
        # A follower builds again and again (the vLLM parser keeps its access lines in a growing table).
        self.incremental = False
        self.first_time: pd.Timestamp | None = None
        self.last_time: pd.Timestamp | None = None

    def feed(self, lines: Any, final: bool = True) -> None:
        raise NotImplementedError

    def feed_bulk(self, lines: list[str]) -> None:
        """Complete lines of a whole file or a large piece of one: read as :meth:`feed` reads them."""
        self.feed(lines, final=False)
