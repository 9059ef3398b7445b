"""When a sweep level ends: a request count, a duration, and a steady state within a bound.

A level is bounded by :class:`LevelBounds`: the requests it may issue, its deadline (a duration
from its start), and how far that deadline may move while the level has not reached a steady
state. The steady-state test, :func:`steady_state`, reads the samples a running level takes of
itself (:class:`LevelSamples`: the tokens streamed so far and the requests streaming, a few
times a second) and asks what guidellm's over-saturation check asks: after the ramp-up, have
the throughput and the running batch stopped climbing or falling? A level that admits its load
slowly (long prompts against a small per-step token budget) is extended until they flatten, or
until the bound, and is then reported over the whole level, marked not steady, with the reason.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass

import numpy as np

from glm5lib.loadgen.metrics import cycle_climbs
from glm5lib.loadgen.settings import SweepSettings

__all__ = [
    "FLAT_DRIFT",
    "MIN_WINDOW_FRACTION",
    "SAMPLE_INTERVAL_S",
    "LevelBounds",
    "LevelSamples",
    "steady_state",
]

#: Seconds between a level's samples of its own streamed tokens and streaming requests.
SAMPLE_INTERVAL_S = 0.25
#: Largest relative change between the two halves of the window (throughput, streaming count)
#: that still reads as flat.
FLAT_DRIFT = 0.25
#: The shortest steady window, as a share of the level's planned duration (and at least 1 s).
MIN_WINDOW_FRACTION = 0.2
#: Streaming count at or above this share of its peak: the ramp-up is over.
_RAMP_SHARE = 0.9


class LevelSamples:
    """A level's samples of itself: ``(time, tokens streamed so far, requests streaming)``."""

    def __init__(self) -> None:
        self.t, self.tokens, self.streaming = array("d"), array("d"), array("d")

    def add(self, t: float, tokens: float, streaming: int) -> None:
        self.t.append(t)
        self.tokens.append(float(tokens))
        self.streaming.append(float(streaming))

    def __len__(self) -> int:
        return len(self.t)


def _drift(first: float, second: float) -> float:
    top = max(abs(first), abs(second))
    return 0.0 if top == 0 else abs(second - first) / top


def _halves(samples: LevelSamples, start: int) -> tuple[int, int, int]:
    """The samples that split the window after ``start`` in two, the last one it runs to, and how many
    times the streaming count climbed back to its level at ``start``.

    A closed loop of like requests moves in cycles (its streaming count falls as a cohort finishes
    and climbs back as the next one's prefill ends); halves cut at other points of two cycles read
    different rates from one steady loop. Where the count climbed back to its level at ``start``
    (:func:`~glm5lib.loadgen.metrics.cycle_climbs`) at least twice, the window ends at the last
    such climb and is split at the one nearest its middle; otherwise at its middle, to the last sample.
    """
    t, run, n = samples.t, samples.streaming, len(samples)
    climbs = [int(i) for i in cycle_climbs(np.frombuffer(run, dtype=float), run[start], start)]
    if len(climbs) >= 2:
        end = climbs[-1]
        middle = (t[start] + t[end]) / 2
        return min(climbs[:-1], key=lambda i: abs(t[i] - middle)), end, len(climbs)
    mid_t = t[start] + (t[-1] - t[start]) / 2
    return next(i for i in range(start, n) if t[i] >= mid_t), n - 1, len(climbs)


def steady_state(samples: LevelSamples, duration: float) -> tuple[bool, str]:
    """Has a level whose planned duration is ``duration`` s reached a steady state? ``(yes, why)``.

    The ramp-up is over once the number of requests streaming first reaches 90% of its peak;
    the window from there to the last sample must span at least :data:`MIN_WINDOW_FRACTION` of
    the duration (1 s at least) and hold tokens; it is steady when the throughput and the mean
    streaming count of its two halves differ by at most :data:`FLAT_DRIFT` (the slope has
    flattened). A loop that moves in cycles is halved at the points of its cycles (:func:`_halves`).
    ``why`` says which test failed, with its figures, or what was steady.
    """
    n = len(samples)
    if n < 4:
        return False, f"only {n} samples of the level"
    t, tok, run = samples.t, samples.tokens, samples.streaming
    peak = max(run)
    if peak <= 0:
        return False, "no request streamed"
    start = next(i for i in range(n) if run[i] >= _RAMP_SHARE * peak)
    span = t[-1] - t[start]
    need = max(1.0, MIN_WINDOW_FRACTION * duration)
    if span < need:
        return False, (f"the running batch was still growing: {peak:.0f} streaming reached {span:.1f} s "
                       f"before the end, under the {need:.1f} s a steady window needs")
    mid, end, climbs = _halves(samples, start)
    if mid <= start or mid >= end:
        return False, "too few samples after the ramp-up"
    rate1 = (tok[mid] - tok[start]) / (t[mid] - t[start])
    rate2 = (tok[end] - tok[mid]) / (t[end] - t[mid])
    if rate1 <= 0 and rate2 <= 0:
        return False, f"no tokens streamed in the {span:.1f} s after the ramp-up"
    run1 = sum(run[start:mid]) / (mid - start)
    run2 = sum(run[mid:end + 1]) / (end + 1 - mid)
    d_rate, d_run = _drift(rate1, rate2), _drift(run1, run2)
    if d_rate > FLAT_DRIFT and climbs == 1:
        return False, (f"one cycle of the loop since the ramp-up (its streaming count fell and climbed back once), "
                       f"whose halves hold different spells: {rate1:,.0f} then {rate2:,.0f} tok/s over the last "
                       f"{span:.1f} s; a second cycle would tell whether its rate is flat")
    if d_rate > FLAT_DRIFT:
        return False, (f"throughput still {'rising' if rate2 > rate1 else 'falling'}: {rate1:,.0f} then "
                       f"{rate2:,.0f} tok/s over the two halves of the last {span:.1f} s")
    if d_run > FLAT_DRIFT:
        return False, (f"running batch still {'growing' if run2 > run1 else 'shrinking'}: {run1:.1f} then "
                       f"{run2:.1f} streaming over the two halves of the last {span:.1f} s")
    return True, (f"steady over the last {span:.1f} s: {rate1:,.0f} and {rate2:,.0f} tok/s, "
                  f"{run1:.1f} and {run2:.1f} streaming")


@dataclass(frozen=True)
class LevelBounds:
    """How one level ends: ``requests`` issued (None: no count), a ``duration`` in seconds from
    its start (None: none), and ``extend``, how far the deadline may move, as a multiple of the
    duration, while the level is not steady (0: never moved)."""

    requests: int
    duration: float | None
    extend: float = 0.0

    @classmethod
    def for_level(cls, settings: SweepSettings, concurrency: int) -> LevelBounds:
        """The bounds ``settings`` give a level of ``concurrency`` requests in flight."""
        if settings.requests_per_level is not None:
            count = int(settings.requests_per_level)
        elif settings.duration:
            count = max(1000, concurrency * 64)  # enough never to run out before the deadline
        else:
            count = max(2 * concurrency, 16)
        extend = float(settings.steady_extend) if settings.duration else 0.0
        return cls(count, float(settings.duration) if settings.duration else None, extend)

    @property
    def longest(self) -> float | None:
        """The longest the level may run (seconds), extensions included; None without a duration."""
        return None if self.duration is None else self.duration * (1.0 + self.extend)

    def step(self) -> float:
        """Seconds one extension adds: a quarter of the duration, at least 1 s."""
        return max(1.0, 0.25 * (self.duration or 0.0))

    def next_deadline(self, t0: float, deadline: float, samples: LevelSamples) -> tuple[float | None, str]:
        """At ``deadline``: the later deadline the level gets (None: it ends now) and the verdict."""
        if self.duration is None:
            return None, ""
        steady, why = steady_state(samples, self.duration)
        if steady or not self.extend:
            return None, why
        limit = t0 + self.longest  # type: ignore[operator]
        if deadline >= limit - 1e-6 or not math.isfinite(limit):
            return None, why
        return min(limit, deadline + self.step()), why
