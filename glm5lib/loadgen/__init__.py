"""Streaming load generation and concurrency sweeps against SGLang or OpenAI-compatible servers.

``run_sweep(base_url, [1, 64, 256], run_dir=...)`` drives the server at each level in turn on one
shared aiohttp session and returns one row per level with SGLang bench_serving's field names
(plus the steady-state window, failures and client self-checks); ``sweep.csv`` and
``requests.jsonl`` are written to the run folder as it goes. ``glm5 sweep`` (:mod:`glm5lib.cli.loadgen`) is the command line.
"""

from __future__ import annotations

from glm5lib.loadgen.client import API_PATHS, RequestRecord
from glm5lib.loadgen.metrics import SUB_CYCLE, SWEEP_COLUMNS, level_stats, steady_window
from glm5lib.loadgen.settings import SweepSettings
from glm5lib.loadgen.sweep import (
    client_limited,
    load_requests,
    load_sweep,
    run_sweep,
    run_sweep_async,
)
from glm5lib.loadgen.workload import RequestSpec, load_prompts, make_workload

__all__ = [
    "API_PATHS",
    "SUB_CYCLE",
    "SWEEP_COLUMNS",
    "RequestRecord",
    "RequestSpec",
    "SweepSettings",
    "client_limited",
    "level_stats",
    "load_prompts",
    "load_requests",
    "load_sweep",
    "make_workload",
    "run_sweep",
    "run_sweep_async",
    "steady_window",
]
