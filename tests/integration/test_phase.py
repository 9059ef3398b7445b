"""Tests for glm5lib.phase: one call measures a phase, against the real stand-in on loopback."""

from __future__ import annotations

import json
import os
import threading

import pandas as pd
import psutil
import pytest

from glm5lib import cpus, phase, rundir, server
from glm5lib.engines import sglang
from glm5lib.engines.sglang.config import ServerConfig
from glm5lib.errors import ConfigError, SweepAbortedError

_OWN_THREADS = ("glm5-gpu", "glm5-simgpus", "glm5-metrics", "glm5-sweep")


def _own_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(_OWN_THREADS)]


def _small(**kw):
    return {"concurrencies": [1, 4], "input_len": 32, "output_len": 16, "requests_per_level": 8,
            "warmup": 1, "progress": False, "gpu_interval": 0.05, "metrics_interval": 0.2, **kw}


def test_measure_phase_launches_samples_sweeps_and_stops_everything(tmp_path):
    config = ServerConfig.load("glm5-baseline").with_changes(enable_metrics=True)
    result = phase.measure_phase(config, tmp_path, "baseline", backend="sim", ready_timeout=60, **_small())
    folder = tmp_path / "baseline"
    assert result.folder == folder and result.phase == "baseline"
    assert list(result.sweep["concurrency"]) == [1, 4] and list(result.sweep["completed"]) == [8, 8]
    # the stand-in's eight simulated GPUs, sampled during the levels, and power per level from them
    assert set(result.gpu["gpu"]) == set(range(8))
    assert list(result.power["concurrency"]) == [1, 4]
    assert (result.power["mean_power_w"] > 0).all() and (result.power["n_samples"] > 0).all()
    assert "sglang:num_running_reqs" in set(result.metrics["metric"])
    for name in (rundir.SWEEP, rundir.REQUESTS, rundir.GPU, rundir.METRICS, rundir.POWER, rundir.SERVER_LOG,
                 rundir.CONFIG, rundir.SERVER_INFO):
        assert (folder / name).exists(), name
    on_disk = pd.read_csv(folder / rundir.POWER)
    assert list(on_disk["concurrency"]) == [1, 4]
    assert result.server_info["standin"]["profile"] == "glm5-nvfp4-8x-rtxpro6000"
    assert json.loads((folder / rundir.SERVER_INFO).read_text()) == result.server_info
    assert result.server_log.startup.get("max_running_requests") == 64
    assert result.notes == [] and result.stopped_at is None
    assert result.peak["concurrency"] == 4
    # launched here, so stopped here; the sampler and scraper threads are gone
    assert result.server is None and server.live_servers() == []
    assert _own_threads() == []


def test_a_running_server_is_measured_left_running_and_stop_event_keeps_finished_levels(tmp_path):
    srv = sglang.launch(ServerConfig.load("glm5-baseline"), backend="sim", log_path=tmp_path / "own.log",
                        ready_timeout=60)
    try:
        stop = threading.Event()
        events = []

        def on_event(event):
            events.append(event)
            if event["event"] == "progress" and event["level"] == 4:
                stop.set()

        result = phase.measure_phase(
            srv, tmp_path, "panel", callback=on_event, stop_event=stop,
            **_small(concurrencies=[1, 4, 8], requests_per_level=None, duration=3.0, metrics=False),
        )
        assert srv.alive(), "a server passed in is left running"
        assert result.server is srv
        # the stop came during level 4, which is dropped; level 8 never ran
        assert list(result.sweep["concurrency"]) == [1] and result.stopped_at == 4
        assert any("stopped on request at level 4" in n for n in result.notes)
        assert [e["event"] for e in events].count("stopped") == 1
        progress = [e for e in events if e["event"] == "progress"]
        assert progress and all("gpu_power_w" in e for e in progress)
        assert any((e["gpu_power_w"] or 0) > 0 for e in progress)
        assert list(pd.read_csv(tmp_path / "panel" / rundir.POWER)["concurrency"]) == [1]
        assert "metrics" not in result.paths and result.metrics.empty
        assert _own_threads() == []
        # a stop before the first level: nothing measured, and the result says so
        early = phase.measure_phase(srv, tmp_path, "early", stop_event=stop, **_small(metrics=False))
        assert early.sweep.empty and early.stopped_at == 1 and early.power.empty
        assert srv.alive() and _own_threads() == []
    finally:
        srv.stop()
    assert not srv.alive()


def test_a_server_that_dies_mid_sweep_is_stopped_and_finished_levels_keep_their_power(tmp_path):
    config = ServerConfig.load("glm5-baseline")
    with pytest.raises(SweepAbortedError) as info:
        phase.measure_phase(config, tmp_path, "baseline", backend="sim", ready_timeout=60,
                            extra_args=["--sim-fault", "nan-after=12"],
                            sweep_options={"health_interval": 0.2}, **_small())
    assert info.value.completed_levels == [1]
    folder = tmp_path / "baseline"
    assert list(pd.read_csv(folder / rundir.SWEEP)["concurrency"]) == [1]
    power = pd.read_csv(folder / rundir.POWER)
    assert list(power["concurrency"]) == [1] and power["mean_power_w"].iloc[0] > 0
    assert server.live_servers() == [] and _own_threads() == []


def test_one_settings_object_drives_the_phase_sweep(tmp_path):
    from glm5lib.loadgen import SweepSettings

    settings = SweepSettings(input_len=32, output_len=16, requests_per_level=4, warmup=0, resume=False)
    result = phase.measure_phase(ServerConfig.load("glm5-baseline"), tmp_path, "held", backend="sim",
                                 ready_timeout=60, settings=settings, concurrencies=[1, 2], gpu=False,
                                 metrics=False, progress=False)
    assert list(result.sweep["concurrency"]) == [1, 2] and list(result.sweep["completed"]) == [4, 4]
    assert set(result.sweep["output_len"]) == {16} and set(result.sweep["input_len"]) == {32}
    assert server.live_servers() == [] and _own_threads() == []


def test_bad_settings_are_refused_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match="measure_phase's own arguments") as info:
        phase.measure_phase(ServerConfig.load("glm5-baseline"), tmp_path, "x", sweep_options={"duration": 3})
    assert info.value.field == "sweep_options"
    with pytest.raises(ConfigError, match="BACKEND"):
        phase.measure_phase(ServerConfig.load("glm5-baseline"), tmp_path, "x", backend="tgi")
    with pytest.raises(ConfigError, match="neither a ServerConfig"):
        phase.measure_phase("glm5-baseline", tmp_path, "x")
    with pytest.raises(ConfigError) as info:  # a sweep setting, checked before the launch
        phase.measure_phase(ServerConfig.load("glm5-baseline"), tmp_path, "x", sweep_options={"mode": "burst"})
    assert info.value.field == "mode"
    with pytest.raises(ConfigError, match="concurrency 0"):
        phase.measure_phase(ServerConfig.load("glm5-baseline"), tmp_path, "x", concurrencies=[0, 1])
    with pytest.raises(ConfigError) as info:
        phase.measure_phase(ServerConfig.load("glm5-baseline"), tmp_path, "x", gpu_interval=0)
    assert info.value.field == "gpu_interval"
    assert server.live_servers() == []


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to split")
def test_a_cpu_layout_pins_the_launched_server_and_the_sweep_and_gives_the_cores_back(tmp_path):
    here = os.sched_getaffinity(0)
    seen: dict[str, object] = {}

    def on_event(event):  # on the sweep's thread, while the server runs
        if "server" not in seen and server.live_servers():
            [srv] = server.live_servers()
            seen["server"] = set(psutil.Process(srv.pid).cpu_affinity())
            seen["client"] = os.sched_getaffinity(0)

    result = phase.measure_phase(ServerConfig.load("glm5-baseline"), tmp_path, "pinned", backend="sim",
                                 ready_timeout=60, cpus="split", callback=on_event, **_small())
    cores = sorted(here)
    assert seen == {"server": set(cores[:-1]), "client": {cores[-1]}}
    assert result.notes[0] == (f"CPU layout 'split': server on CPU {cpus.format_cpus(cores[:-1])}, "
                               f"load generator on CPU {cores[-1]}")
    assert os.sched_getaffinity(0) == here  # this process has its cores back
    assert server.live_servers() == []


def test_a_bad_cpu_layout_is_refused_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match=r"cpus='0-1/1'.*share CPU 1|names CPU") as info:
        phase.measure_phase(ServerConfig.load("glm5-baseline"), tmp_path, "bad", backend="sim", cpus="0-1/1",
                            **_small())
    assert info.value.field == "cpus"
    assert not (tmp_path / "bad").exists() and server.live_servers() == []
