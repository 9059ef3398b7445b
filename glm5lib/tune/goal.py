"""What a tuning run aims at: service-level limits and the quantity to maximise.

A limit is written as on the command line, ``METRIC<=VALUE`` (``median_tpot_ms<=250``,
``p99_ttft_ms<=2000``): ``METRIC`` is one of a sweep level's latency columns (``mean``,
``median``, ``p90`` or ``p99`` of ``ttft``, ``itl``, ``tpot`` or ``e2e_latency``, in ms).

The objective is ``output_throughput`` (tokens/s, the default) or ``goodput`` as vLLM's
``bench serve --goodput`` defines it: completed requests per second whose own TTFT, TPOT and
end-to-end latency each meet the per-request limits (``ttft:500 tpot:50 e2el:2000``, ms).
:func:`request_goodput` computes it from a level's ``requests.jsonl`` records.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib.errors import ConfigError
from glm5lib.loadgen import load_requests, load_sweep

__all__ = [
    "GOODPUT_KEYS",
    "LIMIT_METRICS",
    "OBJECTIVES",
    "Goal",
    "Limit",
    "goodput_of",
    "parse_goodput",
    "parse_limit",
    "request_goodput",
]

#: The sweep columns a limit may name.
LIMIT_METRICS = tuple(
    f"{stat}_{metric}_ms"
    for metric in ("ttft", "tpot", "itl", "e2e_latency")
    for stat in ("median", "p99", "p90", "mean")
)
#: What a tuning run maximises.
OBJECTIVES = ("output_throughput", "goodput")
#: vLLM's per-request goodput keys and the request property each limits.
GOODPUT_KEYS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2el": "e2e_latency_ms"}

_LIMIT_RE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|<)\s*([0-9.eE+-]+)\s*$")


@dataclass(frozen=True)
class Limit:
    """One service-level limit: ``metric <= value`` (milliseconds)."""

    metric: str
    value: float

    @property
    def quantity(self) -> str:
        """The latency the limit bounds: ``ttft``, ``tpot``, ``itl`` or ``e2e_latency``."""
        return self.metric.split("_", 1)[1].rsplit("_ms", 1)[0]

    def ratio(self, row: Mapping[str, Any]) -> float:
        """Measured value over the limit (above 1: broken; NaN when the level has no value)."""
        value = row.get(self.metric)
        try:
            value = float(value)
        except (TypeError, ValueError):
            return math.nan
        return value / self.value if math.isfinite(value) else math.nan

    def met(self, row: Mapping[str, Any]) -> bool:
        r = self.ratio(row)
        return bool(math.isfinite(r) and r <= 1.0)

    def __str__(self) -> str:
        return f"{self.metric}<={self.value:g}"


def parse_limit(text: str) -> Limit:
    """``"median_tpot_ms<=250"`` -> :class:`Limit`; a clear error for anything else."""
    match = _LIMIT_RE.match(str(text))
    if not match:
        raise ConfigError(f"--slo {text!r} is not METRIC<=VALUE, e.g. median_tpot_ms<=250 or p99_ttft_ms<=2000",
                          field="slo", valid=list(LIMIT_METRICS))
    metric, _, raw = match.groups()
    if metric not in LIMIT_METRICS:
        close = difflib.get_close_matches(metric, LIMIT_METRICS, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}<={raw}? " if close else ""
        raise ConfigError(f"--slo {text!r}: {metric!r} is not a latency metric a sweep measures; {hint}"
                          f"the metrics: {', '.join(LIMIT_METRICS)} (each METRIC<=MS)",
                          field="slo", valid=list(LIMIT_METRICS))
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"--slo {text!r}: {raw!r} is not a number of milliseconds", field="slo") from None
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"--slo {text!r}: the limit must be a positive number of milliseconds "
                          "(no request can be served in 0 ms or less)", field="slo")
    return Limit(metric, value)


def parse_goodput(items: Iterable[str] | Mapping[str, float] | None) -> dict[str, float]:
    """vLLM's ``--goodput`` pairs (``ttft:500 tpot:50``) -> ``{"ttft_ms": 500.0, ...}``."""
    if not items:
        return {}
    pairs = items.items() if isinstance(items, Mapping) else (str(i).split(":", 1) for i in items)
    out: dict[str, float] = {}
    for pair in pairs:
        if len(pair) != 2 or pair[0] not in GOODPUT_KEYS:
            raise ConfigError(f"--goodput {':'.join(map(str, pair))!r} is not KEY:MS with KEY one of "
                              f"{', '.join(GOODPUT_KEYS)} (as vLLM's bench serve takes it)",
                              field="goodput", valid=list(GOODPUT_KEYS))
        try:
            value = float(pair[1])
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"--goodput {pair[0]}:{pair[1]}: the limit must be a positive number of ms",
                              field="goodput")
        out[GOODPUT_KEYS[pair[0]]] = value
    return out


@dataclass
class Goal:
    """The limits to meet and what to maximise under them."""

    limits: list[Limit] = field(default_factory=list)
    objective: str = "output_throughput"
    #: per-request limits of goodput (``{"ttft_ms": 500, "tpot_ms": 50}``)
    goodput: dict[str, float] = field(default_factory=dict)

    @classmethod
    def parse(cls, slo: Sequence[str] | Mapping[str, float] | None = None, *, objective: str | None = None,
              goodput: Iterable[str] | Mapping[str, float] | None = None) -> Goal:
        """Limits as ``["median_tpot_ms<=250", ...]`` or ``{"median_tpot_ms": 250, ...}``."""
        if isinstance(slo, Mapping):
            slo = [f"{metric}<={value}" for metric, value in slo.items()]
        limits = [parse_limit(s) for s in slo or ()]
        seen: dict[str, float] = {}
        for lim in limits:
            if lim.metric in seen and seen[lim.metric] != lim.value:
                raise ConfigError(f"--slo gives {lim.metric} twice ({seen[lim.metric]:g} and {lim.value:g}): "
                                  "keep one", field="slo")
            seen[lim.metric] = lim.value
        per_request = parse_goodput(goodput)
        objective = objective or ("goodput" if per_request else "output_throughput")
        if objective not in OBJECTIVES:
            raise ConfigError(f"objective {objective!r} is not one of {', '.join(OBJECTIVES)}",
                              field="objective", valid=list(OBJECTIVES))
        if objective == "goodput" and not per_request:
            raise ConfigError("the goodput objective needs per-request limits, e.g. --goodput ttft:500 tpot:50",
                              field="goodput", valid=list(GOODPUT_KEYS))
        if not limits and objective == "output_throughput":
            raise ConfigError("a tuning goal needs at least one limit (--slo METRIC<=VALUE, e.g. "
                              "median_tpot_ms<=250); without one the most throughput is simply the largest batch",
                              field="slo", valid=list(LIMIT_METRICS))
        return cls(limits=limits, objective=objective, goodput=per_request)

    def check_workload(self, *, output_len: int) -> None:
        """Limits no server can meet for this workload are refused before anything launches."""
        for lim in self.limits:
            if lim.quantity in ("tpot", "itl") and output_len < 2:
                raise ConfigError(f"--slo {lim}: TPOT and ITL need at least 2 output tokens per request "
                                  f"(--output-len is {output_len})", field="slo")

    def slo_met(self, row: Mapping[str, Any]) -> bool:
        return all(lim.met(row) for lim in self.limits)

    def binding(self, row: Mapping[str, Any]) -> Limit | None:
        """The limit with the least room (highest measured/limit ratio) at ``row``."""
        ratios = [(lim.ratio(row), i) for i, lim in enumerate(self.limits)]
        ratios = [(r, i) for r, i in ratios if math.isfinite(r)]
        return self.limits[max(ratios)[1]] if ratios else (self.limits[0] if self.limits else None)

    def score(self, row: Mapping[str, Any]) -> float:
        key = "goodput" if self.objective == "goodput" else "output_throughput"
        try:
            value = float(row.get(key))
        except (TypeError, ValueError):
            return math.nan
        return value

    def to_dict(self) -> dict[str, Any]:
        return {"limits": [str(lim) for lim in self.limits], "objective": self.objective,
                "goodput": dict(self.goodput)}


def request_goodput(phase_dir: str | Path, concurrency: int, limits: Mapping[str, float]) -> float:
    """Requests per second at level ``concurrency`` of a phase that completed within every
    per-request limit (vLLM's ``request_goodput``); NaN when the level has no records."""
    folder = Path(phase_dir)
    return goodput_of(load_sweep(folder), load_requests(folder), concurrency, limits)


def goodput_of(sweep: pd.DataFrame, requests: pd.DataFrame, concurrency: int, limits: Mapping[str, float]) -> float:
    """:func:`request_goodput` of a phase's sweep and request records as read (records of a level
    attempt that never reached the sweep are left out, as :func:`glm5lib.loadgen.load_requests`
    leaves them)."""
    rows = sweep[sweep["concurrency"] == concurrency] if not sweep.empty else sweep
    if rows.empty:
        return math.nan
    level = rows.iloc[-1]
    req = requests
    if req is None or req.empty:
        return math.nan
    if "level_id" in req:
        done = set(sweep.get("level_id", pd.Series(dtype=str)).dropna())
        req = req[req["level_id"].isin(done) | req["warmup"].astype(bool)]
    req = req[(req["level"] == concurrency) & (req["status"] == "ok") & ~req["warmup"].astype(bool)]
    if "level_id" in req and isinstance(level.get("level_id"), str) and level.get("level_id"):
        req = req[req["level_id"] == level["level_id"]]
    start, end = float(level.get("window_start", math.nan)), float(level.get("window_end", math.nan))
    if math.isfinite(start) and math.isfinite(end) and end > start:
        req = req[(req["end"] >= start) & (req["end"] <= end)]
        seconds = end - start
    else:
        seconds = float(level["duration"])
    ok = req.assign(e2e_latency=req["end"] - req["start"])
    for name, limit in limits.items():
        col = {"ttft_ms": "ttft", "tpot_ms": "tpot", "e2e_latency_ms": "e2e_latency"}[name]
        ok = ok[(ok[col].astype(float) * 1000.0) <= limit]
    return float(len(ok) / seconds) if seconds > 0 else math.nan
