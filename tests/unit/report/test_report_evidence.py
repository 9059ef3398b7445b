"""The report reads each phase once, as its Evidence, under the evidence's one precedence."""

from __future__ import annotations

import json

import pandas as pd

from glm5lib import report, rundir
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


def test_the_report_reads_each_phase_once(tmp_path, monkeypatch):
    run = tmp_path / "run"
    _phase(run, "baseline", config={"max_running_requests": 64})
    _phase(run, "fix", config={"max_running_requests": 1024})
    loads = []
    real = conclude.load_evidence

    def counting(*args, **kwargs):
        loads.append(kwargs.get("phase"))
        return real(*args, **kwargs)

    monkeypatch.setattr(conclude, "load_evidence", counting)
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
