from __future__ import annotations

import json

import pandas as pd
import pytest

from glm5lib import report, rundir
from glm5lib.errors import ConfigError


def _sweep(throughputs: dict[int, float]) -> pd.DataFrame:
    levels = list(throughputs)
    return pd.DataFrame(
        {
            "concurrency": levels,
            "completed": [10 * c for c in levels],
            "failed": [0] * len(levels),
            "output_throughput": list(throughputs.values()),
            "median_ttft_ms": [5.0 * c for c in levels],
            "p99_ttft_ms": [9.0 * c for c in levels],
            "median_tpot_ms": [60.0] * len(levels),
        }
    )


def _phase(run, name, throughputs, config, server_info=None):
    folder = rundir.phase_dir(run, name)
    _sweep(throughputs).to_csv(folder / rundir.SWEEP, index=False)
    (folder / rundir.CONFIG).write_text(json.dumps(config))
    if server_info is not None:
        (folder / report.SERVER_INFO).write_text(json.dumps(server_info))
    return folder


STANDIN_INFO = {"standin": {"profile": "glm5-nvfp4-8x-rtxpro6000", "note": "model"}, "version": "glm5lib-standin-0"}


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "run-1"
    run.mkdir()
    _phase(run, "baseline", {1: 40.0, 256: 880.0, 1024: 890.0},
           {"max_running_requests": 64, "attention_backend": "flashinfer"}, STANDIN_INFO)
    fix = _phase(run, "fix", {1: 35.0, 256: 1950.0, 1024: 3740.0},
                 {"max_running_requests": 1024, "attention_backend": "flashinfer", "disable_cuda_graph": True},
                 STANDIN_INFO)
    (run / report.HYPOTHESIS).write_text(json.dumps({
        "field": "max_running_requests", "current": 64, "reference": 2048,
        "rationale": "caps the decode batch", "test": "relaunch with 1024",
    }))
    pd.DataFrame([{"finding": "GPU under-used at the peak", "evidence": "250 W of 600 W",
                   "suggestion": "profile kernels", "confidence": "high", "rule": "gpu_underused"}]
                 ).to_csv(fix / rundir.FINDINGS, index=False)
    (fix / "patch.json").write_text(json.dumps({"name": "autotune", "package": "sglang", "status": "modelled",
                                                "files": ["sglang/x.py"]}))
    return run


def test_report_sets_the_baselines_prediction_beside_the_fix_measurement(run):
    pd.DataFrame([{"finding": "cap", "evidence": "pinned at 64", "suggestion": "raise it", "confidence": 0.9,
                   "rule": "concurrency_cap", "prediction": "raising the cap to 1024: ...",
                   "predicted_concurrency": 1024, "predicted_throughput": 2600.0, "predicted_low": 2200.0,
                   "predicted_high": 3000.0, "measured_throughput": 890.0},
                  {"finding": "gpu", "evidence": "", "suggestion": "", "confidence": 0.5, "rule": "gpu_underused"}]
                 ).to_csv(run / "baseline" / rundir.FINDINGS, index=False)
    summary = report.summarize(run)
    assert summary["prediction"] == {
        "source": "findings", "rule": "concurrency_cap", "concurrency": 1024, "predicted": 2600.0, "low": 2200.0,
        "high": 3000.0, "given": True, "wide": False, "before": 890.0, "after": 3740.0, "within": False,
        "text": "raising the cap to 1024: ...",
    }
    text = report.write_report(run).read_text()
    assert ("the baseline's capacity model (concurrency_cap) gave 2,600 tok/s (2,200-3,000) at 1,024 concurrent "
            "requests; the fix measured 3,740 tok/s there, above the predicted band.") in text
    assert "which the model does not see" in text  # the fix changed the cap and CUDA graphs


def test_the_forecast_written_before_the_launch_outranks_the_findings_and_a_wide_band_is_no_forecast(run):
    """The findings' forecast was made before any step profile; the fix's prediction.csv, written
    before its launch, is the one the workbook stands behind. A band wider than +/-30% is reported as
    no forecast, never as a band the measurement fell within."""
    pd.DataFrame([{"finding": "cap", "evidence": "pinned at 64", "suggestion": "raise it", "confidence": 0.9,
                   "rule": "concurrency_cap", "prediction": "...", "predicted_concurrency": 1024,
                   "predicted_throughput": 2600.0, "predicted_low": 700.0, "predicted_high": 9000.0,
                   "measured_throughput": 890.0}]).to_csv(run / "baseline" / rundir.FINDINGS, index=False)
    summary = report.summarize(run)
    assert summary["prediction"]["source"] == "findings" and summary["prediction"]["given"] is False
    text = report.write_report(run).read_text()
    assert ("the baseline's capacity model (concurrency_cap) gave no forecast at 1,024 concurrent requests: the "
            "evidence allowed 700-9,000 tok/s, wider than +/-30%; the fix measured 3,740 tok/s there.") in text
    assert "within the predicted band" not in text
    # the model's own verdict, where the findings record it, outranks the band's width (a narrow band
    # with a change the model has no term for is no forecast either)
    findings = pd.read_csv(run / "baseline" / rundir.FINDINGS).assign(
        predicted_low=2400.0, predicted_high=2800.0, predicted_given=False)
    findings.to_csv(run / "baseline" / rundir.FINDINGS, index=False)
    assert report.summarize(run)["prediction"]["given"] is False
    assert ("gave no forecast at 1,024 concurrent requests: the evidence allowed 2,400-2,800 tok/s, but the model "
            "did not stand behind it") in report.write_report(run).read_text()

    pd.DataFrame([{"concurrency": 256, "predicted": 2000.0, "low": 1800.0, "high": 2200.0, "given": True},
                  {"concurrency": 1024, "predicted": 3500.0, "low": 3000.0, "high": 4000.0, "given": True}]
                 ).to_csv(run / "fix" / rundir.PREDICTION_CSV, index=False)
    summary = report.summarize(run)
    assert {k: summary["prediction"][k] for k in ("source", "concurrency", "predicted", "given", "within")} == {
        "source": "forecast", "concurrency": 1024, "predicted": 3500.0, "given": True, "within": True}
    text = report.write_report(run).read_text()
    assert ("the forecast written before the fix's launch (the baseline's performance model) gave 3,500 tok/s "
            "(3,000-4,000) at 1,024 concurrent requests; the fix measured 3,740 tok/s there, within the predicted "
            "band.") in text


def test_a_vllm_phase_names_its_cap_max_num_seqs(tmp_path):
    run = tmp_path / "run-vllm"
    run.mkdir()
    _phase(run, "baseline", {1: 300.0, 64: 430.0}, {"engine": "vllm", "max_num_seqs": 4})
    _phase(run, "fix", {1: 250.0, 64: 1500.0}, {"engine": "vllm", "max_num_seqs": 256})
    summary = report.summarize(run)
    assert summary["phases"]["baseline"]["cap_name"] == "max_num_seqs"
    assert summary["fix_changes"] == {"max_num_seqs": [4, 256]}
    text = report.write_report(run).read_text()
    assert "max_num_seqs" in text and "max_running_requests" not in text


def test_no_prediction_without_predicted_columns(run):
    assert "prediction" not in report.summarize(run)
    assert "Predicted beside measured" not in report.write_report(run).read_text()


def test_summary_holds_the_numbers_of_each_phase(run):
    summary = report.summarize(run)
    assert list(summary["phases"]) == ["baseline", "fix"]
    assert summary["throughput"]["baseline"]["256"] == 880.0
    assert summary["throughput"]["fix"]["1024"] == 3740.0
    assert summary["phases"]["fix"]["peak"] == {"concurrency": 1024, "output_throughput": 3740.0}
    assert summary["phases"]["baseline"]["running_cap"] == 64
    gains = {r["concurrency"]: r["gain"] for r in summary["comparison"]}
    assert gains[1024] == pytest.approx(3740 / 890)
    assert summary["fix_changes"]["max_running_requests"] == [64, 1024]
    assert summary["leading_cause"]["field"] == "max_running_requests"
    assert summary["next_bottleneck"]["findings"][0]["finding"] == "GPU under-used at the peak"
    assert summary["standin"]["used"] is True
    assert summary["standin"]["profiles"] == {"baseline": "glm5-nvfp4-8x-rtxpro6000",
                                              "fix": "glm5-nvfp4-8x-rtxpro6000"}


def test_report_says_plainly_it_came_from_the_stand_in_and_tells_the_story(run):
    path = report.write_report(run)
    assert path == run / rundir.REPORT
    text = path.read_text()
    first_para = text.split("\n\n")[1]
    assert "stand-in server, not from SGLang on GPUs" in first_para
    assert "'glm5-nvfp4-8x-rtxpro6000'" in first_para
    assert "880 tok/s at 256 concurrent requests" in text
    assert "**Leading cause**: `max_running_requests` (baseline 64, reference 2,048)" in text
    assert "peak 3,740 tok/s at 1,024" in text
    assert "modelled by the stand-in (not applied)" in text
    assert "| 1,024 | 890 | 3,740 | 4.20 |" in text
    saved = json.loads((run / rundir.SUMMARY).read_text())
    assert saved["throughput"]["fix"]["256"] == 1950.0
    assert set(saved["figures"]) >= {"throughput", "latency"}
    for rel in saved["figures"].values():
        assert (run / rel).read_bytes()[:4] == b"\x89PNG"
        assert f"]({rel})" in text


def test_real_server_runs_are_not_called_stand_in(tmp_path):
    _phase(tmp_path, "baseline", {8: 100.0}, {"max_running_requests": 64},
           {"version": "0.5.4", "max_total_num_tokens": 1000})
    text = report.write_report(tmp_path).read_text()
    assert "stand-in server, not from SGLang" not in text
    assert "Measured on a real server" in text
    assert report.summarize(tmp_path)["standin"]["used"] is False


def test_environment_flagged_stand_in_counts_too(tmp_path):
    (tmp_path / rundir.ENVIRONMENT).write_text(json.dumps(
        {"source": "sim", "standin": True, "gpus": [{"name": "RTX PRO 6000", "power_limit_w": 600}],
         "warnings": ["P2P unavailable between GPU 0 and GPU 1"]}))
    text = report.write_report(tmp_path).read_text()
    assert "stand-in server, not from SGLang on GPUs" in text
    assert "Warning: P2P unavailable" in text
    assert "Nothing measured yet" in text


def test_a_failed_run_that_measured_nothing_names_no_server(tmp_path):
    (tmp_path / report.NOTEBOOKS_STATUS).write_text(json.dumps(
        [{"name": "02-measure-baseline.ipynb", "status": "failed", "error": "ConfigError: OUTPUT_LEN -5"}]))
    text = report.write_report(tmp_path).read_text()
    assert "Measured on a real server" not in text and "Nothing measured in this run folder yet" in text


def test_the_next_bottleneck_is_the_fixs_own_not_a_later_phases(run):
    """A phase measured after the fix (a watched server still at the old cap, a tuner's candidate)
    does not stand in for what binds once the fix is in."""
    watch = _phase(run, "watch", {64: 870.0}, {"max_running_requests": 64}, STANDIN_INFO)
    pd.DataFrame([{"finding": "concurrency cap", "evidence": "64 running", "suggestion": "raise it",
                   "confidence": "high", "rule": "concurrency_cap"}]).to_csv(watch / rundir.FINDINGS, index=False)
    summary = report.summarize(run)
    assert summary["next_bottleneck"]["phase"] == "fix"
    assert [f["rule"] for f in summary["next_bottleneck"]["findings"]] == ["gpu_underused"]
    text = report.write_report(run).read_text()
    assert "- **Next**: GPU under-used at the peak (fix phase)." in text
    assert "What the fix phase's own levels show" in text


def test_a_forecast_that_missed_names_only_what_it_was_not_made_for(run):
    """The fix changed the cap and CUDA graphs. A forecast written for both that missed blames no
    change; one written for the cap alone names graphs; one with no term for a change names it."""
    def write(changes, unseen="", high=3400.0):
        pd.DataFrame([{"concurrency": 1024, "predicted": 3000.0, "low": 2600.0, "high": high, "given": True,
                       "changes": repr(changes), "unseen_changes": unseen}]
                     ).to_csv(run / "fix" / rundir.PREDICTION_CSV, index=False)
        return report.summarize(run), report.write_report(run).read_text()

    both = {"max_running_requests": 1024, "disable_cuda_graph": True}
    summary, text = write(both)
    assert summary["prediction"]["changes"] == sorted(both) and summary["prediction"]["text"] is None
    assert "above the predicted band." in text
    assert "changed more than" not in text and "no term for" not in text and "does not see" not in text
    _, text = write({"max_running_requests": 1024})
    assert "The fix changed more than the forecast was made for (`disable_cuda_graph`)." in text
    _, text = write(both, unseen="disable_cuda_graph=True: no eager step in the evidence; the prior")
    assert "The forecast has no term for `disable_cuda_graph`." in text and "changed more than" not in text
    _, text = write({"max_running_requests": 1024}, high=4000.0)  # within: nothing to explain
    assert "within the predicted band." in text and "changed more than" not in text


def test_a_peak_read_over_a_short_window_says_so_in_the_summary_and_the_quality_table(run):
    """A level that spent most of its time admitting its load (1,024 prompts prefilled for 11 of 15 s)
    is read over what is left: the headline and the level's quality row say how little that was."""
    sweep = pd.read_csv(run / "fix" / rundir.SWEEP).assign(
        start_time=100.0, end_time=115.3, window_start=[100.1, 102.7, 110.9],
        window_end=[114.9, 114.9, 115.0], steady=True, completed=[1, 0, 0])
    sweep.to_csv(run / "fix" / rundir.SWEEP, index=False)
    summary = report.summarize(run)
    assert summary["phases"]["fix"]["peak"] == {"concurrency": 1024, "output_throughput": 3740.0, "window_s": 4.1,
                                                "level_s": 15.3, "ramp_s": 10.9, "completed": 0}
    text = report.write_report(run).read_text()
    assert ("peak 3,740 tok/s at 1,024 concurrent requests (max_running_requests = 1,024); read over 4.1 s of its "
            "15.3 s level, the first 10.9 s admitting the load; no request finished in it") in text
    assert "| steady, over the last 4.1 s of 15.3 (the rest admitted the load) |" in text
    assert "| steady, over the last 12.2 s" not in text  # 256: most of its level, no caveat
    assert "read over" not in text.split("**Baseline**")[1].split("\n")[0]  # no window recorded: none claimed
    pd.DataFrame([{"concurrency": 1024, "predicted": 3000.0, "low": 2600.0, "high": 3400.0, "given": True,
                   "changes": repr({"max_running_requests": 1024, "disable_cuda_graph": True})}]
                 ).to_csv(run / "fix" / rundir.PREDICTION_CSV, index=False)
    text = report.write_report(run).read_text()
    assert ("above the predicted band. That level was read over 4.1 s of its 15.3 s, so its figure is not surely "
            "the steady rate the forecast is of.") in text


def test_a_peak_read_over_less_than_one_cycle_of_its_load_says_it_reads_high(run):
    """A closed loop cut before any request that streamed at the window's start was replaced: its
    window holds decode without the next prefill, which the headline, the quality row and the
    forecast line say (its window is most of the level, so no short-window caveat)."""
    from glm5lib.loadgen import SUB_CYCLE

    sweep = pd.read_csv(run / "fix" / rundir.SWEEP).assign(
        start_time=100.0, end_time=115.3, window_start=[100.1, 101.0, 102.0], window_end=[114.9, 114.9, 115.0],
        steady=True, completed=[1, 0, 0],
        window_note=["steady", "steady", f"steady 13.0 s of 15.3 (deadline, 1024 in flight cancelled; {SUB_CYCLE})"])
    sweep.to_csv(run / "fix" / rundir.SWEEP, index=False)
    summary = report.summarize(run)
    assert summary["phases"]["fix"]["peak"]["sub_cycle"] == 1.0
    pd.DataFrame([{"concurrency": 1024, "predicted": 3000.0, "low": 2600.0, "high": 3400.0, "given": True,
                   "changes": repr({"max_running_requests": 1024, "disable_cuda_graph": True})}]
                 ).to_csv(run / "fix" / rundir.PREDICTION_CSV, index=False)
    text = report.write_report(run).read_text()
    headline = text.split("peak 3,740 tok/s at 1,024 concurrent requests")[1].split("\n")[0]
    assert "; its window held less than one cycle of the load (the decode" in headline and "read over" not in headline
    assert headline.endswith("; a longer level would read the steady rate more surely.")
    assert "| steady, **less than one cycle** of the load (decode without the prefill that follows it" in text
    assert "That level's window held less than one cycle of its load" in text and "was read over" not in text
    assert text.count("less than one cycle") == 3  # the 256 level (a whole cycle) carries none


def test_leading_cause_falls_back_to_the_top_ranked_diff(tmp_path):
    pd.DataFrame([
        {"field": "attention_backend", "current": "flashinfer", "reference": "triton", "impact": "medium", "rank": 2},
        {"field": "max_running_requests", "current": 64, "reference": 2048, "impact": "high", "rank": 1},
    ]).to_csv(tmp_path / report.DIFF, index=False)
    assert report.summarize(tmp_path)["leading_cause"]["field"] == "max_running_requests"


def test_failed_notebooks_are_reported_and_missing_folder_is_an_error(tmp_path):
    (tmp_path / report.NOTEBOOKS_STATUS).write_text(json.dumps(
        [{"name": "02-measure-baseline.ipynb", "status": "failed", "error": "ServerLaunchError: oom"}]))
    text = report.write_report(tmp_path).read_text()
    assert "**Incomplete run**: 02-measure-baseline.ipynb failed: ServerLaunchError: oom" in text
    with pytest.raises(ConfigError, match="does not exist"):
        report.summarize(tmp_path / "nope")


DIFF = pd.DataFrame([
    {"field": "disable_cuda_graph", "current": False, "reference": True, "impact": "high", "rank": 1,
     "rationale": "graphs", "flag": "--disable-cuda-graph"},
    {"field": "max_running_requests", "current": 64, "reference": 2048, "impact": "high", "rank": 2,
     "rationale": "caps the batch", "flag": "--max-running-requests"},
])


def test_leading_hypothesis_is_the_best_ranked_difference_the_evidence_names():
    findings = pd.DataFrame([
        {"finding": "concurrency cap: at most 64 requests run at once", "evidence": "#running-req stayed at 64",
         "suggestion": "raise --max-running-requests from 64 to 1024", "confidence": 0.9},
    ])
    h = report.leading_hypothesis(DIFF, findings)
    assert h["field"] == "max_running_requests" and h["supported"] is True
    assert h["reference"] == 2048
    assert h["test"] == "raise --max-running-requests from 64 to 1024"


def test_the_hypothesis_tests_the_change_its_finding_forecast_not_the_references_value():
    """The cap's finding proposes 1,024 with the graph ceiling raised with it and forecasts that; the
    hypothesis carries that change, and notebook 3 forecasts it (not the reference's 2,048 alone)."""
    from glm5lib.diagnose import prediction

    findings = pd.DataFrame([
        {"finding": "concurrency cap", "evidence": "", "suggestion": "raise --max-running-requests from 64 to 1024",
         "confidence": 0.9, "rule": "concurrency_cap", "covers": "running_cap",
         "remedy": json.dumps({"graph_max_batch": 1024, "running_cap": 1024})},
    ])
    h = report.leading_hypothesis(DIFF, findings)
    assert h["field"] == "max_running_requests" and h["changes"] == {"graph_max_batch": 1024, "running_cap": 1024}
    assert prediction.hypothesis_changes(h) == {"graph_max_batch": 1024, "running_cap": 1024}
    # a finding whose forecast names no change (an older findings.csv): the reference's value
    h = report.leading_hypothesis(DIFF, findings.drop(columns="remedy"))
    assert "changes" not in h and prediction.hypothesis_changes(h) == {"max_running_requests": 2048}


def test_a_cap_finding_records_the_change_its_forecast_is_of(tmp_path):
    """diagnose() writes the remedy beside the forecast (findings.csv's ``remedy``), in the engine's
    own field names (what notebook 04's FIX_CHANGES takes as it is): the H100 example's cap of 16
    raised to the highest offered load."""
    from pathlib import Path

    from glm5lib import diagnose as dg

    examples = Path(__file__).resolve().parents[2] / "data" / "examples"
    findings = dg.diagnose(examples / "h100-sglang-cap16", phase="baseline", write=False)
    top = findings.iloc[0]
    assert top["rule"] == "concurrency_cap"
    assert json.loads(top["remedy"]) == {"max_running_requests": 256}
    assert top["predicted_given"] is True or top["predicted_given"] == True  # noqa: E712 - numpy bool


def test_leading_hypothesis_without_evidence_is_the_top_diff_marked_unsupported():
    h = report.leading_hypothesis(DIFF, pd.DataFrame(columns=["finding", "evidence", "suggestion"]))
    assert h["field"] == "disable_cuda_graph" and h["supported"] is False
    assert "--disable-cuda-graph" in h["test"]
    with pytest.raises(ConfigError, match="nothing differs"):
        report.leading_hypothesis(DIFF.iloc[0:0])


def test_verdict_quotes_the_gain_per_level(run):
    text = report.verdict(report.summarize(run))
    assert text.startswith("The fix raised throughput by 10% or more at 2 of 3 levels, most (4.20x) at 1,024")
    assert "256: 880 -> 1,950 tok/s (2.22x)" in text
    assert report.verdict({}).startswith("No before/after comparison")


def test_a_phase_launched_from_an_engine_command_shows_that_command(tmp_path):
    run = tmp_path / "engine-run"
    run.mkdir()
    capped = ["transformers", "serve", "m", "--continuous-batching", "--cb-max-batch-tokens", "64"]
    for name, argv, tput in (("baseline", capped, 181.0), ("fix", capped[:4], 929.0)):
        folder = _phase(run, name, {1: 30.0, 128: tput}, {})
        (folder / "command.json").write_text(json.dumps({"backend": "command", "argv": argv}))
    text = report.write_report(run).read_text()
    assert "(command: `transformers serve m --continuous-batching --cb-max-batch-tokens 64`)" in text
    assert "(command: `transformers serve m --continuous-batching`)" in text
    assert "max_running_requests = n/a" not in text


def test_levels_cut_at_the_deadline_are_named_and_keep_their_latency(tmp_path):
    run = tmp_path / "run-cut"
    run.mkdir()
    folder = rundir.phase_dir(run, "baseline")
    frame = _sweep({1: 40.0, 256: 880.0})
    frame["completed"] = [0, 0]
    frame["cancelled"] = [1, 256]
    frame.to_csv(folder / rundir.SWEEP, index=False)
    summary = report.summarize(run)
    phase = summary["phases"]["baseline"]
    assert phase["cut_at_deadline"] == 257
    assert [lv["cancelled"] for lv in phase["levels"]] == [1, 256]
    text = report.render_markdown(summary)
    assert "| concurrency | completed | cut at deadline | failed |" in text
    assert "Requests cut at deadline: 257" in text
    assert "| 256 | 0 | 256 | 0 | 880 | 1,280 | 2,304 | 60.0 |" in text
    assert "n/a" not in text.split("## Phase")[1]


def test_a_phase_without_metrics_gets_a_note_and_one_with_metrics_none(tmp_path):
    run = tmp_path / "run-metrics"
    run.mkdir()
    _phase(run, "baseline", {1: 40.0}, {"max_running_requests": 64})
    fix = _phase(run, "fix", {1: 40.0}, {"max_running_requests": 1024})
    (fix / rundir.METRICS).write_text("time,name,labels,value\n1.0,sglang:num_running_reqs,{},3\n")
    summary = report.summarize(run)
    assert summary["phases"]["fix"]["metrics"] == {"rows": 1}
    assert "--enable-metrics" in summary["phases"]["baseline"]["metrics"]["note"]
    text = report.render_markdown(summary)
    assert text.count("Note: no /metrics samples") == 1


@pytest.mark.parametrize(
    ("decode", "says", "never"),
    [
        ({"max_running_req": 256, "max_queue_req": 0, "pinned_at_cap_share": 0.0},
         "the cap of 1,024 running requests was never reached", "pinned"),
        ({"max_running_req": 1024, "max_queue_req": 0, "pinned_at_cap_share": 0.0},
         "running reached the cap of 1,024, never with a queue", "pinned"),
        ({"max_running_req": 1024, "max_queue_req": 300, "pinned_at_cap_share": 0.42},
         "running pinned at the cap of 1,024 with a queue on 42% of decode lines", "never"),
    ],
)
def test_the_pinned_at_cap_sentence_only_when_running_was_pinned(decode, says, never):
    summary = {"run_id": "r", "phases": {"fix": {
        "running_cap": 1024, "decode": {"decode_lines": 500, "mean_queue_req": 0.0, **decode}}}}
    text = report.render_markdown(summary)
    line = next(ln for ln in text.splitlines() if ln.startswith("Server log:"))
    assert says in line and never not in line


def test_the_gauges_name_a_peak_the_sparse_decode_lines_missed(tmp_path):
    """A log line every 40 steps can leave a level of long steps with none: the report then says
    what the /metrics gauges, sampled every second, saw (and never that the cap went unreached)."""
    run = tmp_path / "run-gauges"
    run.mkdir()
    fix = _phase(run, "fix", {256: 1950.0, 1024: 3740.0}, {"max_running_requests": 1024})
    sweep = pd.read_csv(fix / rundir.SWEEP)
    sweep["start_time"], sweep["end_time"] = [100.0, 200.0], [150.0, 250.0]
    sweep.to_csv(fix / rundir.SWEEP, index=False)
    rows = ["time,metric,labels,value"]
    for t in range(100, 151, 5):
        rows += [f"{t},sglang:num_running_reqs,{{}},256", f"{t},sglang:num_queue_reqs,{{}},0"]
    for t in range(200, 251, 5):
        rows += [f"{t},sglang:num_running_reqs,{{}},1024", f"{t},sglang:num_queue_reqs,{{}},{t - 100}"]
    rows.append("400,sglang:num_running_reqs,{},2048")  # after the last level: not counted
    (fix / rundir.METRICS).write_text("\n".join(rows) + "\n")
    summary = report.summarize(run)
    gauges = summary["phases"]["fix"]["gauges"]
    assert gauges["max_running_req"] == 1024 and gauges["max_queue_req"] == 150 and gauges["reached_cap"]
    summary["phases"]["fix"]["decode"] = {"decode_lines": 12, "max_running_req": 256, "max_queue_req": 0,
                                          "mean_queue_req": 0.0, "pinned_at_cap_share": 0.0}
    text = report.render_markdown(summary)
    assert "never reached" not in text
    line = next(ln for ln in text.splitlines() if ln.startswith("Server gauges"))
    assert "peaked at 1,024, queued at 150" in line and "reached the cap of 1,024" in line
    assert "missed the peak" in line
    # with no decode line at all, the running/queued figure is drawn from the gauges
    report.write_report(run)
    saved = json.loads((run / rundir.SUMMARY).read_text())
    assert "running-queued" in saved["figures"]
    assert (run / saved["figures"]["running-queued"]).is_file()


def test_environment_tables_use_human_units_and_fill_the_packages_line():
    env = {
        "source": "nvml", "standin": False, "host": "box", "driver_version": "580.95.05", "cuda_version": "13.0",
        "host_info": {"hostname": "box", "os": "Linux", "python": "3.11.7", "cpu_count": 64,
                      "memory_total_bytes": 512 * 1024**3},
        "packages": {"sglang": "0.5.2", "flashinfer": None, "torch": "2.8.0"},
        "gpus": [{"index": 0, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_capability": "12.0",
                  "power_limit_w": 600.0, "pcie_gen_current": 4, "pcie_gen_max": 5, "pcie_width_current": 16,
                  "pcie_width_max": 16, "persistence_mode": True, "mig_mode": False, "sm_clock_max_mhz": 2430,
                  "mem_clock_max_mhz": 14001, "memory_total_bytes": 102641958912}],
    }
    tables = report.environment_tables(env)
    host = tables["host"]["value"]
    assert host["host memory"] == "512.0 GiB" and host["GPUs"] == "1" and host["source"] == "nvml"
    assert host["packages"] == "sglang 0.5.2, torch 2.8.0 (not installed: flashinfer)"
    gpu = tables["gpus"].loc["GPU0"]
    assert gpu["memory (GiB)"] == 95.6 and gpu["power limit (W)"] == 600
    assert gpu["max SM clock (MHz)"] == 2430 and gpu["PCIe gen"] == "4 of 5" and gpu["PCIe width"] == "16"
    assert gpu["persistence"] == "on" and gpu["MIG"] == "off"
    assert tables["packages"]["version"].to_dict() == {"sglang": "0.5.2", "flashinfer": "not installed",
                                                       "torch": "2.8.0"}
    empty = report.environment_tables({"source": "unavailable", "reason": "no NVML", "packages": {"sglang": None}})
    assert empty["gpus"].empty and empty["host"]["value"]["packages"] == "none installed (sglang)"
    assert empty["host"]["value"]["why"] == "no NVML"


def test_the_report_references_a_figure_a_notebook_drew_instead_of_drawing_it_twice(run):
    import os

    from glm5lib import plots

    fig = plots.throughput_vs_concurrency({"baseline": _sweep({1: 40.0}), "fix": _sweep({1: 35.0})})
    drawn = plots.save_figure(fig, run, "fix-throughput")
    report.write_report(run)
    saved = json.loads((run / rundir.SUMMARY).read_text())
    assert saved["figures"]["throughput"] == "figures/fix-throughput.png"
    assert not (run / "figures" / "throughput.png").exists()
    assert (run / "figures" / "latency.png").exists()  # no notebook drew that one
    assert "(figures/fix-throughput.png)" in (run / rundir.REPORT).read_text()
    # a sweep newer than the notebook's figure: the report draws its own
    os.utime(drawn, (1, 1))
    report.write_report(run)
    saved = json.loads((run / rundir.SUMMARY).read_text())
    assert saved["figures"]["throughput"] == "figures/throughput.png"


def test_figures_set_side_by_side_only_phases_of_the_first_phases_workload(run, monkeypatch):
    """A tuner's candidates measured with 128-token prompts and 32-token outputs do not go on the same
    throughput axes as the baseline and the fix (256 and 128)."""
    from glm5lib import plots

    for phase in ("baseline", "fix"):
        pd.read_csv(run / phase / rundir.SWEEP).assign(input_len=256, output_len=128).to_csv(
            run / phase / rundir.SWEEP, index=False)
    tune = _phase(run, "tune-1", {256: 1900.0, 1024: 3750.0}, {"max_running_requests": 512})
    pd.read_csv(tune / rundir.SWEEP).assign(input_len=128, output_len=32).to_csv(tune / rundir.SWEEP, index=False)
    drawn = []
    real = plots.throughput_vs_concurrency
    monkeypatch.setattr(plots, "throughput_vs_concurrency", lambda sweeps, **kw: drawn.append(sorted(sweeps))
                        or real(sweeps, **kw))
    report.write_report(run)
    assert drawn == [["baseline", "fix"]]


# -- report.html, contributed sections, the quoted level, the hypothesis from Finding.covers ------
def _html_numbers(text: str) -> set[str]:
    import re

    return set(re.findall(r"\d[\d,]*\.?\d*", text))


def test_report_html_is_self_contained_and_tells_the_same_story(run):
    import html
    import re

    report.write_report(run)
    md = (run / rundir.REPORT).read_text()
    page = (run / rundir.REPORT_HTML).read_text()
    assert page.startswith("<!DOCTYPE html>") and '<meta name="viewport"' in page
    # no outside resource: every src/href is a data URI or an in-page anchor
    refs = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert refs and all(r.startswith(("data:", "#")) for r in refs), refs
    assert "http://" not in page and "https://" not in page
    # every figure of the run embedded, none linked
    figures = json.loads((run / rundir.SUMMARY).read_text())["figures"]
    assert len(figures) >= 2
    assert page.count('<img src="data:image/png;base64,') == len(figures)
    for rel in figures.values():
        assert rel not in page
    # the same numbers: every number of report.md (but the footer's time) is in the page's text
    visible = html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)>.*?</\1>", "", page, flags=re.S)))
    story = md.split("\n---\n")[0]
    assert _html_numbers(story) <= _html_numbers(visible)
    assert "880 tok/s at 256 concurrent requests" in visible
    # the stand-in banner, drawn as one; tables sortable by an inline script; printable
    assert '<blockquote class="banner" role="note">' in page
    assert page.count('<div class="table"><table>') == len(re.findall(r"^\| ---", md, flags=re.M)) >= 3
    assert "th.sortable" in page
    assert "@media print" in page


def test_report_html_says_a_missing_figure_instead_of_breaking(tmp_path):
    page = report.render_html("# t\n\n![Throughput](figures/none.png)\n\n![Out](../../etc/passwd)\n", tmp_path)
    assert "<img" not in page
    assert page.count('class="missing"') == 2 and "Figure not available: Throughput" in page


def test_report_html_escapes_what_the_run_folder_says(tmp_path):
    page = report.render_html("# run <script>alert(1)</script>\n\n- finding: <b>x</b>\n", tmp_path)
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page


def test_contributed_sections_go_before_the_figures_in_both_reports(run, monkeypatch):
    from glm5lib.report import sections

    monkeypatch.setattr(sections, "PROVIDERS", [])

    def forecast(run_dir):
        assert run_dir == run
        return "## Forecast beside measurement\n\n| concurrency | predicted tok/s |\n| ---: | ---: |\n| 2,048 | 4,321 |\n"

    def broken(run_dir):
        raise RuntimeError("no model fitted")

    report.register_section(forecast)
    report.register_section(broken)
    report.register_section("glm5lib.report.conclude:list_phases")  # returns a list: not Markdown, named
    with pytest.raises(ConfigError, match="neither a function"):
        report.register_section("no-colon")
    md = report.write_report(run).read_text()
    assert md.index("## Forecast beside measurement") < md.index("## Figures")
    assert md.index("## Next bottleneck") < md.index("## Forecast beside measurement")
    # a section that failed is named in its place with its cause, never silently dropped
    assert md.count("## A section not written") == 2 and "RuntimeError: no model fitted" in md
    assert "returned list, not Markdown" in md and md.index("## A section not written") < md.index("## Figures")
    page = (run / rundir.REPORT_HTML).read_text()
    assert "<h2>Forecast beside measurement</h2>" in page and "4,321" in page


def test_the_quoted_level_is_where_the_baseline_already_delivered_its_peak(run, tmp_path):
    # the lowest level within 5% of the baseline's peak (880 of 890 at 256), whatever was predicted
    pd.DataFrame([{"finding": "cap", "evidence": "", "suggestion": "", "confidence": 0.9, "rule": "concurrency_cap",
                   "predicted_concurrency": 1024, "predicted_throughput": 2600.0, "predicted_low": 2200.0,
                   "predicted_high": 3000.0}]).to_csv(run / "baseline" / rundir.FINDINGS, index=False)
    assert report.summarize(run)["story_level"] == 256
    _phase(tmp_path, "baseline", {1: 40.0, 64: 870.0, 256: 880.0, 1024: 890.0}, {"max_running_requests": 64})
    summary = report.summarize(tmp_path)
    assert summary["story_level"] == 64
    assert "peak 890 tok/s at 1,024 concurrent requests; already 870 tok/s at 64 concurrent requests" in (
        report.render_markdown(summary))
    _phase(tmp_path, "baseline", {1: 40.0, 64: 600.0, 256: 880.0}, {"max_running_requests": 64})
    summary = report.summarize(tmp_path)
    assert summary["story_level"] == 256 and "tok/s at 256 concurrent requests;" not in report.render_markdown(summary)


def test_phases_not_named_baseline_and_fix_are_compared_in_the_order_measured(tmp_path):
    import os

    first = _phase(tmp_path, "yesterday", {64: 500.0}, {"max_running_requests": 64})
    second = _phase(tmp_path, "today", {64: 800.0}, {"max_running_requests": 128})
    os.utime(first / rundir.SWEEP, (1000, 1000))
    os.utime(second / rundir.SWEEP, (2000, 2000))
    summary = report.summarize(tmp_path)
    assert list(summary["phases"]) == ["yesterday", "today"]
    assert summary["roles"] == {"before": "yesterday", "after": "today"}
    assert summary["comparison"][0]["gain"] == pytest.approx(1.6)
    text = report.render_markdown(summary)
    assert "- **Yesterday**: peak 500" in text and "- **Today**: peak 800" in text
    assert "| concurrency | yesterday tok/s | today tok/s | gain x |" in text


def test_leading_hypothesis_reads_what_a_finding_covers_not_its_prose():
    findings = pd.DataFrame([
        # names max_running_requests in its text, but is about CUDA graphs only
        {"finding": "graphs off while max_running_requests is 64", "evidence": "", "suggestion": "",
         "confidence": 0.9, "rule": "cuda_graph", "covers": "disable_cuda_graph cuda_graph_max_bs"},
        {"finding": "batch pinned", "evidence": "", "suggestion": "raise the cap", "confidence": 0.8,
         "rule": "concurrency_cap", "covers": "max_running_requests"},
    ])
    h = report.leading_hypothesis(DIFF, findings.iloc[1:])
    assert h["field"] == "max_running_requests" and h["supported"] is True and h["test"] == "raise the cap"
    h = report.leading_hypothesis(DIFF, findings)
    assert h["field"] == "disable_cuda_graph" and h["finding"].startswith("graphs off")
    # a finding that covers no field backs nothing
    none = pd.DataFrame([{"finding": "max_running_requests looks low", "evidence": "", "suggestion": "",
                          "confidence": 0.5, "rule": "x", "covers": float("nan")}])
    assert report.leading_hypothesis(DIFF, none)["supported"] is False


def test_an_older_run_folder_gets_both_reports(tmp_path):
    import shutil
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "data" / "examples" / "cpu-vllm"
    run = shutil.copytree(example, tmp_path / "cpu-vllm", ignore=shutil.ignore_patterns("report.*", "summary.json"))
    report.write_report(run)
    md, page = (run / rundir.REPORT).read_text(), (run / rundir.REPORT_HTML).read_text()
    assert "- **Baseline**: peak 455 tok/s at 4 concurrent requests (max_num_seqs = 4)." in md
    assert "median E2E ms" in md and "Measured on a real server" in md
    figures = json.loads((run / rundir.SUMMARY).read_text())["figures"]
    assert figures and page.count("data:image/png;base64,") == len(figures)


def test_phases_after_the_baseline_go_in_the_order_their_sweeps_ran_not_by_file_times(tmp_path):
    """A checkout or a copy gives every file one time: the sweep's own start times keep the order."""
    import os

    for name, started in (("baseline", 100.0), ("zeta", 200.0), ("alpha", 300.0)):
        folder = tmp_path / name
        folder.mkdir()
        pd.DataFrame([{"concurrency": 1, "output_throughput": 10.0, "start_time": started}]).to_csv(
            folder / rundir.SWEEP, index=False)
        os.utime(folder / rundir.SWEEP, (1_000.0, 1_000.0))
    from glm5lib.report.conclude import reading

    assert report.list_phases(tmp_path, reading()) == ["baseline", "zeta", "alpha"]
    assert list(report.summarize(tmp_path)["phases"]) == ["baseline", "zeta", "alpha"]
    # a sweep without start times falls back on the file's time
    pd.DataFrame([{"concurrency": 1, "output_throughput": 10.0}]).to_csv(tmp_path / "alpha" / rundir.SWEEP, index=False)
    os.utime(tmp_path / "alpha" / rundir.SWEEP, (50.0, 50.0))
    assert report.list_phases(tmp_path, reading()) == ["baseline", "alpha", "zeta"]
