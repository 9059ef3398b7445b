"""Tests of the rules for why the running batch stays below the offered load (glm5lib.diagnose.rules),
each on evidence frames built by hand: fires with its numbers and the engine's own flags, stays quiet otherwise."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from rule_findings import only_finding
from test_diagnose import decode_frame, overridden, sweep_frame

from glm5lib import diagnose as dg
from glm5lib.diagnose.model import PerfModel
from glm5lib.engines.sglang.config import catalogue
from glm5lib.logs import to_epoch


def level_sweep(decode: pd.DataFrame, levels=(256,), **extra) -> pd.DataFrame:
    """A sweep whose (single or last) level window covers the decode lines' times."""
    t = to_epoch(decode["time"])
    s = sweep_frame(list(levels), [1000.0 * (i + 1) for i in range(len(levels))], [500.0] * len(levels), **extra)
    s.loc[s.index[-1], ["start_time", "window_start"]] = float(t.min()) - 1
    s.loc[s.index[-1], ["end_time", "window_end"]] = float(t.max()) + 1
    for i in range(len(s) - 1):  # earlier levels end before the decode lines
        s.loc[i, ["start_time", "window_start"]] = float(t.min()) - 100 * (len(s) - i)
        s.loc[i, ["end_time", "window_end"]] = float(t.min()) - 100 * (len(s) - i) + 50
    return s


def held_evidence(**over) -> dg.Evidence:
    d = decode_frame([30] * 20, queue=100, usage=0.2)
    ev = dg.Evidence(
        decode=d,
        sweep=level_sweep(d, output_len=[4096]),
        server_args={"max_running_requests": 256},
        startup={"max_total_num_tokens": 200_000, "max_running_requests": 256},
    )
    return overridden(ev, **over)


def test_admission_reserve_fires_with_the_reserve_sized_and_sglang_flags():
    f = only_finding(dg.rule_admission_reserve, held_evidence())
    assert "stayed at a median 30, below the cap of 256" in f.evidence
    assert "token usage only 0.20" in f.evidence
    # 30 running x 4,096 max tokens x 0.098-0.70 -> 12,042-86,016 reserved of 160,000 free
    assert "reserves 12,042-86,016 tokens against the 160,000 free" in f.evidence
    assert "--schedule-conservativeness" in f.suggestion and f.confidence >= 0.7
    # the whole evaluation leads with it
    top = dg.evaluate(held_evidence()).iloc[0]
    assert top["rule"] == "admission_reserve"


def test_admission_reserve_quiet_when_kv_is_full_small_reserve_or_vllm():
    full = held_evidence(decode=decode_frame([30] * 20, queue=100, usage=0.9))
    assert dg.rule_admission_reserve(full) == []
    d = decode_frame([30] * 20, queue=100, usage=0.2)
    short = held_evidence(sweep=level_sweep(d, output_len=[16]))
    assert dg.rule_admission_reserve(short) == []  # 30 x 16 x 0.7 tokens cannot fill the pool
    ev = held_evidence(startup={"engine": "vllm", "max_total_num_tokens": 200_000, "max_running_requests": 256})
    assert dg.rule_admission_reserve(ev) == []
    assert any("vLLM reserves no future tokens" in s for s in ev.skipped)


def prefill_frame(new_token, n=12, new_seq=1) -> pd.DataFrame:
    return pd.DataFrame({
        "time": pd.date_range("2026-01-01 10:00:00", periods=n, freq="2s"),
        "rank": ["TP0"] * n, "new_seq": [new_seq] * n, "new_token": [new_token] * n,
        "cached_token": [0] * n, "token_usage": [0.2] * n, "running_req": [20] * n, "queue_req": [50] * n,
    })


def test_prefill_budget_fires_when_every_batch_is_full_and_names_each_engines_flag():
    ev = held_evidence(prefill=prefill_frame(512), server_args={"max_running_requests": 256, "chunked_prefill_size": 512})
    ev.startup["chunked_prefill_size"] = 512
    f = only_finding(dg.rule_prefill_budget, ev)
    assert "12 of 12 prefill batches (100%) took the whole budget of 512 tokens" in f.evidence
    assert "--chunked-prefill-size 8192" in f.suggestion
    assert dg.rule_admission_reserve(ev) == []  # the budget explains the wait, not the reserve
    assert dg.evaluate(ev).iloc[0]["rule"] == "prefill_budget"
    vllm = held_evidence(
        prefill=prefill_frame(2048),
        startup={"engine": "vllm", "max_total_num_tokens": 200_000, "max_running_requests": 256,
                 "max_num_batched_tokens": 2048},
    )
    assert "--max-num-batched-tokens 8192" in only_finding(dg.rule_prefill_budget, vllm).suggestion
    # batches below the budget: quiet
    assert dg.rule_prefill_budget(held_evidence(prefill=prefill_frame(100), startup={"chunked_prefill_size": 512})) == []


def retractions(events=10, each=5) -> pd.DataFrame:
    return pd.DataFrame({
        "time": pd.date_range("2026-01-01 10:00:00", periods=events, freq="3s"), "rank": ["TP0"] * events,
        "retracted_reqs": [each] * events, "new_token_ratio_before": [0.3] * events,
        "new_token_ratio_after": [0.9] * events,
    })


def test_retraction_churn_leads_over_kv_capacity_and_says_preemption_for_vllm():
    ev = dg.Evidence(
        decode=decode_frame([300] * 20, queue=50, usage=0.97, tokens=195_000),
        prefill=prefill_frame(4096, n=20, new_seq=10),
        retractions=retractions(),
        server_args={"max_running_requests": 1024},
        startup={"max_total_num_tokens": 200_000},
        sweep=sweep_frame([512], [5000], [900]),
    )
    f = only_finding(dg.rule_retraction_churn, ev)
    assert "10 retraction events sent 50 requests back to the queue, 25% of the 200 admissions" in f.evidence
    assert "new_token_ratio jumped to 0.90" in f.evidence
    assert "holds about 390 requests" in f.evidence and "--max-running-requests to about 390" in f.suggestion
    frame = dg.evaluate(ev)
    assert list(frame["rule"][:2]) == ["retraction_churn", "kv_capacity"]
    ev.startup["engine"] = "vllm"
    out = dg.rule_retraction_churn(ev)
    assert "preemption" in out[0].finding and "--max-num-seqs" in out[0].suggestion
    # one small retraction is not churn
    assert dg.rule_retraction_churn(dg.Evidence(retractions=retractions(events=1, each=2))) == []


def test_underfed_server_is_named_with_or_without_the_clients_flag():
    d = decode_frame([20] * 12, queue=0, usage=0.1)
    ev = dg.Evidence(decode=d, sweep=level_sweep(d, levels=(64,)), startup={"max_running_requests": 1024})
    f = only_finding(dg.rule_underfed, ev)
    assert "at concurrency 64 the server ran a median 20 requests with none queued" in f.evidence
    assert "front end or the tokenizer" in f.evidence and "--tokenizer-worker-num" in f.suggestion
    ev.sweep["client_bound"] = True
    ev.sweep["client_cpu_pct"] = 20.0  # a starved client (below half a core) does not explain the batch
    assert dg.rule_underfed(ev)[0].confidence == pytest.approx(0.6)
    ev.sweep["client_cpu_pct"] = 90.0  # a busy one does
    assert dg.rule_underfed(ev)[0].confidence == pytest.approx(0.8)
    full = decode_frame([60] * 12, queue=0, usage=0.1)
    assert dg.rule_underfed(dg.Evidence(decode=full, sweep=level_sweep(full, levels=(64,)))) == []


def test_dp_imbalance_names_the_busy_and_the_idle_replica():
    busy = decode_frame([60] * 10, queue=20).assign(rank="DP0 TP0")
    idle = decode_frame([10] * 10, queue=0).assign(rank="DP1 TP0")
    ev = dg.Evidence(decode=pd.concat([busy, idle], ignore_index=True), server_args={"dp_size": 2})
    f = only_finding(dg.rule_dp_imbalance, ev)
    assert "DP0 ran 60 requests on average, DP1 10" in f.evidence
    assert "--load-balance-method total_tokens" in f.suggestion
    even = pd.concat([busy, busy.assign(rank="DP1 TP0")], ignore_index=True)
    assert dg.rule_dp_imbalance(dg.Evidence(decode=even)) == []


def test_cap_and_kv_remedies_use_the_evidence_engines_flags():
    d = decode_frame([16, 32, 64] + [64] * 30, queue=[0, 0, 0] + [180] * 30, usage=0.2)
    ev = dg.Evidence(decode=d, sweep=sweep_frame([64, 256], [860, 880], [300, 12000]),
                     startup={"engine": "vllm", "max_running_requests": 64, "max_total_num_tokens": 500_000})
    out = dg.rule_concurrency_cap(ev)
    assert out and "raise --max-num-seqs from 64" in out[0].suggestion
    kv = dg.Evidence(decode=decode_frame([300] * 20, queue=50, usage=0.99, tokens=198_000),
                     retractions=retractions(events=3, each=5),
                     startup={"engine": "vllm", "max_total_num_tokens": 200_000})
    assert "--gpu-memory-utilization" in dg.rule_kv_capacity(kv)[0].suggestion


@pytest.mark.parametrize("running,queue,fires", [
    (64, 1, True),  # 65 in all under a cap of 64: one waits for the cap
    (63, 2, True),  # a sample a step late, still one over
    (63, 1, False),  # 64 in all: the cap admits every one of them; the one waits for something else
    (60, 4, False),
])
def test_the_cap_binds_only_where_more_wait_than_its_free_slots(running, queue, fires):
    d = decode_frame([running] * 30, queue=queue, usage=0.2)
    ev = dg.Evidence(decode=d, sweep=sweep_frame([64], [880], [300]),
                     startup={"max_running_requests": 64, "max_total_num_tokens": 500_000})
    assert bool(dg.rule_concurrency_cap(ev)) is fires


def test_saturation_needs_no_completed_request():
    # duration-bound levels: throughput from in-flight streams, nothing completed
    running = [32] * 10 + [256] * 20
    thr = [b * 1000 / (60 + 0.02 * b) for b in running]
    ev = dg.Evidence(
        decode=decode_frame(running, queue=[0] * 10 + [10] * 20, usage=0.4, thr=thr),
        sweep=sweep_frame([256, 1024], [3900, 4100], [300, 2500], completed=[0, 0]),
        startup={"max_running_requests": 1024},
    )
    assert "3,900 -> 4,100" in only_finding(dg.rule_saturation, ev).evidence
    assert not any(s.startswith("saturation") for s in ev.skipped)


def test_recommendation_below_the_batch_that_ran_says_why():
    r = dg.recommend_running_cap(100_000, 1000, target_concurrency=1024, ran_batch=200)
    assert r.value == 88
    assert "below the 200 requests that already ran at once because the pool holds only 90" in r.reason


def test_findings_carry_the_predicted_effect_of_their_remedy():
    from test_diagnose import cap_evidence

    ev = cap_evidence()
    f = dg.rule_concurrency_cap(ev)[0]
    p = f.prediction
    assert p is not None and p.concurrency == 256 and p.batch_now == 64 and p.batch_after == 256
    assert p.low <= p.throughput <= p.high and p.throughput > 2 * p.measured
    # graphs captured up to 64 (the cap): raising the cap past it raises the graph ceiling with it
    assert p.text.startswith("raising the cap to 256 and the graph ceiling with it: at concurrency 256 the "
                             "performance model " + ("forecasts" if p.given else "has no forecast within +/-30%"))
    assert "--cuda-graph-max-bs" in f.suggestion and "runs eagerly" in f.suggestion
    assert "880 tok/s measured with 64" in p.text
    row = dg.evaluate(cap_evidence()).iloc[0]
    assert row["rule"] == "concurrency_cap" and row["predicted_throughput"] == pytest.approx(p.throughput, rel=1e-3)
    assert row["measured_throughput"] == 880
    # no sweep: no forecast; a remedy that lets no more requests run: none either
    assert dg.predict_remedy(dg.Evidence(decode=ev.decode), 256, "x") is None
    assert dg.predict_remedy(cap_evidence(), 64, "x") is None
    # the forecast is the performance model's, fitted on the sweep's levels (as fix/prediction.csv
    # is), so decode lines that never left the cap do not change it
    both = {"graph_max_batch": 256}
    narrow = cap_evidence(decode=decode_frame([64] * 30, queue=180, usage=0.2))
    assert dg.predict_remedy(narrow, 256, "x", changes=both).throughput == pytest.approx(p.throughput)
    [forecast] = PerfModel.from_evidence(cap_evidence()).forecast({"max_running_requests": 256, **both}, [256])
    assert forecast.predicted_tok_s == pytest.approx(p.throughput)
    assert p.given == forecast.given and p.binding == forecast.binding_limit


def test_gauges_stand_in_for_decode_lines_when_the_log_has_none(tmp_path):
    # An attached vLLM server: no log, only scraped /metrics (running pinned at 64, 180 waiting).
    t0 = 1_800_000_000.0
    rows = []
    for i in range(30):
        running = 64 if i > 2 else 16 * (i + 1)
        for metric, value in (
            ("vllm:num_requests_running", running),
            ("vllm:num_requests_waiting", 180 if i > 2 else 0),
            ("vllm:gpu_cache_usage_perc", 0.2),
        ):
            rows.append({"time": t0 + 2 * i, "metric": metric, "labels": "{}", "value": value})
    phase = tmp_path / "run"
    phase.mkdir()
    pd.DataFrame(rows).to_csv(phase / "metrics.csv", index=False)
    s = sweep_frame([64, 256], [860, 880], [300, 12000])
    s.loc[1, ["start_time", "window_start"]] = t0 - 1
    s.loc[1, ["end_time", "window_end"]] = t0 + 61
    s.to_csv(phase / "sweep.csv", index=False)
    (phase / "config.json").write_text('{"max_num_seqs": 64}')
    ev = dg.load_evidence(phase)
    assert ev.decode_source == "metrics" and ev.engine == "vllm" and len(ev.decode) == 30
    assert list(ev.decode.columns[:4]) == ["time", "running_req", "queue_req", "token_usage"]
    out = dg.rule_concurrency_cap(ev)
    assert out and "stayed at 64" in out[0].evidence and "--max-num-seqs" in out[0].suggestion


def test_a_recommendation_the_model_forecasts_slower_says_so():
    # 120 requests ran at 120 offered with a cap of 256; the pool holds 88 at full length, and a
    # step mostly fixed (40 ms + 0.05 ms a request) makes the smaller cap a quarter slower
    from test_model import sweep

    levels = sweep([16, 32, 64, 120], step=lambda b: 40.0 + 0.05 * b)
    model = PerfModel.from_evidence(dg.Evidence(sweep=levels, server_args={"max_running_requests": 256,
                                                                            "disable_cuda_graph": True}))
    r = dg.recommend_running_cap(100_000, 1000, target_concurrency=120, current_cap=256, ran_batch=120, model=model)
    assert r.value == 88 and r.predicted_throughput < r.current_throughput
    assert r.forecast is not None and r.forecast.running == 88
    assert "forecast to be slower than what runs now" in r.reason
    assert "below the 120 requests that already ran at once" in r.reason


def test_a_vllm_diff_ranks_max_num_seqs_first_and_resolves_it_from_the_start_up_facts():
    cur = {"model": "m", "max_num_seqs": 4, "enforce_eager": False, "port": 8000}
    ref = {"model": "m", "max_num_seqs": None, "enforce_eager": True, "port": 8001}
    diff = dg.diff_configs(cur, ref, hide_irrelevant=True, reference_startup={"max_running_requests": 256})
    top = diff.iloc[0]
    assert top["field"] == "max_num_seqs" and (top["current"], top["reference"]) == (4, 256)
    assert "signature of a cap" in top["rationale"] and "resolved at start" in top["resolved"]
    assert list(diff["field"]) == ["max_num_seqs", "enforce_eager"]


@pytest.mark.parametrize("release", ["0.5.8", "0.5.9", "0.5.23"])
def test_sglang_remedies_name_only_flags_and_values_the_release_takes(release):
    cat = catalogue(release)
    texts = [dg.remedy(intent, "sglang", release=release) for intent in dg.load_remedies()]
    assert any(intent.startswith("crash_") for intent in dg.load_remedies())  # the crash advice is checked too
    for text in texts:
        for flag, value in re.findall(r"(--[a-z][a-z0-9-]+)(?: ([a-z0-9]+_[a-z0-9_]+))?", text):
            spec = cat.specs[cat.flag_to_field[flag]]  # KeyError: a flag the release does not know
            assert not spec.deprecated, (flag, text)
            if spec.choices and value:
                assert value in spec.choices, (flag, value, text)


def test_graph_remedy_is_spelt_for_the_release_of_the_evidence():
    running, graph = [32] * 10 + [200] * 10, [True] * 10 + [False] * 10
    for args, flag in (({"cuda_graph_max_bs_decode": 64, "version": "0.5.23"}, "--cuda-graph-max-bs-decode"),
                       ({"cuda_graph_max_bs": 64, "version": "0.5.9"}, "--cuda-graph-max-bs")):
        out = dg.rule_cuda_graph(dg.Evidence(decode=decode_frame(running, graph=graph), server_args=args))
        assert f"raise {flag} to about 200 " in out[0].suggestion


def test_saturation_pairs_the_highest_flat_level_with_the_nearest_level_far_enough_below():
    from glm5lib.diagnose.rules.throughput import _flat_pair

    conc = pd.Series([1, 64, 200, 256, 1024])
    assert _flat_pair(conc, pd.Series([10.0, 600, 900, 1000, 1100])) == (3, 4)  # 1,024 over 256: +10%
    assert _flat_pair(conc, pd.Series([10.0, 950, 990, 1000, 2000])) == (1, 3)  # 256 over 64 (200 is too near)
    assert _flat_pair(conc, pd.Series([10.0, 600, 900, 1200, 2000])) is None


def test_saturation_leaves_a_plateau_to_the_cap_or_the_kv_pool_where_they_explain_it():
    from glm5lib.diagnose.rules.throughput import _cap_or_kv_explains

    pinned = decode_frame([64] * 10, queue=5, usage=0.3)
    assert _cap_or_kv_explains(pinned, 64) and not _cap_or_kv_explains(pinned, 256)
    assert _cap_or_kv_explains(decode_frame([30] * 10, queue=5, usage=0.9), 256)
    assert not _cap_or_kv_explains(decode_frame([30] * 10, queue=0, usage=0.9), 30)


def test_saturation_splits_the_step_into_its_fixed_and_per_request_parts():
    from types import SimpleNamespace

    from glm5lib.diagnose.rules.throughput import _step_split

    def model(fixed_ms: float, step_ms: float) -> SimpleNamespace:
        return SimpleNamespace(
            params=SimpleNamespace(fixed_ms=fixed_ms), workload=SimpleNamespace(input_len=1, output_len=1),
            curve=SimpleNamespace(step=lambda b, i, o: step_ms, describe=lambda: "a curve"),
        )

    base = "saturated: profile one decode step"
    part, text = _step_split(model(45.0, 50.0), 256, base)
    assert part == "the performance model (a curve): at 256 running the fixed part is 90% of a 50.0 ms step"
    assert text.startswith("most of each decode step does not depend on the batch") and text.endswith(base.split(": ")[1])
    part, text = _step_split(model(5.0, 50.0), 256, base)
    assert "the fixed part is 10%" in part and text.startswith("most of each decode step grows with the batch")


def test_concurrency_cap_reads_the_plateau_from_the_last_level_under_the_cap_to_the_top():
    from glm5lib.diagnose.rules.batch import _plateau_evidence

    flat = sweep_frame([32, 64, 256], [1000.0, 1900, 2000], [100.0, 150, 2000])
    [sentence], bonus = _plateau_evidence(flat, 64)
    assert sentence.startswith("from concurrency 64 to 256 output throughput moved 1,900 -> 2,000 tok/s")
    assert "TTFT grew 150 -> 2,000 ms" in sentence and bonus == 0.2
    assert _plateau_evidence(sweep_frame([32, 64, 256], [1000.0, 1900, 5000], [100.0, 150, 160]), 64)[1] == 0.0
    assert _plateau_evidence(flat, 256) == ([], 0.0)  # no level above the cap
    [only], bonus = _plateau_evidence(sweep_frame([256], [2000.0], [900.0]), 64)
    assert only == "median TTFT at concurrency 256 was 900 ms" and bonus == 0.0


def test_reference_diff_says_how_to_try_the_reference_value():
    from glm5lib.diagnose.rules.reference import _try_it

    assert _try_it("--disable-radix-cache", True) == "--disable-radix-cache"
    assert _try_it("--enable-metrics", False) == "without --enable-metrics"
    assert _try_it("--max-running-requests", 1024) == "--max-running-requests 1024"
