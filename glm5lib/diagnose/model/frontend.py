"""The serving front end as a ceiling on the tokens clients receive.

An engine's front end (SGLang's HTTP server and tokenizer manager, its detokenizer; vLLM's API
server) does work for every token it streams: it receives the step's output, detokenizes, builds
and writes a chunk. Each of its processes runs on one core, so however fast the engine steps, the
clients cannot receive more than those cores turn out: on one H200 SGLang 0.5.16's serving process
used 99% of its core at 256 running while the engine generated 16.5 k tok/s and the client received
11.6 k (``data/examples/h200-sglang``; SGLang issue 6553 names the single-threaded tokenizer
manager).

Per serving role, a level's CPU (% of one core, summed over the role's processes) is fitted as
``idle + per_token x received tok/s`` over the phase's levels (least squares, coefficients kept at
0 or above; a one-level phase takes the line through the origin, the cautious reading). The
ceiling is where that line reaches one core per process: ``(100 x workers - idle) / per_token``.
More processes (``--tokenizer-worker-num``, ``--api-server-count``) multiply it, by the engines'
own design (each process serves its share on its own core); a stream interval of ``k`` tokens
divides a per-chunk role's work by ``k`` (the engine sends and the front end writes one chunk per
``k`` tokens), which no level has measured, so its forecast says so.

What a capped phase cannot show: the per-token cost at more running streams than it ran. Where the
engine's serving role states how that cost grows (``ServingRole.stream_growth``, per doubling of the
streams, with its source: SGLang's tokenizer manager took about 12% more per token per doubling from
64 to 1,024 running on an H100 and an H200), the ceiling at a larger batch is read with that growth and
its band spans :data:`GROWTH_SPREAD` either side of it per doubling; where it does not, the point
assumes none and the band reaches down as if the cost grew by :data:`BEYOND_PER_DOUBLING` per
doubling (more live streams cost the serving process more, never less). On the H100 the capped
baseline's line (4.97% of a core per 1,000 tok/s at 64 running) read flat put the ceiling at 17.8 k
tok/s where 13.6 k (256 running) and 11.0 k (1,024) were measured; with the growth, 14.1 k and 11.3 k.
And one launch's reading carries :data:`LAUNCH_SPREAD`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from glm5lib.stepmodel import nnls

__all__ = ["FrontEnd", "RoleFit", "fit_frontend"]

# Levels whose role used less than this (% of a core) say too little about its per-token cost.
MIN_PCT = 5.0
# A role this busy (% of one core per process) at a level paced that level.
BUSY_PCT = 90.0
# The per-token cost's possible growth per doubling of the running streams beyond the phase's (the
# ceiling's band reaches down by it): on the H200 SGLang's serving process took at least a third
# more per token at 256 running than at 64; vLLM's API server on CPU took no more at 64 than at 16.
BEYOND_PER_DOUBLING = 0.15
# A role's stated growth per doubling is known to within this (H100: +9% and +11%; H200: about +15%).
GROWTH_SPREAD = 0.06
# ... and per doubling of the load the line is extrapolated to, beyond the busiest level.
EXTRAPOLATION_PER_DOUBLING = 0.05
# A front end's CPU per token moves from launch to launch of one configuration more than the engine's
# step does: on the H200 the tokenizer used 63% of its core at 9.8 k tok/s and 64 running in one
# launch, 77% in the next and 88% in a launch of another sitting (data/examples/h200-sglang, baseline,
# fix and grid/grid-1): a ceiling read off one launch carries this spread.
LAUNCH_SPREAD = 0.2


@dataclasses.dataclass
class RoleFit:
    """One serving role's CPU line: ``idle + per_token x tok/s`` (% of one core)."""

    name: str
    idle_pct: float
    per_token_pct: float  # % of one core per received token per second
    workers: int
    per_chunk: bool
    fit_error: float
    levels: int
    busiest_pct: float  # the highest share of its cores any level used
    running_seen: float  # the largest batch among the levels it was fitted on
    workers_field: str | None = None
    stream_growth: float = 0.0  # per-token cost's growth per doubling of the streams (the role's own figure)
    growth_source: str = ""
    # its processes shared every core the server may use with the engine at every level: no core of
    # its own to fill, so no ceiling; its work shows in the engine's step instead
    shares_cores: bool = False

    def _doublings(self, running: float | None) -> float:
        if not running:
            return 0.0
        return max(math.log2(max(running / max(self.running_seen, 1.0), 1.0)), 0.0)

    def ceiling(self, workers: int | None = None, chunk_gain: float = 1.0, running: float | None = None) -> float:
        """Received tok/s at which its processes reach one core each, at ``running`` streams (the
        per-token cost grown by the role's stated growth beyond the batches the phase ran)."""
        n = workers or self.workers
        if self.per_token_pct <= 0 or self.shares_cores:
            return math.inf
        per = self.per_token_pct * (1.0 + self.stream_growth) ** self._doublings(running)
        return max(100.0 * n - self.idle_pct, 1.0) / per * (chunk_gain if self.per_chunk else 1.0)

    def band(self, running: float, workers: int | None = None) -> tuple[float, float]:
        """Relative (down, up) spread of :meth:`ceiling` at a batch of ``running``."""
        reach = 100.0 / max(self.busiest_pct, 1e-9)
        fit = self.fit_error + EXTRAPOLATION_PER_DOUBLING * max(math.log2(max(reach, 1.0)), 0.0)
        spread = math.hypot(fit, LAUNCH_SPREAD)
        # more streams than the phase ran cost more per token: by the role's stated growth give or take
        # GROWTH_SPREAD, or (none stated) by anything from nothing to BEYOND_PER_DOUBLING per doubling
        d = self._doublings(running)
        g = self.stream_growth
        g_hi = max(g + GROWTH_SPREAD, BEYOND_PER_DOUBLING) if g > 0 else BEYOND_PER_DOUBLING
        g_lo = max(g - GROWTH_SPREAD, 0.0)
        down = 1.0 - ((1.0 + g) / (1.0 + g_hi)) ** d / (1.0 + spread)
        up = (1.0 + spread) * ((1.0 + g) / (1.0 + g_lo)) ** d - 1.0
        return min(down, 0.9), up

    def describe(self, running: float | None = None) -> str:
        text = (f"{self.name}: {self.idle_pct:.0f}% of a core idle + {self.per_token_pct * 1000:.2f}% per 1,000 tok/s "
                f"received ({self.levels} levels, error {self.fit_error:.0%}), {self.workers} process"
                f"{'es' if self.workers != 1 else ''}: ")
        if self.shares_cores:
            return text + "no ceiling of its own (it shared the server's every core with the engine at every level)"
        text += f"ceiling {self.ceiling():,.0f} tok/s"
        d = self._doublings(running)
        if d > 0 and self.stream_growth > 0:
            text += (f", {self.ceiling(running=running):,.0f} at {running:,.0f} streams (its per-token cost "
                     f"+{self.stream_growth:.0%} per doubling beyond the {self.running_seen:,.0f} it ran: "
                     f"{self.growth_source})")
        return text


@dataclasses.dataclass
class FrontEnd:
    """The serving roles' fits; empty where the phase recorded no per-process CPU."""

    roles: list[RoleFit] = dataclasses.field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.roles)

    def binding(self, workers: dict[str, int] | None = None, chunk_gain: float = 1.0,
                running: float | None = None) -> RoleFit | None:
        """The role with the lowest ceiling under ``workers`` (role -> processes), a stream
        interval ``chunk_gain`` times the phase's and ``running`` streams."""
        if not self.roles:
            return None
        workers = workers or {}
        return min(self.roles, key=lambda r: r.ceiling(workers.get(r.name), chunk_gain, running))

    def describe(self) -> str:
        return "; ".join(r.describe() for r in self.roles)


def _nnls_line(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:


    xa, ya = np.asarray(x, float), np.asarray(y, float)
    coef = nnls(np.column_stack([np.ones_like(xa), xa]), ya)
    return float(coef[0]), float(coef[1])


def fit_frontend(points: Sequence[Any], roles: Sequence[Any], workers: dict[str, int]) -> FrontEnd:
    """Each serving role's CPU line over the levels that recorded it (at least one level where it
    used :data:`MIN_PCT` of a core or more); roles on a host whose every core was busy at every
    level are left out (the processes shared cores, so none had a ceiling of its own)."""
    fits = []
    for role in roles:
        used = [p for p in points if role.name in p.frontend and p.throughput > 0 and not p.host_busy]
        rows = [(p.throughput, p.frontend[role.name], p.running) for p in used]
        rows = [r for r in rows if r[1] >= MIN_PCT] or []
        if not rows:
            continue
        n = max(int(workers.get(role.name) or 1), 1)
        t = [r[0] for r in rows]
        pct = [r[1] for r in rows]
        if len({round(v, -1) for v in t}) >= 2 and max(t) >= 1.5 * min(t):
            idle, per = _nnls_line(t, pct)
        else:
            idle, per = 0.0, max(pct) / max(t)
        if per <= 0:
            continue
        err = sum(abs(idle + per * a - b) / b for a, b in zip(t, pct, strict=True)) / len(rows)
        fits.append(RoleFit(
            name=role.name, idle_pct=idle, per_token_pct=per, workers=n, per_chunk=bool(role.per_chunk),
            fit_error=float(err), levels=len(rows), busiest_pct=max(pct) / n,
            running_seen=max(r[2] for r in rows), workers_field=role.workers_field,
            stream_growth=float(getattr(role, "stream_growth", 0.0) or 0.0),
            shares_cores=bool(used) and all(getattr(p, "cores_shared", False) for p in used),
            growth_source=str(getattr(role, "growth_source", "") or ""),
        ))
    return FrontEnd(fits)
