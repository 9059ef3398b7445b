"""The wait for a first token beside the queue: ``fixed + per_token x N x I`` (ms).

A prompt waits for the prompts prefilled with it and before it: ``N`` of them of ``I`` tokens each.
``N`` is the running batch where nothing queued for a place (a prompt waits for those admitted with
it), and the whole load where the load alone bound the batch yet fewer ran than were offered: those
not running waited for their prefill, and every prompt offered is one a request may wait behind (on
one H100, 4,096-token prompts under a 512-token chunk ran 8 of 16 and 32 of 64, their TTFT 0.83 and
3.1 s). Levels queued behind a cap or a full pool are left to the queue's own term.

A level of one request alone is the line's one exact point: no other prompt is ahead of it. The line
passes through it, and its slope is read off the loaded levels (least squares through that point,
which weighs the largest loads most: the forecast reaches beyond them). Without such a level it is
least squares on all of them. With one point only the slope is not in the evidence: the line is
flat there, and beyond the point's prompts the wait reaches up to the line through it and zero (no
fixed part: all of it the prompts'), which is what the forecast's upper edge takes (from one launch
at a cap of 32 on one H100, 2,048-token prompts: 58 ms forecast flat at a cap of 128, 819 ms measured,
920 ms that edge).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from glm5lib.stepmodel import nnls

__all__ = ["TtftLine", "fit_ttft"]


@dataclasses.dataclass(frozen=True)
class TtftLine:
    """``fixed_ms + per_token_ms x N x I``; ``anchor`` the one point ``(N x I, ms)`` a flat line was
    read from (None where the slope was read)."""

    fixed_ms: float = 0.0
    per_token_ms: float = 0.0
    anchor: tuple[float, float] | None = None

    def at(self, tokens: float) -> tuple[float, float]:
        """The wait where ``tokens`` prompt tokens are ahead (``N x I``), and its upper edge."""
        point = self.fixed_ms + self.per_token_ms * tokens
        if self.anchor is None or tokens <= 1.05 * self.anchor[0]:
            return point, point
        return point, max(point, self.anchor[1] * tokens / max(self.anchor[0], 1e-9))


def fit_ttft(levels: Sequence, queued_for_prefill: Callable[[object], bool]) -> TtftLine | None:
    """The line from ``levels`` (with ``concurrency``, ``running``, ``input_len``,
    ``output_len``, ``u_ms``, ``ttft_ms``, ``tpot_ms``); ``queued_for_prefill(level)`` says whether a
    level's missing requests waited for their prefill. None where no level says anything of it. With no
    level free of a queue, the line is what each level's service time leaves beside its TPOT."""
    free = [p for p in levels if p.concurrency <= 1.05 * p.running and p.ttft_ms is not None]
    rows = [(p.running * p.input_len, float(p.ttft_ms), p.concurrency <= 1) for p in free]
    rows += [(p.concurrency * p.input_len, float(p.ttft_ms), False) for p in levels
             if p not in free and p.ttft_ms is not None and queued_for_prefill(p)]
    if not rows:
        rows = [(p.running * p.input_len, max(p.output_len * p.u_ms - (p.output_len - 1) * p.tpot_ms, 0.0),
                 p.concurrency <= 1) for p in levels if p.tpot_ms is not None and p.output_len >= 2]
    if not rows:
        return None
    if len({r[0] for r in rows}) < 2:
        flat = float(np.median([r[1] for r in rows]))
        return TtftLine(flat, 0.0, (rows[0][0], flat) if rows[0][0] > 0 else None)
    alone = [r for r in rows if r[2]]
    loaded = [r for r in rows if not r[2] and (not alone or r[0] > alone[0][0])]
    if alone and loaded:
        x0, y0 = alone[0][0], alone[0][1]
        slope = float(nnls(np.array([[x - x0] for x, _, _ in loaded]), np.array([y - y0 for _, y, _ in loaded]))[0])
        return TtftLine(max(y0 - slope * x0, 0.0), slope)
    coef = nnls(np.array([[1.0, r[0]] for r in rows]), np.array([r[1] for r in rows]))
    return TtftLine(float(coef[0]), float(coef[1]))
