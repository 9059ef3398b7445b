"""The levers a tuning run may move, per engine, with bounds that are safe to launch.

A :class:`Lever` is one integer or fractional launch argument (in the engine's own field name,
as ``FIX_CHANGES`` takes them) with the range the engine accepts; each engine's adapter lists
its own (``glm5lib.engines.get(name).levers(release)``) and :func:`engine_levers` reads them
there. :func:`safe_bounds` narrows a lever's range with what the evidence and the engine's
capabilities say: a running cap above what the KV pool holds for this workload, or above the
offered load, changes nothing; an engine that refuses a token budget below its running cap has
each bounded by the other. A ``command`` engine has no known levers: give them as
``FIELD=LOW:HIGH`` (:func:`parse_lever`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from glm5lib import engines
from glm5lib.engines.base import Lever
from glm5lib.errors import ConfigError

__all__ = ["Lever", "engine_levers", "lever_for", "parse_lever", "safe_bounds"]


def engine_levers(engine: str, release: str | None = None) -> list[Lever]:
    """The levers of ``engine`` under ``release``'s field names; [] for "command" (give them as
    flags); ConfigError naming the registered engines for an unknown one."""
    return engines.get(engine).levers(release)


#: what a command engine's flag limits, as ``--lever FLAG=LOW:HIGH:WHAT`` names it
FLAG_LIMITS = {"running": "running", "budget": "prefill"}


def parse_lever(text: str, known: Sequence[Lever]) -> Lever:
    """``"max_num_seqs"`` or ``"max_num_seqs=4:64"`` -> the engine's lever (bounds narrowed);
    for a ``command`` engine ``"--max-batch=1:256"`` names a flag the tuner may set."""
    name, _, bounds = str(text).partition("=")
    name = name.strip()
    field = name.lstrip("-").replace("-", "_")
    by_field = {lev.field: lev for lev in known}
    if by_field and field not in by_field:
        raise ConfigError(f"--lever {text!r}: this engine has no lever {field!r}", field="lever",
                          valid=sorted(by_field))
    # a command engine's flag caps running requests unless it names tokens (a per-step budget);
    # LOW:HIGH:running or LOW:HIGH:budget says which
    acts_on = "prefill" if "token" in field else "running"
    parts = bounds.split(":") if bounds else []
    if len(parts) == 3 and not by_field:
        if parts[2] not in FLAG_LIMITS:
            raise ConfigError(f"--lever {text!r}: the third part says what the flag limits: "
                              f"{' or '.join(FLAG_LIMITS)}", field="lever", valid=list(FLAG_LIMITS))
        acts_on = FLAG_LIMITS[parts.pop()]
    lever = by_field.get(field) or Lever(field, "int", 1, 1 << 20, f"flag {name}", flag=name, acts_on=acts_on)
    if bounds:
        try:
            lo_text, hi_text = parts
            lo, hi = float(lo_text), float(hi_text)
        except ValueError:
            raise ConfigError(f"--lever {text!r}: bounds must be LOW:HIGH, e.g. {field}=4:256"
                              + ("" if by_field else " (or LOW:HIGH:budget for a per-step token budget)"),
                              field="lever") from None
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo < hi):
            raise ConfigError(f"--lever {text!r}: impossible bounds (need 0 < LOW < HIGH)", field="lever")
        if by_field and (lo < lever.low or hi > lever.high):
            raise ConfigError(f"--lever {text!r}: outside what the engine accepts "
                              f"({lever.low:g}..{lever.high:g})", field="lever")
        kind = lever.kind if by_field else ("int" if lo.is_integer() and hi.is_integer() else "float")
        lever = replace(lever, low=lo, high=hi, kind=kind)
    elif not by_field:
        raise ConfigError(f"--lever {text!r}: a command engine's lever needs bounds, e.g. {name}=1:256",
                          field="lever")
    return lever


def lever_for(engine: str, acts_on: str, levers: Sequence[Lever]) -> Lever | None:
    """The first of ``levers`` that acts on ``acts_on`` ("running", "prefill"): the engine's own
    running cap or token budget where it has one."""
    caps = engines.get(engine).capabilities
    preferred = caps.running_cap_field if acts_on == "running" else caps.token_budget_field
    for lev in levers:
        if preferred and caps.limit_of(lev.field) == caps.limit_of(preferred):
            return lev
    return next((lev for lev in levers if lev.acts_on == acts_on), None)


def safe_bounds(lever: Lever, engine: str, *, concurrency: int, input_len: int, output_len: int,
                startup: Mapping[str, Any] | None = None,
                config: Mapping[str, Any] | None = None) -> tuple[Lever, str]:
    """``lever`` narrowed to values that can make a difference and launch safely; and why.

    ``config`` holds the configuration's own values of the other levers: an engine that refuses a
    token budget below its running cap (vLLM: ``max_num_batched_tokens >= max_num_seqs``) has each
    bounded by the other."""
    why = []
    config = config or {}
    caps = engines.get(engine).capabilities
    cap_field, budget_field = caps.running_cap_field, caps.token_budget_field
    high = float(lever.high)
    if caps.budget_at_least_cap and lever.field == budget_field:
        cap = config.get(cap_field) or caps.default_running_cap
        if cap and float(cap) > float(lever.low):
            lever = replace(lever, low=float(cap))
            why.append(f"at least {cap_field} ({cap}): {engine} refuses a smaller token budget")
    if caps.budget_at_least_cap and lever.field == cap_field and config.get(budget_field):
        budget = float(config[budget_field])
        if budget < high:
            high = budget
            why.append(f"at most {budget_field} ({int(budget)}): {engine} refuses a larger running cap")
    if lever.field == cap_field or (cap_field is None and lever.acts_on == "running"):
        if concurrency < high:
            high = float(concurrency)
            why.append(f"at most the {concurrency} requests offered")
        pool = engines.limits_of(engine, config, startup or {}).kv_tokens
        if isinstance(pool, (int, float)) and pool > 0:
            fits = int(pool // max(1, input_len + output_len))
            if 0 < fits < high:
                high = float(fits)
                why.append(f"at most the {fits} requests of {input_len}+{output_len} tokens the KV pool "
                           f"of {int(pool):,} tokens holds")
    if high < lever.low:
        raise ConfigError(f"lever {lever.field}: no value between {lever.low:g} and {high:g} is safe here",
                          field="lever")
    return replace(lever, high=high), "; ".join(why)
