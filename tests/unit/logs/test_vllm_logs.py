"""Tests for glm5lib.engines.vllm.log: real vLLM log lines of every generation into SGLang's tables."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from glm5lib import logs
from glm5lib.engines.vllm import log as vlog

FIXTURES = Path(__file__).parents[2] / "fixtures" / "vllm"


def parse(name: str, engine: str = "vllm"):
    return logs.parse_log(FIXTURES / name, engine=engine, date="2025-01-01")


def test_every_fixture_is_listed_with_its_source():
    readme = (FIXTURES / "README.md").read_text()
    for path in FIXTURES.glob("*.log"):
        assert f"`{path.name}`" in readme, path.name
    assert readme.count("https://github.com/") >= 15


@pytest.mark.parametrize(
    ("name", "running", "queued", "usage", "gen"),
    [
        ("v0-metrics-0.3.log", [2], [3], [0.821], [44.9]),  # no bracket, no trailing period
        ("v0-metrics-0.6.log", [1, 1, 1], [0, 0, 0], [0.020, 0.021, 0.021], [41.7, 41.7, 41.5]),  # trailing period
        ("v0-metrics-tt.log", [16, 16], [0, 0], [0.921, 0.927], [16.7, 16.7]),
        ("v0-custom-format.log", [1], [0], [0.002], [0.1]),
        ("v1-loggers-mtp.log", [18, 18, 18], [43, 42, 33], [0.959, 0.955, 0.877], [1055.3, 1226.3, 734.9]),
        ("v1-loggers-container-timestamps.log", [9, 9], [0, 1], [0.628, 0.688], [4.8, 7.2]),
        ("v1-loggers-mm-cache.log", [0, 0], [0, 0], [0.0, 0.0], [0.1, 0.0]),
        ("v1-loggers-queue.log", [10, 16], [90, 84], [0.193, 0.309], [18.1, 35.4]),
        ("cpu-capped.log", None, None, None, None),
    ],
)
def test_stats_lines_of_every_generation_fill_the_decode_table(name, running, queued, usage, gen):
    slog = logs.parse_log(FIXTURES / name)  # told apart from SGLang by its own lines
    d = slog.decode
    assert list(d.columns[:8]) == ["time", "rank", "running_req", "num_token", "token_usage", "cuda_graph",
                                   "gen_throughput", "queue_req"]
    assert d["time"].notna().all() and (d["rank"] == "").all()
    if running is None:  # the CPU run: 4 running at the cap while 60 wait
        assert d["running_req"].max() == 4 and d["queue_req"].max() == 60
        assert ((d["running_req"] == 4) & (d["queue_req"] > 0)).sum() >= 3
        return
    assert d["running_req"].tolist() == running
    assert d["queue_req"].tolist() == queued
    assert d["token_usage"].round(4).tolist() == usage
    assert d["gen_throughput"].tolist() == gen
    assert "prompt_throughput" in d


def test_v0_line_keeps_swapped_and_cpu_pool_apart_from_the_gpu_pool():
    d = parse("v0-metrics-0.3.log").decode
    row = d.iloc[0]
    assert row["swapped_req"] == 0 and row["cpu_token_usage"] == 0.0 and row["token_usage"] == pytest.approx(0.821)
    assert row["time"] == pd.Timestamp("2025-02-28 21:48:18")  # vLLM prints no year: the date given says it


def test_v1_cpu_build_names_its_pool_cpu_and_it_is_the_pool():
    d = logs.parse_log(FIXTURES / "cpu-capped.log").decode
    assert "cpu_token_usage" not in d and d["token_usage"].notna().all()
    assert d["prompt_throughput"].max() > 0 and d["cache_hit_rate"].notna().all()


def test_custom_format_and_v0_prefix_cache_line():
    d = parse("v0-custom-format.log").decode
    assert d["time"].iloc[0] == pd.Timestamp("2025-07-08 17:24:00")
    assert d["cache_hit_rate"].iloc[0] == pytest.approx(0.5222)


def test_v1_extra_keys_become_columns_and_container_timestamps_give_the_year():
    d = parse("v1-loggers-mm-cache.log").decode
    assert d["mm_cache_hit_rate"].tolist() == [pytest.approx(0.121)] * 2
    assert parse("v1-loggers-mm-cache.log").http["path"].tolist() == ["/metrics"]
    d = parse("v1-loggers-container-timestamps.log").decode
    assert d["time"].iloc[0] == pd.Timestamp("2026-05-12 08:01:39")
    assert d["prompt_throughput"].iloc[0] == 6335.3


def test_data_parallel_engines_are_ranks():
    lines = [
        "(APIServer pid=1) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        "Avg generation throughput: 10.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%, "
        "Prefix cache hit rate: 0.0%",
        "(APIServer pid=1) INFO 05-19 10:13:11 [loggers.py:271] Engine 001: Avg prompt throughput: 0.0 tokens/s, "
        "Avg generation throughput: 20.0 tokens/s, Running: 5 reqs, Waiting: 2 reqs, GPU KV cache usage: 7.0%, "
        "Preemptions: 2, Prefix cache hit rate: 0.0%",
    ]
    slog = logs.parse_log("\n".join(lines) + "\n")
    assert slog.decode["rank"].tolist() == ["DP0", "DP1"]
    assert slog.decode["engine"].tolist() == [0, 1]
    # V1 reports preemptions per interval on the stats line: they are retractions
    assert slog.retractions["retracted_reqs"].tolist() == [2]


def test_preemption_warning_is_a_retraction():
    r = parse("v0-preemption.log").retractions
    assert r["retracted_reqs"].tolist() == [1]
    assert r["preemption_mode"].iloc[0] == "recompute" and r["cumulative_preemptions"].iloc[0] == 101
    assert list(r.columns[:5]) == ["time", "rank", "retracted_reqs", "new_token_ratio_before", "new_token_ratio_after"]


def test_startup_facts_land_where_sglang_puts_them():
    s = parse("v1-startup-kv-tokens.log").startup
    assert s["max_total_num_tokens"] == 2_042_016 and s["context_len"] == 2048 and s["max_concurrency"] == 997.08
    s = parse("v1-startup-kv-tokens-engine-core.log").startup
    assert s["max_total_num_tokens"] == 42_656 and s["max_concurrency"] == 1.3 and s["kv_cache_size_gb"] == 6.51
    s = parse("v1-startup-gpu-blocks.log").startup
    assert s["num_gpu_blocks"] == 127_626 and s["max_total_num_tokens"] == 127_626 * 16
    s = parse("v0-startup-gpu-blocks.log").startup
    assert s["num_gpu_blocks"] == 1478 and s["num_cpu_blocks"] == 2048 and s["max_concurrency"] == 0.82
    slog = parse("v0-startup-namespace.log")
    assert slog.startup["engine_version"].startswith("0.8.2") and slog.startup["max_running_requests"] == 8
    assert slog.server_args["max_num_seqs"] == 8 and slog.server_args["enable_prefix_caching"] is False


def test_cpu_run_startup_non_default_args_and_one_line_kv_size():
    slog = logs.parse_log(FIXTURES / "cpu-capped.log")
    assert slog.server_args["max_num_seqs"] == 4
    assert slog.startup["max_running_requests"] == 4  # the cap, read from vLLM's own log
    assert slog.startup["max_total_num_tokens"] == 2_097_152 and slog.startup["max_concurrency"] == 512.0
    assert slog.startup["engine_version"] == "0.32.0" and slog.ready and slog.errors.empty


@pytest.mark.parametrize(
    ("name", "kinds", "message"),
    [
        ("v1-error-cuda-oom.log", ["oom"], "torch.OutOfMemoryError: CUDA out of memory"),
        ("v0-error-oom-engine-dead.log", ["oom"], "MQEngineDeadError"),
        ("v1-error-engine-dead.log", ["engine_dead"], "EngineDeadError: EngineCore encountered an issue"),
        ("v1-error-engine-core-failed-to-start.log", ["engine_dead"], "EngineCore failed to start"),
        ("v0-error-nccl.log", ["nccl"], "RuntimeError: NCCL error: unhandled cuda error"),
        ("v1-error-nccl-dist-backend.log", ["nccl", "engine_dead"], "DistBackendError"),
    ],
)
def test_errors_are_classified(name, kinds, message):
    slog = parse(name)
    assert slog.errors["kind"].tolist() == kinds
    assert message in slog.errors["message"].iloc[0]
    assert slog.crash_cause() == kinds[0]
    assert set(kinds) <= set(logs.ERROR_KINDS)


def test_classify_single_lines():
    assert vlog.classify_vllm_fatal("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB") == "oom"
    assert vlog.classify_vllm_fatal("NCCL INFO Using network IB") is None
    assert vlog.classify_vllm_fatal("INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt throughput: 0.0") is None
    assert vlog.classify_vllm_fatal("Initializing a V1 LLM engine (v0.32.0) with config: model='m'") is None


def test_sglang_logs_are_not_taken_for_vllm():
    sglang_head = "[2026-01-01 10:00:00] server_args=ServerArgs(model_path='m', max_running_requests=64)\n"
    assert not vlog.looks_like_vllm(sglang_head)
    assert vlog.looks_like_vllm("(APIServer pid=1) INFO 12-01 04:00:56 [api_utils.py:286] non-default args: {'model': 'm'}")


def test_garbage_never_raises_and_a_follower_reads_a_growing_log(tmp_path):
    slog = logs.parse_log("Avg prompt throughput: x tokens/s, Running: reqs\n\x00\xff junk\n", engine="vllm")
    assert slog.decode.shape[0] == 1 and math.isnan(slog.decode["running_req"].iloc[0])
    text = (FIXTURES / "cpu-capped.log").read_text().splitlines(keepends=True)
    path = tmp_path / "server.log"
    path.write_text("".join(text[:5]))
    follower = logs.follow_log(path, engine="vllm")
    first = follower.update()
    with path.open("a") as fh:
        fh.write("".join(text[5:]))
    final = follower.finish()
    assert len(final.decode) > len(first.decode) and final.startup["max_running_requests"] == 4


def test_stopping_the_server_is_not_an_engine_death():
    """vLLM's API server reports EngineDeadError while it shuts down on SIGTERM: not a crash."""
    slog = logs.parse_log(FIXTURES / "cpu-raised.log")
    assert "EngineDeadError" in (FIXTURES / "cpu-raised.log").read_text()
    assert slog.errors.empty and slog.crash_cause() is None
    assert slog.decode["running_req"].max() > 4 and slog.startup["max_running_requests"] == 256


def test_vllm_metrics_land_in_sglangs_gauge_columns():
    from glm5lib.levels import metrics_per_level

    metrics = pd.read_csv(FIXTURES / "cpu-capped-metrics.csv")
    sweep = pd.read_csv(FIXTURES / "cpu-capped-sweep.csv")
    per_level = metrics_per_level(metrics, sweep).set_index("concurrency")
    assert per_level.loc[64, "max_num_running_reqs"] == 4  # vllm:num_requests_running, at the cap
    assert per_level.loc[64, "max_num_queue_reqs"] >= 50  # vllm:num_requests_waiting
    assert 0 <= per_level.loc[64, "max_token_usage"] < 0.01  # vllm:kv_cache_usage_perc, a fraction
    assert per_level.loc[64, "generation_tokens_per_s"] > 0  # vllm:generation_tokens_total
