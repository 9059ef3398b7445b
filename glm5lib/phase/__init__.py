"""One phase: a server configuration measured under load, kept in its own folder of the run.

A :class:`PhasePlan` says what to measure (:class:`EnginePlan`: the server to launch or attach to;
:class:`LoadPlan`: the sweep's levels and :class:`~glm5lib.loadgen.SweepSettings`;
:class:`TelemetryOptions`: the GPU sampler and the ``/metrics`` scraper), checked once when it is
made; :func:`run_phase` measures it (server, sampler, scraper, sweep, stop, per-level power) and
returns a :class:`PhaseResult`. :func:`measure_phase` is the same call with the plan's fields as
keywords, as the notebooks and the tuner use it::

    plan = PhasePlan(engine=EnginePlan("sim", ServerConfig.load("glm5-baseline")),
                     load=LoadPlan.of([1, 64, 256], output_len=128, duration=30))
    result = run_phase(plan, run_dir, "baseline")

The lower-level steps are public too: :func:`start_server` (:func:`launch_engine` for a plan),
:func:`stop_server`, :func:`phase_log`, :func:`load_command`, :func:`save_server_info`.

Modules: :mod:`~glm5lib.phase.plan` (the plan and its checks), :mod:`~glm5lib.phase.serving` (the
phase's server), :mod:`~glm5lib.phase.measure` (the measurement).
"""

from __future__ import annotations

from glm5lib import engines
from glm5lib.phase.measure import PhaseResult, measure_phase, run_phase
from glm5lib.phase.plan import (
    DEFAULT_CONCURRENCIES,
    EnginePlan,
    LoadPlan,
    PhasePlan,
    TelemetryOptions,
)
from glm5lib.phase.serving import (
    launch_engine,
    load_command,
    phase_log,
    save_server_info,
    start_server,
    stop_server,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_CONCURRENCIES",
    "EnginePlan",
    "LoadPlan",
    "PhasePlan",
    "PhaseResult",
    "TelemetryOptions",
    "launch_engine",
    "load_command",
    "measure_phase",
    "phase_log",
    "run_phase",
    "save_server_info",
    "start_server",
    "stop_server",
]

#: Values of a notebook's ``BACKEND`` parameter (the registered engines), besides an http(s)
#: URL to attach to.
BACKENDS = tuple(engines.names())
