"""scripts/gpu/run_sglang_h200.py's plan: a launch's cost is read off the notebook that launched the server,
so a step's other notebooks (03's diff and offline benchmark, the reports) do not make later launches look
dearer than they are and the plan stop before a step that fits (a 47-s benchmark and a 68-s notebook 03
once put a 160-s launch at 380 s)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "run_sglang_h200.py"


def _plan():
    spec = importlib.util.spec_from_file_location("run_sglang_h200", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_launch_costs_what_its_launching_notebook_took(tmp_path):
    plan = _plan()
    (tmp_path / "notebooks.json").write_text(json.dumps([
        {"name": "01-check-environment.ipynb", "status": "ok", "seconds": 5.6},
        {"name": "02-measure-baseline.ipynb", "status": "ok", "seconds": 285.2},
        {"name": "03-diff-reference.ipynb", "status": "ok", "seconds": 68.1}]))
    assert plan._launching_seconds(tmp_path, [1, 2, 3], 359.6) == 285.2
    assert plan._launching_seconds(tmp_path, [4], 200.0) == 200.0  # not timed there: the whole step
    assert plan._launching_seconds(tmp_path / "nowhere", [1, 2, 3], 359.6) == 359.6
