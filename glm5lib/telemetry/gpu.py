"""GPU telemetry: :class:`GpuSampler` samples every GPU in the background into ``gpu.csv``.

Readings come from NVML (``nvidia-ml-py``, imported only when a sampler starts) or from the
stand-in server's simulated GPUs at ``/sim/gpus``. Each GPU has its own thread and schedule,
and NVML reads are batched through field-value queries, because one NVML query can take tens
of milliseconds on a virtualised host. With no GPU and no stand-in the sampler reports
``available=False`` with the reason; it never raises for that.

Every ``time`` column is float Unix epoch seconds, the clock ``glm5lib.loadgen`` uses.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from glm5lib import http
from glm5lib.errors import ConfigError, TelemetryError
from glm5lib.telemetry._common import (
    _CLOCK_SM,
    _NVML_SUCCESS,
    SOURCES,
    _CsvSink,
    _is_not_supported,
    _load_nvml,
    _nan,
    positive_interval,
)

__all__ = ["GPU_COLUMNS", "GpuSampler", "load_gpu_csv"]

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

_FI_TOTAL_ENERGY_CONSUMPTION = 83  # mJ since the driver was loaded
_FI_POWER_INSTANT = 186  # mW
_FI_POWER_CURRENT_LIMIT = 190  # mW
_FI_PCIE_COUNT_TX_BYTES = 197  # cumulative bytes
_FI_PCIE_COUNT_RX_BYTES = 198
_TEMPERATURE_GPU = 0
_PCIE_UTIL_TX = 0
_PCIE_UTIL_RX = 1
_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def _probe_sim(base_url: str, *, timeout: float = 2.0, api_key: str | None = None) -> tuple[dict | None, str]:
    """Read base_url/sim/gpus once; returns (payload, "") or (None, why not)."""
    response = http.get(base_url, "/sim/gpus", api_key=api_key, timeout=timeout)
    url, status = response.url, response.status
    if not response.reached:
        return None, f"{url} could not be reached ({response.error})"
    if status == 404:
        return None, f"{url} answered 404: the server at {base_url} is not glm5lib's stand-in"
    if status != 200:
        return None, f"{url} answered HTTP {status}"
    try:
        payload = response.json()
    except ValueError as exc:
        return None, f"{url} did not return JSON ({exc})"
    if not isinstance(payload, dict) or not isinstance(payload.get("gpus"), list):
        return None, f"{url} returned JSON without a 'gpus' list"
    return payload, ""


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
        except (self.nvml.NVMLError, AttributeError) as exc:  # AttributeError: an nvidia-ml-py without it
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
        except (self.nvml.NVMLError, AttributeError) as exc:  # AttributeError: a read this nvidia-ml-py lacks
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
            except self.nvml.NVMLError as exc:
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
        interval = positive_interval(interval, example=0.1)
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
        self._latest: dict[int, tuple] = {}
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
            for row in rows:
                self._latest[int(row[1])] = row
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
        except Exception as exc:  # this GPU's thread ends with the reason; one GPU must not stop the others
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
        wanted = set(indices)
        warned = False
        for _ in self._ticks():
            t0 = time.time()
            try:
                response = http.get(self.base_url, "/sim/gpus",  # type: ignore[arg-type]
                                    api_key=self._api_key, timeout=max(1.0, 5 * self.interval))
                if not response.ok:
                    raise TelemetryError(f"{response.url} {response.describe()}")
                payload = response.json()
            except (ValueError, TelemetryError) as exc:
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

    def latest(self) -> dict[int, dict[str, Any]]:
        """The last sample of each GPU as ``{gpu: {column: value}}``: cheap enough for a progress tick."""
        with self._rows_lock:
            rows = dict(self._latest)
        return {gpu: dict(zip(GPU_COLUMNS, row, strict=True)) for gpu, row in sorted(rows.items())}

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
