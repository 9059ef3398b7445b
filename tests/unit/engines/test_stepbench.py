"""The engines' offline step benchmarks: the command each builds for a phase, and its output read.

SGLang's ``bench_one_batch`` prints per point (the f-strings of ``sglang/bench_one_batch.py``, the
same in 0.5.4-0.5.23 by a reading of each wheel's source; ``sglang.benchmark.one_batch`` from 0.5.15)::

    Prefill. latency: {prefill_latency:6.5f} s, throughput: {throughput:9.2f} token/s
    Decode {i}. Batch size: {batch_size}, latency: {latency:6.5f} s, throughput: {throughput:9.2f} token/s
    Decode.  median latency: {med_decode_latency:6.5f} s, median throughput: {med_decode_throughput:9.2f} token/s
    Total. latency: {tot_latency:6.3f} s, throughput: {throughput:9.2f} token/s

after a warm-up point printed the same way before ``Benchmark ...``. The fixture below is written in
those formats (no GPU here to run it); the stand-in's benchmark, which prints them too, is run for real.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from glm5lib import engines, stepbench
from glm5lib.engines.sglang.config import ServerConfig, decode_graph_sizes
from glm5lib.engines.sglang.stepbench import bench_command, bench_module, parse_bench_output
from glm5lib.engines.vllm import stepbench as vbench
from glm5lib.sim import bench as sim_bench

EXAMPLES = Path(__file__).resolve().parents[3] / "data" / "examples"

SGLANG_0_5_16 = """\
[2026-12-04 17:45:22] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160, 168, 176, 184, 192, 200, 208, 216, 224, 232, 240, 248, 256], avail mem=26.16 GB
max_total_num_tokens=2111732
Warmup ...
Prefill. latency: 0.02100 s, throughput:  12190.48 token/s
Decode 0. Batch size: 1, latency: 0.00219 s, throughput:    456.62 token/s
Decode.  median latency: 0.00215 s, median throughput:    465.12 token/s
Total. latency:  0.088 s, throughput:   3272.73 token/s
Benchmark ...
Prefill. latency: 0.01400 s, throughput:  18285.71 token/s
Decode 0. Batch size: 1, latency: 0.00220 s, throughput:    454.55 token/s
Decode 1. Batch size: 1, latency: 0.00214 s, throughput:    467.29 token/s
Decode.  median latency: 0.00215 s, median throughput:    465.12 token/s
Total. latency:  0.565 s, throughput:    906.19 token/s
Prefill. latency: 0.31000 s, throughput:  52851.61 token/s
Decode 0. Batch size: 64, latency: 0.00580 s, throughput:  11034.48 token/s
Decode.  median latency: 0.00572 s, median throughput:  11188.81 token/s
Total. latency:  1.769 s, throughput:  18522.33 token/s
skipping (8192, 256, 256) due to max batch size limit
Prefill. latency: 4.21000 s, throughput:  62268.88 token/s
Decode 0. Batch size: 1024, latency: 0.08700 s, throughput:  11770.11 token/s
Decode.  median latency: 0.08400 s, median throughput:  12190.48 token/s
Total. latency: 25.630 s, throughput:  20456.87 token/s
"""


def test_sglangs_output_is_read_point_by_point_after_the_warm_up():
    rows = parse_bench_output(SGLANG_0_5_16)
    assert [r["batch"] for r in rows] == [1, 64, 1024]
    assert [r["step_ms"] for r in rows] == pytest.approx([2.15, 5.72, 84.0])
    assert rows[0]["prefill_ms"] == pytest.approx(14.0)
    # up to the largest captured size a step replays a graph; above it, eagerly
    assert [r["graphs"] for r in rows] == [True, True, False]
    assert all(r["graphs"] is False for r in parse_bench_output(SGLANG_0_5_16, graphs_off=True))


def test_sglangs_command_runs_the_phases_flags_with_the_cap_raised_to_the_batch():
    config = ServerConfig(model_path="/m", max_running_requests=64, attention_backend="triton",
                          release="0.5.9", port=30000)
    argv = bench_command(config, [1, 64, 1024], 256, 256, graphs_off=True, python="py")
    assert argv[:3] == ["py", "-m", "sglang.bench_one_batch"]
    text = " ".join(argv)
    assert "--max-running-requests 1024" in text and "--model-path /m" in text and "--port" not in text
    assert "--disable-cuda-graph" in text and "--batch-size 1 64 1024 --input-len 256 --output-len 256" in text
    # the module moved in 0.5.15 and the old one is gone in 0.5.21
    assert bench_module("0.5.9") == "sglang.bench_one_batch" and bench_module("0.5.23") == "sglang.benchmark.one_batch"
    with pytest.raises(ValueError):
        bench_command(config, [], 256, 256)


def test_the_stand_ins_benchmark_prints_sglangs_format_and_says_what_it_is():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert sim_bench.main(["--model-path", "glm5", "--tp-size", "8", "--max-running-requests", "2048",
                               "--batch-size", "1", "64", "1024", "--input-len", "256", "--output-len", "16"]) == 0
    text = out.getvalue()
    assert text.splitlines()[0].startswith("glm5lib stand-in bench_one_batch (not SGLang)")
    rows = parse_bench_output(text)
    assert [r["batch"] for r in rows] == [1, 64, 1024]
    # its profile's graph ceiling: a step of 1,024 runs eagerly, a step of 64 replays a graph
    assert rows[1]["graphs"] is True and rows[2]["graphs"] is False
    assert rows[0]["step_ms"] < rows[1]["step_ms"] < rows[2]["step_ms"]
    assert engines.get("sim").step_benchmark.command(ServerConfig(tp_size=8), [64], 256, 16)[2] == "glm5lib.sim.bench"


def test_vllms_command_passes_the_engine_flags_and_its_output_is_json_lines():
    argv = vbench.bench_command({"model": "m", "max_num_seqs": 4, "host": "127.0.0.1", "enforce_eager": False},
                                [4, 64], 32, 64, python="py")
    assert argv[0] == "py" and argv[1].endswith("step_bench_main.py")
    cut = argv.index("--")
    assert argv[2:cut] == ["--batch-size", "4", "64", "--input-len", "32", "--output-len", "64"]
    assert argv[cut + 1:] == ["--model", "m", "--max-num-seqs", "4"]  # no server flag, no switch left off
    assert "--enforce-eager" in vbench.bench_command({"model": "m"}, [4], 32, 64, graphs_off=True)
    text = "\n".join([json.dumps({"engine": "vllm", "version": "0.32.0"}), "INFO some log line",
                      json.dumps({"batch": 4, "step_ms": 1.8, "prefill_ms": 6.1, "total_ms": 110.0})])
    assert vbench.parse_bench_output(text) == [{"batch": 4, "step_ms": 1.8, "prefill_ms": 6.1, "total_ms": 110.0,
                                                "graphs": None}]


def test_sglangs_graph_schedule_is_its_documented_one():
    assert decode_graph_sizes(64) == [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]
    sizes = decode_graph_sizes(512)
    assert sizes[sizes.index(256) + 1] == 272 and sizes[-2:] == [496, 512]
    assert decode_graph_sizes(300)[-1] == 300  # the ceiling itself is captured (0.5.12 on)
    # trimmed to the request pool, whose size is captured too
    assert engines.get("sglang").graph_sizes(256, 100)[-3:] == (88, 96, 100)


def test_sglangs_benchmark_pool_holds_the_largest_batch_and_leaves_the_rest_to_its_one_pass_prefill():
    """bench_one_batch prefills a whole batch in one pass: on one H100 the pool at its default size
    left 3.9 GiB for 1,024 x 256 tokens and the fused MoE asked for 6 (baseline/step-profile-1024.log
    of data/examples/h100-sglang-next). The pool is capped at the largest batch's sequences."""
    config = ServerConfig(model_path="/m", max_running_requests=64, release="0.5.16")
    argv = bench_command(config, [1, 64, 1024], 256, 256)
    tokens = int(argv[argv.index("--max-total-tokens") + 1])
    assert 1024 * 512 <= tokens <= 1.25 * 1024 * 512
    # a pool the deployment capped lower is raised to hold the batch: the benchmark allocates it
    # whole, and a forecast that raises the pool asks for batches the old pool never held
    argv = bench_command(config.with_changes(max_total_tokens=100000), [1024], 256, 256)
    assert int(argv[argv.index("--max-total-tokens") + 1]) == tokens
    # a larger pool is trimmed to what the largest batch needs
    argv = bench_command(config.with_changes(max_total_tokens=10_000_000), [16], 256, 256)
    assert argv[argv.index("--max-total-tokens") + 1] == str(stepbench_kv(16, 256, 256, 1))


def test_a_failed_benchmark_names_its_cause_from_its_own_lines():
    text = (EXAMPLES / "h100-sglang-next" / "baseline" / "step-profile-1024.log").read_text()
    kind, line = stepbench.failure_cause(text)
    assert kind == "oom" and "CUDA out of memory. Tried to allocate 6.00 GiB" in line
    assert stepbench.failure_cause("Traceback\nModuleNotFoundError: No module named 'sglang'\n")[0] == "not_installed"
    assert stepbench.failure_cause("all fine\n") == (None, "")



def test_a_change_being_forecast_sets_the_benchmarks_graph_ceiling_even_at_the_cap():
    """The logged arguments' ceiling equal to the cap reads as one a release clamped and is dropped;
    a change's ceiling is the change's, and stays (SGLang 0.5.23 reads sizes like ``64k`` too)."""
    args = {"model_path": "/m", "max_running_requests": 512, "cuda_graph_max_bs": 256, "page_size": 64,
            "max_total_tokens": "64k"}
    argv = bench_command(args, [512], 16, 16, changes={"cuda_graph_max_bs": 512})
    assert argv[argv.index("--cuda-graph-max-bs") + 1] == "512"
    # each request's sequence rounds up to whole pages: 32 tokens take one page of 64
    assert int(argv[argv.index("--max-total-tokens") + 1]) == stepbench_kv(512, 16, 16, 64) >= 512 * 64
    # a pool the deployment capped lower, in SGLang's own spelling, still holds the batch
    argv = bench_command({**args, "max_total_tokens": "20k"}, [512], 16, 16)
    assert int(argv[argv.index("--max-total-tokens") + 1]) == stepbench_kv(512, 16, 16, 64)


def stepbench_kv(batch, i, o, page):
    from glm5lib.engines.sglang.stepbench import kv_tokens_needed

    return kv_tokens_needed(batch, i, o, page)


def test_a_passing_mention_of_a_missing_module_is_not_the_cause():
    text = "No module named 'helion'\nloading...\nCUDA error: an illegal memory access was encountered\nexit\n"
    assert stepbench.failure_cause(text) == (None, "")
    assert stepbench.failure_cause("Traceback\nModuleNotFoundError: No module named 'sglang'\n")[0] == "not_installed"


def test_profiles_merge_by_batch_and_kind_of_step_for_the_same_workload(tmp_path):
    import pandas as pd

    path = tmp_path / "step-profile.csv"
    cols = stepbench.PROFILE_COLUMNS
    old = pd.DataFrame([{"batch": 256, "step_ms": 9.0, "graphs": None, "input_len": 32, "output_len": 64},
                        {"batch": None, "step_ms": 1.0, "graphs": None, "input_len": 32, "output_len": 64},
                        {"batch": 64, "step_ms": 5.0, "graphs": None, "input_len": 128, "output_len": 64}])
    old.reindex(columns=cols).to_csv(path, index=False)
    new = pd.DataFrame([{"batch": 1024, "step_ms": 30.0, "graphs": None, "input_len": 32, "output_len": 64}]).reindex(
        columns=cols)
    merged = stepbench._merged(path, new)
    # vLLM's steps have no graphs figure: the older 256 stays; the unreadable row and another workload's go
    assert sorted(merged["batch"].astype(int)) == [256, 1024]
    again = stepbench._merged(path, new.assign(batch=256, step_ms=10.0))
    assert list(again["batch"].astype(int)) == [256] and float(again["step_ms"].iloc[0]) == 10.0
