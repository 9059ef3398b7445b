"""Start a stand-in server in a child process for tests and notebooks.

::

    with run_standin("--max-running-requests", "64", "--enable-metrics") as srv:
        requests.get(srv.base_url + "/health")

The server runs as ``python -m glm5lib.sim`` in its own process group on a free loopback port,
its log goes to a file (``srv.log_path``), readiness is ``/health`` answering 200, and leaving
the block stops it (SIGTERM, then SIGKILL to the group) so no process outlives the caller.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from glm5lib.errors import ServerLaunchError

__all__ = ["StandinProcess", "free_port", "run_standin"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class StandinProcess:
    """A running stand-in: ``base_url``, ``port``, ``pid``, ``log_path``, ``stop()``."""

    def __init__(self, argv: list[str], port: int, log_path: Path, env: dict[str, str] | None = None):
        self.argv = argv
        self.port = port
        self.host = "127.0.0.1"
        self.base_url = f"http://{self.host}:{port}"
        self.log_path = log_path
        self._log_file = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        full_env = dict(os.environ)
        full_env.setdefault("PYTHONUNBUFFERED", "1")
        if env:
            full_env.update(env)
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            start_new_session=True,
        )
        self.pid = self.proc.pid

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float = 60.0) -> StandinProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_text().splitlines()[-15:]
                raise ServerLaunchError(
                    f"stand-in exited with code {self.proc.returncode} before it was ready "
                    f"(log: {self.log_path})",
                    cause="exited",
                    exit_code=self.proc.returncode,
                    log_lines=tail,
                    log_path=str(self.log_path),
                )
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2.0) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            time.sleep(0.05)
        tail = self.log_text().splitlines()[-15:]
        self.stop()
        raise ServerLaunchError(
            f"stand-in not ready after {timeout:.0f} s (log: {self.log_path})",
            cause="timeout",
            log_lines=tail,
            log_path=str(self.log_path),
        )

    def stop(self, grace: float = 5.0) -> int | None:
        """SIGTERM the process group, SIGKILL after ``grace`` seconds; returns the exit code."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait(timeout=5.0)
        else:
            # The process is gone; make sure nothing it started is left in its group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self._log_file.close()
        return self.proc.returncode

    def __enter__(self) -> StandinProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def run_standin(
    *flags: str,
    port: int | None = None,
    log_path: str | os.PathLike[str] | None = None,
    ready_timeout: float = 60.0,
    wait: bool = True,
    env: dict[str, str] | None = None,
) -> Iterator[StandinProcess]:
    """Start ``python -m glm5lib.sim *flags`` on a free port; yield it ready; stop it after.

    ``wait=False`` yields at once (for start-up faults: watch ``srv.proc`` and ``srv.log_text()``).
    """
    port = port or free_port()
    tmpdir = None
    if log_path is None:
        tmpdir = tempfile.TemporaryDirectory(prefix="glm5-standin-")
        path = Path(tmpdir.name) / "server.log"
    else:
        path = Path(log_path)
    argv = [sys.executable, "-m", "glm5lib.sim", *[str(f) for f in flags], "--port", str(port)]
    srv = StandinProcess(argv, port, path, env=env)
    try:
        if wait:
            srv.wait_ready(ready_timeout)
        yield srv
    finally:
        srv.stop()
        if tmpdir is not None:
            tmpdir.cleanup()
