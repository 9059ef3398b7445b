"""Launching SGLang or the stand-in from a :class:`~glm5lib.engines.sglang.config.ServerConfig`.

:func:`launch` starts ``python -m sglang.launch_server`` (``backend="sglang"``) or the stand-in
``python -m glm5lib.sim`` (``backend="sim"``) as an argv list and returns a :class:`Server` once
``/health`` answers 200 and the readiness line has been logged
(:func:`glm5lib.server.ready.spawn_ready`: a server that dies or logs an OOM/NaN/NCCL error while
starting raises :class:`~glm5lib.errors.ServerLaunchError` at once, with the cause and the lines
that show it). Each adapter holds its own program.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from glm5lib import engines
from glm5lib.engines.base import Program
from glm5lib.engines.sglang.config import (
    CONFIG_FLAG,
    DEFAULT_RELEASE,
    ServerConfig,
    nearest_bundled,
    write_key_file,
)
from glm5lib.errors import ConfigError, ServerLaunchError
from glm5lib.masking import mask_argv
from glm5lib.server.ports import LOOPBACK, connect_host, find_free_port, require_free_port
from glm5lib.server.process import (
    READY_LINE,
    ServerProcess,
    child_env,
    next_restart_log,
    prepare_log_path,
)
from glm5lib.server.ready import package_installed, spawn_ready

__all__ = ["Server", "launch", "programs"]

logger = logging.getLogger(__name__)

_QUIET_LEVELS = ("warning", "error", "critical")


#: the key fields SGLang takes from its --config file as well as from its command line
_KEY_FIELDS = ("api_key", "admin_api_key")


def _argv(python: str, module: str, config: ServerConfig, extra_args: list[str]) -> tuple[list[str], list[Path]]:
    """The command line, and the private files it names: the API keys go in a file only this user
    reads, named by SGLang's ``--config`` (every bundled release merges it into its arguments), not
    on the command line, where any user of the host reads them (``ps``, /proc/PID/cmdline)."""
    keys = {f: v for f in _KEY_FIELDS if isinstance(v := config.get(f), str) and v}
    if not keys:
        return [python, "-m", module, *config.to_argv(), *extra_args], []
    if "config" in config.explicit or CONFIG_FLAG in extra_args:
        logger.warning("the configuration names its own --config file and SGLang takes one: its API key stays on "
                       "the command line, where other users of this host can read it")
        return [python, "-m", module, *config.to_argv(), *extra_args], []
    path = write_key_file({config.catalogue.specs[f].flag.lstrip("-"): v for f, v in keys.items()})
    return [python, "-m", module, *config.without(*keys).to_argv(), CONFIG_FLAG, str(path), *extra_args], [path]


def programs() -> dict[str, Program]:
    """``backend`` of :func:`launch` -> the program it starts: the registered engines that run
    from a ServerConfig (SGLang and the stand-in), each adapter holding its own."""
    return {a.name: a.program for a in engines.adapters() if a.program is not None and a.config_type is ServerConfig}


class Server(ServerProcess):
    """A server process :func:`launch` started; stop it with :meth:`stop` or a ``with`` block."""

    def restart(self, *, log_path: str | os.PathLike[str] | None = None, ready_timeout: float | None = None, **changes: Any) -> Server:
        """Stop this server and launch it again with ``changes`` applied to its config.

        Same backend, environment and extra arguments; a new log file (``log_path``, or this
        log's name with ``-restartN``); the same port when it was chosen explicitly.
        """
        config = self.config.with_changes(**changes) if changes else self.config
        self.stop()
        options = dict(self._launch_options)
        if log_path is None:
            log_path = next_restart_log(self.log_path, options)
        if not options.get("port_explicit"):
            config = config.without("port")
        return launch(
            config,
            backend=self.backend,
            log_path=log_path,
            env=self._env_overrides,
            ready_timeout=ready_timeout if ready_timeout is not None else options.get("ready_timeout", 600.0),
            port=config.port if options.get("port_explicit") else None,
            extra_args=options.get("extra_args", ()),
            python=options.get("python"),
            _restarts=options.get("restarts", 0),
        )

    def __enter__(self) -> Server:
        return self


def _as_config(config: ServerConfig | str | os.PathLike[str] | Sequence[str]) -> ServerConfig:
    if isinstance(config, ServerConfig):
        return config
    if isinstance(config, (str, os.PathLike)):
        return ServerConfig.load(config)
    if isinstance(config, Sequence):
        return ServerConfig.from_argv(list(config))
    raise ConfigError(
        f"launch needs a ServerConfig, a config name/path or an argv list, got {type(config).__name__}",
        field="config",
    )


def launch(
    config: ServerConfig | str | os.PathLike[str] | Sequence[str],
    backend: str = engines.DEFAULT_ENGINE,
    log_path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 600.0,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    *,
    python: str | None = None,
    poll_interval: float = 0.1,
    _restarts: int = 0,
) -> Server:
    """Start a server and return it once it is ready.

    ``config`` is a ServerConfig, a shipped config name or JSON path, or an argv list.
    ``backend``: ``"sglang"`` (``python -m sglang.launch_server``) or ``"sim"`` (the stand-in).
    ``port``: the port to serve on; when None, the config's explicit port, else a free one.
    ``log_path``: where stdout+stderr go (default: a new temporary folder). ``env``: extra
    environment variables. ``extra_args``: appended to the argv (``["--sim-fault", "oom-at-start"]``).
    ``python``: the interpreter to run (default: this one).

    ``enable_metrics`` is switched on unless the config sets it (false keeps /metrics off).

    Raises ConfigError for a bad config or backend, ServerLaunchError (``cause`` oom, nan, nccl,
    port_in_use, timeout, exited, sglang_not_installed, ...) when the server does not come up.
    """
    known = programs()
    if backend not in known:
        raise ConfigError(f"unknown backend {backend!r}; valid: {', '.join(known)}", field="backend", valid=list(known))
    program = known[backend]
    config = _as_config(config)
    config.validate(require_model=program.requires_model)
    python = python or sys.executable

    if program.requires_package and not package_installed(python, program.requires_package):
        raise ServerLaunchError(
            f"{engines.get(backend).title} is not installed for {python}: {program.install_hint}",
            cause=f"{program.requires_package}_not_installed",
        )

    if "enable_metrics" not in config.explicit:
        # /metrics holds the running/queued gauges the densest-evidence rule reads: on unless the
        # config says otherwise (enable_metrics: false)
        config = config.with_changes(enable_metrics=True)
    host = config.host or LOOPBACK
    port_explicit = port is not None or "port" in config.explicit
    if port is None:
        port = config.port if "port" in config.explicit else find_free_port(LOOPBACK)
    config = config.with_changes(port=int(port), host=host)
    require_free_port(host, int(port))
    log_path = prepare_log_path(log_path)
    extra_args = [str(a) for a in extra_args]
    if program.emulates_release and not any(a.startswith("--sim-release") for a in extra_args):
        emulated = nearest_bundled(config.release)  # the stand-in parses the flags of that release
        if emulated != DEFAULT_RELEASE:
            extra_args += ["--sim-release", emulated]
    env_overrides, whole_env, secrets = child_env(env, (config.api_key, config.admin_api_key))
    base_url = f"http://{connect_host(host)}:{port}"
    # SGLang logs its readiness line at INFO: above that level only /health can tell
    quiet = str(config.get("log_level") or "info").lower() in _QUIET_LEVELS

    argv, private = _argv(python, program.module, config, extra_args)
    logger.info("launching %s server: %s (log %s)", backend, " ".join(mask_argv(argv, secrets)), log_path)
    try:
        server = spawn_ready(
            lambda: Server(
                private_files=private,
                argv=argv,
                env=whole_env,
                config=config,
                backend=backend,
                base_url=base_url,
                log_path=log_path,
                env_overrides=env_overrides,
                secrets=secrets,
                launch_options={
                    "port_explicit": port_explicit,
                    "extra_args": list(extra_args),
                    "python": python,
                    "ready_timeout": ready_timeout,
                    "restarts": _restarts,
                },
                ready_line=None if quiet else READY_LINE,
            ),
            ready_timeout,
            poll_interval,
        )
    except BaseException:
        for path in private:  # the server never started, or stopped: its key file goes
            path.unlink(missing_ok=True)
        raise
    logger.info("%s server ready at %s after %.1f s", backend, base_url, server.ready_at - server.started_at)
    return server
