"""The engine step against the batch, fitted on a phase's levels of one kind (graph or eager).

``step(B) = fixed + per_seq x pad(B) ** exponent + per_token x B x I / O`` (ms): the time one step
takes with ``B`` requests, the prompts prefilled between (or inside) decode steps folded in at the
workload's own mix (``I``/``O`` the mean prompt and output tokens), ``pad(B)`` the captured graph
size the batch runs as. It is :func:`glm5lib.stepmodel.step_time_ms`, the formula the stand-in runs.

The fit is least squares with non-negative coefficients, weighted for relative error. The
exponent is fitted on a grid when the levels ran at least three batch sizes spread 3x or more,
held near the prior 0.8 by a Gaussian prior weighed against the levels' scatter (a step grows more
slowly than the batch on real engines); otherwise it takes the prior and the band covers exponents
0.6-1.0 and the steepest and flattest slopes a level's run-to-run spread allows. One batch size
alone cannot split the fixed part from the per-request part: the fit takes half each and the band
spans either. A hold-out check refits without the largest batch and forecasts it: how far the
phase's own curve carries beyond what a fit saw.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np

from glm5lib.stepmodel import StepParams, nnls, step_time_ms

__all__ = ["Curve", "fit_curve"]

PRIOR_EXPONENT = 0.8
# A Gaussian prior on the exponent, weighed against how far the levels scatter about the fit: the
# exponent minimises the squared log residuals plus (scatter * (exponent - prior) / SD)^2, the
# scatter read off the best fit's own residuals (per degree of freedom, at most MAX_SCATTER), so a
# curve the form follows exactly keeps its exponent and a noisy one is held near the prior. Levels
# of 15 s on a shared host scatter by about 10% (12 levels of one batch in three launches of real
# vLLM on CPU: 2,049-2,861 tok/s), enough to swing the best exponent of four levels alone from one
# end of the grid to the other (benchmarks/bench_predict_noise.py replays it).
PRIOR_EXPONENT_SD = 0.3
MAX_SCATTER = 0.2
EXPONENT_GRID = tuple(round(x, 2) for x in np.arange(0.5, 1.001, 0.02))
PRIOR_EXPONENT_RANGE = (0.6, 1.0)
# How much the prompt/output mix must vary across levels before a per-prompt-token term is fitted.
MIX_VARIATION = 0.25
# The narrowest spread of one level against the others of its launch (the slopes between two batch
# sizes a fit may take): two levels of one batch in one launch agree within a few percent (the H200
# baseline's three levels at 64 running: within 3%); a launch's drift against another moves them all
# and is the forecast's own noise, not the slope's.
LEVEL_SPREAD = 0.05
# The exponents a fitted curve's band spans: those whose fit misses the levels by at most 1.25 times
# the best one's error plus this (a level's figures are not more exact than half a percent).
EXPONENT_TOLERANCE = 0.005
# Batches within this share of each other are one size to the fit (a capped level whose log reads a
# median of 3.5 running under a cap of 4 ran the cap).
SAME_SIZE = 0.25


@dataclasses.dataclass
class Curve:
    """A fitted step curve and what its evidence allows."""

    params: StepParams
    exponent_fitted: bool
    exponent_range: tuple[float, float]
    fit_error: float  # mean relative throughput error on its own levels
    batch_seen: tuple[float, float]
    tokens_seen: tuple[float, float]
    alternatives: list[StepParams] = dataclasses.field(default_factory=list)
    holdout_error: float | None = None
    holdout_per_doubling: float = 0.0
    levels: int = 0
    sizes: list[float] = dataclasses.field(default_factory=list)  # the distinct batches it saw

    def step(self, batch: float, input_len: float, output_len: float, *, padded: float | None = None,
             params: StepParams | None = None) -> float:
        """One step's wall time (ms) at ``batch`` (run as ``padded`` rows where a graph pads it)."""
        p = params or self.params
        o = max(float(output_len), 1.0)
        rows = padded if padded is not None else batch
        # the graph's padded rows pay the per-request part; the prompts are the batch's own
        return max(step_time_ms(p, rows, prompt_tokens=batch * float(input_len) / o), 1e-3)

    def spread(self, batch: float, input_len: float, output_len: float, padded: float | None = None) -> tuple[float, float]:
        """Relative (down, up) spread of the throughput at ``batch``: the alternatives the evidence
        allows (exponent range, slopes), and beyond the batches it saw, what the hold-out check
        missed by per doubling (at least 5%)."""
        # each alternative relative to the fit, against the same ratio at the nearest batch the fit
        # saw: a level's own spread is the forecast's noise, counted once, not here again
        near = min(self.sizes or [batch], key=lambda x: abs(math.log(max(batch, 1e-9) / x)))
        mid = self.step(batch, input_len, output_len, padded=padded)
        mid_near = self.step(near, input_len, output_len)
        ratios = [(self.step(batch, input_len, output_len, padded=padded, params=a) / mid)
                  / (self.step(near, input_len, output_len, params=a) / mid_near) for a in self.alternatives]
        # throughput is batch / step: a longer step is a lower throughput
        down = max([r - 1.0 for r in ratios] + [0.0])
        up = max([1.0 / r - 1.0 for r in ratios] + [0.0])
        beyond = self.beyond(batch)
        if beyond > 1.1 and (self.exponent_fitted or self.holdout_error is not None):
            # a fitted exponent's alternatives are narrow: beyond its batches the hold-out check's
            # miss per doubling (at least 5%) widens them; a prior's range already spans the shape
            per = max(0.05, self.holdout_per_doubling)
            extra = per * math.log2(beyond)
            down, up = down + extra, up + extra
        return down, up

    def beyond(self, batch: float) -> float:
        lo, hi = self.batch_seen
        return max(batch / hi if batch > hi else 1.0, lo / batch if batch < lo else 1.0)

    def describe(self) -> str:
        p = self.params
        terms = [f"{p.fixed_ms:.2f} ms", f"{p.per_seq_ms:.3f} ms x B^{p.exponent:.2f}"]
        if p.per_token_ms:
            terms.append(f"{p.per_token_ms * 1000:.2f} us per prompt token")
        lo, hi = self.batch_seen
        if self.exponent_fitted:
            how = "fitted"
        elif round(lo) == round(hi):
            how = "prior; one batch size, so half fixed and half per request, the band spanning either"
        else:
            how = (f"prior (fewer than 3 batch sizes; band covers {self.exponent_range[0]}-{self.exponent_range[1]} "
                   f"and the slopes between {round(lo, 1):g} and {round(hi, 1):g} that a level's spread allows)")
        check = ""
        if self.holdout_error is not None:
            check = (f"; refitted without its largest batch it forecast that batch {self.holdout_error:+.0%} off, "
                     f"so the band widens {max(self.holdout_per_doubling, 0.05):.0%} per doubling beyond {round(hi, 1):g}")
        return (f"step = {' + '.join(terms)} (exponent {how}); fitted on {self.levels} levels, running "
                f"{round(lo, 1):g}-{round(hi, 1):g}; throughput error {self.fit_error:.0%}" + check)


def distinct_sizes(batch: Sequence[float], within: float = SAME_SIZE) -> list[float]:
    """The batch sizes among ``batch`` that differ by more than ``within`` (relative) from the next
    smaller one: 63 and 64 running are one size, as far as a curve can tell."""
    out: list[float] = []
    for x in sorted(float(v) for v in batch):
        if not out or x > out[-1] * (1.0 + within):
            out.append(x)
    return out


def _solve(b, rows, tokens, y, w, p, use_tokens):
    cols = [np.ones_like(b), rows**p] + ([tokens] if use_tokens else [])
    x = np.column_stack(cols)
    coef = nnls(x, y, w)
    return coef, np.maximum(x @ coef, 1e-9)


def fit_curve(batch: Sequence[float], step_ms: Sequence[float], input_len: Sequence[float], output_len: Sequence[float],
              *, pad: Callable[[float], float] = float, holdout: bool = True) -> Curve:
    """Fit :class:`Curve` to steps of ``step_ms`` at ``batch`` (the phase's levels of one kind)."""
    b = np.asarray(batch, float)
    y = np.asarray(step_ms, float)
    i = np.asarray(input_len, float)
    o = np.asarray(output_len, float)
    rows = np.array([pad(x) for x in b], float)
    w = 1.0 / y  # relative errors: a large batch's long step does not outweigh the others
    tokens = b * i / o
    # prompt tokens per step separate from the batch only if the prompt/output mix varied by more
    # than random prompt lengths make it vary from level to level (a few percent)
    use_tokens = bool(np.ptp(i / o) > MIX_VARIATION * float(np.mean(i / o)))
    sizes = distinct_sizes(b)
    fitted = len(sizes) >= 3 and max(sizes) >= 3 * min(sizes)
    grid = EXPONENT_GRID if fitted else (PRIOR_EXPONENT,)
    tried = []
    for p in grid:
        coef, fit = _solve(b, rows, tokens, y, w, p, use_tokens)
        tried.append((float(np.sum(np.log(fit / y) ** 2)), float(np.mean(np.abs(fit - y) / y)), float(p), coef))
    dof = max(len(b) - len(tried[0][3]) - 1, 1)
    scatter = min(math.sqrt(min(t[0] for t in tried) / dof), MAX_SCATTER)
    best = min(tried, key=lambda t: t[0] + (scatter * (t[2] - PRIOR_EXPONENT) / PRIOR_EXPONENT_SD) ** 2)
    best_err, p, coef = best[1], best[2], best[3]
    if len(sizes) == 1:
        # one batch size: nothing splits the fixed part from the per-request part; take half each
        ym = float(np.median(y))
        coef = np.array([ym / 2.0, ym / 2.0 / float(np.median(rows)) ** p] + ([0.0] if use_tokens else []))
    params = StepParams(fixed_ms=float(coef[0]), per_seq_ms=float(coef[1]), exponent=p,
                        per_token_ms=float(coef[2]) if use_tokens else 0.0)
    if fitted:
        span = [q for q, e in ((t[2], t[1]) for t in tried) if e <= best_err * 1.25 + EXPONENT_TOLERANCE]
        erange = (min([*span, p]), max([*span, p]))
    else:
        erange = PRIOR_EXPONENT_RANGE
    curve = Curve(params=params, exponent_fitted=fitted, exponent_range=erange, fit_error=0.0,
                  batch_seen=(float(b.min()), float(b.max())),
                  tokens_seen=(float((b + tokens).min()), float((b + tokens).max())), levels=len(b),
                  sizes=sizes)
    pred = np.array([curve.step(x, ii, oo, padded=r) for x, ii, oo, r in zip(b, i, o, rows, strict=True)])
    curve.fit_error = float(np.mean(np.abs(y / pred - 1.0)))
    curve.alternatives = _alternatives(curve, b, rows, y)
    if holdout:
        _holdout(curve, b, y, i, o, pad)
    return curve


def _alternatives(curve: Curve, b: np.ndarray, rows: np.ndarray, y: np.ndarray) -> list[StepParams]:
    """The step parameters refitted at the ends of the exponent range the evidence allows (and,
    with fewer than three batch sizes, the steepest and flattest slopes a level's spread allows)."""
    out = []
    if len(distinct_sizes(b)) == 1:
        ym, e = float(np.median(y)), curve.params.exponent
        for fixed, per in ((ym, 0.0), (0.0, ym / float(np.median(rows)) ** e)):
            out.append(dataclasses.replace(curve.params, fixed_ms=fixed, per_seq_ms=per, per_token_ms=0.0))
        return out
    tilts = [np.ones_like(y)]
    if not curve.exponent_fitted:
        lb = np.log(b)
        pos = (lb - lb.min()) / max(float(np.ptp(lb)), 1e-9) * 2.0 - 1.0  # -1 smallest, +1 largest
        spread = max(curve.fit_error, LEVEL_SPREAD)
        tilts += [1.0 + spread * pos, 1.0 - spread * pos]
    for e in curve.exponent_range:
        for k, tilt in enumerate(tilts):
            if k == 0 and abs(e - curve.params.exponent) < 1e-9:
                continue
            yt = y * tilt
            x = np.column_stack([np.ones_like(b), rows**e])
            coef = nnls(x, yt, 1.0 / yt)
            out.append(dataclasses.replace(curve.params, fixed_ms=float(coef[0]), per_seq_ms=float(coef[1]),
                                           exponent=e, per_token_ms=0.0))
    return out


def _holdout(curve: Curve, b, y, i, o, pad) -> None:
    """Refit without the levels at the largest batch and forecast them: how far this phase's curve
    carries beyond what a fit saw. With levels 1-16 of real vLLM on two CPU cores, the curve beyond 8
    bent away from the fit on 1-8 by 14-36%; the band beyond the phase's own batches widens by that
    error per doubling."""
    sizes = distinct_sizes(b)
    if len(sizes) < 3:
        return
    keep = b < sizes[-1]
    if len(distinct_sizes(b[keep])) < 2:
        return
    try:
        sub = fit_curve(b[keep], y[keep], i[keep], o[keep], pad=pad, holdout=False)
    except (ValueError, np.linalg.LinAlgError):
        return
    held = ~keep
    logs = [math.log(y[k] / sub.step(b[k], i[k], o[k], padded=pad(b[k]))) for k in np.flatnonzero(held)]
    err = float(np.mean(logs))  # positive: the step was longer than the fit said (throughput lower)
    span = math.log2(sizes[-1] / max(sizes[-2], 1e-9))
    curve.holdout_error = math.exp(-err) - 1.0  # on throughput, as the forecast reads it
    curve.holdout_per_doubling = abs(err) / max(span, 0.5)

