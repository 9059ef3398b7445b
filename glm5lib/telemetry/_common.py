"""What the telemetry collectors share: NVML start-up, the source names, the CSV appender."""

from __future__ import annotations

import csv
import math
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from glm5lib.errors import ConfigError, TelemetryError

#: Where GPU readings come from: ``auto`` picks the stand-in when the URL is one, else NVML.
SOURCES = ("auto", "nvml", "sim")

# NVML constants (ABI-stable values from nvml.h), spelled out so that an older nvidia-ml-py
# lacking a name does not stop the sampler.
_NVML_SUCCESS = 0
_NVML_ERROR_NOT_SUPPORTED = 3
_CLOCK_SM = 1
_CLOCK_MEM = 2


def positive_interval(interval: Any, example: float) -> float:
    """``interval`` as a finite positive number of seconds, or a ConfigError naming ``example``."""
    try:
        seconds = float(interval)
    except (TypeError, ValueError):
        raise ConfigError(f"interval={interval!r} is not a number of seconds", field="interval") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ConfigError(f"interval={seconds!r} must be a positive number of seconds, e.g. {example}", field="interval")
    return seconds


def _nan() -> float:
    return float("nan")


def _is_not_supported(exc: BaseException) -> bool:
    return getattr(exc, "value", None) == _NVML_ERROR_NOT_SUPPORTED


def _load_nvml(nvml: Any = None) -> tuple[Any, str | None]:
    """Import and initialise NVML; returns (module, None) or (None, reason)."""
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py: optional, imported only when asked for
        except ImportError:
            return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    # every error of nvidia-ml-py derives from its NVMLError (a missing driver library included)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return None, f"no NVIDIA driver or GPU here (NVML init failed: {exc})"
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as exc:
        nvml.nvmlShutdown()
        return None, f"NVML could not count GPUs: {exc}"
    if count == 0:
        nvml.nvmlShutdown()
        return None, "NVML reports no GPU"
    return nvml, None


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
