"""Tests for glm5lib.loadgen against real HTTP servers on loopback.

Most tests use a small aiohttp server defined at the bottom of this file and started as a child
process (``python tests/test_loadgen.py serve PORT``): it streams in SGLang's ``/generate`` format
(each chunk carries the whole text so far and cumulative ``meta_info.completion_tokens``) and in
the OpenAI format, and misbehaves on request (path prefix = scenario: errors, disconnects, stalls,
slow streams, several tokens per chunk, CRLF framing, a process that dies mid-level).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

HERE = Path(__file__).resolve()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChildServer:
    """The test server in a child process; ``alive()``/``fatal_lines()`` like glm5lib.server."""

    def __init__(self, tmp: Path, *extra: str) -> None:
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / f"server-{self.port}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE), "serve", str(self.port), *extra],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        deadline = time.monotonic() + 60  # a safety net: aiohttp's import alone takes seconds on a busy machine
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.base_url + "/ok/health", timeout=1).read()
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"test server did not start: {self.log_path.read_text()}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fatal_lines(self) -> list[str]:
        return [ln for ln in self.log_path.read_text().splitlines() if "exception" in ln.lower()]

    def stats(self) -> dict:
        return json.loads(urllib.request.urlopen(self.base_url + "/stats", timeout=5).read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ChildServer(tmp_path_factory.mktemp("srv"))
    yield srv
    srv.stop()


def _sweep(url: str, levels, **kw):
    from glm5lib.loadgen import run_sweep

    kw.setdefault("progress", False)
    kw.setdefault("warmup", 0)
    kw.setdefault("input_len", 16)
    kw.setdefault("output_len", 5)
    return run_sweep(url, levels, **kw)


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]


# --------------------------------------------------------------------------------------------
def test_generate_sweep_writes_rows_and_records(server, tmp_path):
    from glm5lib.loadgen import SWEEP_COLUMNS

    df = _sweep(server.base_url + "/ok", [1, 4], requests_per_level=8, run_dir=tmp_path, warmup=2)
    assert list(df["concurrency"]) == [1, 4]
    assert list(df["completed"]) == [8, 8] and list(df["failed"]) == [0, 0]
    assert list(df["total_output_tokens"]) == [40, 40]
    assert list(df["total_input_tokens"]) == [8 * 16, 8 * 16]
    assert (df["output_throughput"] > 0).all() and (df["window_end"] >= df["window_start"]).all()
    assert (df["median_ttft_ms"] > 0).all() and (df["median_e2e_latency_ms"] >= df["median_ttft_ms"]).all()
    assert (df["client_cpu_pct"] >= 0).all()
    on_disk = (tmp_path / "sweep.csv").read_text().splitlines()
    assert on_disk[0].split(",") == SWEEP_COLUMNS and len(on_disk) == 3
    recs = _records(tmp_path)
    assert sum(r["warmup"] for r in recs) == 2 and len(recs) == 18
    contract = {"level", "index", "warmup", "start", "first_token", "end", "chunk_times",
                "prompt_tokens", "output_tokens", "status", "http_status", "error"}
    for r in recs:
        assert contract <= set(r)
        if r["warmup"]:
            continue
        assert r["status"] == "ok" and r["http_status"] == 200 and r["error"] is None
        assert r["output_tokens"] == 5 and r["prompt_tokens"] == 16 and len(r["chunk_times"]) == 5
        assert r["start"] <= r["first_token"] == r["chunk_times"][0] <= r["end"]
        assert r["id"].startswith("req-") and r["token_source"] == "chunk"


def test_tokens_come_from_the_server_not_from_chunks(server):
    # Two tokens per chunk (like --stream-interval 2): counting chunks would halve the figures.
    df = _sweep(server.base_url + "/multi", [2], requests_per_level=4, output_len=6)
    assert df.loc[0, "total_output_tokens"] == 24
    assert df.loc[0, "completed"] == 4
    # TPOT spreads a chunk's gap over its tokens, ITL is per chunk (bench_serving's definitions).
    assert df.loc[0, "median_tpot_ms"] < 0.75 * df.loc[0, "median_itl_ms"]


@pytest.mark.parametrize(
    ("scenario", "api", "source"),
    [("ok", "completions", "chunk"), ("nousage", "completions", "final_usage"),
     ("ok", "chat", "chunk"), ("nousage", "chat", "final_usage")],
)
def test_openai_apis_usage_per_chunk_or_final(server, tmp_path, scenario, api, source):
    df = _sweep(server.base_url + f"/{scenario}", [2], api=api, requests_per_level=3, output_len=4, run_dir=tmp_path)
    assert df.loc[0, "completed"] == 3 and df.loc[0, "total_output_tokens"] == 12
    assert df.loc[0, "token_source"] == source
    for r in _records(tmp_path):
        # The chat role chunk and the usage-only chunk are not text chunks.
        assert len(r["chunk_times"]) == 4 and r["output_tokens"] == 4
        assert r["token_source"] == source and r["prompt_tokens"] is not None


def test_http_errors_are_counted_with_their_messages(server, tmp_path):
    df = _sweep(server.base_url + "/err500", [2], requests_per_level=10, run_dir=tmp_path)
    row = df.iloc[0]
    assert row["failed"] == 5 and row["completed"] == 5
    assert "5x HTTP 500" in row["error_summary"] and "scheduler overloaded" in row["error_summary"]
    bad = [r for r in _records(tmp_path) if r["status"] == "error"]
    assert len(bad) == 5 and all(r["http_status"] == 500 for r in bad)


@pytest.mark.parametrize(("scenario", "needle"), [("drop", "disconnected after 3 chunks"),
                                                   ("streamerr", "error in stream: NaN in the logits")])
def test_disconnects_and_stream_errors_are_failures(server, scenario, needle):
    df = _sweep(server.base_url + f"/{scenario}", [2], requests_per_level=4, output_len=8)
    assert df.loc[0, "failed"] == 4 and df.loc[0, "completed"] == 0
    assert needle in df.loc[0, "error_summary"]


def test_crlf_framing_and_text_prompts(server):
    df = _sweep(server.base_url + "/crlf", [2], requests_per_level=4, token_ids=False)
    assert df.loc[0, "completed"] == 4 and df.loc[0, "total_output_tokens"] == 20


def test_all_requests_rejected_stops_with_the_servers_message(server):
    from glm5lib.errors import LoadGenError, SweepAbortedError

    with pytest.raises(LoadGenError, match=r"HTTP 400.*unknown sampling parameter"):
        _sweep(server.base_url + "/reject", [2], requests_per_level=4, warmup=1)
    with pytest.raises(SweepAbortedError, match="every request was rejected"):
        _sweep(server.base_url + "/reject", [2], requests_per_level=30, health_interval=0.1)


def test_api_key_is_sent_and_never_written(server, tmp_path):
    from glm5lib.errors import SweepAbortedError

    df = _sweep(server.base_url + "/auth", [2], requests_per_level=4, run_dir=tmp_path, api_key="s3cret-key")
    assert df.loc[0, "completed"] == 4
    for name in ("sweep.csv", "requests.jsonl"):
        assert "s3cret" not in (tmp_path / name).read_text()
    with pytest.raises(SweepAbortedError, match="HTTP 401"):
        _sweep(server.base_url + "/auth", [2], requests_per_level=4, health_interval=0.1)


def test_duration_bound_level_cancels_in_flight_requests(server, tmp_path):
    t0 = time.monotonic()
    df = _sweep(server.base_url + "/slow", [4], duration=0.8, output_len=200, run_dir=tmp_path)
    elapsed = time.monotonic() - t0
    assert elapsed < 5.0  # a request alone would take 200 x 20 ms = 4 s
    row = df.iloc[0]
    assert row["cancelled"] == 4 and row["failed"] == 0 and row["completed"] == 0
    recs = _records(tmp_path)
    assert {r["status"] for r in recs} == {"cancelled"}
    assert all(0 < len(r["chunk_times"]) < 200 for r in recs)
    # Tokens streamed before the deadline still count toward throughput.
    assert 50 < row["output_throughput"] < 4 / 0.02 * 1.5


def test_stalled_stream_fails_with_a_timeout(server):
    df = _sweep(server.base_url + "/stall", [2], requests_per_level=2, read_timeout=0.4, health_interval=0.1)
    assert df.loc[0, "failed"] == 2 and "timeout: no data from the server for 0.4 s after 2 chunks" in df.loc[0, "error_summary"]


def test_server_death_stops_the_sweep_and_resume_skips_done_levels(tmp_path):
    from glm5lib.errors import SweepAbortedError
    from glm5lib.loadgen import load_requests, load_sweep

    dying = ChildServer(tmp_path, "--die-after", "14")
    try:
        with pytest.raises(SweepAbortedError) as info:
            _sweep(dying.base_url + "/ok", [2, 4], requests_per_level=10, output_len=20,
                   run_dir=tmp_path, server=dying, health_interval=0.2)
    finally:
        dying.stop()
    err = info.value
    assert err.level == 4 and err.completed_levels == [2]
    assert any("Scheduler hit an exception" in line for line in err.log_lines)
    assert "Scheduler hit an exception" in str(err) and "level 4" in str(err)
    done = load_sweep(tmp_path)
    assert list(done["concurrency"]) == [2]
    first_id = done.loc[0, "level_id"]

    healthy = ChildServer(tmp_path)
    try:
        df = _sweep(healthy.base_url + "/ok", [2, 4], requests_per_level=10, output_len=20, run_dir=tmp_path)
    finally:
        healthy.stop()
    assert list(df["concurrency"]) == [2, 4] and df.loc[0, "level_id"] == first_id
    assert list(load_sweep(tmp_path)["concurrency"]) == [2, 4]
    reqs = load_requests(tmp_path)
    # The interrupted attempt of level 4 is in the file but not among complete levels.
    assert set(reqs["level"]) == {2, 4} and len(reqs) == 20
    assert len(load_requests(tmp_path, complete_levels_only=False)) > 20


def test_a_level_the_server_died_at_the_end_of_is_not_kept(tmp_path):
    """The server fails the last request of level 4 with an HTTP error (no dropped connection,
    so nothing wakes the watchdog) and exits just after: that level must not become a sweep.csv
    row that resume would keep, though every other request of it finished."""
    from glm5lib.errors import SweepAbortedError
    from glm5lib.loadgen import load_sweep

    dying = ChildServer(tmp_path, "--die-after", "15")  # requests 1-8: level 2; 16 is level 4's last
    try:
        with pytest.raises(SweepAbortedError) as info:
            _sweep(dying.base_url + "/lastgasp", [2, 4], requests_per_level=8, run_dir=tmp_path, server=dying,
                   health_interval=30.0)
    finally:
        dying.stop()
    err = info.value
    assert err.level == 4 and err.completed_levels == [2]
    assert "fatal error" in str(err) or "process is gone" in str(err)
    assert any("Scheduler hit an exception" in line for line in err.log_lines)
    assert list(load_sweep(tmp_path)["concurrency"]) == [2]
    last = [r for r in _records(tmp_path) if r["level"] == 4]
    assert len(last) == 8 and [r["status"] for r in last].count("error") == 1  # kept on disk, all of them
    healthy = ChildServer(tmp_path)
    try:
        df = _sweep(healthy.base_url + "/ok", [2, 4], requests_per_level=8, run_dir=tmp_path)
    finally:
        healthy.stop()
    assert list(df["concurrency"]) == [2, 4] and df.loc[1, "failed"] == 0  # level 4 measured again


def test_a_server_still_starting_is_waited_for_not_taken_for_dead(tmp_path):
    """/health answers 503 while SGLang starts: the sweep waits for it, then measures."""
    starting = ChildServer(tmp_path)
    try:
        df = _sweep(starting.base_url + "/starting", [2], requests_per_level=4, output_len=4)
    finally:
        starting.stop()
    assert df.iloc[0]["completed"] == 4 and df.iloc[0]["failed"] == 0


class _Unhealthy(ChildServer):
    def healthy(self, timeout: float = 2.0) -> bool:  # answers 503 at once, as SGLang shutting down
        return False


def test_a_server_answering_503_with_stalled_streams_is_unhealthy_not_hung(tmp_path):
    from glm5lib.errors import SweepAbortedError

    srv = _Unhealthy(tmp_path)
    try:
        with pytest.raises(SweepAbortedError, match="unhealthy") as info:
            _sweep(srv.base_url + "/stall", [2], requests_per_level=2, server=srv, health_interval=0.2,
                   health_timeout=0.5)
    finally:
        srv.stop()
    assert "hung" not in str(info.value) and "refused or answered no 200" in str(info.value)


def test_server_death_without_a_server_object_is_found_by_health(tmp_path):
    from glm5lib.errors import SweepAbortedError

    dying = ChildServer(tmp_path, "--die-after", "3")
    try:
        with pytest.raises(SweepAbortedError, match="/health failed") as info:
            _sweep(dying.base_url + "/ok", [2], requests_per_level=20, output_len=20, health_interval=0.2)
    finally:
        dying.stop()
    assert "pass server=" in str(info.value)


def test_poisson_arrivals_capped_by_concurrency(server):
    t0 = time.monotonic()
    df = _sweep(server.base_url + "/ok", [3], mode="poisson", rate=40.0, requests_per_level=12)
    row = df.iloc[0]
    assert row["completed"] == 12 and row["request_rate"] == 40.0 and row["mode"] == "poisson"
    assert row["mean_concurrency"] <= 3.0 + 1e-9
    assert time.monotonic() - t0 > 0.1  # 12 arrivals at 40/s take about 0.3 s


def test_client_ttft_matches_the_servers_first_chunk_time(server, tmp_path):
    _sweep(server.base_url + "/paced", [2], requests_per_level=6, run_dir=tmp_path)
    stats = server.stats()
    gaps = sorted(r["first_token"] - stats[r["id"]]["first_sent"] for r in _records(tmp_path))
    assert all(g >= -0.001 for g in gaps)  # same clock: never received before it was sent
    assert gaps[len(gaps) // 2] < 0.02


def test_callback_events_and_a_broken_callback_does_not_stop_the_sweep(server):
    events = []

    def callback(event):
        events.append(event)
        raise RuntimeError("widget broke")

    # 80 tokens at 20 ms: a 1.6 s level, long enough for one progress tick (one a second).
    df = _sweep(server.base_url + "/slow", [2], requests_per_level=2, output_len=80, callback=callback, progress=True)
    kinds = [e["event"] for e in events]
    assert kinds[0] == "level_start" and kinds[-1] == "level_done" and "progress" in kinds
    assert events[-1]["row"]["completed"] == 2 and df.loc[0, "completed"] == 2
    # A light level: the self-check measured the loop and did not blame the client.
    assert 0 <= df.loc[0, "loop_lag_p99_ms"] < 500 and not df.loc[0, "client_bound"]


def test_progress_bar_and_callback_update_about_once_a_second(server, capsys):
    from glm5lib.loadgen.sweep import PROGRESS_INTERVAL_S

    progress = []
    duration = 3.0
    df = _sweep(server.base_url + "/slow", [4], duration=duration, output_len=1000, progress=True,
                callback=lambda e: progress.append(e) if e["event"] == "progress" else None)
    assert df.loc[0, "cancelled"] == 4
    ticks = duration / PROGRESS_INTERVAL_S
    # The callback: one progress event per tick, the last with the tokens streamed so far.
    assert ticks - 1 <= len(progress) <= ticks + 1
    assert all(b["elapsed"] - a["elapsed"] >= 0.9 * PROGRESS_INTERVAL_S for a, b in itertools.pairwise(progress))
    assert progress[-1]["output_tokens"] > 0 and progress[-1]["in_flight"] == 4
    # The bar: tqdm redraws with a carriage return; one redraw per tick plus opening and closing.
    redraws = capsys.readouterr().err.count("C=4")
    assert 2 <= redraws <= ticks + 4


def test_run_sweep_works_inside_a_running_event_loop(server):
    async def notebook_cell():
        return _sweep(server.base_url + "/ok", [2], requests_per_level=2)

    df = asyncio.run(notebook_cell())
    assert df.loc[0, "completed"] == 2


def test_cli_sweep_writes_a_run_folder(server, tmp_path, capsys):
    from glm5lib.cli import main

    code = main(["sweep", server.base_url + "/ok", "-c", "1,2", "-n", "3", "--output-len", "4",
                 "--run-dir", str(tmp_path), "--phase", "baseline", "--no-progress", "--warmup", "0"])
    assert code == 0
    out = capsys.readouterr().out
    assert "written:" in out and (tmp_path / "baseline" / "sweep.csv").exists()
    assert len((tmp_path / "baseline" / "sweep.csv").read_text().splitlines()) == 3


def test_cli_sweep_reads_the_api_key_from_a_file_or_the_environment(server, tmp_path, capsys, monkeypatch):
    from glm5lib.cli import main

    monkeypatch.delenv("GLM5_API_KEY", raising=False)
    key = tmp_path / "key"
    key.write_text("s3cret-key\n")
    argv = ["sweep", server.base_url + "/auth", "-c", "2", "-n", "2", "--output-len", "4", "-q", "--warmup", "0"]
    assert main([*argv, "--run-dir", str(tmp_path / "file"), "--api-key-file", str(key)]) == 0
    monkeypatch.setenv("GLM5_API_KEY", "s3cret-key")
    assert main([*argv, "--run-dir", str(tmp_path / "env")]) == 0
    assert "written:" in capsys.readouterr().out
    for run in ("file", "env"):
        assert "s3cret" not in (tmp_path / run / "sweep" / "requests.jsonl").read_text()


def test_cli_sweep_with_the_server_log_attached(server, tmp_path, capsys):
    from glm5lib.cli import main

    code = main(["sweep", server.base_url + "/slow", "-c", "2", "-n", "2", "--output-len", "30",
                 "--run-dir", str(tmp_path), "--no-progress", "--warmup", "0",
                 "--server-log", str(server.log_path)])
    assert code == 0 and "written:" in capsys.readouterr().out


def test_attached_server_health_probes_pass_while_it_serves(server):
    from glm5lib import server as glm5_server

    attached = glm5_server.attach(server.base_url + "/ok", log_path=server.log_path)
    df = _sweep(server.base_url + "/slow", [2], requests_per_level=2, output_len=80, server=attached,
                health_interval=0.05)
    assert df.loc[0, "completed"] == 2


def test_bad_arguments_name_the_input_and_what_is_valid():
    from glm5lib.errors import ConfigError, LoadGenError
    from glm5lib.loadgen import run_sweep

    with pytest.raises(ConfigError) as e:
        run_sweep("http://127.0.0.1:1", [1], api="grpc")
    assert e.value.field == "api" and "chat" in e.value.valid
    with pytest.raises(ConfigError, match="concurrency 0"):
        run_sweep("http://127.0.0.1:1", [0])
    with pytest.raises(ConfigError, match="needs rate"):
        run_sweep("http://127.0.0.1:1", [1], mode="poisson")
    with pytest.raises(ConfigError, match="base_url"):
        run_sweep("127.0.0.1:30000", [1])
    with pytest.raises(LoadGenError, match=r"no server answers at http://127\.0\.0\.1:1"):
        run_sweep("http://127.0.0.1:1", [1], progress=False)


def test_workload_is_seeded_and_respects_ranges(tmp_path):
    from glm5lib.errors import ConfigError
    from glm5lib.loadgen import make_workload

    a = make_workload(20, level=8, seed=1, input_len=100, output_len=50, range_ratio=0.5)
    b = make_workload(20, level=8, seed=1, input_len=100, output_len=50, range_ratio=0.5)
    c = make_workload(20, level=8, seed=2, input_len=100, output_len=50, range_ratio=0.5)
    assert a == b and a != c
    assert all(50 <= len(s.prompt) <= 100 and 25 <= s.output_len <= 50 for s in a)
    assert len({len(s.prompt) for s in a}) > 1
    words = make_workload(3, level=1, token_ids=False, input_len=30)
    assert all(isinstance(s.prompt, str) and len(s.prompt.split()) == 30 for s in words)

    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "hello there", "output_len": 7}\n{"text": "second"}\n')
    specs = make_workload(10, level=1, dataset=data, output_len=9)
    assert {s.prompt for s in specs} <= {"hello there", "second"}
    assert all(s.output_len == (7 if s.prompt == "hello there" else 9) for s in specs)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "x"}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl line 1"):
        make_workload(1, level=1, dataset=bad)
    with pytest.raises(ConfigError, match="range_ratio"):
        make_workload(1, level=1, range_ratio=2.0)


def test_steady_window_drops_ramp_up_and_drain():
    from glm5lib.loadgen import RequestRecord, level_stats

    # 4 in flight from t=0; first tokens at t=1 (ramp-up), 10 tokens/s each until the last
    # request is issued at t=5, then the drain: only one request left streaming until t=9.
    recs = []
    for i in range(4):
        r = RequestRecord(level=4, index=i, start=0.0, status="ok", prompt_tokens=10)
        end = 9.0 if i == 0 else 5.0
        r.chunk_times = [1.0 + k * 0.1 for k in range(int((end - 1.0) / 0.1) + 1)]
        r.chunk_tokens = list(range(1, len(r.chunk_times) + 1))
        r.first_token, r.end, r.output_tokens = 1.0, end, len(r.chunk_times)
        recs.append(r)
    row = level_stats(recs, concurrency=4, last_issue=5.0)
    assert row["window_start"] == 1.0 and row["window_end"] == 5.0 and row["window_note"].startswith("steady")
    assert row["output_throughput"] == pytest.approx(40.0, rel=0.1)
    # Over the whole level the drain would pull it down to about 20 tok/s.
    assert row["output_throughput_overall"] < 25.0
    assert math.isclose(row["mean_concurrency"], 4.0)


def test_steady_window_of_a_queued_level_cut_at_its_deadline():
    from glm5lib.loadgen import RequestRecord, level_stats

    # C=4 against a server that runs 2 at a time: requests 0 and 1 stream 10 tokens/s from
    # t=3 (after a long prefill), 2 and 3 wait in its queue; the level is cut at t=10 with all
    # four in flight. No request finished and not all of the first four ever streamed.
    recs = []
    for i in range(4):
        r = RequestRecord(level=4, index=i, start=0.001 * i, status="cancelled", prompt_tokens=10, end=10.002)
        if i < 2:
            r.chunk_times = [3.0 + k * 0.1 for k in range(70)]
            r.chunk_tokens = list(range(1, 71))
            r.first_token = 3.0
        recs.append(r)
    row = level_stats(recs, concurrency=4, last_issue=0.003, deadline=10.0)
    # The window ends at the last token arrival before the deadline (t=9.9).
    assert row["window_start"] == 3.0 and row["window_end"] == pytest.approx(9.9)
    assert "peak of 2" in row["window_note"] and "deadline, 4 in flight cancelled" in row["window_note"]
    assert row["output_throughput"] == pytest.approx(20.0, rel=0.02)  # the whole level: 14
    assert row["completed"] == 0 and row["output_throughput_overall"] == 0.0


def test_against_the_stand_in_server(tmp_path):
    from glm5lib.engines import sim as testing
    with testing.run_standin("--max-running-requests", "8") as srv:
        for api in ("generate", "completions"):
            df = _sweep(srv.base_url, [2, 4], api=api, requests_per_level=4, output_len=8, input_len=32,
                        run_dir=tmp_path / api)
            assert list(df["completed"]) == [4, 4] and list(df["failed"]) == [0, 0]
            assert list(df["total_output_tokens"]) == [32, 32]
            assert set(df["token_source"]) == {"chunk"}
            recs = _records(tmp_path / api)
            assert all(r["prompt_tokens"] and r["output_tokens"] == 8 for r in recs)


def test_random_ids_are_sized_from_the_served_models_vocabulary(tmp_path):
    """The model folder the server names (/get_model_info) gives the vocabulary the ids are drawn
    from; each level says so in prompt_source."""
    from glm5lib.engines import sim as testing
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text('{"vocab_size": 2048}')
    with testing.run_standin("--max-running-requests", "8", "--model-path", str(model)) as srv:
        df = _sweep(srv.base_url, [2], requests_per_level=2, output_len=4, input_len=32, run_dir=tmp_path / "r")
    assert list(df["completed"]) == [2]
    assert df["prompt_source"].iloc[0].startswith("token_ids 204-2007 (vocabulary 2,048 from ")


def _launch_standin(*faults: str):
    from glm5lib.engines import sglang

    extra = [a for f in faults for a in ("--sim-fault", f)]
    return sglang.launch(["--max-running-requests", "4"], backend="sim", extra_args=extra, ready_timeout=60)


def test_stand_in_nan_crash_stops_the_sweep_with_its_fatal_lines(tmp_path):
    from glm5lib.errors import SweepAbortedError

    srv = _launch_standin("nan-after=10")
    try:
        with pytest.raises(SweepAbortedError) as info:
            _sweep(srv.base_url, [2, 4], requests_per_level=8, output_len=8, input_len=32,
                   run_dir=tmp_path, server=srv, health_interval=0.2)
    finally:
        srv.stop()
    err = info.value
    assert err.level == 4 and err.completed_levels == [2]
    assert any("NaN" in line for line in err.log_lines), err.log_lines
    from glm5lib.loadgen import load_sweep

    assert list(load_sweep(tmp_path)["concurrency"]) == [2]


def test_stand_in_that_hangs_is_reported_as_hung(tmp_path):
    from glm5lib.errors import SweepAbortedError

    srv = _launch_standin("hang-after=2")
    try:
        t0 = time.monotonic()
        with pytest.raises(SweepAbortedError, match=r"did not answer within 0\.5 s") as info:
            _sweep(srv.base_url, [2], requests_per_level=8, output_len=8, input_len=32, server=srv,
                   health_interval=0.2, health_timeout=0.5, read_timeout=1.0)
        assert time.monotonic() - t0 < 30  # three probes, not a long read timeout
        assert srv.alive()  # hung, not dead
    finally:
        srv.stop()
    assert info.value.level == 2


# ------------------------------------------------------------------ the test server ----------
def _serve(port: int, die_after: int | None) -> None:  # pragma: no cover - runs in a child process
    from aiohttp import web

    count = {"n": 0}
    first_sent: dict[str, dict[str, float]] = {}

    async def health(request):
        if request.match_info["sc"] == "starting":  # 503 to the first three probes, as while loading
            count["health"] = count.get("health", 0) + 1
            return web.Response(status=503 if count["health"] <= 3 else 200)
        return web.Response(status=503 if request.match_info["sc"] == "sick" else 200)

    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": "test-model", "object": "model"}]})

    async def stats(request):
        return web.json_response(first_sent)

    def frame(obj, sc) -> bytes:
        sep = b"\r\n\r\n" if sc == "crlf" else b"\n\n"
        return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + sep

    async def stream(request, api):
        sc = request.match_info["sc"]
        body = await request.json()
        count["n"] += 1
        n = count["n"]
        if die_after is not None and n > die_after:
            print("[2026-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):", flush=True)
            print("RuntimeError: simulated crash", flush=True)
            if sc == "lastgasp":  # the dying server still answers this request, with an error
                asyncio.get_running_loop().call_later(0.5, os._exit, 3)
                return web.json_response({"error": {"message": "scheduler died"}}, status=500)
            os._exit(3)
        if sc == "auth" and request.headers.get("Authorization") != "Bearer s3cret-key":
            return web.json_response({"error": {"message": "invalid API key"}}, status=401)
        if sc == "starting" and count.get("health", 0) <= 3:
            return web.json_response({"error": {"message": "the server is starting"}}, status=503)
        if sc == "reject":
            return web.json_response({"error": {"message": "unknown sampling parameter 'foo'"}}, status=400)
        if sc == "err500" and n % 2 == 0:
            return web.json_response({"error": {"message": "scheduler overloaded"}}, status=500)
        rid = f"req-{n}"
        if api == "generate":
            prompt = body.get("input_ids") or body.get("text", "").split()
            out_len = body["sampling_params"]["max_new_tokens"]
        else:
            prompt = body.get("prompt") or body["messages"][0]["content"].split()
            out_len = body["max_tokens"]
            opts = body.get("stream_options") or {}
        per_chunk = 2 if sc == "multi" else 1
        delay = {"slow": 0.02, "paced": 0.01, "multi": 0.01}.get(sc, 0.0)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if sc == "paced":
            await asyncio.sleep(0.02)
        if api == "chat":
            await resp.write(frame({"id": rid, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
                                    "usage": None}, sc))
        k = 0
        text = ""
        while k < out_len:
            k = min(out_len, k + per_chunk)
            text += " tok"
            if api == "generate":
                obj = {"text": text, "output_ids": list(range(k)), "meta_info": {
                    "id": rid, "finish_reason": None, "prompt_tokens": len(prompt), "completion_tokens": k}}
            else:
                usage = ({"prompt_tokens": len(prompt), "completion_tokens": k, "total_tokens": len(prompt) + k}
                         if opts.get("continuous_usage_stats") and sc != "nousage" else None)
                choice = {"index": 0, "delta": {"content": " tok"}} if api == "chat" else {"index": 0, "text": " tok"}
                obj = {"id": rid, "choices": [choice], "usage": usage}
            if sc == "streamerr" and k == 3:
                await resp.write(frame({"error": {"message": "NaN in the logits"}}, sc))
                return resp
            if k == per_chunk:  # stamped before the write: a busy machine may run the client first
                first_sent[rid] = {"first_sent": time.time()}
            await resp.write(frame(obj, sc))
            if sc == "drop" and k == 3:
                request.transport.close()
                return resp
            if sc == "stall" and k == 2:
                await asyncio.sleep(3600)
            if delay:
                await asyncio.sleep(delay)
        if api != "generate" and opts.get("include_usage"):
            await resp.write(frame({"id": rid, "choices": [], "usage": {
                "prompt_tokens": len(prompt), "completion_tokens": out_len, "total_tokens": len(prompt) + out_len}}, sc))
        await resp.write(frame(b"[DONE]", sc))
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/stats", stats)
    app.router.add_get("/{sc}/health", health)
    app.router.add_get("/{sc}/v1/models", models)
    app.router.add_post("/{sc}/generate", functools.partial(stream, api="generate"))
    app.router.add_post("/{sc}/v1/completions", functools.partial(stream, api="completions"))
    app.router.add_post("/{sc}/v1/chat/completions", functools.partial(stream, api="chat"))

    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) >= 3 and sys.argv[1] == "serve":
        die = int(sys.argv[4]) if len(sys.argv) >= 5 and sys.argv[3] == "--die-after" else None
        _serve(int(sys.argv[2]), die)


def _cohorts(deadline, clients=8, prefill=1.0, tokens=20, step=0.1, stall=None):
    """A closed loop of like requests as real SGLang ran it (h100-sglang-cap-chunk): every client's
    request waits ``prefill`` s for its first token, streams ``tokens`` at ``step`` s, and its
    successor is issued as it ends, so the loop moves in cycles; the level is cut at ``deadline``. From
    ``stall`` s on, a cohort's prefill takes five times as long (the server lulls)."""
    from glm5lib.loadgen import RequestRecord

    recs, t0, index = [], 0.0, 0
    while t0 < deadline:
        wait = prefill * (5 if stall is not None and t0 >= stall else 1)
        times = [t0 + wait + k * step for k in range(tokens)]
        for _ in range(clients):
            kept = [t for t in times if t < deadline]
            done = len(kept) == tokens
            r = RequestRecord(level=clients, index=index, start=t0, status="ok" if done else "cancelled",
                              prompt_tokens=100, chunk_times=kept, chunk_tokens=list(range(1, len(kept) + 1)),
                              first_token=kept[0] if kept else None, output_tokens=len(kept) or None,
                              end=times[-1] if done else deadline + 0.001, token_source="chunk")
            recs.append(r)
            index += 1
        t0 = times[-1]
    return recs


@pytest.mark.parametrize("deadline", [9.0, 9.7, 10.4, 11.1, 11.8])
def test_a_cycling_closed_loop_reads_the_rate_it_sustains_wherever_its_deadline_falls(deadline):
    from glm5lib.loadgen import SUB_CYCLE, level_stats

    # Each cycle: 1 s of prefill, then 20 tokens over 1.9 s: 8 x 20 tokens every 2.9 s.
    recs = _cohorts(deadline)
    row = level_stats(recs, concurrency=8, last_issue=max(r.start for r in recs), deadline=deadline)
    sustained = 8 * 20 / 2.9
    assert row["output_throughput"] == pytest.approx(sustained, rel=0.01), row["window_note"]
    assert "moved back to where 8 streamed again" in row["window_note"] and SUB_CYCLE not in row["window_note"]
    # The window spans whole cycles: from the first cohort's first tokens to a later cohort's.
    cycles = (row["window_end"] - row["window_start"]) / 2.9
    assert row["window_start"] == 1.0 and cycles == pytest.approx(round(cycles)) and cycles >= 2


def test_a_lull_longer_than_a_request_is_not_taken_for_a_point_of_the_cycle():
    from glm5lib.loadgen import level_stats

    # cycles of 2.9 s until the cohort issued at 5.8 s waits 5 s for its first tokens: the count stays
    # at 0 for 5 s, longer than any request took, so the window keeps its end at the deadline
    recs = _cohorts(10.5, stall=5.0)
    row = level_stats(recs, concurrency=8, last_issue=max(r.start for r in recs), deadline=10.5)
    assert "moved back" not in row["window_note"] and row["window_end"] == pytest.approx(5.8)  # its last token
    assert level_stats(_cohorts(10.5), concurrency=8, last_issue=8.7, deadline=10.5)["window_end"] == pytest.approx(9.7)


def test_a_closed_loop_window_of_less_than_one_cycle_says_so():
    from glm5lib.loadgen import SUB_CYCLE, level_stats

    recs = _cohorts(2.5)  # cut during the first cohort's decode: no successor ever streamed
    row = level_stats(recs, concurrency=8, last_issue=0.0, deadline=2.5)
    assert row["steady"] and SUB_CYCLE in row["window_note"] and "8 streamed at its start" in row["window_note"]
    assert row["output_throughput"] == pytest.approx(8 / 0.1, rel=0.01)  # the decode rate, above the loop's
    # an open loop has no cycle to match: its window is left as it was
    assert SUB_CYCLE not in level_stats(recs, concurrency=8, last_issue=0.0, deadline=2.5, closed=False)["window_note"]


def test_duration_bound_level_shorter_than_a_request_measures_the_steady_rate(tmp_path):
    """A level cut at its deadline before any request finished still measures decode speed.

    The stand-in (fix flags, a cap well above C) logs its own generation throughput every 10
    decode steps; the client's steady window must agree with it although the 6 s level ends
    long before one 256-token request could finish and the ramp-up (prefill of 64 prompts of
    1,024 tokens) takes a large part of it. Counting the whole level would read ~45% low.
    """
    from glm5lib.engines import sim as testing
    from glm5lib.logs import parse_log

    conc = 64
    with testing.run_standin(
        "--max-running-requests", "1024", "--disable-cuda-graph", "--disable-radix-cache",
        "--decode-log-interval", "10",
    ) as srv:
        df = _sweep(srv.base_url, [conc], duration=6.0, output_len=256, input_len=1024, warmup=0,
                    run_dir=tmp_path)
        time.sleep(0.3)
        decode = parse_log(srv.log_path).decode
    row = df.iloc[0]
    assert row["completed"] == 0 and row["cancelled"] == conc
    # The window starts once all 64 stream and ends at the deadline, not at the level's end.
    assert row["window_note"].startswith("steady") and "deadline" in row["window_note"]
    assert row["start_time"] + 0.5 < row["window_start"] < row["window_end"] <= row["start_time"] + 6.05
    assert math.isclose(row["mean_concurrency"], conc, rel_tol=0.02)
    # The server's own figure, from log lines over decode-only intervals at the full batch
    # (the first such line also covers part of the prefill).
    full = decode[decode["running_req"] == conc]["gen_throughput"].iloc[1:]
    assert len(full) >= 2
    server_rate = float(full.median())
    assert row["output_throughput"] == pytest.approx(server_rate, rel=0.15)
    # bench_serving's overall figure counts finished requests only: none here.
    assert row["output_throughput_overall"] == 0.0


# ---------------------------------------------------------------------------------------------
# the settings object behind run_sweep's keywords
# ---------------------------------------------------------------------------------------------
def test_run_sweep_lists_its_options_in_its_signature():
    import inspect

    from glm5lib.loadgen import SweepSettings, run_sweep, run_sweep_async

    for fn in (run_sweep, run_sweep_async):
        params = inspect.signature(fn).parameters
        assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for name in [*SweepSettings.field_names(), "settings", "run_dir", "api_key", "server", "progress",
                     "callback", "stop_event"]:
            assert name in params, name
        # the keywords' defaults are the settings' defaults
        for name in SweepSettings.field_names():
            assert params[name].default == getattr(SweepSettings(), name) or name == "token_ids", name
        # one list: the settings' fields, in order, between the URL and levels and the outputs
        assert list(params)[2 : 2 + len(SweepSettings.field_names())] == SweepSettings.field_names()
    # a keyword that is neither a setting nor an output is refused as Python refuses it
    with pytest.raises(TypeError, match="durations"):
        run_sweep("http://127.0.0.1:1", [1], durations=5, progress=False)
    assert "read_timeout" in run_sweep.__doc__ and ", *, api: " in str(inspect.signature(run_sweep))


@pytest.mark.parametrize("kwargs, field", [
    ({"api": "grpc"}, "api"),
    ({"mode": "burst"}, "mode"),
    ({"input_len": 0}, "input_len"),
    ({"output_len": 2.5}, "output_len"),
    ({"range_ratio": 1.5}, "range_ratio"),
    ({"requests_per_level": 0}, "requests_per_level"),
    ({"duration": -1}, "duration"),
    ({"warmup": -1}, "warmup"),
    ({"rate": 2.0}, "rate"),
    ({"mode": "poisson", "rate": [1.0, 0.0]}, "rate"),
    ({"api": "chat", "token_ids": True}, "token_ids"),
    ({"ignore_eos": "yes"}, "ignore_eos"),
    ({"temperature": -0.1}, "temperature"),
    ({"extra_body": ["x"]}, "extra_body"),
    ({"health_timeout": 0}, "health_timeout"),
])
def test_sweep_settings_refuse_bad_values_naming_the_field(kwargs, field):
    from glm5lib.errors import ConfigError
    from glm5lib.loadgen import SweepSettings, run_sweep

    with pytest.raises(ConfigError) as e:
        SweepSettings(**kwargs)
    assert e.value.field == field
    with pytest.raises(ConfigError) as e:  # the same check through run_sweep, before any request
        run_sweep("http://127.0.0.1:1", [1], progress=False, **kwargs)
    assert e.value.field == field


def test_sweep_settings_defaults_and_valid_values():
    from glm5lib.errors import ConfigError
    from glm5lib.loadgen import SweepSettings

    assert SweepSettings().token_ids is True and SweepSettings(api="chat").token_ids is False
    with pytest.raises(ConfigError) as e:
        SweepSettings(mode="burst")
    assert e.value.valid == ["closed", "poisson"]
    with pytest.raises(ConfigError) as e:
        SweepSettings(api="grpc")
    assert "completions" in e.value.valid


def test_a_settings_object_drives_the_sweep_and_does_not_mix_with_keywords(server, tmp_path):
    from glm5lib.errors import ConfigError
    from glm5lib.loadgen import SweepSettings, run_sweep

    settings = SweepSettings(requests_per_level=3, input_len=16, output_len=4, warmup=0)
    df = run_sweep(server.base_url + "/ok", [1, 2], settings=settings, run_dir=tmp_path, progress=False)
    assert list(df["completed"]) == [3, 3] and set(df["output_len"]) == {4}
    with pytest.raises(ConfigError, match="output_len") as e:
        run_sweep(server.base_url + "/ok", [1], settings=settings, output_len=8, progress=False)
    assert e.value.field == "settings"


# ---------------------------------------------------------------------------------------------
# client_bound: only when the client was the limit
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cpu, lag, itl, bound", [
    (13.0, 31.0, 73.0, False),   # the stand-in at 256 streams: a lag that is noise against the token gap
    (99.0, 31.0, 73.0, False),   # a busy core, but the loop still read tokens well inside their gap
    (13.0, 60.0, 73.0, False),   # most of a gap, but the client had CPU to spare: not its limit
    (95.0, 60.0, 73.0, True),    # a saturated core whose loop delayed tokens by most of their gap
    (95.0, 4.0, 6.0, True),      # fast decode: 4 ms is two thirds of a 6 ms gap
    (25.0, 90.0, 73.0, True),    # a client starved of CPU on a busy machine: tokens wait longer than a gap
    (25.0, 80.0, 0.0, True),     # tokens arrive together: the server outpaces the reader
    (95.0, 30.0, float("nan"), True),   # no gap measured: the absolute bound decides
    (95.0, 10.0, float("nan"), False),
    (13.0, 30.0, float("nan"), False),
])
def test_client_limited_relates_loop_lag_to_the_inter_token_interval(cpu, lag, itl, bound):
    from glm5lib.loadgen import client_limited

    verdict, ratio = client_limited(cpu, lag, itl)
    assert verdict is bound
    if math.isnan(itl):
        assert math.isnan(ratio)
    elif itl == 0:
        assert ratio == math.inf
    else:
        assert ratio == pytest.approx(lag / itl)


@pytest.mark.slow
def test_256_streams_against_the_stand_in_are_not_client_bound(tmp_path):
    """The stand-in's baseline at 256 streams: about 880 tok/s over 64 running requests, so tokens
    come ~70 ms apart; the client reads them with room to spare and must not be blamed."""
    from glm5lib.engines import sglang
    from glm5lib.engines.sglang.config import ServerConfig
    from glm5lib.loadgen import run_sweep

    srv = sglang.launch(ServerConfig.load("glm5-baseline"), backend="sim", log_path=tmp_path / "server.log",
                        ready_timeout=60)
    try:
        df = run_sweep(srv.base_url, [256], duration=6.0, input_len=256, output_len=256, warmup=2,
                       run_dir=tmp_path, server=srv, progress=False)
    finally:
        srv.stop()
    row = df.iloc[0]
    # the verdict's inputs are in the table, and they say the client kept up
    assert row["client_cpu_pct"] >= 0 and row["loop_lag_p99_ms"] >= 0 and row["median_itl_ms"] > 20
    assert row["loop_lag_itl_ratio"] == pytest.approx(row["loop_lag_p99_ms"] / row["median_itl_ms"])
    assert not row["client_bound"], row[["client_cpu_pct", "loop_lag_p99_ms", "median_itl_ms"]].to_dict()
    on_disk = pd.read_csv(tmp_path / "sweep.csv")
    assert {"client_cpu_pct", "loop_lag_p99_ms", "loop_lag_itl_ratio", "client_bound"} <= set(on_disk.columns)
