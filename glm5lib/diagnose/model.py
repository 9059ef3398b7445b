"""Performance model of a continuous-batching engine: fit on one phase, forecast a change.

One engine-neutral model of an engine step, fitted from ONE phase's evidence (the client's
``sweep.csv`` levels, the engine's log or ``/metrics`` for the running batch, the start-up facts
for the limits), forecasts throughput, TTFT and TPOT at any concurrency and workload once some
of the engine's own fields change (``{"max_num_seqs": 256}``, ``{"max_running_requests": 1024}``).

The model (every time in milliseconds, ``B`` the running batch, ``I``/``O`` the mean prompt and
output tokens of a request):

* per-output-token service time ``u(B) = fixed + per_seq * B**exponent + per_token * B*I/O
  + per_kv_token * B*(I + O/2)``, minus a CUDA-graph saving while graphs cover the batch: the
  time the engine spends per step, with the prompts it prefills between (or inside) decode steps
  folded in at the workload's own mix, so prompt length matters; ``throughput = 1000 * B / u(B)``;
* the limits decide ``B``: the offered concurrency, the running cap, the KV pool (``B`` requests
  of ``I + O`` tokens, plus the admission reserve an engine keeps for tokens still to come) and,
  on engines that put prefill chunks and decode tokens in one step, the per-step token budget
  (at most ``budget * O / (I + O)`` requests decode per step, the rest wait for prefill);
* the client's latencies: ``TTFT_service(B) = ttft_fixed + ttft_per_token * B * I`` (a prompt
  waits for the prompts admitted with it), fitted on the measured TTFT of levels where nothing
  queued; ``TPOT = u(B) - TTFT_service / O`` (the step less its share of the prompt's wait);
  requests beyond ``B`` queue for ``O * u(B) * (C / B - 1)`` first (Little's law, closed loop).

The fit uses least squares with non-negative coefficients (weighted for relative error) over the
phase's levels, whose batch is the requests the engine may hold (the offered load up to the
running cap, bounded by the token budget), as the forecast reads it; the median running count
the log or ``/metrics`` shows in a level's window replaces it only where the engine kept requests
waiting (a snapshot every few seconds of an engine whose HTTP server paces it reads far fewer). The exponent is fitted on a grid when the levels ran at least three batch sizes
spread 3x or more, else it takes the prior 0.8 (a step grows more slowly than the batch on real
engines) and the band covers exponents 0.6-1.0; one batch size alone cannot split the fixed part
from the per-request part, so the model takes half each and the band spans either. A phase
whose every step ran as a CUDA graph cannot show what a graph saves: the model takes the
shipped profiles' prior (a fifth of the fixed step) and names it when a change turns graphs off;
levels on both sides of the graphs' batch limit fit it instead. ``fit_error`` is the mean
relative throughput error on the phase's own levels; the band is that error (at least 10%: the
run-to-run spread of a level on a busy machine), the spread of the exponents the evidence
allows (with fewer than three batch sizes, also the steepest and flattest slopes between them
that a level's run-to-run spread allows), per doubling beyond the batch range the fit saw 5% or
what the phase's own hold-out check missed by (refitted without its largest batch, the model
forecasts that batch: :attr:`PerfModel.holdout_error`), and 15% for each changed field the
evidence cannot show (:attr:`Forecast.unseen_changes`).

The step formula itself is :func:`glm5lib.stepmodel.step_time_ms`, the one the stand-in runs on.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from glm5lib import engines, rundir
from glm5lib.diagnose.evidence import Evidence, Prediction, _col, _num, _pct, load_evidence
from glm5lib.diagnose.graphs import (
    EAGER_OVERHEAD_MAX_X,
    GRAPH_PRIOR_SHARE,
    with_graph_prior,
)
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.stepmodel import StepParams, step_time_ms
from glm5lib.stepmodel import nnls as _nnls

__all__ = [
    "Forecast",
    "Limits",
    "PerfModel",
    "StepParams",
    "Workload",
    "predict",
    "predict_remedy",
    "step_ms",
]

log = logging.getLogger(__name__)

PRIOR_EXPONENT = 0.8
# A Gaussian prior on the exponent, weighed against how far the levels scatter about the fit: the
# exponent minimises the squared log residuals plus (scatter * (exponent - prior) / SD)^2, the
# scatter read off the best fit's own residuals (per degree of freedom, at most MAX_SCATTER), so a
# curve the form follows exactly keeps its exponent and a noisy one is held near the prior. Levels
# of 15 s on a shared host scatter by about 10% (12 levels of one batch in three launches of real
# vLLM on CPU: 2,049-2,861 tok/s), enough to swing the best exponent of four levels alone from one
# end of the grid to the other; replayed at 5-10% scatter (benchmarks/bench_predict_noise.py,
# truths of exponent 0.6-0.92), a 4x extrapolation lands within 25% in 66-87% of draws with the
# prior against 59-80% without it, and about as often either way at exponent 1.0 (70/72%, 56/55%).
PRIOR_EXPONENT_SD = 0.3
MAX_SCATTER = 0.2
EXPONENT_GRID = tuple(round(x, 2) for x in np.arange(0.5, 1.001, 0.02))
PRIOR_EXPONENT_RANGE = (0.6, 1.0)
# Relative widening of the band for an effect the phase's evidence cannot show.
UNSEEN_WIDENING = 0.15
# The narrowest band: run-to-run spread of a sweep level on a busy machine is rarely below this.
BAND_FLOOR = 0.1
# Widening per doubling beyond the batches the fit saw, at least (the hold-out check may ask more).
EXTRAPOLATION_PER_DOUBLING = 0.05
# A client below this share of one core (%) with its self-check's client_bound set was starved of
# CPU (glm5lib.loadgen.selfcheck.client_bound_text says so in the level's warning).
STARVED_CPU_PCT = 50.0
# How much the prompt/output mix must vary across levels before a per-prompt-token term is fitted.
MIX_VARIATION = 0.25



def step_ms(
    params: StepParams,
    batch: float,
    *,
    input_len: float,
    output_len: float,
    graphs: bool = False,
    graph_max_bs: int | None = None,
) -> float:
    """Per-output-token service time (ms) of a batch of ``batch`` requests: see the module."""
    o = max(float(output_len), 1.0)
    return step_time_ms(
        params,
        batch,
        prompt_tokens=batch * float(input_len) / o,
        kv_tokens=batch * (float(input_len) + o / 2.0),
        graph=graphs and (graph_max_bs is None or batch <= graph_max_bs),
    )


@dataclasses.dataclass
class Workload:
    """Mean prompt and output tokens of one request."""

    input_len: float
    output_len: float


@dataclasses.dataclass
class Limits:
    """The engine's limits that decide the running batch."""

    running_cap: int | None = None
    token_budget: int | None = None
    kv_pool: int | None = None
    reserve_ratio: float = 0.0  # share of a request's future tokens the admission keeps free
    graphs: bool = False
    graph_max_bs: int | None = None
    mixed_steps: bool = False  # prefill chunks and decode tokens in one step, under the budget


@dataclasses.dataclass
class Forecast:
    """What the model expects at one offered concurrency."""

    concurrency: int
    predicted_tok_s: float
    low_tok_s: float
    high_tok_s: float
    ttft_ms: float | None
    tpot_ms: float | None
    ttft_low_ms: float | None
    ttft_high_ms: float | None
    tpot_low_ms: float | None
    tpot_high_ms: float | None
    running: float
    binding_limit: str
    extrapolated: bool
    unseen_changes: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class LevelPoint:
    """One sweep level as the fit reads it."""

    concurrency: int
    running: float
    throughput: float
    input_len: float
    output_len: float
    ttft_ms: float | None
    tpot_ms: float | None
    graphs: bool
    # the client's self-check found it starved of CPU (under half a core, lagging all the same):
    # the host, not the engine alone, paced this level
    starved: bool = False

    @property
    def u_ms(self) -> float:
        return 1000.0 * self.running / self.throughput


def _f(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


@dataclasses.dataclass
class PerfModel:
    """A step model fitted on one phase, with the limits that phase ran under."""

    params: StepParams
    limits: Limits
    workload: Workload
    engine: str
    fit_error: float
    seen: dict[str, Any]
    exponent_fitted: bool
    ttft_fixed_ms: float = 0.0
    ttft_per_token_ms: float = 0.0
    levels: list[LevelPoint] = dataclasses.field(default_factory=list, repr=False)
    server_args: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    source: str | None = None
    exponent_range: tuple[float, float] = PRIOR_EXPONENT_RANGE
    graph_saving_fitted: bool = False
    # the self-check: refitted without the largest batch, the model's error forecasting it
    # (relative, signed) and that error per doubling of the batch (log2), for the band
    holdout_error: float | None = None
    holdout_per_doubling: float = 0.0

    @property
    def starved_levels(self) -> list[int]:
        """The fitted levels whose client was starved of CPU by other processes on its host."""
        return [p.concurrency for p in self.levels if p.starved]

    @property
    def host_paced(self) -> bool:
        """Every fitted level's client was starved: the host's CPU, not the engine's step alone,
        set each level's pace (vLLM on two CPU cores: its engine processes poll the cores busy and
        its HTTP server and the client get a few percent of one), so no level shows what the engine
        alone would do at a batch the phase did not run; the band widens by UNSEEN_WIDENING."""
        return bool(self.levels) and all(p.starved for p in self.levels)

    # -- fitting ------------------------------------------------------------------------------
    @classmethod
    def fit_phase(cls, phase_dir: str | Path, *, engine: str | None = None) -> PerfModel:
        """Fit on one phase folder (``run/baseline``): its sweep, log/metrics and start-up facts."""
        path = Path(phase_dir)
        if not path.is_dir():
            raise ConfigError(f"phase folder {path} does not exist", field="phase")
        ev = load_evidence(path.parent, phase=path.name)
        command = _command_record(path)
        if command is not None:
            # an engine launched from a command line: its limits are the flags it ran with
            if not (ev.startup or {}).get("engine"):  # the log names its engine where it can
                engine = engine or str(command.get("engine") or "command")
            ev.server_args = {**_flags(command.get("argv") or []), **dict(ev.server_args or {})}
        return cls.from_evidence(ev, engine=engine)

    @classmethod
    def from_evidence(cls, ev: Any, *, engine: str | None = None) -> PerfModel:
        """Fit on an :class:`~glm5lib.diagnose.evidence.Evidence` bundle of one phase."""
        engine = engine or ev.engine
        args = dict(ev.server_args or {})
        adapter = engines.get(engine, default=engines.COMMAND)
        caps = adapter.capabilities
        lim = engines.limits_of(adapter, args, ev.startup or {}, ev.environment)
        cap = lim.running_cap
        pool = lim.kv_tokens or ev.kv_pool_tokens()[0]
        budget = _budget(ev, adapter, lim)
        # CUDA graphs modelled where the engine's decode lines say which steps replayed one
        graphs_on = caps.logs_graph_use and not lim.graphs_off
        limits = Limits(
            running_cap=cap,
            token_budget=budget,
            kv_pool=pool,
            reserve_ratio=0.1 if caps.reserves_future_tokens else 0.0,
            graphs=graphs_on,
            graph_max_bs=lim.graph_max_batch if graphs_on else None,
            mixed_steps=caps.mixed_steps,
        )
        points = _level_points(ev, cap, graphs_on, budget if limits.mixed_steps else None)
        if len(points) < 2:
            raise DiagnosisError(
                f"cannot fit a performance model on {ev.source or 'this phase'}: it needs at least 2 "
                f"sweep levels with a measured output throughput, got {len(points)}"
            )
        model = cls._fit(points, limits, engine)
        model.server_args = args
        model.source = ev.source
        return model

    @classmethod
    def _fit(cls, points: list[LevelPoint], limits: Limits, engine: str, *, holdout: bool = True) -> PerfModel:
        b = np.array([p.running for p in points], float)
        i = np.array([p.input_len for p in points], float)
        o = np.array([p.output_len for p in points], float)
        y = np.array([p.u_ms for p in points], float)
        w = 1.0 / y  # relative errors: a large batch's long step does not outweigh the others
        tokens = b * i / o
        # prompt tokens per step separate from the batch only if the prompt/output mix varied by
        # more than random prompt lengths make it vary from level to level (a few percent)
        use_tokens = np.ptp(i / o) > MIX_VARIATION * float(np.mean(i / o))
        sizes = np.unique(np.round(b))
        fitted = len(sizes) >= 3 and sizes.max() >= 3 * sizes.min()
        grid = EXPONENT_GRID if fitted else (PRIOR_EXPONENT,)
        # steps a CUDA graph covered; with both kinds among the levels, the saving is fitted
        covered = np.array([limits.graphs and (limits.graph_max_bs is None or x <= limits.graph_max_bs) for x in b])
        graph_col = bool(covered.any() and (~covered).any())
        tried = []
        for p in grid:
            cols = [np.ones_like(b), b**p] + ([tokens] if use_tokens else []) + ([-covered.astype(float)] if graph_col else [])
            x = np.column_stack(cols)
            coef = _nnls(x, y, w)
            fit = np.maximum(x @ coef, 1e-9)
            tried.append((float(np.sum(np.log(fit / y) ** 2)), float(np.mean(np.abs(fit - y) / y)), float(p), coef))
        dof = max(len(b) - len(tried[0][3]) - 1, 1)
        scatter = min(math.sqrt(min(t[0] for t in tried) / dof), MAX_SCATTER)
        best = min(tried, key=lambda t: t[0] + (scatter * (t[2] - PRIOR_EXPONENT) / PRIOR_EXPONENT_SD) ** 2)
        _, best_err, p, coef = best
        if len(sizes) == 1:
            # one batch size: nothing splits the fixed part from the per-request part; take half
            # each (the band spans all-fixed to all-per-request, see _alternatives)
            ym = float(np.median(y))
            coef = np.array([ym / 2.0, ym / 2.0 / float(sizes[0]) ** p] + ([0.0] if use_tokens else []))
        params = StepParams(
            fixed_ms=float(coef[0]),
            per_seq_ms=float(coef[1]),
            exponent=p,
            per_token_ms=float(coef[2]) if use_tokens else 0.0,
        )
        if graph_col:
            params.graph_saving_ms = float(coef[-1])
        elif covered.all() and limits.graphs:
            # every fitted step ran as a CUDA graph: its saving is a prior, not a measurement
            params = with_graph_prior(params)
        elif limits.graphs:  # no fitted step was covered: the prior saving for batches that will be
            params.graph_saving_ms = params.fixed_ms * GRAPH_PRIOR_SHARE
        wl = Workload(float(np.median(i)), float(np.median(o)))
        if fitted:
            span = [q for q, e in _grid_errors(b, y, w, tokens if use_tokens else None) if e <= best_err * 1.25 + 0.01]
            erange = (min([*span, p]), max([*span, p]))
        else:
            erange = PRIOR_EXPONENT_RANGE
        model = cls(
            params=params,
            limits=limits,
            workload=wl,
            engine=engine,
            fit_error=0.0,
            seen={},
            exponent_fitted=fitted,
            levels=points,
            exponent_range=erange,
            graph_saving_fitted=graph_col,
        )
        pred = np.array([model._thr(p_.running, p_.input_len, p_.output_len, params) for p_ in points])
        meas = np.array([p_.throughput for p_ in points])
        model.fit_error = float(np.mean(np.abs(pred - meas) / meas))
        model.seen = {
            "batch": (float(b.min()), float(b.max())),
            "tokens_per_step": (float((b + tokens).min()), float((b + tokens).max())),
            "input_len": (float(i.min()), float(i.max())),
            "output_len": (float(o.min()), float(o.max())),
            "concurrency": (min(p_.concurrency for p_ in points), max(p_.concurrency for p_ in points)),
            "levels": len(points),
        }
        model._fit_latency()
        if holdout:
            model._holdout(limits, engine)
        return model

    def _holdout(self, limits: Limits, engine: str) -> None:
        """Refit without the levels at the largest batch and forecast them: how far this phase's
        curve carries beyond what a fit saw, measured on the phase itself. With levels 1-16 of
        real vLLM on two CPU cores, the curve beyond 8 bent away from the fit on 1-8 by 14-36%;
        the band beyond the phase's own batches widens by that error per doubling."""
        sizes = sorted({round(p.running, 1) for p in self.levels})
        if len(sizes) < 3:
            return
        top = sizes[-1]
        rest = [p for p in self.levels if round(p.running, 1) < top]
        held = [p for p in self.levels if round(p.running, 1) == top]
        if len({round(p.running, 1) for p in rest}) < 2:
            return
        try:
            sub = type(self)._fit(rest, limits, engine, holdout=False)
        except (ValueError, np.linalg.LinAlgError):
            return
        logs = [math.log(sub._thr(p.running, p.input_len, p.output_len, sub.params) / p.throughput) for p in held]
        err = float(np.mean(logs))
        span = math.log2(top / max(sizes[-2], 1e-9))
        self.holdout_error = math.exp(err) - 1.0
        self.holdout_per_doubling = abs(err) / max(span, 0.5)

    def _fit_latency(self) -> None:
        """TTFT's own part (no queue): ``ttft_fixed + ttft_per_token * B * I``, fitted on the
        measured TTFT of levels where nothing queued (a prompt waits for those admitted with
        it); with none, on what the service time leaves beside the measured TPOT."""
        free = [p for p in self.levels if p.concurrency <= 1.05 * p.running and p.ttft_ms is not None]
        rows = [(p.running * p.input_len, float(p.ttft_ms)) for p in free]
        if not rows:
            for p in self.levels:
                if p.tpot_ms is None or p.output_len < 2:
                    continue
                service = p.output_len * p.u_ms
                rows.append((p.running * p.input_len, max(service - (p.output_len - 1) * p.tpot_ms, 0.0)))
        if not rows:
            return
        x = np.array([[1.0, r[0]] for r in rows])
        y = np.array([r[1] for r in rows])
        coef = _nnls(x, y) if len({r[0] for r in rows}) >= 2 else np.array([float(np.median(y)), 0.0])
        self.ttft_fixed_ms, self.ttft_per_token_ms = float(coef[0]), float(coef[1])

    # -- forecasting ----------------------------------------------------------------------------
    def _thr(self, batch: float, input_len: float, output_len: float, params: StepParams,
             limits: Limits | None = None) -> float:
        lim = limits or self.limits
        return 1000.0 * batch / step_ms(
            params, batch, input_len=input_len, output_len=output_len, graphs=lim.graphs,
            graph_max_bs=lim.graph_max_bs,
        )

    def with_changes(self, changes: Mapping[str, Any] | None) -> tuple[Limits, StepParams, list[str]]:
        """The limits and step parameters after ``changes`` (engine field names), and the changed
        fields the model cannot see (each with why)."""
        lim = dataclasses.replace(self.limits)
        params = dataclasses.replace(self.params)
        unseen: list[str] = []
        changes = dict(changes or {})
        adapter = engines.get(self.engine, default=engines.COMMAND)
        context = {**self.server_args, **changes}
        for key, value in changes.items():
            k = str(key)
            found, _ = engines.limit_changes({k: value}, adapter, context)
            for limit, v in found.items():
                self._apply(limit, v, k, value, lim, params, unseen)
            if found:
                continue
            if engines.neutral_field(k, adapter):
                unseen.append(f"{k}={value}: not modelled ({engines.neutral_field(k, adapter)})")
            elif adapter.capabilities.limit_of(k) is None and _is_companion(k, changes, adapter, context):
                continue
            else:
                unseen.append(f"{k}={value}: the step model has no term for this field")
        return lim, params, unseen

    def _apply(self, limit: str, v: Any, k: str, value: Any, lim: Limits, params: StepParams,
               unseen: list[str]) -> None:
        """One neutral limit's change (``limit`` = ``v``, asked as ``k`` = ``value``) into ``lim``,
        with what the evidence cannot show of it in ``unseen``."""
        if limit == "running_cap":
            lim.running_cap = _int(v) if v is not None else None
        elif limit in ("token_budget", "prefill_chunk"):
            lim.token_budget = _int(v) if v is not None else None
            note = (f"{k}={value}: this engine prefills in batches of their own; the model folds "
                    "prefill into the step at the phase's mix and does not count those batches")
            if not lim.mixed_steps and note not in unseen:
                unseen.append(note)
        elif limit == "kv_tokens":
            lim.kv_pool = _int(v) if v is not None else self.limits.kv_pool
        elif limit == "graphs_off":
            off = bool(v)
            if off and lim.graphs:
                lim.graphs = False
                if not self.graph_saving_fitted:
                    unseen.append(
                        f"{k}={value}: every decode step of this phase ran with CUDA graphs, so the "
                        f"time graphs save is not in its evidence; the model takes the shipped profiles' "
                        f"prior ({GRAPH_PRIOR_SHARE:.0%} of the fixed step time, {params.graph_saving_ms:.1f} ms)"
                    )
            elif not off and not lim.graphs:
                unseen.append(f"{k}={value}: graphs did not run in this phase, their saving is unknown")
        elif limit == "graph_max_batch":
            lim.graph_max_bs = _int(v)
            if lim.graphs and not self.graph_saving_fitted:
                unseen.append(f"{k}={value}: the saving of a CUDA graph is a prior, not in this phase's evidence")
        elif limit == "kv_fraction":
            unseen.append(f"{k}={value}: the step model has no term for this field")

    def running(self, concurrency: int, limits: Limits, workload: Workload) -> tuple[float, str]:
        """The batch the engine runs at ``concurrency`` under ``limits``, and what binds it."""
        options: list[tuple[float, str]] = [(float(concurrency), "load")]
        if limits.running_cap:
            options.append((float(limits.running_cap), "running_cap"))
        ctx = workload.input_len + workload.output_len
        if limits.kv_pool and ctx > 0:
            hold = workload.input_len + workload.output_len * (0.5 + 0.5 * limits.reserve_ratio)
            options.append((max(1.0, math.floor(limits.kv_pool / max(hold, ctx * 0.5))), "kv_pool"))
        if limits.mixed_steps and limits.token_budget and ctx > 0:
            options.append(
                (max(1.0, limits.token_budget * workload.output_len / ctx), "token_budget")
            )
        return min(options, key=lambda t: t[0])

    def forecast(
        self,
        changes: Mapping[str, Any] | None,
        concurrency: Sequence[int] | int,
        *,
        input_len: int | None = None,
        output_len: int | None = None,
    ) -> list[Forecast]:
        """Throughput, TTFT and TPOT at each offered concurrency once ``changes`` are made."""
        levels = _levels(concurrency)
        if input_len is not None and input_len < 1:
            raise ConfigError(f"input_len must be at least 1, got {input_len}", field="input_len")
        if output_len is not None and output_len < 1:
            raise ConfigError(f"output_len must be at least 1, got {output_len}", field="output_len")
        if changes is not None and not isinstance(changes, Mapping):
            raise ConfigError(
                f"changes must map engine field names to values, got {type(changes).__name__}",
                field="changes",
            )
        lim, params, unseen = self.with_changes(changes)
        wl = Workload(
            float(input_len) if input_len is not None else self.workload.input_len,
            float(output_len) if output_len is not None else self.workload.output_len,
        )
        out = []
        for c in levels:
            out.append(self._one(c, lim, params, wl, unseen))
        return out

    def _alternatives(self) -> list[StepParams]:
        """The step parameters refitted at the ends of the exponent range the evidence allows."""
        alts = []
        b = np.array([p.running for p in self.levels], float)
        y = np.array([p.u_ms for p in self.levels], float)
        if len(np.unique(np.round(b))) == 1:
            ym, e = float(np.median(y)), self.params.exponent
            for fixed, per in ((ym, 0.0), (0.0, ym / float(np.round(b[0])) ** e)):
                alt = dataclasses.replace(self.params, fixed_ms=fixed, per_seq_ms=per, graph_saving_ms=0.0)
                alts.append(with_graph_prior(alt) if self.limits.graphs else alt)
            return alts
        # Too few batch sizes to fit the exponent: the slope between them is as uncertain as each
        # level's run-to-run spread, so the band also spans the steepest and flattest slopes that
        # spread allows (the smallest batch's step shorter and the largest's longer, and back).
        tilts = [np.ones_like(y)]
        if not self.exponent_fitted:
            lb = np.log(b)
            pos = (lb - lb.min()) / max(float(np.ptp(lb)), 1e-9) * 2.0 - 1.0  # -1 smallest, +1 largest
            spread = max(self.fit_error, BAND_FLOOR)
            tilts += [1.0 + spread * pos, 1.0 - spread * pos]
        for e in self.exponent_range:
            for k, tilt in enumerate(tilts):
                if k == 0 and abs(e - self.params.exponent) < 1e-9:
                    continue
                yt = y * tilt
                x = np.column_stack([np.ones_like(b), b**e])
                coef = _nnls(x, yt, 1.0 / yt)
                alt = dataclasses.replace(self.params, fixed_ms=float(coef[0]), per_seq_ms=float(coef[1]),
                                          exponent=e, graph_saving_ms=0.0)
                alts.append(with_graph_prior(alt) if self.limits.graphs else alt)
        return alts

    def _one(self, c: int, lim: Limits, params: StepParams, wl: Workload, unseen: list[str]) -> Forecast:
        batch, by = self.running(c, lim, wl)
        u = step_ms(params, batch, input_len=wl.input_len, output_len=wl.output_len,
                    graphs=lim.graphs, graph_max_bs=lim.graph_max_bs)
        thr = 1000.0 * batch / u
        lo_b, hi_b = self.seen["batch"]
        tok = batch * (1 + wl.input_len / max(wl.output_len, 1.0))
        _lo_t, hi_t = self.seen["tokens_per_step"]
        beyond = max(batch / hi_b if batch > hi_b else 1.0, lo_b / batch if batch < lo_b else 1.0,
                     tok / hi_t if tok > hi_t else 1.0)
        extrapolated = beyond > 1.1
        alt = [1000.0 * batch / step_ms(a, batch, input_len=wl.input_len, output_len=wl.output_len,
                                        graphs=lim.graphs, graph_max_bs=lim.graph_max_bs)
               for a in self._alternatives()] if extrapolated else []
        rel = max(self.fit_error, BAND_FLOOR)
        if extrapolated:
            # the exponent's range already spreads the band (alt); beyond it, 5% per doubling, or
            # what the phase's own hold-out check missed by per doubling where that is more
            per = max(EXTRAPOLATION_PER_DOUBLING if alt else 2 * EXTRAPOLATION_PER_DOUBLING,
                      self.holdout_per_doubling)
            rel += per * math.log2(beyond)
        notes = list(unseen)
        # steps that run eagerly where every fitted step ran as a graph: their cost is not in the
        # evidence, so the band reaches down to the eager overhead seen on a GPU (EAGER_OVERHEAD_MAX_X)
        eager = (not self.graph_saving_fitted and self.limits.graphs
                 and (not lim.graphs or (lim.graph_max_bs is not None and batch > lim.graph_max_bs)))
        if eager and lim.graphs:
            notes.append(f"above batch {lim.graph_max_bs} (the largest the engine captures as a CUDA graph) "
                         f"decode steps run eagerly; every step of this phase ran as a graph, so their cost is a "
                         f"prior ({params.graph_saving_ms:.1f} ms) and the band reaches down to an eager step "
                         f"{EAGER_OVERHEAD_MAX_X:.0f}x the fixed part")
        rel += UNSEEN_WIDENING * sum(1 for u_ in notes if "not modelled" not in u_)
        if self.host_paced:  # no level shows the engine alone: the host's share is in every one
            rel += UNSEEN_WIDENING
        rel = min(rel, 0.9)
        low = min([thr, *alt]) * (1 - rel)
        high = max([thr, *alt]) * (1 + rel)
        if eager:
            worst = 1000.0 * batch / (u + EAGER_OVERHEAD_MAX_X * max(params.fixed_ms - params.graph_saving_ms, 0.0))
            low = min(low, worst * (1 - BAND_FLOOR))
        # latencies: service split into the prefill wait and decode, queueing beyond the batch
        o = max(wl.output_len, 1.0)
        service = o * u
        ttft_s = self.ttft_fixed_ms + self.ttft_per_token_ms * batch * wl.input_len
        # a token's gap is the step less the share of the prompt's wait the step time folds in
        tpot = max(u - ttft_s / o, 0.5 * u) if o > 1 else None
        wait = service * max(c / batch - 1.0, 0.0)
        ttft = wait + ttft_s
        return Forecast(
            concurrency=int(c),
            predicted_tok_s=float(thr),
            low_tok_s=float(low),
            high_tok_s=float(high),
            ttft_ms=float(ttft),
            tpot_ms=None if tpot is None else float(tpot),
            ttft_low_ms=float(ttft * (1 - rel)),
            ttft_high_ms=float(ttft * (1 + rel)),
            tpot_low_ms=None if tpot is None else float(tpot * (1 - rel)),
            tpot_high_ms=None if tpot is None else float(tpot * (1 + rel)),
            running=float(batch),
            binding_limit=by,
            extrapolated=bool(extrapolated),
            unseen_changes=notes,
        )

    # -- description ----------------------------------------------------------------------------
    def describe(self) -> str:
        p = self.params
        terms = [f"{p.fixed_ms:.2f} ms", f"{p.per_seq_ms:.3f} ms x B^{p.exponent:.2f}"]
        if p.per_token_ms:
            terms.append(f"{p.per_token_ms * 1000:.2f} us per prompt token per step")
        lo, hi = self.seen["batch"]
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
                     f"so the band widens {self.holdout_per_doubling:.0%} per doubling beyond {round(hi, 1):g}")
        if self.starved_levels:
            check += (f"; the client was starved of CPU at {'every level' if self.host_paced else 'levels'} "
                      f"{', '.join(map(str, self.starved_levels))}, so its host, not the engine alone, paced "
                      + ("them and the band widens 15%" if self.host_paced else "those"))
        return (
            f"per-token service time = {' + '.join(terms)} (exponent {how}); fitted on "
            f"{self.seen['levels']} levels, running {round(lo, 1):g}-{round(hi, 1):g}; throughput error {self.fit_error:.0%}"
            + check
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "params": self.params.to_dict(),
            "limits": dataclasses.asdict(self.limits),
            "workload": dataclasses.asdict(self.workload),
            "fit_error": self.fit_error,
            "seen": self.seen,
            "exponent_fitted": self.exponent_fitted,
            "exponent_range": list(self.exponent_range),
            "ttft_fixed_ms": self.ttft_fixed_ms,
            "ttft_per_token_ms": self.ttft_per_token_ms,
            "holdout_error": self.holdout_error,
            "holdout_per_doubling": self.holdout_per_doubling,
            "starved_levels": self.starved_levels,
        }


def _grid_errors(b, y, w, tokens) -> list[tuple[float, float]]:
    out = []
    for p in EXPONENT_GRID:
        cols = [np.ones_like(b), b**p] + ([tokens] if tokens is not None else [])
        x = np.column_stack(cols)
        coef = _nnls(x, y, w)
        out.append((float(p), float(np.mean(np.abs(x @ coef - y) / y))))
    return out


def _command_record(phase: Path) -> dict[str, Any] | None:
    path = phase / rundir.COMMAND
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _flags(argv: Sequence[str]) -> dict[str, Any]:
    """``--flag value`` and bare ``--switch`` pairs of a command line, by flag (``--cb-max-batch-tokens``)."""
    out: dict[str, Any] = {}
    items = [str(a) for a in argv]
    for n, item in enumerate(items):
        if not item.startswith("--"):
            continue
        name, eq, value = item.partition("=")
        if eq:
            out[name] = value
        elif n + 1 < len(items) and not items[n + 1].startswith("--"):
            out[name] = items[n + 1]
        else:
            out[name] = True
    return out


def _first(args: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for k in keys:
        if args.get(k) not in (None, ""):
            return args[k]
    return None


def _int(v: Any) -> int | None:
    x = _f(v)
    return int(x) if x is not None and x > 0 else None


def _budget(ev: Any, adapter: Any, lim: Any) -> int | None:
    """The per-step token budget: the limit in force, else the value the engine chose for it."""
    if lim.token_budget:
        return int(lim.token_budget)
    field = adapter.capabilities.field("token_budget")
    if adapter.capabilities.resolves_automatic_values and field:
        try:
            auto = adapter.automatic(field, ev.server_args or {}, ev.startup, ev.environment)
            return _int(auto.value) if auto is not None else None
        except Exception:
            return None
    return None


def _is_companion(name: str, changes: Mapping[str, Any], adapter: Any, context: Mapping[str, Any]) -> bool:
    """A field that only qualifies another change the vocabulary translates (vLLM's block size
    beside its pool in blocks): translated together with it, so not unseen on its own."""
    others = {k: v for k, v in changes.items() if k != name}
    with_it, _ = engines.limit_changes(others, adapter, context)
    without, _ = engines.limit_changes(others, adapter, {k: v for k, v in context.items() if k != name})
    return bool(with_it) and with_it != without


def _level_points(ev: Any, cap: int | None, graphs: bool, budget: int | None = None) -> list[LevelPoint]:
    s = ev.sweep_sorted()
    if s.empty or "output_throughput" not in s:
        return []
    points = []
    for _, row in s.iterrows():
        thr = _f(row.get("output_throughput"))
        c = _f(row.get("concurrency"))
        if not thr or thr <= 0 or not c:
            continue
        completed = _f(row.get("completed")) or 0.0
        i = _f(row.get("total_input_tokens"))
        o = _f(row.get("total_output_tokens"))
        inp = i / completed if i and completed else _f(row.get("input_len")) or 1.0
        out = o / completed if o and completed else _f(row.get("output_len")) or 1.0
        # the batch is the requests the engine may hold (the offered load, up to its cap), as the
        # forecast reads it at the target; the log's running count replaces it only where the
        # engine itself kept requests waiting (a limit the cap does not show: the KV pool, the
        # budget). A log that reads fewer running with nothing waiting is counting snapshots of a
        # batch whose requests spend part of their life outside the engine (the HTTP server's
        # tokenizing and streaming, the client): that time is part of each request's service
        # time, and the forecast's batch counts those requests too.
        running = min(c, float(cap)) if cap else c
        lines = ev.decode_in_level(row)
        if len(lines) >= 2 and "running_req" in lines:
            r = pd.to_numeric(lines["running_req"], errors="coerce").dropna()
            q = pd.to_numeric(lines["queue_req"], errors="coerce").dropna() if "queue_req" in lines else r.iloc[0:0]
            if len(r) and len(q) and float(q.median()) > 0:
                running = float(min(max(r.median(), 1.0), c))
        if budget and inp + out > 0:
            # no more requests decode per step than the token budget feeds with prompts (the
            # log counts those still waiting for their prompt's chunks as running too)
            running = min(running, max(1.0, budget * out / (inp + out)))
        mean_conc = _f(row.get("mean_concurrency"))
        if mean_conc and mean_conc < running:
            running = max(1.0, mean_conc)
        points.append(
            LevelPoint(
                concurrency=int(c),
                running=running,
                throughput=thr,
                input_len=inp,
                output_len=out,
                ttft_ms=_f(row.get("mean_ttft_ms")),
                tpot_ms=_f(row.get("mean_tpot_ms")),
                graphs=graphs,
                starved=_truthy(row.get("client_bound"))
                and (_f(row.get("client_cpu_pct")) or 100.0) < STARVED_CPU_PCT,
            )
        )
    return points


def _levels(concurrency: Sequence[int] | int) -> list[int]:
    raw = [concurrency] if isinstance(concurrency, (int, np.integer)) else list(concurrency)
    if not raw:
        raise ConfigError("concurrency: give at least one level, e.g. [64, 256]", field="concurrency")
    out = []
    for c in raw:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
            raise ConfigError(
                f"concurrency levels must be integers of at least 1, got {c!r}", field="concurrency"
            )
        out.append(int(c))
    return out


def predict(
    run_dir: str | Path,
    phase: str,
    changes: Mapping[str, Any] | None,
    concurrency: Sequence[int] | int,
    **workload: Any,
) -> list[Forecast]:
    """Fit on ``run_dir/phase`` only and forecast ``changes`` at each concurrency.

    ``workload`` takes ``input_len`` and ``output_len`` (default: the phase's own)."""
    bad = set(workload) - {"input_len", "output_len"}
    if bad:
        raise ConfigError(
            f"unknown workload keyword(s) {', '.join(sorted(bad))}; valid: input_len, output_len",
            field=sorted(bad)[0],
        )
    levels = _levels(concurrency)
    path = Path(run_dir) / str(phase)
    if not Path(run_dir).is_dir():
        raise ConfigError(f"run folder {run_dir} does not exist", field="run_dir")
    if not path.is_dir():
        phases = sorted(p.name for p in Path(run_dir).iterdir() if (p / rundir.SWEEP).is_file())
        raise ConfigError(
            f"phase {phase!r} not found in {run_dir}; phases there: {', '.join(phases) or 'none'}",
            field="phase",
            valid=phases,
        )
    model = PerfModel.fit_phase(path)
    return model.forecast(changes, levels, **workload)


def predict_remedy(ev: Evidence, cap_after: int | None, what: str) -> Prediction | None:
    """A finding's forecast: this model, fitted on the phase ``ev`` holds, at the highest offered
    level once a remedy lets up to ``cap_after`` requests run (None: no cap, only the offered load
    and the other limits bound the batch), with its band, beside what was measured there. The
    same model as ``fix/prediction.csv`` and ``glm5 predict``, so a report states one forecast.

    None when there is no sweep or no fit, or when the remedy would not let more requests run."""
    s = ev.sweep_sorted()
    if s.empty or "output_throughput" not in s:
        return None
    try:
        model = PerfModel.from_evidence(ev)
    except (DiagnosisError, ConfigError) as exc:
        log.debug("no forecast for the remedy: %s", exc)
        return None
    top = s.iloc[-1]
    offered = int(top["concurrency"])
    measured = float(pd.to_numeric(top["output_throughput"], errors="coerce"))
    levels = ev.level_decode()
    lines = levels[0][1] if levels else ev.active_decode()
    batch_now = int(_col(lines, "running_req").median()) if len(lines) else 0
    [f] = model.forecast({"running_cap": int(cap_after) if cap_after else max(offered, 1)}, [offered])
    if int(f.running) <= batch_now:
        return None  # the remedy would not let more requests run
    lo, hi = model.seen["batch"]
    text = (
        f"{what}: at concurrency {offered} the performance model predicts {_num(f.predicted_tok_s)} tok/s "
        f"({_num(f.low_tok_s)}-{_num(f.high_tok_s)}: fit error {_pct(model.fit_error)}"
        + (", widened for extrapolation" if f.extrapolated else "")
        + f") with {int(f.running)} running ({f.binding_limit.replace('_', ' ')}-bound), against "
        + (f"{_num(measured)} tok/s measured" if math.isfinite(measured) else "no measured figure")
        + f" with {batch_now}"
        + ("; the model predicts no gain over the measurement"
           if math.isfinite(measured) and f.high_tok_s < measured else "")
        + (f"; extrapolated beyond the measured batches {round(lo, 1):g}-{round(hi, 1):g}" if f.extrapolated else "")
    )
    return Prediction(
        concurrency=offered,
        batch_now=batch_now,
        batch_after=int(f.running),
        throughput=f.predicted_tok_s,
        low=f.low_tok_s,
        high=f.high_tok_s,
        measured=measured if math.isfinite(measured) else None,
        extrapolated=f.extrapolated,
        text=text,
    )
