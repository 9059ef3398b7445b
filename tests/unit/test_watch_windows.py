"""glm5lib.watch on scrapes built by hand: a window's figures from the engine's gauges, counters and
histograms, the limit named, and the settings refused before anything is written."""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from glm5lib import engines
from glm5lib.errors import ConfigError
from glm5lib.logs import parse_log
from glm5lib.watch import WatchSettings, binding_limit, histogram_window, swing_note, window_row

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
    # all a histogram knows of a quantile is its bucket: the edges go beside the interpolated figure
    assert (h["p50_bucket"], h["p90_bucket"], h["p99_bucket"]) == ((0.1, 0.5), (0.5, 1.0), (1.0, 5.0))


def test_a_window_reads_the_offered_load_throughput_and_the_cap_that_binds():
    frame = _scrapes(100.0, 30, running=64, queued=192, usage=0.02, tokens_per_s=880, ttft_counts=[0, 0, 0, 90, 10])
    row = window_row(frame, 100.0, 130.0, index=1, cap=64)
    assert row["concurrency"] == 256 and row["running_median"] == 64 and row["queued_mean"] == 192
    assert row["output_throughput"] == pytest.approx(880) and row["total_output_tokens"] == pytest.approx(880 * 30)
    assert row["completed"] == pytest.approx(30) and row["mode"] == "watch"
    assert 1000 < row["median_ttft_ms"] < 5000 and row["median_ttft_ms_bucket"] == "1000-5000"
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
    # a batch the cap admits, with a few waiting beside it (real SGLang: 250 of a client's 256 running under
    # a cap of 256, 6 waiting for the prefill budget): not the cap
    assert binding_limit({**base, "running_median": 250.0, "queued_mean": 6.0}, 256, {})[0] == "admission"


def _prefill_log(t0: float, seconds: int, per_s: int, tokens: int) -> SimpleNamespace:
    """A parsed log whose prefill lines carry ``tokens`` each, ``per_s`` a second (log times are this
    machine's local clock, as a log written here has them)."""
    times = [pd.Timestamp(datetime.datetime.fromtimestamp(t0 + k / per_s)) for k in range(seconds * per_s)]
    prefill = pd.DataFrame({"time": times, "new_seq": 1, "new_token": tokens, "queue_req": 100})
    return SimpleNamespace(prefill=prefill, decode=pd.DataFrame())


def test_a_window_whose_prefill_forwards_fill_the_budget_names_the_prefill_budget():
    frame = _scrapes(100.0, 20, running=104, queued=122, usage=0.52, tokens_per_s=3258)
    row = window_row(frame, 100.0, 120.0, index=1, cap=256, log=_prefill_log(100.0, 20, 80, 512), budget=512)
    assert row["prefill_forwards"] >= 1500 and row["prefill_full_share"] == 1.0 and row["prefill_budget"] == 512
    assert row["binding"] == "token_budget"
    assert "the prefill budget (100% of the window's" in row["binding_text"] and "whole 512 tokens" in row["binding_text"]
    # forwards well short of the budget do not name it; nor does a window without a known budget
    short = window_row(frame, 100.0, 120.0, index=1, cap=256, log=_prefill_log(100.0, 20, 80, 200), budget=512)
    assert short["binding"] == "admission" and short["prefill_full_share"] == 0.0
    unknown = window_row(frame, 100.0, 120.0, index=1, cap=256, log=_prefill_log(100.0, 20, 80, 512))
    assert unknown["binding"] == "admission" and "prefill_forwards" not in unknown


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


LIVE = Path(__file__).resolve().parents[2] / "data" / "examples" / "h100-sglang-chunk-long" / "live" / "watch"


def test_windows_that_swing_under_a_steady_load_say_to_read_their_mean():
    # real SGLang under a closed loop of equal requests: 256 requests start and finish together, so a 20-s
    # window held one cohort's tokens or two (3,258, 3,264, 1,632 tok/s) at an offered load of 254-255
    windows = pd.read_csv(LIVE / "sweep.csv")
    note = swing_note(windows, 20)
    assert note is not None
    assert "from 1,632 to 3,264" in note and "254-255" in note and "2,718 tok/s" in note
    assert "windows of 60 s or more" in note  # four lifetimes of the 15-s median request, in tens
    # an idle window beside them (the traffic stopped) leaves the note to the windows that carried load
    idle = pd.concat([windows, windows.iloc[[0]].assign(concurrency=0, output_throughput=0.0)], ignore_index=True)
    assert swing_note(idle, 20) == note


@pytest.mark.parametrize("tok,load", [
    ([3000, 3100, 2900], [255, 254, 255]),  # steady: within a few percent
    ([3000, 1500, 3000], [255, 120, 255]),  # the load itself moved: the tok/s follows it
    ([3000], [255]),  # one window has nothing to swing against
])
def test_no_note_where_the_windows_agree_or_the_load_moved(tok, load):
    windows = pd.DataFrame({"output_throughput": tok, "concurrency": load, "median_e2e_latency_ms": 15000.0})
    assert swing_note(windows, 20) is None


def test_output_tokens_are_read_as_the_decode_steps_make_them_where_the_engine_counts_them_so():
    # SGLang's generation_tokens_total moves when a request finishes; realtime_tokens_total{mode="decode"}
    # moves with every decode step. Requests of 60 s at 1,000 tok/s in all: a 30-s window that ends
    # before any finishes saw 1,000 tok/s made and none finished
    frame = _scrapes(100.0, 30, running=64, queued=0, usage=0.2, tokens_per_s=0)
    extra = []
    for k in range(31):
        for mode, rate in (("decode", 1000.0), ("prefill_compute", 9000.0)):
            labels = json.dumps({"mode": mode, "tp_rank": "0"})
            extra.append((100.0 + k, "sglang:realtime_tokens_total", labels, 5000.0 + rate * k))
    frame = pd.concat([frame, pd.DataFrame(extra, columns=frame.columns)], ignore_index=True)
    row = window_row(frame, 100.0, 130.0, index=1, cap=256)
    assert row["token_source"] == "decode counter"
    assert row["output_throughput"] == pytest.approx(1000.0)  # the decode label set only, not the prefill one
    # an engine without it: the finished requests' counter, as before
    plain = window_row(_scrapes(100.0, 30, running=64, queued=0, usage=0.2, tokens_per_s=880), 100.0, 130.0, index=1)
    assert plain["token_source"] == "counter" and plain["output_throughput"] == pytest.approx(880)


@pytest.fixture
def utc(monkeypatch):
    """This machine's clock read as UTC, the GPU host's, whose log times are its local clock."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_recorded_watch_windows_read_the_prefill_budget_from_the_kept_log(utc):
    # the live watch of real SGLang: its log (kept) and its windows' bounds (sweep.csv); the scrapes were
    # left out of the example for size, so the window is read here from the log alone
    windows = pd.read_csv(LIVE / "sweep.csv")
    log = parse_log(LIVE / "server.log")
    frame = _scrapes(windows["window_start"][0], 20, running=104, queued=122, usage=0.52, tokens_per_s=3258)
    counts = []
    for _, w in windows.iterrows():
        row = window_row(frame, w["window_start"], w["window_end"], index=int(w["window"]), cap=256, log=log, budget=512)
        counts.append(row["prefill_forwards"])
        assert row["prefill_full_share"] == 1.0
    assert counts == [1699, 1492, 1726]
    first = window_row(frame, windows["window_start"][0], windows["window_end"][0], index=1, cap=256, log=log, budget=512)
    assert first["binding"] == "token_budget"
    # a row read back from sweep.csv holds floats: the budget is still named
    assert binding_limit({**first, "prefill_forwards": 1699.0}, 256, {})[0] == "token_budget"
