from __future__ import annotations

import json

import nbformat
import pytest

from glm5lib import workbook
from glm5lib.errors import ConfigError, NotebookFailedError


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("RUN_DIR = 'unset'\nVALUE = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params] + [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def test_parse_parameter_reads_literals_and_strings():
    assert workbook.parse_parameter("concurrencies=[1, 64]") == ("CONCURRENCIES", [1, 64])
    assert workbook.parse_parameter("BACKEND=sim") == ("BACKEND", "sim")
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        workbook.parse_parameter("no-equals-sign")


def test_runs_notebooks_in_order_and_passes_parameters(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    write = "import pathlib\npathlib.Path(RUN_DIR, '{name}').write_text(str(VALUE))"
    _notebook(nbs / "02-second.ipynb", write.format(name="b.txt"))
    _notebook(nbs / "01-first.ipynb", write.format(name="a.txt"))
    (nbs / "scratch.ipynb").write_text("not part of the workbook")
    out = workbook.run_workbook({"VALUE": 7}, run_dir=tmp_path / "run", notebooks=nbs, progress=False)
    assert (out / "a.txt").read_text() == "7"
    assert (out / "b.txt").read_text() == "7"
    assert (out / "01-first.ipynb").exists() and (out / "02-second.ipynb").exists()


def test_failed_notebook_stops_the_run_and_names_notebook_and_cell(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _notebook(nbs / "01-ok.ipynb", "import pathlib\npathlib.Path(RUN_DIR, 'kept.txt').write_text('x')")
    _notebook(nbs / "02-broken.ipynb", "x = 1", "raise RuntimeError('boom')")
    _notebook(nbs / "03-never.ipynb", "import pathlib\npathlib.Path(RUN_DIR, 'never.txt').write_text('x')")
    with pytest.raises(NotebookFailedError) as exc:
        workbook.run_workbook({}, run_dir=tmp_path / "run", notebooks=nbs, progress=False)
    assert exc.value.notebook == "02-broken.ipynb"
    # execution count as shown in the executed copy, which holds papermill's injected cell
    assert exc.value.cell == 4
    assert "boom" in str(exc.value) and "raise RuntimeError" in str(exc.value)
    assert (tmp_path / "run" / "kept.txt").exists()
    assert not (tmp_path / "run" / "never.txt").exists()


def test_only_rejects_unknown_numbers(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _notebook(nbs / "01-first.ipynb", "pass")
    with pytest.raises(ConfigError, match="names no notebook"):
        workbook.run_workbook({}, run_dir=tmp_path / "run", notebooks=nbs, only=[9], progress=False)


def _sweep_notebook(nbs, name, phase, throughput):
    code = (
        "import pathlib, pandas as pd\n"
        f"d = pathlib.Path(RUN_DIR, '{phase}'); d.mkdir(exist_ok=True)\n"
        f"pd.DataFrame({{'concurrency': [256], 'output_throughput': [{throughput}]}}).to_csv(d / 'sweep.csv', index=False)"
    )
    _notebook(nbs / name, code)


def test_report_is_written_at_the_end_with_notebook_status(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _sweep_notebook(nbs, "01-base.ipynb", "baseline", 880.0)
    _sweep_notebook(nbs, "02-fix.ipynb", "fix", 1950.0)
    out = workbook.run_workbook({}, run_dir=tmp_path / "run", notebooks=nbs, progress=False)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["throughput"] == {"baseline": {"256": 880.0}, "fix": {"256": 1950.0}}
    assert [n["status"] for n in summary["notebooks"]] == ["ok", "ok"]
    assert "| 256 | 880 | 1,950 | 2.22 |" in (out / "report.md").read_text()


def test_failed_run_keeps_results_and_reports_what_it_has(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _sweep_notebook(nbs, "01-base.ipynb", "baseline", 880.0)
    _notebook(nbs / "02-broken.ipynb", "raise ValueError('server gone')")
    with pytest.raises(NotebookFailedError):
        workbook.run_workbook({}, run_dir=tmp_path / "run", notebooks=nbs, progress=False)
    run = tmp_path / "run"
    status = json.loads((run / "notebooks.json").read_text())
    assert [(n["name"], n["status"]) for n in status] == [("01-base.ipynb", "ok"), ("02-broken.ipynb", "failed")]
    assert status[1]["error"] == "ValueError: server gone"
    text = (run / "report.md").read_text()
    assert "880 tok/s at 256" in text
    assert "**Incomplete run**: 02-broken.ipynb failed: ValueError: server gone" in text


def test_cli_prints_where_results_and_report_went(tmp_path, capsys):
    from glm5lib import cli

    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _sweep_notebook(nbs, "01-base.ipynb", "baseline", 880.0)
    code = cli.main(["workbook", "run", "-q", "--notebooks", str(nbs), "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0
    assert f"Workbook results are in {tmp_path / 'run'}" in out
    assert f"Report: {tmp_path / 'run' / 'report.md'}" in out
    _notebook(nbs / "02-broken.ipynb", "raise ValueError('x')")
    code = cli.main(["workbook", "run", "-q", "--notebooks", str(nbs), "--run-dir", str(tmp_path / "run2")])
    captured = capsys.readouterr()
    assert code == 1
    assert f"Report (partial): {tmp_path / 'run2' / 'report.md'}" in captured.out
    assert "02-broken.ipynb failed in cell" in captured.err


def test_resolve_run_dir_takes_names_under_runs_and_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("GLM5_RUNS_DIR", str(tmp_path / "runs"))
    assert workbook.resolve_run_dir("interactive") == (tmp_path / "runs" / "interactive").resolve()
    assert (tmp_path / "runs" / "interactive").is_dir()
    assert workbook.resolve_run_dir(tmp_path / "elsewhere" / "r1") == (tmp_path / "elsewhere" / "r1").resolve()
    with pytest.raises(ConfigError, match="RUN_DIR is empty"):
        workbook.resolve_run_dir("  ")


def test_start_server_rejects_unknown_backends_before_starting_anything(tmp_path):
    with pytest.raises(ConfigError, match="BACKEND 'tgi' is not valid") as exc:
        workbook.start_server("tgi", None, tmp_path)
    assert "http://HOST:PORT" in exc.value.valid
    assert not any(tmp_path.iterdir())


def test_phase_log_is_empty_not_an_error_when_the_log_is_missing(tmp_path):
    assert workbook.phase_log(tmp_path).decode.empty
    (tmp_path / "server.log").write_text(
        "[2026-01-01 10:00:00] Decode batch, #running-req: 64, #token: 9000, token usage: 0.01, "
        "cuda graph: True, gen throughput (token/s): 880.00, #queue-req: 192, \n"
    )
    decode = workbook.phase_log(tmp_path).decode
    assert decode["running_req"].tolist() == [64] and decode["queue_req"].tolist() == [192]


@pytest.mark.slow
def test_attaching_records_server_info_and_copies_the_log(tmp_path):
    from glm5lib.engines import sglang
    from glm5lib.engines.sglang.config import ServerConfig

    own = sglang.launch(ServerConfig.load("glm5-baseline"), backend="sim", log_path=tmp_path / "own.log",
                        ready_timeout=60)
    try:
        phase = tmp_path / "run" / "baseline"
        srv = workbook.start_server(own.base_url, None, phase, attach_log=tmp_path / "own.log")
        info = json.loads((phase / "server_info.json").read_text())
        assert info["standin"]["profile"] == "glm5-nvfp4-8x-rtxpro6000"
        server_log = workbook.stop_server(srv, phase)
        assert own.alive(), "stopping an attached server must leave it running"
        assert server_log.standin == "glm5-nvfp4-8x-rtxpro6000"
        assert (phase / "server.log").read_text().startswith((tmp_path / "own.log").read_text()[:200])
    finally:
        own.stop()
    assert not own.alive()


def test_a_notebook_that_cannot_start_is_recorded_and_reported(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _notebook(nbs / "01-ok.ipynb", "x = 1")
    broken = nbformat.read(nbs / "01-ok.ipynb", as_version=4)
    broken.metadata["kernelspec"]["name"] = "no-such-kernel-glm5"
    nbformat.write(broken, nbs / "02-nokernel.ipynb")
    with pytest.raises(Exception, match="no-such-kernel-glm5"):
        workbook.run_workbook({}, run_dir=tmp_path / "run", notebooks=nbs, progress=False)
    status = json.loads((tmp_path / "run" / "notebooks.json").read_text())
    assert [(n["name"], n["status"]) for n in status] == [("01-ok.ipynb", "ok"), ("02-nokernel.ipynb", "failed")]
    assert "02-nokernel.ipynb failed" in (tmp_path / "run" / "report.md").read_text()
