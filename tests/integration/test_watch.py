"""``glm5 watch`` against live servers carrying traffic from an independent client (plain_client.py,
its own process, not glm5lib's load generator): it names the limit a sweep at the same offered load
names, its phase gets the same leading finding from ``glm5 diagnose``, its token counters agree with
what the client received, and the server's request counter shows it sent no inference request.

The stand-in (cap 64, 256 offered) runs everywhere; real vLLM on CPU (cap 4, 16 offered) where
``make vllm`` installed it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from glm5lib import diagnose, engines, phase, rundir
from glm5lib.cli import main
from glm5lib.engines.sim import run_standin
from glm5lib.errors import ConfigError
from glm5lib.watch import Watch, WatchSettings

pytestmark = [pytest.mark.slow]

CLIENT = Path(__file__).with_name("plain_client.py")
STANDIN = ["--model-path", "glm5", "--tp-size", "8", "--max-running-requests", "64"]


def _client(url: str, out: Path, *, concurrency: int, duration: float, api: str = "generate", max_tokens: int = 128,
            model: str = "") -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(CLIENT), url, "--api", api, "--concurrency", str(concurrency),
                             "--duration", str(duration), "--max-tokens", str(max_tokens), "--model", model,
                             "--out", str(out)])


def _received(out: Path, t0: float, t1: float) -> float:
    """The client's tokens per second between t0 and t1 (its per-second counts)."""
    bins = {int(k): v for k, v in json.loads(out.read_text())["tokens_by_second"].items()}
    return sum(v for k, v in bins.items() if t0 <= k + 0.5 < t1) / (t1 - t0)


def _requests_total(url: str, names: tuple[str, ...]) -> float:
    from glm5lib import http

    text = http.get(url, "/metrics").text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.split("{")[0].split(" ")[0] in names)


@pytest.mark.timeout(400)
def test_watching_the_stand_in_names_its_cap_without_sending_a_request(tmp_path):
    log = tmp_path / "server.log"
    with run_standin(*STANDIN, "--enable-metrics", log_path=log) as srv:
        url = srv.base_url
        finished = engines.metric_names("requests_finished")
        # idle: a watched window with no traffic leaves the request and token counters where they were
        before = _requests_total(url, finished)
        idle = Watch(WatchSettings(url=url, duration=6, window=6, run_dir=tmp_path / "idle", gpu=False)).run()
        assert _requests_total(url, finished) == before
        assert idle.windows["output_throughput"].fillna(0).eq(0).all() and idle.windows["binding"].eq("idle").all()

        out = tmp_path / "client.json"
        client = _client(url, out, concurrency=256, duration=45)
        time.sleep(6)  # the client's first requests are queued behind the cap
        assert main(["watch", url, "--log", str(log), "--duration", "30", "--window", "10",
                     "--run-dir", str(tmp_path / "run"), "--phase", "watch"]) == 0
        client.wait(timeout=120)
        # a sweep of glm5lib's own at the same offered load, on the same server, for comparison
        phase.measure_phase(None, tmp_path / "run", "sweep", backend=url, attach_log=str(log), concurrencies=[256],
                            duration=10.0, input_len=64, output_len=128, warmup=0, progress=False, gpu=False)
    windows = pd.read_csv(tmp_path / "run" / "watch" / "sweep.csv")
    assert len(windows) == 3 and set(windows["binding"]) == {"running_cap"}, windows
    assert (windows["concurrency"] == 256).all() and (windows["running_median"] == 64).all()
    for _, w in windows.iterrows():
        got = _received(out, w["start_time"], w["end_time"])
        assert w["output_throughput"] == pytest.approx(got, rel=0.10), (w["window"], w["output_throughput"], got)
    meta = json.loads((tmp_path / "run" / "watch" / rundir.WATCH).read_text())
    assert "no inference request" in meta["what"] and meta["scrape_cost"]["wall_ms"] > 0
    watched = diagnose.diagnose(tmp_path / "run", phase="watch", write=False)
    swept = diagnose.diagnose(tmp_path / "run", phase="sweep", write=False)
    assert watched.iloc[0]["rule"] == swept.iloc[0]["rule"] == "concurrency_cap", (watched, swept)
    assert "at concurrency 256" in watched.iloc[0]["evidence"]
    # a TTFT read off the server's histogram is quoted with the bucket it lies in, never as a measurement
    assert windows["median_ttft_ms_bucket"].str.fullmatch(r"[\d.]+-[\d.inf]+").all(), windows["median_ttft_ms_bucket"]
    assert "interpolated inside the server histogram's" in watched.iloc[0]["evidence"], watched.iloc[0]["evidence"]


def test_a_server_without_metrics_or_that_serves_no_model_is_refused_first(tmp_path):
    from glm5lib.engines import sglang
    from glm5lib.engines.sglang.config import ServerConfig

    off = ServerConfig.from_argv(STANDIN).with_changes(enable_metrics=False)
    with sglang.launch(off, backend="sim", log_path=tmp_path / "off.log") as srv:
        (tmp_path / "off.log").unlink()
        with pytest.raises(ConfigError, match="only when started with --enable-metrics"):
            Watch(WatchSettings(url=srv.base_url, run_dir=tmp_path / "run", window=5, duration=5))
    assert not (tmp_path / "run").exists()  # nothing written
    import http.server
    import threading

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ConfigError, match="not a serving engine"):
            Watch(WatchSettings(url=f"http://127.0.0.1:{httpd.server_port}", window=5, duration=5))
    finally:
        httpd.shutdown()


@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_watching_real_vllm_names_its_cap_and_reads_what_the_client_received(tmp_path, vllm_installed):
    import psutil

    from glm5lib import cpus, http

    config = engines.load_config("vllm-capped")  # --max-num-seqs 4
    log = tmp_path / "server.log"
    # vLLM on one core and the client on the other: left to share two cores, the API server starves
    # and the engine sees a few requests at a time, whatever the cap
    with cpus.using("split") as layout, engines.launch_vllm(config, log_path=log, ready_timeout=600) as srv:
        url = srv.base_url
        model = json.loads(http.get(url, "/v1/models").text())["data"][0]["id"]
        out = tmp_path / "client.json"
        client = _client(url, out, concurrency=16, duration=32, api="completions", max_tokens=256, model=model)
        psutil.Process(client.pid).cpu_affinity(list(layout.client))
        time.sleep(6)
        watch = Watch(WatchSettings(url=url, log_path=log, duration=20, window=10, run_dir=tmp_path / "run",
                                    gpu=False))
        assert watch.engine == "vllm" and watch.cap == 4
        result = watch.run()
        client.wait(timeout=120)
        phase.measure_phase(None, tmp_path / "run", "sweep", backend=url, attach_log=str(log), concurrencies=[16],
                            duration=10.0, api="completions", input_len=32, output_len=256, warmup=0,
                            sweep_options={"token_ids": False}, progress=False, gpu=False)
    w = result.windows
    assert len(w) == 2 and set(w["binding"]) == {"running_cap"}, w
    for _, row in w.iterrows():
        got = _received(out, row["start_time"], row["end_time"])
        assert row["output_throughput"] == pytest.approx(got, rel=0.10), (row["output_throughput"], got)
    watched = diagnose.diagnose(tmp_path / "run", phase="watch", write=False)
    swept = diagnose.diagnose(tmp_path / "run", phase="sweep", write=False)
    assert watched.iloc[0]["rule"] == swept.iloc[0]["rule"] == "concurrency_cap", (watched, swept)
