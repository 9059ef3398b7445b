"""The stand-in's log, written in SGLang's format.

Lines look like SGLang 0.5.x's: ``[YYYY-MM-DD HH:MM:SS TP0] message`` with the rank part only
when tensor parallelism is above 1, unprefixed traceback lines, and uvicorn-style access lines.
Everything goes to one stream (stderr by default, where SGLang's logging goes), flushed per line
so that a process reading the log sees it at once.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["LOG_LEVELS", "LogWriter", "banner_line"]

LOG_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}


def banner_line(profile_name: str, profile_path: str) -> str:
    """The stand-in's first log line (without the time prefix), as CONTRACTS.md fixes it."""
    return (
        f"glm5lib stand-in server (not SGLang): profile '{profile_name}' ({profile_path}); "
        "timings come from a model, not from GPUs"
    )


class LogWriter:
    """Writes SGLang-format lines; ``tp_size`` decides whether ranks are printed."""

    def __init__(self, stream: TextIO | None = None, tp_size: int = 1, level: str = "info"):
        self.stream = stream if stream is not None else sys.stderr
        self.tp_size = tp_size
        self.level = LOG_LEVELS.get(level.lower(), 20)
        self._last_sec = -1
        self._stamp = ""

    def _time(self) -> str:
        now = int(time.time())
        if now != self._last_sec:
            self._last_sec = now
            self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        return self._stamp

    def _prefix(self, rank: int | None) -> str:
        if rank is None or self.tp_size <= 1:
            return f"[{self._time()}] "
        return f"[{self._time()} TP{rank}] "

    def info(self, message: str, rank: int | None = 0, level: str = "info", force: bool = False) -> None:
        """One prefixed line (``rank=None`` for the main process, which prints no rank).

        ``force`` writes it whatever ``--log-level`` says (the stand-in banner).
        """
        if not force and LOG_LEVELS.get(level, 20) < self.level:
            return
        self.stream.write(self._prefix(rank) + message + "\n")
        self.stream.flush()

    def warning(self, message: str, rank: int | None = 0) -> None:
        self.info(message, rank, level="warning")

    def error(self, message: str, rank: int | None = 0) -> None:
        self.info(message, rank, level="error")

    def raw(self, text: str) -> None:
        """Unprefixed lines (tracebacks, uvicorn output), written as given."""
        if not text.endswith("\n"):
            text += "\n"
        self.stream.write(text)
        self.stream.flush()

    def all_ranks(self, message: str, level: str = "info") -> None:
        """The same line from every TP rank, as SGLang prints per-rank startup facts."""
        for rank in range(max(1, self.tp_size)):
            self.info(message, rank, level=level)
