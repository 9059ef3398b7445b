"""Choosing the tuner's lever and its next value from what the candidates measured and what the
performance model forecasts (:func:`propose`), and the room a measured candidate needs under its
limits (:func:`limit_room`). :mod:`glm5lib.tune.search` runs the loop around it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from glm5lib.errors import ConfigError
from glm5lib.tune.goal import Goal
from glm5lib.tune.levers import Lever, lever_for
from glm5lib.tune.model import Landscape

__all__ = ["ROOM_TOLERANCE", "Proposal", "binding_ratio", "choose_lever", "limit_room", "propose"]

#: How far past its room a measured binding ratio may read and still count as having it (a
#: level's figures are not more exact than this).
ROOM_TOLERANCE = 0.01


def binding_ratio(row: Mapping[str, Any]) -> float:
    """A measured candidate's binding ratio (its most-used limit's measured value over the limit), 0 if unknown."""
    value = float(row.get("binding_ratio", 0.0))
    return value if math.isfinite(value) else 0.0


def limit_room(margin: float, noise: float) -> float:
    """The largest binding ratio a measured candidate may have and still count as meeting the
    limits with the margin's room: a measurement already shows where its level sits, so it needs
    the margin less the noise any measurement carries (with the defaults, 3% and 3%, every
    candidate that met the limits; on a host where one configuration's launches differ by 25%
    and a level by 10%, 85% of the limit)."""
    return 1.0 - max(margin - noise, 0.0) + ROOM_TOLERANCE


def choose_lever(engine: str, levers: Sequence[Lever], goal: Goal) -> tuple[Lever, str]:
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
    """The values a proposal is chosen from: the lever's grid where it has one (the values the engine
    runs at full speed), else every whole value of a narrow range, else 240 spread geometrically
    (under 3% apart on 1..1024) plus the whole values next to each measured one."""
    if lever.on_grid():
        return lever.on_grid()
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
    return _doubled(lever, float(taken[0]), ceiling)


def _doubled(lever: Lever, value: float, ceiling: float) -> float | None:
    """Twice ``value`` within the lever's bounds (on its grid where it has one: the nearest value of
    it above ``value``), where that is above it and under ``ceiling``."""
    x = float(lever.clamp(min(float(lever.high), 2.0 * value)))
    above = [g for g in lever.on_grid() if g > value]
    if above:
        x = max(float(lever.snap(x)), above[0])
    return x if value < x < ceiling else None


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
class Proposal:
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
    room = limit_room(margin, noise)
    feasible = [m for m in measured if m["slo_met"] and math.isfinite(m["objective"]) and binding_ratio(m) <= room]
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
                                 and binding_ratio(m) <= min(room + noise / 2, 1.0) for m in measured)
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


def _bracketed(lever: Lever, measured: Sequence[dict[str, Any]], b: _Bounds, noise: float, why: str) -> Proposal | None:
    """The forecast promises nothing, but the limit lies between two measured values far apart, and
    up to it the batch only grows: measure where the limit is reached."""
    target = b.need if b.near_miss else b.need - noise
    inside = _bracket(lever, measured, b.ceiling, target, b.room) if b.per_step else None
    if inside is not None and lever.on_grid():  # the grid's value nearest it, where not measured yet
        inside = float(lever.snap(inside))
        inside = None if any(abs(inside - t) < 1e-9 for t in b.taken) else inside
    if inside is None:
        return None
    return Proposal(inside, f"{why}, but the limit is crossed between {lever.field}={max(b.floor, 0):g} and "
                             f"{b.ceiling:g}: trying where it is interpolated to reach {target:.0%} of the limit",
                     source="bracket")


def _measure_unsure(unsure: Sequence[tuple], lever: Lever, goal: Goal, b: _Bounds, why: str) -> Proposal | None:
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
    return Proposal(x, f"{why}; {lever.field}={lever.clamp(x)} is not forecast{needs}: measuring it, the value "
                        "nearest the evidence whose band could beat the best and meet the limits",
                     p.objective, math.nan, "measure")


def _probe_proposal(probe: float, lever: Lever, forecast: str) -> Proposal:
    return Proposal(probe, f"one value of {lever.field} measured, so how the limits move along it is the "
                            f"model's prior, not evidence ({forecast}): measuring twice the value before trusting it",
                     source="probe")


def _from_forecasts(ok: Sequence[tuple], unsure: Sequence[tuple], lever: Lever, goal: Goal,
                    measured: Sequence[dict[str, Any]], b: _Bounds, noise: float) -> Proposal:
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
        return Proposal(None, f"no candidate is forecast to beat the best measured ({b.best:,.0f}) by more than "
                               f"the noise ({noise:.0%}): the best forecast is {p.objective:,.0f} at "
                               f"{lever.field}={lever.clamp(x)}")
    binding = goal.binding(p.metrics)
    why = (f"{p.source} forecast: {p.objective:,.0f} {goal.objective.replace('_', ' ')} with "
           f"{binding.metric} {p.metrics.get(binding.metric, math.nan):,.0f} ms against {binding.value:g}"
           if binding else f"{p.source} forecast: {p.objective:,.0f}")
    if b.near_miss:
        why += (f"; {lever.field}={b.ceiling:g} met the limits with less room than the margin asks, so a value "
                f"next to it needs a measurement's room ({b.need:.0%} of the limit)")
    return Proposal(x, f"the most {goal.objective.replace('_', ' ')} forecast to meet every limit ({why})",
                     p.objective, worst, p.source)


def _without_forecast(options: Sequence[tuple], unsure: Sequence[tuple], lever: Lever, goal: Goal,
                      measured: Sequence[dict[str, Any]], b: _Bounds, noise: float) -> Proposal:
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
        return Proposal(None, f"no untried value is forecast to meet the limits better than the best measured "
                               f"({b.best:,.0f})")
    taken = b.taken
    if not options:
        # no forecast at all (one batch size measured, no model): halve the smallest value tried
        x = lever.snap(max(float(lever.low), 0.5 * min(taken))) if taken else None
        if x is not None and float(x) < min(taken) and not any(abs(float(x) - t) < 1e-9 for t in taken):
            return Proposal(float(x), f"no value meets the limits yet and nothing is forecast: halving "
                                       f"{lever.field} to {x}", source="probe")
        return Proposal(None, "no value the evidence leaves open is forecast, and none could meet the limits "
                               "within the model's bands")
    x, p, worst = min(options, key=lambda o: (o[2], o[0]))
    return Proposal(x, f"no value is forecast to meet every limit yet: trying the one forecast closest "
                        f"({p.source} forecast {worst:.2f}x the binding limit)", p.objective, worst, p.source)


def _flat_probe(options: Sequence[tuple], unsure: Sequence[tuple], lever: Lever, goal: Goal,
                measured: Sequence[dict[str, Any]], b: _Bounds, noise: float) -> Proposal | None:
    """The model forecasts no value of the lever beyond the largest measured (it has no term for it
    here, as for a prefill chunk without the engine's benchmark): a value next to the evidence reads
    about the same, and no band says whether one could meet the limits. Twice the largest value
    measured says how the lever moves (a chunk's forwards per prompt halve: on one H100, 256 -> 512 -> 1,024 under 1,024-token
    prompts took median TPOT at 64 requests from 17.2 to 13.6 and 11.7 ms). Where the last doubling did
    not help (the binding limit's ratio no lower by more than the noise, the objective no higher while
    meeting the limits) the search ends: what is left would be read next to the evidence. With one
    value measured nothing yet says which way the limit moves: a largest value close to its limit is
    doubled too (on one H100, a 512-token chunk at 98% of a 20 ms TPOT limit; 2,048 took it to 68%
    with 45% more throughput, data/examples/h100-sglang-tune-in-turn)."""
    if not b.taken or not unsure:
        return None
    top = max(b.taken)
    if any(o[0] > top for o in options):
        return None
    steps = sorted((m for m in measured if m.get("x") is not None), key=lambda m: float(m["x"]))
    if not steps or float(steps[-1]["x"]) != top:
        return None
    last = steps[-1]

    def ratio(m: Mapping[str, Any]) -> float:  # the binding limit's measured value over the limit
        binding = goal.binding(m)
        r = binding.ratio(m) if binding is not None else math.nan
        return r if math.isfinite(r) else 0.0

    lower = False
    if len(steps) >= 2 and float(last["x"]) >= 1.5 * float(steps[-2]["x"]):  # the last step was a doubling
        prev = steps[-2]
        lower = ratio(last) < ratio(prev) * (1 - noise)
        higher = bool(last["slo_met"]) and float(last["objective"]) > float(prev["objective"]) * (1 + noise)
        if not (lower or higher):
            return Proposal(None, f"the model has no term for {lever.field} beyond {top:g}, and doubling it from "
                                  f"{float(prev['x']):g} moved neither the objective nor the binding limit by more "
                                  "than the noise")
    if len(steps) >= 2 and last["slo_met"] and ratio(last) > b.need and not lower:
        return None  # the largest value already uses the room under its binding limit, and raising it used more
    x = _doubled(lever, top, b.ceiling)
    if x is None:
        return None
    _, p, _ = min(unsure, key=lambda u: abs(math.log(u[0] / x)))
    what = (f"one value of {lever.field} measured and the model forecasts nothing beyond it" if len(steps) == 1
            else f"the model's point does not move along {lever.field} beyond {top:g}")
    return Proposal(x, f"{what} ({p.needs or 'no term for it'}): measuring twice the largest value measured",
                    p.objective, math.nan, "probe")


def propose(land: Landscape, lever: Lever, goal: Goal, measured: Sequence[dict[str, Any]], *,
             noise: float, margin: float) -> Proposal:
    """The next candidate of the lever, and why; its value is None where the search should stop."""
    b = _bounds(lever, goal, measured, noise, margin)
    options, unsure = _open_values(land, lever, goal, b, noise)
    if not options and not unsure:
        return Proposal(None, "every value the evidence leaves open has been measured")
    flat = _flat_probe(options, unsure, lever, goal, measured, b, noise)
    if flat is not None:
        return flat
    ok = [o for o in options if o[2] <= b.need and math.isfinite(o[1].objective)]
    if ok:
        return _from_forecasts(ok, unsure, lever, goal, measured, b, noise)
    return _without_forecast(options, unsure, lever, goal, measured, b, noise)


