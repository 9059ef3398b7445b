"""The performance model: one phase's evidence, the limits it ran under, a change's forecast.

Fitted on ONE phase (its sweep levels, the engine's log and ``/metrics``, the start-up facts, the
serving processes' CPU, and the engine's offline step benchmark where one was taken), it
forecasts throughput, TTFT and TPOT at any concurrency once some of the engine's own fields change
(``{"max_num_seqs": 256}``, ``{"max_running_requests": 1024}``, ``{"tokenizer_worker_num": 4}``).

Every forecast names the limit that binds, of these:

* the batch: the offered load, the running cap, the KV pool (``B`` requests of ``I + O`` tokens,
  plus the admission reserve an engine keeps for tokens still to come) and, where prefill chunks
  and decode tokens share a step, the per-step token budget;
* the step: :class:`~glm5lib.diagnose.model.curve.Curve` fitted on the phase's levels of one kind,
  a graph step padded to the captured size it runs as, an eager step (above the largest captured
  batch, or with graphs off) a graph step plus the overhead
  :class:`~glm5lib.diagnose.model.graphs.Eager` says and sources; where a step profile covers the
  batch, the profile scaled to the phase: ``engine tok/s = 1000 x B / step(B)``;
* the serving front end: each serving role's ceiling
  (:mod:`~glm5lib.diagnose.model.frontend`), one core per process: ``tok/s = min(engine, front end)``.

The client's latencies: ``TTFT_service(B) = ttft_fixed + ttft_per_token x B x I`` (fitted on levels
where nothing queued), ``TPOT = step - TTFT_service / O``; requests beyond ``B`` queue for
``O x step x (C / B - 1)`` first (Little's law, closed loop).

A forecast is *given* only where its band, the independent spreads of its terms (a level's
run-to-run spread, at least 10%; the step curve's alternatives and extrapolation; the eager
overhead's source; the front end's fit and extrapolation) combined in quadrature, stays within
+/-30% (:data:`MAX_BAND`), and no changed field lacks a term. Otherwise it is *not forecast*: the
point is still computed, for ordering, but the forecast names the one short measurement that
would settle it (``needs``): the engine's step benchmark at the batch, or one level with the change.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from glm5lib import engines
from glm5lib.diagnose.evidence import Evidence, load_evidence
from glm5lib.diagnose.model.curve import Curve, distinct_sizes, fit_curve
from glm5lib.diagnose.model.frontend import BUSY_PCT, FrontEnd, fit_frontend
from glm5lib.diagnose.model.graphs import Eager, pad, recorded_prior
from glm5lib.diagnose.model.levels import LevelPoint, as_float, level_points
from glm5lib.diagnose.model.prefill import PrefillForwards, off_graph_sizes, read_prefill
from glm5lib.diagnose.model.profile import StepProfile, lines_profile, read_profile
from glm5lib.diagnose.model.ttft import TtftLine, fit_ttft
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.stepmodel import StepParams

__all__ = ["MAX_BAND", "Bounds", "Forecast", "PerfModel", "RequestShape", "StepParams"]

log = logging.getLogger(__name__)

# A forecast is given only where its band stays within this (relative, either side).
MAX_BAND = 0.3
# The narrowest spread of a forecast: run-to-run spread of a sweep level on a busy machine.
BAND_FLOOR = 0.1
# A documented effect of a change that no level measured (more front-end processes, a larger stream
# interval): its spread.
DOCUMENTED_SPREAD = 0.15
# Every level's client starved of CPU: no level shows the engine alone.
HOST_PACED_SPREAD = 0.15
# Where the server's processes shared every core they may run on at every level, a step beyond the
# phase's batches widens by the front end's share of it, this much per doubling beyond. On two CPU cores
# split between vLLM and the client, with the front end about 0.37 of the step at 64, a cap-16 phase's
# forecast at 64 has read from +67% (the API server's share of the server core rose from 37% at 16
# running to 45% at 64: the served step came out 1.4-2x the offline one, 1.2x at 16) to -25% net of the
# launches' drift (-34% raw: the served step at 64 came out shorter than the per-request part read at
# 2-16 carried it to); 0.5 covers both ends, so a forecast that far beyond is withheld, naming the level.
SHARED_BEYOND_PER_DOUBLING = 0.5
# A graph step is at least this share of the eager step it replaces (graphs on from an all-eager phase).
GRAPH_FLOOR_SHARE = 0.05
# The share of each running request's future tokens an admission that reserves them keeps free once
# its ratio has decayed, at the engine's default scale: SGLang's ratio decays from 0.7 to 0.14 of that
# (0.098, here 0.1) over 600 decode steps, each scaled by schedule_conservativeness.
RESERVE_FLOOR = 0.1
# Token usage at or above this is a full pool (the model's and the rules' one threshold).
POOL_FULL = 0.85
# A prefill batch with at least this share of the per-step budget took the whole of it (the rules' and the watch's).
PREFILL_FULL = 0.9
# Why a prefill chunk's change is not forecast where prefill runs in forwards of its own (SGLang without
# --enable-mixed-chunk) until a benchmark times forwards of two sizes (:mod:`.prefill` then prices it): on
# one H100, 1,024-token prompts with the chunk raised from 256 to 8,192 gave +6% at 1 and +109% at 256
# concurrent requests where the step left alone said +0-20% (data/examples/h100-sglang-chunk).
PREFILL_FORWARDS = ("this engine prefills in forwards of their own, a fixed cost each beside their tokens, and "
                    "how many a request takes (one per chunk of a longer prompt, a share of one for shorter "
                    "ones) is folded into the steps fitted on this phase: the fixed part of a forward is not "
                    "in the evidence until the engine's benchmark times prefill forwards of two sizes")


@dataclasses.dataclass
class RequestShape:
    """Mean prompt and output tokens of one request."""

    input_len: float
    output_len: float


@dataclasses.dataclass
class Bounds:
    """The engine's limits as the model runs them (neutral names)."""

    running_cap: int | None = None
    token_budget: int | None = None
    prefill_chunk: int | None = None  # the most prompt tokens one prefill forward carries
    kv_tokens: int | None = None
    reserve_ratio: float = 0.0  # share of a request's future tokens the admission keeps free
    mixed_steps: bool = False  # prefill chunks and decode tokens in one step, under the budget
    graphs: bool = False  # decode steps replay CUDA graphs (up to the largest captured size)
    graph_max_batch: int | None = None  # the ceiling once the running cap no longer bounds capture
    graph_sizes: tuple[int, ...] = ()  # the captured decode sizes (a batch pads to the next)
    prefill_captured: tuple[int, ...] = ()  # the prefill token counts the start-up log says were captured
    workers: dict[str, int] = dataclasses.field(default_factory=dict)  # serving role -> processes
    stream_interval: int = 1

    @property
    def largest_graph(self) -> int | None:
        """The largest decode batch that replays a graph (None: any batch that runs, or graphs off)."""
        if not self.graphs:
            return None
        if self.graph_sizes:
            return max(self.graph_sizes)
        if self.graph_max_batch and self.running_cap:
            return min(self.graph_max_batch, self.running_cap)
        return self.graph_max_batch


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
    # changed fields the model has no term for (each with why): the forecast is not given
    unseen_changes: list[str] = dataclasses.field(default_factory=list)
    # what the model makes of the changes it reads (documented effects, fields it leaves alone)
    notes: list[str] = dataclasses.field(default_factory=list)
    # the band is within +/-MAX_BAND and every changed field has a term: a forecast to act on
    given: bool = True
    # where not given: the one short measurement that would settle it, in words and as data
    # ({"kind": "step_profile", "batches": [...], "graphs_off": True/False/None} or
    # {"kind": "level", "concurrency": c, "changes": {...}})
    needs: str = ""
    measurement: dict[str, Any] = dataclasses.field(default_factory=dict)
    # where each term came from
    sources: list[str] = dataclasses.field(default_factory=list)
    engine_tok_s: float | None = None
    frontend_tok_s: float | None = None
    eager: bool = False

    @property
    def band(self) -> float:
        """The band's larger half-width, relative to the forecast."""
        p = self.predicted_tok_s
        if not p:
            return math.inf
        return max(self.high_tok_s / p - 1.0, 1.0 - self.low_tok_s / p)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _int(v: Any) -> int | None:
    x = as_float(v)
    return int(x) if x is not None and x > 0 else None


def _rss(*parts: float) -> float:
    return math.sqrt(sum(max(p, 0.0) ** 2 for p in parts))


@dataclasses.dataclass
class PerfModel:
    """A step curve, the graph and front-end limits and the phase's limits, fitted on one phase."""

    curve: Curve
    bounds: Bounds
    workload: RequestShape
    engine: str
    # the curve is of eager steps (graphs off, or an engine without graphs): else of graph steps
    eager_base: bool
    eager: Eager | None = None
    frontend: FrontEnd = dataclasses.field(default_factory=FrontEnd)
    profile: StepProfile | None = None
    prefill: PrefillForwards | None = None  # the prefill priced per forward (a chunk change's term)
    ttft_line: TtftLine = dataclasses.field(default_factory=TtftLine)
    levels: list[LevelPoint] = dataclasses.field(default_factory=list, repr=False)
    server_args: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    config: Any = dataclasses.field(default=None, repr=False)  # the configuration the phase ran
    source: str | None = None
    graphs_apply: bool = True  # the host runs CUDA graphs at all (a GPU, or an engine that logs them)
    fit_error: float = 0.0  # mean relative throughput error on the phase's own levels
    seen: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    _adapter: Any = dataclasses.field(default=None, repr=False)
    _evidence: Any = dataclasses.field(default=None, repr=False)
    _bench: Any = dataclasses.field(default=None, repr=False)

    # -- compatibility views ---------------------------------------------------------------------
    @property
    def params(self) -> StepParams:
        return self.curve.params

    @property
    def exponent_fitted(self) -> bool:
        return self.curve.exponent_fitted

    @property
    def exponent_range(self) -> tuple[float, float]:
        return self.curve.exponent_range

    @property
    def holdout_error(self) -> float | None:
        return self.curve.holdout_error

    @property
    def starved_levels(self) -> list[int]:
        """The fitted levels whose client was starved of CPU by other processes on its host."""
        return [p.concurrency for p in self.levels if p.starved]

    @property
    def client_starved(self) -> bool:
        """Every fitted level's client was starved of CPU: the host paced the phase, and no forecast
        is given from it."""
        return bool(self.levels) and all(p.starved for p in self.levels)

    @property
    def host_paced(self) -> bool:
        """Every fitted level's client was starved, or every level's host had every core busy: the
        host's CPU, not the engine's step alone, set each level's pace (vLLM on two shared CPU
        cores), so no level shows what the engine alone would do, and two launches on such a host
        differ by tens of percent."""
        return self.client_starved or (bool(self.levels) and all(p.host_busy for p in self.levels))

    # -- fitting ------------------------------------------------------------------------------
    @classmethod
    def fit_phase(cls, phase_dir: str | Path, *, engine: str | None = None) -> PerfModel:
        """Fit on one phase folder (``run/baseline``), read once through :func:`load_evidence`."""
        path = Path(phase_dir)
        if not path.is_dir():
            raise ConfigError(f"phase folder {path} does not exist", field="phase")
        return cls.from_evidence(load_evidence(path.parent, phase=path.name), engine=engine)

    @classmethod
    def from_evidence(cls, ev: Evidence, *, engine: str | None = None, also: Sequence[Evidence] = ()) -> PerfModel:
        """Fit on an :class:`~glm5lib.diagnose.evidence.Evidence` bundle of one phase; ``also``: other
        phases of the same engine and model whose levels join the fit (each read under its own
        limits: a tuner's candidates, one cap each), the forecast's changes being made to ``ev``'s."""
        engine = engine or ev.engine
        args = dict(ev.server_args or {})
        adapter = engines.get(engine, default=engines.COMMAND)
        bounds, graphs_apply = _bounds_of(ev, adapter)
        points = _points_of(ev, bounds, adapter)
        for other in also:
            other_bounds, _ = _bounds_of(other, adapter)
            points += _points_of(other, other_bounds, adapter)
        if len(points) < 2:
            raise DiagnosisError(
                f"cannot fit a performance model on {ev.source or 'this phase'}: it needs at least 2 "
                f"sweep levels with a measured output throughput, got {len(points)}"
            )
        model = cls._fit(points, bounds, engine, adapter=adapter, profile=read_profile(ev.step_profile),
                         graphs_apply=graphs_apply, ev=ev)
        model.server_args = args
        model.config = ev.config
        # the stand-in writes its engine's log: its own benchmark times its steps
        model._bench = (engines.get(engines.STANDIN) if ev.standin else adapter).step_benchmark
        model.source = ev.source if not also else f"{ev.source} and {len(also)} other phase(s)"
        return model

    @classmethod
    def _fit(cls, points: list[LevelPoint], bounds: Bounds, engine: str, *, adapter: Any = None,
             profile: StepProfile | None = None, graphs_apply: bool = True, ev: Any = None) -> PerfModel:
        adapter = adapter or engines.get(engine, default=engines.COMMAND)
        frontend = fit_frontend(points, adapter.capabilities.serving_roles, bounds.workers)
        eager_base = not any(not p.eager for p in points)
        base = [p for p in points if p.eager == eager_base]
        # the step is read off levels the engine paced: not those a busy front end held back, nor
        # those whose batch swung, as long as leaving them out loses no batch size
        paced = [p for p in base if not _frontend_busy(p, bounds.workers)]
        if len(paced) < 2:
            paced = base
        steady = [p for p in paced if p.held is not False]
        use = steady if len(steady) >= 2 and len(distinct_sizes([p.running for p in steady])) == len(
            distinct_sizes([p.running for p in paced])) else paced
        if len(use) < 2:
            use = base if len(base) >= 2 else points
        sizes = bounds.graph_sizes if not eager_base else ()
        curve = fit_curve([p.running for p in use], [p.u_ms for p in use], [p.input_len for p in use],
                          [p.output_len for p in use], pad=lambda b: pad(b, sizes))
        wl = RequestShape(float(np.median([p.input_len for p in points])), float(np.median([p.output_len for p in points])))
        model = cls(curve=curve, bounds=bounds, workload=wl, engine=engine, eager_base=eager_base,
                    frontend=frontend, levels=points, graphs_apply=graphs_apply, _adapter=adapter, _evidence=ev)
        held = [p for p in base if p not in paced]
        if profile is None and held:
            profile = lines_profile(points, [p for p in points if p in paced], held)
            if profile is not None:
                held_back = ", ".join(f"{p.concurrency:,}" for p in held if p.line_step_ms)
                model.notes.append(f"the front end held back the client at {held_back}: the engine's step at those "
                                   f"batches is read off its decode lines, scaled on the levels it paced")
                model.profile = profile
        elif profile is not None:
            # read as served on the levels the engine paced: a busy front end's level says nothing of the step
            engine_paced = [p for p in points if not _frontend_busy(p, bounds.workers)] or points
            profile.fit_scale([(p.running, p.u_ms, p.eager) for p in engine_paced])
            model.profile = profile if profile.scale else None
            if model.profile is None:
                model.notes.append(f"{profile.describe()}: no level of the phase ran a batch it covers, so it "
                                   "could not be scaled to the served step and is not used")
        if _prefills_apart(bounds, adapter):
            model.prefill = PrefillForwards.fit(points, bounds.prefill_chunk,
                                                read_prefill(ev.step_profile if ev is not None else None), profile)
        model.eager = model._eager_overhead(points, ev)
        model.fit_error = curve.fit_error
        model.seen = {
            "batch": curve.batch_seen,
            "tokens_per_step": curve.tokens_seen,
            "input_len": (min(p.input_len for p in points), max(p.input_len for p in points)),
            "output_len": (min(p.output_len for p in points), max(p.output_len for p in points)),
            "concurrency": (min(p.concurrency for p in points), max(p.concurrency for p in points)),
            "levels": len(use),
        }
        model._fit_latency()
        return model

    def _eager_overhead(self, points: Sequence[LevelPoint], ev: Any) -> Eager | None:
        """The CPU's launch time of an eager step, from the best source there is."""
        if not self.graphs_apply:
            return None
        wl_i, wl_o = self.workload.input_len, self.workload.output_len
        other = [p for p in points if p.eager != self.eager_base]
        if other and not self.eager_base:
            found = [Eager.launch_from(p.u_ms, self._curve_step(p.running, p.input_len, p.output_len, graph=False))
                     for p in other]
            found = [x for x in found if x]
            if found:
                batches = ", ".join(f"{p.running:g}" for p in other)
                spread = max(self.curve.spread(max(p.running for p in other), wl_i, wl_o))
                return Eager(float(np.median(found)), max(spread, 0.1), f"this phase's eager levels (batch {batches})",
                             "phase")
        prof = self.profile
        if prof is not None and prof.rows.get("eager") and prof.rows.get("graph"):
            found = []
            for b, s in prof.rows["eager"]:
                g = prof.raw(b, False)
                x = Eager.launch_from(s, g) if g is not None else None
                if x:
                    found.append(x)
            if found:
                scale = prof.scale.get("graph") or prof.scale.get("eager") or 1.0
                return Eager(float(np.median(found)) * scale, max(max(prof.spread.values() or [0.05]), 0.05),
                             f"the step profile's graph and eager steps ({prof.source})", "profile")
        if prof is not None and not self.eager_base and prof.rows.get("eager"):
            # eager steps only: against this phase's graph steps at the batches both cover
            lo, hi = self.curve.batch_seen
            found = [Eager.launch_from(s * prof.scale.get("eager", 1.0), self._curve_step(b, wl_i, wl_o, graph=False))
                     for b, s in prof.rows["eager"] if lo / 1.05 <= b <= hi * 1.05]
            found = [x for x in found if x]
            if found:
                return Eager(float(np.median(found)), max(prof.spread.get("eager", 0.05), 0.1),
                             f"the step profile's eager steps against this phase's graph steps ({prof.source})", "profile")
        return recorded_prior(ev) if ev is not None else None

    def _fit_latency(self) -> None:
        """TTFT's own part (no queue): ``ttft_fixed + ttft_per_token * N * I`` (:mod:`.ttft`)."""
        levels = [p for p in self.levels if p.eager == self.eager_base] or self.levels
        self.ttft_line = fit_ttft(levels, self._prefill_queued) or TtftLine()

    def _prefill_queued(self, p: LevelPoint) -> bool:
        """Level ``p`` ran fewer requests than it offered where only its load bound the batch: those
        not running waited for their prefill, not for a place under a cap or in the pool."""
        _, binding = self.running(p.concurrency, self.bounds, RequestShape(p.input_len, p.output_len))
        return binding == "load" and p.concurrency > 1.05 * p.running

    # -- the engine step ----------------------------------------------------------------------------
    def _curve_step(self, batch: float, input_len: float, output_len: float, *, graph: bool,
                    sizes: Sequence[int] = (), params: StepParams | None = None) -> float:
        padded = pad(batch, sizes) if graph else batch
        return self.curve.step(batch, input_len, output_len, padded=padded, params=params)

    @property
    def shares_cores(self) -> bool:
        """At every fitted level the server's processes used every core they may run on (vLLM on one
        CPU core beside its own API server): the front end's work and the engine's step took turns."""
        return bool(self.levels) and all(p.cores_shared for p in self.levels)

    def contends_beyond(self, batch: float) -> bool:
        """``batch`` is beyond the phase's batches on a server whose front end shared the engine's cores
        (:attr:`shares_cores`): how the two contend there is not in the evidence."""
        return self.shares_cores and bool(self.frontend) and batch > self.seen["batch"][1] * 1.05

    def engine_step(self, batch: float, bounds: Bounds, wl: RequestShape) -> dict[str, Any]:
        """One step at ``batch`` under ``bounds``: ``step_ms``, its relative ``down``/``up`` spread
        on throughput, ``eager``, ``sources`` and what is ``missing`` (None: nothing). Where the
        server's processes shared their cores at every level, a step beyond the batches the phase
        ran widens by the front end's share of it (:data:`SHARED_BEYOND_PER_DOUBLING`)."""
        out = self._engine_step(batch, bounds, wl)
        if self._chunk_changed(bounds):
            step, down, up, source = self.prefill.step(out["step_ms"], batch, bounds.prefill_chunk, wl.input_len,
                                                       wl.output_len)
            out.update(step_ms=step, down=out["down"] + down, up=out["up"] + up, sources=[*out["sources"], source])
        if not self.contends_beyond(batch):
            return out
        seen = self.seen["batch"][1]
        # CPU ms the front end spends on a step's tokens (per_token_pct: % of a core per tok/s)
        front_ms = batch * sum(r.per_token_pct for r in self.frontend.roles) * 10.0
        share = min(front_ms / max(out["step_ms"], 1e-9), 1.0)
        extra = share * SHARED_BEYOND_PER_DOUBLING * math.log2(batch / seen)
        out["down"], out["up"] = out["down"] + extra, out["up"] + extra
        out["sources"] = [*out["sources"], (
            f"the server's processes used every core they may run on at every level, so its front end's work "
            f"({front_ms:.1f} ms of CPU for a step's {batch:g} tokens) takes turns with the step on the same cores; "
            f"beyond the {seen:.0f} running the phase ran, how the two contend is not in the evidence (the band "
            f"widens {extra:.0%})")]
        return out

    def _engine_step(self, batch: float, bounds: Bounds, wl: RequestShape) -> dict[str, Any]:
        largest = bounds.largest_graph
        eager = self.graphs_apply and (not bounds.graphs or (largest is not None and batch > largest))
        if not self.graphs_apply:
            eager = self.eager_base
        sizes = bounds.graph_sizes if not eager else ()
        sources: list[str] = []
        missing = None
        prof = self.profile.step(pad(batch, sizes) if sizes else batch, eager) if self.profile else None
        if prof is not None:
            step, spread = prof
            sources.append(f"the step at batch {batch:g} from the {self.profile.source} step profile")
            return {"step_ms": step, "down": spread, "up": spread, "eager": eager, "sources": sources, "missing": None}
        down, up = self.curve.spread(batch, wl.input_len, wl.output_len, pad(batch, sizes) if sizes else None)
        if eager == self.eager_base or not self.graphs_apply:
            step = self._curve_step(batch, wl.input_len, wl.output_len, graph=not eager, sizes=sizes)
        elif eager:  # a graph-step curve, an eager step: the CPU's launches overlapped with the GPU's work
            g = self._curve_step(batch, wl.input_len, wl.output_len, graph=False)
            if self.eager is None:
                step, missing = g, "eager"
            else:
                step, shortest, longest = self.eager.step(g, g / (1 + up), g * (1 + down))
                down, up = longest / step - 1.0, step / shortest - 1.0
                sources.append(self.eager.describe())
        else:  # an eager-step curve, a graph step: what is left of it once the launches overlap
            e = self._curve_step(batch, wl.input_len, wl.output_len, graph=False)
            if self.eager is None:
                step, missing = e, "graphs"
            else:
                launch = self.eager.launch_ms
                floor = GRAPH_FLOOR_SHARE * e
                step = max(Eager.graph_from(e, launch), floor)
                low = max(Eager.graph_from(e / (1 + up), launch * (1 + self.eager.spread)), floor)
                high = max(e * (1 + down) - launch * (1 - self.eager.spread), step)
                down, up = high / step - 1.0, step / max(low, 1e-6) - 1.0
                sources.append(self.eager.describe())
        return {"step_ms": step, "down": down, "up": up, "eager": eager, "sources": sources, "missing": missing}

    # -- changes ------------------------------------------------------------------------------------
    def with_changes(self, changes: Mapping[str, Any] | None) -> tuple[Bounds, list[str], list[str]]:
        """The bounds after ``changes`` (engine field names), the notes on what the model makes of
        them, and the changed fields it has no term for (each with why)."""
        b = dataclasses.replace(self.bounds, workers=dict(self.bounds.workers))
        notes: list[str] = []
        unseen: list[str] = []
        changes = dict(changes or {})
        adapter = self._adapter or engines.get(self.engine, default=engines.COMMAND)
        roles = {r.workers_field: r for r in adapter.capabilities.serving_roles if r.workers_field}
        context = {**self.server_args, **changes}
        graph_max = b.graph_max_batch
        resize = False
        for key, value in changes.items():
            k = str(key)
            name = k.lstrip("-").replace("-", "_")
            if name in roles:
                n = _int(value) or 1
                b.workers[roles[name].name] = n
                notes.append(f"{k}={value}: {n} {roles[name].name} process{'es' if n != 1 else ''}, one core each "
                             "(the engine's own design; no level measured it)")
                continue
            found, _ = engines.limit_changes({k: value}, adapter, context)
            off = off_graph_sizes(adapter, self.server_args, found["prefill_chunk"], captured=b.prefill_captured,
                                  base_chunk=self.bounds.prefill_chunk) if "prefill_chunk" in found and b.graphs else None
            if off:  # full chunks eager in one and under a graph in the other: a cost no phase here holds
                unseen.append(f"{k}={value}: {off}")
            if "prefill_chunk" in found and self.prefill is not None and not b.mixed_steps:
                found.pop("token_budget", None)  # the chunk's one field: priced per forward below
            for limit, v in found.items():
                resize |= limit in ("running_cap", "graph_max_batch", "graphs_off")
                if limit == "graph_max_batch":
                    graph_max = _int(v)
                self._apply(limit, v, k, value, b, notes, unseen)
            if found:
                continue
            if engines.neutral_field(k, adapter):
                notes.append(f"{k}={value}: not modelled ({engines.neutral_field(k, adapter)})")
            elif adapter.capabilities.limit_of(k) is None and _is_companion(k, changes, adapter, context):
                continue
            else:
                unseen.append(f"{k}={value}: the model has no term for this field")
        if resize and b.graphs:
            b.graph_max_batch = graph_max
            sizes = adapter.graph_sizes(graph_max, b.running_cap) if graph_max else ()
            if not sizes and self.bounds.graph_sizes and graph_max == self.bounds.graph_max_batch:
                sizes = tuple(s for s in self.bounds.graph_sizes if not b.running_cap or s <= b.running_cap)
            b.graph_sizes = sizes
        return b, notes, unseen

    def _apply(self, limit: str, v: Any, k: str, value: Any, b: Bounds, notes: list[str], unseen: list[str]) -> None:
        if limit == "running_cap":
            b.running_cap = _int(v) if v is not None else None
        elif limit == "prefill_chunk" and self.prefill is not None and not b.mixed_steps and _int(v):
            b.prefill_chunk = _int(v)
        elif limit in ("token_budget", "prefill_chunk"):
            if not b.mixed_steps:
                why = f"{k}={value}: {PREFILL_FORWARDS}"
                if _int(v) != self.bounds.token_budget and why not in unseen:  # one field may set both limits
                    unseen.append(why)
                return
            b.token_budget = _int(v) if v is not None else None
        elif limit == "kv_tokens":
            b.kv_tokens = _int(v) if v is not None else self.bounds.kv_tokens
        elif limit == "graphs_off":
            if not self.graphs_apply:
                notes.append(f"{k}={value}: not modelled (this host runs no CUDA graphs)")
                return
            b.graphs = not bool(v)
        elif limit == "graph_max_batch":
            if not self.graphs_apply:
                notes.append(f"{k}={value}: not modelled (this host runs no CUDA graphs)")
        elif limit == "frontend_workers":
            roles = (self._adapter or engines.get(self.engine)).capabilities.serving_roles
            if roles:
                b.workers[roles[0].name] = _int(v) or 1
                notes.append(f"{k}={value}: {b.workers[roles[0].name]} {roles[0].name} processes, one core each "
                             "(the engine's own design; no level measured it)")
        elif limit == "stream_interval":
            b.stream_interval = _int(v) or 1
            notes.append(f"{k}={value}: one streamed chunk per {b.stream_interval} tokens divides the per-chunk "
                         "work of the front end (the engine's own design; no level measured it)")
        elif limit == "admission_reserve":
            if not b.reserve_ratio:
                notes.append(f"{k}={value}: not modelled (this engine keeps no room for future tokens)")
                return
            held = self._reserve_held()
            if held:
                unseen.append(f"{k}={value}: {held}")
                return
            b.reserve_ratio = _reserve_ratio(v)
            notes.append(f"{k}={value}: the admission keeps {b.reserve_ratio:.0%} of each running request's "
                         f"future tokens free once its ratio has decayed ({self.bounds.reserve_ratio:.0%} now)")
        elif limit == "kv_fraction":
            unseen.append(f"{k}={value}: the model has no term for this field (the KV pool it gives is "
                          "written at start-up: set the pool in tokens to forecast it)")

    def _reserve_held(self) -> str | None:
        """Why the decayed reserve does not describe this phase, or None: a level the pool bounds in the
        model never filled during it, so the admission's ratio had not decayed (a real pool-bound SGLang
        level peaks at 99-100%: data/examples/h200-sglang-kv)."""
        for p in self.levels:
            shape = RequestShape(p.input_len, p.output_len)
            _, binding = self.running(p.concurrency, self.bounds, shape)
            if binding == "kv_tokens" and p.peak_token_usage is not None and p.peak_token_usage < POOL_FULL:
                return (f"at concurrency {p.concurrency} the pool bounds the batch, yet it ran {p.running:.0f} with "
                        f"the pool at most {p.peak_token_usage:.0%} full: the admission reserve held it back before "
                        "its ratio decayed, which the model's term (the reserve once decayed) does not describe")
        return None

    # -- the batch ----------------------------------------------------------------------------------
    def running(self, concurrency: int, bounds: Bounds, workload: RequestShape) -> tuple[float, str]:
        """The batch the engine runs at ``concurrency`` under ``bounds``, and what binds it."""
        options: list[tuple[float, str]] = [(float(concurrency), "load")]
        if bounds.running_cap:
            options.append((float(bounds.running_cap), "running_cap"))
        ctx = workload.input_len + workload.output_len
        if bounds.kv_tokens and ctx > 0:
            hold = workload.input_len + workload.output_len * (0.5 + 0.5 * bounds.reserve_ratio)
            options.append((max(1.0, math.floor(bounds.kv_tokens / max(hold, ctx * 0.5))), "kv_tokens"))
        if bounds.mixed_steps and bounds.token_budget and ctx > 0:
            options.append((max(1.0, bounds.token_budget * workload.output_len / ctx), "token_budget"))
        return min(options, key=lambda t: t[0])

    def kv_bound(self, workload: RequestShape | None = None, *, headroom: float = 0.9) -> int | None:
        """The most requests the KV pool holds at their full length (``headroom`` of it), or None."""
        wl = workload or self.workload
        ctx = wl.input_len + wl.output_len
        if not self.bounds.kv_tokens or ctx <= 0:
            return None
        return max(1, int(headroom * self.bounds.kv_tokens // ctx))

    # -- forecasting -----------------------------------------------------------------------------
    def forecast(self, changes: Mapping[str, Any] | None, concurrency: Sequence[int] | int, *,
                 input_len: int | None = None, output_len: int | None = None) -> list[Forecast]:
        """Throughput, TTFT and TPOT at each offered concurrency once ``changes`` are made."""
        levels = _levels(concurrency)
        if input_len is not None and input_len < 1:
            raise ConfigError(f"input_len must be at least 1, got {input_len}", field="input_len")
        if output_len is not None and output_len < 1:
            raise ConfigError(f"output_len must be at least 1, got {output_len}", field="output_len")
        if changes is not None and not isinstance(changes, Mapping):
            raise ConfigError(f"changes must map engine field names to values, got {type(changes).__name__}",
                              field="changes")
        bounds, notes, unseen = self.with_changes(changes)
        wl = RequestShape(float(input_len) if input_len is not None else self.workload.input_len,
                      float(output_len) if output_len is not None else self.workload.output_len)
        return [self._one(c, bounds, wl, notes, unseen, dict(changes or {})) for c in levels]

    def _one(self, c: int, bounds: Bounds, wl: RequestShape, notes: list[str], unseen: list[str],
             changes: Mapping[str, Any]) -> Forecast:
        batch, by = self.running(c, bounds, wl)
        step = self.engine_step(batch, bounds, wl)
        engine_tps = 1000.0 * batch / step["step_ms"]
        sources = list(step["sources"])
        e_down, e_up = step["down"], step["up"]
        thr, down, up = engine_tps, e_down, e_up
        front_tps = None
        gain = bounds.stream_interval / max(self.bounds.stream_interval, 1)
        role = self.frontend.binding(bounds.workers, gain, batch) if self.frontend else None
        documented = []
        if role is not None:
            n = bounds.workers.get(role.name, role.workers)
            front_tps = role.ceiling(n, gain, batch)
            f_down, f_up = role.band(batch, n)
            if n != role.workers or (gain != 1.0 and role.per_chunk):
                documented.append(DOCUMENTED_SPREAD)
            if front_tps < engine_tps:
                thr, by = front_tps, f"frontend:{role.name}"
                down, up = f_down, f_up
                sources.append(f"the {role.name} front end's ceiling: {role.describe(batch)}")
            # the lower end of either may bind
            low_e = engine_tps * (1 - e_down)
            low_f = front_tps * (1 - f_down)
            down = max(down, 1 - min(low_e, low_f) / thr)
            high = min(engine_tps * (1 + e_up), front_tps * (1 + f_up))
            up = max(high / thr - 1.0, 0.0)
        noise = max(self.fit_error, BAND_FLOOR)
        extra = [noise, *documented]
        if self.host_paced:
            extra.append(HOST_PACED_SPREAD)
        w_down = min(_rss(down, *extra), 0.95)
        w_up = _rss(up, *extra)
        low, high = thr * (1 - w_down), thr * (1 + w_up)
        _lo_b, _hi_b = self.seen["batch"]
        extrapolated = self._extrapolated(batch, step["eager"])
        missing = step["missing"]
        # a phase whose client was starved at every level shows no engine alone to forecast from, at any
        # band (of the four levels given from such recorded vLLM phases whose batch held, one held its band)
        given = not unseen and missing is None and max(w_down, w_up) <= MAX_BAND and not self.client_starved
        needs, measurement = ("", {}) if given else self._needs(c, batch, bounds, wl, changes, unseen, missing,
                                                               step["eager"], by)
        # latencies: service split into the prefill wait and decode, queueing beyond the batch
        o = max(wl.output_len, 1.0)
        u = 1000.0 * batch / thr
        service = o * u
        ttft_s, ttft_top = self.ttft_line.at(batch * wl.input_len)
        if self._chunk_changed(bounds):
            ratio = self.prefill.ratio(batch, bounds.prefill_chunk, wl.input_len)  # the prompts' own forwards
            ttft_s, ttft_top = ttft_s * ratio, ttft_top * ratio
        tpot = max(u - ttft_s / o, 0.5 * u) if o > 1 else None
        wait = service * max(c / batch - 1.0, 0.0)
        ttft = wait + ttft_s
        rel_lo, rel_hi = w_up / (1 + w_up), w_down / max(1 - w_down, 0.05)  # a lower throughput, a longer time
        return Forecast(
            concurrency=int(c), predicted_tok_s=float(thr), low_tok_s=float(low), high_tok_s=float(high),
            ttft_ms=float(ttft), tpot_ms=None if tpot is None else float(tpot),
            ttft_low_ms=float(ttft * (1 - rel_lo)), ttft_high_ms=float((wait + ttft_top) * (1 + rel_hi)),
            tpot_low_ms=None if tpot is None else float(tpot * (1 - rel_lo)),
            tpot_high_ms=None if tpot is None else float(tpot * (1 + rel_hi)),
            running=float(batch), binding_limit=by, extrapolated=bool(extrapolated),
            unseen_changes=list(unseen), notes=list(notes), given=bool(given), needs=needs,
            measurement=measurement, sources=sources,
            engine_tok_s=float(engine_tps), frontend_tok_s=None if front_tps is None else float(front_tps),
            eager=bool(step["eager"]),
        )

    def _needs(self, c: int, batch: float, bounds: Bounds, wl: RequestShape, changes: Mapping[str, Any],
               unseen: list[str], missing: str | None, eager: bool, by: str) -> tuple[str, dict[str, Any]]:
        """The one short measurement that would settle a forecast that is not given: in words, and as
        data a workbook or the tuner can act on."""
        level = (f"one level at concurrency {c} with {_changes_text(changes)} (one launch)" if changes
                 else f"one level at concurrency {c} (one launch)")
        as_level = {"kind": "level", "concurrency": int(c), "changes": dict(changes)}
        if unseen and all(PREFILL_FORWARDS in u for u in unseen) and self._prices_prefill_with_profile():
            bench = self.benchmark_text([1, 4], wl, changes=changes)
            if bench:
                return (f"the fixed cost of one prefill forward beside its tokens: {bench} (prefill forwards of two "
                        f"sizes), or {level}", {"kind": "step_profile", "batches": [1, 4], "graphs_off": None})
        if unseen:
            return f"{level}: the model has no term for {', '.join(dict.fromkeys(u.split(':')[0] for u in unseen))}", as_level
        if self.client_starved and missing is None:
            return (f"the baseline again with its client on cores of its own (GLM5_CPUS=split) or on a quieter host, "
                    f"or {level}: the phase's client was starved of CPU at every level, so its host, not the engine, set every level's pace"), as_level
        packing = self.prefill.packing_text(bounds.prefill_chunk, wl.input_len) if self.prefill else ""
        if packing and missing is None and not self._extrapolated(batch, eager):  # the step is the phase's own
            return f"{level}: {packing}", as_level
        graphs_off = True if missing == "eager" else (False if missing == "graphs" else None)
        if missing == "eager":
            what = "what an eager step costs on this deployment (every step of this phase replayed a CUDA graph)"
        elif missing == "graphs":
            what = "what a graph step saves on this deployment (every step of this phase ran eagerly)"
        else:
            lo, hi = self.seen["batch"]
            what = f"the step at batch {batch:g} (this phase ran {lo:g}-{hi:g})"
        if by.startswith("frontend:"):
            # the level measures the front end and the engine together; the benchmark, the engine alone
            text = f"{level}: the {by.split(':', 1)[1]} front end's cost at {batch:g} running streams is beyond what this phase ran"
            bench = self.benchmark_text([batch], wl, graphs_off=graphs_off, changes=changes) if missing is not None or self._extrapolated(batch, eager) else ""
            if bench:
                text += f"; nor is {what} in the evidence ({bench} measures the engine alone)"
            return text, as_level
        if missing is None and self.profile is not None and self.profile.covers(batch, eager):
            lo, hi = self.seen["batch"]
            if self.contends_beyond(batch):
                return (f"{level}: the step profile covers batch {batch:g}, but the server's processes shared every "
                        f"core they may run on, and how its front end's work contends with a step beyond the "
                        f"{hi:.0f} running this phase ran is not in the evidence"), as_level
            if batch <= hi * 1.05:  # the phase's own batches: the band is what the change's term moves
                why = (f"a prefill forward's fixed part, read at {min(a for _, a in self.prefill.fixed):.1f}-"
                       f"{max(a for _, a in self.prefill.fixed):.1f} ms over the phase's levels,"
                       if self._chunk_changed(bounds) else f"the phase's own spread at batch {batch:g}")
                return f"{level}: {why} moves the forecast beyond +/-{MAX_BAND:.0%}", as_level
            return (f"{level}: the step profile covers batch {batch:g}, but what each request adds to a served "
                    f"step was read at batches {lo:g}-{hi:g} only"), as_level
        bench = self.benchmark_text([batch], wl, graphs_off=graphs_off, changes=changes)
        if not bench:
            return f"{what}: {level}", as_level
        return (f"{what}: {bench}, or {level}",
                {"kind": "step_profile", "batches": [max(1, round(batch))], "graphs_off": graphs_off})

    def _extrapolated(self, batch: float, eager: bool) -> bool:
        """The step at ``batch`` is read off the curve beyond the phase's batches, with no profile covering it."""
        return self.curve.beyond(batch) > 1.1 and not (self.profile and self.profile.covers(batch, eager))

    def _chunk_changed(self, bounds: Bounds) -> bool:
        """``bounds`` set a prefill chunk other than the phase's, and the model prices the forwards."""
        return self.prefill is not None and bool(bounds.prefill_chunk) and bounds.prefill_chunk != self.prefill.chunk

    def _prices_prefill_with_profile(self) -> bool:
        """A profile with prefill forwards of two sizes would price a chunk change (:meth:`_fit`'s
        condition for the term): the phase's chunk is known and its engine prefills in forwards of its own."""
        adapter = self._adapter or engines.get(self.engine, default=engines.COMMAND)
        return bool(self.bounds.prefill_chunk and _prefills_apart(self.bounds, adapter))

    def benchmark_text(self, batches: Sequence[float], wl: RequestShape | None = None, *, graphs_off: bool | None = None,
                       changes: Mapping[str, Any] | None = None) -> str:
        """The engine's offline step benchmark at ``batches`` with this phase's arguments, as a
        command to run (one launch, no HTTP server); "" where the engine has none. Of ``changes``,
        those that set which steps replay a graph (its ceiling, graphs off) apply: the step the
        forecast lacks is the changed deployment's (a graph ceiling raised to 1,024 times a graph
        step at 1,024, not the phase's eager one)."""
        adapter = self._adapter or engines.get(self.engine, default=engines.COMMAND)
        bench = self._bench or adapter.step_benchmark
        if bench is None:
            return ""
        wl = wl or self.workload
        config = self.config if self.config is not None else self.server_args
        try:
            argv = bench.command(config, sorted({round(b) for b in batches}), round(wl.input_len),
                                 round(wl.output_len), graphs_off=graphs_off,
                                 changes=engines.step_kind_changes(changes, adapter, self.server_args))
        except (ConfigError, ValueError, KeyError, TypeError) as exc:
            log.debug("no benchmark command: %s", exc)
            return ""
        return f"`{shlex.join(argv)}` (one launch, no HTTP server)"

    # -- queries ----------------------------------------------------------------------------------
    def ceiling(self, changes: Mapping[str, Any] | None = None, *, concurrency: int | None = None) -> Forecast:
        """The most throughput ``changes`` allow: the forecast at the offered load where the batch's
        own limits (cap, KV pool, budget) bind, or at ``concurrency``."""
        bounds, _, _ = self.with_changes(changes)
        c = concurrency
        if c is None:
            top = [x for x in (bounds.running_cap, self.kv_bound()) if x]
            c = int(min(top)) if top else int(max(p.concurrency for p in self.levels))
        [f] = self.forecast(changes, [max(int(c), 1)])
        return f

    # -- description ----------------------------------------------------------------------------
    def describe(self) -> str:
        parts = [("eager " if self.eager_base and self.graphs_apply else "") + self.curve.describe()]
        b = self.bounds
        if b.graphs and b.graph_sizes:
            parts.append(f"CUDA graphs captured up to batch {max(b.graph_sizes)} (a batch pads to the next captured size)")
        if self.eager is not None:
            parts.append(self.eager.describe())
        elif self.graphs_apply and b.graphs:
            parts.append("what an eager step costs is not in the evidence")
        if self.frontend:
            parts.append("front end: " + self.frontend.describe())
        if self.profile is not None:
            parts.append(self.profile.describe())
        if self.prefill is not None:
            parts.append(self.prefill.describe())
        if self.starved_levels:
            parts.append(f"the client was starved of CPU at {'every level' if self.host_paced else 'levels'} "
                         f"{', '.join(map(str, self.starved_levels))}, so its host, not the engine alone, paced "
                         + ("them: no level is forecast from it" if self.client_starved else "those"))
        elif self.host_paced:
            parts.append("every core of the host was busy at every level, so the host, not the engine alone, "
                         "paced them and the band widens 15%")
        parts += self.notes
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "params": self.curve.params.to_dict(),
            "bounds": dataclasses.asdict(self.bounds),
            "workload": dataclasses.asdict(self.workload),
            "fit_error": self.fit_error,
            "seen": self.seen,
            "exponent_fitted": self.curve.exponent_fitted,
            "exponent_range": list(self.curve.exponent_range),
            "eager_base": self.eager_base,
            "eager": None if self.eager is None else dataclasses.asdict(self.eager),
            "frontend": [dataclasses.asdict(r) for r in self.frontend.roles],
            "profile": None if self.profile is None else self.profile.describe(),
            "ttft_fixed_ms": self.ttft_line.fixed_ms,
            "ttft_per_token_ms": self.ttft_line.per_token_ms,
            "holdout_error": self.curve.holdout_error,
            "holdout_per_doubling": self.curve.holdout_per_doubling,
            "starved_levels": self.starved_levels,
        }


def reserve_scale(value: Any) -> float:
    """The engine's ``admission_reserve`` scale as a number (1, its default, where unset or unreadable)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else 1.0


def _reserve_ratio(scale: Any) -> float:
    """The share of each running request's future tokens the admission keeps free once its ratio
    has decayed, at the engine's ``admission_reserve`` scale."""
    return RESERVE_FLOOR * reserve_scale(scale)


def _bounds_of(ev: Any, adapter: Any) -> tuple[Bounds, bool]:
    """The limits one phase ran under, as the model runs them, and whether its host runs CUDA graphs."""
    caps = adapter.capabilities
    args = dict(ev.server_args or {})
    lim = engines.limits_of(adapter, args, ev.startup or {}, ev.environment)
    cap = lim.running_cap
    pool = lim.kv_tokens or ev.kv_pool_tokens()[0]
    budget = _budget(ev, adapter, lim)
    gpus = bool((ev.environment or {}).get("gpus"))
    graphs_apply = bool(caps.logs_graph_use or gpus)
    graphs_on = graphs_apply and not lim.graphs_off
    captured = (ev.startup or {}).get("cuda_graph_batch_sizes")
    ceiling = lim.graph_max_batch
    field = caps.field("graph_max_batch")
    if graphs_on and ceiling is None and field:
        # capture stopped at the running cap: the engine's own ceiling once the cap is raised
        auto = adapter.automatic(field, args, ev.startup or {}, ev.environment)
        ceiling = _int(auto.value) if auto is not None else None
    sizes: tuple[int, ...] = ()
    if graphs_on:
        if isinstance(captured, (list, tuple)) and captured:
            sizes = tuple(sorted(int(b) for b in captured))
        else:
            sizes = adapter.graph_sizes(ceiling, cap)
    roles = caps.serving_roles
    workers = {r.name: (_int(args.get(r.workers_field)) or 1) if r.workers_field else 1 for r in roles}
    return Bounds(
        running_cap=cap, token_budget=budget, prefill_chunk=_int(lim.prefill_chunk), kv_tokens=pool,
        reserve_ratio=_reserve_ratio(lim.admission_reserve) if caps.reserves_future_tokens else 0.0,
        mixed_steps=caps.mixed_steps,
        graphs=graphs_on, graph_max_batch=ceiling if graphs_on else None, graph_sizes=sizes,
        prefill_captured=tuple(adapter.captured_prefill(ev.startup)),
        workers=workers, stream_interval=_int(lim.stream_interval) or 1,
    ), graphs_apply


def _prefills_apart(bounds: Bounds, adapter: Any) -> bool:
    """The engine prefills in forwards of its own, between decode steps, and logs them (SGLang)."""
    return not bounds.mixed_steps and adapter.capabilities.logs_prefill_lines


def _points_of(ev: Any, bounds: Bounds, adapter: Any) -> list[LevelPoint]:
    """One phase's levels under its own limits, with whether each level's batch held."""
    held: dict[int, bool | None] = {}
    try:
        table = ev.level_table()
        held = {int(r.concurrency): (None if r.batch_held is None or (isinstance(r.batch_held, float)
                                                                      and math.isnan(r.batch_held))
                                     else bool(r.batch_held)) for r in table.itertuples()}
    except (KeyError, ValueError, TypeError) as exc:
        log.debug("no level table: %s", exc)
    return level_points(ev, cap=bounds.running_cap, budget=bounds.token_budget if bounds.mixed_steps else None,
                        graphs=bounds.graphs, graph_max=bounds.largest_graph, roles=adapter.capabilities.serving_roles,
                        held=held, step_paced=adapter.capabilities.decode_lines_per_steps)


def _frontend_busy(p: LevelPoint, workers: Mapping[str, int]) -> bool:
    return any(pct >= BUSY_PCT * max(workers.get(role, 1), 1) for role, pct in p.frontend.items())


def _changes_text(changes: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in changes.items())


def _levels(concurrency: Sequence[int] | int) -> list[int]:
    raw = [concurrency] if isinstance(concurrency, (int, np.integer)) else list(concurrency)
    if not raw:
        raise ConfigError("concurrency: give at least one level, e.g. [64, 256]", field="concurrency")
    out = []
    for c in raw:
        if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
            raise ConfigError(f"concurrency levels must be integers of at least 1, got {c!r}", field="concurrency")
        out.append(int(c))
    return out


def _budget(ev: Any, adapter: Any, lim: Any) -> int | None:
    """The per-step token budget: the limit in force, else the value the engine chose for it."""
    if lim.token_budget:
        return int(lim.token_budget)
    field = adapter.capabilities.field("token_budget")
    if adapter.capabilities.resolves_automatic_values and field:
        try:
            auto = adapter.automatic(field, ev.server_args or {}, ev.startup, ev.environment)
        except (ConfigError, KeyError, TypeError, ValueError):
            return None
        return _int(auto.value) if auto is not None else None
    return None


def _is_companion(name: str, changes: Mapping[str, Any], adapter: Any, context: Mapping[str, Any]) -> bool:
    """A field that only qualifies another change the vocabulary translates (vLLM's block size
    beside its pool in blocks): translated together with it, so not unseen on its own."""
    others = {k: v for k, v in changes.items() if k != name}
    with_it, _ = engines.limit_changes(others, adapter, context)
    without, _ = engines.limit_changes(others, adapter, {k: v for k, v in context.items() if k != name})
    return bool(with_it) and with_it != without

