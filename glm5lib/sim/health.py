"""The stand-in's ``/health``, as SGLang 0.5.8, 0.5.9, 0.5.16 and 0.5.23 answer it.

503 while the server starts; with ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` off, 200 at once.
Otherwise (the default) SGLang submits a one-token request and answers 200 once the scheduler
delivers anything after the probe began, 503 after ``SGLANG_HEALTH_CHECK_TIMEOUT`` seconds (20):
so on a busy server the answer waits for the step in progress to end. The stand-in answers an idle
server at once (SGLang polls once a second, so it takes at least that long, and its probe request
shows in the log as a one-token prefill batch: neither is modelled) and a busy one at the end of
the next modelled step. The ``health-delay=SECONDS`` fault adds SECONDS while requests run, as a
long prefill does, the streams flowing all the while.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

__all__ = ["health_status"]

POLL_S = 0.01


def _env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if value in ("true", "1", "yes", "y"):
        return True
    if value in ("false", "0", "no", "n"):
        return False
    return default


def _check_timeout() -> float:
    try:
        return float(int(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20")))
    except ValueError:
        return 20.0


async def health_status(ready: bool, sched: Any, health_delay: float = 0.0) -> int:
    """The HTTP status ``/health`` answers: ``ready`` is whether the server finished starting,
    ``sched`` the scheduler (``running``, ``waiting``, ``last_step_done`` in time.monotonic())."""
    if not ready:
        return 503
    if not _env_bool("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", True):
        return 200
    if not (sched.running or sched.waiting):
        return 200
    if health_delay:
        await asyncio.sleep(health_delay)
    tic = time.monotonic()
    deadline = tic + _check_timeout()
    while time.monotonic() < deadline:
        if sched.last_step_done > tic or not (sched.running or sched.waiting):
            return 200
        await asyncio.sleep(POLL_S)
    return 503
