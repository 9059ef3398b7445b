"""What a wider (or narrower) prefill chunk is worth, on an engine that prefills in forwards of its own.

SGLang without mixed chunks prefills in forwards between decode steps, each at most one chunk of
tokens. A forward costs a fixed part (launches, scheduling: a few ms on an H100) beside a part per
token, so a request whose prompt is longer than the chunk pays the fixed part once per chunk, and
prompts shorter than a chunk share one forward when several wait. A served level's time per output
token, ``u`` (the batch over the level's throughput), is the decode step ``d`` (timed by the
engine's decode lines at the level's batch) for all but the first of a request's ``O`` tokens, which
its prefill makes, plus the batch's prefills spread over its output: ``u = d x (O - 1) / O + N x P / O``,
so each level states its own prefill time per request ``P``.

``P`` is ``F x a + I x b``: ``F`` forwards of fixed part ``a`` and ``I`` prompt tokens of ``b`` ms
each. One chunk size cannot tell ``a`` from ``b``; the engine's offline benchmark, whose prefill
forwards carry prompts of several sizes (``prefill_ms`` of ``step-profile.csv`` at two batches or
more), times ``b``. Each level's ``a`` is then what its ``P`` leaves: served under load it is
smaller than offline (on one H100 it fell from 7.2 ms at one request to 3.3 ms at 256, where the
offline forward's fixed part was 5.7 ms), and a change of chunk moves ``F`` alone:
``u' = u + N x (F' - F) x a / O``.

``F`` is the prompt over the chunk where the prompt is longer (the remainder shares a forward with the
next prompt while others wait, a forward of its own for a request alone); where the prompt fits in a
chunk, one forward per request when it is alone, down to the prompt over the chunk when enough wait to
fill one. How many wait is not in the evidence: the point is the geometric middle of the two and the
band reaches both (on one H100, 1,024-token prompts with the chunk at 8,192 read as nearly full
forwards at 16 concurrent requests and more).

Checked before the launches on a workload the term was not built from (4,096-token prompts, 64-token
outputs, chunk 512 raised to 2,048, 4,096 and 8,192 on one H100: data/examples/h100-sglang-chunk-4k):
the 4 levels given held their band (-10% to +5%); the other 8 were withheld, their bands past +/-30%
(the fixed part read 0-3.8 ms over the levels, a batch beyond the phase's, packing), their points
-15% to +17% off.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from glm5lib.diagnose.model.profile import MIN_SPREAD
from glm5lib.stepmodel import nnls

__all__ = ["PrefillForwards", "forwards", "off_graph_sizes", "prefill_ceiling", "read_prefill"]


def forwards(input_len: float, chunk: float, *, alone: bool) -> tuple[float, float, float]:
    """Prefill forwards per request for prompts of ``input_len`` under ``chunk``: (fewest, point,
    most). ``alone``: no other request can be waiting (one at a time)."""
    if chunk <= 0 or input_len <= 0:
        return 1.0, 1.0, 1.0
    full = input_len / chunk
    if full >= 1.0:
        most = float(math.ceil(full - 1e-9))
        return (most, most, most) if alone else (full, full, most)
    if alone:
        return 1.0, 1.0, 1.0
    return full, math.sqrt(full), 1.0


@dataclasses.dataclass
class PrefillForwards:
    """A phase's prefill priced per forward: ``per_token_ms`` from the engine's benchmark, and the
    fixed part each level's own prefill time leaves, as (batch, ms) sorted by batch."""

    chunk: int
    per_token_ms: float
    fixed: list[tuple[float, float]]
    spread: float
    source: str

    @classmethod
    def fit(cls, levels: Sequence[Any], chunk: int | None, rows: tuple[float, float, float, str] | None,
            offline: Any = None) -> PrefillForwards | None:
        """From the phase's ``levels`` (``running``, ``u_ms``, ``line_step_ms``, ``input_len``,
        ``output_len``, ``concurrency``, ``eager``), its ``chunk`` and the benchmark's reading ``rows``
        (from :func:`read_prefill`). None where either is missing or no level has a decode step.
        ``offline`` (a step profile) times the decode step alone where it covers a level's batch: a
        decode line's interval that spans a prefill reads slower than the step (outputs shorter than
        the lines' interval, or prefills spread between every few steps), never faster, so the
        shorter of the two is the step."""
        if not chunk or rows is None:
            return None
        per_token, _fixed_offline, spread, source = rows
        fixed = []
        for p in levels:
            steps = [s for s in (p.line_step_ms, offline.raw(p.running, p.eager) if offline is not None else None) if s]
            if not steps or p.running < 1 or p.output_len < 1:
                continue
            # the prefill forward makes a request's first token: O - 1 decode steps follow it
            decode = min(steps) * (p.output_len - 1) / p.output_len
            prefill = max(p.u_ms - decode, 0.0) * p.output_len / p.running
            _lo, f, _hi = forwards(p.input_len, chunk, alone=p.concurrency <= 1)
            fixed.append((float(p.running), max(prefill - p.input_len * per_token, 0.0) / f))
        if not fixed:
            return None
        fixed.sort()
        return cls(int(chunk), per_token, fixed, spread, source)

    @property
    def vary(self) -> float:
        """Half the range of the fixed part over the phase's levels, relative to their mean."""
        values = [a for _, a in self.fixed]
        mean = sum(values) / len(values)
        return (max(values) - min(values)) / 2.0 / mean if mean > 0 else 0.0

    def fixed_at(self, batch: float) -> float:
        """A forward's fixed part (ms) served at ``batch``: the levels' readings joined in log batch,
        the nearest one beyond them."""
        pts = self.fixed
        if batch <= pts[0][0]:
            return pts[0][1]
        if batch >= pts[-1][0]:
            return pts[-1][1]
        xs = [math.log(b) for b, _ in pts]
        return float(np.interp(math.log(batch), xs, [a for _, a in pts]))

    def _counts(self, batch: float, chunk: int, input_len: float) -> tuple[float, tuple[float, float, float]]:
        """Forwards a request took under the phase's chunk, and (fewest, point, most) under ``chunk``."""
        alone = batch <= 1
        return forwards(input_len, self.chunk, alone=alone)[1], forwards(input_len, chunk, alone=alone)

    def step(self, step_ms: float, batch: float, chunk: int, input_len: float, output_len: float
             ) -> tuple[float, float, float, str]:
        """The served step (ms per output token of each request) at ``batch`` once the chunk is
        ``chunk``, from the phase's ``step_ms`` there: (step, down, up, source), ``down``/``up`` the
        relative spread on throughput from how prompts pack and the per-token price's spread."""
        base, (lo, point, hi) = self._counts(batch, chunk, input_len)
        fixed = self.fixed_at(batch)
        per = batch / max(output_len, 1.0)

        def at(f: float, fixed_ms: float) -> float:
            return max(step_ms + per * (f - base) * fixed_ms, 0.05 * step_ms)

        new = at(point, fixed)
        # the per-token price's spread moves what each level's prefill leaves for the fixed part, and the
        # fixed part served moves with the load, which a chunk change moves too: by half its range over the
        # phase's levels, relative to their mean (on one H100 the 2,048 chunk's own levels read it 0.7x-1.2x
        # of what the 512 chunk's read at the same batch: data/examples/h100-sglang-chunk-long)
        shift = input_len * self.per_token_ms * self.spread / max(base, 1e-9) + fixed * self.vary
        slowest = max(at(hi, fixed), at(hi, fixed + shift), at(hi, max(fixed - shift, 0.0)))
        fastest = min(at(lo, fixed), at(lo, fixed + shift), at(lo, max(fixed - shift, 0.0)))
        down, up = max(slowest / new - 1.0, 0.0), max(new / fastest - 1.0, 0.0)
        source = (f"the prefill chunk {self.chunk:,} -> {chunk:,}: {point:.2g} forwards a request where the phase "
                  f"took {base:.2g} ({lo:.2g}-{hi:.2g} as prompts pack), each {fixed:.1f} ms of fixed cost served at "
                  f"batch {batch:g} (what the phase's prefill time per request leaves beside "
                  f"{self.per_token_ms * 1000:.1f} us a token from {self.source})")
        return new, down, up, source

    def ratio(self, batch: float, chunk: int, input_len: float) -> float:
        """A request's prefill time under ``chunk`` over the phase's, at ``batch``: what the wait for a
        first token scales by where prefills are what it waits for (on one H100, chunk 512 -> 2,048 under
        2,048-token prompts: 0.55-0.66 at 16-256, measured 0.52-0.55)."""
        base, (_lo, point, _hi) = self._counts(batch, chunk, input_len)
        fixed, tokens = self.fixed_at(batch), input_len * self.per_token_ms
        return (point * fixed + tokens) / max(base * fixed + tokens, 1e-9)

    def packing_text(self, chunk: int | None, input_len: float) -> str:
        """Why a forecast under ``chunk`` is not given where prompts of ``input_len`` fit in it several
        to a forward (how many share one is not in the evidence); "" where the chunk is the phase's or
        a prompt fills it."""
        if not chunk or chunk == self.chunk or chunk < 2 * input_len:
            return ""
        return (f"how many prompts of {input_len:,.0f} tokens one prefill forward carries under a chunk of {chunk:,} "
                f"(1 to {chunk // max(int(input_len), 1)}, as many as wait) is not in the evidence")

    def describe(self) -> str:
        fixed = ", ".join(f"{a:.1f} ms at {b:g}" for b, a in self.fixed)
        return (f"prefill: forwards of up to {self.chunk:,} tokens, {self.per_token_ms * 1000:.1f} us a token "
                f"(from {self.source}, +/-{self.spread:.0%}) and a fixed part each as the levels left it ({fixed})")


def read_prefill(frame: pd.DataFrame | None) -> tuple[float, float, float, str] | None:
    """The benchmark's prefill forwards (``prefill_ms`` of ``step-profile.csv`` at ``batch`` x
    ``input_len`` tokens) as (ms per token, fixed ms, relative misfit, source); None with fewer than
    two token counts or a slope that is not positive."""
    if frame is None or frame.empty or not {"batch", "prefill_ms", "input_len"} <= set(frame.columns):
        return None
    tokens = pd.to_numeric(frame["batch"], errors="coerce") * pd.to_numeric(frame["input_len"], errors="coerce")
    ms = pd.to_numeric(frame["prefill_ms"], errors="coerce")
    ok = tokens.notna() & ms.notna() & (tokens > 0) & (ms > 0)
    x, y = tokens[ok].to_numpy(float), ms[ok].to_numpy(float)
    if len(np.unique(x)) < 2:
        return None
    intercept, slope = nnls(np.column_stack([np.ones_like(x), x]), y, 1.0 / y)
    if slope <= 0:
        return None
    fit = intercept + slope * x
    spread = max(float(np.max(np.abs(fit / y - 1.0))), MIN_SPREAD)
    source = str(frame["source"].dropna().iloc[0]) if "source" in frame and frame["source"].notna().any() else "the step benchmark"
    return float(slope), float(intercept), spread, source


def prefill_ceiling(captured: Sequence[float], grid: Sequence[float], chunk: Any) -> int | None:
    """The largest prefill step the engine captures as a CUDA graph, where its start-up log shows a
    ceiling of its own rather than the chunk's: the captured list (``captured``) ends below the
    largest size of the release's grid (``grid``) at or under ``chunk``, or past the chunk. SGLang
    sets such a ceiling for models with MLA attention (GLM-5, Kimi K2, DeepSeek: 2,048 prefill tokens
    in 0.5.16, at most 8,192 in 0.5.23, whatever the chunk), and lowers any ceiling to the KV pool's
    size and the context length; a step above it runs eager by the engine's own choice. None where
    the log lists no sizes, or its list ends where the chunk puts it."""
    if not captured:
        return None
    top = int(max(captured))
    try:
        size = float(chunk)
    except (TypeError, ValueError):
        return None
    at_chunk = max((g for g in grid if g <= size), default=size) if grid else size
    return top if top != int(at_chunk) else None


def off_graph_sizes(adapter: Any, server_args: dict[str, Any], chunk: Any, *, captured: Sequence[float] = (),
                    base_chunk: Any = None) -> str | None:
    """Why a forecast of prefill chunk ``chunk`` cannot be given, from a phase at ``base_chunk``, where
    the engine captures prefill steps as CUDA graphs on a grid of token counts up to a ceiling: one of
    the two runs its full chunks eager and the other under a graph, a cost (or a gain) no phase holds.
    A chunk between two captured sizes runs every full chunk eager (on one H100 a 530-token chunk read
    about a third of 512's prompt rate and the load lost 59% of its throughput:
    data/examples/h100-sglang-tune-in-turn), and so does one above a ceiling of the engine's own that
    the phase's start-up log shows (``captured``; :func:`prefill_ceiling`). None where both run alike,
    or the engine has no grid. Without ``base_chunk`` the phase's chunks are taken as captured."""
    try:
        size = float(chunk)
        base = float(base_chunk) if base_chunk is not None else None
    except (TypeError, ValueError):
        return None
    reader = getattr(adapter, "release_reader", None)
    grid = adapter.prefill_grid(reader(server_args) if reader else None)
    ceiling = prefill_ceiling(captured, grid, base) if base is not None else None
    grid = [g for g in grid if ceiling is None or g <= ceiling]

    def graphed(c: float) -> bool | None:  # None: the grid does not say
        if ceiling is not None and c > ceiling:
            return False
        return c in grid if grid and grid[0] <= c <= grid[-1] else None

    new, old = graphed(size), (True if base is None else graphed(base))
    if new is None or old is None or new == old:
        return None
    if new:
        return (f"a size the engine captures as a prefill CUDA graph, where the phase's full chunks of {base:g} ran "
                "eager: a gain not in the evidence")
    if ceiling is not None and size > ceiling:
        return (f"above the largest prefill step the engine captures as a CUDA graph ({ceiling:g} tokens, the "
                "start-up log's list), so every full chunk would run eager, a cost not in the evidence")
    below, above = max(g for g in grid if g < size), min(g for g in grid if g > size)
    return (f"not a size the engine captures as a prefill CUDA graph, so every full chunk would run eager, a cost "
            f"not in the evidence ({below:g} and {above:g} are captured)")
