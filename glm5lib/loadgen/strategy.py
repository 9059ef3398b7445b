"""How a sweep level issues its requests: a closed loop at a concurrency, or Poisson arrivals at a rate.

A strategy takes the level's planned requests and a ``send`` coroutine (one streamed request,
recorded by the sweep) and issues them until they run out or the level's deadline passes. It
reads two things of the level as it goes: the gate (cleared while a health check decides
whether the server is still there, so a dead server does not eat the level's requests) and the
deadline, which the sweep may move later while the level is not steady.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from glm5lib.loadgen.workload import RequestSpec

__all__ = ["ClosedLoop", "LevelClock", "Poisson", "Strategy", "strategy_for"]

Send = Callable[[RequestSpec], Awaitable[None]]


class LevelClock:
    """What a strategy reads of the running level: its gate and its deadline, which may move.

    ``gate`` is cleared while a health check runs; ``deadline`` (epoch seconds, None: none) may
    be moved later by the sweep while the level is not steady. A strategy asks :meth:`admit`
    before each request: it waits while the gate is shut and, at a deadline that may still
    move, for the sweep's decision, so no loop gives up its place in the moment between the
    deadline and the extension.
    """

    def __init__(self, deadline: float | None = None, *, may_extend: bool = False) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.deadline = deadline
        self.may_extend = may_extend
        self.final = False
        self._decided = asyncio.Event()

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.time() >= self.deadline

    async def admit(self) -> bool:
        """True when the next request may go out; False once the level is over."""
        if not self.gate.is_set():
            await self.gate.wait()
        while self.past_deadline():
            if self.final or not self.may_extend:
                return False
            decided = self._decided
            await decided.wait()
        return True

    def extend_to(self, deadline: float) -> None:
        """Move the deadline later and let waiting loops go on."""
        self.deadline = deadline
        self._release()

    def end(self) -> None:
        """The level is over: loops waiting at the deadline stop."""
        self.final = True
        self._release()

    def _release(self) -> None:
        decided, self._decided = self._decided, asyncio.Event()
        decided.set()


class Strategy(Protocol):
    """Issues a level's requests; returns when they ran out or the deadline passed."""

    concurrency: int

    async def issue(self, specs: Sequence[RequestSpec], send: Send, clock: LevelClock) -> None: ...


@dataclass(frozen=True)
class ClosedLoop:
    """``concurrency`` requests always in flight: each of that many workers sends the next
    request as soon as its previous one ends."""

    concurrency: int

    async def issue(self, specs: Sequence[RequestSpec], send: Send, clock: LevelClock) -> None:
        it = iter(specs)

        async def worker() -> None:
            for spec in it:
                if not await clock.admit():
                    return
                await send(spec)

        workers = [asyncio.create_task(worker()) for _ in range(self.concurrency)]
        try:
            await asyncio.gather(*workers)
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)


@dataclass(frozen=True)
class Poisson:
    """Arrivals at ``rate`` requests/s (exponential gaps, seeded), at most ``concurrency`` in flight."""

    concurrency: int
    rate: float
    seed: int = 0

    async def issue(self, specs: Sequence[RequestSpec], send: Send, clock: LevelClock) -> None:
        rng = np.random.default_rng([self.seed, self.concurrency, int(self.rate * 1000)])
        sem = asyncio.Semaphore(self.concurrency)
        tasks: set[asyncio.Task] = set()
        next_t = time.perf_counter()

        async def capped(spec: RequestSpec) -> None:
            try:
                await send(spec)
            finally:
                sem.release()

        try:
            for spec in specs:
                next_t += float(rng.exponential(1.0 / self.rate))
                delay = next_t - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await sem.acquire()
                if not await clock.admit():
                    sem.release()
                    return
                task = asyncio.create_task(capped(spec))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            while tasks:
                await asyncio.gather(*list(tasks), return_exceptions=True)
        finally:
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*list(tasks), return_exceptions=True)


def strategy_for(concurrency: int, rate: float, seed: int = 0) -> Strategy:
    """A closed loop at ``concurrency`` for a rate of ``inf``, else Poisson arrivals capped at it."""
    if math.isinf(rate):
        return ClosedLoop(concurrency)
    return Poisson(concurrency, rate, seed)
