"""Tests of glm5lib.diagnose: config diff, each rule (fires / stays quiet), the running cap the KV pool allows, CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rule_findings import only_finding

from glm5lib import diagnose as dg
from glm5lib.errors import ConfigError, DiagnosisError

BASELINE = {
    "model_path": "zai-org/GLM-5-NVFP4",
    "tp_size": 8,
    "max_running_requests": 64,
    "attention_backend": "flashinfer",
    "disable_cuda_graph": False,
    "cuda_graph_max_bs": 64,
    "enable_flashinfer_allreduce_fusion": True,
    "port": 30000,
    "log_level": "info",
    "api_key": "sk-secret-value",
}
REFERENCE = {
    "model_path": "nvidia/Kimi-K2-Thinking-NVFP4",
    "tp_size": 8,
    "max_running_requests": 2048,
    "attention_backend": "triton",
    "disable_cuda_graph": True,
    "cuda_graph_max_bs": 64,
    "enable_flashinfer_allreduce_fusion": False,
    "page_size": 1,
    "port": 30001,
    "log_level": "warning",
    "api_key": None,
}

SM120_ENV = {
    "source": "nvml",
    "standin": False,
    "gpus": [
        {
            "index": i,
            "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            "compute_capability": "12.0",
        }
        for i in range(8)
    ],
    "p2p": [["OK"] * 8 for _ in range(8)],
}


def decode_frame(running, queue=0, usage=0.3, graph=True, thr=None, tokens=None) -> pd.DataFrame:
    n = len(running)

    def col(v):
        return list(v) if isinstance(v, (list, tuple, np.ndarray)) else [v] * n

    running = list(running)
    tokens = col(tokens) if tokens is not None else [r * 300 for r in running]
    thr = col(thr) if thr is not None else [r * 1000 / (20 + 0.1 * r) for r in running]
    return pd.DataFrame(
        {
            "time": pd.date_range("2026-01-01 10:00:00", periods=n, freq="2s"),
            "rank": ["TP0"] * n,
            "running_req": running,
            "num_token": tokens,
            "token_usage": col(usage),
            "cuda_graph": col(graph),
            "gen_throughput": thr,
            "queue_req": col(queue),
        }
    )


def overridden(ev: dg.Evidence, **over) -> dg.Evidence:
    """``ev`` with the given fields set after it was built (the rules' tests vary one table at a time)."""
    for k, v in over.items():
        setattr(ev, k, v)
    return ev


def sweep_frame(levels, thr, ttft, t0=1_700_000_000.0, **extra) -> pd.DataFrame:
    rows = []
    for i, (c, t, f) in enumerate(zip(levels, thr, ttft, strict=True)):
        start = t0 + 60 * i
        row = {
            "concurrency": c,
            "completed": 100,
            "failed": 0,
            "output_throughput": t,
            "median_ttft_ms": f,
            "mean_ttft_ms": f,
            "start_time": start,
            "end_time": start + 50,
            "window_start": start + 5,
            "window_end": start + 45,
            "client_bound": False,
            "client_cpu_pct": 20.0,
            "loop_lag_p99_ms": 2.0,
            "input_len": 256,
            "output_len": 256,
            "error_summary": "",
        }
        for k, v in extra.items():
            row[k] = v[i]
        rows.append(row)
    return pd.DataFrame(rows)


def gpu_frame(sweep: pd.DataFrame, power: float, util: float, limit: float = 600.0) -> pd.DataFrame:
    rows = []
    for t in np.arange(sweep["start_time"].min(), sweep["end_time"].max(), 1.0):
        for g in range(8):
            rows.append(
                {"time": t, "gpu": g, "power_w": power, "power_limit_w": limit, "gpu_util": util}
            )
    return pd.DataFrame(rows)


def rules_of(frame: pd.DataFrame) -> list[str]:
    return list(frame["rule"])


# ------------------------------------------------------------------------------------------
# diff_configs
# ------------------------------------------------------------------------------------------


def test_diff_ranks_max_running_requests_first_and_irrelevant_last():
    diff = dg.diff_configs(BASELINE, REFERENCE)
    # every documented column, in the documented order (field, its two sides, then the ranking)
    assert list(diff.columns) == dg.DIFF_COLUMNS
    by_field = diff.set_index("field")
    # model_path is ranked high too but below the cap
    assert diff.iloc[0]["field"] == "max_running_requests"
    assert by_field.loc["max_running_requests", "current"] == 64
    assert by_field.loc["max_running_requests", "reference"] == 2048
    assert list(diff["rank"]) == list(range(1, len(diff) + 1))
    none_rows = diff[diff["impact"] == "none"]
    assert {"port", "log_level"} <= set(none_rows["field"])
    assert none_rows["rank"].min() > diff[diff["impact"] != "none"]["rank"].max()
    # the attention backend outranks allreduce fusion
    assert (
        by_field.loc["attention_backend", "rank"]
        < by_field.loc["enable_flashinfer_allreduce_fusion", "rank"]
    )
    assert (
        by_field.loc["enable_flashinfer_allreduce_fusion", "flag"]
        == "--enable-flashinfer-allreduce-fusion"
    )


def test_diff_hides_irrelevant_masks_secrets_and_normalises_values():
    cur = dict(BASELINE, max_running_requests="64")
    ref = dict(BASELINE, max_running_requests=64, api_key="other-secret", port=1)
    diff = dg.diff_configs(cur, ref)
    assert "max_running_requests" not in set(diff["field"])  # "64" == 64
    assert set(diff["field"]) == {"api_key", "port"}
    row = diff.set_index("field").loc["api_key"]
    assert row["current"] == "***" and row["reference"] == "***"
    assert dg.diff_configs(cur, ref, hide_irrelevant=True).empty


def test_diff_masks_secrets_as_glm5lib_masking_does():
    # an eviction policy that ends in "_key" is shown; a token under any name is hidden
    cur = {"radix_eviction_key": "lru", "hf_token": "hf_" + "a" * 30, "served_model_name": "x"}
    ref = {"radix_eviction_key": "lfu", "hf_token": None, "served_model_name": "sk-" + "b" * 20}
    rows = dg.diff_configs(cur, ref).set_index("field")
    assert rows.loc["radix_eviction_key", "current"] == "lru"
    assert rows.loc["hf_token", "current"] == "***"
    assert rows.loc["served_model_name", "reference"] == "***"


KIMI_K25 = Path(__file__).parents[2] / "fixtures" / "diagnose" / "kimi-k2.5-tp8-server-args.log"


def test_diff_of_the_baseline_against_a_real_kimi_k25_line_puts_the_cap_first():
    # A public Kimi-K2.5 TP=8 start (max_running_requests=None: chosen at start, no pool line).
    diff = dg.diff_configs("glm5-baseline", KIMI_K25, hide_irrelevant=True)
    top = diff.iloc[0]
    assert top["field"] == "max_running_requests"
    assert top["current"] == 64 and top["reference"] == 2048
    assert "at least 2,048 by SGLang's rule" in top["resolved"]
    assert "signature of a cap" in top["rationale"]
    assert not top["automatic"]
    # the models' identity and plumbing are context, not ranked
    context = {row["field"] for row in diff.attrs["context"]}
    assert {"model_path", "tokenizer_path", "served_model_name", "random_seed"} <= context
    assert not context & set(diff["field"])
    full = dg.diff_configs("glm5-baseline", KIMI_K25)
    assert (full[full["kind"] == "context"]["rank"].min() > full[full["kind"] == "setting"]["rank"].max())
    assert set(full[full["kind"] == "context"]["impact"]) == {"none"}


def test_automatic_values_resolve_from_start_up_lines_and_the_release_rule():
    ref = dict(REFERENCE, max_running_requests=None)
    # the reference's start-up line says what None became: 2,048, as ranked as an explicit 2,048
    diff = dg.diff_configs(BASELINE, ref, reference_startup={"max_running_requests": 2048})
    row = diff.set_index("field").loc["max_running_requests"]
    assert row["reference"] == 2048 and "resolved at start" in row["resolved"]
    # the pool and context length give SGLang's rule: min(max(T / ctx x 512, 2048), 4096), <= T/2
    value, how = dg.resolve_automatic(
        "max_running_requests", {}, {"max_total_num_tokens": 3000, "context_len": 4096}
    )
    assert value == 1500 and "half the KV pool" in how
    assert dg.resolve_automatic("max_running_requests", {"max_total_tokens": 10**6, "context_length": 8192})[0] == 4096
    # both sides automatic and resolving alike: no difference left
    same = dg.diff_configs(
        {"max_running_requests": None}, {"max_running_requests": 2048},
        current_startup={"max_running_requests": 2048},
    )
    assert same.empty
    # an explicit 64 against an explicit 2048 is the cap's signature too; 1024 vs 2048 is not
    assert "signature" in dg.diff_configs(BASELINE, REFERENCE).iloc[0]["rationale"]
    assert "signature" not in dg.diff_configs(dict(BASELINE, max_running_requests=1024), REFERENCE).set_index("field").loc["max_running_requests", "rationale"]


def test_diff_reads_json_files_and_rejects_unknown_sources(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(BASELINE))
    b.write_text(json.dumps({"server_args": REFERENCE}))
    diff = dg.diff_configs(a, b)
    assert diff.iloc[0]["field"] == "max_running_requests"
    with pytest.raises(ConfigError) as err:
        dg.diff_configs(BASELINE, "no-such-reference-name")
    assert "no-such-reference-name" in str(err.value)
    assert err.value.valid is not None


def test_diff_unknown_field_ranked_between_low_and_none():
    diff = dg.diff_configs({"some_future_flag": 1, "port": 1}, {"some_future_flag": 2, "port": 2})
    assert list(diff["field"]) == ["some_future_flag", "port"]
    assert diff.iloc[0]["impact"] == "unknown"


# ------------------------------------------------------------------------------------------
# concurrency cap
# ------------------------------------------------------------------------------------------


def cap_evidence(**over) -> dg.Evidence:
    running = [16, 32, 64] + [64] * 30
    queue = [0, 0, 10] + [190] * 30
    ev = dg.Evidence(
        decode=decode_frame(running, queue=queue, usage=0.2),
        # the seed's story: the step barely grows with the batch (GPUs at 83 W), so 4x the batch
        # gave 3.4x the throughput, and the cap holds it there at 256 offered
        sweep=sweep_frame([16, 64, 256], [250, 860, 880], [150, 300, 12000]),
        server_args=dict(BASELINE),
        startup={"max_total_num_tokens": 500_000},
    )
    return overridden(ev, **over)


def test_concurrency_cap_fires_with_numbers_and_a_kv_backed_recommendation():
    f = only_finding(dg.rule_concurrency_cap, cap_evidence())
    assert "64" in f.finding
    assert "stayed at 64 on 94% of decode lines" in f.evidence  # 31 of 33
    assert "queued requests averaged 184 (max 190)" in f.evidence
    assert "860 -> 880 tok/s" in f.evidence and "300 -> 12,000 ms" in f.evidence
    assert f.confidence >= 0.85  # log and sweep agree
    # KV pool 500k tokens at 90% / 512 tokens per request = 878, bounded by the 256 offered -> 256
    assert "to 256" in f.suggestion


def test_concurrency_cap_quiet_when_cap_not_reached():
    ev = cap_evidence(decode=decode_frame([8, 16, 32, 40] * 8, queue=0))
    assert dg.rule_concurrency_cap(ev) == []


def test_concurrency_cap_quiet_when_queue_empty_at_cap():
    ev = cap_evidence(decode=decode_frame([64] * 20, queue=0))
    assert dg.rule_concurrency_cap(ev) == []


# ------------------------------------------------------------------------------------------
# KV capacity
# ------------------------------------------------------------------------------------------


def test_kv_capacity_fires_on_full_pool_and_retractions():
    retr = pd.DataFrame({"time": [1, 2, 3], "rank": ["TP0"] * 3, "retracted_reqs": [5, 7, 3]})
    ev = dg.Evidence(
        decode=decode_frame([300] * 20, queue=50, usage=0.99, tokens=198_000),
        retractions=retr,
        server_args={"max_running_requests": 2048, "mem_fraction_static": 0.88},
        startup={"max_total_num_tokens": 200_000},
        sweep=sweep_frame([512], [5000], [900]),
    )
    f = only_finding(dg.rule_kv_capacity, ev)
    assert "peaked at 0.99" in f.evidence and "3 retraction events sent 15 requests" in f.evidence
    assert "200,000 tokens" in f.evidence and "holds about 390 requests of 512 tokens" in f.evidence
    assert "2048 is above the ~390" in f.suggestion and "0.88" in f.suggestion
    assert f.confidence == pytest.approx(0.85)


def test_kv_capacity_quiet_with_headroom():
    ev = dg.Evidence(decode=decode_frame([64] * 20, usage=0.4))
    assert dg.rule_kv_capacity(ev) == []


# ------------------------------------------------------------------------------------------
# CUDA graphs
# ------------------------------------------------------------------------------------------


def test_cuda_graph_fires_above_max_bs():
    running = [32] * 10 + [200] * 10
    graph = [True] * 10 + [False] * 10
    # the flag is the one of the release whose names the arguments use: 0.5.23 (the default
    # release) for its own name, 0.5.9 for the name 0.5.23 no longer has
    for args, flag in (
        ({"cuda_graph_max_bs_decode": 64}, "--cuda-graph-max-bs-decode"),
        ({"cuda_graph_max_bs": 64}, "--cuda-graph-max-bs"),
    ):
        ev = dg.Evidence(decode=decode_frame(running, graph=graph), server_args=args)
        out = dg.rule_cuda_graph(ev)
        assert len(out) == 1
        assert "cuda graph: False on 10 of the 10 decode lines with running requests above 64" in out[0].evidence
        assert "above 64" in out[0].evidence and "reached 200" in out[0].evidence
        assert f"raise {flag} to about 200" in out[0].suggestion


def test_cuda_graph_quiet_when_graphs_cover_batches_or_are_off():
    ev = dg.Evidence(
        decode=decode_frame([32] * 20, graph=True), server_args={"cuda_graph_max_bs": 64}
    )
    assert dg.rule_cuda_graph(ev) == []
    off = dg.Evidence(
        decode=decode_frame([200] * 20, graph=False), server_args={"disable_cuda_graph": True}
    )
    assert dg.rule_cuda_graph(off) == []


def test_cuda_graph_infers_max_bs_from_lines_when_unset():
    running = [16] * 10 + [128] * 10
    ev = dg.Evidence(decode=decode_frame(running, graph=[True] * 10 + [False] * 10))
    out = dg.rule_cuda_graph(ev)
    assert out and "largest batch that ran with a graph" in out[0].evidence


# ------------------------------------------------------------------------------------------
# GPU under-used
# ------------------------------------------------------------------------------------------


def test_gpu_underused_fires_at_low_power():
    s = sweep_frame([64, 256], [860, 880], [300, 12000])
    ev = dg.Evidence(sweep=s, gpu=gpu_frame(s, power=83, util=35))
    out = dg.rule_gpu_underused(ev)
    assert len(out) == 1
    ev_text = out[0].evidence
    assert "concurrency 256" in ev_text and "880 tok/s" in ev_text
    assert (
        "83 W of 600 W" in ev_text
        and "(14% of the limit" in ev_text
        and "35% utilisation" in ev_text
    )
    assert out[0].confidence == pytest.approx(0.7)


def test_gpu_underused_quiet_when_busy():
    s = sweep_frame([64, 256], [2000, 3700], [300, 900])
    ev = dg.Evidence(sweep=s, gpu=gpu_frame(s, power=520, util=97))
    assert dg.rule_gpu_underused(ev) == []


def test_gpu_underused_skips_without_telemetry():
    ev = dg.Evidence(sweep=sweep_frame([64], [800], [100]))
    assert dg.rule_gpu_underused(ev) == []
    assert any(s.startswith("gpu_underused") for s in ev.skipped)


# ------------------------------------------------------------------------------------------
# client-bound
# ------------------------------------------------------------------------------------------


def test_client_bound_fires_with_client_numbers():
    s = sweep_frame(
        [64, 1024],
        [800, 900],
        [100, 200],
        client_bound=[False, True],
        client_cpu_pct=[30.0, 99.0],
        loop_lag_p99_ms=[2.0, 85.0],
    )
    out = dg.rule_client_bound(dg.Evidence(sweep=s))
    assert len(out) == 1
    assert "1 of 2 levels" in out[0].evidence
    assert "concurrency 1024 (client CPU 99%, event-loop lag p99 85 ms)" in out[0].evidence


def test_client_bound_quiet_when_no_level_flagged():
    assert dg.rule_client_bound(dg.Evidence(sweep=sweep_frame([64], [800], [100]))) == []


# ------------------------------------------------------------------------------------------
# crashes
# ------------------------------------------------------------------------------------------


def errors_frame(kind, message):
    return pd.DataFrame(
        {
            "time": [pd.Timestamp("2026-01-01 10:00:00")] * 2,
            "rank": ["TP0", "TP1"],
            "kind": [kind, "sigquit"],
            "message": [message, "Received sigquit from a child process."],
            "text": [message, ""],
        }
    )


@pytest.mark.parametrize(
    "kind,message,rule,words",
    [
        (
            "nan",
            "Detected errors during sampling! NaN in the logits.",
            "crash:nan",
            ["attention-backend", "flashinfer"],
        ),
        (
            "oom",
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
            "crash:oom_pool",
            ["raise --mem-fraction-static"],
        ),
        (
            "oom",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "crash:oom",
            ["lower --mem-fraction-static"],
        ),
        (
            "nccl",
            "RuntimeError: NCCL error: unhandled system error",
            "crash:nccl",
            ["P2P", "IOMMU", "LXC"],
        ),
    ],
)
def test_crash_rules_fire_with_cause_specific_advice(kind, message, rule, words):
    ev = dg.Evidence(
        errors=errors_frame(kind, message), server_args={"attention_backend": "flashinfer"}
    )
    out = dg.rule_crashes(ev)
    assert [f.rule for f in out] == [rule]  # the accompanying sigquit is folded in
    assert "on 1 rank(s)" in out[0].evidence and message[:20] in out[0].evidence
    for w in words:
        assert w in out[0].suggestion


def test_crash_rule_quiet_without_errors_and_reports_failed_requests():
    assert dg.rule_crashes(dg.Evidence()) == []
    s = sweep_frame(
        [64, 256], [800, 700], [100, 200], failed=[0, 12], error_summary=["", "12x HTTP 503"]
    )
    out = dg.rule_crashes(dg.Evidence(sweep=s))
    assert [f.rule for f in out] == ["request_errors"]
    assert "12 failed requests: 12 at concurrency 256 (12x HTTP 503)" in out[0].evidence


# ------------------------------------------------------------------------------------------
# incompatibilities
# ------------------------------------------------------------------------------------------


def test_incompatibility_allreduce_fusion_on_sm120():
    ev = dg.Evidence(server_args=dict(BASELINE), environment=SM120_ENV)
    out = [f for f in dg.rule_incompatibilities(ev) if "allreduce-fusion" in f.rule]
    assert len(out) == 1
    assert (
        "compute capability 12.0" in out[0].evidence and "8x NVIDIA RTX PRO 6000" in out[0].evidence
    )
    assert "slower" in out[0].suggestion
    assert out[0].confidence == pytest.approx(0.85)


def test_incompatibility_quiet_on_other_gpu_or_flag_off():
    hopper = dict(
        SM120_ENV, gpus=[{"index": 0, "name": "NVIDIA H100", "compute_capability": "9.0"}] * 8
    )
    assert not [
        f
        for f in dg.rule_incompatibilities(
            dg.Evidence(server_args=dict(BASELINE), environment=hopper)
        )
        if "allreduce" in f.rule
    ]
    off = dict(BASELINE, enable_flashinfer_allreduce_fusion=False)
    assert dg.rule_incompatibilities(dg.Evidence(server_args=off, environment=SM120_ENV)) == []


def test_incompatibility_unchecked_without_environment_is_low_confidence():
    out = dg.rule_incompatibilities(dg.Evidence(server_args=dict(BASELINE)))
    assert [f.rule for f in out] == ["incompatibility:flashinfer-allreduce-fusion-sm120"]
    assert out[0].confidence == pytest.approx(0.3)
    assert "could not be checked" in out[0].evidence


def test_incompatibility_p2p_and_log_pattern_entries():
    no_p2p = dict(SM120_ENV, p2p=[["OK" if i == j else "CNS" for j in range(8)] for i in range(8)])
    args = dict(BASELINE, enable_flashinfer_allreduce_fusion=False)
    rules = [
        f.rule for f in dg.rule_incompatibilities(dg.Evidence(server_args=args, environment=no_p2p))
    ]
    assert rules == ["incompatibility:custom-allreduce-without-p2p"]
    p2p = dg.rule_incompatibilities(dg.Evidence(server_args=args, environment=no_p2p))[0]
    assert "GPU P2P not available on 28 of 28 pairs (status CNS)" in p2p.evidence
    ev = dg.Evidence(
        server_args=args,
        log_text="[2026-01-01 10:00:00] RuntimeError: CUDA error: initialization error\n",
    )
    out = dg.rule_incompatibilities(ev)
    assert [f.rule for f in out] == ["incompatibility:uvm-hmm-cuda-init"]
    assert "initialization error" in out[0].evidence and "uvm_disable_hmm=1" in out[0].suggestion


def test_incompatibility_file_is_well_formed():
    entries = dg.load_incompatibilities()
    assert len({e["id"] for e in entries}) == len(entries)
    for e in entries:
        assert e["source"] and e["rationale"] and 0 < e["severity"] <= 1
        assert e.get("when") or e.get("log_pattern")
        for field in e.get("when", {}):
            assert field in dg.load_impact(), f"{e['id']}: {field} not in the impact table"


# ------------------------------------------------------------------------------------------
# reference differences
# ------------------------------------------------------------------------------------------


def test_reference_diff_lists_unexplained_differences_in_rank_order():
    ev = dg.Evidence(
        decode=decode_frame([16, 32, 40] * 5, queue=0, usage=0.3),
        server_args=dict(BASELINE),
        reference_args=dict(REFERENCE),
        reference_label="the k2 reference",
    )
    out = dg.rule_reference_diff(ev)
    diffs = [f for f in out if f.rule == "reference_diff"]
    fields = [f.covers[0] for f in diffs]
    assert fields[0] == "attention_backend"
    assert "disable_cuda_graph" in fields and "enable_flashinfer_allreduce_fusion" in fields
    assert "max_running_requests" not in fields  # cap never reached: ruled out
    ruled = [f for f in out if f.rule == "reference_diff_ruled_out"]
    assert ruled and "never reached (running requests at most 40 of 64)" in ruled[0].evidence
    sev = [f.severity for f in diffs]
    assert sev == sorted(sev, reverse=True)
    assert "try --attention-backend triton" in diffs[0].suggestion


def test_reference_diff_quiet_without_reference():
    ev = dg.Evidence(server_args=dict(BASELINE))
    assert dg.rule_reference_diff(ev) == []
    assert any("no reference" in s for s in ev.skipped)


def test_evaluate_orders_findings_and_folds_covered_differences():
    ev = cap_evidence(reference_args=dict(REFERENCE), reference_label="ref", environment=SM120_ENV)
    frame = dg.evaluate(ev)
    assert list(frame.columns) == dg.FINDING_COLUMNS
    assert frame.iloc[0]["rule"] == "concurrency_cap"
    assert list(frame["score"]) == sorted(frame["score"], reverse=True)
    diff_fields = frame[frame["rule"] == "reference_diff"]["finding"]
    assert not diff_fields.str.contains(
        "max_running_requests"
    ).any()  # explained by the cap finding
    assert not diff_fields.str.contains(
        "enable_flashinfer_allreduce_fusion"
    ).any()  # by the incompatibility
    crashed = dg.evaluate(cap_evidence(errors=errors_frame("nan", "NaN in the logits")))
    assert crashed.iloc[0]["rule"] == "crash:nan"


# ------------------------------------------------------------------------------------------
# capacity model
# ------------------------------------------------------------------------------------------


def synthetic_decode(seed=0, noise=0.02, outliers=0):
    rng = np.random.default_rng(seed)
    b = rng.integers(1, 257, 200)
    t = b * rng.uniform(300, 600, 200)
    step = 20.0 + 0.15 * b + 0.05 * t / 1000
    step = step * (1 + rng.normal(0, noise, 200))
    thr = b * 1000 / step
    thr[:outliers] = thr[:outliers] / 50  # first line after an idle gap
    return decode_frame(list(b), thr=list(thr), tokens=list(t))


def test_recommend_running_cap():
    r = dg.recommend_running_cap(200_000, 512, target_concurrency=1024)
    assert r.kv_bound == 351 and r.value == 344  # 0.9 * 200000 / 512, rounded down to a multiple of 8
    r = dg.recommend_running_cap(1_000_000, 512, target_concurrency=256)
    assert r.value == 256 and "highest offered concurrency is 256" in r.reason
    assert dg.recommend_running_cap(None, None).value is None
    with pytest.raises(ConfigError):
        dg.recommend_running_cap(1000, 10, headroom=1.5)

def test_diagnose_folder_without_log_writes_findings(tmp_path):
    phase = tmp_path / "run" / "baseline"
    phase.mkdir(parents=True)
    # the client flagged itself at 256 while busy (90% of a core): saturated, so it is a cause
    s = sweep_frame([64, 256], [860, 880], [300, 12000], client_bound=[False, True], client_cpu_pct=[20.0, 90.0])
    s.to_csv(phase / "sweep.csv", index=False)
    gpu_frame(s, power=83, util=30).to_csv(phase / "gpu.csv", index=False)
    frame = dg.diagnose(tmp_path / "run")
    assert set(rules_of(frame)) == {"client_bound", "gpu_underused", "saturation"}
    sat = frame.set_index("rule").loc["saturation"]
    assert "could not be ruled out" in sat["evidence"] and sat["confidence"] == pytest.approx(0.35)
    written = pd.read_csv(phase / "findings.csv")
    assert list(written["rule"]) == list(frame["rule"])
    assert any("server.log missing" in s for s in frame.attrs["skipped"])


def test_diagnose_bad_folders(tmp_path):
    with pytest.raises(DiagnosisError, match="does not exist"):
        dg.diagnose(tmp_path / "nope")
    with pytest.raises(DiagnosisError, match="not a run folder"):
        dg.diagnose(tmp_path)
    for p in ("baseline", "fix"):
        (tmp_path / p).mkdir()
        sweep_frame([1], [1], [1]).to_csv(tmp_path / p / "sweep.csv", index=False)
    with pytest.raises(DiagnosisError, match="several phases"):
        dg.diagnose(tmp_path)
    assert dg.diagnose(tmp_path, phase="fix", write=False).empty


def test_cli_diff_and_diagnose(tmp_path, capsys):
    from glm5lib.cli import main

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(BASELINE))
    b.write_text(json.dumps(REFERENCE))
    assert main(["diff", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[1].split()[0] == "max_running_requests"
    assert "30000" not in out  # port: hidden unless --all
    assert main(["diff", str(a), str(b), "--all"]) == 0
    assert "30000" in capsys.readouterr().out
    s = sweep_frame([64, 256], [860, 880], [300, 12000], client_bound=[False, True], client_cpu_pct=[20.0, 90.0])
    s.to_csv(tmp_path / "sweep.csv", index=False)
    assert main(["diagnose", str(tmp_path), "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "1. load generator was the bottleneck" in out and "Not checked:" in out
    assert not (tmp_path / "findings.csv").exists()
    assert main(["diagnose", str(tmp_path / "missing")]) == 1


def test_kv_capacity_fires_when_requests_queue_below_the_cap_at_high_usage():
    ev = dg.Evidence(
        decode=decode_frame([448] * 20, queue=400, usage=0.89),
        startup={"max_running_requests": 2048, "max_total_num_tokens": 198_734},
    )
    out = dg.rule_kv_capacity(ev)
    assert len(out) == 1
    assert "on 100% of decode lines requests queued (queued requests averaging 400)" in out[0].evidence
    assert "below the cap of 2048" in out[0].evidence
    # the same queue at the cap is the concurrency cap's signature, not KV's
    at_cap = dg.Evidence(
        decode=decode_frame([64] * 20, queue=400, usage=0.89), startup={"max_running_requests": 64}
    )
    assert dg.rule_kv_capacity(at_cap) == []


# ------------------------------------------------------------------------------------------
# the shipped K2-Thinking reference
# ------------------------------------------------------------------------------------------


def test_reference_log_matches_the_published_facts():
    from glm5lib.logs import parse_bench_result, parse_log

    ref = dg.reference_dir("k2-thinking")
    log = parse_log(ref / "server.log")
    assert log.skipped == 0 and log.ready_at is not None and log.errors.empty
    args = log.server_args
    assert args["model_path"] == "nvidia/Kimi-K2-Thinking-NVFP4" and args["tp_size"] == 8
    assert args["max_running_requests"] == 2048 and args["attention_backend"] == "triton"
    assert args["disable_cuda_graph"] is True and args["page_size"] == 1
    assert args["moe_runner_backend"] == "auto" and args["fp4_gemm_runner_backend"] == "auto"
    assert args["enable_flashinfer_allreduce_fusion"] is False
    assert log.decode["gen_throughput"].max() == pytest.approx(5816.3)
    assert not log.decode["cuda_graph"].astype(bool).any()
    assert log.startup["max_total_num_tokens"] == 198_734
    jsonl = parse_bench_result(ref / "bench_results.jsonl")
    printed = parse_bench_result(ref / "bench_results.txt")
    assert list(jsonl["max_concurrency"]) == [64, 128, 256, 512, 1024]
    assert list(printed["output_throughput"]) == pytest.approx(
        list(jsonl["output_throughput"]), abs=0.01
    )
    sweep = pd.read_csv(ref / "sweep.csv")
    assert list(sweep["output_throughput"]) == list(jsonl["output_throughput"])
    assert "reconstruct" in (ref / "README.md").read_text().lower()


def test_reference_diff_of_glm5_baseline_puts_the_cap_first():
    diff = dg.diff_configs("glm5-baseline", "k2-thinking", hide_irrelevant=True)
    order = list(diff["field"])
    assert order[0] == "max_running_requests"
    assert order.index("attention_backend") < order.index("enable_flashinfer_allreduce_fusion")
    assert order.index("disable_cuda_graph") < order.index("page_size")
    # "None = automatic" differences rank after definite ones of the same class
    high = diff[diff["impact"] == "high"]
    assert list(high["field"]).index("mem_fraction_static") > list(high["field"]).index(
        "disable_cuda_graph"
    )


def test_reference_run_is_kv_bound_not_capped():
    frame = dg.diagnose(dg.reference_dir("k2-thinking"), write=False)
    assert "concurrency_cap" not in set(frame["rule"])
    assert frame.iloc[0]["rule"] == "kv_capacity"


def test_saturation_fires_below_cap_and_kv_and_splits_the_step():
    from glm5lib.logs import to_epoch

    # step = 60 ms fixed + 0.02 ms per request: overhead-dominated; 256 run at 1,024 offered
    running = [32] * 10 + [256] * 20
    thr = [b * 1000 / (60 + 0.02 * b) for b in running]
    decode = decode_frame(running, queue=[0] * 10 + [10] * 20, usage=0.4, thr=thr)
    t = to_epoch(decode["time"])
    sweep = sweep_frame([32, 256, 1024], [32000 / 60.64, 3900, 4100], [100, 300, 2500])
    sweep["start_time"] = [t.iloc[0] - 1, t.iloc[10] - 0.5, t.iloc[20] - 0.5]
    sweep["end_time"] = [t.iloc[9] + 0.5, t.iloc[19] + 0.1, t.iloc[29] + 1]
    ev = dg.Evidence(decode=decode, sweep=sweep, startup={"max_running_requests": 1024})
    out = dg.rule_saturation(ev)
    assert len(out) == 1
    assert "256 to 1024 output throughput moved only 3,900 -> 4,100" in out[0].evidence
    assert "running requests reached 256 of a cap of 1024" in out[0].evidence
    fixed = re.search(r"the fixed part is (\d+)% of a ([\d.]+) ms step", out[0].evidence)
    assert fixed and 85 <= int(fixed.group(1)) <= 95 and 60 < float(fixed.group(2)) < 70, out[0].evidence
    assert "per-step overhead" in out[0].suggestion


def test_saturation_does_not_blame_kernels_for_steps_that_ran_eagerly():
    from glm5lib.logs import to_epoch

    running = [200] * 10 + [1000] * 10
    decode = decode_frame(running, queue=0, usage=0.3, thr=[20000.0] * 10 + [12000.0] * 10,
                          graph=[True] * 10 + [False] * 10)
    t = to_epoch(decode["time"])
    sweep = sweep_frame([256, 1024], [11600, 12000], [300, 2000])
    sweep["start_time"] = [t.iloc[0] - 1, t.iloc[10] - 0.5]
    sweep["end_time"] = [t.iloc[9] + 0.5, t.iloc[19] + 1]
    ev = dg.Evidence(decode=decode, sweep=sweep, startup={"max_running_requests": 1024},
                     server_args={"cuda_graph_max_bs": 256})
    [out] = dg.rule_saturation(ev)
    assert "ran without a CUDA graph" in out.evidence and "ran eagerly" in out.suggestion
    assert "kernels are the limit" not in out.suggestion


def test_saturation_quiet_when_throughput_scales_or_cap_explains():
    scaling = dg.Evidence(sweep=sweep_frame([256, 512, 1024], [1950, 2800, 3740], [300, 500, 900]))
    assert dg.rule_saturation(scaling) == []
    assert dg.rule_saturation(cap_evidence()) == []


def test_diff_accepts_server_config_and_server_log_objects():
    from glm5lib.engines.sglang.config import ServerConfig
    from glm5lib.logs import parse_log

    baseline = ServerConfig.load("glm5-baseline")
    log = parse_log(dg.reference_dir("k2-thinking") / "server.log")
    diff = dg.diff_configs(baseline, log, hide_irrelevant=True)
    assert diff.iloc[0]["field"] == "max_running_requests"
    same = dg.diff_configs(baseline, baseline.with_changes(port=31000), hide_irrelevant=True)
    assert same.empty


def test_cli_capacity_fits_the_performance_model_on_the_reference(capsys):
    from glm5lib.cli import main

    assert main(["diagnose", str(dg.reference_dir("k2-thinking")), "--no-write", "--capacity"]) == 0
    out = capsys.readouterr().out
    assert "Performance model: " in out and "step = " in out and "running cap" in out
    assert "recommended --max-running-requests: " in out
    assert "198,734-token KV pool" in out

def test_concurrency_cap_quotes_the_level_above_the_cap_when_clocks_align():
    from glm5lib.logs import to_epoch

    running = [16] * 10 + [64] * 20
    queue = [0] * 10 + [190] * 20
    decode = decode_frame(running, queue=queue, usage=0.2)
    t = to_epoch(decode["time"])
    sweep = sweep_frame([16, 256], [600, 880], [150, 9000])
    sweep.loc[0, ["start_time", "end_time"]] = [t.iloc[0] - 1, t.iloc[9] + 0.5]
    sweep.loc[1, ["start_time", "end_time"]] = [t.iloc[10] - 0.5, t.iloc[29] + 1]
    ev = dg.Evidence(decode=decode, sweep=sweep, server_args={"max_running_requests": 64})
    out = dg.rule_concurrency_cap(ev)
    assert out[0].evidence.startswith(
        "at concurrency 256 running requests stayed at 64 on 100% of its 20 decode lines while queued requests averaged 190; "
        "over the whole log running requests stayed at 64 on 67% of decode lines"
    )


def test_diff_reads_json_of_another_release_and_a_run_root(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"server_args": dict(BASELINE, some_future_flag=3)}))
    diff = dg.diff_configs(other, BASELINE)
    assert list(diff["field"]) == ["some_future_flag"]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        dg.diff_configs(bad, BASELINE)
    phase = tmp_path / "run" / "baseline"
    phase.mkdir(parents=True)
    (phase / "config.json").write_text(json.dumps({"server_args": BASELINE}))
    assert dg.diff_configs(tmp_path / "run", REFERENCE).iloc[0]["field"] == "max_running_requests"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="not a run folder"):
        dg.diff_configs(tmp_path / "run", empty)


def test_a_different_draft_model_is_a_setting_to_rank_not_context():
    # Speculative decoding's draft model is a throughput lever, though its name ends in _path;
    # the served model and files stay context, and a count named *_per_path is a setting.
    cur = {"model_path": "zai-org/GLM-5", "speculative_algorithm": "EAGLE",
           "speculative_draft_model_path": "org/glm5-eagle-small", "tokenizer_path": "tok-a",
           "mamba_max_states_per_path": -1}
    ref = {"model_path": "moonshotai/Kimi-K2-Thinking", "speculative_algorithm": "EAGLE",
           "speculative_draft_model_path": "org/glm5-eagle-large", "tokenizer_path": "tok-b",
           "mamba_max_states_per_path": 4}
    diff = dg.diff_configs(cur, ref, hide_irrelevant=True)
    rows = diff.set_index("field")
    assert rows.loc["speculative_draft_model_path", "kind"] == "setting"
    assert rows.loc["speculative_draft_model_path", "impact"] == "medium"
    assert "draft model" in rows.loc["speculative_draft_model_path", "rationale"]
    assert rows.loc["mamba_max_states_per_path", "kind"] == "setting"
    context = {row["field"] for row in diff.attrs["context"]}
    assert context == {"model_path", "tokenizer_path"}
    # vLLM names the whole speculative setup in one JSON argument
    vllm = dg.diff_configs({"engine": "vllm", "speculative_config": {"method": "eagle", "model": "a"}},
                           {"engine": "vllm", "speculative_config": {"method": "eagle", "model": "b"}})
    assert vllm.set_index("field").loc["speculative_config", ["kind", "impact"]].tolist() == ["setting", "high"]
