"""glm5lib: diagnose why an SGLang server delivers less throughput than its GPUs should.

The library behind the workbook's notebooks: launching or attaching to a server
(:mod:`glm5lib.server`), generating load (:mod:`glm5lib.loadgen`), sampling GPU telemetry
(:mod:`glm5lib.telemetry`), parsing server logs (:mod:`glm5lib.logs`), diffing configurations
and diagnosing (:mod:`glm5lib.diagnose`), and a stand-in server for machines without GPUs
(:mod:`glm5lib.sim`).
"""

from __future__ import annotations

from glm5lib._version import __version__
from glm5lib.errors import (
    ConfigError,
    DiagnosisError,
    Glm5Error,
    LoadGenError,
    NotebookFailedError,
    PatchError,
    ServerCrashedError,
    ServerError,
    ServerLaunchError,
    SweepAbortedError,
    TelemetryError,
    TelemetryUnavailable,
    WorkbookError,
)

__all__ = [
    "ConfigError",
    "DiagnosisError",
    "Glm5Error",
    "LoadGenError",
    "NotebookFailedError",
    "PatchError",
    "ServerCrashedError",
    "ServerError",
    "ServerLaunchError",
    "SweepAbortedError",
    "TelemetryError",
    "TelemetryUnavailable",
    "WorkbookError",
    "__version__",
]
