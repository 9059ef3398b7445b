"""Waiting for a launched server to be ready: any engine's, from a process :mod:`~glm5lib.server.process` spawned.

:func:`spawn_ready` spawns (through the caller's factory) with interrupts held back until the
child is registered, then :func:`wait_ready` returns once the server's ready path answers 200 (and
its readiness line, when it has one, was logged). A server that exits or logs an OOM/NaN/NCCL
error while starting raises :class:`~glm5lib.errors.ServerLaunchError` at once, with the cause and
the lines that show it (:func:`launch_error`); an interrupt or any other exception while launching
stops the half-started server before it propagates. Nothing here knows an engine: each engine's
launch (its argv, its environment) lives in its adapter under :mod:`glm5lib.engines`.
"""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from glm5lib import http
from glm5lib.errors import ServerLaunchError
from glm5lib.server.process import ServerProcess, signals_deferred

__all__ = ["launch_error", "package_installed", "spawn_ready", "wait_ready"]

logger = logging.getLogger(__name__)

# After a fatal line, how long to keep reading before deciding: the traceback that names the
# specific cause (and the process exit) usually follows within a second.
_FATAL_SETTLE_S = 3.0

S = TypeVar("S", bound=ServerProcess)


def package_installed(python: str, package: str) -> bool:
    """Whether ``python`` can import ``package``."""
    if Path(python).resolve() == Path(sys.executable).resolve():
        return importlib.util.find_spec(package) is not None
    done = subprocess.run(
        [python, "-c", f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({package!r}) else 3)"],
        capture_output=True,
        timeout=60,
    )
    return done.returncode == 0


def spawn_ready(make: Callable[[], S], ready_timeout: float, poll_interval: float) -> S:
    """``make()`` (which spawns and registers a server) with interrupts held back until it is
    registered, then :func:`wait_ready`; an interrupt, a launch error or anything else on the
    way stops the half-started server before it propagates."""
    server: S | None = None
    try:
        with signals_deferred():
            server = make()
        wait_ready(server, ready_timeout, poll_interval)
    except BaseException:
        if server is not None:
            server.stop(grace=5.0)
        raise
    server.ready_at = time.time()
    return server


def launch_error(server: ServerProcess, cause: str, message: str) -> ServerLaunchError:
    """The ServerLaunchError for ``server``: cause, exit status, the fatal lines and the log's tail."""
    fatal = server.fatal_lines()
    tail = server.tail()
    lines = fatal[:10] + [line for line in tail[-15:] if line not in fatal[:10]] if fatal else tail[-25:]
    return ServerLaunchError(
        f"{server.backend} server did not start ({cause}): {message}; log: {server.log_path}",
        cause=cause,
        exit_code=server.returncode,
        log_lines=lines,
        log_path=str(server.log_path),
    )


def wait_ready(server: ServerProcess, ready_timeout: float, poll_interval: float) -> None:
    """Return once ``server`` is ready; raise ServerLaunchError when it exits, logs a fatal line or times out."""
    deadline = time.monotonic() + ready_timeout
    ready_line = server.ready_line
    path = server.ready_path
    while True:
        code = server.returncode
        if code is not None:
            server.join_output()  # read what it printed before dying
            cause = server.crash_cause() or "exited"
            raise launch_error(server, cause, f"the process exited with status {code} before it was ready")
        first_fatal = server.first_fatal_at()
        if first_fatal is not None and (time.monotonic() - first_fatal > _FATAL_SETTLE_S or not server.alive()):
            cause = server.crash_cause() or "exited"
            server.stop(grace=5.0)
            raise launch_error(server, cause, "it logged a fatal error while starting")
        if (first_fatal is None and (ready_line is None or server.ready_logged())
                and http.get(server.base_url, path, api_key=server.api_key, timeout=2.0).ok):
            return
        if time.monotonic() > deadline:
            raise launch_error(
                server, "timeout",
                f"not ready after {ready_timeout:.0f} s ("
                + ("" if ready_line is None else
                   f"readiness line {'seen' if server.ready_logged() else 'not seen'}, ")
                + f"{path} not answering 200)",
            )
        if ready_line is None or server.ready_logged(timeout=poll_interval):
            time.sleep(poll_interval)
