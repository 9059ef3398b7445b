"""scripts/gpu/repeat_launch.py, which launches one configuration several times to read how far its
launches stand apart, run end to end on the stand-in (the GPU host runs it on real SGLang)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = [pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "repeat_launch.py"
ARGS = ["--model", "sim", "--backend", "sim", "--tp", "8", "--concurrencies", "4,16", "--duration", "2"]


def _run(run_dir: Path, *more: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--run-dir", str(run_dir), *ARGS, *more],
                          capture_output=True, text=True, timeout=600)


def test_each_launch_is_its_own_phase_and_a_rerun_measures_only_the_missing_ones(tmp_path):
    done = _run(tmp_path, "--launches", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    table = pd.read_csv(tmp_path / "launches.csv").set_index("concurrency")
    assert list(table.columns) == ["launch-1", "launch-2", "spread"] and list(table.index) == [4, 16]
    for name in ("launch-1", "launch-2"):
        assert (tmp_path / name / "server.log").stat().st_size > 0
        assert (table[name] > 0).all(), table
    assert (table["spread"] == table[["launch-1", "launch-2"]].max(axis=1)
            / table[["launch-1", "launch-2"]].min(axis=1) - 1).all()
    first = (tmp_path / "launch-1" / "sweep.csv").stat().st_mtime_ns
    again = _run(tmp_path, "--launches", "3")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "launch-1:" not in again.stdout and "launch-3:" in again.stdout, again.stdout
    assert (tmp_path / "launch-1" / "sweep.csv").stat().st_mtime_ns == first
    assert list(pd.read_csv(tmp_path / "launches.csv").columns) == ["concurrency", "launch-1", "launch-2", "launch-3",
                                                                    "spread"]


def test_one_launch_is_refused_before_anything_starts(tmp_path):
    done = _run(tmp_path, "--launches", "1")
    assert done.returncode == 2 and "--launches must be at least 2" in done.stderr, done.stderr
    assert not list(tmp_path.glob("launch-*"))
