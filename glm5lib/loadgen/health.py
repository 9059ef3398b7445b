"""Whether the server under a sweep is alive: its process, ``/health`` and the streams themselves.

What ``/health`` means differs by engine and release, and on SGLang it is not a static answer:

- SGLang 0.5.8, 0.5.9, 0.5.16 and 0.5.23 (``sglang/srt/entrypoints/http_server.py``): ``/health`` and
  ``/health_generate`` are one handler. It answers 503 at once while the server is starting
  (before its warm-up) or shutting down. Otherwise, with ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION``
  on (the default in all four), it submits a one-token request and polls once a second until the
  tokenizer manager receives anything from the scheduler after the probe began
  (``last_receive_tstamp``): 200 then, so at least a second; 503 after
  ``SGLANG_HEALTH_CHECK_TIMEOUT`` seconds (20) without a word. On a busy server that is the end of
  the step in progress, which can take seconds (a prefill of a thousand new prompts at a level's
  start). With the variable off, ``/health`` answers 200 at once (``/health_generate`` still
  generates); 0.5.23 also skips the generation under ``SGLANG_DIAG_BYPASS_HEALTH_GENERATE``.
- vLLM 0.32: ``/health`` answers 200 at once unless the engine died (``EngineDeadError``: 503);
  nothing is generated.

So a ``/health`` that does not answer within ``health_timeout`` is no verdict on a busy SGLang: a
server whose streams still deliver data is alive whatever ``/health`` says. "Hung" takes both:
``/health`` failing its tries and no stream receiving a byte while it was probed. A ``/health``
that answers 503 at once is no hang either: before a sweep it is waited for (the server is
starting); during one, with the streams stalled too, the server is "unhealthy" (shutting down, or
vLLM's engine died).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from glm5lib.errors import LoadGenError

__all__ = ["check_alive", "exit_details", "wait_while_starting"]

log = logging.getLogger(__name__)

TRIES = 3
RETRY_PAUSE_S = 0.5
STARTING_POLL_S = 0.5
# A failed probe that took less than this part of its timeout was an answer (503, refused), not silence.
QUICK_FRACTION = 0.8


def call_probe(probe: Callable[..., bool], timeout: float) -> bool:
    """``server.healthy(timeout=...)``, or ``server.healthy()`` for one that takes no timeout."""
    try:
        return bool(probe(timeout=timeout))
    except TypeError:
        return bool(probe())


def exit_details(server: Any) -> str:
    """`` (nan, exit status -9)``: why a launched server ended, when it can say."""
    details = []
    with contextlib.suppress(Exception):
        cause = server.crash_cause() if callable(getattr(server, "crash_cause", None)) else None
        if cause:
            details.append(str(cause))
    code = getattr(server, "returncode", None)
    if isinstance(code, int):
        killed = code < 0 and -code in signal.valid_signals()
        details.append(f"exit status {code}" + (f", killed by {signal.Signals(-code).name}" if killed else ""))
    return f" ({', '.join(details)})" if details else ""


async def _probe_url(session: aiohttp.ClientSession, url: str, headers: dict[str, str], timeout: float) -> str:
    """'' when ``/health`` answered below 500, else what went wrong."""
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
            return "" if resp.status < 500 else f"/health answered HTTP {resp.status}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return f"/health failed: {type(exc).__name__}: {exc}"


async def _probe_server(server: Any, timeout: float) -> str:
    healthy = getattr(server, "healthy", None)
    if healthy is None:
        return ""
    began = time.monotonic()
    try:
        if await asyncio.to_thread(call_probe, healthy, timeout):
            return ""
    except Exception as exc:  # a health probe that raises counts as a failed one
        log.debug("health probe raised %r", exc)
    took = time.monotonic() - began
    if took < QUICK_FRACTION * timeout:
        return f"/health refused or answered no 200 ({took:.1f} s)"
    return f"/health did not answer within {timeout:g} s"


async def check_alive(
    session: aiohttp.ClientSession,
    base_url: str,
    headers: dict[str, str],
    timeout: float,
    server: Any = None,
    last_data: Callable[[], float | None] | None = None,
) -> tuple[bool, str, list[str]]:
    """(alive, why not, fatal log lines) of the server under a sweep.

    ``server`` (a launched server: ``alive()``, ``healthy(timeout=)``, ``fatal_lines()``) is asked
    first: a process that is gone is dead whatever else holds. Then ``/health`` gets up to three
    tries of ``timeout`` seconds; when they all fail, ``last_data()`` (the time.time() of the newest
    byte any stream received, None when none did) decides: data since the probing began means the
    server is busy, not hung.
    """
    began = time.time()

    def streaming() -> bool:
        newest = last_data() if last_data is not None else None
        return newest is not None and newest >= began

    where = ""
    if server is not None:
        log_path = getattr(server, "log_path", None)
        where = f" (log: {log_path})" if log_path else ""
        if not await asyncio.to_thread(server.alive):
            return False, f"the server process is gone{exit_details(server)}{where}", await _fatal(server)
    failure = ""
    silent = False  # a try timed out
    for attempt in range(TRIES):
        if server is not None:
            failure = await _probe_server(server, timeout)
            silent = silent or "did not answer" in failure
        else:
            failure = await _probe_url(session, base_url + "/health", headers, timeout)
        if not failure:
            return True, "", []
        if streaming():
            log.info("%s, but the streams are still receiving data: busy, not hung", failure)
            return True, "", []
        if attempt < TRIES - 1:
            await asyncio.sleep(RETRY_PAUSE_S)
    if server is None:
        return False, f"{failure} ({TRIES} tries) and no stream received data meanwhile", []
    if silent:
        why = (
            f"the server process is running but /health did not answer within {timeout:g} s ({TRIES} tries) "
            f"and no stream received data meanwhile: hung{where}"
        )
    else:  # SGLang answers 503 while starting or shutting down, vLLM once its engine died
        why = (
            f"the server process is running but {failure} ({TRIES} tries: starting, shutting down or its "
            f"engine dead) and no stream received data meanwhile: unhealthy{where}"
        )
    gone = not await asyncio.to_thread(server.alive)  # it died while we probed
    if gone:
        why = f"the server process is gone{exit_details(server)}{where}"
    lines = await _fatal(server)
    if lines and not gone:  # still writing its traceback: the log says why, not /health
        why = f"the server logged a fatal error{exit_details(server)}{where}"
    return False, why, lines


async def _fatal(server: Any) -> list[str]:
    with contextlib.suppress(Exception):
        return list(await asyncio.to_thread(server.fatal_lines))
    return []


async def wait_while_starting(
    session: aiohttp.ClientSession, base_url: str, headers: dict[str, str], limit: float,
) -> None:
    """Return once ``/health`` answers anything but 503, which SGLang answers while it starts
    (before its warm-up) and vLLM while it has no engine yet: a server starting up is not dead.
    Raises LoadGenError when it still answers 503 after ``limit`` seconds; connection errors and
    timeouts are left to the caller's own check."""
    began = time.monotonic()
    told = False
    while True:
        try:
            async with session.get(base_url + "/health", headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=10.0)) as resp:
                await resp.read()
                if resp.status != 503:
                    return
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return
        waited = time.monotonic() - began
        if waited >= limit:
            raise LoadGenError(
                f"{base_url}/health still answers HTTP 503 after {waited:.0f} s: the server is starting "
                "(or shutting down); wait until it is ready or check its log"
            )
        if not told:
            log.info("%s/health answers 503: the server is starting; waiting up to %g s", base_url, limit)
            told = True
        await asyncio.sleep(STARTING_POLL_S)
