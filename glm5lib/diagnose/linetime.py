"""How long each decode line stands for, so a level's batch is read over time, not over lines.

SGLang writes a decode line every ``decode_log_interval`` scheduler steps (40 by default), not every
so many seconds: a batch of 1 steps ten times as fast as a batch of 1,023 and so writes ten times as
many lines per second. A median over lines then reads the batch a level ran mostly as its stragglers'.
On an H100 at 1,024 offered (cap 1,024) the engine ran 1,023 requests for about 6 s and a last
request alone for 0.6 s; of the level's 13 lines, 6 were that one request's, and the median over lines
said 7 running, where the batch held 1,023 for nine tenths of the time.

A line's own figures say how long it stands for: ``interval`` steps of ``running`` tokens each at its
``gen_throughput`` tokens per second, ``interval x running / gen_throughput`` seconds (the interval
cancels in the weights). Engines whose lines come every so many seconds (vLLM's periodic stats) and
gauges sampled on a clock weigh each row alike.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["line_seconds", "running_quantile", "weighted_quantile"]


def _num(lines: pd.DataFrame, col: str) -> np.ndarray:
    if col not in lines:
        return np.full(len(lines), np.nan)
    return pd.to_numeric(lines[col], errors="coerce").to_numpy(dtype=float)


def line_seconds(lines: pd.DataFrame, *, per_steps: bool) -> np.ndarray:
    """Relative time each row stands for: ``running / gen_throughput`` for lines written every so
    many steps (``per_steps``) where both figures are there and positive; otherwise the median of
    the others (or 1 for all rows: a clock's samples, or lines that do not say)."""
    n = len(lines)
    if not n:
        return np.zeros(0)
    w = np.full(n, np.nan)
    if per_steps:
        running, rate = _num(lines, "running_req"), _num(lines, "gen_throughput")
        if "source" in lines:
            # gauges sampled on a clock are not step-paced, whatever the engine's log does
            running = np.where(lines["source"].astype(str).to_numpy() == "metrics", np.nan, running)
        ok = (running > 0) & (rate > 0)
        w[ok] = running[ok] / rate[ok]
    fill = float(np.nanmedian(w)) if np.isfinite(w).any() else 1.0
    return np.where(np.isfinite(w), w, fill)


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The value below which ``q`` of the total weight lies (NaN values dropped; NaN when none)."""
    v = np.asarray(values, dtype=float)
    w = np.asarray(weights, dtype=float)
    keep = np.isfinite(v) & np.isfinite(w) & (w > 0)
    if not keep.any():
        return float("nan")
    v, w = v[keep], w[keep]
    order = np.argsort(v, kind="stable")
    v, c = v[order], np.cumsum(w[order])
    return float(v[int(np.searchsorted(c, q * c[-1], side="left"))])


def running_quantile(lines: pd.DataFrame, q: float = 0.5, *, per_steps: bool) -> float:
    """The running batch that ``q`` of a stretch's time stayed at or below (rows that each stand
    for the same time: the plain quantile, interpolated as pandas does)."""
    running = _num(lines, "running_req")
    if not per_steps:
        finite = running[np.isfinite(running)]
        return float(np.quantile(finite, q)) if len(finite) else float("nan")
    return weighted_quantile(running, line_seconds(lines, per_steps=per_steps), q)

