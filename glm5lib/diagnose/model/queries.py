"""Questions asked of the one performance model: a forecast from a run folder, a finding's
remedy, the running cap the KV pool allows.

Every figure here is :class:`~glm5lib.diagnose.model.core.PerfModel`'s: ``glm5 predict``, a
finding's projection, the tuner and notebook 05 give the same number for the same question.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import engines, rundir
from glm5lib.diagnose.evidence import Evidence, Prediction, _num, _pct
from glm5lib.diagnose.model.core import Forecast, PerfModel, RequestShape, _levels
from glm5lib.errors import ConfigError, DiagnosisError

__all__ = ["Recommendation", "binding_words", "forecast_text", "model_of", "predict", "predict_remedy", "recommend_running_cap"]

log = logging.getLogger(__name__)


def predict(run_dir: str | Path, phase: str, changes: Mapping[str, Any] | None, concurrency: Sequence[int] | int,
            **workload: Any) -> list[Forecast]:
    """Fit on ``run_dir/phase`` only and forecast ``changes`` at each concurrency.

    ``workload`` takes ``input_len`` and ``output_len`` (default: the phase's own)."""
    bad = set(workload) - {"input_len", "output_len"}
    if bad:
        raise ConfigError(f"unknown workload keyword(s) {', '.join(sorted(bad))}; valid: input_len, output_len",
                          field=sorted(bad)[0])
    levels = _levels(concurrency)
    path = Path(run_dir) / str(phase)
    if not Path(run_dir).is_dir():
        raise ConfigError(f"run folder {run_dir} does not exist", field="run_dir")
    if not path.is_dir():
        phases = sorted(p.name for p in Path(run_dir).iterdir() if (p / rundir.SWEEP).is_file())
        raise ConfigError(f"phase {phase!r} not found in {run_dir}; phases there: {', '.join(phases) or 'none'}",
                          field="phase", valid=phases)
    return PerfModel.fit_phase(path).forecast(changes, levels, **workload)


def model_of(ev: Evidence) -> PerfModel | None:
    """The performance model of one phase's evidence, fitted once per bundle (None: it cannot be)."""

    def fit() -> PerfModel | None:
        try:
            return PerfModel.from_evidence(ev)
        except (DiagnosisError, ConfigError) as exc:
            log.debug("no performance model: %s", exc)
            return None

    return ev.cached("perf_model", (ev.sweep, ev.decode, ev.step_profile), fit)


_BINDING_WORDS = {"load": "load", "running_cap": "running cap", "kv_tokens": "KV pool", "token_budget": "token budget"}


def binding_words(limit: str) -> str:
    """A forecast's binding limit in words ("running cap", "the tokenizer front end")."""
    if limit.startswith("frontend:"):
        return f"the {limit.split(':', 1)[1]} front end"
    return _BINDING_WORDS.get(limit, limit.replace("_", " "))


def forecast_text(f: Forecast, measured: float | None = None) -> str:
    """A forecast as one clause: the figure and band (or "not forecast" and what would settle it),
    the batch and what binds it."""
    binds = binding_words(f.binding_limit)
    if f.unseen_changes:  # no band to quote: the change has no term, so the point is the phase's own
        return f"no forecast (to settle it, measure {f.needs})"
    if not f.given:
        return (f"no forecast within +/-30% (the evidence allows {_num(f.low_tok_s)}-{_num(f.high_tok_s)} tok/s; "
                f"to settle it, measure {f.needs})")
    return (f"{_num(f.predicted_tok_s)} tok/s ({_num(f.low_tok_s)}-{_num(f.high_tok_s)}) with {int(f.running)} running, "
            f"{binds}-bound" + (f", against {_num(measured)} measured" if measured else ""))


def predict_remedy(ev: Evidence, cap_after: int | None, what: str,
                   changes: Mapping[str, Any] | None = None) -> Prediction | None:
    """A finding's forecast: the model fitted on the phase ``ev`` holds, at the highest offered
    level once a remedy lets up to ``cap_after`` requests run (None: no cap) and makes ``changes``
    (engine fields, or neutral limits), with its band, beside what was measured there. The same
    model as ``fix/prediction.csv`` and ``glm5 predict``, so a report states one forecast.

    None when there is no sweep or no fit, or when the remedy would change neither the batch nor
    the forecast."""
    s = ev.sweep_sorted()
    if s.empty or "output_throughput" not in s:
        return None
    model = model_of(ev)
    if model is None:
        return None
    top = s.iloc[-1]
    offered = int(top["concurrency"])
    measured = float(pd.to_numeric(top["output_throughput"], errors="coerce"))
    levels = ev.level_decode()
    lines = levels[0][1] if levels else ev.active_decode()
    batch_now = int(ev.running(lines)) if len(lines) else 0
    asked = dict(changes or {})
    if cap_after is not None or not asked:
        asked.setdefault("running_cap", int(cap_after) if cap_after else max(offered, 1))
    asked = _engine_fields(ev, asked)  # forecast, and recorded, as a fix would be launched
    [f] = model.forecast(asked, [offered])
    [now] = model.forecast({}, [offered])
    if (not f.unseen_changes and int(f.running) <= batch_now
            and abs(f.predicted_tok_s - now.predicted_tok_s) <= 0.02 * now.predicted_tok_s):
        return None  # the remedy would not let more requests run, nor move the forecast (one it has a term for)
    lo, hi = model.seen["batch"]
    text = (f"{what}: at concurrency {offered} the performance model " + ("forecasts " if f.given else "has ")
            + forecast_text(f)
            + (f"; {_num(measured)} tok/s measured with {batch_now} running" if math.isfinite(measured) else "")
            + ("; the model forecasts no gain over the measurement"
               if f.given and math.isfinite(measured) and f.high_tok_s < measured else "")
            + (f"; extrapolated beyond the measured batches {round(lo, 1):g}-{round(hi, 1):g}" if f.extrapolated else "")
            + (f"; fit error {_pct(model.fit_error)}" if f.given else ""))
    return Prediction(
        concurrency=offered, batch_now=batch_now, batch_after=int(f.running), throughput=f.predicted_tok_s,
        low=f.low_tok_s, high=f.high_tok_s, measured=measured if math.isfinite(measured) else None,
        extrapolated=f.extrapolated, text=text, given=f.given, needs=f.needs, binding=f.binding_limit,
        changes=asked,
    )


def _engine_fields(ev: Evidence, changes: Mapping[str, Any]) -> dict[str, Any]:
    """``changes`` in the phase's engine's own field names where its adapter has one for a neutral
    limit that sets that limit alone (what a fix's ``FIX_CHANGES`` takes as it is), neutral names
    elsewhere (transformers serve's ``cb_max_batch_tokens`` is its token budget and its cap at once)."""
    caps = ev.adapter().capabilities
    out = {}
    for name, value in changes.items():
        field = caps.field(name) if name in engines.LIMITS else None
        # a field that sets several limits is named where the change sets each of them to this value
        whole = field and all(changes.get(limit) == value for limit in caps.limits_set_by(field))
        out[field if whole else name] = value
    return out


@dataclasses.dataclass
class Recommendation:
    """A recommended running cap and why."""

    value: int | None
    kv_bound: int | None
    target_concurrency: int | None
    context_tokens: float | None
    kv_tokens: int | None
    predicted_throughput: float | None
    current_throughput: float | None
    reason: str
    forecast: Forecast | None = None


def _round_down(x: float, step: int = 8) -> int:
    return max(1, int(x // step * step)) if x >= step else max(1, int(x))


def recommend_running_cap(
    kv_tokens: int | None,
    context_tokens: float | None,
    *,
    target_concurrency: int | None = None,
    headroom: float = 0.9,
    model: PerfModel | None = None,
    current_cap: int | None = None,
    ran_batch: int | None = None,
    say_throughput: bool = True,
) -> Recommendation:
    """The largest running cap the KV pool supports for this workload (no retraction), within the
    load offered; with ``model``, the forecast at that cap and at the current one (the performance
    model's, so a finding states the number ``glm5 predict`` gives). ``ran_batch`` is the largest
    batch that already ran: a value below it comes with the reason."""
    if not 0 < headroom <= 1:
        raise ConfigError(f"headroom must be in (0, 1], got {headroom}", field="headroom")
    kv_bound = None
    if kv_tokens and context_tokens:
        if context_tokens <= 0:
            raise ConfigError(f"context_tokens must be positive, got {context_tokens}", field="context_tokens")
        kv_bound = int(headroom * kv_tokens // context_tokens)
    candidates = [c for c in (kv_bound, target_concurrency) if c]
    if not candidates:
        return Recommendation(None, None, target_concurrency, context_tokens, kv_tokens, None, None,
                              "KV pool size or workload context length unknown: measure the KV pool's size in tokens first")
    value = _round_down(min(candidates))
    reasons = []
    if kv_bound:
        reasons.append(f"a {kv_tokens:,}-token KV pool at {_pct(headroom)} holds {kv_bound} requests of "
                       f"{context_tokens:,.0f} tokens")
    if target_concurrency and (kv_bound is None or target_concurrency < kv_bound):
        reasons.append(f"the highest offered concurrency is {target_concurrency}")
    if ran_batch and value < ran_batch:
        why = (f"the pool holds only {kv_bound} requests at their full {context_tokens:,.0f} tokens, so the batch of "
               f"{ran_batch} that ran fitted only while its requests were shorter than that (or through retractions)"
               if kv_bound and value <= kv_bound else f"only {target_concurrency} requests were offered")
        reasons.append(f"this is below the {ran_batch} requests that already ran at once because {why}")
    pred = cur = None
    chosen = None
    if model is not None:
        c = target_concurrency or value
        wl = RequestShape(model.workload.input_len, model.workload.output_len)
        [chosen] = model.forecast({"running_cap": value}, [c], input_len=round(wl.input_len),
                                  output_len=round(wl.output_len))
        pred = chosen.predicted_tok_s
        if current_cap and say_throughput:
            [now] = model.forecast({"running_cap": int(current_cap)}, [c])
            cur = now.predicted_tok_s
            reasons.append(f"the performance model forecasts {forecast_text(chosen)} against "
                           f"{forecast_text(now)} with the cap at {current_cap}")
            if chosen.given and now.given and chosen.high_tok_s < now.low_tok_s:
                reasons.append("this cap is forecast to be slower than what runs now: it trades throughput for the "
                               "KV headroom that avoids retraction")
    return Recommendation(value, kv_bound, target_concurrency, context_tokens, kv_tokens, pred, cur,
                          "; ".join(reasons), chosen)
