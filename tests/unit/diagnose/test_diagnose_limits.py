"""Tests of the limits named from per-step evidence, on frames built by hand: the token budget from
gauges and step counts (engines without prefill lines), the densest source per level, the load
offered as the limit, a starved client as a caveat, and trade-offs between phases."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rule_findings import only_finding
from test_diagnose import decode_frame, overridden, sweep_frame

from glm5lib import diagnose as dg
from glm5lib.diagnose.evidence import (
    decode_from_metrics,
    preemptions_from_metrics,
    step_tokens_from_metrics,
)
from glm5lib.diagnose.rules.limits import budget_arithmetic
from glm5lib.diagnose.rules.phases import level_throughput
from glm5lib.logs import to_epoch

T0 = 1_700_000_000.0


def metrics_frame(times, running, waiting, usage, steps=None, tokens=None, engine="vllm") -> pd.DataFrame:
    """``metrics.csv`` rows as the scraper writes them: one row per gauge per scrape."""
    names = {"vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"),
             "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage")}[engine]
    rows = []
    for i, t in enumerate(times):
        for name, series in zip(names, (running, waiting, usage), strict=True):
            rows.append({"time": t, "metric": name, "labels": '{"engine":"0"}', "value": series[i]})
        if steps is not None:
            rows.append({"time": t, "metric": "vllm:iteration_tokens_total_count", "labels": "{}", "value": steps[i]})
            rows.append({"time": t, "metric": "vllm:iteration_tokens_total_sum", "labels": "{}", "value": tokens[i]})
    return pd.DataFrame(rows)


def budget_evidence(mean_tokens_per_step=63.0, waiting=11, running=4, budget=64) -> dg.Evidence:
    """vLLM with --max-num-batched-tokens 64, 16 clients, 535-token prompts, 32-token outputs."""
    times = [T0 + 1 + i for i in range(10)]
    steps = [100.0 * i for i in range(10)]
    metrics = metrics_frame(times, [running] * 10, [waiting] * 10, [0.001] * 10,
                            steps=steps, tokens=[s * mean_tokens_per_step for s in steps])
    s = sweep_frame([16], [150.0], [1800.0], t0=T0, output_len=[32], input_len=[128],
                    median_tpot_ms=[9.8], total_input_tokens=[16 * 535], cancelled=[16], completed=[0])
    s["end_time"] = T0 + 11
    requests = pd.DataFrame({"level": [16] * 20, "status": ["ok"] * 20, "prompt_tokens": [535] * 20,
                             "output_tokens": [32] * 20, "level_id": [s.iloc[0]["level_id"]] * 20
                             if "level_id" in s else [None] * 20})
    gauges = decode_from_metrics(metrics)
    return dg.Evidence(decode=gauges, gauges=gauges, decode_source="metrics", sweep=s, requests=requests,
                       step_tokens=step_tokens_from_metrics(metrics),
                       server_args={"max_num_seqs": 64, "max_num_batched_tokens": budget},
                       startup={"engine": "vllm"})


def test_budget_arithmetic_is_the_batch_the_budget_sustains():
    m = budget_arithmetic(128, 2100, 64, 3)
    # issue 25's run: 128 tokens a step, 2,100-token prompts, 64-token outputs: about 3.8 running
    assert m["sustained"] == pytest.approx(128 * 64 / 2164)
    assert m["room"] == 125 and m["steps_per_admission"] == pytest.approx(2100 / 125)


def test_token_budget_is_named_from_gauges_and_step_counts_without_prefill_lines():
    ev = budget_evidence()
    out = dg.rule_token_budget(ev)
    assert len(out) == 1, ev.skipped
    f = out[0]
    assert f.rule == "token_budget" and f.confidence == pytest.approx(0.8)
    assert "64 tokens per step" in f.finding and "535" in f.finding and "16 running requests" in f.finding
    # its arithmetic: prompt tokens against the budget per step, steps per admission, the batch it sustains
    assert "64 x 32 / (32 + 535) = 3.6 running requests" in f.evidence
    assert "beside 4.00 decodes a step has 60 tokens for prompts, so admitting one request takes 8.9 steps" in f.evidence
    assert "900 steps in the level took 56,700 tokens, 63 per step on average (98% of the budget)" in f.evidence
    assert "10 /metrics scrapes" in f.evidence
    # the remedy in vLLM's flag, sized for the load, with its known cost
    assert "--max-num-batched-tokens 512 (now 64)" in f.suggestion
    assert "16 x (32 + 535) / 32 = 284 tokens per step" in f.suggestion
    assert "TPOT rises" in f.suggestion and "9.8 ms" in f.suggestion
    # it leads, and the saturation rule no longer blames the kernels while requests queue
    frame = dg.evaluate(ev)
    assert frame.iloc[0]["rule"] == "token_budget", frame[["rule", "finding"]]
    assert "saturation" not in set(frame["rule"])


def test_token_budget_quiet_when_steps_run_far_below_it_or_nothing_queues():
    assert dg.rule_token_budget(budget_evidence(mean_tokens_per_step=12.0)) == []
    assert dg.rule_token_budget(budget_evidence(waiting=0, running=16)) == []


def test_token_budget_without_step_counts_rests_on_the_arithmetic():
    ev = budget_evidence()
    ev.step_tokens = pd.DataFrame()
    out = dg.rule_token_budget(ev)
    assert len(out) == 1 and out[0].confidence == pytest.approx(0.6)
    assert "per-step token counts" not in out[0].evidence
    # a batch far above what the budget sustains is held back by something else
    ev = budget_evidence(running=12)
    ev.step_tokens = pd.DataFrame()
    assert dg.rule_token_budget(ev) == []


def test_unset_vllm_budget_is_the_value_vllm_chose():
    ev = budget_evidence()
    ev.server_args = {"max_num_seqs": 64}
    ev.startup = {"engine": "vllm", "device": "cpu"}
    budget, src = ev.token_budget()
    assert budget and "vLLM chose" in src


def test_each_level_takes_the_denser_source_and_the_cap_is_seen_where_the_log_is_silent():
    # item 7: the log wrote decode lines at 256 running, but none in the 1,024 level (one line every
    # 40 steps of 11 s); /metrics sampled every second saw 1,024 running and up to 895 queued
    log = decode_frame([256] * 10, queue=0, usage=0.2)
    t_log = to_epoch(log["time"])
    s = sweep_frame([256, 1024], [900.0, 3700.0], [300.0, 2000.0], t0=float(t_log.min()) - 1)
    s.loc[0, ["start_time", "end_time"]] = [float(t_log.min()) - 1, float(t_log.max()) + 1]
    a = float(t_log.max()) + 5
    s.loc[1, ["start_time", "end_time"]] = [a, a + 30]
    times = [a + 1 + i for i in range(25)]
    queued = list(np.linspace(0, 895, 25))
    gauges = decode_from_metrics(metrics_frame(times, [1024] * 25, queued, [0.4] * 25, engine="sglang"))
    ev = dg.Evidence(decode=log, gauges=gauges, sweep=s, startup={"max_running_requests": 1024})
    d = ev.active_decode()
    assert set(d["source"]) == {"log", "metrics"} and int(d["running_req"].max()) == 1024
    top = ev.level_decode()[0]
    assert top[0] == 1024 and (top[1]["source"] == "metrics").all() and len(top[1]) == 25
    lines = ev.decode_in_level(s.iloc[0])
    assert (lines["source"] == "log").all() and len(lines) == 10
    cap = dg.rule_concurrency_cap(ev)
    assert cap and "at most 1024 requests" in cap[0].finding
    assert "running requests stayed at 1024 on 69% of decode lines" in cap[0].evidence
    assert "(max 895)" in cap[0].evidence


def test_load_bound_names_the_offered_load_and_asks_how_far_it_scales():
    d = decode_frame([16] * 8 + [15, 16], queue=[0] * 9 + [2], usage=0.01)
    from test_diagnose_rules import level_sweep

    ev = dg.Evidence(decode=d, sweep=level_sweep(d, levels=(4, 16)), startup={"max_running_requests": 64})
    f = only_finding(dg.rule_load_bound, ev)
    assert f.finding.startswith("the load offered is the limit")
    assert "median 16.0 (peak 16.0) of the 16 requests offered" in f.evidence
    assert "the cap of 64" in f.evidence and "4.0x the load" in f.evidence
    assert "how far it scales" in f.suggestion and "up to about 64" in f.suggestion
    # a standing queue, a cap at the load or a full pool: not the load's limit
    for over in (dict(decode=decode_frame([16] * 10, queue=5, usage=0.01)),
                 dict(startup={"max_running_requests": 16}),
                 dict(decode=decode_frame([16] * 10, queue=0, usage=0.9))):
        e = overridden(dg.Evidence(decode=d, sweep=ev.sweep, startup={"max_running_requests": 64}), **over)
        assert dg.rule_load_bound(e) == [], over


def test_starved_client_is_a_caveat_with_the_other_processes_never_the_cause():
    s = sweep_frame([4, 16, 64], [40.0, 75.0, 75.0], [500.0, 5000.0, 8000.0], client_bound=[True, True, True],
                    client_cpu_pct=[6.0, 8.0, 7.0], loop_lag_p99_ms=[340.0, 600.0, 852.0],
                    others_cpu_pct=[180.0, 185.0, 190.0], host_cpus=[2, 2, 2], host_cpu_pct=[97.0, 98.0, 99.0],
                    other_processes=["python3[15934] 120%; VLLM::Worker[17040] 60%"] * 3)
    out = dg.rule_client_bound(dg.Evidence(sweep=s))
    assert [f.rule for f in out] == ["client_starved"]
    f = out[0]
    assert f.finding.startswith("measurement caveat") and f.severity <= 0.1
    assert "VLLM::Worker[17040] 60%" in f.evidence and "190% of a core in all" in f.evidence
    assert "host 99% busy over 2 cores" in f.evidence
    assert "inflated by that much" in f.evidence and "~852 ms" in f.evidence
    # a saturated client (near a core) stays the cause it was
    s.loc[2, "client_cpu_pct"] = 97.0
    rules = [f.rule for f in dg.rule_client_bound(dg.Evidence(sweep=s))]
    assert rules == ["client_bound", "client_starved"]


def test_caveats_come_after_every_cause():
    ev = budget_evidence()
    ev.sweep["client_bound"] = True
    ev.sweep["client_cpu_pct"] = 6.0
    ev.sweep["loop_lag_p99_ms"] = 900.0
    frame = dg.evaluate(ev)
    assert frame.iloc[-1]["rule"] == "client_starved" and frame.iloc[0]["rule"] == "token_budget"
    assert "load generator was the bottleneck" not in " ".join(frame["finding"])


def _phases(before: pd.DataFrame, after: pd.DataFrame) -> dg.Evidence:
    return dg.Evidence(sweep=after, before_sweep=before, before_label="baseline")


def test_a_change_that_helps_some_levels_and_hurts_others_is_a_trade_off():
    before = sweep_frame([16, 64], [75.0, 75.0], [5600.0, 8000.0], median_tpot_ms=[9.0, 9.0])
    after = sweep_frame([16, 64], [96.0, 50.0], [900.0, 20000.0], median_tpot_ms=[40.0, 515.0])
    f = only_finding(dg.rule_tradeoff, _phases(before, after))
    assert "raised throughput at 1 level(s) and lowered it at 1 of 2" in f.finding
    assert "at 16: 75.0 -> 96.0 tok/s (1.28x)" in f.evidence and "at 64: 75.0 -> 50.0 tok/s (0.67x)" in f.evidence
    assert "TPOT 9.00 -> 515 ms" in f.evidence


def test_a_gain_bought_with_latency_is_reported_with_its_cost():
    before = sweep_frame([16], [75.0], [5600.0], median_tpot_ms=[9.0])
    after = sweep_frame([16], [96.0], [900.0], median_tpot_ms=[515.0])
    f = dg.rule_tradeoff(_phases(before, after))[0]
    assert "up to 1.28x" in f.finding and "TPOT rose 57.2x at 16 (9.00 -> 515 ms)" in f.finding
    # a plain gain with no latency cost is no trade-off
    calm = sweep_frame([16], [96.0], [900.0], median_tpot_ms=[9.5])
    assert dg.rule_tradeoff(_phases(before, calm)) == []


def test_a_level_that_never_reached_steady_state_is_read_whole_never_zero():
    # item 2: 682 tokens streamed in 15 s, the steady window 0.15 s at the end with no arrival in it
    row = {"output_throughput": 0.0, "total_output_tokens": 682, "duration": 15.0,
           "window_note": "steady 0.15 s of 15.00"}
    thr, note = level_throughput(row)
    assert thr == pytest.approx(682 / 15.0) and note.startswith("not steady")
    assert "682 tokens in 15.0 s" in note
    assert level_throughput({"output_throughput": 80.0}) == (80.0, None)
    flagged = {"output_throughput": 80.0, "steady": False, "steady_note": "running batch still rising",
               "total_output_tokens": 700, "duration": 10.0}
    assert level_throughput(flagged) == (70.0, "not steady: running batch still rising; 700 tokens in 10.0 s")
    before = sweep_frame([16, 64], [75.0, 75.0], [5600.0, 8000.0], median_tpot_ms=[9.0, 9.0])
    after = sweep_frame([16, 64], [96.0, 0.0], [900.0, 20000.0], median_tpot_ms=[9.0, 515.0],
                        total_output_tokens=[960, 682], duration=[10.0, 15.0])
    f = dg.rule_tradeoff(_phases(before, after))[0]
    assert "at 64: 75.0 -> 45.5 tok/s (0.61x)" in f.evidence and "not steady" in f.evidence
    assert "0.00x" not in f.evidence


def test_load_evidence_reads_gauges_step_counts_and_the_baseline(tmp_path):
    ev0 = budget_evidence()
    base, fix = tmp_path / "baseline", tmp_path / "fix"
    for p in (base, fix):
        p.mkdir()
        ev0.sweep.to_csv(p / "sweep.csv", index=False)
    times = [T0 + 1 + i for i in range(5)]
    metrics_frame(times, [4] * 5, [11] * 5, [0.001] * 5, steps=[0, 10, 20, 30, 40],
                  tokens=[0, 600, 1200, 1800, 2400]).to_csv(fix / "metrics.csv", index=False)
    ev = dg.load_evidence(tmp_path, phase="fix")
    assert ev.decode_source == "metrics" and len(ev.gauges) == 5 and ev.engine == "vllm"
    assert list(ev.step_tokens["steps"]) == [0, 10, 20, 30, 40]
    assert ev.before_label == "baseline" and len(ev.before_sweep) == 1
    assert dg.load_evidence(tmp_path, phase="baseline").before_sweep is None
    assert json.loads(json.dumps(ev.steps_in_level(ev.sweep.iloc[0])))["mean"] == pytest.approx(60.0)


def test_real_vllm_budget_bound_run_leads_with_the_token_budget(tmp_path):
    # vLLM 0.32 on CPU, --max-num-batched-tokens 64 --max-num-seqs 64, 16 clients of ~535-token prompts
    # (tests/fixtures/vllm/README.md): vLLM logs no prefill line, so the budget comes from its
    # non-default args line, the running/waiting gauges and its per-step token counters
    fixtures = Path(__file__).parents[2] / "fixtures" / "vllm"
    for name, target in (("cpu-budget.log", "server.log"), ("cpu-budget-metrics.csv", "metrics.csv"),
                         ("cpu-budget-sweep.csv", "sweep.csv"), ("cpu-budget-requests.jsonl", "requests.jsonl")):
        shutil.copy(fixtures / name, tmp_path / target)
    frame = dg.diagnose(tmp_path, write=False)
    top = frame.iloc[0]
    assert top["rule"] == "token_budget", frame[["rule", "finding"]].to_string()
    assert "64 tokens per step admit prompts of 536 tokens" in top["finding"]
    assert "64 x 32 / (32 + 536) = 3.6 running requests" in top["evidence"]
    assert "698 steps in the level took 44,253 tokens, 63 per step" in top["evidence"]
    assert "--max-num-batched-tokens 512 (now 64)" in top["suggestion"]
    rules = list(frame["rule"])
    assert "client_bound" not in rules and rules[-1] == "client_starved"  # 6% of a core: starved
    assert "saturation" not in rules
    assert not any(s.startswith("prefill_budget: no prefill lines or no known") for s in frame.attrs["skipped"])


def test_rules_read_a_level_that_streamed_tokens_whole_never_as_zero():
    # the stand-in's fix at 1,024 streams, issue 25 item 2: 449 tokens streamed in a 7 s level whose
    # steady window (0.12 s) counted none
    s = sweep_frame([256, 1024], [1948.0, 0.0], [1500.0, 5600.0], total_output_tokens=[19480, 449],
                    duration=[10.0, 7.0], window_note=["steady 9.8 s of 10.0", "steady 0.12 s of 7.00"])
    read = dg.Evidence(sweep=s).sweep_sorted()
    assert read["output_throughput"].tolist() == pytest.approx([1948.0, 449 / 7.0])
    assert pd.isna(read["not_steady"].iloc[0]) and read["not_steady"].iloc[1].startswith("not steady")
    assert "449 tokens in 7.0 s" in read["not_steady"].iloc[1]


def test_vllm_preemptions_come_from_its_counter_when_the_log_has_no_line_for_them(tmp_path):
    rows = [{"time": T0 + i, "metric": "vllm:num_preemptions_total", "labels": '{"engine":"0"}', "value": v}
            for i, v in enumerate([0, 0, 3, 3, 7])]
    frame = preemptions_from_metrics(pd.DataFrame(rows))
    assert frame["retracted_reqs"].tolist() == [3, 4] and frame["epoch"].tolist() == [T0 + 2, T0 + 4]
    assert preemptions_from_metrics(pd.DataFrame(rows[:2])).empty


def test_the_report_section_shows_each_levels_figures_their_source_and_the_leading_finding(tmp_path):
    from glm5lib.diagnose.section import section_markdown

    fixtures = Path(__file__).parents[2] / "fixtures" / "vllm"
    phase = tmp_path / "run" / "baseline"
    phase.mkdir(parents=True)
    for name, target in (("cpu-budget.log", "server.log"), ("cpu-budget-metrics.csv", "metrics.csv"),
                         ("cpu-budget-sweep.csv", "sweep.csv"), ("cpu-budget-requests.jsonl", "requests.jsonl")):
        shutil.copy(fixtures / name, phase / target)
    text = section_markdown(tmp_path / "run")
    assert text.startswith("## Scheduler limits") and "### Phase `baseline`" in text
    assert "| 16 | /metrics | 8 | 5 | 5 | 9.6 | 12 | 0.00 | 63 |" in text
    assert "Leading finding: **token budget: 64 tokens per step" in text
    assert "What to do: widen the prefill budget: --max-num-batched-tokens 512" in text
    assert "Caveat: measurement caveat: the load generator was starved" in text
    # a level with no figure from either source says so
    (phase / "metrics.csv").unlink()
    (phase / "server.log").write_text("")
    assert "| 16 | missing | 0 | n/a | n/a | n/a | n/a | n/a | n/a |" in section_markdown(tmp_path / "run")
    assert section_markdown(tmp_path / "nowhere") is None


def test_queued_below_limit_names_the_level_where_requests_queued_below_the_limit():
    from glm5lib.diagnose.rules._queue import levels_with_limit, queued_below_limit

    ev = budget_evidence()
    levels = list(levels_with_limit(ev))
    assert [(conc, cap, limit) for conc, _, cap, limit, _ in levels] == [(16, 64, 16)]
    held = queued_below_limit(ev, "no decode figures")
    assert held is not None and held[0] == 16 and held[2] == 64
    assert "no decode figures" not in ev.skipped
    # a batch at its limit is not held below it
    full = budget_evidence(waiting=11, running=16)
    assert queued_below_limit(full, "no decode figures") is None


def test_queued_below_limit_says_why_when_there_are_no_decode_figures():
    from glm5lib.diagnose.rules._queue import queued_below_limit

    ev = dg.Evidence(startup={"engine": "vllm"})
    assert queued_below_limit(ev, "token_budget: no running/queued figures") is None
    assert ev.skipped == ["token_budget: no running/queued figures"]
