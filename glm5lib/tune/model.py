"""What the tuner expects a lever's value to give: the evidence of the measured candidates,
read through the one performance model.

:class:`Landscape` holds the measured points of one lever (value -> objective and every limited
latency) and forecasts a value not measured yet:

- between two measured values, linear interpolation of each quantity (the evidence);
- outside them, the performance model's forecast (:mod:`glm5lib.diagnose.model`, fitted on the
  nearest measured phase), scaled by what it was off by at that phase's own value (the model gives
  the shape, the evidence the level), with its band and whether it is *given* (within +/-30%);
  where it is not, the prediction says so (source ``"not forecast"``) and names the measurement that
  would settle it, and the tuner measures rather than trusts it. There is no other prior: with no
  model (one level, or an objective the model does not forecast) a value outside the measured ones
  has no forecast at all (source ``"none"``).

A forecast says where it came from (``source``), so every candidate's reason can quote it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glm5lib import rundir
from glm5lib.diagnose import model as perf
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.tune.phases import EvidenceCache

__all__ = ["Expected", "Landscape", "Point", "perfmodel_forecaster"]

log = logging.getLogger(__name__)


@dataclass
class Point:
    """One measured candidate: the lever's value and what was measured."""

    value: float
    objective: float
    metrics: dict[str, float]
    phase: str = ""
    # its batch held what the load and the cap allow (a swinging batch is no anchor for the model)
    held: bool = True


@dataclass
class Expected:
    value: float
    objective: float
    metrics: dict[str, float]
    source: str  # "measured", "interpolated", "model", "not forecast", "none"
    given: bool = True
    objective_high: float = math.nan  # the band's best objective
    metrics_low: dict[str, float] = field(default_factory=dict)  # the band's shortest latencies
    needs: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "objective": self.objective, **self.metrics, "source": self.source,
                "given": self.given, "needs": self.needs}


#: forecaster(phase, changes, among) -> {"objective", "objective_high", "<metric>", "<metric>_low",
#: "given", "needs"} or None: ``changes`` made to ``phase``'s configuration, the model fitted on
#: ``among`` (the phases of the landscape's points: what was measured so far, and nothing else in
#: the folder, so a rerun proposes what the first run did)
Forecaster = Callable[[str, Mapping[str, Any], Sequence[str]], Mapping[str, Any] | None]


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

    def predict(self, x: float) -> Expected:
        pts = self.points
        if not pts:
            raise ValueError("no measured point to forecast from")
        keys = ["objective", *self.metrics]
        for p in pts:
            if p.value == x:
                return Expected(x, p.objective, dict(p.metrics), "measured")

        def val(p: Point, key: str) -> float:
            return p.objective if key == "objective" else p.metrics.get(key, math.nan)

        if pts[0].value < x < pts[-1].value:
            hi = next(i for i, p in enumerate(pts) if p.value > x)
            a, b = pts[hi - 1], pts[hi]
            w = (x - a.value) / (b.value - a.value)
            out = {k: val(a, k) + w * (val(b, k) - val(a, k)) for k in keys}
            return Expected(x, out.pop("objective"), out, "interpolated")
        # the model's level is anchored on the nearest measured point whose batch held: a level whose
        # batch swung is no configuration's steady figure (its latencies read the swings)
        steady = [p for p in pts if p.held]
        near = min(steady or pts, key=lambda p: abs(math.log(max(p.value, 1e-9) / max(x, 1e-9))))
        model = anchor = None
        if self.forecaster is not None:
            among = [p.phase for p in pts if p.phase]
            try:
                model = self.forecaster(near.phase, {self.field: x}, among)
                anchor = self.forecaster(near.phase, {self.field: near.value}, among) if model else None
            except (DiagnosisError, ConfigError, ValueError) as exc:
                log.info("performance model gave no forecast for %s=%s: %s", self.field, x, exc)
                model = None
        if not model or not anchor:
            return Expected(x, math.nan, {k: math.nan for k in self.metrics}, "none", given=False,
                              needs=f"a launch with {self.field}={x:g}: no performance model of the evidence")
        out: dict[str, float] = {}
        best: dict[str, float] = {}
        for k in keys:
            at_x, at_near = float(model.get(k, math.nan)), float(anchor.get(k, math.nan))
            # the model gives the shape, the measured point the level (a held one; with none held,
            # the model's own level)
            scale = (val(near, k) / at_near if math.isfinite(at_near) and at_near > 0 else math.nan) if steady else 1.0
            out[k] = at_x * scale
            edge = model.get("objective_high" if k == "objective" else f"{k}_low", math.nan)
            best[k] = float(edge) * scale
        given = bool(model.get("given")) and all(math.isfinite(out[k]) for k in keys)
        return Expected(x, max(out.pop("objective"), 0.0), out, "model" if given else "not forecast", given=given,
                          objective_high=best.pop("objective"), metrics_low=best,
                          needs=str(model.get("needs") or "") if not given else "")


# the model's latencies by the tuner's metric names
_LATENCY = {"median_ttft_ms": ("ttft_ms", "ttft_low_ms"), "median_tpot_ms": ("tpot_ms", "tpot_low_ms"),
            "median_itl_ms": ("tpot_ms", "tpot_low_ms")}


def perfmodel_forecaster(run_dir, *, engine: str | None, concurrency: int, input_len: int,
                         output_len: int, objective: str = "output_throughput",
                         metrics: Sequence[str] = (), phases: EvidenceCache | None = None) -> Forecaster | None:
    """A forecaster from the performance model (``glm5lib.diagnose.model.PerfModel``), fitted on
    a measured phase of ``run_dir``; None for an objective it does not forecast (goodput). A limit on
    a latency the model does not forecast (a p99) leaves every forecast not given. ``phases``: the
    candidates' evidence as the search read it (each phase read once for every fit)."""
    if objective != "output_throughput":
        return None
    fitted: dict[tuple[str, ...], Any] = {}
    unknown = [m for m in metrics if m not in _LATENCY]
    run = Path(run_dir)
    phases = phases if phases is not None else EvidenceCache()

    def fit(phase: str, among: Sequence[str]) -> Any:
        # every candidate measured so far is a level of the same engine and model under its own
        # limits: the fit reads them all, the changes are made to the nearest one's configuration
        others = sorted({o for o in among if o != phase and (run / o / rundir.SWEEP).is_file()})
        key = (phase, *others)
        if key not in fitted:
            try:
                ev = phases.load(run / phase)
                also = [phases.load(run / o) for o in others]
                fitted[key] = perf.PerfModel.from_evidence(ev, engine=engine, also=also)
            except (DiagnosisError, ConfigError) as exc:  # one level in all: the model cannot split a step
                log.debug("no performance model on phase %s: %s", phase, exc)
                fitted[key] = None
        return fitted[key]

    def forecast(phase: str, changes: Mapping[str, Any], among: Sequence[str] = ()) -> Mapping[str, Any] | None:
        if not phase:
            return None
        model = fit(phase, among)
        if model is None:
            return None
        (f,) = model.forecast(dict(changes), [concurrency], input_len=input_len, output_len=output_len)
        out: dict[str, Any] = {"objective": float(f.predicted_tok_s), "objective_high": float(f.high_tok_s),
                               "given": f.given and not unknown, "needs": f.needs or (
                                   f"a launch: the model does not forecast {', '.join(unknown)}" if unknown else "")}
        for name, (attr, low) in _LATENCY.items():
            value, edge = getattr(f, attr, None), getattr(f, low, None)
            if value is not None:
                out[name] = float(value)
                out[f"{name}_low"] = float(edge) if edge is not None else float(value)
        return out

    return forecast
