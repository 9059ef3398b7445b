"""The performance model of a continuous-batching engine: fit on one phase, forecast a change.

One model (:class:`PerfModel`) answers every question about throughput a change will give: the
forecast of ``glm5 predict`` and notebooks 03-05, a finding's projection, the cap the KV pool allows
(:func:`recommend_running_cap`), the ceiling a configuration cannot pass (:meth:`PerfModel.ceiling`)
and the tuner's expectations. It reads one phase's evidence for the limits that decide throughput:
the batch (running cap, KV pool, token budget), the step (a curve fitted on the phase's levels, CUDA
graphs' captured sizes and the cost of an eager step), the serving front end (one core per process),
and, where one was taken, the engine's offline step benchmark. Modules:

* :mod:`.core`: :class:`PerfModel`, :class:`Forecast`, :class:`Bounds`, :class:`RequestShape`;
* :mod:`.levels`: a phase's sweep levels as the fit reads them;
* :mod:`.curve`: the step curve and its alternatives;
* :mod:`.graphs`: captured sizes, padding and the eager step's overhead with its source;
* :mod:`.frontend`: the serving roles' CPU lines and ceilings;
* :mod:`.profile`: the engine's offline step benchmark as evidence;
* :mod:`.prefill`: a prefill chunk's change priced per forward (an engine whose prefill runs in forwards of its own);
* :mod:`.ttft`: the wait for a first token beside the queue;
* :mod:`.queries`: :func:`predict`, :func:`predict_remedy`, :func:`recommend_running_cap`.
"""

from __future__ import annotations

from glm5lib.diagnose.model.core import (
    MAX_BAND,
    Bounds,
    Forecast,
    PerfModel,
    RequestShape,
    StepParams,
)
from glm5lib.diagnose.model.curve import Curve
from glm5lib.diagnose.model.frontend import FrontEnd, RoleFit
from glm5lib.diagnose.model.graphs import Eager
from glm5lib.diagnose.model.profile import StepProfile
from glm5lib.diagnose.model.queries import (
    Recommendation,
    forecast_text,
    predict,
    predict_remedy,
    recommend_running_cap,
)

__all__ = [
    "MAX_BAND",
    "Bounds",
    "Curve",
    "Eager",
    "Forecast",
    "FrontEnd",
    "PerfModel",
    "Recommendation",
    "RequestShape",
    "RoleFit",
    "StepParams",
    "StepProfile",
    "forecast_text",
    "predict",
    "predict_remedy",
    "recommend_running_cap",
]
