"""No server outlives whatever started it: every exit path of a launch, with every core busy.

Each test interrupts, fails or kills the launcher at one point (before the spawn, between the
spawn and the registration, while waiting for readiness, while the server runs; in this
process, in a script, in ``glm5 launch``, in a Jupyter kernel) and checks that the server and
its guard are gone and nothing else is left. The triggers wait for what the server printed or
wrote, never for a fixed time, so they hit the same point on an idle and on a saturated machine;
the module runs under :func:`cpu_load` (one spinning process per core).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from glm5lib import server as srv
from glm5lib.engines.sglang import launcher as launch_mod
from glm5lib.engines.sglang.config import ServerConfig
from glm5lib.server import process as process_mod
from glm5lib.server import ready as ready_mod

pytestmark = [pytest.mark.under_load, pytest.mark.usefixtures("cpu_load")]

# generous: on a saturated 2-core machine a Python start-up alone can take seconds
WAIT_S = 60.0


@pytest.fixture(autouse=True)
def _no_leftovers(no_leftover_processes, sigint_raises):
    yield


def _wait_for(predicate, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _assert_gone(pids, timeout: float = WAIT_S) -> None:
    _wait_for(lambda: all(_gone(p) for p in pids), f"processes {sorted(pids)} to end", timeout)


def _launch(fake_python, tmp_path, mode="ready", **kw):
    kw.setdefault("ready_timeout", WAIT_S)
    return launch_mod.launch(
        ServerConfig(model_path="m"), backend="sim", python=fake_python,
        log_path=tmp_path / "server.log", env={"FAKE_MODE": mode}, **kw,
    )


def _sigint_self() -> None:
    os.kill(os.getpid(), signal.SIGINT)


# --------------------------------------------------------------------------- in this process


def test_ctrl_c_before_the_spawn_starts_nothing(fake_python, tmp_path, monkeypatch):
    real = launch_mod.prepare_log_path

    def interrupted(path):
        _sigint_self()
        return real(path)

    monkeypatch.setattr(launch_mod, "prepare_log_path", interrupted)
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(KeyboardInterrupt):
        _launch(fake_python, tmp_path)
    assert {p.pid for p in psutil.Process().children(recursive=True)} - before == set()
    assert not srv.live_servers()


@pytest.mark.parametrize("point", ["spawn", "start_guard"])
def test_ctrl_c_between_spawn_and_registration_stops_the_server(fake_python, tmp_path, monkeypatch, point):
    """The interrupt lands right after the process exists and before glm5lib has recorded it:
    it must wait until the server is registered, then stop it."""
    real = getattr(process_mod, point)
    started = []

    def interrupted(*args, **kwargs):
        result = real(*args, **kwargs)
        started.append(result.pid if point == "spawn" else args[0])
        _sigint_self()
        return result

    monkeypatch.setattr(process_mod, point, interrupted)
    with pytest.raises(KeyboardInterrupt):
        _launch(fake_python, tmp_path)
    assert started
    _assert_gone(started)
    assert not srv.live_servers()


def test_ctrl_c_while_waiting_for_readiness_stops_the_server(fake_python, tmp_path):
    log = tmp_path / "server.log"

    def interrupt_once_started():
        _wait_for(lambda: log.exists() and "starting fake server" in log.read_text(), "the server's first line")
        _sigint_self()

    trigger = threading.Thread(target=interrupt_once_started, daemon=True)
    trigger.start()
    with pytest.raises(KeyboardInterrupt):
        _launch(fake_python, tmp_path, "never-ready")
    trigger.join(timeout=WAIT_S)
    assert not srv.live_servers()


def test_an_exception_while_waiting_stops_the_server(fake_python, tmp_path, monkeypatch):
    seen = []

    def broken(server, *args):
        seen.append(server.pid)
        raise RuntimeError("readiness check broke")

    monkeypatch.setattr(ready_mod, "wait_ready", broken)
    with pytest.raises(RuntimeError, match="broke"):
        _launch(fake_python, tmp_path)
    _assert_gone(seen)


def test_ctrl_c_while_stopping_waits_until_the_server_is_gone(fake_python, tmp_path, monkeypatch):
    server = _launch(fake_python, tmp_path, "ignore-term")
    pid = server.pid
    real = process_mod.ServerProcess._signal_group

    def interrupted(self, sig):
        real(self, sig)
        if sig == signal.SIGTERM:
            _sigint_self()  # lands inside stop()'s grace period, however slow the machine

    monkeypatch.setattr(process_mod.ServerProcess, "_signal_group", interrupted)
    with pytest.raises(KeyboardInterrupt):
        server.stop(grace=2.0)
    assert _gone(pid)
    assert server.returncode == -signal.SIGKILL


# --------------------------------------------------------------------------- the launcher dies

LAUNCHER = """
import sys, threading
from glm5lib.engines import sglang
from glm5lib.engines.sglang import config
def start():
    s = sglang.launch(config.ServerConfig(model_path="m"), backend="sim", python={fake!r},
                      env={{"FAKE_MODE": "ready"}}, ready_timeout=120)
    print(s.pid, flush=True)
if {in_thread!r}:
    t = threading.Thread(target=start)
    t.start()
    t.join()
else:
    start()
sys.stdin.read()  # until the test kills this process
"""


@pytest.mark.parametrize(
    ("sig", "in_thread"),
    [(signal.SIGTERM, False), (signal.SIGKILL, False), (signal.SIGKILL, True)],
    ids=["sigterm", "sigkill", "sigkill-launched-from-a-thread"],
)
def test_server_dies_with_the_process_that_launched_it(fake_python, sig, in_thread):
    """SIGTERM's default action and SIGKILL run no atexit: the guard ends the server's group."""
    script = LAUNCHER.format(fake=fake_python, in_thread=in_thread)
    launcher = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    try:
        line = launcher.stdout.readline()
        assert line.strip().isdigit(), line
        pid = int(line)
        group = [p.pid for p in psutil.Process(launcher.pid).children(recursive=True)]
        assert pid in group and len(group) >= 2  # the server and its guard
        launcher.send_signal(sig)
        launcher.wait(timeout=WAIT_S)
        _assert_gone([pid, *group])
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()


def test_interpreter_exit_stops_the_server_and_its_guard(fake_python):
    script = LAUNCHER.format(fake=fake_python, in_thread=False)
    launcher = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    line = launcher.stdout.readline()
    group = [p.pid for p in psutil.Process(launcher.pid).children(recursive=True)]
    launcher.stdin.close()  # the script reaches its end: atexit stops the server
    assert launcher.wait(timeout=WAIT_S) == 0
    assert int(line) in group
    _assert_gone(group)


# --------------------------------------------------------------------------- glm5 launch


# `glm5 launch` as its console script runs it, with SIGINT's default handler whatever this
# process inherited
GLM5 = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler)\n" \
       "from glm5lib.cli import main; sys.exit(main())"


@contextlib.contextmanager
def _reaped(proc: psutil.Popen) -> Iterator[psutil.Popen]:
    """Kills and waits for ``proc`` on the way out if the test left it running."""
    try:
        yield proc
    finally:
        if proc.is_running():
            proc.kill()
            proc.wait()


def _glm5_launch(fake_python, log: Path, mode: str):
    return psutil.Popen(
        [sys.executable, "-c", GLM5, "launch", "--backend", "sim", "--python", fake_python,
         "--log", str(log), "--ready-timeout", "120", "--", "--model-path", "m"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "FAKE_MODE": mode},
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_glm5_launch_stops_its_server_on_a_signal(fake_python, tmp_path, sig):
    proc = _glm5_launch(fake_python, tmp_path / "cli.log", "ready")
    with _reaped(proc):
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        children = [p.pid for p in proc.children(recursive=True)]
        proc.send_signal(sig)
        assert proc.wait(timeout=WAIT_S) == 0
        _assert_gone(children)


def test_glm5_launch_stops_on_sigint_it_inherited_ignored(fake_python, tmp_path):
    """A command started in the background by a non-interactive shell (``glm5 launch ... &`` in a
    script) inherits SIGINT ignored, and Python then raises no KeyboardInterrupt: ``kill -INT``
    (or a job-control Ctrl-C) must still stop the server and its whole group."""
    proc = psutil.Popen(
        [sys.executable, "-m", "glm5lib.cli", "launch", "--backend", "sim", "--python", fake_python,
         "--log", str(tmp_path / "cli.log"), "--ready-timeout", "120", "--", "--model-path", "m"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "FAKE_MODE": "ready"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    with _reaped(proc):
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        children = [p.pid for p in proc.children(recursive=True)]
        assert children
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=WAIT_S) == 0, proc.stderr.read()
        _assert_gone(children)


def test_glm5_launch_interrupted_while_launching(fake_python, tmp_path):
    log = tmp_path / "cli.log"
    proc = _glm5_launch(fake_python, log, "never-ready")
    with _reaped(proc):
        _wait_for(lambda: log.exists() and "starting fake server" in log.read_text(), "the server's first line")
        children = [p.pid for p in proc.children(recursive=True)]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=WAIT_S) == 130
        assert "interrupted" in proc.stderr.read()
        _assert_gone(children)


# --------------------------------------------------------------------------- a Jupyter kernel

KERNEL_CODE = """
from glm5lib.engines import sglang
from glm5lib.engines.sglang import config
s = sglang.launch(config.ServerConfig(model_path="m"), backend="sim", python={fake!r},
                  env={{"FAKE_MODE": "ready"}}, ready_timeout=120)
print(s.pid)
"""


@pytest.mark.slow
@pytest.mark.parametrize("how", ["restart", "kill"])
def test_server_dies_with_its_jupyter_kernel(fake_python, how):
    jupyter_client = pytest.importorskip("jupyter_client")
    km = jupyter_client.KernelManager(kernel_name="python3")
    km.start_kernel(extra_arguments=["--HistoryManager.enabled=False"])
    try:
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=WAIT_S * 2)
        outputs = []
        reply = kc.execute_interactive(
            KERNEL_CODE.format(fake=fake_python), timeout=WAIT_S * 2,
            output_hook=lambda msg: outputs.append(msg["content"].get("text", "")),
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        pid = int("".join(outputs).split()[-1])
        kernel_pid = km.provisioner.process.pid
        group = [p.pid for p in psutil.Process(kernel_pid).children(recursive=True)]
        assert pid in group
        kc.stop_channels()
        if how == "restart":
            km.restart_kernel(now=False)  # the kernel is asked to exit, then replaced
        else:
            os.kill(kernel_pid, signal.SIGKILL)  # a killed or crashed kernel: no atexit runs
        _assert_gone(group)
    finally:
        km.shutdown_kernel(now=True)


TERMINATION = """
import os, signal, time
from glm5lib.server import process
seen = []
signal.signal(signal.SIGTERM, lambda signum, _frame: seen.append(("previous", signum)))
# as a reverted patch does, the last clean-up to run unregisters itself on the way
unregister = process.at_termination(lambda: (seen.append("first"), unregister()))
process.at_termination(lambda: seen.append("second"))
os.kill(os.getpid(), signal.SIGTERM)
deadline = time.monotonic() + 10
while len(seen) < 3 and time.monotonic() < deadline:
    time.sleep(0.01)
print(seen, signal.getsignal(signal.SIGTERM) is not process._on_termination)
gone = process.at_termination(lambda: seen.append("never"))
gone()  # unregistered: the handler before is back and nothing runs
print(signal.getsignal(signal.SIGTERM) is not process._on_termination)
"""


def test_termination_clean_ups_run_then_the_previous_handler():
    """at_termination's clean-ups run on SIGTERM, newest first, and then the handler that was
    there before gets the signal (in a Python of its own: a default action would end the tests)."""
    out = subprocess.run([sys.executable, "-c", TERMINATION], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == [f"['second', 'first', ('previous', {int(signal.SIGTERM)})] True", "True"]
