"""Tests for glm5lib.telemetry.

NVML cannot run on a machine without an NVIDIA driver, so the NVML path is exercised against
``FakeNvml`` below: a stand-in for the ``pynvml`` module with the same call signatures, per-call
latency and per-field support, so that batching, fallbacks and the per-GPU schedule are tested.
The real NVML path runs in benchmarks/bench_telemetry_gpu.py and the ``gpu``-marked test.
HTTP (the stand-in's /sim/gpus, /sim/environment and SGLang's /metrics) is real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from glm5lib import telemetry
from glm5lib.cli.telemetry import register_cli
from glm5lib.errors import ConfigError, TelemetryError
from glm5lib.telemetry import (
    GPU_COLUMNS,
    GpuSampler,
    MetricsScraper,
    environment,
    format_environment,
    load_gpu_csv,
    load_metrics_csv,
    metric_series,
)
from glm5lib.telemetry._common import _load_nvml


def _wait_until(condition, what: str, timeout: float = 30.0) -> None:
    """Poll ``condition()`` until it holds: the samplers run in threads, and a busy machine
    delays them, so the tests wait for the samples they check rather than a fixed time."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


# ---------------------------------------------------------------------------------------------
# a pynvml-shaped fake with latency
# ---------------------------------------------------------------------------------------------
class FakeNvmlError(Exception):
    def __init__(self, value):
        super().__init__(f"NVML error {value}")
        self.value = value


class FakeNvml:
    """Answers like pynvml for `count` GPUs; each call sleeps `latency` seconds."""

    NVMLError = FakeNvmlError

    def __init__(self, count=2, latency=0.0, batch=True, unsupported_fields=(), power_w=150.0,
                 pcie_rate=1e9, init_error=None, p2p=None, width=(16, 16), gen=(5, 5), mig=False,
                 nvlink=None):
        self.count = count
        self.latency = latency
        self.batch = batch
        self.unsupported_fields = set(unsupported_fields)
        self.power_w = power_w
        self.pcie_rate = pcie_rate
        self.init_error = init_error
        self.p2p = p2p or {}
        self.width = width
        self.gen = gen
        self.mig = mig
        self.nvlink = nvlink  # None, "switch" (18 links each into NVSwitches) or {gpu: peer gpu} bridges
        self.t0 = time.time()
        self.calls = 0
        self.inits = 0
        self._lock = threading.Lock()

    def _call(self):
        with self._lock:
            self.calls += 1
        if self.latency:
            time.sleep(self.latency)

    # life cycle
    def nvmlInit(self):
        if self.init_error:
            raise FakeNvmlError(self.init_error)
        self.inits += 1

    def nvmlShutdown(self):
        self.inits -= 1

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    # values that move with time: power constant, energy its integral, PCIe counters linear
    def _energy_mj(self, h):
        return (1000.0 * h + self.power_w * (time.time() - self.t0)) * 1e3

    def nvmlDeviceGetFieldValues(self, h, ids):
        self._call()
        if not self.batch:
            raise FakeNvmlError(3)
        now = time.time()
        out = []
        for fid in ids:
            value = SimpleNamespace(uiVal=0, ullVal=0, dVal=0.0)
            vtype = 1
            if fid == 186:
                value.uiVal = int(self.power_w * 1e3)
            elif fid == 190:
                value.uiVal = 700_000
            elif fid == 83:
                value.ullVal, vtype = int(self._energy_mj(h)), 3
            elif fid in (197, 198):
                value.ullVal, vtype = int(self.pcie_rate * (now - self.t0) * (1 if fid == 197 else 0.5)), 3
            ret = 3 if fid in self.unsupported_fields else 0
            out.append(SimpleNamespace(fieldId=fid, nvmlReturn=ret, valueType=vtype, value=value,
                                       timestamp=int(now * 1e6), latencyUsec=0))
        return out

    def nvmlDeviceGetPowerUsage(self, h):
        self._call()
        return int(self.power_w * 1e3)

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self._call()
        return int(self._energy_mj(h))

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        self._call()
        return 700_000

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h):
        return 700_000

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        self._call()
        return int(self.pcie_rate / 1024 * (1 if counter == 0 else 0.5))

    def nvmlDeviceGetUtilizationRates(self, h):
        self._call()
        return SimpleNamespace(gpu=87, memory=40)

    def nvmlDeviceGetClockInfo(self, h, kind):
        self._call()
        return 1980

    def nvmlDeviceGetMemoryInfo(self, h):
        self._call()
        return SimpleNamespace(used=2 * 2**30, total=141 * 2**30)

    def nvmlDeviceGetTemperature(self, h, sensor):
        self._call()
        return 45

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._call()
        return 4

    # environment
    def nvmlSystemGetDriverVersion(self):
        return "580.159.04"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 13000

    def nvmlDeviceGetName(self, h):
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h:08d}"

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=f"00000000:{h + 0x18:02X}:00.0".encode())

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return (9, 0)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self.gen[0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self.gen[1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self.width[0] if h == 1 else self.width[1]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self.width[1]

    def nvmlDeviceGetPersistenceMode(self, h):
        return 1

    def nvmlDeviceGetMigMode(self, h):
        return (int(self.mig), int(self.mig))

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 1980 if kind == 1 else 3201

    def nvmlDeviceGetP2PStatus(self, a, b, cap):
        return self.p2p.get((min(a, b), max(a, b)), 0)

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 30

    def nvmlDeviceGetNvLinkState(self, h, link):
        if self.nvlink is None:
            raise FakeNvmlError(3)
        if self.nvlink == "switch":
            return 1
        return 1 if h in self.nvlink and link < 4 else 0

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h, link):
        return 2 if self.nvlink == "switch" else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h, link):
        if self.nvlink == "switch":
            return SimpleNamespace(busId=f"00000000:{0xA0 + link % 4:02X}:00.0".encode())
        return self.nvmlDeviceGetPciInfo(self.nvlink[h])


# ---------------------------------------------------------------------------------------------
# a small HTTP server on loopback serving the stand-in's contract JSON and /metrics
# ---------------------------------------------------------------------------------------------
# Exposition text in the shape SGLang's /metrics uses (names and labels as listed in SGLang's
# metrics collector, sglang/srt/metrics/collector.py); values are made up for the test.
METRICS_TEXT = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="glm-5",tp_rank="0"} %(running)s
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="glm-5",tp_rank="0"} %(queue)s
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="glm-5"} %(gen)s
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="glm-5"} 3.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="glm-5"} 5.0
sglang:time_to_first_token_seconds_sum{model_name="glm-5"} 1.5
sglang:time_to_first_token_seconds_count{model_name="glm-5"} 5.0
"""


class _Handler(BaseHTTPRequestHandler):

    def log_message(self, *args):
        pass

    def _send(self, status, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        st = self.server.state
        st["hits"][self.path] = st["hits"].get(self.path, 0) + 1
        if self.path == "/sim/gpus" and st["standin"]:
            now = time.time()
            elapsed = now - st["t0"]
            gpus = []
            for i in range(st["gpus"]):
                gpus.append({
                    "index": i, "name": "NVIDIA RTX PRO 6000 Blackwell (simulated)", "uuid": f"SIM-{i}",
                    "power_w": 83.0 + i, "power_limit_w": 600.0, "energy_j": (83.0 + i) * elapsed,
                    "gpu_util": 35.0, "mem_util": 10.0, "sm_clock_mhz": 2400, "max_sm_clock_mhz": 2617,
                    "mem_used_bytes": 90 * 2**30, "mem_total_bytes": 96 * 2**30,
                    "pcie_tx_bytes_s": 2.0e8, "pcie_rx_bytes_s": 1.0e8, "temperature_c": 40,
                    "throttle_reasons": 1,
                })
            self._send(200, json.dumps({"standin": True, "profile": "test", "time": now, "gpus": gpus}))
        elif self.path == "/sim/environment" and st["standin"]:
            self._send(200, json.dumps({
                "host": "standin", "driver_version": "sim", "cuda_version": "12.8",
                "gpus": [{"index": i, "name": "sim", "pcie_gen_current": 5, "pcie_gen_max": 5,
                          "pcie_width_current": 16, "pcie_width_max": 16} for i in range(st["gpus"])],
                "p2p": [["OK", "CNS"], ["CNS", "OK"]], "topology": [["X", "SYS"], ["SYS", "X"]],
                "packages": {"sglang": None}, "warnings": [],
            }))
        elif self.path == "/metrics" and st["metrics"]:
            st["gen"] += 100
            self._send(200, METRICS_TEXT % {"running": 64, "queue": st["queue"], "gen": float(st["gen"])},
                       "text/plain; version=0.0.4")
        else:
            self._send(404, '{"detail":"Not Found"}')


@pytest.fixture()
def http_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.state = {"t0": time.time(), "gpus": 2, "standin": True, "metrics": True, "gen": 0, "queue": 192,
                    "hits": {}}
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield server
    server.shutdown()
    server.server_close()
    thread.join(5)


# ---------------------------------------------------------------------------------------------
# GpuSampler over NVML
# ---------------------------------------------------------------------------------------------
def test_eight_slow_gpus_hold_ten_hertz_each_with_batched_reads():
    nvml = FakeNvml(count=8, latency=0.005)
    with GpuSampler(interval=0.1, source="nvml", _nvml=nvml) as sampler:
        assert sampler.source == "nvml" and sampler.available and sampler.reason is None
        time.sleep(1.55)
    stats = sampler.stats()
    assert list(stats["gpu"]) == list(range(8))
    # one batched call + utilisation + 4 secondary reads = 6 calls of 5 ms, one thread per GPU
    assert (stats["achieved_hz"] > 8.5).all() and (stats["achieved_hz"] < 11).all(), stats
    assert (stats["cost_mean_ms"] >= 25).all()
    assert stats.loc[0, "batched_fields"] == "power_w,energy_j,power_limit_w,pcie_tx,pcie_rx"
    frame = sampler.frame()
    assert list(frame.columns) == GPU_COLUMNS
    assert set(frame["gpu"]) == set(range(8))
    assert frame["power_w"].eq(150.0).all()
    assert frame["power_limit_w"].eq(700.0).all()
    assert frame["temperature_c"].eq(45).all() and frame["throttle_reasons"].eq(4).all()
    assert frame["mem_used_bytes"].eq(2 * 2**30).all()
    assert nvml.inits == 0  # every nvmlInit was matched by a shutdown


def test_pcie_counters_become_rates_and_energy_counter_matches_power():
    nvml = FakeNvml(count=1, pcie_rate=1e9, power_w=200.0)
    with GpuSampler(interval=0.05, source="nvml", _nvml=nvml) as sampler:
        _wait_until(lambda: len(sampler.frame()) >= 9, "9 samples")
    frame = sampler.frame()
    rates = frame["pcie_tx_bytes_s"].dropna()
    assert len(rates) >= 8 and np.isnan(frame["pcie_tx_bytes_s"].iloc[0])  # first sample has no rate
    assert rates.median() == pytest.approx(1e9, rel=0.05)
    assert frame["pcie_rx_bytes_s"].dropna().median() == pytest.approx(5e8, rel=0.05)
    t, e = frame["time"].to_numpy(), frame["energy_j"].to_numpy()
    assert (e[-1] - e[0]) / (t[-1] - t[0]) == pytest.approx(200.0, rel=0.05)


def test_without_field_values_every_value_is_read_individually():
    nvml = FakeNvml(count=1, batch=False, pcie_rate=4096e3)
    with GpuSampler(interval=0.05, source="nvml", _nvml=nvml) as sampler:
        time.sleep(0.4)
    stats = sampler.stats().iloc[0]
    assert stats["batched_fields"] == ""
    for name in ("power", "energy", "utilization", "pcie_throughput", "power_limit"):
        assert name in stats["individual_reads"].split(",")
    frame = sampler.frame()
    assert frame["power_w"].eq(150.0).all() and frame["power_limit_w"].eq(700.0).all()
    assert frame["pcie_tx_bytes_s"].iloc[0] == pytest.approx(4096e3)


def test_fields_the_driver_refuses_fall_back_to_their_own_call():
    nvml = FakeNvml(count=1, unsupported_fields={186, 197, 198})
    with GpuSampler(interval=0.05, source="nvml", _nvml=nvml) as sampler:
        time.sleep(0.3)
    stats = sampler.stats().iloc[0]
    assert stats["batched_fields"] == "energy_j,power_limit_w"
    assert "power" in stats["individual_reads"] and "pcie_throughput" in stats["individual_reads"]
    assert sampler.frame()["power_w"].eq(150.0).all()


def test_slow_reads_rotate_when_a_full_sample_overruns_the_interval():
    nvml = FakeNvml(count=2, latency=0.025)  # a full sample: 6 x 25 ms = 150 ms > 100 ms
    with GpuSampler(interval=0.1, source="nvml", _nvml=nvml) as sampler:
        time.sleep(1.6)
    stats = sampler.stats()
    assert stats["rotating"].all()
    assert (stats["achieved_hz"] > 8.0).all(), stats
    frame = sampler.frame()
    # carried-forward secondary values fill every row after the first round
    assert frame.groupby("gpu")["temperature_c"].apply(lambda s: s.iloc[5:].notna().all()).all()


def test_gpu_subset_and_bad_indices():
    nvml = FakeNvml(count=4)
    with GpuSampler(interval=0.05, gpus=[1, 3], source="nvml", _nvml=nvml) as sampler:
        time.sleep(0.3)
    assert set(sampler.frame()["gpu"]) == {1, 3}
    with pytest.raises(ConfigError) as exc:
        GpuSampler(gpus=[7], source="nvml", _nvml=FakeNvml(count=2)).start()
    assert exc.value.field == "gpus" and exc.value.valid == ["0", "1"]


def test_unavailable_is_reported_not_raised():
    sampler = GpuSampler(source="nvml", _nvml=FakeNvml(init_error=9))
    assert sampler.start() is sampler
    assert sampler.available is False and sampler.source == "unavailable"
    assert "NVML init failed" in sampler.reason
    frame = sampler.stop()
    assert frame.empty and list(frame.columns) == GPU_COLUMNS


def test_auto_on_this_machine_without_gpu_or_standin_says_why(http_server):
    # the real pynvml: on a CI machine without a driver it must explain, not raise
    http_server.state["standin"] = False
    sampler = GpuSampler(source="auto", base_url=http_server.url)
    if _load_nvml()[0] is not None:
        pytest.skip("this machine has a working NVML")
    assert not sampler.available
    assert "/sim/gpus answered 404" in sampler.reason and "NVML" in sampler.reason
    with sampler:
        pass
    assert sampler.frame().empty


@pytest.mark.parametrize("kwargs, field", [
    ({"interval": 0}, "interval"),
    ({"interval": "fast"}, "interval"),
    ({"source": "dcgm"}, "source"),
    ({"source": "sim"}, "base_url"),
    ({"gpus": "0,1"}, "gpus"),
])
def test_bad_arguments_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as exc:
        GpuSampler(**kwargs)
    assert exc.value.field == field
    assert field in str(exc.value) or repr(kwargs[next(iter(kwargs))]) in str(exc.value)


def test_gpu_csv_is_appended_while_sampling(tmp_path):
    out = tmp_path / "phase" / "gpu.csv"
    sampler = GpuSampler(interval=0.05, source="nvml", out=out, _nvml=FakeNvml(count=2)).start()
    try:
        _wait_until(lambda: len(out.read_text().splitlines()) > 4, "rows in the CSV while sampling")
        lines_running = out.read_text().splitlines()
        assert lines_running[0] == ",".join(GPU_COLUMNS)
        assert len(lines_running) > 4  # rows arrive before stop()
    finally:
        frame = sampler.stop()
    on_disk = load_gpu_csv(out)
    pd.testing.assert_frame_equal(
        on_disk.sort_values(["time", "gpu"]).reset_index(drop=True), frame, check_exact=False, rtol=1e-9)
    # a second sampler appends to the same file without a second header
    with GpuSampler(interval=0.05, source="nvml", out=out, _nvml=FakeNvml(count=2)) as second:
        _wait_until(lambda: not second.frame().empty, "the second sampler's first sample")
    assert len(load_gpu_csv(out)) > len(frame)
    assert out.read_text().count("time,gpu") == 1


def test_gpu_csv_with_another_header_is_refused(tmp_path):
    out = tmp_path / "gpu.csv"
    out.write_text("a,b\n1,2\n")
    with pytest.raises(TelemetryError, match="already holds a CSV"):
        GpuSampler(interval=0.05, source="nvml", out=out, _nvml=FakeNvml(count=1)).start()


# ---------------------------------------------------------------------------------------------
# GpuSampler over the stand-in's /sim/gpus
# ---------------------------------------------------------------------------------------------
def test_sim_source_reads_simulated_gpus(http_server, tmp_path):
    with GpuSampler(interval=0.05, source="sim", base_url=http_server.url, out=tmp_path / "gpu.csv") as s:
        _wait_until(lambda: s.frame().groupby("gpu").size().reindex([0, 1]).min() >= 7, "7 samples of each GPU")
    assert s.source == "sim"
    frame = s.frame()
    assert set(frame["gpu"]) == {0, 1}
    assert frame.loc[frame["gpu"] == 1, "power_w"].eq(84.0).all()
    assert frame["power_limit_w"].eq(600.0).all()
    assert frame["pcie_tx_bytes_s"].eq(2e8).all() and frame["throttle_reasons"].eq(1).all()
    assert s.stats()["samples"].min() >= 7
    assert len(load_gpu_csv(tmp_path / "gpu.csv")) == len(frame)


def test_auto_prefers_the_standin_when_base_url_is_one(http_server):
    with GpuSampler(interval=0.05, gpus=[0], base_url=http_server.url, _nvml=FakeNvml(count=8)) as s:
        time.sleep(0.2)
    assert s.source == "sim"
    assert set(s.frame()["gpu"]) == {0}


def test_sim_source_survives_the_server_going_away(http_server):
    sampler = GpuSampler(interval=0.05, source="sim", base_url=http_server.url).start()
    _wait_until(lambda: not sampler.frame().empty, "a first sample")
    http_server.state["standin"] = False  # now answers 404
    _wait_until(lambda: sampler.stats()["errors"].min() > 0, "a failed read")
    frame = sampler.stop()
    assert not frame.empty
    assert sampler.stats()["errors"].min() > 0
    assert "404" in sampler.stats()["last_error"].iloc[0]


# ---------------------------------------------------------------------------------------------
# MetricsScraper
# ---------------------------------------------------------------------------------------------
def test_metrics_scraper_parses_prometheus_text(http_server, tmp_path):
    out = tmp_path / "metrics.csv"
    with MetricsScraper(http_server.url, interval=0.1, out=out) as scraper:
        assert scraper.enabled is True
        _wait_until(lambda: scraper.scrapes >= 4, "4 scrapes")
    frame = scraper.frame()
    assert scraper.scrapes >= 4
    running = frame[frame["metric"] == "sglang:num_running_reqs"]
    assert running["value"].eq(64).all()
    assert json.loads(running["labels"].iloc[0]) == {"engine_type": "unified", "model_name": "glm-5", "tp_rank": "0"}
    assert {"sglang:time_to_first_token_seconds_bucket", "sglang:generation_tokens_total"} <= set(frame["metric"])
    gen = metric_series(frame, "sglang:generation_tokens_total")
    assert gen.is_monotonic_increasing and gen.diff().dropna().eq(100).all()
    ttft = metric_series(frame, "sglang:time_to_first_token_seconds_bucket", le="0.1")
    assert ttft.eq(3.0).all()
    assert len(load_metrics_csv(out)) == len(frame)
    with pytest.raises(TelemetryError, match="num_running"):
        metric_series(frame, "sglang:num_running_requests")


def test_metrics_scraper_keeps_gauges_every_scrape_and_histograms_at_snapshots(http_server, tmp_path):
    out = tmp_path / "metrics.csv"
    with MetricsScraper(http_server.url, interval=0.05, out=out, histogram_interval=None) as scraper:
        _wait_until(lambda: scraper.scrapes >= 4, "4 scrapes")
        scraper.mark()  # a level boundary: the next scrape keeps the buckets
        _wait_until(lambda: not scraper._marked.is_set(), "the marked scrape")
        _wait_until(lambda: scraper.scrapes >= 8, "8 scrapes")
    frame = load_metrics_csv(out)
    running = frame[frame["metric"] == "sglang:num_running_reqs"]
    buckets = frame[frame["metric"] == "sglang:time_to_first_token_seconds_bucket"]
    assert running["time"].nunique() == scraper.scrapes >= 9  # every scrape, the last one at stop
    # the first scrape, the one after mark() and the last one: three snapshots, each with every bucket
    assert buckets["time"].nunique() == 3 and len(buckets) == 3 * 2
    assert buckets["time"].min() == running["time"].min() and buckets["time"].max() == running["time"].max()
    assert metric_series(frame, "sglang:time_to_first_token_seconds_bucket", le="0.1").eq(3.0).all()
    # a row is a gauge's or a counter's unless it is at a snapshot: far fewer rows than every bucket each scrape
    per_scrape = len(frame[frame["time"] == running["time"].iloc[1]])
    assert per_scrape < len(frame[frame["time"] == running["time"].min()])
    with pytest.raises(ConfigError, match="histogram_interval"):
        MetricsScraper(http_server.url, histogram_interval=0)


def test_metrics_scraper_notes_a_server_without_enable_metrics(http_server):
    http_server.state["metrics"] = False
    with MetricsScraper(http_server.url, interval=0.05, metrics_flag="--enable-metrics") as scraper:
        time.sleep(0.2)
    assert scraper.enabled is False
    assert "--enable-metrics" in scraper.reason
    assert http_server.state["hits"]["/metrics"] == 1  # no background polling of a 404
    assert scraper.frame().empty


def test_metrics_scraper_unreachable_server():
    scraper = MetricsScraper("http://127.0.0.1:9", interval=0.05, timeout=0.5)
    scraper.scrape_once()
    assert scraper.enabled is False and "could not be reached" in scraper.reason
    with pytest.raises(ConfigError):
        MetricsScraper("127.0.0.1:30000")


# ---------------------------------------------------------------------------------------------
# environment
# ---------------------------------------------------------------------------------------------
def test_environment_from_nvml_warns_on_p2p_and_narrow_links():
    nvml = FakeNvml(count=3, p2p={(0, 2): 1}, width=(8, 16), gen=(1, 5))
    env = environment(source="nvml", _nvml=nvml)
    assert env["source"] == "nvml" and env["standin"] is False and env["reason"] is None
    assert env["driver_version"] == "580.159.04" and env["cuda_version"] == "13.0"
    g = env["gpus"][1]
    assert g["compute_capability"] == "9.0" and g["power_limit_w"] == 700.0
    assert g["pci_bus_id"] == "00000000:19:00.0" and g["memory_total_bytes"] == 141 * 2**30
    assert (g["pcie_width_current"], g["pcie_width_max"]) == (8, 16)
    assert env["p2p"] == [["OK", "OK", "CNS"], ["OK", "OK", "OK"], ["CNS", "OK", "OK"]]
    assert env["topology"][0] == ["X", "PHB", "PHB"]
    text = " ".join(env["warnings"])
    assert "P2P is unavailable between 1 GPU pair(s): 0-2 (CNS" in text
    assert "GPU 1: PCIe link width x8 below its maximum x16" in text
    assert "GPU 0: PCIe link width" not in text
    assert "Gen1 of Gen5" in text
    assert set(env["packages"]) >= {"sglang", "flashinfer", "torch", "transformers", "vllm"}
    assert env["packages"]["nvidia-ml-py"] is not None  # installed here
    assert nvml.inits == 0


def test_environment_topology_names_nvlink_through_switches_and_bridges():
    # an HGX H200 board: every GPU has 18 links into NVSwitches (nvidia-smi topo -m: NV18)
    env = environment(source="nvml", _nvml=FakeNvml(count=2, nvlink="switch"))
    assert env["topology"] == [["X", "NV18"], ["NV18", "X"]]
    # two bridged pairs: 0-1 and 2-3 over 4 links each, PCIe between the pairs
    env = environment(source="nvml", _nvml=FakeNvml(count=4, nvlink={0: 1, 1: 0, 2: 3, 3: 2}))
    assert env["topology"][0] == ["X", "NV4", "PHB", "PHB"]
    assert env["topology"][3] == ["PHB", "PHB", "NV4", "X"]


def test_environment_healthy_host_has_no_link_warnings():
    env = environment(source="nvml", _nvml=FakeNvml(count=2))
    assert not [w for w in env["warnings"] if "P2P" in w or "PCIe" in w]
    json.dumps(env)  # serialisable for environment.json


def test_environment_from_standin_and_unavailable(http_server):
    env = environment(base_url=http_server.url)
    assert env["source"] == "sim" and env["standin"] is True
    assert env["p2p"][0][1] == "CNS" and any("P2P" in w for w in env["warnings"])
    http_server.state["standin"] = False
    env = environment(source="sim", base_url=http_server.url)
    assert env["source"] == "unavailable" and "404" in env["reason"]
    assert env["gpus"] == [] and env["warnings"]
    assert env["packages"]["sglang"] is None or isinstance(env["packages"]["sglang"], str)


def test_format_environment_lists_the_installed_packages():
    text = format_environment({"source": "sim", "gpus": [], "warnings": [],
                               "packages": {"sglang": None, "torch": "2.13.0", "glm5lib": "0.2"}})
    assert "packages: torch 2.13.0, glm5lib 0.2" in text
    assert "packages: none found" in format_environment({"source": "sim", "gpus": [], "packages": {}})


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def main(argv):
    # only this module's sub-commands, as glm5lib.cli assembles them, so that these tests do
    # not depend on the state of the other modules' commands
    parser = argparse.ArgumentParser(prog="glm5")
    register_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_env_json_and_text(http_server, capsys, tmp_path):
    assert main(["env", "--json", "--sim", http_server.url, "--out", str(tmp_path)]) == 0
    env = json.loads(capsys.readouterr().out)
    assert env["source"] == "sim" and env["p2p"][1][0] == "CNS"
    assert json.loads((tmp_path / "environment.json").read_text())["standin"] is True
    assert main(["env", "--sim", http_server.url]) == 0
    out = capsys.readouterr().out
    assert "P2P (read/write)" in out and "warnings (" in out


def test_cli_telemetry_samples_into_csv(http_server, capsys, tmp_path):
    out = tmp_path / "gpu.csv"
    assert main(["telemetry", "--sim", http_server.url, "--duration", "0.4", "--interval", "0.05",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "achieved_hz" in printed and "83.0" in printed
    assert set(load_gpu_csv(out)["gpu"]) == {0, 1}
    with pytest.raises(ConfigError, match="--duration"):
        main(["telemetry", "--duration", "-1"])


@pytest.mark.gpu
def test_real_nvml_sampler_reads_power():
    with GpuSampler(interval=0.1, source="nvml") as sampler:
        time.sleep(1.0)
    frame = sampler.frame()
    assert not frame.empty and (frame["power_w"] > 0).all()
    assert (sampler.stats()["achieved_hz"] > 5).all()


# ---------------------------------------------------------------------------------------------
# against the real stand-in server (python -m glm5lib.sim) on loopback
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def standin():
    from glm5lib.engines import sim as testing
    with testing.run_standin("--model-path", "zai-org/GLM-5-NVFP4", "--tp", "8",
                             "--sim-profile", "glm5-nvfp4-8x-rtxpro6000", "--enable-metrics") as srv:
        yield srv


def test_standin_gpus_environment_and_metrics(standin, tmp_path):
    env = environment(base_url=standin.base_url)
    assert env["source"] == "sim" and env["standin"] is True and len(env["gpus"]) == 8
    assert len(env["p2p"]) == 8 and all(len(row) == 8 for row in env["p2p"])
    with GpuSampler(interval=0.1, base_url=standin.base_url, out=tmp_path / "gpu.csv") as sampler, \
            MetricsScraper(standin.base_url, interval=0.2, out=tmp_path / "metrics.csv") as scraper:
        time.sleep(0.6)
    assert sampler.source == "sim"
    frame = sampler.frame()
    assert set(frame["gpu"]) == set(range(8))
    assert frame["power_limit_w"].eq(env["gpus"][0]["power_limit_w"]).all()
    assert (frame["power_w"] > 0).all() and (frame["power_w"] < frame["power_limit_w"]).all()
    assert frame.groupby("gpu")["energy_j"].apply(lambda s: s.is_monotonic_increasing).all()
    assert len(load_gpu_csv(tmp_path / "gpu.csv")) == len(frame)
    assert scraper.enabled is True
    metrics = scraper.frame()
    assert "sglang:num_running_reqs" in set(metrics["metric"])
    assert metric_series(metrics, "sglang:num_running_reqs").eq(0).all()  # idle server


def test_a_phase_without_gpu_telemetry_reads_as_an_empty_frame_when_allowed(tmp_path):
    with pytest.raises(TelemetryError, match="no GPU telemetry"):
        telemetry.load_gpu_csv(tmp_path / "gpu.csv")
    empty = telemetry.load_gpu_csv(tmp_path / "gpu.csv", missing_ok=True)
    assert empty.empty and list(empty.columns) == list(telemetry.GPU_COLUMNS)
