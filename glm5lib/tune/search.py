"""The tuning loop: launch a candidate, measure it, refit, choose the next, stop when nothing
left can beat the best by more than the noise or the launch budget is spent.

:func:`tune` runs it; :func:`grid` measures the exhaustive grid over the same lever, so the
tuner can be checked against brute force. Both write one row per candidate to ``tune.csv``
(:data:`glm5lib.rundir.TUNE_CSV`) as soon as it is measured, each candidate being a phase of
the run (``tune-1``, ``tune-2``..., ``grid-1``...) with all its evidence. A rerun of the same
command after an interruption reads the candidates already measured instead of launching them
again (the loop is deterministic given its measurements, so it takes the same path). The best
limit-meeting candidate is saved as a config file the workbook loads (``tune-best.json``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from glm5lib import cpus as cpu_layout
from glm5lib import engines, rundir
from glm5lib.diagnose.evidence import Evidence
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.loadgen.settings import check_concurrencies
from glm5lib.phase import measure_phase
from glm5lib.tune.goal import Goal, goodput_of
from glm5lib.tune.levers import Lever, engine_levers, lever_for, parse_lever, safe_bounds
from glm5lib.tune.model import Landscape, Point, perfmodel_forecaster
from glm5lib.tune.phases import EvidenceCache

__all__ = ["TUNE_COLUMNS", "SearchOptions", "TuneResult", "Workload", "config_of", "grid", "grid_values", "load_tune",
           "recheck", "tune"]

log = logging.getLogger(__name__)

TUNE_COLUMNS = [
    "kind", "step", "phase", "lever", "value", "changes", "objective", "output_throughput", "goodput",
    "slo_met", "binding_limit", "binding_ratio", "running", "predicted_objective", "predicted_binding",
    "prediction_source", "reason",
]


#: How far past its room a measured binding ratio may read and still count as having it (a
#: level's figures are not more exact than this).
ROOM_TOLERANCE = 0.01


def _room(margin: float, noise: float) -> float:
    """The largest binding ratio a measured candidate may have and still count as meeting the
    limits with the margin's room: a measurement already shows where its level sits, so it needs
    the margin less the noise any measurement carries (with the defaults, 3% and 3%, every
    candidate that met the limits; on a host where one configuration's launches differ by 25%
    and a level by 10%, 85% of the limit)."""
    return 1.0 - max(margin - noise, 0.0) + ROOM_TOLERANCE


@dataclass
class Workload:
    """The target load every candidate is measured under (one closed-loop level)."""

    concurrency: int
    input_len: int = 256
    output_len: int = 256
    duration: float = 20.0
    api: str = "generate"
    warmup: int = 2
    sweep_options: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        for name in ("concurrency", "input_len", "output_len"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ConfigError(f"--{name.replace('_', '-')} {value!r} must be a whole number of at least 1",
                                  field=name)
        if not (isinstance(self.duration, (int, float)) and math.isfinite(self.duration) and self.duration > 0):
            raise ConfigError(f"--duration {self.duration!r} must be a positive number of seconds", field="duration")


@dataclass
class SearchOptions:
    """How :func:`tune` and :func:`grid` choose and judge candidates (each field may also be given
    to them as a keyword of its own)."""

    #: the lever to search, as ``--lever`` takes it (``FIELD`` or ``FIELD=LOW:HIGH``; the first
    #: counts); None: the lever the goal's limits point at
    levers: Sequence[str] | None = None
    #: the engine release whose levers apply (None: the configuration's)
    release: str | None = None
    #: how much one configuration's measurements differ between launches (a fraction)
    noise: float = 0.03
    #: the room under each limit a winner must leave (a fraction)
    margin: float = 0.03
    #: forecast unmeasured values with the performance model (else measured points only)
    use_model: bool = True

    def check(self) -> None:
        if not (0 <= self.noise < 1 and 0 <= self.margin < 1):
            raise ConfigError("noise and margin are fractions between 0 and 1", field="noise")


_OPTION_FIELDS = frozenset(f.name for f in dataclasses.fields(SearchOptions))


@dataclass
class TuneResult:
    """What a tuning run (or a grid) measured and picked."""

    kind: str
    goal: Goal
    lever: Lever
    candidates: pd.DataFrame
    best: dict[str, Any] | None
    launches: int
    stopped: str
    config_path: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        rows = json.loads(self.candidates.to_json(orient="records")) if not self.candidates.empty else []
        return {"kind": self.kind, "goal": self.goal.to_dict(), "lever": self.lever.to_dict(), "best": self.best,
                "launches": self.launches, "stopped": self.stopped,
                "config": str(self.config_path) if self.config_path else None, "candidates": rows}

    def __repr__(self) -> str:
        best = (f"best {self.lever.field}={self.best['changes'].get(self.lever.field)} at "
                f"{self.best['objective']:,.0f}") if self.best else "no candidate met the limits"
        return f"TuneResult({self.kind}, {self.launches} launches, {best}; {self.stopped})"


# --------------------------------------------------------------------------------------------
# tune.csv
# --------------------------------------------------------------------------------------------
def load_tune(run_dir: str | Path) -> pd.DataFrame:
    """The ``tune.csv`` of a run (an empty frame with :data:`TUNE_COLUMNS` when there is none)."""
    path = Path(run_dir) / rundir.TUNE_CSV
    if not path.exists():
        return pd.DataFrame(columns=TUNE_COLUMNS)
    frame = pd.read_csv(path)
    return frame


def _append(run_dir: Path, row: Mapping[str, Any]) -> None:
    path = run_dir / rundir.TUNE_CSV
    frame = pd.DataFrame([{c: row.get(c) for c in TUNE_COLUMNS} | {k: v for k, v in row.items()
                                                                 if k not in TUNE_COLUMNS}])
    if path.exists():
        old = pd.read_csv(path)
        old = old[~((old["kind"] == row["kind"]) & (old["phase"] == row["phase"]))]
        frame = pd.concat([old, frame], ignore_index=True)
    frame.to_csv(path, index=False)


# --------------------------------------------------------------------------------------------
# measuring a candidate
# --------------------------------------------------------------------------------------------
#: measure(changes, phase, extra_levels) -> the phase folder, once its level at the target load
#: (and the lighter ``extra_levels`` the performance model fits on) are on disk
Measure = Callable[[Mapping[str, Any], str, Sequence[int]], Path]


def _engine_of(backend: str, config: Any) -> str:
    valid = engines.names()
    if str(backend).startswith(("http://", "https://")):
        raise ConfigError(f"--backend {backend!r}: tuning launches each candidate itself; a running server "
                          f"cannot be relaunched with other flags. Use {', '.join(valid)}",
                          field="backend", valid=valid)
    engines.get(backend)  # ConfigError naming the registered engines
    return backend


#: the errors reading a phase's evidence can raise: a folder that is not a phase, a configuration or
#: a table that cannot be read (pandas' parser errors are ValueErrors)
_UNREADABLE = (DiagnosisError, ConfigError, OSError, ValueError, KeyError)


def _reader() -> EvidenceCache:
    """Candidates' evidence, each phase read once per measurement; a table a candidate left
    half-written is left out rather than costing the search."""
    return EvidenceCache(partial=True)


def _evidence(folder: Path, phases: EvidenceCache | None = None) -> Evidence | None:
    """``folder``'s evidence, read once per measurement through ``phases`` (a one-off read without);
    None where the folder holds no phase or its evidence cannot be read."""
    if not folder.is_dir():
        return None
    try:
        return (phases or _reader()).load(folder)
    except _UNREADABLE as exc:  # evidence only: what cannot be read is left out
        log.debug("%s: evidence unreadable (%s: %s)", folder, type(exc).__name__, exc)
        return None


def _level_row(folder: Path, concurrency: int, phases: EvidenceCache | None = None) -> dict[str, Any] | None:
    """``folder``'s sweep row at ``concurrency`` (the last one measured there); None without one."""
    if not (folder / rundir.SWEEP).exists():
        return None
    ev = _evidence(folder, phases)
    sweep = ev.sweep if ev is not None else None
    if sweep is None or sweep.empty or "concurrency" not in sweep:
        return None
    rows = sweep[sweep["concurrency"] == concurrency]
    return rows.iloc[-1].to_dict() if not rows.empty else None


def _scheduler_row(folder: Path, concurrency: int, phases: EvidenceCache | None = None) -> dict[str, Any] | None:
    """``folder``'s level at ``concurrency`` as the evidence's level table has it (running, queued,
    whether the batch held, from the level's densest source); None where it cannot be read."""
    ev = _evidence(folder, phases)
    if ev is None:
        return None
    try:
        table = ev.level_table()
    except (KeyError, ValueError, TypeError) as exc:  # evidence only: what cannot be read is left out
        log.debug("%s: no level table (%s)", folder, exc)
        return None
    rows = table[table["concurrency"] == int(concurrency)]
    return rows.iloc[-1].to_dict() if not rows.empty else None


def _running(folder: Path, concurrency: int | None = None, row: Mapping[str, Any] | None = None,
             phases: EvidenceCache | None = None) -> float:
    """The median running batch of ``folder``'s level at ``concurrency`` (``row``: its level-table
    row, read here when not given); the whole log's where no level has one."""
    if concurrency is not None:
        row = row if row is not None else _scheduler_row(folder, concurrency, phases)
        value = float(row.get("running_median", math.nan)) if row else math.nan
        if math.isfinite(value) and value > 0:
            return value
    ev = _evidence(folder, phases)
    decode = ev.log_lines() if ev is not None else None
    if decode is None or decode.empty or "running_req" not in decode:
        return math.nan
    busy = pd.to_numeric(decode["running_req"], errors="coerce")
    busy = busy[busy > 0]
    return float(busy.median()) if not busy.empty else math.nan


def batch_held(folder: Path, concurrency: int, row: Mapping[str, Any] | None = None,
               phases: EvidenceCache | None = None) -> tuple[bool, str]:
    """Whether ``folder``'s level at ``concurrency`` held the batch its load and cap allow
    (the evidence's level table: ``batch_held``; ``row``: its level-table row, read here when
    not given), and why; True where the evidence has nothing to judge it by."""
    row = row if row is not None else _scheduler_row(folder, concurrency, phases)
    if not row or row.get("batch_held") is None or (isinstance(row.get("batch_held"), float)
                                                     and math.isnan(row["batch_held"])):
        return True, "no scheduler figures to judge the level by"
    return bool(row["batch_held"]), str(row.get("held_note") or "")


def _startup(folder: Path, phases: EvidenceCache | None = None) -> dict[str, Any]:
    """The start-up facts ``folder``'s server log states ({} without a readable log)."""
    ev = _evidence(folder, phases)
    return dict(ev.startup or {}) if ev is not None else {}


def default_measure(config: Any, *, backend: str, run_dir: Path, workload: Workload,
                    sim_profile: str | None = None, command: Sequence[str] | None = None,
                    model: str | None = None, ready_timeout: float = 600.0,
                    progress: bool = False, cpus: str | None = None) -> Measure:
    """Each candidate launched with :func:`glm5lib.phase.measure_phase` and swept at the target load."""
    cpu_layout.layout(cpus)  # a bad layout is an error before the first launch
    def measure(changes: Mapping[str, Any], phase: str, extra_levels: Sequence[int] = ()) -> Path:
        folder = run_dir / phase
        if folder.exists():  # an interrupted candidate: measured again from the start
            shutil.rmtree(folder)
        server = None
        command_changes = None
        if not engines.get(backend).capabilities.launches_from_config:
            # an argv template: a lever max_batch is the template's flag --max-batch
            command_changes = {f"--{name.replace('_', '-')}": value for name, value in changes.items()}
        else:
            server = config.with_changes(**changes)
        measure_phase(server, run_dir, phase, backend=backend, sim_profile=sim_profile, command=command,
                      command_changes=command_changes, model=model, ready_timeout=ready_timeout,
                      concurrencies=sorted({*extra_levels, workload.concurrency}), api=workload.api, input_len=workload.input_len,
                      output_len=workload.output_len, duration=workload.duration, warmup=workload.warmup,
                      sweep_options=dict(workload.sweep_options), progress=progress, cpus=cpus)
        return folder

    return measure


def _evaluate(folder: Path, goal: Goal, workload: Workload, phases: EvidenceCache | None = None) -> dict[str, Any]:
    """What ``folder``'s level at the target load measured against the goal, from its evidence
    (read once for every figure here)."""
    phases = phases or _reader()
    row = _level_row(folder, workload.concurrency, phases)
    if row is None:
        raise ConfigError(f"phase {folder.name} has no level at concurrency {workload.concurrency}",
                          field="phase")
    out: dict[str, Any] = {"output_throughput": float(row.get("output_throughput", math.nan))}
    if goal.goodput:
        ev = phases.load(folder)
        out["goodput"] = goodput_of(ev.sweep, ev.requests, workload.concurrency, goal.goodput)
    for lim in goal.limits:
        out[lim.metric] = float(row.get(lim.metric, math.nan)) if row.get(lim.metric) is not None else math.nan
    out["objective"] = goal.score(out)
    out["slo_met"] = goal.slo_met(out)
    binding = goal.binding(out)
    out["binding_limit"] = str(binding) if binding else ""
    out["binding_ratio"] = binding.ratio(out) if binding else math.nan
    # the requests the level completed are the sweep's figure; the scheduler's come from the level table
    done = pd.to_numeric(pd.Series([row.get("completed")]), errors="coerce").iloc[0]
    out["completed"] = int(done) if pd.notna(done) else 0
    scheduler = _scheduler_row(folder, workload.concurrency, phases)
    out["running"] = _running(folder, workload.concurrency, scheduler, phases)
    out["batch_held"], out["held_note"] = batch_held(folder, workload.concurrency, scheduler, phases)
    return out


# --------------------------------------------------------------------------------------------
# choosing the lever and the next value
# --------------------------------------------------------------------------------------------
def _choose_lever(engine: str, levers: Sequence[Lever], goal: Goal) -> tuple[Lever, str]:
    quantities = {lim.quantity for lim in goal.limits}
    if quantities and quantities <= {"ttft"}:
        lev = lever_for(engine, "prefill", levers)
        if lev is not None:
            return lev, (f"only time to first token is limited: the per-step token budget ({lev.field}) sets how "
                         "long prompts wait behind each other")
    lev = lever_for(engine, "running", levers) or (levers[0] if levers else None)
    if lev is None:
        raise ConfigError(f"engine {engine!r} has no lever to tune: name one with --lever FIELD=LOW:HIGH",
                          field="lever")
    limited = ", ".join(sorted(quantities)) or "goodput"
    return lev, (f"{limited} limited: the running cap ({lev.field}) trades the batch's throughput against "
                 "the time each step takes")


def _ladder(lever: Lever, measured: Sequence[float] = ()) -> list[float]:
    """The values a proposal is chosen from: every whole value of a narrow range, else 240 spread
    geometrically (under 3% apart on 1..1024) plus the whole values next to each measured one."""
    lo, hi = float(lever.low), float(lever.high)
    if lever.kind == "int" and hi - lo <= 240:
        return [float(v) for v in range(int(lo), int(hi) + 1)]
    if lever.kind == "int":
        near = {float(x + d) for x in measured for d in (-1, 1) if lo <= x + d <= hi}
        return sorted({float(round(v)) for v in np.geomspace(lo, hi, 240)} | near)
    return [round(float(v), 3) for v in np.linspace(lo, hi, 91)]


def _probe(lever: Lever, taken: Sequence[float], ceiling: float, best: float | None) -> float | None:
    """With one value of the lever measured, and it meeting the limits, the value twice as large
    (the direction that buys throughput with latency), so the model's dependence on the lever
    rests on two measurements before it may end the search; None otherwise."""
    if best is None or len({float(t) for t in taken}) != 1:
        return None
    x = lever.clamp(min(float(lever.high), 2.0 * float(taken[0])))
    return float(x) if float(taken[0]) < float(x) < ceiling else None


def _bracket(lever: Lever, measured: Sequence[dict[str, Any]], ceiling: float, target: float,
             room: float = 1.0 + ROOM_TOLERANCE) -> float | None:
    """A running lever under per-step limits, with its limit crossed between the largest value
    that met it (with a binding ratio of at most ``room``) and the smallest that broke it: the
    value where the binding limit's ratio is ``target``; None where that is not clearly above the
    value that met it (the bracket is closed) or where either ratio is not known.

    The ratio is interpolated linearly between the two, or, where a third, smaller value met the
    limits too, along the parabola through the three when it rises across the bracket: a step's
    time grows faster than linearly with the batch near the top (the stand-in: 393 running at 70%
    of a TPOT limit and 702 at 159% put the secant's 94% at 476, where 89% was measured; the
    parabola through 64 as well puts it at 495, where 92% was)."""
    met = [m for m in measured if m["slo_met"] and math.isfinite(float(m.get("binding_ratio", math.nan)))
           and float(m["binding_ratio"]) <= room]
    broke = [m for m in measured if m["x"] == ceiling and math.isfinite(float(m.get("binding_ratio", math.nan)))]
    if not met or not broke or not math.isfinite(ceiling):
        return None
    low = max(met, key=lambda m: m["x"])
    x_f, r_f = float(low["x"]), float(low["binding_ratio"])
    r_b = max(float(m["binding_ratio"]) for m in broke)
    if not (r_f < target < r_b) or ceiling <= x_f:
        return None
    x = x_f + (target - r_f) / (r_b - r_f) * (ceiling - x_f)
    below = [m for m in met if float(m["x"]) < x_f and float(m["binding_ratio"]) < r_f]
    if below:
        third = max(below, key=lambda m: m["x"])
        xs = np.array([float(third["x"]), x_f, float(ceiling)])
        coef = np.polyfit(xs, [float(third["binding_ratio"]), r_f, r_b], 2)
        slope = np.polyder(coef)
        if np.polyval(slope, x_f) > 0 and np.polyval(slope, ceiling) > 0:  # rising across the bracket
            roots = [float(r.real) for r in np.roots(coef - np.array([0.0, 0.0, target]))
                     if abs(r.imag) < 1e-9 and x_f < r.real < ceiling]
            if roots:
                x = min(roots)
    x = lever.clamp(x)
    return float(x) if float(x) >= 1.03 * x_f and float(x) < ceiling else None


@dataclass
class _Proposal:
    value: float | None
    reason: str
    predicted_objective: float = math.nan
    predicted_binding: float = math.nan
    source: str = ""


@dataclass
class _Bounds:
    """What the measured candidates leave open on the lever, read once per proposal."""

    room: float  # the binding ratio a measured candidate may have and still count as meeting the limits
    best: float | None  # the most objective measured with that room
    per_step: bool  # the running lever under per-step (TPOT, ITL) limits only
    ceiling: float  # nothing above it can meet a per-step limit
    floor: float  # below it the batch only shrinks (per-step limits)
    taken: list[float]  # the values measured
    need: float  # the binding ratio a forecast must leave
    near_miss: bool  # the ceiling met the limits with a little less room than the margin asks


def _bounds(lever: Lever, goal: Goal, measured: Sequence[dict[str, Any]], noise: float, margin: float) -> _Bounds:
    # a candidate counts as meeting the limits when it met them with the margin's room (what the
    # winner needs, _pick): one that met a limit with less room is no end to the search
    room = _room(margin, noise)
    feasible = [m for m in measured if m["slo_met"] and math.isfinite(m["objective"]) and _ratio(m) <= room]
    best = max((m["objective"] for m in feasible), default=None)
    # the running lever: a step's time (TPOT, ITL) only grows with the batch, so nothing above a
    # value that broke such a limit (or left it less than the margin's room) can meet it, and below
    # the best value that met every limit the batch only shrinks (TTFT and end-to-end latency can
    # fall with a larger batch: queueing)
    per_step = bool(lever.acts_on == "running" and goal.limits and all(lim.quantity in ("tpot", "itl")
                                                                       for lim in goal.limits))
    broken = [m["x"] for m in measured
              if any(lim.quantity in ("tpot", "itl") and not lim.ratio(m) <= room for lim in goal.limits)]
    ceiling = min(broken) if broken and lever.acts_on == "running" else math.inf
    floor_ = max((m["x"] for m in feasible), default=-math.inf) if per_step else -math.inf
    # A forecast must leave the margin (it carries the model's error as well as the noise). Next to
    # a value measured to meet the limits with a little less room than the margin asks (a near
    # miss: short of it by less than half the noise), the forecast is anchored on that measurement:
    # it needs only the room a measurement needs, so the search steps back as far as the miss asks,
    # not to where the margin would put an unmeasured value (real vLLM: 28 running met a TPOT limit
    # at 91.3% against a room of 91%; asked for 80%, the secant from 64 sent the next launch to 13,
    # with half the throughput). A value that met the limit with no room to speak of is no anchor.
    need = 1.0 - margin
    # (the ceiling is a value that left the limits less than the room: a near miss if it met them)
    near_miss = per_step and any(m["x"] == ceiling and m["slo_met"] and math.isfinite(m["objective"])
                                 and _ratio(m) <= min(room + noise / 2, 1.0) for m in measured)
    if near_miss:
        need = max(need, room - 2 * ROOM_TOLERANCE)
    return _Bounds(room, best, per_step, ceiling, floor_, [m["x"] for m in measured], need, near_miss)


def _open_values(land: Landscape, lever: Lever, goal: Goal, b: _Bounds, noise: float) -> tuple[list, list]:
    """The untried values the bounds leave open: ``options`` the model forecasts, as (value,
    forecast, worst ratio to a limit), and ``unsure`` ones it does not, as (value, forecast,
    whether its band leaves it a chance to beat the best and meet the limits)."""
    options, unsure = [], []
    for x in _ladder(lever, b.taken):
        if x >= b.ceiling or any(abs(x - t) <= max(0.03 * t, 0.5 if lever.kind == "int" else 0.0) for t in b.taken):
            continue
        if x < b.floor and b.best is not None:
            continue  # below the best limit-meeting value of a growing landscape: less throughput
        p = land.predict(x)
        if not p.given:
            lows = [p.metrics_low.get(lim.metric, math.nan) / lim.value for lim in goal.limits]
            could_meet = all(not math.isfinite(r) or r <= b.need for r in lows)
            could_beat = b.best is None or not math.isfinite(p.objective_high) or p.objective_high > b.best * (1 + noise)
            unsure.append((x, p, could_meet and could_beat))
            continue
        ratios = [p.metrics.get(lim.metric, math.nan) / lim.value for lim in goal.limits]
        worst = max((r for r in ratios if math.isfinite(r)), default=0.0)
        options.append((x, p, worst))
    return options, unsure


def _bracketed(lever: Lever, measured: Sequence[dict[str, Any]], b: _Bounds, noise: float, why: str) -> _Proposal | None:
    """The forecast promises nothing, but the limit lies between two measured values far apart, and
    up to it the batch only grows: measure where the limit is reached."""
    target = b.need if b.near_miss else b.need - noise
    inside = _bracket(lever, measured, b.ceiling, target, b.room) if b.per_step else None
    if inside is None:
        return None
    return _Proposal(inside, f"{why}, but the limit is crossed between {lever.field}={max(b.floor, 0):g} and "
                             f"{b.ceiling:g}: trying where it is interpolated to reach {target:.0%} of the limit",
                     source="bracket")


def _measure_unsure(unsure: Sequence[tuple], lever: Lever, goal: Goal, b: _Bounds, why: str) -> _Proposal | None:
    """The model cannot say: measure the open value nearest the evidence, the measurement a
    forecast that is not given names (a launch there), rather than guess."""
    chances = [u for u in unsure if u[2] and math.isfinite(u[1].objective)]
    if not chances:
        return None
    # the model's point ranks them though its band is too wide to act on: the most objective
    # whose point meets the limits, else the one nearest the evidence
    meets = [u for u in chances if all(not math.isfinite(u[1].metrics.get(lim.metric, math.nan))
                                       or u[1].metrics[lim.metric] / lim.value <= b.need for lim in goal.limits)]
    if meets:
        x, p, _ = max(meets, key=lambda u: (u[1].objective, -u[0]))
    else:
        x, p, _ = min(chances, key=lambda u: min(abs(math.log(max(u[0], 1e-9) / max(t, 1e-9))) for t in b.taken))
    needs = f" ({p.needs})" if p.needs else ""
    return _Proposal(x, f"{why}; {lever.field}={lever.clamp(x)} is not forecast{needs}: measuring it, the value "
                        "nearest the evidence whose band could beat the best and meet the limits",
                     p.objective, math.nan, "measure")


def _probe_proposal(probe: float, lever: Lever, forecast: str) -> _Proposal:
    return _Proposal(probe, f"one value of {lever.field} measured, so how the limits move along it is the "
                            f"model's prior, not evidence ({forecast}): measuring twice the value before trusting it",
                     source="probe")


def _from_forecasts(ok: Sequence[tuple], unsure: Sequence[tuple], lever: Lever, goal: Goal,
                    measured: Sequence[dict[str, Any]], b: _Bounds, noise: float) -> _Proposal:
    """The most objective value forecast to meet every limit, unless it cannot beat the best
    measured by more than the noise (then a measurement that could settle it, or the end)."""
    x, p, worst = max(ok, key=lambda o: (o[1].objective, -o[0]))
    if b.best is not None and p.objective <= b.best * (1.0 + noise):
        short = f"no forecast beats the best measured ({b.best:,.0f}) by more than the noise"
        picked = _measure_unsure(unsure, lever, goal, b, short)
        if picked is not None:
            return picked
        probe = _probe(lever, b.taken, b.ceiling, b.best)
        if probe is not None:
            return _probe_proposal(probe, lever, f"its best forecast: {p.objective:,.0f} at {lever.clamp(x)}")
        inside = _bracketed(lever, measured, b, noise, short)
        if inside is not None:
            return inside
        return _Proposal(None, f"no candidate is forecast to beat the best measured ({b.best:,.0f}) by more than "
                               f"the noise ({noise:.0%}): the best forecast is {p.objective:,.0f} at "
                               f"{lever.field}={lever.clamp(x)}")
    binding = goal.binding(p.metrics)
    why = (f"{p.source} forecast: {p.objective:,.0f} {goal.objective.replace('_', ' ')} with "
           f"{binding.metric} {p.metrics.get(binding.metric, math.nan):,.0f} ms against {binding.value:g}"
           if binding else f"{p.source} forecast: {p.objective:,.0f}")
    if b.near_miss:
        why += (f"; {lever.field}={b.ceiling:g} met the limits with less room than the margin asks, so a value "
                f"next to it needs a measurement's room ({b.need:.0%} of the limit)")
    return _Proposal(x, f"the most {goal.objective.replace('_', ' ')} forecast to meet every limit ({why})",
                     p.objective, worst, p.source)


def _without_forecast(options: Sequence[tuple], unsure: Sequence[tuple], lever: Lever, goal: Goal,
                      measured: Sequence[dict[str, Any]], b: _Bounds, noise: float) -> _Proposal:
    """No value is forecast to meet every limit: measure one the model cannot judge, probe, bracket,
    halve, or try the value forecast closest to the limits."""
    picked = _measure_unsure(unsure, lever, goal, b, "no value the model forecasts meets every limit" + (
        f" better than the best measured ({b.best:,.0f})" if b.best is not None else ""))
    if picked is not None:
        return picked
    if b.best is not None:
        probe = _probe(lever, b.taken, b.ceiling, b.best)
        if probe is not None:
            return _probe_proposal(probe, lever, "it forecasts no larger value meeting them")
        inside = _bracketed(lever, measured, b, noise, "no untried value is forecast to meet the limits")
        if inside is not None:
            return inside
        return _Proposal(None, f"no untried value is forecast to meet the limits better than the best measured "
                               f"({b.best:,.0f})")
    taken = b.taken
    if not options:
        # no forecast at all (one batch size measured, no model): halve the smallest value tried
        x = lever.clamp(max(float(lever.low), 0.5 * min(taken))) if taken else None
        if x is not None and float(x) < min(taken) and not any(abs(float(x) - t) < 1e-9 for t in taken):
            return _Proposal(float(x), f"no value meets the limits yet and nothing is forecast: halving "
                                       f"{lever.field} to {x}", source="probe")
        return _Proposal(None, "no value the evidence leaves open is forecast, and none could meet the limits "
                               "within the model's bands")
    x, p, worst = min(options, key=lambda o: (o[2], o[0]))
    return _Proposal(x, f"no value is forecast to meet every limit yet: trying the one forecast closest "
                        f"({p.source} forecast {worst:.2f}x the binding limit)", p.objective, worst, p.source)


def _propose(land: Landscape, lever: Lever, goal: Goal, measured: Sequence[dict[str, Any]], *,
             noise: float, margin: float) -> _Proposal:
    """The next candidate of the lever, and why; its value is None where the search should stop."""
    b = _bounds(lever, goal, measured, noise, margin)
    options, unsure = _open_values(land, lever, goal, b, noise)
    if not options and not unsure:
        return _Proposal(None, "every value the evidence leaves open has been measured")
    ok = [o for o in options if o[2] <= b.need and math.isfinite(o[1].objective)]
    if ok:
        return _from_forecasts(ok, unsure, lever, goal, measured, b, noise)
    return _without_forecast(options, unsure, lever, goal, measured, b, noise)


# --------------------------------------------------------------------------------------------
# the two searches
# --------------------------------------------------------------------------------------------
def _setup(config: Any, backend: str, goal: Goal, workload: Workload, options: SearchOptions,
           evidence: Path | None, phases: EvidenceCache) -> tuple[str, Lever, str]:
    engine = _engine_of(backend, config)
    workload.check()
    goal.check_workload(output_len=workload.output_len)
    from_config = engines.get(engine).capabilities.launches_from_config
    if from_config and config is None:
        raise ConfigError(f"--backend {backend}: a config to tune from is needed (--config or RUN_DIR --phase)",
                          field="config")
    known = engine_levers(engine, options.release or getattr(config, "release", None))
    chosen = [parse_lever(text, known) for text in (options.levers or [])]
    if not known and not chosen:
        raise ConfigError(f"a {engine} engine's levers are given as flags: --lever --max-batch=1:256",
                          field="lever")
    lever, why = (chosen[0], "the lever named on the command line") if chosen else _choose_lever(engine, known, goal)
    if from_config:
        # a lever the config's engine or release lacks is refused here, before anything launches
        config.with_changes(**{lever.field: lever.clamp(lever.low)})
    startup = _startup(evidence, phases) if evidence is not None else {}
    others = {lev.field: config.get(lev.field) for lev in known} if from_config else {}
    lever, bounded = safe_bounds(lever, engine, concurrency=workload.concurrency, input_len=workload.input_len,
                                 output_len=workload.output_len, startup=startup, config=others)
    if bounded:
        why += f"; bounded to {lever.low:g}..{lever.high:g} ({bounded})"
    return engine, lever, why


def _model_levels(forecaster: Any, measured: Sequence[Any], start: float | None, workload: Workload) -> list[int]:
    """The first launch also measures a lighter level, so the performance model (which needs two
    batch sizes to split a step's fixed time from its per-request time) can be fitted on it."""
    if forecaster is None or measured:
        return []
    batch = min(float(start), workload.concurrency) if start else workload.concurrency
    light = max(1, int(batch // 4))
    return [light] if light < workload.concurrency else []


def _same_workload(folder: Path, workload: Workload, phases: EvidenceCache | None = None) -> bool:
    row = _level_row(folder, workload.concurrency, phases)
    if row is None:
        return False
    try:
        return int(row.get("input_len")) == workload.input_len and int(row.get("output_len")) == workload.output_len
    except (TypeError, ValueError):
        return False


def config_of(run_dir: str | Path, phase: str | None, fallback: str | None = None) -> Any:
    """The configuration a phase of ``run_dir`` ran (its evidence's: ``config.json`` read as its
    engine's, :attr:`~glm5lib.diagnose.evidence.Evidence.config`), else the ``fallback`` config (a
    shipped name or a file); None for a ``command`` phase without either. A phase whose
    configuration is recorded but cannot be read is a ConfigError, not the fallback."""
    folder = Path(run_dir) / phase if phase else None
    if folder is None or not (folder / rundir.CONFIG).exists():
        return engines.load_config(fallback) if fallback else None
    ev = _evidence(folder)
    if ev is None or ev.config is None:
        why = [s for s in (ev.skipped if ev is not None else []) if s.startswith(rundir.CONFIG)]
        raise ConfigError(f"{folder}: {why[0] if why else f'{rundir.CONFIG} unreadable'}", field="config")
    return ev.config


def _start_value(config: Any, lever: Lever, startup: Mapping[str, Any], engine: str) -> float | None:
    value = config.get(lever.field) if config is not None else None
    if value is None:
        value = startup.get(lever.field)
        limit = engines.get(engine, default=engines.COMMAND).capabilities.limit_of(lever.field)
        if value is None and limit is not None:  # the value in force, as the engine's log states it
            value = engines.limits_of(engine, {}, startup).get(limit)
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _record(run: Path, kind: str, step: int, phase: str, lever: Lever, changes: Mapping[str, Any],
            measured: Mapping[str, Any], proposal: _Proposal | None, reason: str) -> dict[str, Any]:
    row = {
        "kind": kind, "step": step, "phase": phase, "lever": lever.field, "value": changes.get(lever.field),
        "changes": json.dumps(dict(changes), sort_keys=True), **{k: v for k, v in measured.items() if k != "x"},
        "predicted_objective": proposal.predicted_objective if proposal else math.nan,
        "predicted_binding": proposal.predicted_binding if proposal else math.nan,
        "prediction_source": proposal.source if proposal else "", "reason": reason,
    }
    _append(run, row)
    return row


def _reuse(previous: pd.DataFrame, kind: str, phase: str, changes: Mapping[str, Any]) -> bool:
    if previous.empty:
        return False
    key = json.dumps(dict(changes), sort_keys=True)
    rows = previous[(previous["kind"] == kind) & (previous["phase"] == phase)]
    return bool(not rows.empty and rows.iloc[-1]["changes"] == key)


def _ratio(row: Mapping[str, Any]) -> float:
    value = float(row.get("binding_ratio", 0.0))
    return value if math.isfinite(value) else 0.0


def _held(row: Mapping[str, Any]) -> bool:
    value = row.get("batch_held", True)  # tune.csv written before the column: counted
    return not (value is False or (isinstance(value, str) and value.lower() == "false"))


def _pick(rows: Sequence[dict[str, Any]], noise: float, margin: float = 0.0) -> dict[str, Any] | None:
    """The winner: the most objective measured under every limit with the room the margin asks
    for (:func:`_room`); where no candidate has that room, the most objective measured under the
    limits at all. A user who asks for a margin beyond the noise says one configuration's launches
    differ by that much on the host, so a candidate that met a limit with less room meets it again
    only by luck (real vLLM on two shared cores: 64 running met a 9 ms TPOT limit at 8.9 ms, then
    read 9.6 when launched again). With the defaults a candidate measured at 99% of its limit still
    wins over one with more room and less throughput (the stand-in: 511 running at 3,008 tok/s and
    99% of the limit against 455 at 2,857)."""
    feasible = [r for r in rows if r["slo_met"] and math.isfinite(float(r["objective"]))]
    if not feasible:
        return None
    # a level that never held the batch its load and cap allow is no winner while a steady one is
    feasible = [r for r in feasible if _held(r)] or feasible
    feasible = [r for r in feasible if _ratio(r) <= _room(margin, noise)] or feasible
    top = max(float(r["objective"]) for r in feasible)
    # within half the noise of the top, the one with the most room under its limits measures again
    near = [r for r in feasible if float(r["objective"]) >= top * (1.0 - noise / 2)]
    best = min(near, key=lambda r: (_ratio(r), -float(r["objective"])))
    out = {k: best.get(k) for k in ("phase", "objective", "output_throughput", "goodput", "slo_met",
                                    "binding_limit", "binding_ratio", "running", "batch_held", "held_note")}
    out["changes"] = json.loads(best["changes"])
    for key, value in best.items():
        if key.endswith("_ms"):
            out[key] = value
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def _save_best(config: Any, run: Path, best: Mapping[str, Any] | None, lever: Lever, goal: Goal) -> Path | None:
    if best is None:
        return None
    path = run / rundir.TUNE_BEST
    changes = dict(best["changes"])
    if config is None:
        path.write_text(json.dumps({"format": "glm5lib.tune_best/1", "engine": "command", "changes": changes,
                                    "goal": goal.to_dict()}, indent=2) + "\n")
        return path
    tuned = config.with_changes(**changes)
    base = getattr(config, "name", None) or "config"
    # what the tuner started from, with whatever changes that configuration already carried (a fix
    # phase's config keeps the baseline's name): the saved file must not pass for the baseline tuned
    meta = getattr(config, "meta", None) or {}
    start = meta.get("description") if isinstance(meta, Mapping) else None
    description = (f"{base}" + (f" ({start})" if start else "") + f", tuned to {lever.field}="
                   f"{changes.get(lever.field)}: the most "
                   f"{goal.objective.replace('_', ' ')} measured under {', '.join(map(str, goal.limits)) or 'goodput'}"
                   f" (phase {best['phase']})")
    try:
        tuned.save(path, name=f"{base}-tuned", description=description)
    except TypeError:  # a vLLM config keeps its own name and description
        tuned.meta.update(name=f"{base}-tuned", description=description)
        tuned.save(path)
    return path


def _options(options: SearchOptions | None, launch: dict[str, Any]) -> SearchOptions:
    """``options`` with any of its fields given as keywords beside the launch's (``levers=...``,
    ``noise=...``: the spelling callers used before the options were grouped) taken out of
    ``launch`` and set on it."""
    given = {name: launch.pop(name) for name in list(launch) if name in _OPTION_FIELDS}
    return dataclasses.replace(options or SearchOptions(), **given)


def tune(config: Any, run_dir: str | Path, goal: Goal, workload: Workload, *, backend: str = "sim",
         max_launches: int = 4, evidence_phase: str | None = None, measure: Measure | None = None,
         options: SearchOptions | None = None, **launch: Any) -> TuneResult:
    """Search the lever for the most objective under the goal's limits, in at most ``max_launches``.

    ``evidence_phase`` is a phase of ``run_dir`` already measured at the target load: it is the
    first point, at no launch. ``options`` (:class:`SearchOptions`: the lever, the release, the
    noise and margin, the model) may also be given field by field as keywords (``levers=``,
    ``noise=``...). ``launch`` is passed to :func:`default_measure` (``sim_profile``, ``command``,
    ``model``, ``ready_timeout``, ``progress``, ``cpus``: see :mod:`glm5lib.cpus`). Raises
    ConfigError before any launch for a bad goal, workload, lever or budget.
    """
    run = Path(run_dir)
    opts = _options(options, launch)
    if not (isinstance(max_launches, int) and max_launches >= 1):
        raise ConfigError(f"--max-launches {max_launches!r} must be at least 1", field="max_launches")
    opts.check()
    evidence = run / evidence_phase if evidence_phase else None
    if evidence is not None and not (evidence / rundir.SWEEP).exists():
        raise ConfigError(f"phase {evidence_phase!r} of {run} has no {rundir.SWEEP}", field="phase")
    phases = _reader()
    engine, lever, why = _setup(config, backend, goal, workload, opts, evidence, phases)
    run.mkdir(parents=True, exist_ok=True)
    measure = measure or default_measure(config, backend=backend, run_dir=run, workload=workload, **launch)
    forecaster = perfmodel_forecaster(run, engine=engine, concurrency=workload.concurrency,
                                      input_len=workload.input_len, output_len=workload.output_len,
                                      objective=goal.objective, metrics=[lim.metric for lim in goal.limits],
                                      phases=phases) if opts.use_model else None
    search = _Search(run, goal, workload, lever, opts, phases,
                     Landscape(lever.field, lever.acts_on, [lim.metric for lim in goal.limits], forecaster=forecaster))
    previous = load_tune(run)
    start = _start_value(config, lever, _startup(evidence, phases) if evidence is not None else {}, engine)
    if evidence is not None and _same_workload(evidence, workload, phases):
        changes = {lever.field: lever.clamp(start)} if start is not None else {}
        search.take(evidence, changes, 0, "evidence", None, f"measured phase {evidence_phase}: the starting evidence; {why}")
    elif evidence is not None:
        log.info("phase %s was not measured at %d concurrent %d+%d-token requests: its config and start-up "
                 "facts are used, its levels are not a point of this landscape", evidence_phase,
                 workload.concurrency, workload.input_len, workload.output_len)
    launches, step = 0, 1
    while launches < max_launches:
        proposal = search.first(start, why) if not search.measured else search.propose()
        if proposal.value is None:
            proposal = search.again(opts.noise) or proposal
        if proposal.value is None:
            stopped = proposal.reason
            break
        changes = {lever.field: lever.clamp(proposal.value)}
        phase = f"tune-{step}"
        if _reuse(previous, "tune", phase, changes) and _level_row(run / phase, workload.concurrency, phases):
            log.info("%s already measured with %s: read again, not relaunched", phase, changes)
        else:
            log.info("%s: launching with %s: %s", phase, changes, proposal.reason)
            measure(changes, phase, _model_levels(forecaster, search.measured, start, workload))
        launches += 1
        search.take(run / phase, changes, step, "tune", proposal, proposal.reason)
        step += 1
    else:
        stopped = f"the budget of {max_launches} launches is spent"
    best = _pick(search.rows, opts.noise, opts.margin)
    path = _save_best(config, run, best, lever, goal)
    return TuneResult("tune", goal, lever, pd.DataFrame(search.rows), best, launches, stopped, path)


@dataclass
class _Search:
    """One tuning run's state: the candidates measured, their ``tune.csv`` rows and the landscape
    the next proposal is read from."""

    run: Path
    goal: Goal
    workload: Workload
    lever: Lever
    options: SearchOptions
    phases: EvidenceCache
    land: Landscape
    measured: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)

    def take(self, folder: Path, changes: Mapping[str, Any], step: int, kind: str, proposal: _Proposal | None,
             reason: str) -> None:
        """Read one measured candidate into the landscape and ``tune.csv``."""
        result = _evaluate(folder, self.goal, self.workload, self.phases)
        lever = self.lever
        x = lever.clamp(changes.get(lever.field)) if changes.get(lever.field) is not None else None
        result["x"] = x
        if not result["batch_held"]:
            log.info("%s: %s; no winner while a steady candidate meets the limits", folder.name, result["held_note"])
            reason = f"{reason}; not a winner: {result['held_note']}"
        if x is not None:
            self.land.add(Point(float(x), result["objective"], {k: result[k] for k in self.land.metrics}, folder.name,
                                held=bool(result["batch_held"])))
            self.measured.append(result)
        self.rows.append(_record(self.run, kind, step, folder.name, lever, changes, result, proposal, reason))

    def first(self, start: float | None, why: str) -> _Proposal:
        """The first candidate: the configuration as given, else the middle of the safe range."""
        lever = self.lever
        if start is not None:
            return _Proposal(start, f"the configuration as given, to read which limit binds ({why})")
        return _Proposal(float(np.sqrt(float(lever.low) * float(lever.high))), f"the middle of the safe range ({why})")

    def again(self, noise: float) -> _Proposal | None:
        """A candidate that met the limits with more objective than every steady one, but whose batch
        swung (figures not its steady ones), measured once more where launches remain: in a closed
        loop of equal requests the batch forms cohorts by chance, and one launch's swing is no
        verdict on the value (the stand-in's 511 running swung 16-511 in one launch, held 512 in
        another)."""
        rows = [r for r in self.rows if r["slo_met"] and math.isfinite(float(r["objective"]))]
        steady = max((float(r["objective"]) for r in rows if _held(r)), default=0.0)
        tried: dict[str, int] = {}
        for r in self.rows:
            tried[r["changes"]] = tried.get(r["changes"], 0) + 1
        swung = [r for r in rows if not _held(r) and tried[r["changes"]] == 1
                 and float(r["objective"]) > steady * (1.0 + noise)]
        if not swung:
            return None
        best = max(swung, key=lambda r: float(r["objective"]))
        value = json.loads(best["changes"]).get(self.lever.field)
        if value is None:
            return None
        return _Proposal(float(value), f"{best['phase']} met every limit with {float(best['objective']):,.0f} but its "
                                       f"batch swung: measured again, once, for its steady figures")

    def propose(self) -> _Proposal:
        return _propose(self.land, self.lever, self.goal, self.measured, noise=self.options.noise,
                        margin=self.options.margin)


def grid_values(lever: Lever, points: int = 8) -> list[float | int]:
    """``points`` values spread geometrically over the lever's safe range, ends included."""
    values = [lever.clamp(v) for v in np.geomspace(float(lever.low), float(lever.high), points)]
    return sorted(set(values))


def grid(config: Any, run_dir: str | Path, goal: Goal, workload: Workload, *, backend: str = "sim",
         values: Sequence[float] | None = None, points: int = 8, measure: Measure | None = None,
         options: SearchOptions | None = None, **launch: Any) -> TuneResult:
    """Measure every value of the grid over the tuner's lever (phases ``grid-1``...); ``options``
    and ``launch`` as for :func:`tune`. A grid judges a search: it writes no best configuration."""
    run = Path(run_dir)
    opts = _options(options, launch)
    phases = _reader()
    _engine, lever, why = _setup(config, backend, goal, workload, opts, None, phases)
    if values:
        bad = [v for v in values if not (float(lever.low) <= float(v) <= float(lever.high))]
        if bad:
            raise ConfigError(f"grid values {bad} are outside {lever.field}'s safe range "
                              f"{lever.low:g}..{lever.high:g}", field="grid")
        values = sorted({lever.clamp(v) for v in values})
    else:
        values = grid_values(lever, points)
    run.mkdir(parents=True, exist_ok=True)
    measure = measure or default_measure(config, backend=backend, run_dir=run, workload=workload, **launch)
    previous = load_tune(run)
    rows = []
    for i, value in enumerate(values, start=1):
        changes = {lever.field: value}
        phase = f"grid-{i}"
        if not (_reuse(previous, "grid", phase, changes) and _level_row(run / phase, workload.concurrency, phases)):
            measure(changes, phase, ())
        result = _evaluate(run / phase, goal, workload, phases)
        rows.append(_record(run, "grid", i, phase, lever, changes, result, None,
                            f"grid point {i} of {len(values)} ({why})"))
    best = _pick(rows, 0.0)
    return TuneResult("grid", goal, lever, pd.DataFrame(rows), best, len(values), "every grid point measured", None)


def recheck(config: Any, run_dir: str | Path, goal: Goal, workload: Workload, result: TuneResult, *,
            backend: str = "sim", measure: Measure | None = None, levels: Sequence[int] = (),
            **launch: Any) -> dict[str, Any]:
    """Launch the winner of ``result`` once more (phase ``<kind>-check``) and say whether it still
    meets the limits; recorded in ``tune.csv`` as kind ``check``. ``levels``: other concurrencies
    swept in the same launch (a load where every candidate runs the same batch reads the machine's
    speed against an earlier launch's)."""
    check_concurrencies(levels, name="recheck level", field="levels")
    if result.best is None:
        raise ConfigError("nothing to measure again: no candidate met the limits", field="recheck")
    run = Path(run_dir)
    measure = measure or default_measure(config, backend=backend, run_dir=run, workload=workload, **launch)
    changes = dict(result.best["changes"])
    phase = f"{result.kind}-check"
    previous = load_tune(run)
    phases = _reader()
    if not (_reuse(previous, "check", phase, changes)
            and all(_level_row(run / phase, c, phases) for c in {workload.concurrency, *levels})):
        measure(changes, phase, tuple(levels))
    measured = _evaluate(run / phase, goal, workload, phases)
    _record(run, "check", 0, phase, result.lever, changes, measured, None,
            f"the winner ({result.best['phase']}) measured again")
    return {"phase": phase, "changes": changes, **{k: v for k, v in measured.items() if k != "x"}}
