"""Two runs compared (``glm5 compare``) and the run folders listed (``glm5 runs``)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from glm5lib import report, rundir
from glm5lib.cli import main
from glm5lib.errors import ConfigError


def _phase(run, name, levels: dict[int, tuple[float, float]], config, findings=()):
    """levels: {concurrency: (output tok/s, median TTFT ms)}."""
    folder = rundir.phase_dir(run, name)
    pd.DataFrame({
        "concurrency": list(levels), "completed": [c * 2 for c in levels], "failed": 0,
        "output_throughput": [v[0] for v in levels.values()],
        "median_ttft_ms": [v[1] for v in levels.values()], "p99_ttft_ms": [2 * v[1] for v in levels.values()],
        "median_tpot_ms": 50.0, "p99_tpot_ms": 80.0, "median_e2e_latency_ms": 4000.0,
    }).to_csv(folder / rundir.SWEEP, index=False)
    (folder / rundir.CONFIG).write_text(json.dumps(config))
    if findings:
        pd.DataFrame(list(findings)).to_csv(folder / rundir.FINDINGS, index=False)


CAP = {"finding": "concurrency cap", "evidence": "", "suggestion": "", "confidence": 0.9,
       "rule": "concurrency_cap", "covers": "max_running_requests"}
GPU = {"finding": "GPUs under-used", "evidence": "", "suggestion": "", "confidence": 0.5,
       "rule": "gpu_underused", "covers": float("nan")}


@pytest.fixture
def runs(tmp_path):
    a, b = tmp_path / "monday", tmp_path / "tuesday"
    _phase(a, "baseline", {64: (800.0, 100.0), 256: (880.0, 400.0)},
           {"max_running_requests": 64, "port": 30000}, [CAP, GPU])
    _phase(b, "baseline", {64: (800.0, 90.0), 256: (1760.0, 200.0), 1024: (1800.0, 900.0)},
           {"max_running_requests": 1024, "port": 31000}, [GPU])
    _phase(a, "fix", {256: (1000.0, 50.0)}, {"max_running_requests": 1024})
    (a / rundir.NOTEBOOKS_STATUS).write_text(json.dumps([
        {"name": "01-check-environment.ipynb", "status": "ok", "started": 1.0e9},
        {"name": "02-measure-baseline.ipynb", "status": "failed", "started": 1.0e9 + 10, "error": "boom"}]))
    return a, b


def test_compare_sets_each_shared_level_side_by_side_with_ratios(runs):
    cmp = report.compare_runs(*runs)
    assert cmp.phases == ["baseline"] and (cmp.a, cmp.b) == ("monday", "tuesday")
    rows = {r["concurrency"]: r for r in cmp.rows}
    assert sorted(rows) == [64, 256]  # 1,024 was measured by one run only
    assert rows[256]["output_throughput_a"] == 880.0 and rows[256]["output_throughput_b"] == 1760.0
    assert rows[256]["output_throughput_ratio"] == pytest.approx(2.0)
    assert rows[256]["median_ttft_ms_ratio"] == pytest.approx(0.5)
    assert rows[64]["completed_a"] == 128 and rows[64]["completed_ratio"] == pytest.approx(1.0)
    assert rows[64]["mean_power_w_ratio"] is None  # no gpu.csv in either run
    settings = {d["field"]: d for d in cmp.arguments["baseline"]}
    assert settings["max_running_requests"]["a"] == 64 and settings["max_running_requests"]["b"] == 1024
    assert settings["max_running_requests"]["context"] is False and settings["port"]["context"] is True
    assert cmp.findings["baseline"] == {"only_a": ["concurrency cap"], "only_b": []}
    text = cmp.to_markdown()
    assert "| 256 | output tok/s | 880 | 1,760 | 2.00x |" in text
    assert "- `max_running_requests`: 64 -> 1024" in text and "`port`" in text.split("Context that differs")[1]
    assert "- Finding only in monday: concurrency cap" in text
    assert cmp._repr_markdown_() == text  # shown as such in a notebook
    assert cmp.frame().shape[0] == 2
    assert cmp.figure().axes[0].get_title() == "tuesday compared with monday"  # both runs on one figure


def test_compare_of_one_phase_and_bad_input(runs, tmp_path):
    with pytest.raises(ConfigError, match="phase 'fix' is not in both runs; phases in both: \\['baseline'\\]"):
        report.compare_runs(*runs, phase="fix")
    with pytest.raises(ConfigError, match="does not exist"):
        report.compare_runs(runs[0], tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no phase in common"):
        report.compare_runs(runs[0], tmp_path / "empty")


def test_glm5_compare_prints_the_table_and_json_rows_and_draws_both(runs, capsys, tmp_path):
    a, b = runs
    assert main(["compare", str(a), str(b), "--phase", "baseline"]) == 0
    out = capsys.readouterr().out
    assert "# tuesday compared with monday" in out and "| 64 | median TTFT ms | 100 | 90 | 0.90x |" in out
    figure = b / rundir.FIGURES / "compare-monday.png"
    assert f"Figure: {figure}" in out and figure.read_bytes()[:4] == b"\x89PNG"
    svg = tmp_path / "both.svg"
    assert main(["compare", str(a), str(b), "--json", "--figure", str(svg)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["phase"], r["concurrency"]) for r in rows] == [("baseline", 64), ("baseline", 256)]
    assert rows[1]["output_throughput_ratio"] == pytest.approx(2.0)
    assert svg.read_text().lstrip().startswith("<?xml")
    assert main(["compare", str(a), str(b), "--phase", "fix"]) != 0  # a library error: the message names the input
    assert "phase 'fix' is not in both runs" in capsys.readouterr().err


def test_glm5_runs_lists_each_run_with_its_state_and_headline(runs, capsys):
    a, _ = runs
    rows = {r["run"]: r for r in report.list_runs(a.parent)}
    assert rows["monday"]["state"] == "failed at notebook 02"
    assert rows["monday"]["date"] == "2001-09-09 01:46"
    assert rows["tuesday"]["state"] == "not run"  # phases but no notebooks.json
    assert rows["tuesday"]["peak_baseline"] == 1800.0 and rows["monday"]["peak_fix"] == 1000.0
    assert rows["monday"]["gain"] == pytest.approx(1000 / 880)
    assert rows["monday"]["engine"] == "sglang"
    assert main(["runs", "--root", str(a.parent)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["run", "date", "(UTC)", "engine"]
    monday = next(line for line in out if line.startswith("monday"))
    assert "failed at notebook 02" in monday and "1.14x" in monday and "880" in monday
    assert main(["runs", "--root", str(a.parent), "--json"]) == 0
    assert {r["run"] for r in json.loads(capsys.readouterr().out)} == {"monday", "tuesday"}
    assert main(["runs", "--root", str(a / "nowhere")]) != 0  # a library error: the message names the input


def test_glm5_report_writes_both_reports_again(runs, capsys):
    a, _ = runs
    assert main(["report", str(a)]) == 0
    out = capsys.readouterr().out
    assert f"Report: {a / rundir.REPORT}" in out and f"HTML report: {a / rundir.REPORT_HTML}" in out
    assert (a / rundir.REPORT_HTML).read_text().startswith("<!DOCTYPE html>")
    assert "02-measure-baseline.ipynb failed: boom" in (a / rundir.REPORT).read_text()
    assert main(["report", str(a / "missing")]) != 0  # a library error: the message names the input
