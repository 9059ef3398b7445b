"""The workbook's notebooks: their shape (fast), and whole runs on the stand-in (slow).

The slow tests run real kernels, real stand-in servers on loopback and real sweeps:
- ``test_workbook_tells_the_story_on_the_stand_in`` runs the sequence with papermill (through
  ``glm5lib.workbook``) and checks the numbers of ``summary.json`` and ``report.md``;
- ``test_notebooks_pass_nbval`` runs ``pytest --nbval-lax notebooks/`` on the committed
  notebooks with their default parameters, as a user's JupyterLab would.
"""

from __future__ import annotations

import ast
import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from glm5lib import workbook

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = workbook.list_notebooks()
NAMES = [p.name for p in NOTEBOOKS]
PARAM_LINE = re.compile(r"^([A-Z][A-Z0-9_]*) = (.+?)  # (\S.*)$")


def _read(path):
    return nbformat.read(path, as_version=4)


def _code(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_the_workbook_has_its_eight_notebooks_in_order():
    assert NAMES == [
        "01-check-environment.ipynb",
        "02-measure-baseline.ipynb",
        "03-diff-reference.ipynb",
        "04-apply-fix.ipynb",
        "05-find-next-bottleneck.ipynb",
        "06-explore-interactively.ipynb",
        "07-tune-config.ipynb",
        "08-watch-live-server.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=NAMES)
def test_notebook_follows_the_style_rules(path):
    nb = _read(path)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# ")
    assert sum(1 for line in first.source.splitlines() if line.startswith("# ")) == 1
    question = first.source.split("\n\n")[1]
    assert "?" in question, "the first paragraph states the question the notebook answers"
    assert sum(c.source.count("\n# ") + c.source.startswith("# ") for c in nb.cells if c.cell_type == "markdown") == 1

    code = _code(nb)
    assert all(line.startswith(("import ", "from ")) or not line.strip() for line in code[0].source.splitlines())
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0] is code[1], "exactly one parameters cell, right after the imports"
    names = []
    for line in tagged[0].source.splitlines():
        m = PARAM_LINE.match(line)
        assert m, f"parameter line is not 'UPPER_SNAKE = literal  # units/allowed values': {line!r}"
        ast.literal_eval(m.group(2))
        names.append(m.group(1))
    assert "RUN_DIR" in names
    for cell in code:
        tree = ast.parse(cell.source)
        assert not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
                       for n in ast.walk(tree)), f"logic belongs in glm5lib, not in a cell: {cell.source[:60]!r}"
        assert "sys.path" not in cell.source
        assert cell is tagged[0] or len(cell.source.splitlines()) <= 12, f"cell too long: {cell.source[:60]!r}"
        checked = cell.source.startswith("# NBVAL_CHECK_OUTPUT")
        assert checked or not cell.outputs, "committed notebooks carry no volatile output"
        assert checked or cell.execution_count is None
    assert "report.write_report(run)" in code[-1].source, "the last cell writes results to the run folder"


def test_parameters_parse_for_papermill_without_warnings(caplog):
    from papermill.inspection import inspect_notebook

    for path in NOTEBOOKS:
        params = inspect_notebook(str(path))
        assert params and all(p["help"] for p in params.values()), path.name
    assert not [r for r in caplog.records if "Unable to parse" in r.getMessage()]


def test_committed_notebooks_are_stripped():
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "strip_notebooks.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_checked_cells_have_their_expected_output_committed():
    checked = {}
    for path in NOTEBOOKS:
        for cell in _code(_read(path)):
            if cell.source.startswith("# NBVAL_CHECK_OUTPUT"):
                checked[path.name] = "".join(o.get("text", "") for o in cell.outputs)
    assert checked["03-diff-reference.ipynb"] == "leading hypothesis: max_running_requests (supported by the evidence: True)\n"
    assert checked["05-find-next-bottleneck.ipynb"] == "concurrency cap still found: False\n"
    assert "max_running_requests: 64 -> 1024" in checked["04-apply-fix.ipynb"]
    assert checked["08-watch-live-server.ipynb"] == "leading finding: concurrency_cap\n"


def _within(value, target, tolerance=0.15):
    return abs(value / target - 1) <= tolerance


@pytest.mark.slow
@pytest.mark.notebooks
@pytest.mark.timeout(900)  # a safety net, generous for a slow machine
def test_workbook_tells_the_story_on_the_stand_in(tmp_path):
    run = tmp_path / "run"
    # The notebooks' default workload in both phases; each keeps its own level length (the fix's
    # is longer: at 1,024 uncapped requests the prefill ramp takes ~11 s before decode is steady).
    workbook.run_workbook({"CONCURRENCIES": [256, 1024]}, run_dir=run, only=[1, 2, 3], progress=False)
    hypothesis = json.loads((run / "hypothesis.json").read_text())
    assert hypothesis["field"] == "max_running_requests" and hypothesis["supported"] is True
    # notebook 3 forecast the change the finding proposes (the cap and the graph ceiling to 1,024) and took
    # the step profile that forecast asked for; the hypothesis states the forecast made with it: here the
    # baseline ran one batch (64 at both levels), so 1,024 stays not forecast and names the one level that
    # would settle it, not the benchmark already taken
    assert hypothesis["changes"] == {"cuda_graph_max_bs": 1024, "max_running_requests": 1024}
    assert (run / "baseline" / "step-profile.csv").is_file()
    forecast = {int(r["concurrency"]): r for r in csv.DictReader((run / "forecast.csv").open())}
    top = forecast[1024]
    if top["given"] == "True":
        assert f"forecasts {float(top['predicted_tok_s']):,.0f} tok/s" in hypothesis["test"], hypothesis["test"]
    else:
        assert "has no forecast" in hypothesis["test"] and top["needs"][:100] in hypothesis["test"], (
            top["needs"], hypothesis["test"])
    workbook.run_workbook({"CONCURRENCIES": [1024]}, run_dir=run, only=[4, 5], progress=False)
    # run headless, a notebook keeps no progress bar frozen at its first frame ("0/12 s"): its level lines say it all
    measured = (run / "02-measure-baseline.ipynb").read_text()
    assert "widget-view+json" not in measured and "0%|" not in measured and "PhaseResult('baseline'" in measured
    summary = json.loads((run / "summary.json").read_text())
    baseline_256 = summary["throughput"]["baseline"]["256"]
    fix_1024 = summary["throughput"]["fix"]["1024"]
    assert _within(baseline_256, 880), f"baseline at 256: {baseline_256:.0f} tok/s, published 880"
    assert _within(fix_1024, 3740), f"fix at 1,024: {fix_1024:.0f} tok/s, published 3,740"
    assert summary["leading_cause"]["field"] == "max_running_requests"
    assert summary["standin"]["used"] is True
    assert summary["phases"]["fix"]["patch"]["status"] == "modelled"
    assert [n["status"] for n in summary["notebooks"]] == ["ok"] * 5
    assert not any(f.get("rule") == "concurrency_cap" for f in summary["next_bottleneck"]["findings"])

    # the default workload finishes requests at most levels, so the report has end-to-end latency
    levels = [lv for p in ("baseline", "fix") for lv in summary["phases"][p]["levels"]]
    with_e2e = [lv["concurrency"] for lv in levels if lv.get("median_e2e_latency_ms") and lv.get("completed")]
    assert len(with_e2e) > len(levels) / 2, f"end-to-end latency at {with_e2e} of {len(levels)} levels"

    text = (run / "report.md").read_text()
    assert "median E2E ms" in text and (run / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert "stand-in server, not from SGLang on GPUs" in text.split("## Summary")[0]
    assert f"{baseline_256:,.0f} tok/s at 256 concurrent requests" in text
    assert "**Leading cause**: `max_running_requests` (baseline 64, reference 2,048)" in text
    assert f"peak {fix_1024:,.0f} tok/s at 1,024" in text
    gains = {r["concurrency"]: r["gain"] for r in summary["comparison"]}
    assert gains[1024] > 3, "the fix multiplies throughput at 1,024 concurrent requests"
    for name in ("throughput", "latency", "running-queued", "power"):
        # notebook 4 drew each figure of both phases; the report refers to it, not to a copy
        rel = summary["figures"][name]
        assert rel == f"figures/fix-{name}.png"
        assert (run / rel).read_bytes()[:4] == b"\x89PNG"
        assert f"({rel})" in text
        assert not (run / "figures" / f"{name}.png").exists()
    for nb in NAMES[:5]:  # notebook 6 is the interactive panel, not part of the story
        executed = _read(run / nb)
        assert executed.metadata["papermill"]["exception"] is None


@pytest.mark.slow
@pytest.mark.notebooks
@pytest.mark.timeout(900)  # a safety net, generous for a slow machine
def test_notebooks_pass_nbval(tmp_path):
    # nbval reads a kernel's output only after each cell ends; the live (widget) progress bars of
    # a long sweep cell would overflow the 1,000-message output queue meanwhile. QT_API makes
    # tqdm.auto pick its console bar, which TQDM_DISABLE then turns off.
    env = {**os.environ, "GLM5_RUNS_DIR": str(tmp_path), "QT_API": "", "TQDM_DISABLE": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider", "-q",
         "--rootdir", str(ROOT / "notebooks"), str(ROOT / "notebooks")],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=870,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert re.search(r"\b\d+ passed\b", result.stdout)
    assert (tmp_path / "interactive" / "report.md").exists()
