"""Start the stand-in for tests and notebooks: :func:`glm5lib.engines.sglang.launcher.launch` with raw flags.

::

    with run_standin("--max-running-requests", "64", "--enable-metrics") as srv:
        requests.get(srv.base_url + "/health")

The flags are ``sglang.launch_server``'s plus the stand-in's own ``--sim-*``; the server is
launched exactly as ``launch(config, backend="sim")`` launches it (its own process group, a free
loopback port, the log in a file, ready once it logged readiness and ``/health`` answers 200),
and leaving the block stops it, so no process outlives the caller.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from glm5lib import rundir
from glm5lib.engines.sglang.config import DEFAULT_RELEASE, ServerConfig
from glm5lib.engines.sglang.launcher import Server, launch
from glm5lib.server.ports import find_free_port

__all__ = ["StandinProcess", "free_port", "run_standin"]

#: What :func:`run_standin` yields (a :class:`glm5lib.engines.sglang.launcher.Server`).
StandinProcess = Server
#: A TCP port that nothing listens on right now.
free_port = find_free_port


@contextlib.contextmanager
def run_standin(
    *flags: str,
    port: int | None = None,
    log_path: str | os.PathLike[str] | None = None,
    ready_timeout: float = 60.0,
    env: dict[str, str] | None = None,
) -> Iterator[Server]:
    """Start ``python -m glm5lib.sim *flags`` on a free port; yield it ready; stop it after.

    A start-up fault raises :class:`~glm5lib.errors.ServerLaunchError` with its cause and log lines.
    """
    tokens = [str(f) for f in flags]
    # SGLang's flags are those of the release the stand-in emulates (--sim-release, else its default)
    config, sim_flags = ServerConfig.parse_known_argv(tokens, release=_sim_release(tokens))
    tmpdir = None
    if log_path is None:
        tmpdir = tempfile.TemporaryDirectory(prefix="glm5-standin-")
        log_path = Path(tmpdir.name) / rundir.SERVER_LOG
    try:
        with launch(config, backend="sim", log_path=log_path, env=env, ready_timeout=ready_timeout,
                    port=port, extra_args=sim_flags) as server:
            yield server
    finally:
        if tmpdir is not None:
            tmpdir.cleanup()


def _sim_release(tokens: list[str]) -> str:
    """The ``--sim-release`` among the stand-in's flags (``--sim-release X`` or ``=X``), else the default."""
    for i, token in enumerate(tokens):
        if token == "--sim-release" and i + 1 < len(tokens):
            return tokens[i + 1]
        if token.startswith("--sim-release="):
            return token.split("=", 1)[1]
    return DEFAULT_RELEASE
