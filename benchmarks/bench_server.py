"""Costs of glm5lib.server and glm5lib.engines.sglang.config, measured against the stand-in.

Prints, for ``--repeat`` launches of the stand-in (``glm5-baseline``, profile
glm5-nvfp4-8x-rtxpro6000):

- launch -> ready: wall time of ``launch()``, against the stand-in spawned directly until it
  prints its readiness line (target: overhead under 0.5 s);
- fault detection: time from ``launch()`` to ``ServerLaunchError`` for ``oom-at-start`` and
  ``nccl-at-start``, against the time the stand-in alone needs to print that fault
  (target: overhead under the 3 s settle window, far below any timeout);
- stop: wall time of ``stop()`` on a ready server (SIGTERM honoured, no SIGKILL wait);
- config: microseconds per ``from_argv``/``to_argv`` of the baseline and of a full 300+-field
  logged ServerArgs (``from_server_args``).

    python benchmarks/bench_server.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from glm5lib import server as srv
from glm5lib.engines import sglang
from glm5lib.engines.sglang.config import ServerConfig
from glm5lib.errors import ServerLaunchError
from glm5lib.logs import classify_fatal

PROFILE = ["--sim-profile", "glm5-nvfp4-8x-rtxpro6000"]


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} s (min {min(values):.3f}, max {max(values):.3f}, n={len(values)})"


def bare_stand_in(extra: list[str], until) -> float:
    """Seconds from spawning the stand-in directly until a printed line satisfies ``until``."""
    argv = [sys.executable, "-m", "glm5lib.sim", *ServerConfig.load("glm5-baseline").to_argv(),
            "--port", str(srv.find_free_port()), *extra]
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if until(line):
                return time.monotonic() - started
        raise SystemExit(f"the stand-in ended without the expected line: {argv}")
    finally:
        proc.kill()
        proc.wait()


def bench_launch(repeat: int, tmp: Path) -> None:
    total, bare, stop = [], [], []
    logged_args = None
    for i in range(repeat):
        bare.append(bare_stand_in(PROFILE, lambda line: srv.READY_LINE in line))
        started = time.monotonic()
        server = sglang.launch("glm5-baseline", backend="sim", log_path=tmp / f"ready-{i}.log", extra_args=PROFILE, ready_timeout=60)
        total.append(time.monotonic() - started)
        logged_args = server.logs().server_args
        t0 = time.monotonic()
        server.stop()
        stop.append(time.monotonic() - t0)
    print(f"stand-in alone: spawn -> ready line:   {_median(bare)}")
    print(f"launch() -> ready (health 200 + line): {_median(total)}")
    print(f"readiness overhead (medians):          {statistics.median(total) - statistics.median(bare):.3f} s")
    print(f"stop() of a ready stand-in:            {_median(stop)}")
    if logged_args:
        bench_config(logged_args)


def bench_faults(repeat: int, tmp: Path) -> None:
    for fault in ("oom-at-start", "nccl-at-start"):
        total, bare = [], []
        for i in range(repeat):
            bare.append(bare_stand_in([*PROFILE, "--sim-fault", fault], lambda line: classify_fatal(line) is not None))
            server_log = tmp / f"{fault}-{i}.log"
            started = time.monotonic()
            try:
                sglang.launch("glm5-baseline", backend="sim", log_path=server_log,
                           extra_args=[*PROFILE, "--sim-fault", fault], ready_timeout=60)
            except ServerLaunchError as exc:
                raised = time.monotonic()
                total.append(raised - started)
                assert exc.cause in ("oom", "nccl"), exc.cause
            else:
                raise SystemExit(f"{fault}: launch did not fail")
        print(f"{fault}: stand-in alone -> first fatal line: {_median(bare)}")
        print(f"{fault}: launch() -> ServerLaunchError:      {_median(total)}")
        print(f"{fault}: detection overhead (medians):       {statistics.median(total) - statistics.median(bare):.3f} s")


def _per_call_us(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def bench_config(logged_args: dict) -> None:
    base = ServerConfig.load("glm5-baseline")
    argv = base.to_argv()
    full = ServerConfig.from_server_args(logged_args)
    full_argv = full.to_argv()
    print(f"from_argv(baseline, {len(argv)} tokens):        {_per_call_us(lambda: ServerConfig.from_argv(argv), 2000):8.1f} us")
    print(f"to_argv(baseline):                      {_per_call_us(base.to_argv, 2000):8.1f} us")
    print(f"from_server_args({len(logged_args)} logged fields):  {_per_call_us(lambda: ServerConfig.from_server_args(logged_args), 200):8.1f} us "
          f"({len(full.explicit)} differ from defaults)")
    print(f"from_argv(that, {len(full_argv)} tokens):          {_per_call_us(lambda: ServerConfig.from_argv(full_argv), 200):8.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-server-") as tmp:
        bench_launch(args.repeat, Path(tmp))
        bench_faults(args.repeat, Path(tmp))


if __name__ == "__main__":
    main()
