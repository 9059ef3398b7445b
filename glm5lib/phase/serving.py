"""The server of a phase: launched from an :class:`~glm5lib.phase.plan.EnginePlan` or attached to,
its configuration and ``/get_server_info`` recorded, its log kept when the phase ends."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from glm5lib import engines, http, rundir
from glm5lib import server as server_mod
from glm5lib.errors import ConfigError
from glm5lib.logs import ServerLog, parse_log
from glm5lib.phase.plan import EnginePlan

__all__ = ["launch_engine", "load_command", "phase_log", "save_server_info", "start_server", "stop_server"]

log = logging.getLogger(__name__)


def save_server_info(base_url: str, folder: str | Path, *, api_key: str | None = None) -> dict | None:
    """Write the server's ``/get_server_info`` (or ``/server_info``), secrets masked, to
    ``server_info.json``; returns it (None when the server answers neither)."""
    info = http.server_info(base_url, api_key=api_key, timeout=10.0)
    if not info:
        log.warning("%s answers neither /get_server_info nor /server_info; no server_info.json", base_url)
        return None
    (Path(folder) / rundir.SERVER_INFO).write_text(json.dumps(info, indent=2, default=str) + "\n")
    return info


def launch_engine(engine: EnginePlan, folder: str | Path, *, api_key: str | None = None):
    """Launch (a registered engine) or attach to (a URL) the server ``engine`` plans.

    The server log goes to ``<folder>/server.log``; the configuration to ``config.json``, a command
    template's launch to ``command.json`` and the server's own ``/get_server_info`` to
    ``server_info.json`` (secrets masked). Returns the :mod:`glm5lib.server` object (``Server``,
    ``CommandServer`` or ``AttachedServer``); end the phase with :func:`stop_server`.
    """
    http.check_api_key(api_key, "the API key (GLM5_API_KEY)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if engine.attaches:
        srv = engines.attach(engine.backend, api_key=api_key, log_path=engine.attach_log or None)
        cfg = getattr(srv, "config", None)
        if cfg is not None:
            cfg.save(folder / rundir.CONFIG)
    else:
        adapter = engines.get(engine.backend)
        srv = adapter.launch(engines.LaunchRequest(
            config=engine.config, log_path=folder / rundir.SERVER_LOG, ready_timeout=engine.ready_timeout,
            api_key=api_key, extra_args=list(engine.extra_args),
            command=list(engine.command) if engine.command is not None else None,
            command_changes=engine.command_changes, model=engine.model, sim_profile=engine.sim_profile,
        ))
        if adapter.capabilities.launches_from_config:
            engine.config.save(folder / rundir.CONFIG)
        if isinstance(srv, server_mod.CommandServer):
            (folder / rundir.COMMAND).write_text(json.dumps(srv.info(), indent=2, default=str) + "\n")
    try:
        save_server_info(srv.base_url, folder, api_key=api_key)
    except BaseException:
        srv.stop()
        raise
    return srv


def start_server(backend: str, config: engines.EngineConfig | None, folder: str | Path, *,
                 api_key: str | None = None, **engine: Any):
    """:func:`launch_engine` for ``EnginePlan(backend, config, **engine)``: the plan's other fields
    (``sim_profile``, ``ready_timeout``, ``extra_args``, ``command``, ``command_changes``,
    ``model``, ``attach_log``) as keywords, checked by :class:`EnginePlan` before anything starts."""
    return launch_engine(EnginePlan(backend, config, **engine), folder, api_key=api_key)


def stop_server(srv, folder: str | Path) -> ServerLog:
    """End a phase: stop a launched server (an attached one is left running) and return its
    parsed log (an empty ServerLog when the log is not readable here).

    An attached server's log is copied into ``<folder>/server.log`` so the run folder holds
    the evidence either way. The server is stopped even when its log cannot be read.
    """
    target = Path(folder) / rundir.SERVER_LOG
    try:
        server_log = srv.logs()
    finally:
        srv.stop()
    source = getattr(srv, "log_path", None)
    if source is not None and Path(source).exists() and Path(source).resolve() != target.resolve():
        shutil.copyfile(source, target)
    if server_log is None:
        log.warning("no server log readable for %s: scheduler evidence is missing from this phase",
                    getattr(srv, "base_url", srv))
        return parse_log("")
    return server_log


def phase_log(folder: str | Path) -> ServerLog:
    """The parsed ``server.log`` of a phase folder; an empty ServerLog when there is none
    (an attached server whose log was not readable)."""
    path = Path(folder) / rundir.SERVER_LOG
    if not path.exists():
        log.warning("%s has no server log; scheduler evidence is missing", folder)
        return parse_log("")
    return parse_log(path)


def load_command(folder: str | Path) -> dict:
    """The ``command.json`` a ``command`` backend phase wrote (argv template, argv, model, engine)."""
    path = Path(folder) / rundir.COMMAND
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: that phase was not launched with BACKEND 'command'",
                          field="BASELINE_PHASE") from None
