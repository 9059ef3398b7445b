"""Tests for glm5lib.logs: SGLang server logs and bench_serving output into tables."""

from __future__ import annotations

import pandas as pd

from glm5lib import logs

SAMPLE = (
    "[2025-11-30 10:00:00] server_args=ServerArgs(model_path='zai-org/GLM-5', tp_size=8, "
    "max_running_requests=64, api_key='sk-abcdefghijklmnopqrstuv')\n"
    "[2025-11-30 10:01:31] The server is fired up and ready to roll!\n"
    "[2025-11-30 10:01:41 TP0] Decode batch, #running-req: 64, #token: 20480, token usage: 0.04, "
    "cuda graph: True, gen throughput (token/s): 880.50, #queue-req: 192, \n"
)


def test_parse_log_minimal():
    slog = logs.parse_log(SAMPLE)
    assert slog.server_args["max_running_requests"] == 64
    assert slog.ready_at == pd.Timestamp("2025-11-30 10:01:31")
    assert slog.decode["gen_throughput"].tolist() == [880.5]
    assert "sk-" not in repr(logs.parse_server_args(SAMPLE))


def test_classify_fatal_minimal():
    assert logs.classify_fatal("torch.OutOfMemoryError: CUDA out of memory.") == "oom"
    assert logs.classify_fatal("[2025-01-01 00:00:00 TP0] Decode batch, #running-req: 1") is None
