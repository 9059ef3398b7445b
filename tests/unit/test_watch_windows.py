"""glm5lib.watch on scrapes built by hand: a window's figures from the engine's gauges, counters and
histograms, the limit named, and the settings refused before anything is written."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from glm5lib import engines
from glm5lib.errors import ConfigError
from glm5lib.watch import WatchSettings, binding_limit, histogram_window, window_row

BOUNDS = [0.1, 0.5, 1.0, 5.0, float("inf")]


def _scrapes(t0: float, seconds: int, *, running, queued, usage, tokens_per_s, ttft_counts=None):
    """SGLang's /metrics once a second for ``seconds``: gauges, the token and request counters, and the
    TTFT histogram at both ends (``ttft_counts``: the observations per bucket during the window)."""
    rows = []
    for k in range(seconds + 1):
        t = t0 + k
        for name, value in (("sglang:num_running_reqs", running), ("sglang:num_queue_reqs", queued),
                            ("sglang:token_usage", usage)):
            rows.append((t, name, "{}", float(value)))
        rows.append((t, "sglang:generation_tokens_total", "{}", 1000.0 + tokens_per_s * k))
        rows.append((t, "sglang:num_requests_total", "{}", 10.0 + k))
    if ttft_counts:
        for t, scale in ((t0, 0), (t0 + seconds, 1)):
            cum = 0.0
            for le, n in zip(BOUNDS, ttft_counts, strict=True):
                cum += 5 + scale * n  # 5 of each before the window
                label = "+Inf" if le == float("inf") else str(le)
                rows.append((t, "sglang:time_to_first_token_seconds_bucket", json.dumps({"le": label}), cum))
            total = sum(ttft_counts)
            rows.append((t, "sglang:time_to_first_token_seconds_sum", "{}", 50.0 + scale * 0.3 * total))
            rows.append((t, "sglang:time_to_first_token_seconds_count", "{}", 25.0 + scale * total))
    return pd.DataFrame(rows, columns=["time", "metric", "labels", "value"])


def test_a_histograms_window_is_the_difference_of_its_two_snapshots():
    frame = _scrapes(100.0, 10, running=1, queued=0, usage=0.1, tokens_per_s=10, ttft_counts=[0, 60, 30, 10, 0])
    h = histogram_window(frame, "sglang:time_to_first_token_seconds", 100.0, 110.0)
    assert h["count"] == 100 and h["mean"] == pytest.approx(0.3)
    # 50 of the 100 fall by 0.1 + 0.4 x 50/60 = 0.433 s; 90 by the end of the (0.5, 1.0] bucket
    assert h["p50"] == pytest.approx(0.1 + 0.4 * 50 / 60) and h["p90"] == pytest.approx(1.0)
    assert h["p99"] == pytest.approx(1.0 + 4.0 * 9 / 10)


def test_a_window_reads_the_offered_load_throughput_and_the_cap_that_binds():
    frame = _scrapes(100.0, 30, running=64, queued=192, usage=0.02, tokens_per_s=880, ttft_counts=[0, 0, 0, 90, 10])
    row = window_row(frame, 100.0, 130.0, index=1, cap=64)
    assert row["concurrency"] == 256 and row["running_median"] == 64 and row["queued_mean"] == 192
    assert row["output_throughput"] == pytest.approx(880) and row["total_output_tokens"] == pytest.approx(880 * 30)
    assert row["completed"] == pytest.approx(30) and row["mode"] == "watch"
    assert 1000 < row["median_ttft_ms"] < 5000
    assert row["binding"] == "running_cap" and "64 running, 192 queued, KV 2%" in row["binding_text"]
    assert "the running cap (64)" in row["binding_text"]


def test_each_limit_is_named_from_what_the_window_shows():
    roles = engines.get("sglang").capabilities.serving_roles
    base = {"running_median": 100.0, "kv_max": 0.3, "output_throughput": 5000.0}
    assert binding_limit({**base, "queued_mean": 50.0}, 100, {})[0] == "running_cap"
    assert binding_limit({**base, "queued_mean": 50.0, "kv_max": 0.95}, 512, {})[0] == "kv_tokens"
    assert binding_limit({**base, "queued_mean": 50.0}, 512, {})[0] == "admission"
    busy = {"python3[7] -m sglang.launch_server": 99.0, "sglang::scheduler[8]": 100.0}
    assert binding_limit({**base, "queued_mean": 0.0}, 512, busy, roles)[0] == "frontend:tokenizer"
    assert binding_limit({**base, "queued_mean": 0.0}, 512, {}, roles)[0] == "load"
    assert binding_limit({**base, "queued_mean": 20.0}, None, {})[1].endswith(
        "a running cap of about 100 (requests wait while the KV pool has room)")
    assert binding_limit({"running_median": 0.0, "queued_mean": 0.0}, 64, {})[0] == "idle"


@pytest.mark.parametrize("kwargs, match", [
    ({"url": "127.0.0.1:30000"}, "must be http"),
    ({"url": "http://user:secret@127.0.0.1:30000"}, "GLM5_API_KEY"),
    ({"url": "http://127.0.0.1:30000", "window": 2.0}, "fewer than 3 scrapes"),
    ({"url": "http://127.0.0.1:30000", "duration": 10.0}, "at least one window"),
    ({"url": "http://127.0.0.1:30000", "phase": "../x"}, "is not valid"),
    ({"url": "http://127.0.0.1:30000", "log_path": "/no/such/log"}, "no such file"),
])
def test_settings_are_refused_before_anything_starts(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        WatchSettings(**kwargs).check()
