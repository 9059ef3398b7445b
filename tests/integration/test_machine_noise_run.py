"""One short run of the machine-noise benchmark on a real core, as a user runs it (its arithmetic:
tests/unit/test_bench_machine_noise.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_machine_noise.py"


def _bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_short_run_on_one_real_core_prints_its_rates_and_what_a_level_can_resolve():
    core = min(os.sched_getaffinity(0))
    done = _bench("--seconds", "0.9", "--window", "0.3", "--levels", "0.3", "--cores", str(core))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:2] == ["core", "windows"])
    values = dict(zip(lines[at].split(), lines[at + 1].split(), strict=True))
    assert int(values["core"]) == core and int(values["windows"]) >= 3
    assert float(values["rate_min"]) <= float(values["rate_median"]) <= float(values["rate_max"])
    assert float(values["chunk_ms_median"]) > 0
    assert "two levels of 0.3 s: differences under" in done.stdout


def test_a_core_this_process_may_not_use_is_refused_before_anything_runs():
    done = _bench("--cores", "9999")
    assert done.returncode == 2 and "--cores '9999'" in done.stderr and "may use" in done.stderr
