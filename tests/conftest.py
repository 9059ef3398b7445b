"""Shared test fixtures and the gating of hardware-dependent tests."""

from __future__ import annotations

import functools
import os

import pytest
from hypothesis import HealthCheck, settings

# Property tests draw new cases on every run; CI draws the same ones each time (a case found
# elsewhere is fixed and kept as an example, not discovered by a red CI). HYPOTHESIS_PROFILE=dev
# or a local run draws fresh cases. Neither times them: a per-example deadline or the "too slow
# to generate" check fails a correct property on a busy or slow machine.
_UNTIMED = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("ci", derandomize=True, print_blob=True, **_UNTIMED)
settings.register_profile("dev", print_blob=True, **_UNTIMED)
_ci = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if _ci else "dev"))


@functools.cache
def nvidia_gpu_reason() -> str | None:
    """None when an NVIDIA GPU answers through NVML, else why not."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"no NVIDIA driver/GPU here (NVML: {exc})"
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return "NVML reports no GPU"
    finally:
        pynvml.nvmlShutdown()
    return None


# tests that time a real engine on CPU, or keep every core busy on purpose, run with the machine to
# themselves: `make test` runs the others on two workers first, then these (``-m solo``) one at a time
_IMPLY_SOLO = ("vllm", "under_load")


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects on the marker
def pytest_collection_modifyitems(config, items):
    reason = None
    for item in items:
        if any(item.get_closest_marker(m) for m in _IMPLY_SOLO):
            item.add_marker(pytest.mark.solo)
        if "gpu" in item.keywords:
            if reason is None:
                reason = nvidia_gpu_reason() or ""
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


# --------------------------------------------------------------------------- processes and load


def _descendants() -> set[int]:
    import psutil

    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture
def no_leftover_processes():
    """Fail the test if a process it started is still running afterwards (zombies excepted)."""
    import time

    import psutil

    from glm5lib import server

    before = _descendants()
    yield
    deadline = time.monotonic() + 30  # what is ending may wait for the CPU on a busy machine
    while True:
        left = []
        for proc in psutil.Process().children(recursive=True):
            try:
                if proc.pid not in before and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(proc)
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    described = []
    for proc in left:
        try:
            described.append((proc.pid, proc.cmdline()))
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    assert not described, f"processes outlived the test: {described}"
    assert not server.live_servers()


@pytest.fixture
def cpu_load():
    """Every core busy for the test's duration (one spinning process per core), as on a shared
    machine: lifecycle code must hold when the server, the test and its signals all wait for CPU."""
    import os
    import subprocess
    import sys

    burners = [
        # spins while its parent lives: a killed test run leaves no burner behind
        subprocess.Popen([sys.executable, "-I", "-S", "-c", "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        yield len(burners)
    finally:
        for proc in burners:
            proc.kill()
        for proc in burners:
            proc.wait()


@pytest.fixture(scope="session")
def load_benchmark():
    """Import a script of benchmarks/ by name (``load_benchmark("bench_soak")``): they are scripts,
    not a package, so a test that checks one's arithmetic or runs its short variant loads it so."""
    import importlib.util
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "benchmarks"

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


# --------------------------------------------------------------------------- a fake interpreter

FAKE_PYTHON = '''#!{python}
"""Acts as `python -m <module> <launch flags>`; behaviour chosen by FAKE_MODE."""
import http.server, os, signal, subprocess, sys, threading, time

args = sys.argv[3:]
port = int(args[args.index("--port") + 1])
mode = os.environ.get("FAKE_MODE", "ready")
print("[2026-01-01 00:00:00] starting fake server", flush=True)

def serve():
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()

# mode -> the lines it prints before it fails, and its exit status (None: it stays alive, never ready)
FAILURES = {{
    "exit3": (["something went wrong"], 3),
    "port-log": (["OSError: [Errno 98] error while attempting to bind on address: address already in use"], 1),
    "import-error": (["Traceback (most recent call last):", "ModuleNotFoundError: No module named 'sgl_kernel'"], 1),
    "no-gpu": (["RuntimeError: No CUDA GPUs are available"], 1),
    "oom-alive": (["[2026-01-01 00:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
                   "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."], None),
    "never-ready": ([], None),
}}
if mode in FAILURES:
    lines, status = FAILURES[mode]
    for line in lines:
        print(line, flush=True)
    if status is None:
        time.sleep(600)
    else:
        sys.exit(status)
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode == "escape":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    print(f"escaped child {{child.pid}}", flush=True)
if mode == "secret":  # the key as SGLang reads it: from its --config file (glm5lib's JSON is YAML), else --api-key
    import json
    key = (json.load(open(args[args.index("--config") + 1]))["api-key"] if "--config" in args
           else args[args.index("--api-key") + 1])
    print(f"server_args=ServerArgs(api_key={{key!r}}, hf={{os.environ['HF_TOKEN']}})", flush=True)
threading.Thread(target=serve, daemon=True).start()
time.sleep(0.3)
print("[2026-01-01 00:00:02] The server is fired up and ready to roll!", flush=True)
while True:
    time.sleep(1)
'''


@pytest.fixture
def fake_python(tmp_path):
    """A script that acts as ``python -m <module> <flags>`` for glm5lib.server (see FAKE_PYTHON)."""
    import sys

    path = tmp_path / "fake-python"
    path.write_text(FAKE_PYTHON.format(python=sys.executable))
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def sigint_raises():
    """Ctrl-C raises KeyboardInterrupt in this test, also when pytest was started with SIGINT
    ignored (a background job of a non-interactive shell inherits it ignored)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)
