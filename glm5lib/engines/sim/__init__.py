"""The stand-in server (``python -m glm5lib.sim``) as one engine adapter.

The stand-in takes SGLang's configuration and flags (of the release it emulates), writes
SGLang's log lines and ``/metrics`` names, and models step times instead of running a model, so
it is launched, read and tuned as SGLang is; it also accepts its own ``--sim-*`` options.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from glm5lib.engines.base import LaunchRequest, Program, StepBenchmark
from glm5lib.engines.sglang import ADAPTER as SGLANG_ADAPTER
from glm5lib.engines.sglang import CAPABILITIES as SGLANG_CAPABILITIES
from glm5lib.engines.sglang import launch_from_server_config, server_info_of
from glm5lib.engines.sglang.stepbench import bench_command, parse_bench_output
from glm5lib.engines.sim.standin import StandinProcess, run_standin

__all__ = ["ADAPTER", "BENCHMARK", "CAPABILITIES", "PROGRAM", "StandinProcess", "run_standin"]

#: the stand-in's server: SGLang's flags of the release it is told to emulate, no model
PROGRAM = Program("glm5lib.sim", requires_model=False, emulates_release=True)

CAPABILITIES = dataclasses.replace(SGLANG_CAPABILITIES, accepts_foreign_flags=True, is_standin=True)

#: the stand-in's bench_one_batch: SGLang's flags and output format, times from its profile
BENCHMARK = StepBenchmark(
    title="the stand-in's bench_one_batch (not SGLang)",
    command=functools.partial(bench_command, module="glm5lib.sim.bench"),
    parse=parse_bench_output,
)


def _launch(request: LaunchRequest) -> Any:
    profile = ["--sim-profile", request.sim_profile] if request.sim_profile else []
    return launch_from_server_config("sim", request, profile)


#: SGLang's adapter but for what the stand-in does itself: its launch, its program, its step
#: benchmark and how it tells itself apart; it keeps no catalogue of releases of its own
ADAPTER = dataclasses.replace(
    SGLANG_ADAPTER,
    name="sim",
    title="the stand-in",
    description="glm5lib's stand-in server: SGLang's flags, logs and /metrics, timings from a model, not from GPUs",
    capabilities=CAPABILITIES,
    launcher=_launch,
    program=PROGRAM,
    step_benchmark=BENCHMARK,
    identify=server_info_of(standin=True),
)
