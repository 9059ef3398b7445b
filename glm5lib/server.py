"""Launching, attaching to and stopping inference servers.

:func:`launch` starts ``python -m sglang.launch_server`` (``backend="sglang"``) or the stand-in
``python -m glm5lib.sim`` (``backend="sim"``) from a :class:`~glm5lib.config.ServerConfig`, as an
argv list in its own process group, and returns a :class:`Server` once ``/health`` answers 200
and the readiness line has been logged. Its output goes through a reader thread into the log
file (secret values masked), and every line is checked for SGLang's fatal signatures, so a
server that dies or logs an OOM/NaN/NCCL error while starting makes :func:`launch` raise
:class:`~glm5lib.errors.ServerLaunchError` at once, with the cause and the lines that show it.

:meth:`Server.stop` sends SIGTERM to the process group, waits, then SIGKILLs the group and any
descendant that left it. Servers still running when the interpreter exits are stopped
(``atexit``); an interrupt while launching stops the half-started server before propagating.

:func:`attach` wraps a server someone else runs (a remote SGLang, vLLM, any OpenAI-compatible
server) with the same read interface; its ``stop()`` does nothing.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import contextlib
import errno
import importlib.util
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from glm5lib.config import MASK, ServerConfig, mask_value
from glm5lib.errors import ConfigError, ServerLaunchError

__all__ = [
    "BACKENDS",
    "PLACEHOLDERS",
    "READY_LINE",
    "AttachedServer",
    "CommandServer",
    "Server",
    "apply_flag_changes",
    "attach",
    "fill_template",
    "find_free_port",
    "flag_name",
    "flag_value",
    "launch",
    "launch_command",
    "live_servers",
    "register_cli",
    "stop_all",
]

logger = logging.getLogger(__name__)

#: backend -> module run with ``python -m``
BACKENDS = {"sglang": "sglang.launch_server", "sim": "glm5lib.sim"}
#: What SGLang logs when it is ready to serve.
READY_LINE = "The server is fired up and ready to roll!"
LOOPBACK = "127.0.0.1"

# Order in which a fatal cause is preferred when several signatures were logged: the most
# specific first (a scheduler traceback ending in an OOM is an OOM).
_CAUSE_ORDER = ("oom", "nan", "nccl", "health_check", "scheduler_exception", "sigquit")
_PORT_IN_USE = re.compile(r"address already in use|Errno 98|EADDRINUSE|port \d+ is (?:already )?in use", re.I)
# Why a process that exited without a fatal signature failed, read from its last lines.
_EXIT_CAUSES = (
    ("port_in_use", _PORT_IN_USE),
    ("import_error", re.compile(r"^(?:ModuleNotFoundError|ImportError): ")),
    ("no_gpu", re.compile(r"No CUDA GPUs are available|Found no NVIDIA driver|CUDA driver initialization failed|NVML_SUCCESS == r INTERNAL ASSERT FAILED")),
    ("bad_arguments", re.compile(r"error: (?:unrecognized arguments|argument --|the following arguments are required)")),
)
_SECRET_ENV = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|CREDENTIAL", re.I)
# After a fatal line, how long to keep reading before deciding: the traceback that names the
# specific cause (and the process exit) usually follows within a second.
_FATAL_SETTLE_S = 3.0
_TAIL_LINES = 40


def find_free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def _port_owner(port: int) -> str:
    """Who listens on ``port``, for the error message; empty when that cannot be seen."""
    try:
        for conn in psutil.net_connections(kind="tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                proc = psutil.Process(conn.pid)
                return f" (pid {conn.pid}: {' '.join(proc.cmdline()[:4])})"
    except (psutil.Error, OSError):
        pass
    return ""


def _http_get(url: str, api_key: str | None, timeout: float) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, b""
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, b""


def _pick_cause(kinds: Sequence[str]) -> str | None:
    for kind in _CAUSE_ORDER:
        if kind in kinds:
            return kind
    return kinds[0] if kinds else None


def _classifier():
    """glm5lib.logs.classify_fatal (one line -> kind or None)."""
    from glm5lib.logs import classify_fatal

    return classify_fatal


def _set_parent_death_signal() -> None:  # runs in the child between fork and exec
    # If the Python that launched the server dies without running atexit (SIGKILL, a crashed
    # kernel), the kernel sends the server SIGTERM instead of leaving it orphaned on the GPUs.
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux: atexit still covers the normal exits
        pass


# --------------------------------------------------------------------------- live servers

_LIVE: set[Server] = set()
_LIVE_LOCK = threading.Lock()


def live_servers() -> list[Server]:
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


# --------------------------------------------------------------------------- Server


def _next_restart_log(log_path: Path, options: dict[str, Any]) -> Path:
    """``server-restartN.log`` beside ``log_path`` for the next restart; counts it in ``options``."""
    count = options.get("restarts", 0) + 1
    options["restarts"] = count
    stem = re.sub(r"-restart\d+$", "", log_path.stem)
    return log_path.with_name(f"{stem}-restart{count}{log_path.suffix}")


class Server:
    """A server process :func:`launch` started; stop it with :meth:`stop` or a ``with`` block."""

    #: Line the server logs once it is ready (None: only the health endpoint counts).
    ready_line: str | None = READY_LINE
    #: Endpoint that answers 200 once the server is ready.
    ready_path: str = "/health"

    def __init__(
        self,
        *,
        process: subprocess.Popen,
        argv: list[str],
        config: ServerConfig | None,
        backend: str,
        base_url: str,
        log_path: Path,
        env_overrides: Mapping[str, str],
        secrets: Sequence[str],
        launch_options: Mapping[str, Any],
    ):
        self._process = process
        self.argv = list(argv)
        self.config = config
        self.backend = backend
        self.base_url = base_url
        self.log_path = Path(log_path)
        self.pid = process.pid
        self.started_at = time.time()
        self.ready_at: float | None = None
        self._env_overrides = dict(env_overrides)
        self._secrets = [s for s in secrets if s and len(s) >= 4]
        self._launch_options = dict(launch_options)
        self._lock = threading.Lock()
        self._tail: collections.deque[str] = collections.deque(maxlen=400)
        self._fatal: list[tuple[str, str]] = []  # (kind, line)
        self._ready_logged = threading.Event()
        self._first_fatal_at: float | None = None
        self._stopped = False
        self._exit_code: int | None = None
        self._follower = None
        self._classify = _classifier()
        self._log_file = open(self.log_path, "w", encoding="utf-8", errors="replace")  # noqa: SIM115 - closed by the reader
        self._reader = threading.Thread(target=self._read_output, name=f"glm5-server-{self.pid}-log", daemon=True)
        self._reader.start()
        with _LIVE_LOCK:
            _LIVE.add(self)

    # -- output ------------------------------------------------------------------------------

    def _mask(self, line: str) -> str:
        for secret in self._secrets:
            if secret in line:
                line = line.replace(secret, MASK)
        return line

    def _read_output(self) -> None:
        stream = self._process.stdout
        try:
            for raw in iter(stream.readline, b""):
                line = self._mask(raw.decode("utf-8", errors="replace"))
                self._log_file.write(line)
                self._log_file.flush()
                text = line.rstrip("\r\n")
                kind = self._classify(text)
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

    def tail(self, n: int = _TAIL_LINES) -> list[str]:
        """The last ``n`` lines the server printed (secrets masked)."""
        with self._lock:
            return list(self._tail)[-n:]

    def fatal_lines(self) -> list[str]:
        """Lines carrying a fatal signature (OOM, NaN, NCCL, scheduler exception, sigquit...)."""
        with self._lock:
            return [line for _, line in self._fatal]

    def crash_cause(self) -> str | None:
        """Why the server failed: the most specific fatal signature logged, ``"exited"`` when it
        died without one, ``None`` while it runs cleanly (or after a clean :meth:`stop`)."""
        with self._lock:
            kinds = [kind for kind, _ in self._fatal]
            tail = list(self._tail)[-_TAIL_LINES:]
        cause = _pick_cause(kinds)
        if cause is not None:
            return cause
        if self._stopped or self.alive():
            return None
        for name, pattern in _EXIT_CAUSES:
            if any(pattern.search(line) for line in tail):
                return name
        return "exited"

    def logs(self):
        """The :class:`glm5lib.logs.ServerLog` parsed from the log so far (incrementally)."""
        from glm5lib.logs import follow_log

        if self._follower is None:
            self._follower = follow_log(self.log_path)
        if not self.alive():
            self._reader.join(timeout=5)
            return self._follower.finish()
        return self._follower.update()

    # -- state -------------------------------------------------------------------------------

    @property
    def api_key(self) -> str | None:
        return self.config.api_key

    @property
    def port(self) -> int:
        return int(self.config.port)

    @property
    def returncode(self) -> int | None:
        """The exit status once the process has ended (negative: killed by that signal)."""
        return self._process.poll()

    def alive(self) -> bool:
        """Whether the server process is still running (a hung server is alive; see :meth:`healthy`)."""
        return self._process.poll() is None

    def healthy(self, timeout: float = 2.0) -> bool:
        """Whether ``/health`` answers 200 within ``timeout`` seconds."""
        return _http_get(self.base_url + "/health", self.api_key, timeout)[0] == 200

    def server_info(self, timeout: float = 5.0) -> dict[str, Any]:
        """``/get_server_info`` (or ``/server_info``) as a dict, secrets masked; {} when unavailable."""
        return _server_info(self.base_url, self.api_key, timeout)

    def info(self) -> dict[str, Any]:
        """A JSON-ready record of this launch (command and environment with secrets masked)."""
        return {
            "backend": self.backend,
            "base_url": self.base_url,
            "pid": self.pid,
            "argv": [self._mask(a) for a in self.argv],
            "env": {k: (MASK if _SECRET_ENV.search(k) else v) for k, v in self._env_overrides.items()},
            "config": self.config.to_dict(mask=True),
            "log_path": str(self.log_path),
            "started_at": self.started_at,
            "ready_at": self.ready_at,
            "alive": self.alive(),
            "returncode": self.returncode,
            "crash_cause": self.crash_cause(),
        }

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited {self.returncode}"
        return f"Server({self.backend}, {self.base_url}, pid={self.pid}, {state}, log={str(self.log_path)!r})"

    # -- stopping ----------------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the process to end by itself; its exit status, or None on timeout."""
        try:
            return self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM to the process group, up to ``grace`` seconds, then SIGKILL; returns the exit status.

        Also kills descendants that moved to another process group. Safe to call twice.
        """
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
        self._reader.join(timeout=5)
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self._exit_code = process.returncode
        return process.returncode

    def _signal_group(self, sig: signal.Signals) -> None:
        try:
            os.killpg(self._process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def restart(self, *, log_path: str | os.PathLike[str] | None = None, ready_timeout: float | None = None, **changes: Any) -> Server:
        """Stop this server and launch it again with ``changes`` applied to its config.

        Same backend, environment and extra arguments; a new log file (``log_path``, or this
        log's name with ``-restartN``); the same port when it was chosen explicitly.
        """
        config = self.config.with_changes(**changes) if changes else self.config
        self.stop()
        options = dict(self._launch_options)
        if log_path is None:
            log_path = _next_restart_log(self.log_path, options)
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

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- launch


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


def _sglang_installed(python: str) -> bool:
    if Path(python).resolve() == Path(sys.executable).resolve():
        return importlib.util.find_spec("sglang") is not None
    done = subprocess.run(
        [python, "-c", "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('sglang') else 3)"],
        capture_output=True,
        timeout=60,
    )
    return done.returncode == 0


def _connect_host(host: str) -> str:
    """The address a client on this machine uses to reach a server bound to ``host``."""
    return LOOPBACK if host in ("0.0.0.0", "::", "localhost") else host


def _require_free_port(host: str, connect_host: str, port: int) -> None:
    if _port_in_use(connect_host, port):
        raise ServerLaunchError(
            f"port {port} on {host} is already in use{_port_owner(port)}; "
            "choose another port or leave port=None to get a free one",
            cause="port_in_use",
        )


def _prepare_log_path(log_path: str | os.PathLike[str] | None) -> Path:
    if log_path is None:
        return Path(tempfile.mkdtemp(prefix="glm5-server-")) / "server.log"
    path = Path(log_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _child_env(
    env: Mapping[str, str] | None, known_secrets: Sequence[str | None]
) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(overrides, the child's whole environment, values to mask in its log)."""
    overrides = {str(k): str(v) for k, v in (env or {}).items()}
    child_env = {**os.environ, **overrides, "PYTHONUNBUFFERED": "1"}
    secrets = [v for v in known_secrets if v]
    secrets += [v for k, v in child_env.items() if _SECRET_ENV.search(k) and len(v) >= 6]
    return overrides, child_env, secrets


def _spawn(argv: list[str], child_env: Mapping[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(child_env),
        start_new_session=True,  # its own process group: stop() signals the whole tree
        # PR_SET_PDEATHSIG fires when the launching *thread* ends, so only from the main thread
        preexec_fn=_set_parent_death_signal
        if sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread()
        else None,
    )


def launch(
    config: ServerConfig | str | os.PathLike[str] | Sequence[str],
    backend: str = "sglang",
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

    Raises ConfigError for a bad config or backend, ServerLaunchError (``cause`` oom, nan, nccl,
    port_in_use, timeout, exited, sglang_not_installed, ...) when the server does not come up.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}", field="backend", valid=list(BACKENDS))
    config = _as_config(config)
    config.validate(require_model=backend == "sglang")
    python = python or sys.executable

    if backend == "sglang" and not _sglang_installed(python):
        raise ServerLaunchError(
            f"SGLang is not installed for {python}: install it on a GPU host with "
            "pip install 'glm5lib[sglang]', point python= at the interpreter that has it, "
            "or use backend='sim' for the stand-in",
            cause="sglang_not_installed",
        )

    host = config.host or LOOPBACK
    port_explicit = port is not None or "port" in config.explicit
    if port is None:
        port = config.port if "port" in config.explicit else find_free_port(LOOPBACK)
    config = config.with_changes(port=int(port), host=host)
    connect_host = _connect_host(host)
    _require_free_port(host, connect_host, int(port))
    log_path = _prepare_log_path(log_path)
    argv = [python, "-m", BACKENDS[backend], *config.to_argv(), *[str(a) for a in extra_args]]
    env_overrides, child_env, secrets = _child_env(env, (config.api_key, config.admin_api_key))
    base_url = f"http://{connect_host}:{port}"

    shown = " ".join(MASK if a in secrets else a for a in argv)
    logger.info("launching %s server: %s (log %s)", backend, shown, log_path)
    process = _spawn(argv, child_env)
    server = Server(
        process=process,
        argv=argv,
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
    )
    try:
        _wait_ready(server, ready_timeout, poll_interval)
    except BaseException:
        # KeyboardInterrupt in a notebook, a launch error, anything: no half-started server survives
        server.stop(grace=5.0)
        raise
    server.ready_at = time.time()
    logger.info("%s server ready at %s after %.1f s", backend, base_url, server.ready_at - server.started_at)
    return server


def _launch_error(server: Server, cause: str, message: str) -> ServerLaunchError:
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


def _wait_ready(server: Server, ready_timeout: float, poll_interval: float) -> None:
    deadline = time.monotonic() + ready_timeout
    ready_line = getattr(server, "ready_line", READY_LINE)
    health_url = server.base_url + getattr(server, "ready_path", "/health")
    while True:
        code = server.returncode
        if code is not None:
            server._reader.join(timeout=5)  # read what it printed before dying
            cause = server.crash_cause() or "exited"
            raise _launch_error(server, cause, f"the process exited with status {code} before it was ready")
        with server._lock:
            first_fatal = server._first_fatal_at
        if first_fatal is not None and (time.monotonic() - first_fatal > _FATAL_SETTLE_S or not server.alive()):
            cause = server.crash_cause() or "exited"
            server.stop(grace=5.0)
            raise _launch_error(server, cause, "it logged a fatal error while starting")
        if first_fatal is None and (ready_line is None or server._ready_logged.is_set()):
            status, _ = _http_get(health_url, server.api_key, timeout=2.0)
            if status == 200:
                return
        if time.monotonic() > deadline:
            raise _launch_error(
                server, "timeout",
                f"not ready after {ready_timeout:.0f} s ("
                + ("" if ready_line is None else
                   f"readiness line {'seen' if server._ready_logged.is_set() else 'not seen'}, ")
                + f"{health_url[len(server.base_url):]} not answering 200)",
            )
        if ready_line is None:
            time.sleep(poll_interval)
            continue
        server._ready_logged.wait(timeout=poll_interval)
        if server._ready_logged.is_set():
            time.sleep(poll_interval)


# --------------------------------------------------------------------------- any engine from a command

#: Placeholders a command template may use.
PLACEHOLDERS = ("host", "port", "model", "python")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def flag_name(key: str) -> str:
    """``"cb_max_batch_tokens"``, ``"cb-max-batch-tokens"`` or ``"--cb-max-batch-tokens"`` -> ``"--cb-max-batch-tokens"``."""
    text = str(key).strip()
    if not text or text in ("-", "--"):
        raise ConfigError(f"empty flag name {key!r}; give e.g. 'cb_max_batch_tokens' or '--cb-max-batch-tokens'",
                          field="changes")
    if text.startswith("-"):
        return text if text.startswith("--") or len(text) == 2 else "-" + text
    return "--" + text.replace("_", "-")


def _is_option(token: str) -> bool:
    """Whether an argv token is an option (``-x``, ``--flag``), not a value (``-1`` is a value)."""
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def _option_spans(argv: Sequence[str]) -> list[tuple[str, int, int]]:
    """(flag, start, end) for each option: ``--flag`` plus the non-option tokens after it,
    or ``--flag=value`` alone."""
    spans = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if _is_option(token):
            name = token.split("=", 1)[0]
            j = i + 1
            if "=" not in token:
                while j < len(argv) and not _is_option(argv[j]):
                    j += 1
            spans.append((name, i, j))
            i = j
        else:
            i += 1
    return spans


def flag_value(argv: Sequence[str], flag: str) -> str | bool | list[str] | None:
    """The value of ``flag`` in an argv list: its token (a list when it has several), True for a
    bare switch, None when absent. The last occurrence wins, as with argparse."""
    flag = flag_name(flag)
    found: str | bool | list[str] | None = None
    for name, start, end in _option_spans(argv):
        if name != flag:
            continue
        token = argv[start]
        if "=" in token:
            found = token.split("=", 1)[1]
        elif end - start == 1:
            found = True
        elif end - start == 2:
            found = argv[start + 1]
        else:
            found = list(argv[start + 1 : end])
    return found


def apply_flag_changes(argv: Sequence[str], changes: Mapping[str, Any]) -> list[str]:
    """``argv`` with flag changes applied, for any engine's command line.

    Keys are flags (``"--cb-max-batch-tokens"``) or field names (``"cb_max_batch_tokens"``).
    A value replaces the flag's value where the flag is present (every occurrence, also the
    ``--flag=value`` form) and is appended otherwise; ``True`` makes it a bare switch (and drops
    a ``--no-flag``); ``None`` or ``False`` removes it; a list or tuple gives several values
    (``--cuda-graph-bs 1 2 4``). A flag's value is every token after it up to the next option,
    so positional arguments belong before the options (as in ``transformers serve MODEL --port N``).
    """
    if not isinstance(changes, Mapping):
        raise ConfigError(f"flag changes must be a mapping of flag -> value, got {type(changes).__name__}",
                          field="changes", valid=["{'--cb-max-batch-tokens': 256}"])
    out = [str(a) for a in argv]
    for key, value in changes.items():
        flag = flag_name(key)
        negated = "--no-" + flag[2:] if flag.startswith("--") else None
        if isinstance(value, (list, tuple)):
            tokens = [flag, *(str(v) for v in value)]
        elif value is True:
            tokens = [flag]
        elif value is None or value is False:
            tokens = []
        elif isinstance(value, (str, int, float, os.PathLike)):
            tokens = [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
        else:
            raise ConfigError(
                f"value for {flag} must be a string, number, True/False/None or a list, got {type(value).__name__}",
                field=str(key), valid=["str", "int", "float", "bool", "None", "list"],
            )
        spans = [(s, e) for name, s, e in _option_spans(out) if name == flag or (value is True and name == negated)]
        if not spans:
            out.extend(tokens)
            continue
        first = spans[0][0]
        for start, end in reversed(spans):
            del out[start:end]
        out[first:first] = tokens
    return out


def fill_template(argv_template: Sequence[str], *, host: str = LOOPBACK, port: int | None = None,
                  model: str | None = None, python: str | None = None) -> list[str]:
    """The command template with ``{host}``, ``{port}``, ``{model}``, ``{python}`` filled in.

    Other braces (a JSON argument, say) are left alone; an unknown ``{name}`` is an error.
    """
    if isinstance(argv_template, (str, bytes)) or not isinstance(argv_template, Sequence) or not argv_template:
        raise ConfigError(
            f"the command template must be a non-empty argv list, got {argv_template!r}",
            field="argv_template",
            valid=['["transformers", "serve", "{model}", "--port", "{port}"]'],
        )
    values = {"host": host, "port": port, "model": model, "python": python or sys.executable}
    def fill(match: re.Match[str], token: str) -> str:
        name = match.group(1)
        if name not in values:
            raise ConfigError(
                f"unknown placeholder {{{name}}} in command token {token!r}",
                field="argv_template", valid=[f"{{{p}}}" for p in PLACEHOLDERS],
            )
        if values[name] is None:
            raise ConfigError(f"the command template uses {{{name}}} but no {name} was given", field=name)
        return str(values[name])

    out = []
    for item in argv_template:
        token = os.fspath(item) if isinstance(item, os.PathLike) else str(item)
        out.append(_PLACEHOLDER.sub(lambda m, t=token: fill(m, t), token))
    return out


class CommandServer(Server):
    """A server :func:`launch_command` started from a command template (any engine).

    Same interface as :class:`Server` (``base_url``, ``alive()``, ``stop()``, ``logs()``,
    ``fatal_lines()``, ``crash_cause()``, ``with``); ``config`` is None, ``argv_template`` and
    ``model`` say what ran, and :meth:`restart` applies flag changes to the template.
    """

    backend = "command"

    def __init__(self, *, argv_template: Sequence[str], host: str, port: int, model: str | None,
                 ready_path: str, ready_line: str | None, api_key: str | None, **kwargs: Any):
        self.argv_template = [str(a) for a in argv_template]
        self.host = host
        self.model = model
        self.ready_path = ready_path
        self.ready_line = ready_line
        self._api_key = api_key
        self._port = int(port)
        super().__init__(config=None, backend="command", **kwargs)

    @property
    def api_key(self) -> str | None:
        return self._api_key

    @property
    def port(self) -> int:
        return self._port

    @property
    def engine(self) -> str:
        """The program the command runs (``transformers``, ``vllm``, ``python -m glm5lib.sim``...)."""
        argv = self.argv
        if len(argv) >= 3 and argv[1] == "-m":
            return f"{Path(argv[0]).name} -m {argv[2]}"
        return Path(argv[0]).name if argv else ""

    def flag(self, flag: str) -> str | bool | list[str] | None:
        """The value of ``flag`` in the command that ran (see :func:`flag_value`)."""
        return flag_value(self.argv, flag)

    def info(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "engine": self.engine,
            "base_url": self.base_url,
            "pid": self.pid,
            "argv_template": [self._mask(a) for a in self.argv_template],
            "argv": [self._mask(a) for a in self.argv],
            "model": self.model,
            "env": {k: (MASK if _SECRET_ENV.search(k) else v) for k, v in self._env_overrides.items()},
            "log_path": str(self.log_path),
            "started_at": self.started_at,
            "ready_at": self.ready_at,
            "alive": self.alive(),
            "returncode": self.returncode,
            "crash_cause": self.crash_cause(),
        }

    def restart(self, *, log_path: str | os.PathLike[str] | None = None, ready_timeout: float | None = None,
                **changes: Any) -> CommandServer:
        """Stop this server and start its command again with flag ``changes`` applied
        (``restart(cb_max_batch_tokens=4096)``); a new log file, the same port when it was explicit."""
        template = apply_flag_changes(self.argv_template, changes) if changes else self.argv_template
        self.stop()
        options = dict(self._launch_options)
        if log_path is None:
            log_path = _next_restart_log(self.log_path, options)
        return launch_command(
            template, port=self.port if options.get("port_explicit") else None, host=self.host,
            model=self.model, log_path=log_path, env=self._env_overrides,
            ready_timeout=ready_timeout if ready_timeout is not None else options.get("ready_timeout", 600.0),
            ready_path=self.ready_path, ready_line=self.ready_line, api_key=self._api_key,
            _restarts=options.get("restarts", 0),
        )

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited {self.returncode}"
        return f"CommandServer({self.engine}, {self.base_url}, pid={self.pid}, {state}, log={str(self.log_path)!r})"


def launch_command(
    argv_template: Sequence[str],
    *,
    port: int | None = None,
    host: str = LOOPBACK,
    model: str | None = None,
    log_path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 600.0,
    ready_path: str = "/health",
    ready_line: str | None = None,
    api_key: str | None = None,
    changes: Mapping[str, Any] | None = None,
    poll_interval: float = 0.1,
    _restarts: int = 0,
) -> CommandServer:
    """Start any inference engine from an argv template and return it once it is ready.

    ``argv_template`` is a list such as ``["transformers", "serve", "{model}", "--continuous-batching",
    "--host", "{host}", "--port", "{port}"]``; ``{host}``, ``{port}``, ``{model}`` and ``{python}``
    (this interpreter) are filled in. ``port=None`` picks a free one (or uses the template's own
    ``--port N`` when it has no ``{port}``). ``changes`` are flag changes applied to the template
    first (:func:`apply_flag_changes`). Ready means ``ready_path`` answers 200 (and, when
    ``ready_line`` is given, that line was logged). The process runs in its own process group with
    its output in ``log_path``; fatal lines (CUDA OOM, NaN, NCCL...) while starting fail fast.

    Raises ConfigError for a bad template, ServerLaunchError (cause ``port_in_use``, ``timeout``,
    ``exited``, ``oom``, ``not_found``, ...) when the engine does not come up.
    """
    template = list(argv_template) if not isinstance(argv_template, (str, bytes)) else argv_template
    if changes:
        fill_template(template, host=host, port=0, model=model or "")  # validate before changing
        template = apply_flag_changes(template, changes)
    uses_port = any("{port}" in str(t) for t in (template if isinstance(template, list) else []))
    port_explicit = port is not None
    if not uses_port and isinstance(template, list):
        fixed = flag_value([str(t) for t in template], "--port")
        if isinstance(fixed, str) and fixed.isdigit():
            if port is not None and int(port) != int(fixed):
                raise ConfigError(f"port={port} but the command template fixes --port {fixed}; use {{port}} in the template",
                                  field="port")
            port, port_explicit = int(fixed), True
        elif port is None:
            raise ConfigError(
                "the command template has no {port} placeholder and no --port N: add '--port', '{port}' "
                "(or the engine's own port flag with {port}) so the server's address is known",
                field="argv_template",
            )
    if not ready_path.startswith("/"):
        raise ConfigError(f"ready_path must start with '/', got {ready_path!r}", field="ready_path", valid=["/health", "/v1/models"])
    if port is None:
        port = find_free_port(LOOPBACK)
    argv = fill_template(template, host=host, port=int(port), model=model)
    connect_host = _connect_host(host)
    _require_free_port(host, connect_host, int(port))
    log_path = _prepare_log_path(log_path)
    env_overrides, child_env, secrets = _child_env(env, (api_key,))
    base_url = f"http://{connect_host}:{port}"
    logger.info("launching %s (log %s)", " ".join(MASK if a in secrets else a for a in argv), log_path)
    try:
        process = _spawn(argv, child_env)
    except (FileNotFoundError, PermissionError) as exc:
        raise ServerLaunchError(
            f"cannot run {argv[0]!r}: {exc.strerror}; install the engine or give the full path "
            "of its program as the template's first element",
            cause="not_found",
        ) from exc
    server = CommandServer(
        argv_template=[str(t) for t in template], host=host, port=int(port), model=model,
        ready_path=ready_path, ready_line=ready_line, api_key=api_key,
        process=process, argv=argv, base_url=base_url, log_path=log_path,
        env_overrides=env_overrides, secrets=secrets,
        launch_options={"port_explicit": port_explicit, "ready_timeout": ready_timeout, "restarts": _restarts},
    )
    try:
        _wait_ready(server, ready_timeout, poll_interval)
    except BaseException:
        server.stop(grace=5.0)
        raise
    server.ready_at = time.time()
    logger.info("%s ready at %s after %.1f s", server.engine, base_url, server.ready_at - server.started_at)
    return server


# --------------------------------------------------------------------------- attach


def _server_info(base_url: str, api_key: str | None, timeout: float) -> dict[str, Any]:
    for path in ("/get_server_info", "/server_info"):
        status, body = _http_get(base_url + path, api_key, timeout)
        if status == 200 and body:
            try:
                data = json.loads(body)
            except ValueError:
                continue
            if isinstance(data, dict):
                return {k: mask_value(k, v) for k, v in data.items()}
    return {}


class AttachedServer:
    """A server glm5lib did not start, reached by URL; ``stop()`` leaves it running."""

    backend = "attached"

    def __init__(self, base_url: str, api_key: str | None = None, log_path: str | os.PathLike[str] | None = None, timeout: float = 5.0):
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self.log_path = Path(log_path) if log_path else None
        self.pid: int | None = None
        self._timeout = timeout
        self.server_info_at_attach = _server_info(self.base_url, api_key, timeout)
        self.config: ServerConfig | None = None
        if self.server_info_at_attach:
            self.config = ServerConfig.from_server_args(self.server_info_at_attach)
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
        if _http_get(self.base_url + "/health", self._api_key, self._timeout)[0] == 200:
            return True
        return _http_get(self.base_url + "/v1/models", self._api_key, self._timeout)[0] == 200

    healthy = alive

    def server_info(self, timeout: float | None = None) -> dict[str, Any]:
        return _server_info(self.base_url, self._api_key, timeout or self._timeout)

    def logs(self):
        """The parsed log when ``log_path`` was given, else None (a remote server's log is not readable here)."""
        if self.log_path is None:
            return None
        from glm5lib.logs import follow_log

        if self._follower is None:
            self._follower = follow_log(self.log_path)
        return self._follower.update()

    def fatal_lines(self) -> list[str]:
        """Fatal lines of the log when ``log_path`` was given, else []."""
        if self.log_path is None or not self.log_path.exists():
            return []
        classify = _classifier()
        with self.log_path.open(encoding="utf-8", errors="replace") as fh:
            return [line.rstrip("\n") for line in fh if classify(line)]

    def crash_cause(self) -> str | None:
        kinds = []
        if self.log_path is not None and self.log_path.exists():
            classify = _classifier()
            kinds = [classify(line) for line in self.fatal_lines()]
        cause = _pick_cause([k for k in kinds if k])
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


# --------------------------------------------------------------------------- CLI


def _cmd_launch(args: argparse.Namespace) -> int:
    from glm5lib.config import _parse_assignment

    # argparse's REMAINDER swallows options written after CONFIG: split at '--' and parse the
    # head again, so `glm5 launch NAME --backend sim -- FLAGS` and `glm5 launch --backend sim NAME` both work
    rest = list(args.rest or [])
    cut = rest.index("--") if "--" in rest else len(rest)
    head, extra = rest[:cut], rest[cut + 1 :]
    if head:
        again = argparse.ArgumentParser(prog="glm5 launch", add_help=False)
        _add_launch_options(again)
        again.add_argument("config", nargs="?")
        args = again.parse_args(head, namespace=args)
    if args.config:
        config = ServerConfig.load(args.config)
        sglang_args, foreign = ServerConfig.parse_known_argv(extra) if extra else (ServerConfig(), [])
        if sglang_args.explicit:
            config = config.with_changes(**sglang_args.explicit)
    else:
        if not extra:
            raise ConfigError("give a config name/file or sglang.launch_server flags after '--'", field="config")
        config, foreign = ServerConfig.parse_known_argv(extra)
    changes = dict(_parse_assignment(item) for item in (args.set or []))
    if changes:
        config = config.with_changes(**changes)
    if foreign and args.backend != "sim":
        raise ConfigError(f"unknown SGLang arguments: {' '.join(foreign)}", field=foreign[0])
    server = launch(
        config, backend=args.backend, log_path=args.log, ready_timeout=args.ready_timeout,
        port=args.port, extra_args=foreign, python=args.python,
    )
    try:
        print(server.base_url, flush=True)
        print(f"# pid {server.pid}, log {server.log_path}; Ctrl-C stops it", file=sys.stderr, flush=True)
        code = server.wait()
    except KeyboardInterrupt:
        print("# stopping", file=sys.stderr, flush=True)
        server.stop()
        return 0
    finally:
        if server.alive():
            server.stop()
    cause = server.crash_cause()
    print(f"# server exited with status {code}" + (f" ({cause})" if cause else ""), file=sys.stderr)
    for line in server.fatal_lines()[:10]:
        print(f"    | {line}", file=sys.stderr)
    return 1


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``glm5 launch``."""
    parser = subparsers.add_parser(
        "launch",
        help="start an SGLang server or the stand-in, print its URL, stop it on Ctrl-C",
        description=(
            "Start a server from a shipped config name, a JSON config file, or sglang.launch_server "
            "flags after '--' (which also override the config's fields; with --backend sim the "
            "stand-in's own --sim-* flags may follow too). Prints the base URL, then waits; Ctrl-C stops it."
        ),
    )
    _add_launch_options(parser)
    parser.add_argument(
        "rest", nargs=argparse.REMAINDER, metavar="[CONFIG] [-- FLAGS]",
        help="shipped config name or JSON file; then '--' and launch_server (and --sim-*) flags",
    )
    parser.set_defaults(func=_cmd_launch, config=None)


def _add_launch_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=sorted(BACKENDS), default="sglang", help="sglang (default) or sim (the stand-in)")
    parser.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    parser.add_argument("--log", default=None, help="log file (default: a new temporary folder)")
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for readiness")
    parser.add_argument("--set", action="append", metavar="FIELD=VALUE", help="change a config field (repeatable)")
    parser.add_argument("--python", default=None, help="interpreter that has SGLang installed (default: this one)")
