"""Tests for glm5lib.logs: SGLang server logs and bench_serving output into tables.

Fixtures under tests/fixtures/logs/ are real excerpts (see SOURCES.md there); values asserted
here were read off those excerpts by eye.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glm5lib import cli, logs, masking
from glm5lib.engines.sglang import log as sglang
from glm5lib.logs import chunked, fatal
from glm5lib.logs import parse as log_parse
from glm5lib.logs import text as logtext

FIX = Path(__file__).parents[2] / "fixtures" / "logs"


def fixture(name: str) -> Path:
    return FIX / name


def test_every_fixture_has_its_source_noted():
    sources = (FIX / "SOURCES.md").read_text()
    files = sorted(p.name for p in FIX.iterdir() if p.name != "SOURCES.md")
    assert len(files) >= 20
    for name in files:
        assert f"`{name}`" in sources, f"{name} has no source in SOURCES.md"


# ---------------------------------------------------------------------------------------------
# Server arguments

GLM5_ARGS_LINE = next(
    line for line in fixture("glm5-rocm-server-args.log").read_text().splitlines() if "server_args=" in line
)


def test_server_args_real_2026_line_is_read_whole_and_typed():
    args = logs.parse_server_args(GLM5_ARGS_LINE)
    assert not args.incomplete
    assert len(args) == 327
    assert args["model_path"] == "zai-org/GLM-5-FP8"
    assert args["tp_size"] == 8
    assert args["mem_fraction_static"] == 0.908
    assert args["max_running_requests"] is None
    assert args["disable_cuda_graph"] is False
    assert args["fp4_gemm_runner_backend"] == "flashinfer_cutlass"
    assert args["attention_backend"] == "triton"
    assert args["cuda_graph_bs"][:4] == [1, 2, 4, 8] and args["cuda_graph_bs"][-1] == 512
    assert len(args["cuda_graph_bs"]) == 52
    assert args["mm_process_config"] == {}
    assert args["uvicorn_access_log_exclude_prefixes"] == []
    assert args["json_model_override_args"] == "{}"
    assert args["forward_hooks"] is None  # the very last field


def test_server_args_cut_keeps_every_complete_field_and_says_so():
    cut_at = GLM5_ARGS_LINE.index("mem_fraction_static=0.908") + len("mem_fraction_static=0.9")
    args = logs.parse_server_args(GLM5_ARGS_LINE[:cut_at])
    assert args.incomplete
    assert "mem_fraction_static" not in args  # its value was cut: 0.9 would be a lie
    assert args["kv_cache_dtype"] == "fp8_e4m3"
    assert args["rl_quant_profile"] is None
    assert list(args)[-1] == "rl_quant_profile"
    # Cut inside a list and inside a string.
    in_list = GLM5_ARGS_LINE[: GLM5_ARGS_LINE.index("cuda_graph_bs=[") + 30]
    args = logs.parse_server_args(in_list)
    assert args.incomplete and "cuda_graph_bs" not in args and args["cuda_graph_max_bs"] == 512
    in_string = GLM5_ARGS_LINE[: GLM5_ARGS_LINE.index("tokenizer_path='") + 20]
    args = logs.parse_server_args(in_string)
    assert args.incomplete and dict(args) == {"model_path": "zai-org/GLM-5-FP8"}


def test_server_args_wrapped_by_a_terminal_equals_the_whole_line():
    wrapped = "\n".join(GLM5_ARGS_LINE[i : i + 80] for i in range(0, len(GLM5_ARGS_LINE), 80))
    assert dict(logs.parse_server_args(wrapped)) == dict(logs.parse_server_args(GLM5_ARGS_LINE))
    # The same, pasted into a log: continuation lines without prefix follow the first one.
    slog = logs.parse_log(wrapped + "\n[2026-02-26 05:20:05 TP2] something else\n")
    assert len(slog.server_args) == 327 and not slog.server_args_incomplete


def test_server_args_bare_repr_enum_values_and_bad_input():
    args = logs.parse_server_args(
        "ServerArgs(load_format=<LoadFormat.AUTO: 'auto'>, port=30000, ratio=inf, x=(1, 2))"
    )
    assert dict(args) == {"load_format": "auto", "port": 30000, "ratio": math.inf, "x": (1, 2)}
    assert not args.incomplete
    garbage = logs.parse_server_args("no arguments here")
    assert dict(garbage) == {} and garbage.incomplete
    with pytest.raises(TypeError, match="expects the log text as str"):
        logs.parse_server_args(b"server_args=ServerArgs()")


def test_secrets_are_masked_wherever_shown():
    line = "server_args=ServerArgs(api_key='sk-live-0123456789abcdef', admin_api_key=None, max_total_tokens=4096, hf_token='hf_abcdefghijklmnopqrstuvwxyz12', tokenizer_path='x')"
    args = logs.parse_server_args(line)
    assert args["api_key"] == "sk-live-0123456789abcdef"  # kept, so a server can be relaunched
    shown = repr(args)
    assert "sk-live" not in shown and "hf_abc" not in shown and "max_total_tokens': 4096" in shown
    masked = masking.mask_mapping(args)
    assert masked["api_key"] == "***" and masked["hf_token"] == "***"
    assert masked["admin_api_key"] is None and masked["max_total_tokens"] == 4096
    assert masked["tokenizer_path"] == "x"
    nested = masking.mask_mapping({"env": {"HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz12"}, "urls": ["Bearer abc"]})
    assert nested == {"env": {"HF_TOKEN": "***"}, "urls": ["***"]}
    assert masking.mask_text("launch --api-key x api_key='secret123' #cached_token: 478") == (
        "launch --api-key x api_key='***' #cached_token: 478"
    )
    slog = logs.parse_log("[2025-01-01 00:00:00] " + line + "\n")
    assert "sk-live" not in json.dumps(slog.summary(), default=str)
    with pytest.raises(TypeError, match="mapping"):
        masking.mask_mapping(["api_key"])


# ---------------------------------------------------------------------------------------------
# Scheduler lines, every generation


def test_decode_2024_time_only_lines_take_the_date_given_or_1970():
    slog = logs.parse_log(fixture("sglang-2024-decode-timeonly.log"))
    d = slog.decode
    assert len(d) == 10 and slog.skipped == 0
    assert d["running_req"].tolist() == [2, 2, 2, 1, 1, 1, 1, 1, 1, 1]
    assert d["num_token"].tolist()[:3] == [4078, 4158, 4238]
    assert d["gen_throughput"].tolist()[-1] == 239.00
    assert d["queue_req"].sum() == 0
    assert d["cuda_graph"].isna().all()  # 2024 lines do not say
    assert d["rank"].unique().tolist() == ["TP0"]
    assert d["time"].iloc[0] == pd.Timestamp("1970-01-01 04:40:55")
    dated = logs.parse_log(fixture("sglang-2024-decode-timeonly.log"), date="2024-08-31")
    assert dated.decode["time"].iloc[-1] == pd.Timestamp("2024-08-31 04:40:57")


def test_decode_2024_without_prefix_and_without_head():
    d = logs.parse_log(fixture("sglang-2024-noprefix.log")).decode
    assert d[["running_req", "num_token", "token_usage", "gen_throughput", "queue_req"]].iloc[0].tolist() == [
        1010, 55006, 0.93, 1397.13, 12279
    ]
    assert d["time"].isna().all()
    early = logs.parse_log(fixture("sglang-2024-early.log"))
    assert early.decode[["running_req", "num_token", "token_usage", "queue_req"]].iloc[0].tolist() == [3, 1442, 0.18, 0]
    assert early.http["path"].tolist().count("/v1/chat/completions") == 7


def test_prefill_2024_new_fill_batch_lines():
    p = logs.parse_log(fixture("sglang-2024-early.log")).prefill
    assert len(p) == 6
    assert p["new_seq"].tolist() == [1] * 6
    assert p["cached_token"].tolist() == [478, 731, 731, 477, 51, 760]
    assert p["new_token"].tolist() == [254, 1, 1, 198, 66, 1]
    assert p["queue_req"].tolist() == [0, 0, 2, 1, 0, 1]  # "#remaining_req" then
    assert p["cache_hit_rate"].iloc[0] == pytest.approx(0.8081)


def test_decode_early_2025_with_and_without_largest_len():
    d = logs.parse_log(fixture("sglang-2025-early.log")).decode
    assert len(d) == 9
    assert d["gen_throughput"].tolist()[:2] == [186.64, 185.93]
    assert d["largest_len"].isna().sum() == 5 and d["largest_len"].iloc[5:].tolist() == [0, 0, 0, 0]
    assert d["running_req"].iloc[5:].tolist() == [509, 454, 397, 346]
    assert d["time"].iloc[5] == pd.Timestamp("2025-03-14 02:16:14")


def test_decode_0_5_with_cuda_graph_and_trailing_comma_variants():
    d = logs.parse_log(fixture("sglang-0.5.log")).decode
    assert len(d) == 7
    assert d["cuda_graph"].tolist() == [False, False, True, True, True, True, True]
    assert d["rank"].tolist() == [""] * 5 + ["TP0", "TP0"]
    assert d["queue_req"].tolist() == [0] * 5 + [5, 5]
    assert d["token_usage"].iloc[-1] == 0.94
    assert list(d.columns[:8]) == ["time", "rank", "running_req", "num_token", "token_usage", "cuda_graph", "gen_throughput", "queue_req"]


def test_decode_and_prefill_2026():
    slog = logs.parse_log(fixture("sglang-2026.log"))
    d, p = slog.decode, slog.prefill
    assert d["gen_throughput"].tolist() == [1635.11, 144.95, 140.27]
    assert d["running_req"].tolist() == [32, 5, 5]
    assert len(p) == 4
    assert p["input_throughput"].tolist() == [559.53, 1670.03, 4099.38, 178.18]
    assert p["cuda_graph"].tolist() == [True, True, True, False]
    last = p.iloc[-1]
    assert (last["rank"], last["cached_token"], last["inflight_req"], last["bootstrap_req"]) == ("TP0 EP0", 10048, 1, 0)
    assert last["est_prefill_tflops_per_gpu"] == 9.90
    assert math.isnan(last["fwd_occupancy"])  # "nan%"
    assert len(slog.http) == 6 and set(slog.http["status"]) == {200}
    assert slog.http["time"].iloc[0] == pd.Timestamp("2026-04-05 20:02:51")


def test_hybrid_models_fill_the_common_columns_from_the_fuller_pool():
    slog = logs.parse_log(fixture("sglang-2026-hybrid.log"))
    d = slog.decode
    assert len(d) == 4 and slog.skipped == 0
    assert d["time"].iloc[0] == pd.Timestamp("2026-05-24 03:51:44")  # its "[" was cut off
    assert d["full_token"].tolist() == [2642688, 2642688, 2642688, 165376]
    assert d["num_token"].tolist() == [2642688, 2642688, 2642688, 165376]
    assert d["token_usage"].tolist() == [1.0, 1.0, 1.0, 0.02]
    assert d["accept_len"].iloc[-1] == 5.30 and d["accept_rate"].iloc[-1] == 0.86
    p = slog.prefill
    assert p["token_usage"].tolist() == [0.0, 0.01]
    assert p["pending_token"].tolist() == [0, 157704]


def test_retraction_line():
    r = logs.parse_log(fixture("retract-docs.log")).retractions
    assert r[["retracted_reqs", "new_token_ratio_before", "new_token_ratio_after"]].iloc[0].tolist() == [1, 0.9998, 1.0]
    newer = logs.parse_log(
        "[2025-10-01 10:00:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
        "#new_tokens_gained: 1200, #new_token_ratio: 0.4000 -> 0.5500\n"
    ).retractions
    assert newer[["retracted_reqs", "new_tokens_gained", "new_token_ratio_after"]].iloc[0].tolist() == [3, 1200, 0.55]


# ---------------------------------------------------------------------------------------------
# Startup and readiness


def test_startup_facts_2025_with_cut_last_line():
    slog = logs.parse_log(fixture("sglang-startup-2025.log"))
    s = slog.startup
    assert s["load_weight_begin_avail_mem_gb"] == 78.84
    assert (s["model_class"], s["weight_dtype"], s["weight_mem_usage_gb"]) == ("XLMRobertaModel", "torch.float16", 1.18)
    assert (s["kv_cache_tokens"], s["kv_cache_k_size_gb"], s["kv_cache_size_gb"]) == (30192, 1.38, 2.76)
    assert s["memory_pool_end_avail_mem_gb"] == 74.76
    assert s["max_total_num_tokens"] == 30192
    assert "chunked_prefill_size" not in s  # "=81" was cut off mid-number
    assert slog.skipped == 0


def test_startup_facts_2024_and_2026():
    s = logs.parse_log(fixture("sglang-2024-nan.log")).startup
    assert (s["max_total_num_tokens"], s["max_running_requests"], s["context_len"]) == (1033884, 4097, 32768)
    assert s["weight_avail_mem_gb"] == 18.65
    assert s["memory_pool_end_avail_mem_gb"] == 4.14  # TP0's, though TP1 logged first
    r = logs.parse_log(fixture("sglang-ranks.log")).startup
    assert r["weight_mem_usage_gb"] == 166.59  # DP0 TP0's
    assert r["weight_load_time_s"] == 93.30  # DP0 TP0 EP0's, not TP4's 228.09
    assert r["cuda_graph_begin_avail_mem_gb"] == 8.73  # only DP1 PP1 said it: it fills the gap
    text = (
        "[2025-11-30 10:00:00] glm5lib stand-in server (not SGLang): profile 'glm5-nvfp4-8x-rtxpro6000' "
        "(data/profiles/glm5-nvfp4-8x-rtxpro6000.json); timings come from a model, not from GPUs\n"
        "[2025-11-30 10:01:07 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=18.50 GB\n"
        "[2025-11-30 10:01:07 TP0] Capture cuda graph bs [1, 2, 4, 8, 16]\n"
        "[2025-11-30 10:01:27 TP0] Capture cuda graph end. Time elapsed: 20.01 s. mem usage=1.20 GB. avail mem=17.30 GB.\n"
        "[2025-11-30 10:01:28 TP0] max_total_num_tokens=500000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=64, context_len=202752, available_gpu_mem=17.30 GB\n"
        "[2025-11-30 10:01:31] The server is fired up and ready to roll!\n"
    )
    slog = logs.parse_log(text)
    assert slog.standin == "glm5-nvfp4-8x-rtxpro6000"
    assert slog.standin_path == "data/profiles/glm5-nvfp4-8x-rtxpro6000.json"
    assert slog.ready and slog.ready_at == pd.Timestamp("2025-11-30 10:01:31")
    s = slog.startup
    assert s["cuda_graph_batch_sizes"] == [1, 2, 4, 8, 16]
    assert (s["cuda_graph_capture_time_s"], s["cuda_graph_mem_usage_gb"]) == (20.01, 1.2)
    assert (s["max_running_requests"], s["available_gpu_mem_gb"]) == (64, 17.3)
    assert logs.parse_log(fixture("sglang-2026.log")).standin is None


# ---------------------------------------------------------------------------------------------
# Errors


def test_classify_fatal_on_real_lines():
    lines = fixture("fatal-lines.txt").read_text().splitlines()
    assert [logs.classify_fatal(line) for line in lines] == [
        "health_check", "oom", "oom", "nccl", "nan", "scheduler_exception", "sigquit",
    ]
    for ordinary in [
        *fixture("sglang-0.5.log").read_text().splitlines(),
        *fixture("crash-nccl-warn.log").read_text().splitlines()[1:7],  # NCCL INFO lines
        "Traceback (most recent call last):",
        '[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "",
    ]:
        assert logs.classify_fatal(ordinary) is None, ordinary
    assert logs.classify_fatal("\x1b[31mtorch.OutOfMemoryError: CUDA out of memory.\x1b[0m") == "oom"
    assert logs.classify_fatal(None) is None


def test_nan_once_per_rank():
    e = logs.parse_log(fixture("sglang-nan-ranks.log")).errors
    assert e["kind"].tolist() == ["nan"] * 8
    assert sorted(e["rank"]) == [f"TP{i}" for i in range(8)]
    assert (e["time"] == pd.Timestamp("2025-12-03 15:29:24")).all()


def test_traceback_without_first_line_then_cut_sigquit():
    slog = logs.parse_log(fixture("crash-nccl.log"))
    e = slog.errors
    assert e["kind"].tolist() == ["nccl", "sigquit"]
    assert e["message"].iloc[0] == "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"
    assert e["text"].iloc[0].count("\n") == 12  # the whole traceback (13 lines)
    assert e["text"].iloc[0].splitlines()[1] == "    _TP = init_model_parallel_group("  # indentation kept
    assert e["time"].iloc[1] == pd.Timestamp("2025-03-11 15:02:53")
    assert slog.skipped == 0 and slog.crash_cause() == "nccl"


def test_chained_traceback_keeps_the_last_exception():
    e = logs.parse_log(fixture("crash-glm5-rocm-config.log")).errors
    assert len(e) == 1
    row = e.iloc[0]
    assert row["kind"] == "other"
    assert row["message"].startswith("ValueError: The checkpoint you are trying to load has model type `glm_moe_dsa`")
    assert "KeyError: 'glm_moe_dsa'" in row["text"] and "During handling of the above exception" in row["text"]
    assert row["time"] == pd.Timestamp("2026-02-26 04:55:25")


def test_scheduler_exception_variants():
    e = logs.parse_log(fixture("crash-scheduler-tp2.log")).errors
    assert (e["kind"].tolist(), e["rank"].tolist()) == (["scheduler_exception"], ["TP2"])
    assert e["text"].iloc[0].count("File ") == 4
    e = logs.parse_log(fixture("crash-scheduler-notime.log")).errors
    assert (e["kind"].tolist(), e["rank"].tolist()) == (["scheduler_exception"], ["TP0"])
    e = logs.parse_log(fixture("crash-nccl-warn.log")).errors
    assert e["kind"].tolist() == ["scheduler_exception"]  # NCCL WARN/INFO lines are not errors
    assert e["message"].iloc[0] == "Scheduler hit an exception: Traceback (most recent call last):"


def test_tracebacks_of_several_ranks_interleaved_and_without_indentation():
    body = [ln.strip() for ln in fixture("crash-scheduler-tp2.log").read_text().splitlines()[1:]]
    text = "\n".join(
        [
            "[2025-04-23 21:31:41 TP2] Scheduler hit an exception: Traceback (most recent call last):",
            "[2025-04-23 21:31:41 TP5] Scheduler hit an exception: Traceback (most recent call last):",
            *body,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            "[2025-04-23 21:31:42] Received sigquit from a child process. It usually means the child failed.",
            "",
        ]
    )
    e = logs.parse_log(text).errors
    assert e["kind"].tolist() == ["oom", "oom", "sigquit"]
    assert e["rank"].tolist() == ["TP2", "TP5", ""]
    assert e["message"].iloc[1] == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


# ---------------------------------------------------------------------------------------------
# Robustness


def test_ansi_tqdm_glued_lines_and_garbage():
    text = (
        "\x1b[32mINFO\x1b[0m:     127.0.0.1:5000 - \"\x1b[1mPOST /generate HTTP/1.1\x1b[0m\" \x1b[32m200 OK\x1b[0m\n"
        "Capturing batches (bs=1 avail_mem=17.40 GB):  12%|█▎        | 1/8 [00:01<00:09,  1.31s/it]\r"
        "Capturing batches (bs=1 avail_mem=17.40 GB): 100%|██████████| 8/8 [00:05<00:00,  1.52it/s]"
        "[2025-11-30 10:01:27 TP0] Capture cuda graph end. Time elapsed: 20.01 s. mem usage=1.20 GB. avail mem=17.30 GB.\n"
        "\x00\x01 binary garbage \ufffd\n"
        "[2025-11-30 10:01:41 TP0] Decode batch, #running-req: 64, #token: 20480, token usage: 0.04, cuda graph: True, gen throughput (token/s): 880.50, #queue-req: 192, \n"
        "[2025-11-30 10:01:42 TP0] Decode batch, #running-req: 64, #tok"
    )
    slog = logs.parse_log(text)
    assert slog.http[["method", "path", "status"]].iloc[0].tolist() == ["POST", "/generate", 200]
    assert slog.startup["cuda_graph_capture_time_s"] == 20.01
    assert slog.decode["gen_throughput"].tolist() == [880.5]  # the cut final line is not a row
    assert slog.skipped == 2
    assert slog.skipped_examples[-1].endswith("#running-req: 64, #tok")


def test_paths_bytes_and_missing_files(tmp_path):
    path = tmp_path / "server.log"
    path.write_bytes(fixture("sglang-0.5.log").read_bytes())
    assert len(logs.parse_log(path).decode) == 7
    assert len(logs.parse_log(str(path)).decode) == 7
    assert len(logs.parse_log(path.read_bytes()).decode) == 7
    with pytest.raises(FileNotFoundError, match="does not exist"):
        logs.parse_log(tmp_path / "nope.log")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        logs.parse_log(str(tmp_path / "nope.log"))
    with pytest.raises(TypeError, match="path or the log text"):
        logs.parse_log(42)
    empty = logs.parse_log("")
    assert empty.decode.empty and list(empty.decode.columns[:3]) == ["time", "rank", "running_req"]
    assert empty.errors.empty and empty.lines == 0


def _mixed_log(n_blocks: int, seed: int = 0) -> str:
    """Real fixture lines, repeated and shuffled by block, so every shape passes the bulk path."""
    rng = random.Random(seed)
    blocks = [
        fixture(name).read_text().rstrip("\n").splitlines()
        for name in ("sglang-0.5.log", "sglang-2026.log", "sglang-2026-hybrid.log", "sglang-2025-early.log",
                     "sglang-2024-nan.log", "crash-scheduler-tp2.log", "sglang-nan-ranks.log")
    ]
    out: list[str] = []
    for _ in range(n_blocks):
        out.extend(rng.choice(blocks))
    return "\n".join(out) + "\n"


def test_bulk_and_line_by_line_paths_agree(tmp_path):
    text = _mixed_log(300)
    whole = logs.parse_log(text)
    path = tmp_path / "server.log"
    path.write_text(text)
    follower = logs.follow_log(path)
    followed = follower.finish()
    assert len(whole.decode) > 500 and len(whole.prefill) > 100
    for name in ("decode", "prefill", "errors", "http"):
        a, b = getattr(whole, name), getattr(followed, name)
        pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True), check_dtype=False, obj=name)
    assert whole.skipped == followed.skipped and whole.lines == followed.lines


def test_bulk_chunks_and_piecewise_decoding_change_nothing(monkeypatch):
    text = _mixed_log(300) + "Capturing batches (bs=8 avail_mem=17.40 GB): 100%|\u2588\u2588| 8/8\r\n"
    whole = logs.parse_log(text)  # a str: split as one text
    monkeypatch.setattr(log_parse, "CHUNK_BYTES", 700)
    monkeypatch.setattr(logtext, "_DECODE_CHUNK", 100)
    pieces = logs.parse_log(text.encode())  # bytes: read and parsed in pieces of about 700 bytes
    assert len(whole.decode) > 500
    for name in ("decode", "prefill", "retractions", "errors", "http"):
        pd.testing.assert_frame_equal(getattr(whole, name), getattr(pieces, name), obj=name)
    assert (whole.skipped, whole.lines, whole.startup) == (pieces.skipped, pieces.lines, pieces.startup)


def test_lines_mangled_around_their_values_are_skipped_by_both_paths(tmp_path):
    line = ("[2025-11-30 10:00:{:02d} TP0] Decode batch, #running-req: 5, #token: 100, token usage: 0.10, "
            "cuda graph: True, gen throughput (token/s): 12.00, #queue-req: 0, ")
    lines = [line.format(i % 60) for i in range(200)]
    lines[100] = "X" + lines[100][1:]
    lines[120] = lines[120] + "nan"  # something after the trailing ", "
    lines[140] = lines[140].replace(" TP0]", "xTP0]")  # no space between time and rank
    text = "\n".join(lines) + "\n"
    path = tmp_path / "server.log"
    path.write_text(text)
    for slog in (logs.parse_log(text), logs.follow_log(path).finish()):
        assert (len(slog.decode), slog.skipped) == (197, 3)
        assert slog.skipped_examples == [lines[100], lines[120], lines[140]]


def test_iteration_numbers_in_bulk_and_line_by_line(tmp_path):
    # The data-parallel head "Decode batch [N]," (format from SGLang's scheduler metrics mixin).
    line = ("[2025-09-01 10:00:{s:02d} DP{r} TP{r}] Decode batch [{it}], #running-req: {n}, #token: 4800, "
            "token usage: 0.03, cuda graph: True, gen throughput (token/s): 610.50, #queue-req: 2, ")
    its = [7 * i ** 2 for i in range(150)]  # 1 to 5 digits wide
    lines = [line.format(s=i % 60, r=i % 2, it=it, n=i) for i, it in enumerate(its)]
    text = "\n".join(lines) + "\n"
    path = tmp_path / "server.log"
    path.write_text(text)
    whole, followed = logs.parse_log(text), logs.follow_log(path).finish()
    pd.testing.assert_frame_equal(whole.decode, followed.decode, check_dtype=False)
    assert whole.decode["iter"].tolist() == its and whole.decode["running_req"].tolist() == list(range(150))
    assert whole.decode["rank"].tolist()[:3] == ["DP0 TP0", "DP1 TP1", "DP0 TP0"]


def test_iteration_column_lands_in_the_same_place_on_both_paths(tmp_path):
    plain = ("[2025-09-01 09:59:{s:02d} TP0] Decode batch, #running-req: {n}, #token: 4800, token usage: 0.03, "
             "cuda graph: True, gen throughput (token/s): 610.50, #queue-req: 2, ")
    spec = ("[2025-09-01 09:59:59 TP0] Decode batch, #running-req: 3, #token: 4800, token usage: 0.03, accept len: 2.71, "
            "accept rate: 0.68, cuda graph: True, gen throughput (token/s): 610.50, #queue-req: 2, ")
    dp = ("[2025-09-01 10:00:{s:02d} DP1 TP1] Decode batch [{n}], #running-req: {n}, #token: 4800, token usage: 0.03, "
          "cuda graph: True, gen throughput (token/s): 610.50, #queue-req: 2, ")
    lines = [plain.format(s=i, n=i) for i in range(10)] + [spec] + [dp.format(s=i % 60, n=i) for i in range(100)]
    text = "\n".join(lines) + "\n"
    path = tmp_path / "server.log"
    path.write_text(text)
    whole, followed = logs.parse_log(text), logs.follow_log(path).finish()
    assert list(whole.decode.columns) == list(followed.decode.columns)
    assert list(whole.decode.columns)[8:11] == ["iter", "accept_len", "accept_rate"]
    pd.testing.assert_frame_equal(whole.decode, followed.decode, check_dtype=False)


def test_prefix_stamps_by_arithmetic_equal_numpys_parse():
    import numpy as np

    for stamps in (["2025-11-30 10:00:03", "2024-02-29 23:59:59", "1969-12-31 23:59:59"],
                   ["2025-11-30 10:00:03.123456", "2026-01-01 00:00:00.000001", "2026-01-01 00:00:00.500000"],
                   ["2025-11-30 10:00:03.5", "2025-12-01 00:00:00.0"]):
        block = np.frombuffer("".join(stamps).encode(), dtype=np.uint8).reshape(len(stamps), -1)
        assert (chunked._stamps(block) == np.array(stamps, dtype="datetime64[ns]")).all()
    for bad in ("2025-02-30 10:00:00", "2025-11-30 10:00:60", "2025-11-30T10:00:0x"):
        with pytest.raises(ValueError):
            chunked._stamps(np.frombuffer(bad.encode(), dtype=np.uint8).reshape(1, -1))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["a", "\n", "\r", "\r\n", "\u2588", "\x0b", "\x0c", "\x1e", "\x85", "\u2028", "[", " "]), max_size=40),
       st.binary(max_size=3), st.integers(1, 5))
def test_piecewise_decoding_splits_like_the_whole_text(chars, junk, piece):
    raw = "".join(chars).encode() + junk  # junk: bytes that may not be UTF-8 at all
    old = logtext._DECODE_CHUNK
    logtext._DECODE_CHUNK = piece
    try:
        assert logtext.split_bytes(raw) == logtext.split_text(raw.decode("utf-8", errors="replace"))
    finally:
        logtext._DECODE_CHUNK = old


# ---------------------------------------------------------------------------------------------
# Following a log that is still being written


def test_follow_log_reads_only_what_was_appended(tmp_path):
    lines = fixture("sglang-0.5.log").read_text().splitlines(keepends=True)
    path = tmp_path / "server.log"
    follower = logs.follow_log(path)
    assert follower.update().decode.empty  # the file does not exist yet
    path.write_text("".join(lines[:3]) + lines[3][:40])  # a partial line: it must wait
    first = follower.update()
    assert first.decode["running_req"].tolist() == [46, 36, 28]
    offset = follower.offset
    assert follower.update().decode["running_req"].tolist() == [46, 36, 28]
    assert follower.offset == offset
    with path.open("a") as fh:
        fh.write(lines[3][40:] + "".join(lines[4:]))
    after = follower.update()
    assert after.decode["running_req"].tolist() == [46, 36, 28, 22, 20, 6, 6]
    assert follower.offset == path.stat().st_size
    path.write_text(lines[0])  # truncated, e.g. a restarted server: read again
    assert follower.update().decode["running_req"].tolist() == [46]


def test_follow_log_keeps_tracebacks_open_across_updates(tmp_path):
    text = fixture("crash-nccl.log").read_text()
    path = tmp_path / "server.log"
    path.write_text(text[: len(text) // 2])
    follower = logs.follow_log(path)
    mid = follower.update()
    assert mid.errors["kind"].tolist() == ["other"]  # so far no cause line
    path.write_text(text)
    end = follower.finish()
    assert end.errors["kind"].tolist() == ["nccl", "sigquit"]


# ---------------------------------------------------------------------------------------------
# bench_serving


def test_bench_result_blocks_and_jsonl():
    v040 = logs.parse_bench_result(fixture("bench-sglang-v0.4.0.txt")).iloc[0]
    assert (v040["tool"], v040["backend"], v040["max_concurrency"], v040["completed"]) == ("sglang", "sglang", "not set", 1648)
    assert v040["request_rate"] == math.inf and v040["output_throughput"] == 1915.40
    assert v040["total_output_tokens_retokenized"] == 326356
    assert (v040["mean_e2e_latency_ms"], v040["mean_ttft_ms"]) == (80126.93, 44294.80)
    b25 = logs.parse_bench_result(fixture("bench-sglang-2025.txt")).iloc[0]
    assert (b25["max_concurrency"], b25["request_rate"], b25["concurrency"]) == (330, 330.0, 315.98)
    assert (b25["p99_ttft_ms"], b25["median_itl_ms"]) == (6002.16, 22.82)
    mm = logs.parse_bench_result(fixture("bench-sglang-oai-chat.txt")).iloc[0]
    assert (mm["backend"], mm["total_input_vision_tokens"], mm["mean_itl_ms"]) == ("sglang-oai-chat", 769536, 0.0)
    js = logs.parse_bench_result(fixture("bench-sglang.jsonl")).iloc[0]
    assert (js["source"], js["completed"], js["max_concurrency"], js["random_input_len"]) == ("jsonl", 300, 16, 250000)
    assert js["request_rate"] == math.inf and js["p95_itl_ms"] == 0.0


def test_a_vllm_block_is_recognised_as_vllm():
    row = logs.parse_bench_result(fixture("bench-vllm.txt")).iloc[0]
    assert row["tool"] == "vllm"
    assert (row["completed"], row["failed"], row["max_output_tokens_per_s"]) == (1000, 0, 14046.0)
    assert "backend" not in row.index or pd.isna(row["backend"])


def test_bench_results_mixed_in_other_output_keep_their_order(tmp_path):
    names = ["bench-sglang-v0.4.0.txt", "bench-vllm.txt", "bench-sglang.jsonl", "bench-sglang-2025.txt"]
    combined = "\n".join(fixture(n).read_text() for n in names) + "\nsome other output\n"
    frame = logs.parse_bench_result(combined)
    assert frame["tool"].tolist() == ["sglang", "vllm", "sglang", "sglang"]
    assert frame["completed"].tolist() == [1648, 1000, 300, 660]
    assert logs.parse_bench_result("nothing here\n").empty


# ---------------------------------------------------------------------------------------------
# Times, summary and the command


def test_to_epoch_utc_and_local():
    series = pd.Series(pd.to_datetime(["2025-11-30 10:00:00", None]))
    utc = logs.to_epoch(series, tz="UTC")
    assert utc.iloc[0] == 1764496800.0 and math.isnan(utc.iloc[1])
    local = logs.to_epoch(series)
    assert local.iloc[0] == time.mktime(time.strptime("2025-11-30 10:00:00", "%Y-%m-%d %H:%M:%S"))
    assert logs.to_epoch(pd.Timestamp("2025-11-30 10:00:00"), tz="UTC") == 1764496800.0
    berlin = logs.to_epoch(pd.Series(pd.to_datetime(["2025-11-30 10:00:00", "2025-07-01 10:00:00"])), tz="Europe/Berlin")
    assert berlin.tolist() == [1764496800.0 - 3600, 1751364000.0 - 7200]  # CET, then CEST


def test_cli_logs_summary(tmp_path, capsys):
    path = tmp_path / "server.log"
    path.write_text(
        "[2025-11-30 10:00:00] server_args=ServerArgs(model_path='zai-org/GLM-5', tp_size=8, "
        "max_running_requests=64, api_key='sk-secret-0123456789abcd')\n"
        + fixture("sglang-0.5.log").read_text()
        + fixture("sglang-nan-ranks.log").read_text()
    )
    assert cli.main(["logs", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out)
    assert "sk-secret" not in out and summary["server_args"]["api_key"] == "***"
    assert summary["server_args"]["max_running_requests"] == 64
    assert summary["decode"]["rows"] == 7 and summary["decode"]["max_running_req"] == 46
    assert summary["crash_cause"] == "nan" and len(summary["errors"]) == 8
    assert cli.main(["logs", str(path)]) == 0
    text = capsys.readouterr().out
    assert "max_running_requests = 64" in text and "errors: 8  (cause: nan)" in text
    assert cli.main(["logs", str(tmp_path / "missing.log")]) == 1
    assert "does not exist" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# No input makes the parser raise

REAL_LINES = [
    line
    for p in sorted(FIX.iterdir())
    if p.suffix in (".log", ".txt", ".jsonl")
    for line in p.read_text().splitlines()
]
_line = st.one_of(
    st.sampled_from(REAL_LINES),
    st.text(max_size=120),
    st.sampled_from(REAL_LINES).flatmap(lambda s: st.integers(0, len(s)).map(lambda i: s[:i])),
    st.sampled_from(REAL_LINES).flatmap(
        lambda s: st.tuples(st.integers(0, len(s)), st.text(max_size=5)).map(lambda t: s[: t[0]] + t[1] + s[t[0]:])
    ),
)
_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(st.lists(_line, max_size=25), st.sampled_from(["\n", "\r\n", "\r"]), st.booleans())
def test_parse_log_never_raises(lines, sep, trailing):
    text = sep.join(lines) + (sep if trailing else "")
    slog = logs.parse_log(text.encode("utf-8", errors="surrogatepass"))  # bytes: always content
    assert slog.skipped >= 0 and len(slog.skipped_examples) <= 20
    assert set(slog.errors["kind"]) <= set(logs.ERROR_KINDS)
    assert slog.summary()["lines"] == slog.lines


@_SETTINGS
@given(st.text(max_size=400))
def test_single_line_functions_never_raise(text):
    logs.classify_fatal(text)
    args = logs.parse_server_args("server_args=ServerArgs(" + text)
    assert isinstance(args, dict)
    masking.mask_text(text)
    assert isinstance(logs.parse_bench_result(text.encode("utf-8", errors="surrogatepass")), pd.DataFrame)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, len(GLM5_ARGS_LINE)))
def test_any_cut_of_server_args_is_a_prefix_of_the_whole(cut):
    whole = logs.parse_server_args(GLM5_ARGS_LINE)
    part = logs.parse_server_args(GLM5_ARGS_LINE[:cut])
    assert part.incomplete == (cut < len(GLM5_ARGS_LINE))
    assert all(whole[k] == v for k, v in part.items())
    assert list(part) == list(whole)[: len(part)]


def test_to_epoch_uses_this_machines_zone_by_default(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        local = logs.to_epoch(pd.Series(pd.to_datetime(["2025-11-30 10:00:00", "2025-07-01 10:00:00"])))
        assert local.tolist() == [1764496800.0 - 3600, 1751364000.0 - 7200]
    finally:
        monkeypatch.undo()
        time.tzset()


def test_startup_0_5_capture_and_limits():
    slog = logs.parse_log(fixture("sglang-startup-0.5.log"))
    s = slog.startup
    assert (s["cuda_graph_capture_time_s"], s["cuda_graph_mem_usage_gb"], s["cuda_graph_avail_mem_gb"]) == (5.92, 1.44, 37.06)
    assert (s["max_total_num_tokens"], s["chunked_prefill_size"], s["max_running_requests"]) == (2261377, 16384, 4096)
    assert (s["context_len"], s["available_gpu_mem_gb"]) == (128000, 37.06)
    assert slog.skipped == 0  # the capture bar is known noise
    tp = logs.parse_log(fixture("sglang-capture-tp.log")).startup
    assert tp["cuda_graph_capture_time_s"] == 11.39  # TP0's, logged after TP1's 11.35
    assert tp["cuda_graph_num_tokens"][:3] == [4, 8, 12] and tp["cuda_graph_num_tokens"][-1] == 4096


def test_lines_mangled_when_pasted_are_skipped_not_misread():
    slog = logs.parse_log(fixture("sglang-2026-npu-mangled.log"))
    assert slog.decode.empty and slog.prefill.empty and slog.http.empty
    assert slog.skipped == 3
    assert slog.skipped_examples[0].endswith("#queue-req")


def test_prefill_keys_in_another_order_between_debug_lines():
    slog = logs.parse_log(fixture("sglang-2026-prefill-order.log"))
    p = slog.prefill
    assert p["input_throughput"].tolist() == [0.14, 9610.84]
    assert p["cuda_graph"].tolist() == [False, False]
    assert (p["new_seq"].tolist(), p["new_token"].tolist()) == ([2, 2], [578, 578])
    assert slog.skipped == 6  # the [DEBUG] lines are not SGLang's


# Variants for which no public excerpt was found: lines built from the f-strings in SGLang's
# scheduler_metrics_mixin.py / metrics_reporter.py / scheduler.py / utils.py of their releases.
SOURCE_BUILT = "\n".join(
    [
        '[2024-07-20 10:00:00] [gpu_id=0] Prefill batch(mixed #running-req: 3). #new-seq: 1, #new-token: 7, #cached-token: 0, cache hit rate: 0.00%, #running-req: 3, #queue-req: 0',
        '[2024-07-20 10:00:01] [gpu_id=0] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 123456, KV size: 7.53 GB',
        '[2025-09-01 10:00:00 DP1 TP1] Decode batch [4096], #running-req: 12, #token: 4800, token usage: 0.03, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, cuda graph: True, gen throughput (token/s): 610.50, #queue-req: 2, ',
        '[2025-10-01 10:00:00 TP0] Decode batch, #running-req: 9, #full token: 9000, full token usage: 0.10, mamba num: 9, mamba usage: 0.02, cuda graph: True, gen throughput (token/s): 300.00, #queue-req: 0, ',
        '[2026-03-01 10:00:00 TP0] Decode batch, #running-req: 64, #token: 20480, token usage: 0.04, cuda graph: True, gen throughput (token/s): 880.50, #queue-req: 192, est. decode TFLOPS/s (per GPU): 12.30, est. read BW (GB/s per GPU): 456.70, fwd occupancy: 91.20%',
        '[2026-03-01 10:00:05] kill_process_tree called: parent_pid=1234, include_parent=True',
        'Exception in ControllerSingle:',
        'Traceback (most recent call last):',
        'RuntimeError: CUDA error: out of memory',
        "",
    ]
)


def test_variants_built_from_sglang_source():
    slog = logs.parse_log(SOURCE_BUILT)
    p = slog.prefill.iloc[0]
    assert (p["rank"], p["mixed_running_req"], p["new_token"], p["running_req"]) == ("TP0", 3, 7, 3)
    assert slog.startup["kv_cache_tokens"] == 123456 and slog.startup["kv_cache_size_gb"] == 7.53
    assert slog.startup["kv_cache_dtype"] == "torch.float8_e4m3fn"
    d = slog.decode
    assert d["iter"].tolist()[0] == 4096 and d["rank"].tolist()[0] == "DP1 TP1"
    assert (d["transfer_req"].iloc[0], d["pre_allocated_usage"].iloc[0]) == (1, 0.0)
    assert (d["mamba_num"].iloc[1], d["num_token"].iloc[1], d["token_usage"].iloc[1]) == (9, 9000, 0.10)
    last = d.iloc[2]
    assert (last["est_decode_tflops_per_gpu"], last["est_read_bw_gb_s_per_gpu"]) == (12.30, 456.70)
    assert last["fwd_occupancy"] == pytest.approx(0.912)
    assert slog.errors["kind"].tolist() == ["sigquit", "oom"]
    assert slog.errors["message"].iloc[1] == "RuntimeError: CUDA error: out of memory"
    assert logs.classify_fatal("Exception in ControllerSingle:") == "scheduler_exception"


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(["3", "0.4000", "3.", "x y", "1:2", "a->b", "0.4->0.5", "", ".", "3,4", "-1", "50.00%", "(7)"]),
                min_size=4, max_size=4),
       st.sampled_from(["", ".", ",", ".,", ", ", " "]))
def test_fast_paths_read_mixed_prefill_and_retraction_lines_as_the_slow_path(vals, tail):
    # The fast paths (regexes, learned from a first line with plain values, or fixed) must give
    # the raw rows the slow path gives line by line, or leave the line to it.
    def mixed(s, a, b, c, d, tail):
        return (f"[2025-11-30 10:00:0{s} TP0] Prefill batch(mixed #running-req: {a}). #new-seq: 1, "
                f"#new-token: {b}, #cached-token: 0, token usage: {c}, #running-req: 7, #queue-req: {d}{tail}")

    def retract(s, a, b, c, d, tail):
        return (f"[2025-11-30 10:00:0{s} TP0] KV cache pool is full. Retract requests. "
                f"#retracted_reqs: {a}, #new_token_ratio: {b} -> {c}{tail}")

    for make in (mixed, retract):
        lines = [make(0, "1", "2", "0.5", "4", ", "), *(make(s, *vals, tail) for s in range(1, 4))]
        fast = sglang._Parser()
        fast.feed(lines, final=False)
        slow = sglang._Parser()
        for index, line in enumerate(lines):
            slow._slow(line, index)  # the slow path, whatever the line
        assert (fast.skipped, fast.http_rows, fast.errors) == (slow.skipped, slow.http_rows, slow.errors)
        assert {key: (sh.order, sh.rows) for key, sh in fast.shapes.items() if sh.rows} == {
            key: (sh.order, sh.rows) for key, sh in slow.shapes.items() if sh.rows
        }


def test_fatal_precheck_written_out_agrees_with_its_tuple():
    # classify_fatal's cheap first test is the tuple's substrings written out as one expression.
    for needle in fatal._FATAL_PRECHECK:
        for line in (needle, f"x {needle} y", f"{needle[:-1]} {needle[-1]}"):
            assert fatal._may_be_fatal(line) == any(s in line for s in fatal._FATAL_PRECHECK), line
    assert not fatal._may_be_fatal("[2025-11-30 10:00:00 TP0] Using FP8 KV cache but no scaling factors provided.")
