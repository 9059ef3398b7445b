"""The report reads each phase once, as its Evidence, under the evidence's one precedence."""

from __future__ import annotations

import builtins
import collections
import contextlib
import io
import json
import os
from pathlib import Path

import pandas as pd
import pytest

from glm5lib import engines, report, rundir
from glm5lib.diagnose import evidence as evidence_module
from glm5lib.diagnose.evidence import load_evidence
from glm5lib.report import conclude
from glm5lib.tune.phases import EvidenceCache

# SGLang's start-up line: the arguments the engine ran with
LOG = ("[2026-12-04 17:44:48] server_args=ServerArgs(model_path='/m', tp_size=1, max_running_requests=128, "
       "attention_backend='triton', chunked_prefill_size=8192)\n"
       "[2026-12-04 17:47:01] Decode batch, #running-req: 100, #token: 270, token usage: 0.01, cuda graph: True, "
       "gen throughput (token/s): 2.96, #queue-req: 3\n")


def _phase(run, name="baseline", config=None, log=LOG):
    folder = rundir.phase_dir(run, name)
    pd.DataFrame({"concurrency": [1, 256], "completed": [10, 100], "failed": [0, 0],
                  "output_throughput": [40.0, 900.0], "median_ttft_ms": [5.0, 50.0],
                  "p99_ttft_ms": [9.0, 90.0], "median_tpot_ms": [60.0, 60.0]}).to_csv(folder / rundir.SWEEP, index=False)
    if config is not None:
        (folder / rundir.CONFIG).write_text(json.dumps(config))
    if log is not None:
        (folder / rundir.SERVER_LOG).write_text(log)
    return folder


def test_the_log_wins_over_the_configuration_in_the_evidence_and_in_the_report(tmp_path):
    run = tmp_path / "run"
    # asked for 64; the engine's own log says it ran with 128
    _phase(run, config={"max_running_requests": 64, "attention_backend": "triton"})
    ev = load_evidence(run, phase="baseline")
    assert ev.server_args["max_running_requests"] == 128
    phase = report.summarize(run)["phases"]["baseline"]
    assert phase["config"]["max_running_requests"] == 128
    assert phase["running_cap"] == 128
    assert "max_running_requests = 128" in report.write_report(run).read_text()


def test_a_field_only_the_configuration_has_comes_from_it(tmp_path):
    run = tmp_path / "run"
    _phase(run, config={"max_running_requests": 64, "disable_radix_cache": True})
    assert report.summarize(run)["phases"]["baseline"]["config"]["disable_radix_cache"] is True


def test_the_precedence_is_stated_in_the_evidence_module():
    text = evidence_module.__doc__
    assert "server log's" in text and "arguments win over the configuration's" in text
    assert "denser of the server log's" in text


def _counting_loads(monkeypatch) -> list[str]:
    """The phase of every load_evidence call from now on, however a module reached the function
    (each load finds its phase folder once)."""
    loads: list[str] = []
    real = evidence_module.find_phase

    def counting(run_dir, phase):
        found = real(run_dir, phase)
        loads.append(found.name)
        return found

    monkeypatch.setattr(evidence_module, "find_phase", counting)
    return loads


def test_the_report_reads_each_phase_once(tmp_path, monkeypatch):
    run = tmp_path / "run"
    _phase(run, "baseline", config={"max_running_requests": 64})
    _phase(run, "fix", config={"max_running_requests": 1024})
    loads = _counting_loads(monkeypatch)
    opened = []
    real_read_csv = pd.read_csv

    def reading(path, *args, **kwargs):
        opened.append(str(path))
        return real_read_csv(path, *args, **kwargs)

    monkeypatch.setattr(pd, "read_csv", reading)
    report.summarize(run)
    assert sorted(loads) == ["baseline", "fix"]
    # each phase's sweep read once (the fix's evidence also reads the baseline's, as its before_sweep)
    assert sum(p.endswith(f"baseline/{rundir.SWEEP}") for p in opened) == 2
    assert sum(p.endswith(f"fix/{rundir.SWEEP}") for p in opened) == 1


#: the files a phase's evidence is read from
MEASUREMENTS = {rundir.SWEEP, rundir.SERVER_LOG, rundir.CONFIG, rundir.COMMAND, rundir.REQUESTS, rundir.GPU,
                rundir.METRICS, rundir.SERVER_INFO, rundir.STEP_PROFILE}


@contextlib.contextmanager
def _opened(monkeypatch):
    """Every opening of a phase's measurement file inside the block, by ``phase/file``."""
    seen: collections.Counter = collections.Counter()
    real = io.open

    def opening(file, *args, **kwargs):
        if isinstance(file, (str, os.PathLike)) and Path(file).name in MEASUREMENTS:
            path = Path(os.path.normpath(file))
            seen[f"{path.parent.name}/{path.name}"] += 1
        return real(file, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(builtins, "open", opening)
        m.setattr(io, "open", opening)
        yield seen


def _measured_run(tmp_path):
    """Two phases with what every part of the report reads: a sweep that judged its levels (the
    measurement-quality section), a log, a configuration, GPU samples; no findings.csv (the scheduler
    section runs the rules on the evidence)."""
    run = tmp_path / "run"
    for name, cap in (("baseline", 64), ("fix", 1024)):
        folder = _phase(run, name, config={"max_running_requests": cap})
        sweep = pd.read_csv(folder / rundir.SWEEP)
        sweep["steady"], sweep["steady_note"] = [True, False], ["steady 9 s of 10", "not steady: still filling"]
        sweep["start_time"], sweep["end_time"] = [0.0, 100.0], [99.0, 200.0]
        sweep.to_csv(folder / rundir.SWEEP, index=False)
        pd.DataFrame({"time": [10.0, 110.0], "gpu": [0, 0], "power_w": [300.0, 600.0]}).to_csv(
            folder / rundir.GPU, index=False)
    return run


def test_writing_the_whole_report_reads_each_phase_once(tmp_path, monkeypatch):
    """summary.json, report.md and report.html, with every section other modules contribute: each
    phase's evidence is loaded once, and its measurement files are opened no more often than that
    one load opens them."""
    run = _measured_run(tmp_path)
    with _opened(monkeypatch) as once:
        for name in ("baseline", "fix"):
            load_evidence(run, phase=name, partial=True)
    loads = _counting_loads(monkeypatch)
    with _opened(monkeypatch) as opened:
        text = report.write_report(run).read_text()
    assert sorted(loads) == ["baseline", "fix"]
    assert opened == once and opened[f"baseline/{rundir.SWEEP}"] == 2  # the fix's before_sweep too
    assert "## Measurement quality" in text and "## Scheduler limits" in text
    assert "A section not written" not in text


def test_a_section_given_the_reports_reading_takes_the_phases_from_it(tmp_path, monkeypatch):
    from glm5lib.diagnose import section
    from glm5lib.report import quality, sections

    run = _measured_run(tmp_path)
    phases = conclude.reading()
    for name in ("baseline", "fix"):
        phases.load(run / name)
    loads = _counting_loads(monkeypatch)
    monkeypatch.setattr(sections, "PROVIDERS", [quality.section_markdown, section.section_markdown,
                                                lambda run_dir: "## Alone\n"])
    out = sections.extra_sections(run, phases)
    assert loads == [] and phases.loads == 2
    assert [text.splitlines()[0] for text in out] == ["## Measurement quality", "## Scheduler limits", "## Alone"]
    # alone, each section reads the run folder itself, as before
    assert quality.section_markdown(run) == out[0] and section.section_markdown(run) == out[1]


def test_a_half_written_table_costs_the_report_only_that_table(tmp_path):
    run = tmp_path / "run"
    folder = _phase(run, config={"max_running_requests": 64})
    (folder / rundir.GPU).write_text('time,gpu,power_w\n1,0,"unterminated\n')
    (folder / rundir.REQUESTS).write_text("{not json\n")
    ev = load_evidence(run, phase="baseline", partial=True)
    assert any(rundir.REQUESTS in s for s in ev.skipped)
    phase = report.summarize(run)["phases"]["baseline"]
    assert phase["peak"]["output_throughput"] == 900.0
    assert phase["running_cap"] == 128


def test_the_timeline_is_the_log_unless_the_gauges_saw_a_larger_batch(tmp_path):
    run = tmp_path / "run"
    folder = _phase(run, config={"max_running_requests": 64})
    sweep = pd.read_csv(folder / rundir.SWEEP)
    sweep["start_time"], sweep["end_time"] = [0.0, 100.0], [99.0, 200.0]
    sweep.to_csv(folder / rundir.SWEEP, index=False)
    rows = [{"time": t, "metric": m, "labels": "", "value": v} for t in (150.0, 151.0)
            for m, v in (("sglang:num_running_reqs", 120.0), ("sglang:num_queue_reqs", 5.0))]
    pd.DataFrame(rows).to_csv(folder / rundir.METRICS, index=False)
    ev = load_evidence(run, phase="baseline")
    assert ev.gauge_peak() == 120.0
    assert ev.timeline() is ev.gauges  # 120 running, where the log's one line shows 100
    rows = [{**r, "value": 50.0} if r["metric"] == "sglang:num_running_reqs" else r for r in rows]
    pd.DataFrame(rows).to_csv(folder / rundir.METRICS, index=False)
    ev = load_evidence(run, phase="baseline")
    assert ev.timeline() is ev.log_lines()


def test_the_cache_reads_a_phase_again_only_when_a_file_of_it_changed(tmp_path):
    run = tmp_path / "run"
    folder = _phase(run, config={"max_running_requests": 64})
    cache = EvidenceCache()
    first = cache.load(folder)
    assert cache.load(folder) is first and cache.loads == 1
    (folder / rundir.SERVER_LOG).write_text(LOG.replace("max_running_requests=128", "max_running_requests=1024"))
    again = cache.load(folder)
    assert again is not first and cache.loads == 2
    assert again.server_args["max_running_requests"] == 1024




def test_the_cache_holds_a_phase_it_cannot_read_but_tries_a_file_it_could_not_open_again(tmp_path, monkeypatch):
    folder = _phase(tmp_path / "run", config={"max_running_requests": 64})
    real, failures = evidence_module.load_evidence, []

    def failing(*args, **kwargs):
        if failures:
            raise failures.pop(0)
        return real(*args, **kwargs)

    monkeypatch.setattr(evidence_module, "load_evidence", failing)
    cache = EvidenceCache()
    failures.append(ValueError("sweep.csv: bad row"))
    for _ in range(3):  # a phase that cannot be read: read once, the same error each time after
        with pytest.raises(ValueError, match="bad row"):
            cache.load(folder)
    assert cache.loads == 1
    cache = EvidenceCache()
    failures.append(PermissionError("sweep.csv"))  # not readable yet: tried again on the next call
    with pytest.raises(PermissionError):
        cache.load(folder)
    assert cache.load(folder).server_args["max_running_requests"] == 128 and cache.loads == 2  # the log's

def test_the_markdown_takes_the_summarys_word_on_whether_the_log_missed_the_peak():
    from glm5lib.report.markdown import _decode_line

    phase = {"running_cap": 1024, "decode": {"decode_lines": 12, "max_running_req": 256, "max_queue_req": 0},
             "gauges": {"samples": 20, "max_running_req": 1024, "max_queue_req": 150, "reached_cap": True,
                        "log_missed_peak": False}}
    assert not any(line.startswith("Server gauges") for line in _decode_line(phase))
    phase["gauges"]["log_missed_peak"] = True
    assert any("missed the peak" in line for line in _decode_line(phase))
    del phase["gauges"]["log_missed_peak"]  # a summary written before the key: read by its peaks
    assert any("missed the peak" in line for line in _decode_line(phase))


def test_the_configuration_wins_over_the_commands_flags(tmp_path):
    run = tmp_path / "run"
    folder = _phase(run, config={"max_running_requests": 64}, log=None)
    (folder / rundir.COMMAND).write_text(json.dumps(
        {"backend": "command", "engine": "sglang", "argv": ["x", "--max-running-requests", "32"]}))
    assert load_evidence(run, phase="baseline").limits().running_cap == 64
    (folder / rundir.CONFIG).unlink()
    assert load_evidence(run, phase="baseline").limits().running_cap == 32


def test_a_commands_flag_is_read_as_its_field_where_no_other_source_gives_it(tmp_path):
    run = tmp_path / "run"
    folder = _phase(run, config={"max_running_requests": 64}, log=None)
    (folder / rundir.COMMAND).write_text(json.dumps(
        {"backend": "command", "engine": "sglang", "argv": ["x", "--tp-size", "2", "--max-running-requests", "32"]}))
    ev = load_evidence(run, phase="baseline")
    assert ev.arg("tp_size") == 2
    assert ev.arg("max_running_requests") == 64  # the configuration's, over the command's flag
    assert ev.server_args["--tp-size"] == "2"  # the command's own spelling is kept


def test_a_command_phases_configuration_is_read_as_its_engines(tmp_path):
    """A vLLM phase launched from a command, with no log to say which engine ran: config.json is
    read as vLLM's configuration (the engine the file names, else the one the command names), not
    as the default engine's and skipped."""
    run = tmp_path / "run"
    folder = _phase(run, log=None)
    engines.load_config("vllm-capped").save(folder / rundir.CONFIG)
    (folder / rundir.COMMAND).write_text(json.dumps(
        {"backend": "command", "engine": "vllm", "argv": ["x", "--max-num-seqs", "4"]}))
    for names_its_engine in (True, False):
        if not names_its_engine:
            raw = json.loads((folder / rundir.CONFIG).read_text())
            (folder / rundir.CONFIG).write_text(json.dumps({k: v for k, v in raw.items() if k != "engine"}))
        ev = load_evidence(run, phase="baseline")
        assert ev.engine == "vllm"
        assert type(ev.config) is engines.get("vllm").config_type, ev.skipped
        assert not any(s.startswith(rundir.CONFIG) for s in ev.skipped)


def test_the_note_on_missing_gauges_names_the_engines_own_metrics_switch(tmp_path):
    run = tmp_path / "run"
    _phase(run)
    note = report.summarize(run)["phases"]["baseline"]["metrics"]["note"]
    flag = engines.get(engines.DEFAULT_ENGINE).capabilities.metrics_flag
    assert flag and f"without {flag}" in note
    quiet = next(n for n in engines.names() if not engines.get(n).capabilities.metrics_flag)
    folder = run / "baseline"
    (folder / rundir.SERVER_LOG).unlink()
    (folder / rundir.COMMAND).write_text(json.dumps({"backend": "command", "engine": quiet, "argv": ["x"]}))
    note = report.summarize(run)["phases"]["baseline"]["metrics"]["note"]
    assert flag not in note and "/metrics was not reachable" in note
