"""The stand-in server (``python -m glm5lib.sim``) as one engine adapter.

The stand-in takes SGLang's configuration and flags (of the release it emulates), writes
SGLang's log lines and ``/metrics`` names, and models step times instead of running a model, so
it is launched, read and tuned as SGLang is; it also accepts its own ``--sim-*`` options.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from glm5lib.engines.base import EngineAdapter, LaunchRequest, Program
from glm5lib.engines.sglang import CAPABILITIES as SGLANG_CAPABILITIES
from glm5lib.engines.sglang import METRICS as SGLANG_METRICS
from glm5lib.engines.sglang import launch_from_server_config, levers
from glm5lib.engines.sglang.automatic import sglang_automatic
from glm5lib.engines.sglang.config import ServerConfig, release_of
from glm5lib.engines.sglang.limits import change_hook, defaults, limits_hook

__all__ = ["ADAPTER", "CAPABILITIES", "PROGRAM"]

#: the stand-in's server: SGLang's flags of the release it is told to emulate, no model
PROGRAM = Program("glm5lib.sim", requires_model=False, emulates_release=True)

CAPABILITIES = dataclasses.replace(SGLANG_CAPABILITIES, accepts_foreign_flags=True, is_standin=True)



def _launch(request: LaunchRequest) -> Any:
    profile = ["--sim-profile", request.sim_profile] if request.sim_profile else []
    return launch_from_server_config("sim", request, profile)


ADAPTER = EngineAdapter(
    name="sim",
    title="the stand-in",
    description="glm5lib's stand-in server: SGLang's flags, logs and /metrics, timings from a model, not from GPUs",
    capabilities=CAPABILITIES,
    metrics=SGLANG_METRICS,
    log_engine="sglang",
    config_type=ServerConfig,
    config_loader=ServerConfig.load,
    launcher=_launch,
    program=PROGRAM,
    lever_maker=levers,
    limits_hook=limits_hook,
    automatic_resolver=sglang_automatic,
    defaults_reader=defaults,
    release_reader=release_of,
    change_hook=change_hook,
)
