"""The run folder: one place on disk where every stage of the workbook reads and writes.

A workbook run lives in ``data/runs/<run-id>/``. Each measured server configuration is a
*phase* sub-folder (``baseline/``, ``fix/``...) holding the same files, so any notebook can be
rerun alone from what earlier ones left::

    data/runs/<run-id>/
        environment.json          host snapshot (telemetry.environment)
        report.md, summary.json   the story and the numbers tests check
        figures/*.png
        NN-*.ipynb                executed notebooks
        baseline/                 one phase
            config.json           the server configuration (secrets masked)
            server.log            the server's own log
            sweep.csv             one row per concurrency level (loadgen.run_sweep)
            requests.jsonl        one record per request, appended as each completes
            gpu.csv               GPU telemetry samples (telemetry.GpuSampler)
            metrics.csv           /metrics scrapes (telemetry.MetricsScraper)
            findings.csv          diagnosis findings (diagnose.diagnose)
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path

from glm5lib.paths import runs_dir

__all__ = [
    "CONFIG",
    "ENVIRONMENT",
    "FIGURES",
    "FINDINGS",
    "GPU",
    "METRICS",
    "REPORT",
    "REQUESTS",
    "SERVER_LOG",
    "SUMMARY",
    "SWEEP",
    "new_run_dir",
    "phase_dir",
]

CONFIG = "config.json"
SERVER_LOG = "server.log"
SWEEP = "sweep.csv"
REQUESTS = "requests.jsonl"
GPU = "gpu.csv"
METRICS = "metrics.csv"
FINDINGS = "findings.csv"
ENVIRONMENT = "environment.json"
REPORT = "report.md"
SUMMARY = "summary.json"
FIGURES = "figures"

_PHASE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def new_run_dir(root: str | Path | None = None, run_id: str | None = None) -> Path:
    """Create and return a fresh run folder ``<root>/<run-id>`` (run-id defaults to a timestamp)."""
    parent = Path(root) if root is not None else runs_dir()
    if run_id is None:
        run_id = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        candidate = parent / run_id
        n = 1
        while candidate.exists():
            n += 1
            candidate = parent / f"{run_id}-{n}"
    else:
        candidate = parent / run_id
    candidate.mkdir(parents=True, exist_ok=True)
    return candidate


def phase_dir(run_dir: str | Path, phase: str) -> Path:
    """Return (creating it) the folder of one phase of a run, e.g. ``phase_dir(run, "baseline")``."""
    if not _PHASE_RE.match(phase):
        from glm5lib.errors import ConfigError

        raise ConfigError(
            f"phase name {phase!r} is not valid: use letters, digits, '_', '-' or '.', like 'baseline' or 'fix'",
            field="phase",
        )
    path = Path(run_dir) / phase
    path.mkdir(parents=True, exist_ok=True)
    return path
