"""The step-time formula shared by the performance model and the stand-in (pure arithmetic).

One engine step of a continuous-batching engine takes

    fixed_ms + per_seq_ms * batch ** exponent + per_token_ms * prompt_tokens
             + per_kv_token_ms * kv_tokens  (- graph_saving_ms while a CUDA graph covers the batch)

:mod:`glm5lib.diagnose.model` fits these coefficients on a phase's evidence (its
``prompt_tokens`` are those prefilled per step at the workload's mix, so a fitted step is the
service time per output token); the stand-in's profiles are the same coefficients
(:meth:`glm5lib.sim.profile.Profile.step_params`), so the stand-in runs on the formula the
diagnosis forecasts with. Both fit its coefficients with :func:`nnls`, least squares that keeps
every coefficient at 0 or above (a step cannot get faster with a bigger batch).
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["StepParams", "nnls", "step_time_ms"]


@dataclasses.dataclass
class StepParams:
    """Coefficients of one step (milliseconds; ``per_token_ms`` per prompt token in the step,
    ``per_kv_token_ms`` per token held in the KV cache)."""

    fixed_ms: float
    per_seq_ms: float
    exponent: float = 1.0
    per_token_ms: float = 0.0
    per_kv_token_ms: float = 0.0
    graph_saving_ms: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


def step_time_ms(
    params: StepParams,
    batch: float,
    *,
    prompt_tokens: float = 0.0,
    kv_tokens: float = 0.0,
    graph: bool = False,
    factor: float = 1.0,
    floor_ms: float = 1e-3,
) -> float:
    """Wall time of one step (ms) of ``batch`` requests; ``factor`` scales everything but the
    graph saving (the stand-in's modelled flags); 0 for an empty batch."""
    if batch <= 0:
        return 0.0
    t = (
        params.fixed_ms
        + params.per_seq_ms * batch**params.exponent
        + params.per_token_ms * prompt_tokens
        + params.per_kv_token_ms * kv_tokens
    ) * factor
    if graph:
        t -= params.graph_saving_ms
    return max(t, floor_ms)


def nnls(x: Any, y: Any, w: Any = None) -> Any:
    """Coefficients ``c >= 0`` that fit ``x @ c`` to ``y`` by least squares (weights ``w`` per row).

    A small active-set method for the few columns of a step model: it solves the unconstrained
    problem on the columns still in play and, while a coefficient comes out negative, drops the
    most negative column and solves again; dropped columns get 0 and are not taken back (all
    dropped: all zeros).
    """
    import numpy as np  # here, not at the top: the stand-in and `glm5 --help` load this module without numpy

    if w is not None:
        x, y = x * w[:, None], y * w
    active = list(range(x.shape[1]))
    coef = np.zeros(x.shape[1])
    while active:
        sol, *_ = np.linalg.lstsq(x[:, active], y, rcond=None)
        if (sol >= 0).all():
            coef[:] = 0
            coef[active] = sol
            return coef
        active.pop(int(np.argmin(sol)))
    return coef
