"""Attaching to a server someone else runs, by URL.

:func:`attach` wraps a remote SGLang, vLLM or any OpenAI-compatible server with the read
interface of :class:`~glm5lib.engines.sglang.launcher.Server` (``alive()``, ``server_info()``, ``logs()`` when its
log file is readable here, ``crash_cause()``); its ``stop()`` does nothing.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import Any

from glm5lib import http
from glm5lib.errors import ConfigError, ServerLaunchError
from glm5lib.logs import classify_fatal, follow_log
from glm5lib.server.process import pick_cause

__all__ = ["AttachedServer", "attach"]

logger = logging.getLogger(__name__)


class AttachedServer:
    """A server glm5lib did not start, reached by URL; ``stop()`` leaves it running."""

    backend = "attached"

    def __init__(self, base_url: str, api_key: str | None = None, log_path: str | os.PathLike[str] | None = None, timeout: float = 5.0):
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.log_path = Path(log_path) if log_path else None
        self.pid: int | None = None
        self._timeout = timeout
        self.server_info_at_attach = http.server_info(self.base_url, api_key=api_key, timeout=timeout)
        # the engine and its configuration: this package knows no engine, glm5lib.engines.attach fills them
        self.engine: str | None = None
        self.config: Any = None
        self._follower = None

    @property
    def api_key(self) -> str | None:
        return self._api_key

    @property
    def standin(self) -> dict[str, Any] | None:
        """The stand-in's self-description when the server is glm5lib's stand-in, else None."""
        value = self.server_info_at_attach.get("standin")
        return value if isinstance(value, dict) else None

    def alive(self) -> bool:
        """Whether the server answers: ``/health`` 200, or ``/v1/models`` 200 for servers without /health."""
        if http.get(self.base_url, "/health", api_key=self._api_key, timeout=self._timeout).ok:
            return True
        return http.get(self.base_url, "/v1/models", api_key=self._api_key, timeout=self._timeout).ok

    healthy = alive

    def server_info(self, timeout: float | None = None) -> dict[str, Any]:
        return http.server_info(self.base_url, api_key=self._api_key, timeout=timeout or self._timeout)

    def logs(self):
        """The parsed log when ``log_path`` was given, else None (a remote server's log is not readable here)."""
        if self.log_path is None:
            return None
        if self._follower is None:
            self._follower = follow_log(self.log_path)
        return self._follower.update()

    def fatal_lines(self) -> list[str]:
        """Fatal lines of the log when ``log_path`` was given, else []."""
        if self.log_path is None or not self.log_path.exists():
            return []
        with self.log_path.open(encoding="utf-8", errors="replace") as fh:
            return [line.rstrip("\n") for line in fh if classify_fatal(line)]

    def crash_cause(self) -> str | None:
        kinds = [kind for kind in map(classify_fatal, self.fatal_lines()) if kind]
        cause = pick_cause(kinds)
        if cause:
            return cause
        return None if self.alive() else "unreachable"

    def stop(self, grace: float = 0.0) -> None:
        """Does nothing: glm5lib does not stop a server it did not start."""
        logger.info("not stopping %s: it was attached, not launched, by glm5lib", self.base_url)

    def restart(self, **changes: Any) -> AttachedServer:
        raise ServerLaunchError(
            f"cannot restart {self.base_url}: it was attached, not launched; restart it where it runs",
            cause="attached",
        )

    def __enter__(self) -> AttachedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __repr__(self) -> str:
        kind = "stand-in" if self.standin else "server"
        return f"AttachedServer({self.base_url}, {kind}, api_key={'***' if self._api_key else None})"


def attach(base_url: str, api_key: str | None = None, *, log_path: str | os.PathLike[str] | None = None, timeout: float = 5.0) -> AttachedServer:
    """Wrap a running server by URL; its config is read from ``/get_server_info`` when it has one."""
    if not re.match(r"^https?://[^/\s]+", base_url or ""):
        raise ConfigError(
            f"base_url must look like http://host:port, got {base_url!r}", field="base_url",
            valid=["http://127.0.0.1:30000"],
        )
    return AttachedServer(base_url, api_key=api_key, log_path=log_path, timeout=timeout)
