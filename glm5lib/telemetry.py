"""GPU telemetry and server metrics, on the same clock as the load.

The investigation this workbook follows turned on physical evidence: eight GPUs drawing about
83 W of their 600 W while the server claimed to be busy. This module collects that evidence:

- :class:`GpuSampler` samples every GPU in the background (NVML through ``nvidia-ml-py``, or the
  stand-in server's simulated GPUs at ``/sim/gpus``) into a tidy frame, appended to ``gpu.csv``
  as it goes. Each GPU has its own thread and schedule, and NVML reads are batched through
  field-value queries, because one NVML query can take tens of milliseconds on a virtualised
  host. With no GPU and no stand-in it reports ``available=False`` with the reason; it never
  raises for that.
- :class:`MetricsScraper` scrapes SGLang's Prometheus ``/metrics`` (parsed with
  prometheus-client's parser) into a frame of ``time, metric, labels, value``.
- :func:`environment` snapshots the host for the report (GPUs, driver, PCIe links, P2P matrix,
  topology, package versions) and warns about the signs the investigation met.
- :func:`per_level` and :func:`metrics_per_level` (defined in :mod:`glm5lib.levels`, re-exported
  here) join samples to the sweep's concurrency levels: power per level, energy per generated
  token, PCIe bytes per token, running requests.

Every ``time`` column is float Unix epoch seconds, the clock ``glm5lib.loadgen`` uses.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.metadata
import json
import logging
import math
import os
import platform
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from glm5lib.errors import ConfigError, TelemetryError
from glm5lib.levels import DEFAULT_GAUGES, assign_levels, metrics_per_level, per_level

__all__ = [
    "DEFAULT_GAUGES",
    "GPU_COLUMNS",
    "METRICS_COLUMNS",
    "GpuSampler",
    "MetricsScraper",
    "assign_levels",
    "environment",
    "format_environment",
    "load_gpu_csv",
    "load_metrics_csv",
    "metric_series",
    "metrics_per_level",
    "per_level",
    "register_cli",
    "save_environment",
]

log = logging.getLogger(__name__)

GPU_COLUMNS = [
    "time",
    "gpu",
    "power_w",
    "power_limit_w",
    "energy_j",
    "gpu_util",
    "mem_util",
    "sm_clock_mhz",
    "mem_used_bytes",
    "pcie_tx_bytes_s",
    "pcie_rx_bytes_s",
    "temperature_c",
    "throttle_reasons",
]
METRICS_COLUMNS = ["time", "metric", "labels", "value"]
SOURCES = ("auto", "nvml", "sim")

# NVML constants (ABI-stable values from nvml.h), spelled out so that an older nvidia-ml-py
# lacking a name does not stop the sampler.
_NVML_SUCCESS = 0
_NVML_ERROR_NOT_SUPPORTED = 3
_FI_TOTAL_ENERGY_CONSUMPTION = 83  # mJ since the driver was loaded
_FI_POWER_INSTANT = 186  # mW
_FI_POWER_CURRENT_LIMIT = 190  # mW
_FI_PCIE_COUNT_TX_BYTES = 197  # cumulative bytes
_FI_PCIE_COUNT_RX_BYTES = 198
_CLOCK_SM = 1
_CLOCK_MEM = 2
_TEMPERATURE_GPU = 0
_PCIE_UTIL_TX = 0
_PCIE_UTIL_RX = 1
_P2P_CAPS_READ = 0
_P2P_CAPS_WRITE = 1
_NVLINK_MAX_LINKS = 18  # H100/H200 carry 18; older parts fewer
_NVLINK_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
_P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DRK", 5: "NS", 6: "U"}
P2P_LEGEND = {
    "OK": "peer access supported",
    "CNS": "chipset not supported",
    "GNS": "GPU not supported",
    "TNS": "topology (IOH) not supported",
    "DRK": "disabled by driver registry key",
    "NS": "not supported",
    "U": "unknown",
}
_TOPOLOGY = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
TOPOLOGY_LEGEND = {
    "X": "self",
    "NV#": "NVLink, # links",
    "PIX": "one PCIe bridge",
    "PXB": "several PCIe bridges",
    "PHB": "a PCIe host bridge",
    "NODE": "PCIe host bridges within one NUMA node",
    "SYS": "across NUMA nodes (SMP interconnect)",
}
_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
_PACKAGES = {
    "sglang": ("sglang",),
    "flashinfer": ("flashinfer-python", "flashinfer"),
    "torch": ("torch",),
    "transformers": ("transformers",),
    "vllm": ("vllm",),
    "sgl-kernel": ("sgl-kernel",),
    "triton": ("triton",),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12"),
    "nvidia-ml-py": ("nvidia-ml-py",),
    "glm5lib": ("glm5lib",),
}


def _nan() -> float:
    return float("nan")


def _is_not_supported(exc: BaseException) -> bool:
    return getattr(exc, "value", None) == _NVML_ERROR_NOT_SUPPORTED


def _load_nvml(nvml: Any = None) -> tuple[Any, str | None]:
    """Import and initialise NVML; returns (module, None) or (None, reason)."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return None, f"no NVIDIA driver or GPU here (NVML init failed: {exc})"
    try:
        count = nvml.nvmlDeviceGetCount()
    except Exception as exc:
        nvml.nvmlShutdown()
        return None, f"NVML could not count GPUs: {exc}"
    if count == 0:
        nvml.nvmlShutdown()
        return None, "NVML reports no GPU"
    return nvml, None


def _http_get(url: str, *, timeout: float, api_key: str | None = None) -> tuple[int, bytes]:
    """GET url; returns (status, body). HTTP errors return their status; network errors raise OSError."""
    request = urllib.request.Request(url)
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp is not None else b""


def _probe_sim(base_url: str, *, timeout: float = 2.0, api_key: str | None = None) -> tuple[dict | None, str]:
    """Read base_url/sim/gpus once; returns (payload, "") or (None, why not)."""
    url = base_url.rstrip("/") + "/sim/gpus"
    try:
        status, body = _http_get(url, timeout=timeout, api_key=api_key)
    except OSError as exc:
        return None, f"{url} could not be reached ({exc})"
    if status == 404:
        return None, f"{url} answered 404: the server at {base_url} is not glm5lib's stand-in"
    if status != 200:
        return None, f"{url} answered HTTP {status}"
    try:
        payload = json.loads(body)
    except ValueError as exc:
        return None, f"{url} did not return JSON ({exc})"
    if not isinstance(payload, dict) or not isinstance(payload.get("gpus"), list):
        return None, f"{url} returned JSON without a 'gpus' list"
    return payload, ""


class _CsvSink:
    """Appends rows to a CSV file with a fixed header, flushing after each batch."""

    def __init__(self, path: str | Path, columns: Sequence[str]):
        self.path = Path(path)
        self.columns = list(columns)
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existing = self.path.exists() and self.path.stat().st_size > 0
        if existing:
            with self.path.open(newline="") as fh:
                header = next(csv.reader(fh), [])
            if header != self.columns:
                raise TelemetryError(
                    f"{self.path} already holds a CSV with columns {header}, not {self.columns}: "
                    "give another path or move the old file away"
                )
        self._fh = self.path.open("a", newline="")
        self._writer = csv.writer(self._fh)
        if not existing:
            self._writer.writerow(self.columns)
            self._fh.flush()

    def write(self, rows: Iterable[Sequence[Any]]) -> None:
        with self._lock:
            if self._fh.closed:
                return
            self._writer.writerows([["" if _missing(v) else v for v in row] for row in rows])
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


class _Stats:
    """Per-GPU sampling bookkeeping: how many samples, at what rate, at what cost."""

    def __init__(self, gpu: int):
        self.gpu = gpu
        self.samples = 0
        self.errors = 0
        self.first: float | None = None
        self.last: float | None = None
        self.costs: list[float] = []
        self.batched: list[str] = []
        self.individual: list[str] = []
        self.unsupported: list[str] = []
        self.rotating = False
        self.last_error: str | None = None

    def record(self, t: float, cost: float) -> None:
        self.samples += 1
        if self.first is None:
            self.first = t
        self.last = t
        if len(self.costs) < 200_000:
            self.costs.append(cost)

    def row(self, interval: float) -> dict[str, Any]:
        costs = np.array(self.costs) * 1e3 if self.costs else np.array([np.nan])
        span = (self.last - self.first) if self.first is not None and self.last is not None else 0.0
        return {
            "gpu": self.gpu,
            "samples": self.samples,
            "duration_s": span,
            "target_hz": 1.0 / interval,
            "achieved_hz": (self.samples - 1) / span if span > 0 else np.nan,
            "cost_mean_ms": float(np.nanmean(costs)),
            "cost_p50_ms": float(np.nanpercentile(costs, 50)),
            "cost_p99_ms": float(np.nanpercentile(costs, 99)),
            "cost_max_ms": float(np.nanmax(costs)),
            "errors": self.errors,
            "batched_fields": ",".join(self.batched),
            "individual_reads": ",".join(self.individual),
            "unsupported": ",".join(self.unsupported),
            "rotating": self.rotating,
            "last_error": self.last_error,
        }


class _NvmlGpu:
    """Reads one GPU through NVML: one batched field-value query plus the reads NVML has no field for.

    At construction it asks which fields the driver answers in a batch; fields it refuses are read
    through their individual call instead, and reads NVML does not support on this GPU are dropped.
    When one full sample costs more than most of the interval, the slower secondary reads rotate
    (one per sample, last value carried) so that power, energy and utilisation keep their rate.
    """

    _BATCH = (
        ("power_w", _FI_POWER_INSTANT),
        ("energy_j", _FI_TOTAL_ENERGY_CONSUMPTION),
        ("power_limit_w", _FI_POWER_CURRENT_LIMIT),
        ("pcie_tx", _FI_PCIE_COUNT_TX_BYTES),
        ("pcie_rx", _FI_PCIE_COUNT_RX_BYTES),
    )

    def __init__(self, nvml: Any, index: int, interval: float, stats: _Stats):
        self.nvml = nvml
        self.index = index
        self.interval = interval
        self.stats = stats
        self.handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self.batch_ids: list[tuple[str, int]] = []
        self._prev_pcie: tuple[float, float, float] | None = None  # (t, tx, rx)
        self._last: dict[str, float] = {}
        self._rotation = 0
        self._probe_batch()
        self.fast: list[tuple[str, Callable[[], dict[str, float]]]] = []
        self.slow: list[tuple[str, Callable[[], dict[str, float]]]] = []
        batched = {name for name, _ in self.batch_ids}
        if "power_w" not in batched:
            self.fast.append(("power", self._power_individual))
        if "energy_j" not in batched:
            self.fast.append(("energy", self._energy_individual))
        self.fast.append(("utilization", self._utilization))
        if "pcie_tx" not in batched or "pcie_rx" not in batched:
            self.slow.append(("pcie_throughput", self._pcie_individual))
        self.slow.append(("sm_clock", self._sm_clock))
        self.slow.append(("memory", self._memory))
        self.slow.append(("temperature", self._temperature))
        self.slow.append(("throttle", self._throttle))
        if "power_limit_w" not in batched:
            self.slow.append(("power_limit", self._power_limit_individual))
        stats.batched = [name for name, _ in self.batch_ids]
        stats.individual = [name for name, _ in self.fast + self.slow]

    # -- discovery -------------------------------------------------------------------------
    def _probe_batch(self) -> None:
        ids = [fid for _, fid in self._BATCH]
        try:
            values = self.nvml.nvmlDeviceGetFieldValues(self.handle, ids)
        except Exception as exc:
            log.info("GPU %d: NVML field-value queries unavailable (%s); reading values one by one", self.index, exc)
            return
        for (name, fid), value in zip(self._BATCH, values, strict=False):
            if value.nvmlReturn == _NVML_SUCCESS:
                self.batch_ids.append((name, fid))
            else:
                log.debug("GPU %d: field %s (%d) not answered in a batch (NVML return %d)",
                          self.index, name, fid, value.nvmlReturn)

    # -- individual reads (each returns the columns it fills) ------------------------------
    def _power_individual(self) -> dict[str, float]:
        return {"power_w": self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1e3}

    def _energy_individual(self) -> dict[str, float]:
        return {"energy_j": self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1e3}

    def _power_limit_individual(self) -> dict[str, float]:
        return {"power_limit_w": self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1e3}

    def _utilization(self) -> dict[str, float]:
        util = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
        return {"gpu_util": float(util.gpu), "mem_util": float(util.memory)}

    def _sm_clock(self) -> dict[str, float]:
        return {"sm_clock_mhz": float(self.nvml.nvmlDeviceGetClockInfo(self.handle, _CLOCK_SM))}

    def _memory(self) -> dict[str, float]:
        return {"mem_used_bytes": float(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)}

    def _temperature(self) -> dict[str, float]:
        return {"temperature_c": float(self.nvml.nvmlDeviceGetTemperature(self.handle, _TEMPERATURE_GPU))}

    def _throttle(self) -> dict[str, float]:
        fn = getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or self.nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        return {"throttle_reasons": int(fn(self.handle))}

    def _pcie_individual(self) -> dict[str, float]:
        # NVML reports KB/s over a 20 ms window; this call alone costs those 20 ms.
        tx = self.nvml.nvmlDeviceGetPcieThroughput(self.handle, _PCIE_UTIL_TX)
        rx = self.nvml.nvmlDeviceGetPcieThroughput(self.handle, _PCIE_UTIL_RX)
        return {"pcie_tx_bytes_s": tx * 1024.0, "pcie_rx_bytes_s": rx * 1024.0}

    # -- one sample ------------------------------------------------------------------------
    def _run(self, name: str, fn: Callable[[], dict[str, float]], into: dict[str, Any], group: list) -> None:
        try:
            values = fn()
        except Exception as exc:
            if _is_not_supported(exc) or isinstance(exc, AttributeError):
                log.info("GPU %d: %s is not supported here; dropping it", self.index, name)
                group[:] = [(n, f) for n, f in group if n != name]
                self.stats.unsupported.append(name)
                self.stats.individual = [n for n in self.stats.individual if n != name]
            else:
                self.stats.errors += 1
                self.stats.last_error = f"{name}: {exc}"
            return
        into.update(values)
        if group is self.slow:
            self._last.update(values)

    def sample(self) -> dict[str, Any]:
        row: dict[str, Any] = {}
        t0 = time.time()
        if self.batch_ids:
            try:
                values = self.nvml.nvmlDeviceGetFieldValues(self.handle, [fid for _, fid in self.batch_ids])
            except Exception as exc:
                self.stats.errors += 1
                self.stats.last_error = f"field values: {exc}"
                values = []
            for (name, _), value in zip(self.batch_ids, values, strict=False):
                if value.nvmlReturn != _NVML_SUCCESS:
                    continue
                raw = getattr(value.value, _VALUE_ATTR.get(value.valueType, "ullVal"))
                if name == "power_w":
                    row["power_w"] = raw / 1e3
                elif name == "energy_j":
                    row["energy_j"] = raw / 1e3
                elif name == "power_limit_w":
                    row["power_limit_w"] = raw / 1e3
                else:
                    row[name] = float(raw)
                    # the field's own timestamp (us) dates the counter better than the wall clock
                    row[name + "_t"] = value.timestamp / 1e6 if value.timestamp else time.time()
        for name, fn in list(self.fast):
            self._run(name, fn, row, self.fast)
        t_fast = time.time() - t0
        if self.stats.rotating and self.slow:
            name, fn = self.slow[self._rotation % len(self.slow)]
            self._rotation += 1
            self._run(name, fn, row, self.slow)
        else:
            for name, fn in list(self.slow):
                self._run(name, fn, row, self.slow)
        cost = time.time() - t0
        # rotate the slow reads when a full sample eats most of the interval, and stop rotating
        # once the fast part leaves room for all of them again
        if not self.stats.rotating and cost > 0.8 * self.interval and len(self.slow) > 1:
            self.stats.rotating = True
            log.info("GPU %d: a full NVML sample takes %.0f ms of a %.0f ms interval; rotating slow reads",
                     self.index, cost * 1e3, self.interval * 1e3)
        elif self.stats.rotating and t_fast * (1 + len(self.slow)) < 0.4 * self.interval:
            self.stats.rotating = False
        if "pcie_tx" in row and "pcie_rx" in row:
            t_pcie = row.pop("pcie_tx_t")
            row.pop("pcie_rx_t", None)
            tx, rx = row.pop("pcie_tx"), row.pop("pcie_rx")
            if self._prev_pcie is not None and t_pcie > self._prev_pcie[0]:
                dt = t_pcie - self._prev_pcie[0]
                row["pcie_tx_bytes_s"] = max(tx - self._prev_pcie[1], 0.0) / dt
                row["pcie_rx_bytes_s"] = max(rx - self._prev_pcie[2], 0.0) / dt
            self._prev_pcie = (t_pcie, tx, rx)
        for key in ("pcie_tx", "pcie_rx", "pcie_tx_t", "pcie_rx_t"):
            row.pop(key, None)
        if self.stats.rotating:
            for key, value in self._last.items():
                row.setdefault(key, value)
        row["time"] = (t0 + time.time()) / 2.0
        row["_cost"] = cost
        return row


class GpuSampler:
    """Background GPU sampler; a context manager.

    ``source="auto"`` reads the stand-in's simulated GPUs when ``base_url`` is a glm5lib stand-in
    (its GPUs are the ones under load), else NVML, else reports unavailable. ``gpus`` picks GPU
    indices (default: all). ``out`` is the path of ``gpu.csv``, appended as samples arrive.
    ``.frame()`` returns the samples so far (columns :data:`GPU_COLUMNS`); ``.stats()`` the
    achieved rate and per-sample cost of each GPU.
    """

    def __init__(
        self,
        interval: float = 0.1,
        gpus: Sequence[int] | None = None,
        source: str = "auto",
        base_url: str | None = None,
        out: str | Path | None = None,
        *,
        api_key: str | None = None,
        _nvml: Any = None,
    ):
        try:
            interval = float(interval)
        except (TypeError, ValueError):
            raise ConfigError(f"interval={interval!r} is not a number of seconds", field="interval") from None
        if not math.isfinite(interval) or interval <= 0:
            raise ConfigError(f"interval={interval!r} must be a positive number of seconds, e.g. 0.1", field="interval")
        if source not in SOURCES:
            raise ConfigError(f"source={source!r} is not valid", field="source", valid=SOURCES)
        if source == "sim" and not base_url:
            raise ConfigError("source='sim' needs base_url, the stand-in server's URL", field="base_url")
        if gpus is not None:
            if isinstance(gpus, (str, bytes)) or not all(isinstance(g, (int, np.integer)) for g in gpus):
                raise ConfigError(f"gpus={gpus!r} must be a list of GPU indices such as [0, 1]", field="gpus")
            gpus = [int(g) for g in gpus]
        self.interval = interval
        self.gpus = gpus
        self.requested_source = source
        self.base_url = base_url.rstrip("/") if base_url else None
        self.out = Path(out) if out is not None else None
        self._api_key = api_key
        self._nvml_override = _nvml
        self._nvml: Any = None
        self._resolved: str | None = None
        self._reason: str | None = None
        self._rows: list[tuple] = []
        self._rows_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._stats: dict[int, _Stats] = {}
        self._sink: _CsvSink | None = None
        self._running = False
        self.gpu_names: dict[int, str] = {}

    # -- resolution --------------------------------------------------------------------------
    def _resolve(self) -> None:
        if self._resolved is not None:
            return
        reasons = []
        if self.requested_source in ("auto", "sim") and self.base_url:
            payload, why = _probe_sim(self.base_url, api_key=self._api_key)
            if payload is not None:
                self._resolved = "sim"
                self._sim_indices = [int(g.get("index", i)) for i, g in enumerate(payload["gpus"])]
                self.gpu_names = {int(g.get("index", i)): str(g.get("name", "")) for i, g in enumerate(payload["gpus"])}
                return
            reasons.append(why)
            if self.requested_source == "sim":
                self._resolved, self._reason = "unavailable", why
                return
        if self.requested_source in ("auto", "nvml"):
            nvml, why = _load_nvml(self._nvml_override)
            if nvml is not None:
                self._nvml = nvml
                self._resolved = "nvml"
                return
            reasons.append(why)
        self._resolved = "unavailable"
        self._reason = "; ".join(r for r in reasons if r) or "no telemetry source"

    @property
    def source(self) -> str:
        """The source in use: 'nvml', 'sim' or 'unavailable'."""
        self._resolve()
        return self._resolved or "unavailable"

    @property
    def available(self) -> bool:
        return self.source != "unavailable"

    @property
    def reason(self) -> str | None:
        """Why no telemetry is available (None when it is)."""
        self._resolve()
        return self._reason

    @property
    def running(self) -> bool:
        return self._running

    # -- life cycle --------------------------------------------------------------------------
    def start(self) -> GpuSampler:
        """Start sampling; returns self. Unavailability is logged, never raised."""
        if self._running:
            return self
        self._resolve()
        if self._resolved == "unavailable":
            log.warning("GPU telemetry unavailable: %s", self._reason)
            return self
        if self._resolved == "nvml" and self._nvml is None:
            self._nvml, why = _load_nvml(self._nvml_override)
            if self._nvml is None:
                self._resolved, self._reason = "unavailable", why
                log.warning("GPU telemetry unavailable: %s", why)
                return self
        if self._resolved == "nvml":
            count = self._nvml.nvmlDeviceGetCount()
            indices = self._check_gpus(list(range(count)))
        else:
            indices = self._check_gpus(self._sim_indices)
        if self.out is not None:
            self._sink = _CsvSink(self.out, GPU_COLUMNS)
        self._stop.clear()
        self._running = True
        self._stats = {i: self._stats.get(i) or _Stats(i) for i in indices}
        if self._resolved == "nvml":
            for i in indices:
                thread = threading.Thread(target=self._nvml_loop, args=(i,), name=f"glm5-gpu{i}", daemon=True)
                self._threads.append(thread)
        else:
            thread = threading.Thread(target=self._sim_loop, args=(indices,), name="glm5-simgpus", daemon=True)
            self._threads.append(thread)
        for thread in self._threads:
            thread.start()
        log.info("sampling %d GPU(s) from %s every %.3f s", len(indices), self._resolved, self.interval)
        return self

    def _check_gpus(self, present: list[int]) -> list[int]:
        if self.gpus is None:
            return present
        missing = [g for g in self.gpus if g not in present]
        if missing:
            self._resolved_cleanup()
            raise ConfigError(f"gpus={self.gpus} names GPU(s) {missing} that are not here", field="gpus",
                              valid=[str(g) for g in present])
        return list(self.gpus)

    def _resolved_cleanup(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None
        self._resolved = None

    def stop(self) -> pd.DataFrame:
        """Stop sampling (idempotent); returns the frame."""
        if self._running:
            self._stop.set()
            for thread in self._threads:
                thread.join(timeout=max(5.0, 10 * self.interval))
            self._threads = []
            self._running = False
            if self._sink is not None:
                self._sink.close()
                self._sink = None
            if self._nvml is not None:
                with contextlib.suppress(Exception):
                    self._nvml.nvmlShutdown()
                self._nvml = None  # a later start() initialises NVML again
        return self.frame()

    def __enter__(self) -> GpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if self._running:
                self.stop()

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        src = self._resolved or self.requested_source
        extra = f", reason={self._reason!r}" if self._reason else ""
        return f"GpuSampler(source={src!r}, interval={self.interval}, {state}, samples={len(self._rows)}{extra})"

    # -- loops -------------------------------------------------------------------------------
    def _emit(self, rows: list[tuple]) -> None:
        with self._rows_lock:
            self._rows.extend(rows)
        if self._sink is not None:
            try:
                self._sink.write(rows)
            except OSError as exc:
                log.error("could not append to %s (%s); samples stay in memory", self.out, exc)
                self._sink = None

    def _ticks(self) -> Iterable[None]:
        """Yield at start + k*interval, skipping ticks missed while a read ran late."""
        start = time.monotonic()
        k = 0
        while not self._stop.is_set():
            yield
            k += 1
            now = time.monotonic()
            due = start + k * self.interval
            if due < now:
                k = math.floor((now - start) / self.interval) + 1
                due = start + k * self.interval
            if self._stop.wait(due - now):
                return

    def _nvml_loop(self, index: int) -> None:
        stats = self._stats[index]
        try:
            reader = _NvmlGpu(self._nvml, index, self.interval, stats)
        except Exception as exc:
            stats.last_error = f"could not open GPU {index}: {exc}"
            log.error("GPU %d: %s", index, stats.last_error)
            return
        for _ in self._ticks():
            try:
                row = reader.sample()
            except Exception as exc:  # a GPU that falls off the bus must not kill the others
                stats.errors += 1
                stats.last_error = str(exc)
                continue
            stats.record(row["time"], row.pop("_cost"))
            row["gpu"] = index
            self._emit([tuple(row.get(c, _nan()) for c in GPU_COLUMNS)])

    def _sim_loop(self, indices: list[int]) -> None:
        url = self.base_url + "/sim/gpus"  # type: ignore[operator]
        wanted = set(indices)
        warned = False
        for _ in self._ticks():
            t0 = time.time()
            try:
                status, body = _http_get(url, timeout=max(1.0, 5 * self.interval), api_key=self._api_key)
                if status != 200:
                    raise TelemetryError(f"{url} answered HTTP {status}")
                payload = json.loads(body)
            except (OSError, ValueError, TelemetryError) as exc:
                for i in indices:
                    self._stats[i].errors += 1
                    self._stats[i].last_error = str(exc)
                if not warned:
                    log.warning("stand-in GPU telemetry failed (%s); still trying", exc)
                    warned = True
                continue
            t1 = time.time()
            stamp = (t0 + t1) / 2.0
            rows = []
            for i, gpu in enumerate(payload.get("gpus", [])):
                index = int(gpu.get("index", i))
                if index not in wanted:
                    continue
                self._stats[index].record(stamp, t1 - t0)
                row = {"time": stamp, "gpu": index}
                for col in GPU_COLUMNS[2:]:
                    value = gpu.get(col)
                    row[col] = _nan() if value is None else value
                rows.append(tuple(row[c] for c in GPU_COLUMNS))
            if rows:
                self._emit(rows)

    # -- results -----------------------------------------------------------------------------
    def frame(self) -> pd.DataFrame:
        """Samples so far: one row per GPU per sample, columns :data:`GPU_COLUMNS`, sorted by time."""
        with self._rows_lock:
            rows = list(self._rows)
        frame = pd.DataFrame(rows, columns=GPU_COLUMNS)
        frame = _gpu_dtypes(frame)
        return frame.sort_values(["time", "gpu"], kind="stable").reset_index(drop=True)

    def stats(self) -> pd.DataFrame:
        """Per GPU: samples, achieved rate (Hz), per-sample cost (ms), errors, which reads were batched."""
        rows = [s.row(self.interval) for _, s in sorted(self._stats.items())]
        return pd.DataFrame(rows)


def _gpu_dtypes(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    for col in GPU_COLUMNS:
        if col == "gpu":
            frame[col] = frame[col].astype("int64")
        elif col == "throttle_reasons":
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("Int64")
        else:
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("float64")
    return frame


def load_gpu_csv(path: str | Path, *, missing_ok: bool = False) -> pd.DataFrame:
    """Read a ``gpu.csv`` written by :class:`GpuSampler`, with its dtypes.

    With ``missing_ok``, a phase measured without GPU telemetry (no GPU, no stand-in) reads as
    an empty frame instead of an error.
    """
    path = Path(path)
    if not path.exists():
        if missing_ok:
            return _gpu_dtypes(pd.DataFrame({c: [] for c in GPU_COLUMNS}))
        raise TelemetryError(f"{path} does not exist: no GPU telemetry was recorded there")
    frame = pd.read_csv(path)
    missing = [c for c in GPU_COLUMNS if c not in frame.columns]
    if missing:
        raise TelemetryError(f"{path} lacks GPU telemetry columns {missing}; expected {GPU_COLUMNS}")
    return _gpu_dtypes(frame[GPU_COLUMNS])


# --------------------------------------------------------------------------------------------
# /metrics
# --------------------------------------------------------------------------------------------
class MetricsScraper:
    """Scrapes a server's Prometheus ``/metrics`` every ``interval`` seconds in the background.

    ``.enabled`` is False (and ``.reason`` says why) when ``/metrics`` answers 404, which SGLang
    does when started without ``--enable-metrics``. ``.frame()`` has one row per sample:
    ``time, metric, labels, value`` (labels as a JSON object string, keys sorted).
    """

    def __init__(
        self,
        base_url: str,
        interval: float = 1.0,
        out: str | Path | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 5.0,
    ):
        if not base_url or not str(base_url).startswith(("http://", "https://")):
            raise ConfigError(f"base_url={base_url!r} must be an http(s) URL such as http://127.0.0.1:30000",
                              field="base_url")
        try:
            interval = float(interval)
        except (TypeError, ValueError):
            raise ConfigError(f"interval={interval!r} is not a number of seconds", field="interval") from None
        if not math.isfinite(interval) or interval <= 0:
            raise ConfigError(f"interval={interval!r} must be a positive number of seconds, e.g. 1.0", field="interval")
        self.base_url = str(base_url).rstrip("/")
        self.url = self.base_url + "/metrics"
        self.interval = interval
        self.out = Path(out) if out is not None else None
        self.timeout = timeout
        self._api_key = api_key
        self.enabled: bool | None = None
        self.reason: str | None = None
        self.scrapes = 0
        self.errors = 0
        self._rows: list[tuple] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sink: _CsvSink | None = None

    def __repr__(self) -> str:
        return (f"MetricsScraper({self.url!r}, enabled={self.enabled}, scrapes={self.scrapes}"
                + (f", reason={self.reason!r})" if self.reason else ")"))

    def _parse(self, text: str, stamp: float) -> list[tuple]:
        from prometheus_client.parser import text_string_to_metric_families

        rows = []
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = json.dumps(dict(sorted(sample.labels.items())), separators=(",", ":"))
                rows.append((stamp, sample.name, labels, float(sample.value)))
        return rows

    def scrape_once(self) -> pd.DataFrame:
        """Scrape now and return this scrape's rows (also kept in ``.frame()`` and ``out``)."""
        t0 = time.time()
        try:
            status, body = _http_get(self.url, timeout=self.timeout, api_key=self._api_key)
        except OSError as exc:
            self.errors += 1
            if not self.enabled:
                self.enabled = False
                self.reason = f"{self.url} could not be reached ({exc})"
            return pd.DataFrame(columns=METRICS_COLUMNS)
        stamp = (t0 + time.time()) / 2.0
        if status == 404:
            self.enabled = False
            self.reason = (f"{self.url} answered 404: the server was started without --enable-metrics "
                           "(restart it with --enable-metrics to record its queue and running-request gauges)")
            return pd.DataFrame(columns=METRICS_COLUMNS)
        if status in (401, 403):
            self.enabled = False
            self.errors += 1
            self.reason = f"{self.url} answered HTTP {status}: pass the server's api_key"
            return pd.DataFrame(columns=METRICS_COLUMNS)
        if status != 200:
            self.errors += 1
            self.reason = f"{self.url} answered HTTP {status}"
            return pd.DataFrame(columns=METRICS_COLUMNS)
        try:
            rows = self._parse(body.decode("utf-8", "replace"), stamp)
        except Exception as exc:  # the parser raises ValueError and friends on malformed text
            self.errors += 1
            self.reason = f"{self.url} returned text that is not Prometheus exposition format ({exc})"
            return pd.DataFrame(columns=METRICS_COLUMNS)
        self.enabled, self.reason = True, None
        self.scrapes += 1
        with self._lock:
            self._rows.extend(rows)
        if self._sink is not None:
            self._sink.write(rows)
        return pd.DataFrame(rows, columns=METRICS_COLUMNS)

    def start(self) -> MetricsScraper:
        """Scrape once now (so ``.enabled`` is known), then keep scraping in the background.

        When ``/metrics`` answers 404 no thread is started: the server has no metrics to give.
        """
        if self._thread is not None:
            return self
        if self.out is not None and self._sink is None:
            self._sink = _CsvSink(self.out, METRICS_COLUMNS)
        self.scrape_once()
        if self.enabled is False and self.reason and "404" in self.reason:
            log.warning("%s", self.reason)
            return self
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="glm5-metrics", daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        start = time.monotonic()
        k = 1
        while not self._stop.wait(max(0.0, start + k * self.interval - time.monotonic())):
            self.scrape_once()
            k = max(k + 1, math.floor((time.monotonic() - start) / self.interval) + 1)
            if self.enabled is False and self.reason and "404" in self.reason:
                return

    def stop(self) -> pd.DataFrame:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=self.timeout + 2 * self.interval)
            self._thread = None
        if self._sink is not None:
            self._sink.close()
            self._sink = None
        return self.frame()

    def __enter__(self) -> MetricsScraper:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def frame(self) -> pd.DataFrame:
        with self._lock:
            rows = list(self._rows)
        return pd.DataFrame(rows, columns=METRICS_COLUMNS).astype(
            {"time": "float64", "metric": "object", "labels": "object", "value": "float64"}
        )


def load_metrics_csv(path: str | Path) -> pd.DataFrame:
    """Read a ``metrics.csv`` written by :class:`MetricsScraper`."""
    path = Path(path)
    if not path.exists():
        raise TelemetryError(f"{path} does not exist: no /metrics scrapes were recorded there")
    frame = pd.read_csv(path, dtype={"metric": str, "labels": str})
    missing = [c for c in METRICS_COLUMNS if c not in frame.columns]
    if missing:
        raise TelemetryError(f"{path} lacks columns {missing}; expected {METRICS_COLUMNS}")
    return frame[METRICS_COLUMNS]


def metric_series(frame: pd.DataFrame, metric: str, agg: str = "sum", **labels: str) -> pd.Series:
    """One metric as a time series: samples matching ``labels`` combined per scrape with ``agg``.

    ``sum`` suits SGLang's gauges (each data-parallel rank reports its own running and queued
    requests); use ``agg="mean"`` or a ``tp_rank="0"`` filter where ranks repeat one value.
    """
    rows = frame[frame["metric"] == metric]
    if rows.empty:
        known = sorted(frame["metric"].unique())
        close = [m for m in known if metric.split(":")[-1] in m][:5]
        hint = f"; similar: {close}" if close else ""
        raise TelemetryError(f"metric {metric!r} is not in the scrapes ({len(known)} metrics){hint}")
    if labels:
        parsed = rows["labels"].map(json.loads)
        mask = parsed.map(lambda d: all(str(d.get(k)) == str(v) for k, v in labels.items()))
        rows = rows[mask]
    return rows.groupby("time")["value"].agg(agg).rename(metric)


# --------------------------------------------------------------------------------------------
# environment
# --------------------------------------------------------------------------------------------
def _try(fn: Callable[[], Any], default: Any = None) -> Any:
    try:
        return fn()
    except Exception as exc:  # one unreadable property must not cost the whole snapshot
        log.debug("NVML read failed: %s", exc)
        return default


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for key, dists in _PACKAGES.items():
        versions[key] = None
        for dist in dists:
            try:
                versions[key] = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


def _host_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    with contextlib.suppress(Exception):
        import psutil

        info["memory_total_bytes"] = int(psutil.virtual_memory().total)
    return info


def _nvlink_links(nvml: Any, handle: Any) -> list[tuple[Any, str]]:
    """(remote device type, remote PCI bus id) of each active NVLink of one GPU; [] without NVLink."""
    links: list[tuple[Any, str]] = []
    get_state = getattr(nvml, "nvmlDeviceGetNvLinkState", None)
    if get_state is None:
        return links
    for link in range(_NVLINK_MAX_LINKS):
        try:
            if get_state(handle, link) != 1:
                continue
        except Exception:
            break  # NOT_SUPPORTED, or past the GPU's last link
        remote_type = _try(lambda link=link: nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))
        bus = _try(lambda link=link: _text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId))
        links.append((remote_type, _short_bus(bus)))
    return links


def _nvlink_label(links_i: list[tuple[Any, str]], links_j: list[tuple[Any, str]], bus_j: str,
                  gpu_buses: set[str]) -> str | None:
    """nvidia-smi's NV# for a GPU pair: direct links (bridges), else links both have into a
    fabric (NVSwitch, or a remote that is none of the GPUs here); None when not linked."""
    direct = sum(1 for kind, bus in links_i if kind != _NVLINK_SWITCH and bus and bus == bus_j)
    if direct:
        return f"NV{direct}"

    def fabric(links: list[tuple[Any, str]]) -> int:
        return sum(1 for kind, bus in links if kind == _NVLINK_SWITCH or not bus or bus not in gpu_buses)

    fi, fj = fabric(links_i), fabric(links_j)
    return f"NV{min(fi, fj)}" if fi and fj else None


def _short_bus(bus: str | None) -> str:
    # NVML pads the domain to 8 hex digits in busId, 4 in busIdLegacy: compare on the tail
    return (bus or "").lower()[-12:]


def _nvml_environment(nvml: Any) -> dict[str, Any]:
    env: dict[str, Any] = {"source": "nvml", "standin": False, "reason": None}
    env["driver_version"] = _text(_try(nvml.nvmlSystemGetDriverVersion))
    cuda = _try(nvml.nvmlSystemGetCudaDriverVersion_v2) or _try(nvml.nvmlSystemGetCudaDriverVersion)
    env["cuda_version"] = f"{cuda // 1000}.{(cuda % 1000) // 10}" if isinstance(cuda, int) and cuda else None
    count = nvml.nvmlDeviceGetCount()
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    gpus = []
    for i, h in enumerate(handles):
        cc = _try(lambda h=h: nvml.nvmlDeviceGetCudaComputeCapability(h))
        mig = _try(lambda h=h: nvml.nvmlDeviceGetMigMode(h))
        limit = _try(lambda h=h: nvml.nvmlDeviceGetEnforcedPowerLimit(h))
        default_limit = _try(lambda h=h: nvml.nvmlDeviceGetPowerManagementDefaultLimit(h))
        persistence = _try(lambda h=h: nvml.nvmlDeviceGetPersistenceMode(h))
        mem = _try(lambda h=h: nvml.nvmlDeviceGetMemoryInfo(h))
        gpus.append({
            "index": i,
            "name": _text(_try(lambda h=h: nvml.nvmlDeviceGetName(h))),
            "uuid": _text(_try(lambda h=h: nvml.nvmlDeviceGetUUID(h))),
            "pci_bus_id": _text(_try(lambda h=h: nvml.nvmlDeviceGetPciInfo(h).busId)),
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "power_limit_w": limit / 1e3 if limit is not None else None,
            "power_default_limit_w": default_limit / 1e3 if default_limit is not None else None,
            "pcie_gen_current": _try(lambda h=h: nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
            "pcie_gen_max": _try(lambda h=h: nvml.nvmlDeviceGetMaxPcieLinkGeneration(h)),
            "pcie_width_current": _try(lambda h=h: nvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
            "pcie_width_max": _try(lambda h=h: nvml.nvmlDeviceGetMaxPcieLinkWidth(h)),
            "persistence_mode": bool(persistence) if persistence is not None else None,
            "mig_mode": bool(mig[0]) if mig else None,
            "sm_clock_max_mhz": _try(lambda h=h: nvml.nvmlDeviceGetMaxClockInfo(h, _CLOCK_SM)),
            "mem_clock_max_mhz": _try(lambda h=h: nvml.nvmlDeviceGetMaxClockInfo(h, _CLOCK_MEM)),
            "memory_total_bytes": int(mem.total) if mem is not None else None,
        })
    env["gpus"] = gpus
    nvlinks = [_nvlink_links(nvml, h) for h in handles]
    gpu_buses = {_short_bus(g["pci_bus_id"]) for g in gpus}
    p2p, topo = [], []
    for i, hi in enumerate(handles):
        p2p_row, topo_row = [], []
        for j, hj in enumerate(handles):
            if i == j:
                p2p_row.append("OK")
                topo_row.append("X")
                continue
            statuses = [_try(lambda cap=cap, hi=hi, hj=hj: nvml.nvmlDeviceGetP2PStatus(hi, hj, cap), 6)
                        for cap in (_P2P_CAPS_READ, _P2P_CAPS_WRITE)]
            bad = [s for s in statuses if s != 0]
            p2p_row.append(_P2P_STATUS.get(bad[0], "U") if bad else "OK")
            label = _nvlink_label(nvlinks[i], nvlinks[j], _short_bus(gpus[j]["pci_bus_id"]), gpu_buses)
            if label:
                topo_row.append(label)
            else:
                level = _try(lambda hi=hi, hj=hj: nvml.nvmlDeviceGetTopologyCommonAncestor(hi, hj))
                topo_row.append(_TOPOLOGY.get(level, "?") if level is not None else "?")
        p2p.append(p2p_row)
        topo.append(topo_row)
    env["p2p"] = p2p
    env["topology"] = topo
    return env


def _environment_warnings(env: dict[str, Any]) -> list[str]:
    warnings: list[str] = []
    gpus = env.get("gpus") or []
    p2p = env.get("p2p") or []
    bad = [(i, j, s) for i, row in enumerate(p2p) for j, s in enumerate(row) if i < j and s != "OK"]
    if bad:
        pairs = ", ".join(f"{i}-{j} ({s}: {P2P_LEGEND.get(s, s)})" for i, j, s in bad[:12])
        more = f" and {len(bad) - 12} more" if len(bad) > 12 else ""
        warnings.append(
            f"P2P is unavailable between {len(bad)} GPU pair(s): {pairs}{more}. Tensor-parallel "
            "all-reduce then goes through host memory; a VM or IOMMU setting often causes this "
            "(in the investigation a Proxmox VM broke P2P and an LXC container restored it)."
        )
    for g in gpus:
        gen, gen_max = g.get("pcie_gen_current"), g.get("pcie_gen_max")
        width, width_max = g.get("pcie_width_current"), g.get("pcie_width_max")
        if width and width_max and width < width_max:
            warnings.append(
                f"GPU {g['index']}: PCIe link width x{width} below its maximum x{width_max} "
                "(a slot, riser or bifurcation setting limits it; this does not change with load)."
            )
        if gen and gen_max and gen < gen_max:
            warnings.append(
                f"GPU {g['index']}: PCIe link at Gen{gen} of Gen{gen_max}. Idle GPUs lower their link "
                "speed to save power; if it stays below Gen{0} under load, check the slot and BIOS.".format(gen_max)
            )
        if g.get("mig_mode"):
            warnings.append(f"GPU {g['index']}: MIG is enabled; the server sees a slice, not the whole GPU.")
        limit, default = g.get("power_limit_w"), g.get("power_default_limit_w")
        if limit and default and limit < 0.95 * default:
            warnings.append(f"GPU {g['index']}: power limit {limit:.0f} W is below its default {default:.0f} W.")
    names = {g.get("name") for g in gpus}
    if len(names) > 1:
        warnings.append(f"the GPUs are not all alike ({sorted(str(n) for n in names)}); tensor parallelism runs at the slowest one's pace.")
    if gpus and any(g.get("persistence_mode") is False for g in gpus):
        warnings.append("persistence mode is off on some GPUs: the first CUDA call after idle pays the driver start.")
    return warnings


def environment(source: str = "auto", base_url: str | None = None, *, api_key: str | None = None,
                _nvml: Any = None) -> dict[str, Any]:
    """A snapshot of the host for the report; never raises for a missing GPU.

    ``source="auto"`` reads the stand-in's ``/sim/environment`` when ``base_url`` is a glm5lib
    stand-in, else NVML; with neither, ``source`` is ``"unavailable"`` and ``reason`` says why.
    Keys: source, standin, reason, host, host_info, time, driver_version, cuda_version, gpus,
    p2p, topology, packages, warnings (see the module's contract).
    """
    if source not in SOURCES:
        raise ConfigError(f"source={source!r} is not valid", field="source", valid=SOURCES)
    if source == "sim" and not base_url:
        raise ConfigError("source='sim' needs base_url, the stand-in server's URL", field="base_url")
    base: dict[str, Any] = {
        "source": "unavailable", "standin": False, "reason": None,
        "host": socket.gethostname(), "host_info": _host_info(), "time": time.time(),
        "driver_version": None, "cuda_version": None, "gpus": [], "p2p": [], "topology": [],
        "packages": package_versions(), "warnings": [],
    }
    reasons = []
    if source in ("auto", "sim") and base_url:
        url = base_url.rstrip("/") + "/sim/environment"
        try:
            status, body = _http_get(url, timeout=5.0, api_key=api_key)
            if status == 200:
                sim = json.loads(body)
                env = {**base, **sim, "source": "sim", "standin": True}
                # the library's own rules apply to simulated GPUs as to real ones; the stand-in's
                # notes on other topics are kept after them
                ours = _environment_warnings(env)
                covered = ("p2p", "peer", "pcie")
                theirs = [w for w in sim.get("warnings") or []
                          if not (ours and any(c in str(w).lower() for c in covered))]
                env["warnings"] = ours + theirs
                return env
            reasons.append(f"{url} answered HTTP {status}" + (" (not glm5lib's stand-in)" if status == 404 else ""))
        except (OSError, ValueError) as exc:
            reasons.append(f"{url} could not be read ({exc})")
    if source in ("auto", "nvml"):
        nvml, why = _load_nvml(_nvml)
        if nvml is not None:
            try:
                env = {**base, **_nvml_environment(nvml)}
            except Exception as exc:
                reasons.append(f"NVML failed while reading the GPUs: {exc}")
            else:
                env["warnings"] = _environment_warnings(env)
                return env
            finally:
                with contextlib.suppress(Exception):
                    nvml.nvmlShutdown()
        else:
            reasons.append(why)
    base["reason"] = "; ".join(r for r in reasons if r) or "no source"
    base["warnings"] = [f"no GPU information: {base['reason']}"]
    return base


def save_environment(path: str | Path, env: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Write ``environment()`` (or ``env``) as JSON to ``path`` (a file, or a run folder for
    ``environment.json``); returns the snapshot."""
    from glm5lib.rundir import ENVIRONMENT

    env = environment(**kwargs) if env is None else env
    path = Path(path)
    if path.is_dir():
        path = path / ENVIRONMENT
    path.write_text(json.dumps(env, indent=2, default=str) + "\n")
    return env


def format_environment(env: dict[str, Any]) -> str:
    """A plain-text rendering: versions, one line per GPU, the P2P and topology matrices, warnings."""
    lines = [f"source: {env.get('source')}" + (" (stand-in: simulated GPUs)" if env.get("standin") else "")]
    if env.get("reason"):
        lines.append(f"reason: {env['reason']}")
    lines.append(f"host: {env.get('host')}   driver: {env.get('driver_version')}   CUDA: {env.get('cuda_version')}")
    pk = env.get("packages") or {}
    lines.append("packages: " + ", ".join(f"{k} {v}" for k, v in pk.items() if v) or "packages: none found")
    gpus = env.get("gpus") or []
    if gpus:
        table = pd.DataFrame(gpus)
        cols = [c for c in ("index", "name", "compute_capability", "power_limit_w", "pcie_gen_current",
                            "pcie_gen_max", "pcie_width_current", "pcie_width_max", "persistence_mode",
                            "mig_mode", "sm_clock_max_mhz", "memory_total_bytes") if c in table.columns]
        lines += ["", table[cols].to_string(index=False)]
    for key, title in (("p2p", "P2P (read/write)"), ("topology", "topology")):
        matrix = env.get(key) or []
        if matrix:
            labels = [f"GPU{i}" for i in range(len(matrix))]
            lines += ["", f"{title}:", pd.DataFrame(matrix, index=labels, columns=labels).to_string()]
    warnings = env.get("warnings") or []
    lines += ["", f"warnings ({len(warnings)}):"] + [f"  - {w}" for w in warnings]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------------
def _cmd_env(args: argparse.Namespace) -> int:
    env = environment(source="sim" if args.sim else "auto", base_url=args.sim)
    if args.out:
        save_environment(args.out, env)
    if args.json:
        print(json.dumps(env, indent=2, default=str))
    else:
        print(format_environment(env))
    return 0


def _cmd_telemetry(args: argparse.Namespace) -> int:
    if not args.duration > 0:
        raise ConfigError(f"--duration {args.duration} must be a positive number of seconds", field="duration")
    gpus = None
    if args.gpus:
        try:
            gpus = [int(g) for g in args.gpus.split(",")]
        except ValueError:
            raise ConfigError(f"--gpus {args.gpus!r} must be comma-separated indices such as 0,1", field="gpus") from None
    sampler = GpuSampler(interval=args.interval, gpus=gpus, source="sim" if args.sim else "auto",
                         base_url=args.sim, out=args.out)
    if not sampler.available:
        print(f"glm5 telemetry: no GPU telemetry: {sampler.reason}", file=sys.stderr)
        return 1
    print(f"sampling {sampler.source} GPUs every {args.interval} s for {args.duration} s"
          + (f" into {args.out}" if args.out else ""), file=sys.stderr)
    with sampler, contextlib.suppress(KeyboardInterrupt):
        time.sleep(args.duration)
    frame = sampler.frame()
    if frame.empty:
        print("no samples were taken", file=sys.stderr)
        return 1
    summary = frame.groupby("gpu").agg(
        mean_power_w=("power_w", "mean"), peak_power_w=("power_w", "max"),
        power_limit_w=("power_limit_w", "mean"), mean_gpu_util=("gpu_util", "mean"),
        mean_sm_clock_mhz=("sm_clock_mhz", "mean"),
        pcie_tx_mb_s=("pcie_tx_bytes_s", lambda s: s.mean() / 1e6),
        pcie_rx_mb_s=("pcie_rx_bytes_s", lambda s: s.mean() / 1e6),
    )
    stats = sampler.stats().set_index("gpu")[["samples", "achieved_hz", "cost_mean_ms", "cost_p99_ms", "errors"]]
    print(summary.join(stats).round(2).to_string())
    return 0


def register_cli(subparsers: Any) -> None:
    """Add ``glm5 env`` and ``glm5 telemetry``."""
    env = subparsers.add_parser("env", help="snapshot the host's GPUs, links and packages, with warnings")
    env.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    env.add_argument("--sim", metavar="URL", help="read the stand-in server's simulated environment at URL")
    env.add_argument("--out", metavar="PATH", help="also write the snapshot as JSON to PATH")
    env.set_defaults(func=_cmd_env)
    tel = subparsers.add_parser("telemetry", help="sample GPU power, utilisation, clocks and PCIe for a while")
    tel.add_argument("--duration", type=float, required=True, metavar="S", help="seconds to sample")
    tel.add_argument("--interval", type=float, default=0.1, metavar="S", help="seconds between samples (0.1)")
    tel.add_argument("--out", metavar="PATH", help="append samples to this CSV (e.g. gpu.csv)")
    tel.add_argument("--gpus", metavar="LIST", help="comma-separated GPU indices (default: all)")
    tel.add_argument("--sim", metavar="URL", help="sample the stand-in server's simulated GPUs at URL")
    tel.set_defaults(func=_cmd_telemetry)
