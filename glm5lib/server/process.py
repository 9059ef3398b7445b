"""A server's process: spawning it, reading its output, knowing why it failed, stopping it.

:class:`ServerProcess` is what :class:`~glm5lib.engines.sglang.launcher.Server` and
:class:`~glm5lib.server.CommandServer` share: the child runs in its own process group with its
output going through a reader thread into the log file (secret values masked), every line is
checked for the fatal signatures of :func:`glm5lib.logs.classify_fatal`, and :meth:`stop` sends
SIGTERM to the group, waits, then SIGKILLs the group and any descendant that left it.

Every process started here is registered until it is stopped: :func:`live_servers` lists them
and :func:`stop_all` (run at interpreter exit) stops them.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from glm5lib import cpus, http, rundir
from glm5lib.errors import ServerLaunchError
from glm5lib.logs import classify_fatal, follow_log
from glm5lib.masking import mask_argv, mask_env, mask_text, secret_env_values

__all__ = [
    "READY_LINE",
    "ProcessSpec",
    "ServerProcess",
    "at_termination",
    "child_env",
    "crash_cause_from",
    "live_servers",
    "pick_cause",
    "prepare_log_path",
    "spawn",
    "stop_all",
]

logger = logging.getLogger(__name__)

#: What SGLang logs when it is ready to serve.
READY_LINE = "The server is fired up and ready to roll!"

# Order in which a fatal cause is preferred when several signatures were logged: the most
# specific first (a scheduler traceback ending in an OOM is an OOM).
_CAUSE_ORDER = ("oom", "nan", "nccl", "health_check", "scheduler_exception", "sigquit")
PORT_IN_USE_RE = re.compile(r"address already in use|Errno 98|EADDRINUSE|port \d+ is (?:already )?in use", re.I)
# Why a process that exited without a fatal signature failed, read from its last lines.
_EXIT_CAUSES = (
    ("port_in_use", PORT_IN_USE_RE),
    ("import_error", re.compile(r"^(?:ModuleNotFoundError|ImportError): ")),
    ("no_gpu", re.compile(r"No CUDA GPUs are available|Found no NVIDIA driver|CUDA driver initialization failed|NVML_SUCCESS == r INTERNAL ASSERT FAILED")),
    ("bad_arguments", re.compile(r"error: (?:unrecognized arguments|argument --|the following arguments are required)")),
)
# Environment values shorter than this are not masked in the log even under a secret name: a
# flag such as SOME_TOKEN=true would otherwise hide every "true" the server prints.
_MIN_ENV_SECRET = 6
TAIL_LINES = 40


def pick_cause(kinds: Sequence[str]) -> str | None:
    """The most specific of the fatal kinds logged (an OOM traceback is an OOM), or None."""
    for kind in _CAUSE_ORDER:
        if kind in kinds:
            return kind
    return kinds[0] if kinds else None


def crash_cause_from(tail: Sequence[str]) -> str:
    """Why a process that exited without a fatal signature failed, read from its last lines."""
    for name, pattern in _EXIT_CAUSES:
        if any(pattern.search(line) for line in tail):
            return name
    return "exited"


# --------------------------------------------------------------------------- live servers

_LIVE: set[ServerProcess] = set()
_LIVE_LOCK = threading.Lock()


def live_servers() -> list[ServerProcess]:
    """Servers this interpreter started that have not been stopped yet."""
    with _LIVE_LOCK:
        return [s for s in _LIVE if s.alive()]


def stop_all(grace: float = 5.0) -> None:
    """Stop every server this interpreter started (runs at interpreter exit)."""
    with _LIVE_LOCK:
        servers = list(_LIVE)
    for server in servers:
        try:
            server.stop(grace=grace)
        except Exception:  # keep stopping the others
            logger.exception("could not stop %r", server)


atexit.register(stop_all)


# --------------------------------------------------------------------------- spawning


def prepare_log_path(log_path: str | os.PathLike[str] | None) -> Path:
    """The log file to write: ``log_path`` (its folder created), or one in a new temporary folder."""
    if log_path is None:
        return Path(tempfile.mkdtemp(prefix="glm5-server-")) / rundir.SERVER_LOG
    path = Path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def child_env(
    env: Mapping[str, str] | None, known_secrets: Sequence[str | None]
) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(overrides, the child's whole environment, values to mask in its log)."""
    overrides = {str(k): str(v) for k, v in (env or {}).items()}
    whole = {**os.environ, **overrides, "PYTHONUNBUFFERED": "1"}
    secrets = [v for v in known_secrets if v]
    secrets += [v for v in secret_env_values(whole) if len(v) >= _MIN_ENV_SECRET]
    return overrides, whole, secrets


@contextlib.contextmanager
def signals_deferred(signals: Sequence[int] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Hold back Python's handlers of ``signals`` (Ctrl-C's KeyboardInterrupt) inside the block,
    then run them on leaving it: a process spawned inside is registered before an interrupt can
    unwind the stack, so whoever catches the interrupt finds it and can stop it.

    Only the main thread runs signal handlers; elsewhere this does nothing. Signals whose
    disposition is not a Python handler (SIGTERM's default: the process ends at once) are left
    alone: the guard process covers those.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous: dict[int, Any] = {}
    for sig in signals:
        handler = signal.getsignal(sig)
        if callable(handler):
            previous[sig] = handler
            signal.signal(sig, lambda signum, _frame: pending.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in pending:
            previous[signum](signum, None)  # SIGINT's default handler raises KeyboardInterrupt here


# Clean-ups run when SIGTERM or SIGHUP ends the process (newest first), then the signal does
# what it did before: a Python handler is called, the default action ends the process.
_TERMINATION_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
_CLEANUPS: dict[int, Any] = {}
_PREVIOUS: dict[int, Any] = {}
_CLEANUP_IDS = iter(range(1, 2**62))


def at_termination(cleanup: Any) -> Any:
    """Run ``cleanup()`` if SIGTERM or SIGHUP (a ``kill``, a service manager, a closed terminal, a
    kernel shut down by signal) ends the process before the returned function is called to
    unregister it. Without this, SIGTERM's default action ends Python at once: no ``finally``
    block and no atexit function runs. Signals that are ignored are left so; only the main
    thread can set handlers, so elsewhere this registers nothing (atexit still covers a normal
    exit)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    key = next(_CLEANUP_IDS)
    _CLEANUPS[key] = cleanup
    for sig in _TERMINATION_SIGNALS:
        current = signal.getsignal(sig)
        if sig not in _PREVIOUS and current not in (signal.SIG_IGN, None):
            _PREVIOUS[sig] = current
            signal.signal(sig, _on_termination)

    def unregister() -> None:
        _CLEANUPS.pop(key, None)
        if not _CLEANUPS and threading.current_thread() is threading.main_thread():
            _restore_termination_handlers()

    return unregister


def _restore_termination_handlers() -> dict[int, Any]:
    previous = dict(_PREVIOUS)
    for sig, handler in previous.items():
        if signal.getsignal(sig) is _on_termination:
            signal.signal(sig, handler)
    _PREVIOUS.clear()
    return previous


def _on_termination(signum: int, frame: Any) -> None:
    logger.warning("%s received: cleaning up before the process ends", signal.Signals(signum).name)
    previous = dict(_PREVIOUS)  # a clean-up that unregisters the last one restores them, too
    while _CLEANUPS:
        cleanup = _CLEANUPS.pop(max(_CLEANUPS))
        try:
            cleanup()
        except Exception:  # the other clean-ups and the signal still go ahead
            logger.exception("clean-up on %s failed", signal.Signals(signum).name)
    _restore_termination_handlers()
    handler = previous.get(signum, signal.SIG_DFL)
    if callable(handler):
        handler(signum, frame)
    else:  # the default action, as if nothing had been in between
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


# The guard: a tiny process that ends a server's process group when the Python that launched
# it dies without stopping it (SIGKILL, SIGTERM with its default action, a killed or crashed
# Jupyter kernel), which atexit cannot cover. Its stdin is a pipe whose write end only the
# launching process holds: when that process is gone, for whatever reason, the kernel closes
# the pipe, the read returns end-of-file, and the guard sends SIGTERM to the group, then
# SIGKILL after the grace period. The guard has its own session, so a Ctrl-C in the terminal
# does not reach it, and it imports nothing beyond the interpreter's core.
_GUARD_CODE = """
import os, signal, sys, time
pgid, grace = int(sys.argv[1]), float(sys.argv[2])
try:
    while os.read(0, 4096):
        pass
except OSError:
    pass
try:
    os.killpg(pgid, signal.SIGTERM)
except OSError:
    sys.exit(0)
deadline = time.monotonic() + grace
while time.monotonic() < deadline:
    try:
        os.killpg(pgid, 0)
    except OSError:
        sys.exit(0)
    time.sleep(0.05)
try:
    os.killpg(pgid, signal.SIGKILL)
except OSError:
    pass
"""
#: Seconds the guard gives an orphaned server between SIGTERM and SIGKILL.
GUARD_GRACE_S = 10.0


def start_guard(pgid: int, grace: float = GUARD_GRACE_S) -> tuple[subprocess.Popen, int] | None:
    """Start the guard of process group ``pgid``: (its process, the pipe's write end), or None
    (logged) when it cannot be started; the server then relies on atexit alone."""
    read_end, write_end = os.pipe()
    try:
        guard = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _GUARD_CODE, str(pgid), str(grace)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        os.close(write_end)
        logger.warning("no guard for server group %d (%s): it is stopped at exit, not if this process is killed", pgid, exc)
        return None
    finally:
        os.close(read_end)
    return guard, write_end


def spawn(argv: list[str], env: Mapping[str, str]) -> subprocess.Popen:
    """Start ``argv`` in its own process group with stdout+stderr on one pipe."""
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(env),
        start_new_session=True,  # its own process group: stop() and the guard signal the whole tree
    )


def next_restart_log(log_path: Path, options: dict[str, Any]) -> Path:
    """``server-restartN.log`` beside ``log_path`` for the next restart; counts it in ``options``."""
    count = options.get("restarts", 0) + 1
    options["restarts"] = count
    stem = re.sub(r"-restart\d+$", "", log_path.stem)
    return log_path.with_name(f"{stem}-restart{count}{log_path.suffix}")


# --------------------------------------------------------------------------- the process


@dataclass(frozen=True)
class ProcessSpec:
    """What :class:`ServerProcess` starts: the argv and the child's whole environment, where it
    serves and logs, what to mask in its log, and what a restart needs (``launch_options``)."""

    argv: Sequence[str]
    env: Mapping[str, str] = field(repr=False)
    config: Any
    backend: str
    base_url: str
    log_path: Path
    #: the variables given beside the inherited environment (recorded, masked, and reused by a restart)
    env_overrides: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: values masked wherever the log or the command line is shown
    secrets: Sequence[str] = field(default=(), repr=False)
    launch_options: Mapping[str, Any] = field(default_factory=dict)
    #: the line the server logs once ready (None: only its ready path counts)
    ready_line: str | None = READY_LINE
    #: files only this server reads (its keys, say): removed once it is gone
    private_files: Sequence[Path] = ()


class ServerProcess:
    """A server process glm5lib started: its output, state, failure cause and stop."""

    #: Line the server logs once it is ready (None: only the health endpoint counts).
    ready_line: str | None = READY_LINE
    #: Endpoint that answers 200 once the server is ready.
    ready_path: str = "/health"

    def __init__(self, spec: ProcessSpec | None = None, /, **fields: Any):
        """Start the process ``spec`` describes (or one made from its ``fields`` as keywords) and
        register it; the caller waits for readiness.

        Call it inside :func:`signals_deferred` from the main thread, so that an interrupt
        arrives only once the process is registered and guarded.
        """
        if spec is None:
            spec = ProcessSpec(**fields)
        elif fields:
            raise TypeError(f"give a ProcessSpec or its fields, not both (got {sorted(fields)})")
        self.ready_line = spec.ready_line
        self.argv = list(spec.argv)
        self.config = spec.config
        self.backend = spec.backend
        self.base_url = spec.base_url
        self.log_path = Path(spec.log_path)
        self.ready_at: float | None = None
        self._env_overrides = dict(spec.env_overrides)
        self._secrets = [s for s in spec.secrets if s]
        self._launch_options = dict(spec.launch_options)
        self._private_files = [Path(p) for p in spec.private_files]
        self._lock = threading.Lock()
        self._tail: collections.deque[str] = collections.deque(maxlen=400)
        self._fatal: list[tuple[str, str]] = []  # (kind, line)
        self._ready_logged = threading.Event()
        self._first_fatal_at: float | None = None
        self._stopped = False
        self._exit_code: int | None = None
        self._follower = None
        self._reader: threading.Thread | None = None
        self._guard: subprocess.Popen | None = None
        self._guard_pipe: int | None = None
        self._log_file = open(self.log_path, "w", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed by the reader
        try:
            self._process = spawn(self.argv, spec.env)
        except (FileNotFoundError, PermissionError) as exc:
            self._log_file.close()
            self._remove_private_files()
            raise ServerLaunchError(
                f"cannot run {self.argv[0]!r}: {exc.strerror}; install the engine or give the full path "
                "of its program (the command template's first element, or python=)",
                cause="not_found",
            ) from exc
        except BaseException:
            self._log_file.close()
            self._remove_private_files()
            raise
        self.pid = self._process.pid
        self.started_at = time.time()
        # Popen returns once the program is exec'd, before it can start workers: they inherit the cores
        layout = cpus.current()
        if layout is not None:
            cpus.pin_process(self.pid, layout.server)
            self._launch_options["cpus"] = layout.to_dict()
            logger.info("server %d pinned to CPU %s (%s)", self.pid, cpus.format_cpus(layout.server), layout.describe())
        with _LIVE_LOCK:
            _LIVE.add(self)
        try:
            guard = start_guard(self.pid)
            if guard is not None:
                self._guard, self._guard_pipe = guard
            self._reader = threading.Thread(target=self._read_output, name=f"glm5-server-{self.pid}-log", daemon=True)
            self._reader.start()
        except BaseException:
            self.stop(grace=0.0)
            raise

    # -- output ------------------------------------------------------------------------------

    def _mask(self, text: str) -> str:
        return mask_text(text, self._secrets)

    def _read_output(self) -> None:
        stream = self._process.stdout
        try:
            for raw in iter(stream.readline, b""):
                line = self._mask(raw.decode("utf-8", errors="replace"))
                self._log_file.write(line)
                self._log_file.flush()
                text = line.rstrip("\r\n")
                kind = classify_fatal(text)
                with self._lock:
                    self._tail.append(text)
                    if kind is not None:
                        self._fatal.append((kind, text))
                        if self._first_fatal_at is None:
                            self._first_fatal_at = time.monotonic()
                    if self.ready_line is not None and self.ready_line in text:
                        self._ready_logged.set()
        except (OSError, ValueError):  # the pipe or the file was closed under us while stopping
            pass
        finally:
            with contextlib.suppress(OSError):
                stream.close()
            with contextlib.suppress(OSError):
                self._log_file.close()

    def tail(self, n: int = TAIL_LINES) -> list[str]:
        """The last ``n`` lines the server printed (secrets masked)."""
        with self._lock:
            return list(self._tail)[-n:]

    def log_text(self) -> str:
        """The whole log written so far (secrets masked); empty when there is none yet. Once the
        process has ended, the lines still in its pipe are written first."""
        self._settle()
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def fatal_lines(self) -> list[str]:
        """Lines carrying a fatal signature (OOM, NaN, NCCL, scheduler exception, sigquit...)."""
        self._settle()
        with self._lock:
            return [line for _, line in self._fatal]

    def _settle(self) -> None:
        # once the process has ended, what it printed last (the traceback naming the cause) may
        # still be in the pipe: read it all before answering
        if self._process.poll() is not None and self._reader is not None and self._reader.is_alive():
            self._reader.join(timeout=5)

    def first_fatal_at(self) -> float | None:
        """``time.monotonic()`` when the first fatal line was read, None when none was."""
        with self._lock:
            return self._first_fatal_at

    def crash_cause(self) -> str | None:
        """Why the server failed: the most specific fatal signature logged, ``"exited"`` when it
        died without one, ``None`` while it runs cleanly (or after a clean :meth:`stop`)."""
        self._settle()
        with self._lock:
            kinds = [kind for kind, _ in self._fatal]
            tail = list(self._tail)[-TAIL_LINES:]
        cause = pick_cause(kinds)
        if cause is not None:
            return cause
        if self._stopped or self.alive():
            return None
        return crash_cause_from(tail)

    def logs(self):
        """The :class:`glm5lib.logs.ServerLog` parsed from the log so far (incrementally)."""
        if self._follower is None:
            self._follower = follow_log(self.log_path, engine=getattr(self, "log_engine", "auto"))
        if not self.alive():
            self.join_output()
            return self._follower.finish()
        return self._follower.update()

    def join_output(self, timeout: float = 5.0) -> None:
        """Wait until everything the process printed is in the log (after it exited)."""
        if self._reader is not None:
            self._reader.join(timeout=timeout)

    def ready_logged(self, timeout: float | None = None) -> bool:
        """Whether the readiness line was logged (waiting up to ``timeout`` seconds for it)."""
        if timeout:
            return self._ready_logged.wait(timeout=timeout)
        return self._ready_logged.is_set()

    # -- state -------------------------------------------------------------------------------

    @property
    def api_key(self) -> str | None:
        return self.config.api_key

    @property
    def port(self) -> int:
        return int(self.config.port)

    @property
    def process(self) -> subprocess.Popen:
        """The child process (``wait()``, ``poll()``); stop it with :meth:`stop`, not by hand."""
        return self._process

    proc = process

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has ended (negative: killed by that signal)."""
        return self._process.poll()

    def alive(self) -> bool:
        """Whether the server process is still running (a hung server is alive; see :meth:`healthy`)."""
        return self._process.poll() is None

    def healthy(self, timeout: float = 2.0) -> bool:
        """Whether ``/health`` answers 200 within ``timeout`` seconds."""
        return http.get(self.base_url, "/health", api_key=self.api_key, timeout=timeout).ok

    def server_info(self, timeout: float = 5.0) -> dict[str, Any]:
        """``/get_server_info`` (or ``/server_info``) as a dict, secrets masked; {} when unavailable."""
        return http.server_info(self.base_url, api_key=self.api_key, timeout=timeout)

    def masked_argv(self) -> list[str]:
        """The command line with secret values masked (for logs and records)."""
        return mask_argv(self.argv, self._secrets)

    def masked_env(self) -> dict[str, str]:
        """The environment overrides with secret variables masked."""
        return mask_env(self._env_overrides)

    def info(self) -> dict[str, Any]:
        """A JSON-ready record of this launch (command and environment with secrets masked)."""
        return {
            "backend": self.backend,
            "base_url": self.base_url,
            "pid": self.pid,
            "argv": self.masked_argv(),
            "env": self.masked_env(),
            "config": self.config.to_dict(mask=True) if self.config is not None else None,
            "log_path": str(self.log_path),
            "started_at": self.started_at,
            "ready_at": self.ready_at,
            "alive": self.alive(),
            "returncode": self.returncode,
            "crash_cause": self.crash_cause(),
        }

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited {self.returncode}"
        return f"{type(self).__name__}({self.backend}, {self.base_url}, pid={self.pid}, {state}, log={str(self.log_path)!r})"

    # -- stopping ----------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the process to end by itself; its exit status, or None on timeout."""
        try:
            return self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM to the process group, up to ``grace`` seconds, then SIGKILL; returns the exit status.

        Also kills descendants that moved to another process group. Safe to call twice; a
        Ctrl-C while stopping takes effect once the server is gone.
        """
        with signals_deferred():
            return self._stop(grace)

    def _stop(self, grace: float) -> int | None:
        self._stopped = True
        process = self._process
        try:
            descendants = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []
        except psutil.Error:
            descendants = []
        self._signal_group(signal.SIGTERM)
        try:
            process.wait(timeout=max(grace, 0.0))
        except subprocess.TimeoutExpired:
            if grace > 0:
                logger.warning("server pid %d ignored SIGTERM for %.1f s: killing it", process.pid, grace)
            self._signal_group(signal.SIGKILL)
            process.wait(timeout=10)
        # the group is gone; anything that escaped it (its own session) is killed too
        self._signal_group(signal.SIGKILL)
        _gone, alive = psutil.wait_procs(descendants, timeout=0.5)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(alive, timeout=5)
        self._end_guard()
        self._remove_private_files()
        self.join_output()
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self._exit_code = process.returncode
        return process.returncode

    def _remove_private_files(self) -> None:
        for path in self._private_files:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)

    def _end_guard(self) -> None:
        # the server is gone: the guard has nothing left to watch
        if self._guard is not None:
            with contextlib.suppress(OSError):
                self._guard.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._guard.wait(timeout=5)
        if self._guard_pipe is not None:
            with contextlib.suppress(OSError):
                os.close(self._guard_pipe)
            self._guard_pipe = None

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self._process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
