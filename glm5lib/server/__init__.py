"""Spawning, waiting for, attaching to and stopping inference servers: engine-blind.

A server here is an argv with an environment, run in its own process group, its output going
through a reader thread into the log file (secret values masked) and checked for fatal
signatures (OOM, NaN, NCCL...), so a server that dies or logs one while starting raises
:class:`~glm5lib.errors.ServerLaunchError` at once, with the cause and the lines that show it.
:func:`launch_command` starts any engine from a command template (:func:`start_command` from a
:class:`CommandLaunch`, checked when made); every process starts from a :class:`ProcessSpec`. Each
engine's own launch (SGLang and the stand-in from a ServerConfig: :func:`glm5lib.engines.sglang.launch`;
vLLM; ``transformers serve``) lives in its adapter under :mod:`glm5lib.engines`, which builds the
argv and hands it to this package; nothing here imports an engine.

:meth:`Server.stop` sends SIGTERM to the process group, waits, then SIGKILLs the group and any
descendant that left it. Servers still running when the interpreter exits are stopped
(``atexit``); an interrupt while launching stops the half-started server before propagating.

:func:`attach` wraps a server someone else runs (a remote SGLang, vLLM, any OpenAI-compatible
server) with the same read interface; its ``stop()`` does nothing.

Modules: :mod:`~glm5lib.server.process` (the child process, its log, stop, the registry of live
servers), :mod:`~glm5lib.server.ready` (readiness),
:mod:`~glm5lib.server.command` (any engine from a command template, flag editing),
:mod:`~glm5lib.server.attached` (servers glm5lib did not start), :mod:`~glm5lib.server.ports`.
"""

from __future__ import annotations

from glm5lib.server.attached import AttachedServer, attach
from glm5lib.server.command import (
    PLACEHOLDERS,
    CommandLaunch,
    CommandServer,
    apply_flag_changes,
    fill_template,
    flag_name,
    flag_value,
    launch_command,
    start_command,
)
from glm5lib.server.ports import LOOPBACK, find_free_port
from glm5lib.server.process import READY_LINE, ProcessSpec, ServerProcess, live_servers, stop_all
from glm5lib.server.ready import launch_error, spawn_ready, wait_ready

__all__ = [
    "LOOPBACK",
    "PLACEHOLDERS",
    "READY_LINE",
    "AttachedServer",
    "CommandLaunch",
    "CommandServer",
    "ProcessSpec",
    "ServerProcess",
    "apply_flag_changes",
    "attach",
    "fill_template",
    "find_free_port",
    "flag_name",
    "flag_value",
    "launch_command",
    "launch_error",
    "live_servers",
    "spawn_ready",
    "start_command",
    "stop_all",
    "wait_ready",
]
