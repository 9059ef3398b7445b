"""Tests for glm5lib.levels: lining telemetry samples up with sweep levels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from glm5lib import levels, telemetry
from glm5lib.errors import ConfigError
from glm5lib.levels import assign_levels, level_windows, metrics_per_level, per_level
from glm5lib.telemetry import METRICS_COLUMNS


# ---------------------------------------------------------------------------------------------
# per-level power and gauges (moved from test_telemetry)
# ---------------------------------------------------------------------------------------------
def _synthetic_gpu_frame(levels):
    """Two GPUs sampled at 10 Hz; power and PCIe constant within each (start, end, watts, bytes_s)."""
    rows = []
    energy = {0: 0.0, 1: 0.0}
    t_prev = None
    for start, end, watts, pcie in levels:
        for t in np.arange(start, end + 1e-9, 0.1):
            for g in (0, 1):
                if t_prev is not None:
                    energy[g] += watts * (t - t_prev) / 2 if g == 0 else 0.0
                rows.append({"time": t, "gpu": g, "power_w": watts, "power_limit_w": 600.0,
                             "energy_j": np.nan if g == 1 else energy[0] * 2, "gpu_util": 50.0,
                             "mem_util": 5.0, "sm_clock_mhz": 2000.0, "mem_used_bytes": 1.0,
                             "pcie_tx_bytes_s": pcie, "pcie_rx_bytes_s": pcie, "temperature_c": 40.0,
                             "throttle_reasons": 0})
            t_prev = t
    return pd.DataFrame(rows)


def test_per_level_power_energy_and_bytes_per_token():
    gpu = _synthetic_gpu_frame([(100.0, 110.0, 83.0, 1e6), (120.0, 130.0, 250.0, 4e6)])
    sweep = pd.DataFrame({
        "concurrency": [64, 256],
        "start_time": [99.0, 119.0], "end_time": [111.0, 131.0],
        "window_start": [100.0, 120.0], "window_end": [110.0, 130.0],
        "output_throughput": [880.0, 1950.0], "total_output_tokens": [99999, 99999],
    })
    result = per_level(gpu, sweep).set_index("concurrency")
    low, high = result.loc[64], result.loc[256]
    assert low["mean_power_w"] == pytest.approx(83.0) and high["peak_power_w"] == pytest.approx(250.0)
    assert low["power_fraction"] == pytest.approx(83.0 / 600.0)
    assert low["total_power_w"] == pytest.approx(166.0)
    # GPU 0 from its energy counter, GPU 1 from the power integral: 2 x 83 W x 10 s
    assert low["energy_j"] == pytest.approx(1660.0, rel=1e-3)
    assert low["output_tokens"] == pytest.approx(8800.0)
    assert low["joules_per_token"] == pytest.approx(1660.0 / 8800.0, rel=1e-3)
    assert high["joules_per_token"] == pytest.approx(5000.0 / 19500.0, rel=1e-3)
    # (TX + RX) x 2 GPUs x 10 s / tokens
    assert low["pcie_bytes_per_token"] == pytest.approx(2e6 * 2 * 10 / 8800.0, rel=1e-6)
    assert low["n_gpus"] == 2 and low["n_samples"] == 202


def test_per_level_uses_start_end_when_no_window_and_reports_empty_levels():
    gpu = _synthetic_gpu_frame([(0.0, 10.0, 100.0, 0.0)])
    sweep = pd.DataFrame({"concurrency": [1, 2], "start_time": [0.0, 50.0], "end_time": [10.0, 60.0],
                          "total_output_tokens": [1000, 1000]})
    result = per_level(gpu, sweep).set_index("concurrency")
    assert result.loc[1, "joules_per_token"] == pytest.approx(2.0, rel=1e-3)
    assert result.loc[2, "n_samples"] == 0 and np.isnan(result.loc[2, "mean_power_w"])
    with pytest.raises(ConfigError, match="window"):
        per_level(gpu, pd.DataFrame({"concurrency": [1]}))


def test_assign_levels_and_metrics_per_level():
    sweep = pd.DataFrame({"concurrency": [64, 256], "window_start": [0.0, 20.0], "window_end": [10.0, 30.0],
                          "output_throughput": [880.0, 880.0]})
    gpu = _synthetic_gpu_frame([(0.0, 30.0, 83.0, 0.0)])
    tagged = assign_levels(gpu, sweep)
    assert set(tagged.loc[tagged["time"] < 10, "concurrency"]) == {64}
    assert tagged.loc[(tagged["time"] > 11) & (tagged["time"] < 19), "concurrency"].isna().all()
    rows = []
    for t in np.arange(0.0, 31.0, 1.0):
        queue = 0.0 if t < 15 else 192.0
        rows += [(t, "sglang:num_running_reqs", '{"tp_rank":"0"}', 64.0),
                 (t, "sglang:num_queue_reqs", '{"tp_rank":"0"}', queue),
                 (t, "sglang:generation_tokens_total", "{}", 880.0 * t)]
    metrics = pd.DataFrame(rows, columns=METRICS_COLUMNS)
    result = metrics_per_level(metrics, sweep).set_index("concurrency")
    assert result.loc[256, "max_num_running_reqs"] == 64 and result.loc[256, "mean_num_queue_reqs"] == 192
    assert result.loc[64, "mean_num_queue_reqs"] == 0
    assert result.loc[64, "generation_tokens_per_s"] == pytest.approx(880.0)
    assert np.isnan(result.loc[64, "mean_token_usage"])


# ---------------------------------------------------------------------------------------------
# level_windows: the one definition
# ---------------------------------------------------------------------------------------------
def test_level_windows_prefers_the_steady_state_window_and_counts_its_tokens():
    sweep = pd.DataFrame({
        "concurrency": [64, 256, 1024],
        "start_time": [99.0, 119.0, 139.0], "end_time": [111.0, 131.0, 151.0],
        "window_start": [100.0, np.nan, 140.0], "window_end": [110.0, np.nan, 150.0],
        "output_throughput": [880.0, 1950.0, np.nan], "total_output_tokens": [1000, 2000, 3000],
    }, index=[7, 8, 9])
    windows = level_windows(sweep)
    assert list(windows.columns) == levels.WINDOW_COLUMNS
    assert list(windows.index) == [7, 8, 9]  # the sweep's own index, so callers can .loc a row
    assert windows.loc[7, ["start", "end"]].tolist() == [100.0, 110.0] and bool(windows.loc[7, "windowed"])
    # no steady-state window: the whole level, and the level's own token count
    assert windows.loc[8, ["start", "end"]].tolist() == [119.0, 131.0] and not windows.loc[8, "windowed"]
    assert windows.loc[7, "output_tokens"] == pytest.approx(8800.0)
    assert windows.loc[8, "output_tokens"] == 2000
    # a window without a throughput falls back to the level's total
    assert windows.loc[9, "output_tokens"] == 3000


def test_level_windows_names_what_is_missing():
    with pytest.raises(ConfigError, match="concurrency") as excinfo:
        level_windows(pd.DataFrame({"window_start": [0.0], "window_end": [1.0]}))
    assert excinfo.value.field == "sweep_frame"
    with pytest.raises(ConfigError, match="no time window per level") as excinfo:
        level_windows(pd.DataFrame({"concurrency": [1, 2], "window_start": [np.nan, np.nan],
                                    "window_end": [np.nan, np.nan]}))
    assert "start_time" in excinfo.value.valid


def test_assign_levels_later_level_wins_where_windows_overlap_and_keeps_the_frame():
    sweep = pd.DataFrame({"concurrency": [1, 2], "start_time": [0.0, 5.0], "end_time": [6.0, 10.0]})
    frame = pd.DataFrame({"time": [-1.0, 0.0, 5.5, 10.0, 11.0], "power_w": [1.0] * 5})
    tagged = assign_levels(frame, sweep)
    assert tagged["concurrency"].tolist()[1:4] == [1, 2, 2]
    assert np.isnan(tagged["concurrency"].iloc[0]) and np.isnan(tagged["concurrency"].iloc[4])
    assert "concurrency" not in frame.columns and tagged["power_w"].tolist() == [1.0] * 5


def test_the_level_functions_have_one_import_path():
    import glm5lib

    assert levels.per_level is per_level and levels.metrics_per_level is metrics_per_level
    assert levels.assign_levels is assign_levels
    for name in ("per_level", "metrics_per_level", "assign_levels", "DEFAULT_GAUGES"):
        assert not hasattr(telemetry, name), f"glm5lib.telemetry.{name} is a second path to glm5lib.levels.{name}"
    assert not hasattr(glm5lib, "per_level") and not hasattr(glm5lib, "metrics_per_level")


def test_metrics_per_level_gives_running_queued_and_kv_per_level_from_the_gauges_of_any_engine():
    # level 1024 on SGLang's names: a scrape a second shows the cap and its queue, which a log
    # writing a decode line every 40 steps (~11 s at this batch) would miss in a 10 s window
    sweep = pd.DataFrame({"concurrency": [256, 1024, 2048], "window_start": [0.0, 20.0, 40.0],
                          "window_end": [10.0, 30.0, 50.0], "output_throughput": [1.0, 1.0, 1.0]})
    rows = []
    for t in np.arange(0.0, 31.0, 1.0):
        level = 1024 if t >= 20 else 256
        rows += [(t, "sglang:num_running_reqs", '{"tp_rank":"0"}', float(level)),
                 (t, "sglang:num_queue_reqs", '{"tp_rank":"0"}', 895.0 if level == 1024 and t > 25 else 0.0)]
        if t < 15:
            rows.append((t, "sglang:token_usage", '{"tp_rank":"0"}', 0.25))
    result = metrics_per_level(pd.DataFrame(rows, columns=METRICS_COLUMNS), sweep).set_index("concurrency")
    assert result.loc[1024, "running"] == 1024 and result.loc[1024, "max_running"] == 1024
    assert result.loc[1024, "max_queued"] == 895 and 0 < result.loc[1024, "queued"] < 895
    assert result.loc[256, "kv_usage"] == pytest.approx(0.25) and result.loc[256, "gauges_missing"] == ""
    assert np.isnan(result.loc[1024, "kv_usage"]) and result.loc[1024, "gauges_missing"] == "kv_usage"
    assert result.loc[1024, "gauge_samples"] == 11
    # a level no scrape covered: every figure missing, and said so
    assert result.loc[2048, "gauges_missing"] == "running,queued,kv_usage"
    assert result.loc[2048, "gauge_samples"] == 0 and np.isnan(result.loc[2048, "running"])
    # vLLM's names land in the same columns
    vllm = pd.DataFrame([(t, name, "{}", value) for t in np.arange(0.0, 11.0, 1.0) for name, value in
                         (("vllm:num_requests_running", 3.0), ("vllm:num_requests_waiting", 61.0),
                          ("vllm:kv_cache_usage_perc", 0.02))], columns=METRICS_COLUMNS)
    got = metrics_per_level(vllm, sweep.iloc[:1]).iloc[0]
    assert (got["running"], got["queued"], got["kv_usage"]) == (3.0, 61.0, pytest.approx(0.02))
    assert got["gauges_missing"] == ""
