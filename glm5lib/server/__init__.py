"""Launching, attaching to and stopping inference servers.

:func:`launch` starts ``python -m sglang.launch_server`` (``backend="sglang"``) or the stand-in
``python -m glm5lib.sim`` (``backend="sim"``) from a :class:`~glm5lib.engines.sglang.config.ServerConfig`, as an
argv list in its own process group, and returns a :class:`Server` once ``/health`` answers 200
and the readiness line has been logged. Its output goes through a reader thread into the log
file (secret values masked), and every line is checked for SGLang's fatal signatures, so a
server that dies or logs an OOM/NaN/NCCL error while starting makes :func:`launch` raise
:class:`~glm5lib.errors.ServerLaunchError` at once, with the cause and the lines that show it.
:func:`launch_command` does the same for any engine from a command template.

:meth:`Server.stop` sends SIGTERM to the process group, waits, then SIGKILLs the group and any
descendant that left it. Servers still running when the interpreter exits are stopped
(``atexit``); an interrupt while launching stops the half-started server before propagating.

:func:`attach` wraps a server someone else runs (a remote SGLang, vLLM, any OpenAI-compatible
server) with the same read interface; its ``stop()`` does nothing.

Modules: :mod:`~glm5lib.server.process` (the child process, its log, stop, the registry of live
servers), :mod:`~glm5lib.server.launcher` (SGLang and the stand-in, readiness),
:mod:`~glm5lib.server.command` (any engine from a command template, flag editing),
:mod:`~glm5lib.server.attached` (servers glm5lib did not start), :mod:`~glm5lib.server.ports`,
:mod:`~glm5lib.server.standin` (:func:`run_standin`: the stand-in from raw flags, for tests and notebooks).
"""

from __future__ import annotations

from glm5lib.server.attached import AttachedServer, attach
from glm5lib.server.command import (
    PLACEHOLDERS,
    CommandServer,
    apply_flag_changes,
    fill_template,
    flag_name,
    flag_value,
    launch_command,
)
from glm5lib.server.launcher import Program, Server, launch, programs
from glm5lib.server.ports import LOOPBACK, find_free_port
from glm5lib.server.process import READY_LINE, ServerProcess, live_servers, stop_all
from glm5lib.server.standin import StandinProcess, run_standin

__all__ = [
    "LOOPBACK",
    "PLACEHOLDERS",
    "READY_LINE",
    "AttachedServer",
    "CommandServer",
    "Program",
    "Server",
    "ServerProcess",
    "StandinProcess",
    "apply_flag_changes",
    "attach",
    "fill_template",
    "find_free_port",
    "flag_name",
    "flag_value",
    "launch",
    "launch_command",
    "live_servers",
    "programs",
    "run_standin",
    "stop_all",
]
