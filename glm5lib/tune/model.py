"""What the tuner expects a lever's value to give: the evidence of the measured candidates,
read through the performance model where one can be fitted.

:class:`Landscape` holds the measured points of one lever (value -> objective and every limited
latency) and forecasts a value not measured yet:

- between two measured values, linear interpolation of each quantity (the evidence);
- outside them, the performance model's forecast (:mod:`glm5lib.diagnose.model`, fitted on the
  nearest measured phase), scaled by what it was off by at that phase's own value (the model
  gives the shape, the evidence the level), when it answers; else a power law through the nearest
  point (latency and throughput of the running batch both grow about as the square root of the
  batch while the step is not yet compute-bound; a larger per-step token budget admits more
  prompts per step, so more requests run, and every step is longer: throughput and TPOT grow as
  about its fourth root, while TTFT can go either way, shorter waits against longer steps, so its
  prior is flat and the second point's secant gives the direction),
  made steeper or flatter by the secant of the two nearest points once there are two. The more
  cautious of the two is kept: the higher latency, the lower throughput.

A forecast says where it came from (``source``), so every candidate's reason can quote it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glm5lib.diagnose import model as perf

__all__ = ["PRIOR_EXPONENTS", "Landscape", "Point", "Prediction", "perfmodel_forecaster"]

log = logging.getLogger(__name__)

#: Prior exponents ``y ~ x**e`` by what the lever acts on, for "objective" and each latency.
PRIOR_EXPONENTS: dict[str, dict[str, float]] = {
    "running": {"objective": 0.5, "ttft": 0.5, "tpot": 0.5, "itl": 0.5, "e2e_latency": 0.5},
    "prefill": {"objective": 0.25, "ttft": 0.0, "tpot": 0.25, "itl": 0.25, "e2e_latency": 0.0},
    "memory": {"objective": 0.25, "ttft": 0.0, "tpot": 0.0, "itl": 0.0, "e2e_latency": 0.0},
}


@dataclass
class Point:
    """One measured candidate: the lever's value and what was measured."""

    value: float
    objective: float
    metrics: dict[str, float]
    phase: str = ""


@dataclass
class Prediction:
    value: float
    objective: float
    metrics: dict[str, float]
    source: str  # "measured", "interpolated", "model", "prior", "secant"

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "objective": self.objective, **self.metrics, "source": self.source}


#: forecaster(phase, changes, concurrency) -> {"objective": tok/s, "<metric>": ms, ...} or None
Forecaster = Callable[[str, Mapping[str, Any]], Mapping[str, float] | None]


def _quantity(metric: str) -> str:
    return metric.split("_", 1)[1].rsplit("_ms", 1)[0] if metric != "objective" else "objective"


@dataclass
class Landscape:
    """The measured points of one lever, and forecasts between and beyond them."""

    field: str
    acts_on: str
    metrics: Sequence[str]
    points: list[Point] = field(default_factory=list)
    forecaster: Forecaster | None = None

    def add(self, point: Point) -> None:
        self.points = sorted([p for p in self.points if p.value != point.value] + [point], key=lambda p: p.value)

    def _prior(self, near: Point, x: float, key: str) -> float:
        y = near.objective if key == "objective" else near.metrics.get(key, math.nan)
        e = PRIOR_EXPONENTS.get(self.acts_on, PRIOR_EXPONENTS["running"]).get(_quantity(key), 0.0)
        return y * (x / near.value) ** e if near.value > 0 and x > 0 else y

    def predict(self, x: float) -> Prediction:
        pts = self.points
        if not pts:
            raise ValueError("no measured point to forecast from")
        keys = ["objective", *self.metrics]
        for p in pts:
            if p.value == x:
                return Prediction(x, p.objective, dict(p.metrics), "measured")

        def val(p: Point, key: str) -> float:
            return p.objective if key == "objective" else p.metrics.get(key, math.nan)

        if pts[0].value < x < pts[-1].value:
            hi = next(i for i, p in enumerate(pts) if p.value > x)
            a, b = pts[hi - 1], pts[hi]
            w = (x - a.value) / (b.value - a.value)
            out = {k: val(a, k) + w * (val(b, k) - val(a, k)) for k in keys}
            return Prediction(x, out.pop("objective"), out, "interpolated")
        # beyond the measured range
        near, other = (pts[-1], pts[-2] if len(pts) > 1 else None) if x > pts[-1].value else \
            (pts[0], pts[1] if len(pts) > 1 else None)
        model = anchor = None
        if self.forecaster is not None:
            try:
                model = self.forecaster(near.phase, {self.field: x})
                anchor = self.forecaster(near.phase, {self.field: near.value}) if model else None
            except Exception as exc:  # the model is advice: a failed forecast falls back on the prior
                log.info("performance model gave no forecast for %s=%s: %s", self.field, x, exc)
                model = None
        out: dict[str, float] = {}
        source = "model" if model else ("secant" if other is not None else "prior")
        for k in keys:
            guesses = [self._prior(near, x, k)]
            if other is not None:
                slope = (val(near, k) - val(other, k)) / (near.value - other.value)
                guesses.append(val(near, k) + slope * (x - near.value))
            at_x = float(model.get(k, math.nan)) if model else math.nan
            at_near = float(anchor.get(k, math.nan)) if anchor else math.nan
            if math.isfinite(at_x) and math.isfinite(at_near) and at_near > 0:
                # the model gives the shape, the measured point the level: its forecast scaled by
                # what it was off by at the nearest measured value
                guesses = [val(near, k) * at_x / at_near] + ([guesses[1]] if len(guesses) > 1 else [])
            finite = [g for g in guesses if math.isfinite(g)]
            if not finite:
                out[k] = math.nan
            elif k == "objective":
                out[k] = max(0.0, min(finite))
            else:
                out[k] = max(finite)
        return Prediction(x, out.pop("objective"), out, source)


def perfmodel_forecaster(run_dir, *, engine: str | None, concurrency: int, input_len: int,
                         output_len: int, objective: str = "output_throughput") -> Forecaster | None:
    """A forecaster from the performance model (``glm5lib.diagnose.model.PerfModel``), fitted on
    a measured phase of ``run_dir``; None for an objective it does not forecast (goodput)."""
    if objective != "output_throughput":
        return None
    fitted: dict[str, Any] = {}

    def fit(phase: str) -> Any:
        if phase not in fitted:
            try:
                fitted[phase] = perf.PerfModel.fit_phase(Path(run_dir) / phase, engine=engine)
            except Exception as exc:  # one level only: the model cannot split a step's time
                log.debug("no performance model on phase %s: %s", phase, exc)
                fitted[phase] = None
        return fitted[phase]

    def forecast(phase: str, changes: Mapping[str, Any]) -> Mapping[str, float] | None:
        if not phase:
            return None
        model = fit(phase)
        if model is None:  # the nearest phase has one level: the first launch has two
            model = next((m for m in map(fit, sorted(p.name for p in Path(run_dir).glob("tune-*"))) if m), None)
        if model is None:
            return None
        (f,) = model.forecast(dict(changes), [concurrency], input_len=input_len, output_len=output_len)
        out = {"objective": float(f.predicted_tok_s)}
        for name, attr in (("median_ttft_ms", "ttft_ms"), ("median_tpot_ms", "tpot_ms"),
                           ("median_itl_ms", "tpot_ms")):
            value = getattr(f, attr, None)
            if value is not None:
                out[name] = float(value)
        if f.unseen_changes:
            return None  # the model cannot see this lever: it would forecast no change
        return out

    return forecast
