"""The workbook runner's progress lines, read from a run folder a real sweep is writing."""

from __future__ import annotations

import io
import json
import re

from glm5lib import rundir
from glm5lib.progress import RunProgress, format_level_line


def test_format_level_line_names_cut_requests_and_leaves_out_what_is_unknown():
    row = {"concurrency": 256, "output_throughput": 880.4, "median_ttft_ms": 1234.0, "median_tpot_ms": 72.25,
           "completed": 0, "cancelled": 256, "failed": 0}
    line = format_level_line("baseline", row, running=(64.0, 192.0), power=(83.2, 600.0))
    assert line == ("baseline C=256: 880 tok/s, TTFT 1,234 ms, TPOT 72.2 ms, running 64 (queued up to 192), "
                    "GPU 83 W of 600 W (0 finished, 256 cut at deadline)")
    bare = format_level_line("fix", {"concurrency": 1, "output_throughput": float("nan"), "completed": 3,
                                     "failed": 1})
    assert bare == "fix C=1: n/a tok/s, TTFT n/a ms, TPOT n/a ms (3 finished, 1 failed)"


def test_progress_prints_a_line_per_level_and_live_lines_during_a_real_sweep(tmp_path):
    from glm5lib import telemetry
    from glm5lib.engines.sim import run_standin
    from glm5lib.loadgen import run_sweep

    run = tmp_path / "run"
    folder = rundir.phase_dir(run, "baseline")
    out = io.StringIO()
    with (
        run_standin("--max-running-requests", "64", log_path=folder / rundir.SERVER_LOG) as srv,
        telemetry.GpuSampler(interval=0.2, base_url=srv.base_url, out=folder / rundir.GPU),
        RunProgress(run, stream=out, interval=0.2, live_every=0.0),
    ):
        run_sweep(srv.base_url, [1, 16], input_len=32, output_len=4000, duration=5.0, warmup=0,
                  run_dir=folder, progress=False)
    text = out.getvalue()
    levels = [ln for ln in text.splitlines() if ln.startswith("baseline C=")]
    assert [ln.split(":")[0] for ln in levels] == ["baseline C=1", "baseline C=16"], text
    for ln in levels:
        assert re.search(r": [\d,]+ tok/s, TTFT [\d,]+ ms, TPOT [\d.]+ ms, ", ln), ln
        assert re.search(r"GPU \d+ W of 600 W", ln) and "cut at deadline" in ln, ln
    # the server log's running requests over the level (its decode lines are seconds apart)
    running = re.search(r"running (\d+) \(queued up to \d+\)", levels[1])
    assert running and 1 <= int(running.group(1)) <= 16, levels[1]
    live = [ln for ln in text.splitlines() if ln.startswith("  ... baseline (0 levels done), now: ")]
    assert live and any("GPU" in ln for ln in live), text
    assert "\r" not in text  # not a terminal: whole lines only


def test_notebook_lines_follow_the_runners_record(tmp_path):
    import json

    status = tmp_path / "notebooks.json"
    status.write_text(json.dumps([{"name": "01-check-environment.ipynb", "status": "ok", "seconds": 8.0}]))
    out = io.StringIO()
    progress = RunProgress(tmp_path, stream=out)
    assert progress.poll() == []  # what was there before the run is not news
    status.write_text(json.dumps([{"name": "01-check-environment.ipynb", "status": "ok", "seconds": 8.0},
                                  {"name": "02-measure-baseline.ipynb", "status": "running", "started": 1.0}]))
    assert progress.poll() == ["notebook 02-measure-baseline.ipynb: running"]
    status.write_text(json.dumps([{"name": "01-check-environment.ipynb", "status": "ok", "seconds": 8.0},
                                  {"name": "02-measure-baseline.ipynb", "status": "failed", "started": 1.0,
                                   "seconds": 3.2, "error": "SweepAbortedError: server died"}]))
    assert progress.poll() == ["notebook 02-measure-baseline.ipynb: failed (SweepAbortedError: server died)"]
    assert out.getvalue().count("\n") == 2


def test_glm5_workbook_run_prints_a_line_per_notebook_and_per_level(tmp_path, capsys):
    import nbformat

    from glm5lib import cli

    nbs = tmp_path / "nbs"
    nbs.mkdir()
    params = nbformat.v4.new_code_cell("RUN_DIR = 'unset'")
    params.metadata["tags"] = ["parameters"]
    nb = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_code_cell(
        "import pathlib, pandas as pd\n"
        "d = pathlib.Path(RUN_DIR, 'baseline'); d.mkdir(exist_ok=True)\n"
        "pd.DataFrame({'concurrency': [64], 'output_throughput': [880.0], 'median_ttft_ms': [720.0],"
        " 'completed': [0], 'cancelled': [64]}).to_csv(d / 'sweep.csv', index=False)")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, nbs / "01-measure.ipynb")
    assert cli.main(["workbook", "run", "--notebooks", str(nbs), "--run-dir", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "notebook 01-measure.ipynb: running\n" in err
    assert "baseline C=64: 880 tok/s, TTFT 720 ms, TPOT n/a ms (0 finished, 64 cut at deadline)\n" in err
    assert re.search(r"notebook 01-measure.ipynb: ok in \d+ s\n", err)
    assert "Executing:" not in err  # papermill's cell counter is replaced by these lines


def test_on_a_terminal_the_live_line_is_rewritten_in_place_and_cleared_for_a_level_line(tmp_path):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    folder = rundir.phase_dir(tmp_path, "baseline")
    (folder / rundir.SERVER_LOG).write_text("")  # a phase: its server has started
    (folder / rundir.GPU).write_text("time,gpu,power_w,power_limit_w\n100.0,0,80.0,600.0\n100.5,0,90.0,600.0\n")
    out = Terminal()
    progress = RunProgress(tmp_path, stream=out)
    now = (folder / rundir.GPU).stat().st_mtime
    assert progress.poll(now=now) == []
    assert out.getvalue() == "\r  ... baseline (0 levels done), now: GPU 85 W"
    (folder / rundir.SWEEP).write_text("concurrency,output_throughput,completed,cancelled,start_time,end_time\n"
                                       "1,19.0,0,1,99.0,101.0\n")
    assert progress.poll(now=now) == ["baseline C=1: 19 tok/s, TTFT n/a ms, TPOT n/a ms, GPU 85 W of 600 W "
                                      "(0 finished, 1 cut at deadline)"]
    text = out.getvalue()
    blank = "\r" + " " * len("  ... baseline (0 levels done), now: GPU 85 W") + "\r"
    assert blank + "baseline C=1: 19 tok/s" in text
    assert text.endswith("\r  ... baseline (1 level done), now: GPU 85 W")
    progress.stop()  # leaves the terminal line clean
    assert out.getvalue().endswith("\r" + " " * len("  ... baseline (1 level done), now: GPU 85 W") + "\r")


def test_a_notebook_shorter_than_the_polling_interval_still_gets_its_running_line(tmp_path):
    """The runner reports each status change; polling alone missed a notebook that ran < 1 s."""
    out = io.StringIO()
    progress = RunProgress(tmp_path, stream=out, interval=3600.0)  # the watcher never polls by itself
    status = tmp_path / "notebooks.json"
    running = [{"name": "01-check-environment.ipynb", "status": "running", "started": 1.0}]
    status.write_text(json.dumps(running))
    assert progress.notebook_status(running) == ["notebook 01-check-environment.ipynb: running"]
    done = [dict(running[0], status="ok", seconds=0.4)]
    status.write_text(json.dumps(done))
    assert progress.notebook_status(done) == ["notebook 01-check-environment.ipynb: ok in 0 s"]
    assert progress.poll(live=False) == []  # the file says what was already written: no repeat
    assert out.getvalue().splitlines() == ["notebook 01-check-environment.ipynb: running",
                                           "notebook 01-check-environment.ipynb: ok in 0 s"]


def test_a_status_file_read_while_it_is_rewritten_repeats_no_line(tmp_path):
    """The runner rewrites notebooks.json in place: a round that reads it half-written (or gone)
    must not forget what was already reported, or the next round reports every notebook again."""
    out = io.StringIO()
    progress = RunProgress(tmp_path, stream=out)
    status = tmp_path / "notebooks.json"
    entries = [{"name": "01-check-environment.ipynb", "status": "ok", "started": 1.0, "seconds": 8.0},
               {"name": "02-measure-baseline.ipynb", "status": "running", "started": 9.0}]
    status.write_text(json.dumps(entries))
    assert progress.poll(live=False) == ["notebook 01-check-environment.ipynb: ok in 8 s",
                                         "notebook 02-measure-baseline.ipynb: running"]
    status.write_text(json.dumps(entries)[:40])  # caught mid-write
    assert progress.poll(live=False) == []
    status.unlink()
    assert progress.poll(live=False) == []
    status.write_text(json.dumps(entries))
    assert progress.poll(live=False) == []  # nothing changed: nothing repeated
    assert out.getvalue().count("\n") == 2
