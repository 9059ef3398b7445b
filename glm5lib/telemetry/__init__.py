"""GPU telemetry and server metrics, on the same clock as the load.

The investigation this workbook follows turned on physical evidence: eight GPUs drawing about
83 W of their 600 W while the server claimed to be busy. This package collects that evidence:

- :mod:`~glm5lib.telemetry.gpu`: :class:`GpuSampler` samples every GPU in the background (NVML
  through ``nvidia-ml-py``, or the stand-in server's simulated GPUs at ``/sim/gpus``) into a tidy
  frame, appended to ``gpu.csv`` as it goes; :func:`load_gpu_csv` reads it back.
- :mod:`~glm5lib.telemetry.prometheus`: :class:`MetricsScraper` scrapes SGLang's Prometheus
  ``/metrics`` into a frame of ``time, metric, labels, value``; :func:`metric_series`.
- :mod:`~glm5lib.telemetry.environment`: :func:`environment` snapshots the host for the report
  (GPUs, driver, PCIe links, P2P matrix, topology, package versions) and warns about the signs
  the investigation met.

Joining these samples to the sweep's concurrency levels (power per level, energy per generated
token, PCIe bytes per token, running requests) is :mod:`glm5lib.levels`' (``per_level``,
``metrics_per_level``, ``assign_levels``), and only there.

Every ``time`` column is float Unix epoch seconds, the clock ``glm5lib.loadgen`` uses.
"""

from __future__ import annotations

from glm5lib.telemetry._common import SOURCES
from glm5lib.telemetry.environment import (
    P2P_LEGEND,
    TOPOLOGY_LEGEND,
    environment,
    format_environment,
    package_versions,
    save_environment,
)
from glm5lib.telemetry.gpu import GPU_COLUMNS, GpuSampler, load_gpu_csv
from glm5lib.telemetry.prometheus import (
    METRICS_COLUMNS,
    MetricsScraper,
    load_metrics_csv,
    metric_series,
)

__all__ = [
    "GPU_COLUMNS",
    "METRICS_COLUMNS",
    "P2P_LEGEND",
    "SOURCES",
    "TOPOLOGY_LEGEND",
    "GpuSampler",
    "MetricsScraper",
    "environment",
    "format_environment",
    "load_gpu_csv",
    "load_metrics_csv",
    "metric_series",
    "package_versions",
    "save_environment",
]
