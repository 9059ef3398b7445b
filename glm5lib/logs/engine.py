"""Which engine wrote a log, and the adapter that reads that engine's lines.

Each engine (SGLang, vLLM...) brings one log module in its folder of :mod:`glm5lib.engines`
(``glm5lib.engines.<name>.log``) that defines ``ENGINE = LogEngine(name, detect, new_parser)``:

* ``detect(head)`` tells from the first lines of a log (up to :data:`DETECT_BYTES` of it)
  whether that engine wrote it;
* ``new_parser(date, incremental=...)`` returns a fresh parser with the :class:`LogParser`
  methods, which fills :class:`glm5lib.logs.ServerLog`'s tables (the one evidence schema every
  engine shares; see the package docstring for its columns).

:data:`ENGINE_MODULES` names those modules, most specific first; an engine whose module is
not installed yet is simply not offered. ``auto`` asks each engine's ``detect`` in that order
and falls back to SGLang, the engine the workbook is about.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from glm5lib.errors import ConfigError

if TYPE_CHECKING:  # the model imports nothing of this module: a type name only
    from glm5lib.logs.model import ServerLog

__all__ = ["DETECT_BYTES", "ENGINE_MODULES", "LogEngine", "LogParser", "available_engines", "detect_engine", "log_adapter",
           "register", "unregister"]

#: Engines and the modules holding their adapters; the first whose ``detect`` says yes wins.
ENGINE_MODULES: dict[str, str] = {
    "vllm": "glm5lib.engines.vllm.log",
    "transformers": "glm5lib.engines.transformers.log",
    "sglang": "glm5lib.engines.sglang.log",
}
#: Log adapters of engines defined outside glm5lib (:func:`register`), asked before the modules above.
_REGISTERED: dict[str, LogEngine] = {}
#: The engine of a log no ``detect`` recognises.
DEFAULT_ENGINE = "sglang"
#: How much of a log's start ``detect`` sees.
DETECT_BYTES = 1 << 16


class LogParser(Protocol):
    """What an engine's parser offers :func:`glm5lib.logs.parse_log` and the follower."""

    def feed(self, lines: list[str], final: bool = True) -> None:
        """Parse ``lines`` in order; with ``final`` the last one may be cut off (a file still
        being written, a paste)."""

    def feed_bulk(self, lines: list[str]) -> None:
        """Parse complete lines of a whole file or of a large piece of one (may be ``feed``
        with ``final=False``; the SGLang parser reads scheduler lines in bulk here)."""

    def finish(self) -> None:
        """The input has ended: close whatever is still open (a traceback, a wrapped line)."""

    def build(self) -> ServerLog:
        """The :class:`~glm5lib.logs.ServerLog` of everything parsed so far."""

    def drain(self) -> ServerLog:
        """The :class:`~glm5lib.logs.ServerLog` of the rows parsed since the last drain (facts
        such as server args and start-up as so far), letting go of those rows."""


@dataclass(frozen=True)
class LogEngine:
    """One engine's log adapter: how to recognise its logs, and a parser for them."""

    name: str
    detect: Callable[[str], bool]
    new_parser: Callable[..., LogParser]
    #: the start-up facts (then server arguments) that hold the running cap, first found wins
    cap_keys: tuple[str, ...] = ()
    #: the server arguments that decide throughput, shown first in a log's digest
    important_args: tuple[str, ...] = ()
    #: (the digest's important args, all args) -> the digest's args with the engine's own
    #: readings (SGLang: CUDA graphs off in any release's spelling)
    args_digest: Callable[[dict[str, Any], Mapping[str, Any]], dict[str, Any]] | None = None

    def parser(self, date: str | None = None, *, incremental: bool) -> LogParser:
        """A fresh parser whose logs say they were read by this adapter (``ServerLog.reader``:
        the cap's names and the digest's arguments come from it)."""
        return _Reading(self, self.new_parser(date, incremental=incremental))


class _Reading:
    """An engine's parser whose every :class:`~glm5lib.logs.ServerLog` names the adapter that read it."""

    def __init__(self, reader: LogEngine, parser: LogParser) -> None:
        self._reader = reader
        self._parser = parser

    def __getattr__(self, name: str) -> Any:  # feed, feed_bulk, finish, feed_chunk...
        return getattr(self._parser, name)

    def build(self) -> ServerLog:
        return self._stamped(self._parser.build())

    def drain(self) -> ServerLog:
        return self._stamped(self._parser.drain())

    def _stamped(self, slog: ServerLog) -> ServerLog:
        slog.reader = self._reader
        return slog


def register(reader: LogEngine) -> LogEngine:
    """Add the log adapter of an engine defined outside glm5lib (``glm5lib.engines.register``
    does it for an engine adapter's ``log_reader``); it is asked before the bundled ones."""
    if not isinstance(reader, LogEngine):
        raise ConfigError(f"register() takes a LogEngine, not {type(reader).__name__}", field="reader")
    _REGISTERED[reader.name] = reader
    return reader


def unregister(name: str) -> None:
    """Forget a log adapter :func:`register` added (nothing for a bundled or unknown name)."""
    _REGISTERED.pop(name, None)


def available_engines() -> list[str]:
    """Names of the engines whose adapters are installed, in detection order (those registered
    from outside glm5lib first)."""
    bundled = [name for name, module in ENGINE_MODULES.items() if importlib.util.find_spec(module) is not None]
    return list(dict.fromkeys([*_REGISTERED, *bundled]))


def log_adapter(name: str) -> LogEngine:
    """The adapter of engine ``name`` (``"sglang"``, ``"vllm"``...); ConfigError (a ValueError)
    naming the valid values for anything else."""
    valid = available_engines()
    if name not in valid:
        raise ConfigError(f"unknown log engine {name!r}: valid values are 'auto', " + ", ".join(map(repr, valid)),
                          field="engine", valid=["auto", *valid])
    if name in _REGISTERED:
        return _REGISTERED[name]
    # Adapters are plugins found by name: the log modules live in the engines' folders (a layer
    # above this one), imported only when a log of theirs is read.
    return importlib.import_module(ENGINE_MODULES[name]).ENGINE


def detect_engine(head: str) -> LogEngine:
    """The engine that wrote a log starting with ``head``; SGLang when none says so."""
    for name in available_engines():
        if name == DEFAULT_ENGINE:
            continue
        engine = log_adapter(name)
        if engine.detect(head):
            return engine
    return log_adapter(DEFAULT_ENGINE)


def resolve_engine(engine: str, head: str | bytes) -> LogEngine:
    """``engine`` (a name or ``"auto"``) -> its adapter, detected from ``head`` when auto."""
    if not isinstance(engine, str):
        raise TypeError(f"engine must be a name ('auto', 'sglang', 'vllm'), got {type(engine).__name__}")
    if engine != "auto":
        return log_adapter(engine)
    if isinstance(head, bytes):
        head = head[:DETECT_BYTES].decode("utf-8", errors="replace")
    return detect_engine(head[:DETECT_BYTES])
