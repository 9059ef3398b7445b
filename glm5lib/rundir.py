"""The run folder: one place on disk where every stage of the workbook reads and writes.

A workbook run lives in ``data/runs/<run-id>/``. Each measured server configuration is a
*phase* sub-folder (``baseline/``, ``fix/``...) holding the same files, so any notebook can be
rerun alone from what earlier ones left::

    data/runs/<run-id>/
        environment.json          host snapshot (telemetry.environment)
        environment-standin.log   the log of the stand-in notebook 01 reads simulated GPUs from
        watched-standin.log       the log of the stand-in notebook 08 watches when given no server
        diff.csv                  configuration diff against the reference (diagnose.diff_configs)
        hypothesis.json           the leading hypothesis and how to test it
        forecast.csv              the performance model's forecast of the hypothesis
        comparison.csv            before/after throughput per level
        report.md, summary.json   the story and the numbers tests check
        report.html               the same story as one self-contained page (figures embedded)
        notebooks.json            which notebooks ran, and how each ended (workbook.run_workbook)
        figures/<name>.png        the figures (figure_path)
        NN-*.ipynb                executed notebooks
        baseline/                 one phase (phase.measure_phase)
            config.json           the server configuration (secrets masked)
            command.json          the command a "command" backend ran
            server_info.json      the server's /get_server_info (secrets masked)
            server.log            the server's own log
            sweep.csv             one row per concurrency level (loadgen.run_sweep)
            requests.jsonl        one record per request, appended as each completes
            gpu.csv               GPU telemetry samples (telemetry.GpuSampler)
            metrics.csv           /metrics scrapes (telemetry.MetricsScraper)
            power.csv             power and energy per level (levels.per_level)
            patch.json            the source patch applied for this phase (patching)
            findings.csv          diagnosis findings (diagnose.diagnose)
            prediction.csv        forecast of the change beside its measurement (diagnose.prediction)
            step-profile.csv      the engine's offline step benchmark at chosen batch sizes (stepbench)
            step-profile.log      that benchmark's own output

The measurement scripts of ``scripts/gpu/`` add their own records beside the workbook's:
``engine.json`` (the engine, its versions, the GPU and the commands), ``plan.json`` (the steps
done and each launch's time), ``capped-config.json`` (the capped baseline's configuration),
``tune-result.json`` (the tuner's result, in its run folder) and, in the phase a forecast was
fitted on, ``forecast-<name>.json`` (``glm5 predict --json``'s forecast of one change).

Every file name lives here; code and notebooks use these constants, never the literals.
"""

from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path

from glm5lib.errors import ConfigError
from glm5lib.paths import runs_dir

__all__ = [
    "CAPPED_CONFIG",
    "COMMAND",
    "COMPARISON",
    "CONFIG",
    "DIFF",
    "ENGINE_RECORD",
    "ENVIRONMENT",
    "ENVIRONMENT_STANDIN_LOG",
    "FIGURES",
    "FINDINGS",
    "FORECAST_CSV",
    "GPU",
    "HYPOTHESIS",
    "METRICS",
    "NOTEBOOKS_STATUS",
    "PATCH_RECORD",
    "PHASE_NAME",
    "PLAN_RECORD",
    "POWER",
    "PREDICTION_CSV",
    "REPORT",
    "REPORT_HTML",
    "REQUESTS",
    "SERVER_INFO",
    "SERVER_LOG",
    "STEP_PROFILE",
    "STEP_PROFILE_LOG",
    "SUMMARY",
    "SWEEP",
    "TUNE_BEST",
    "TUNE_CSV",
    "TUNE_RESULT",
    "WATCH",
    "WATCHED_STANDIN_LOG",
    "figure_path",
    "forecast_record",
    "new_run_dir",
    "phase_dir",
]

# in a phase folder
CONFIG = "config.json"
COMMAND = "command.json"
SERVER_INFO = "server_info.json"
SERVER_LOG = "server.log"
SWEEP = "sweep.csv"
STEP_PROFILE = "step-profile.csv"
STEP_PROFILE_LOG = "step-profile.log"
WATCH = "watch.json"  # a watched phase: its levels are windows of a live server's own traffic
REQUESTS = "requests.jsonl"
GPU = "gpu.csv"
METRICS = "metrics.csv"
POWER = "power.csv"
PATCH_RECORD = "patch.json"
FINDINGS = "findings.csv"
PREDICTION_CSV = "prediction.csv"  # the baseline model's forecast of the change beside its measurement
# in the run folder
ENVIRONMENT = "environment.json"
ENVIRONMENT_STANDIN_LOG = "environment-standin.log"
WATCHED_STANDIN_LOG = "watched-standin.log"
DIFF = "diff.csv"
HYPOTHESIS = "hypothesis.json"
FORECAST_CSV = "forecast.csv"  # the hypothesis's forecast, stated before anything changes
COMPARISON = "comparison.csv"
REPORT = "report.md"
REPORT_HTML = "report.html"
SUMMARY = "summary.json"
NOTEBOOKS_STATUS = "notebooks.json"
FIGURES = "figures"
TUNE_CSV = "tune.csv"
TUNE_BEST = "tune-best.json"
# the records of the measurement scripts (scripts/gpu/); glm5lib reads none of them
ENGINE_RECORD = "engine.json"
PLAN_RECORD = "plan.json"
CAPPED_CONFIG = "capped-config.json"
TUNE_RESULT = "tune-result.json"

_PHASE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: what a phase's folder name may be (letters, digits, '_', '-', '.')
PHASE_NAME = _PHASE_RE


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


def figure_path(run_dir: str | Path, name: str) -> Path:
    """Where the run's figure ``name`` lies: ``<run_dir>/figures/<name>.png``."""
    return Path(run_dir) / FIGURES / f"{name}.png"


def forecast_record(name: str) -> str:
    """The file name of ``glm5 predict --json``'s forecast of the change ``name``, in the phase
    it was fitted on: ``forecast-<name>.json``."""
    return f"forecast-{name}.json"


def phase_dir(run_dir: str | Path, phase: str) -> Path:
    """Return (creating it) the folder of one phase of a run, e.g. ``phase_dir(run, "baseline")``."""
    if not _PHASE_RE.match(phase):
        raise ConfigError(
            f"phase name {phase!r} is not valid: use letters, digits, '_', '-' or '.', like 'baseline' or 'fix'",
            field="phase",
        )
    path = Path(run_dir) / phase
    path.mkdir(parents=True, exist_ok=True)
    return path
