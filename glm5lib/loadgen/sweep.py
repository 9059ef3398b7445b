"""Concurrency and rate sweeps: levels run one after another on one shared aiohttp session.

Each level is closed-loop (C requests always in flight) or open-loop (Poisson arrivals at a
rate, optionally capped at C in flight), bounded by a request count, a duration, or both. A
duration-bound level stops issuing at its deadline and cancels what is still in flight (recorded
as ``cancelled``, not failed), so a server with a long queue does not stretch a level for minutes.
Records go to ``requests.jsonl`` as each request finishes and a row to ``sweep.csv`` as each level
finishes, so an interrupted sweep loses nothing and resumes where it stopped. Memory holds only
the requests in flight and the level's counters: the level's figures are computed from its lines
of ``requests.jsonl`` (a temporary file when there is no run folder) when it ends, so a long level
takes no more memory than a short one.

The parts live in their own modules: how a level issues requests (:mod:`~glm5lib.loadgen.strategy`:
closed loop, Poisson arrivals), when it ends (:mod:`~glm5lib.loadgen.constraints`: count,
duration, steady state within a bound), where records and rows go (:mod:`~glm5lib.loadgen.sink`),
the client's self-check (:mod:`~glm5lib.loadgen.selfcheck`) and prompt sizing
(:mod:`~glm5lib.loadgen.prompts`); this module runs levels with them, watching the server's
health, its log's fatal lines and the caller's stop event, and reporting progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import inspect
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import numpy as np
import pandas as pd

from glm5lib import rundir
from glm5lib.errors import ConfigError, LoadGenError, SweepAbortedError
from glm5lib.loadgen.client import API_PATHS, RequestRecord, build_body, stream_request
from glm5lib.loadgen.constraints import SAMPLE_INTERVAL_S, LevelBounds, LevelSamples
from glm5lib.loadgen.health import check_alive, exit_details, wait_while_starting
from glm5lib.loadgen.metrics import SWEEP_COLUMNS, level_stats
from glm5lib.loadgen.prompts import PROMPT_TOLERANCE, PromptSizer
from glm5lib.loadgen.records import load_requests, load_sweep
from glm5lib.loadgen.selfcheck import LevelSelfCheck, client_bound_text, client_limited, free_cores
from glm5lib.loadgen.settings import SweepSettings, settings_from, settings_keywords, sweep_levels
from glm5lib.loadgen.sink import RecordSink, RowSink
from glm5lib.loadgen.strategy import LevelClock, strategy_for
from glm5lib.loadgen.workload import RequestSpec, load_prompts

__all__ = ["HEADLESS_ENV", "client_limited", "load_requests", "load_sweep", "run_sweep", "run_sweep_async"]

log = logging.getLogger(__name__)

#: set in a notebook kernel's environment when the notebooks run headless: no progress bars there
HEADLESS_ENV = "GLM5_HEADLESS"

# Seconds between progress-bar refreshes and between "progress" callbacks. Each refresh of a
# notebook bar is a message to the front end; faster updates flood long cells (and nbval).
PROGRESS_INTERVAL_S = 1.0
# Seconds between returns of the C heap's free pages to the system during a level (glibc).
HEAP_TRIM_INTERVAL_S = 10.0
# Seconds the sweep waits for a server whose /health answers 503 (starting) without a read_timeout.
STARTING_WAIT_S = 600.0


def _heap_trimmer() -> Callable[[], Any] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # glibc; absent from musl and macOS
    except (AttributeError, OSError):
        return None


# Streams allocate and free a chunk buffer (the whole text so far) per chunk; glibc keeps the freed
# pages, scattered between live objects, so a long level's RSS climbs by kilobytes per request
# while the memory in use stays flat. malloc_trim(0) hands them back (well under a millisecond).
_TRIM_HEAP = _heap_trimmer()


class _ServerLike(Protocol):
    def alive(self) -> bool: ...

    def fatal_lines(self) -> list[str]: ...


class _Stopped(Exception):
    """The caller's stop event was set: the level in progress is dropped, finished ones kept."""


class _Aborted(Exception):
    def __init__(self, message: str, log_lines: Sequence[str] = ()):
        super().__init__(message)
        self.log_lines = list(log_lines)


def _mask(key: str | None) -> str:
    return "***" if key else "None"


class _LevelState(LevelClock):
    """Counters the progress bar, the callback and the watchdog read while a level runs."""

    def __init__(self, planned: int = 0, deadline: float | None = None, *, may_extend: bool = False) -> None:
        # The gate (LevelClock) is cleared on a refused or dropped connection: no new request goes
        # out until a health check says the server is still there, so a dead server does not eat
        # a level's requests.
        super().__init__(deadline, may_extend=may_extend)
        self.planned = planned
        self.unchecked = False
        self.finished = False
        self.issued = 0
        self.completed = 0
        self.failed = 0
        self.cancelled = 0
        self.output_tokens = 0
        self.last_issue: float | None = None
        self.first_error: str | None = None  # the level's records are on disk, not kept here
        self.fatal_before = 0  # fatal lines in the server's log when the level began
        self.connection_errors = asyncio.Event()
        self.rejected = 0  # HTTP 4xx
        self.inflight: dict[int, tuple[RequestRecord, asyncio.Task]] = {}
        self.last_data: float | None = None  # the newest chunk of a request that has ended
        self.samples = LevelSamples()
        self.extended = 0.0  # seconds the deadline moved while the level was not steady
        self.verdict = ""  # the steady-state test at the (last) deadline
        self.steady: bool | None = None

    def newest_data(self) -> float | None:
        """time.time() of the newest chunk any request of the level received (None: none yet)."""
        newest = self.last_data
        for rec, _task in list(self.inflight.values()):
            if rec.chunk_times and (newest is None or rec.chunk_times[-1] > newest):
                newest = rec.chunk_times[-1]
        return newest

    def streamed(self) -> tuple[float, int]:
        """(tokens streamed so far, requests streaming now)."""
        tokens, streaming = float(self.output_tokens), 0
        for rec, _task in list(self.inflight.values()):
            if rec.chunk_times:
                streaming += 1
                tokens += (rec.chunk_tokens[-1] if rec.chunk_tokens else None) or len(rec.chunk_times)
        return tokens, streaming

    def count(self, rec: RequestRecord) -> None:
        """Fold a finished request into the counters (and shut the gate on a lost connection)."""
        if rec.chunk_times and (self.last_data is None or rec.chunk_times[-1] > self.last_data):
            self.last_data = rec.chunk_times[-1]
        if rec.status == "ok":
            self.completed += 1
        elif rec.status == "cancelled":
            self.cancelled += 1
        else:
            self.failed += 1
            if self.first_error is None:
                self.first_error = rec.error or ""
            if rec.connection_lost:
                self.gate.clear()
                self.unchecked = True
                self.connection_errors.set()
            if rec.http_status is not None and 400 <= rec.http_status < 500:
                self.rejected += 1
                if self.completed == 0:
                    self.connection_errors.set()
        self.output_tokens += rec.output_tokens or 0


class _Sweep:
    def __init__(
        self,
        base_url: str,
        concurrencies: Sequence[int] | int,
        settings: SweepSettings,
        *,
        run_dir: str | Path | None,
        api_key: str | None,
        server: _ServerLike | None,
        progress: bool,
        callback: Callable[[dict[str, Any]], None] | None,
        stop_event: threading.Event | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.concurrencies = concurrencies
        self.settings = settings
        self.model = settings.model  # read from /v1/models by the preflight when None
        self.api_key = api_key
        self.server = server
        self.progress = progress
        self.callback = callback
        self.stop_event = stop_event
        self._dataset_pairs = load_prompts(settings.dataset) if settings.dataset is not None else None
        self.headers = {"Content-Type": "application/json"}
        if self.api_key:
            self.headers["Authorization"] = f"Bearer {self.api_key}"
        self.url = self.base_url + API_PATHS[settings.api]
        self.out_dir: Path | None = Path(run_dir) if run_dir is not None else None
        self.records: RecordSink | None = None
        self.rows = RowSink(self.out_dir)
        self.stopped_at: int | None = None
        self.prompts = PromptSizer(settings, self._dataset_pairs)

    # -- records ---------------------------------------------------------------------------
    def _sink(self, rec: RequestRecord, state: _LevelState | None) -> None:
        if self.records is not None:
            self.records.write(rec)
        if state is not None:
            state.count(rec)

    async def _one(
        self, session: aiohttp.ClientSession, spec: RequestSpec, level: int, level_id: str,
        state: _LevelState | None, warmup: bool = False,
    ) -> RequestRecord:
        rec = RequestRecord(level=level, index=spec.index, warmup=warmup, level_id=level_id,
                            asked_input_tokens=spec.input_len)
        body = build_body(
            self.settings.api, spec.prompt, spec.output_len, model=self.model, ignore_eos=self.settings.ignore_eos,
            temperature=self.settings.temperature, extra_body=self.settings.extra_body,
        )
        if state is not None:
            state.issued += 1
            state.last_issue = time.time()
            task = asyncio.current_task()
            if task is not None:
                state.inflight[id(rec)] = (rec, task)
        try:
            await stream_request(session, self.url, body, self.headers, rec, self.settings.api)
        finally:
            if state is not None:
                state.inflight.pop(id(rec), None)
            self._sink(rec, state)
        return rec

    # -- health ----------------------------------------------------------------------------
    async def _check_alive(
        self, session: aiohttp.ClientSession, state: _LevelState | None = None,
    ) -> tuple[bool, str, list[str]]:
        """(alive, why not, fatal log lines); streams of ``state`` that still receive data say alive."""
        return await check_alive(session, self.base_url, self.headers, self.settings.health_timeout,
                                 server=self.server, last_data=state.newest_data if state is not None else None)

    async def _watchdog(self, session: aiohttp.ClientSession, state: _LevelState) -> None:
        interval = min(self.settings.health_interval, self.settings.read_timeout or math.inf)
        while not state.finished:
            # asyncio.wait rather than wait_for: Python 3.11's wait_for can swallow the
            # cancellation that ends the level when its own timeout fires at the same moment.
            waiter = asyncio.ensure_future(state.connection_errors.wait())
            try:
                await asyncio.wait({waiter}, timeout=interval)
            finally:
                waiter.cancel()
            if state.finished:
                return
            state.connection_errors.clear()
            self._cancel_stalled(state)
            await self._health_gate(session, state)

    async def _health_gate(self, session: aiohttp.ClientSession, state: _LevelState) -> None:
        """Raise _Aborted when the server is dead or rejects everything; else reopen the gate."""
        state.unchecked = False
        alive, why, lines = await self._check_alive(session, state)
        if not alive:
            raise _Aborted(why, lines)
        if (
            state.completed == 0
            and state.rejected >= min(20, max(1, state.planned))
            and state.rejected == state.failed
        ):
            raise _Aborted(f"every request was rejected by the server: {state.first_error or ''}")
        state.gate.set()

    async def _fatal_count(self) -> int:
        if self.server is None:
            return 0
        try:
            return len(await asyncio.to_thread(self.server.fatal_lines))
        except OSError:  # a log that cannot be read says nothing either way
            return 0

    async def _no_new_fatal_lines(self, state: _LevelState) -> None:
        """Raise _Aborted when the server logged a fatal error during the level (it is dying)."""
        if self.server is None:
            return
        try:
            lines = list(await asyncio.to_thread(self.server.fatal_lines))
        except OSError:  # a log that cannot be read says nothing either way
            return
        if len(lines) > state.fatal_before:
            where = f" (log: {self.server.log_path})" if getattr(self.server, "log_path", None) else ""
            raise _Aborted(f"the server logged a fatal error during the level{exit_details(self.server)}{where}",
                           lines)

    def _cancel_stalled(self, state: _LevelState) -> None:
        # One sweep-wide check instead of aiohttp's per-read timer, which would be re-armed for
        # every chunk of every stream.
        if not self.settings.read_timeout:
            return
        now = time.time()
        for rec, task in list(state.inflight.values()):
            last = rec.chunk_times[-1] if rec.chunk_times else rec.start
            if last is not None and now - last > self.settings.read_timeout and not rec.stalled:
                rec.stalled = self.settings.read_timeout
                task.cancel()

    # -- watching a level ------------------------------------------------------------------
    async def _stop_watch(self, interval: float = 0.1) -> None:
        """Return once the caller's stop event is set (a threading.Event: polled, not awaited)."""
        while not self.stop_event.is_set():
            await asyncio.sleep(interval)

    @staticmethod
    async def _sampler(state: _LevelState) -> None:
        """The level's samples of itself (tokens streamed, requests streaming) for the steady-state test."""
        while True:
            tokens, streaming = state.streamed()
            state.samples.add(time.time(), tokens, streaming)
            await asyncio.sleep(SAMPLE_INTERVAL_S)

    async def _reporter(self, state: _LevelState, level: int, bar: Any, t0: float) -> None:
        """Refresh the bar and call the callback once every PROGRESS_INTERVAL_S, no more often."""
        last_t, last_tok, last_trim = t0, 0.0, t0
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            now = time.time()
            if _TRIM_HEAP is not None and now - last_trim >= HEAP_TRIM_INTERVAL_S:
                _TRIM_HEAP(0)
                last_trim = now
            done = state.completed + state.failed + state.cancelled
            # Tokens so far: finished requests plus what in-flight ones have streamed.
            tokens = state.output_tokens + sum(
                (rec.chunk_tokens[-1] or 0) for rec, _ in list(state.inflight.values()) if rec.chunk_tokens
            )
            rate = (tokens - last_tok) / max(now - last_t, 1e-9)
            if bar is not None:
                if self.settings.duration and self.settings.requests_per_level is None:
                    if state.deadline is not None:
                        bar.total = max(float(self.settings.duration), round(state.deadline - t0, 1))
                    bar.n = min(round(now - t0, 1), float(bar.total))
                else:
                    bar.n = done
                bar.set_postfix_str(
                    f"done={state.completed} failed={state.failed} in-flight={state.issued - done} "
                    f"{rate:,.0f} tok/s" + (f" extended {state.extended:.0f} s (not steady)" if state.extended else ""),
                    refresh=False,
                )
                bar.refresh()  # the one refresh of this tick
            last_t, last_tok = now, tokens
            if self.callback is not None:
                self._call_back({
                    "event": "progress", "level": level, "elapsed": now - t0,
                    "issued": state.issued, "completed": state.completed,
                    "failed": state.failed, "cancelled": state.cancelled,
                    "in_flight": state.issued - done, "output_tokens": tokens,
                    "recent_output_throughput": rate,
                })

    def _call_back(self, event: dict[str, Any]) -> None:
        try:
            self.callback(event)
        except Exception:  # a broken widget must not stop a measurement
            log.exception("sweep callback raised on %s event; continuing", event.get("event"))

    # -- one level -------------------------------------------------------------------------
    def _at_deadline(self, state: _LevelState, bounds: LevelBounds, t0: float, conc: int) -> bool:
        """At the deadline: True to end the level, False when it was extended (not steady yet)."""
        later, why = bounds.next_deadline(t0, state.deadline, state.samples)  # type: ignore[arg-type]
        state.verdict = why
        if later is None:
            state.steady = why.startswith("steady")
            return True
        log.info("level %s not steady at +%.0f s (%s): extended to +%.0f s", conc, state.deadline - t0, why,
                 later - t0)
        state.extended = later - t0 - (bounds.duration or 0.0)
        state.extend_to(later)
        return False

    async def _run_level(
        self, session: aiohttp.ClientSession, conc: int, rate: float, specs: list[RequestSpec],
        level_id: str, bar: Any, bounds: LevelBounds,
    ) -> tuple[_LevelState, dict[str, Any]]:
        t0 = time.time()
        state = _LevelState(planned=len(specs), deadline=t0 + bounds.duration if bounds.duration else None,
                            may_extend=bounds.extend > 0)
        state.fatal_before = await self._fatal_count()
        check = LevelSelfCheck()
        strategy = strategy_for(conc, rate, self.settings.seed)

        async def send(spec: RequestSpec) -> None:
            await self._one(session, spec, conc, level_id, state)

        main = asyncio.create_task(strategy.issue(specs, send, state))
        helpers = [
            asyncio.create_task(check.probe()),
            asyncio.create_task(self._reporter(state, conc, bar, t0)),
            asyncio.create_task(self._sampler(state)),
        ]
        watchdog = asyncio.create_task(self._watchdog(session, state))
        stopper = asyncio.create_task(self._stop_watch()) if self.stop_event is not None else None
        aborted: _Aborted | None = None
        stopped = False
        # Collections of a heap full of chunk-time lists stall the loop for tens of ms, which
        # shows up as latency; levels are bounded, so collect between them instead.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            pending = {main}
            while pending:
                timeout = None if state.deadline is None else max(0.0, state.deadline - time.time())
                done, pending = await asyncio.wait(
                    pending | {watchdog} | ({stopper} if stopper is not None else set()),
                    timeout=timeout, return_when=asyncio.FIRST_COMPLETED,
                )
                pending.discard(watchdog)
                if stopper is not None:
                    pending.discard(stopper)
                    if stopper in done:
                        stopped = True
                        break
                if watchdog in done:
                    exc = watchdog.exception()
                    aborted = exc if isinstance(exc, _Aborted) else _Aborted(f"health watchdog failed: {exc!r}")
                    break
                if main not in done and state.past_deadline() and self._at_deadline(state, bounds, t0, conc):
                    break
            state.end()
            if aborted is None and not stopped and (state.unchecked or state.failed or state.inflight):
                # A level some of whose requests did not finish is finished only if the server
                # outlived it: one that died or hung near the level's end (the watchdog not yet
                # told, told while the process was still exiting, or streams that stopped merely
                # cut at the deadline) would leave a row that resume keeps.
                try:
                    await self._health_gate(session, state)
                    await self._no_new_fatal_lines(state)
                except _Aborted as exc:
                    aborted = exc
        finally:
            state.finished = True
            state.end()
            extra = [stopper] if stopper is not None else []
            for t in [main, watchdog, *helpers, *extra]:
                t.cancel()
            await asyncio.gather(main, watchdog, *helpers, *extra, return_exceptions=True)
            if gc_was_enabled:
                gc.enable()
        figures = check.finish()
        if aborted is not None:
            raise aborted
        if stopped:
            raise _Stopped()
        return state, figures

    async def _warmup(self, session: aiohttp.ClientSession, conc: int) -> None:
        if not self.settings.warmup:
            return
        # Text prompts of two lengths (the asked one and half of it), so that the server's prompt-token
        # counts give the tokens a word and the template's overhead.
        specs = self.prompts.warmup_workload(self.settings.warmup)
        sem = asyncio.Semaphore(max(1, min(conc, self.settings.warmup)))

        async def one(spec: RequestSpec) -> RequestRecord:
            async with sem:
                return await self._one(session, spec, conc, "warmup", None, warmup=True)

        recs = list(await asyncio.gather(*(one(s) for s in specs)))
        bad = [r for r in recs if r.status != "ok"]
        if bad and len(bad) == len(recs):
            alive, why, lines = await self._check_alive(session)
            if not alive:
                raise _Aborted(why, lines)
            raise LoadGenError(
                f"every warm-up request to {self.url} failed, e.g. {bad[0].error}; "
                "check the api, model and prompt settings"
            )
        if bad:
            log.warning("%d of %d warm-up requests failed, e.g. %s", len(bad), len(recs), bad[0].error)
        self.prompts.from_usage(recs, specs)

    async def _get_json(self, session: aiohttp.ClientSession, path: str) -> Any:
        async with session.get(self.base_url + path, headers=self.headers,
                               timeout=aiohttp.ClientTimeout(total=10.0)) as resp:
            if resp.status != 200:
                return None
            return await resp.json(content_type=None)

    async def _find_model_paths(self, session: aiohttp.ClientSession) -> list[str]:
        """Where the served model may be on this machine: SGLang's model_path, vLLM's model root."""
        paths: list[str] = []
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, ValueError, TypeError, KeyError):
            info = await self._get_json(session, "/get_model_info")
            if isinstance(info, dict) and info.get("model_path"):
                paths.append(str(info["model_path"]))
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, ValueError, TypeError, KeyError):
            models = await self._get_json(session, "/v1/models")
            for entry in (models or {}).get("data", [])[:1]:
                paths += [str(entry[k]) for k in ("root", "id") if entry.get(k)]
        return paths

    async def _preflight(self, session: aiohttp.ClientSession) -> None:
        try:
            async with session.get(self.base_url + "/health", headers=self.headers,
                                   timeout=aiohttp.ClientTimeout(total=10.0)) as resp:
                await resp.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise LoadGenError(
                f"no server answers at {self.base_url} ({type(exc).__name__}: {exc}); "
                "start one or check the URL"
            ) from None
        await wait_while_starting(session, self.base_url, self.headers, self.settings.read_timeout or STARTING_WAIT_S)
        if self.settings.api != "generate" and self.model is None:
            try:
                async with session.get(self.base_url + "/v1/models", headers=self.headers,
                                       timeout=aiohttp.ClientTimeout(total=10.0)) as resp:
                    data = await resp.json(content_type=None)
                self.model = data["data"][0]["id"]
            except (aiohttp.ClientError, asyncio.TimeoutError, KeyError, IndexError, TypeError, ValueError) as exc:
                raise LoadGenError(
                    f"api={self.settings.api!r} needs a model name and {self.base_url}/v1/models did not give one "
                    f"({type(exc).__name__}); pass model=..."
                ) from None
        if self.prompts.sizing or self.settings.token_ids:
            paths = await self._find_model_paths(session)
            await asyncio.to_thread(self.prompts.from_tokenizer, [self.model, *paths])
            await asyncio.to_thread(self.prompts.from_model, [self.model, *paths])

    async def run(self) -> pd.DataFrame:
        levels = sweep_levels(self.concurrencies, self.settings)
        done_rows: dict[int, dict[str, Any]] = {}
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            if self.settings.resume:
                existing = self.rows.existing()
                for n, (conc, rate) in enumerate(levels):
                    match = self.rows.find(existing, self._key(conc, rate))
                    if match is not None:
                        done_rows[n] = match
                        log.info("level %s already in %s: skipped (resume)", conc, self.out_dir / rundir.SWEEP)
        # Without a run folder the records are spooled to a temporary file all the same: a
        # level's statistics are read back from its lines, not kept in memory.
        self.records = RecordSink(self.out_dir)
        rows: list[dict[str, Any]] = []
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=None, enable_cleanup_closed=False)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30.0, sock_read=None)
        completed_levels: list[int] = [levels[n][0] for n in done_rows]
        try:
            async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
                await self._preflight(session)
                todo = [n for n in range(len(levels)) if n not in done_rows]
                if todo:
                    try:
                        await self._warmup(session, levels[todo[0]][0])
                    except _Aborted as exc:
                        raise SweepAbortedError(
                            f"the server at {self.base_url} died during warm-up: {exc}{self.prompts.crash_hint()}",
                            level=levels[todo[0]][0], log_lines=exc.log_lines, completed_levels=completed_levels,
                        ) from None
                for n, (conc, rate) in enumerate(levels):
                    if n in done_rows:
                        rows.append(done_rows[n])
                        continue
                    if self.stop_event is not None and self.stop_event.is_set():
                        self._note_stopped(conc, completed_levels)
                        break
                    try:
                        row = await self._level(session, conc, rate, completed_levels)
                    except _Stopped:
                        self._note_stopped(conc, completed_levels)
                        break
                    rows.append(row)
                    completed_levels.append(conc)
        finally:
            self.records.close()
        frame = pd.DataFrame(rows, columns=SWEEP_COLUMNS)
        frame.attrs["stopped_at"] = self.stopped_at
        return frame

    def _note_stopped(self, conc: int, completed_levels: list[int]) -> None:
        self.stopped_at = conc
        log.info("sweep stopped on request before finishing level %s; levels kept: %s",
                 conc, completed_levels or "none")
        if self.callback is not None:
            self._call_back({"event": "stopped", "level": conc, "completed_levels": list(completed_levels)})

    def _key(self, conc: int, rate: float) -> dict[str, Any]:
        return {"concurrency": conc, "mode": self.settings.mode, "request_rate": rate, "api": self.settings.api,
                "input_len": self.settings.input_len, "output_len": self.settings.output_len}

    def _bar(self, conc: int, rate: float, n: int) -> Any:
        # a notebook run headless (papermill) has no front end to draw a bar's widget: the saved
        # notebook would keep each bar's first frame ("0/12 s") for good; the level lines say it all
        if not self.progress or os.environ.get(HEADLESS_ENV):
            return None
        # tqdm.auto looks for ipywidgets (a notebook front end) when imported: only with bars
        from tqdm.auto import tqdm

        desc = f"C={conc}" if math.isinf(rate) else f"rate={rate:g}/s C<={conc}"
        if self.settings.duration and self.settings.requests_per_level is None:
            return tqdm(total=float(self.settings.duration), desc=desc, unit="s", leave=True,
                        mininterval=PROGRESS_INTERVAL_S, miniters=0,
                        bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s{postfix}")
        return tqdm(total=n, desc=desc, unit="req", leave=True, mininterval=PROGRESS_INTERVAL_S, miniters=0)

    async def _level(self, session: aiohttp.ClientSession, conc: int, rate: float,
                     completed_levels: list[int]) -> dict[str, Any]:
        bounds = LevelBounds.for_level(self.settings, conc)
        n = bounds.requests
        specs = self.prompts.workload(n, level=conc if math.isinf(rate) else f"{conc}@{rate}")
        level_id = f"c{conc}{'' if math.isinf(rate) else f'-r{rate:g}'}-{int(time.time() * 1000)}"
        bar = self._bar(conc, rate, n)
        if self.callback is not None:
            self._call_back({"event": "level_start", "level": conc, "request_rate": rate,
                             "requests": n, "duration": self.settings.duration})
        offset = self.records.tell()
        try:
            try:
                state, check = await self._run_level(session, conc, rate, specs, level_id, bar, bounds)
            except _Aborted as exc:
                if self.callback is not None:
                    self._call_back({"event": "aborted", "level": conc, "reason": str(exc)})
                raise SweepAbortedError(
                    f"sweep stopped at level {conc}: {exc}. Server: {self.base_url}. "
                    f"Levels completed and kept: {completed_levels or 'none'}"
                    + ("" if exc.log_lines else "" if self.server is not None else
                       " (pass server= to see the fatal lines of its log)"),
                    level=conc, log_lines=exc.log_lines, completed_levels=completed_levels,
                ) from None
        finally:
            if bar is not None:
                if bar.total is not None and self.settings.duration and self.settings.requests_per_level is None:
                    bar.n = bar.total
                    bar.refresh()
                bar.close()
        unsteady = state.verdict if state.steady is False else None
        stats = level_stats(self.records.level_records(offset, level_id), concurrency=conc,
                            last_issue=state.last_issue, deadline=state.deadline, closed=math.isinf(rate),
                            unsteady=unsteady)
        cpu_pct, lag_p99 = check["client_cpu_pct"], check["loop_lag_p99_ms"]
        bound, lag_ratio = client_limited(cpu_pct, lag_p99, stats.get("median_itl_ms", float("nan")),
                                          free_cores(check.get("host_cpus"), check.get("host_cpu_pct")),
                                          check.get("loop_lag_p50_ms"))
        row: dict[str, Any] = {
            **self._key(conc, rate),
            "max_concurrency": conc,
            **stats,
            **check,
            "loop_lag_itl_ratio": lag_ratio,
            "client_bound": bound,
            "level_id": level_id,
            "extended_s": state.extended,
            "prompt_source": self.prompts.source,
        }
        if state.steady is True and row["steady"]:
            row["steady_note"] = f"{row['steady_note']}; {state.verdict}"
        self._warn(conc, row)
        self.rows.write(row)
        if self.callback is not None:
            self._call_back({"event": "level_done", "level": conc, "row": row})
        return row

    def _warn(self, conc: int, row: dict[str, Any]) -> None:
        if row["client_bound"]:
            log.warning("level %s: %s", conc, client_bound_text(row))
        if str(row["window_note"]).startswith("whole level"):
            log.warning("level %s: throughput over the %s%s", conc, row["window_note"],
                        f" after extending it by {row['extended_s']:.0f} s" if row["extended_s"] else
                        "; a longer level (duration=) gives a steady state")
        ratio = row.get("prompt_length_ratio")
        if ratio is not None and np.isfinite(ratio) and abs(ratio - 1.0) > PROMPT_TOLERANCE:
            log.warning("level %s: prompts were %.0f tokens on average, %.2fx the %d asked (%s)", conc,
                        row["mean_prompt_tokens"], ratio, self.settings.input_len, row["prompt_source"])
        if row["failed"]:
            log.warning("level %s: %d failed requests: %s", conc, row["failed"], row["error_summary"])


@settings_keywords
def _prepare(
    base_url: str,
    concurrencies: Sequence[int] | int,
    *,
    settings: SweepSettings | None = None,
    run_dir: str | Path | None = None,
    api_key: str | None = None,
    server: _ServerLike | None = None,
    progress: bool = True,
    callback: Callable[[dict[str, Any]], None] | None = None,
    stop_event: threading.Event | None = None,
    **options: Any,
) -> _Sweep:
    """A sweep with everything validated before anything is sent (the arguments of :func:`run_sweep`)."""
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"base_url {base_url!r} is not valid: use a URL like http://127.0.0.1:30000", field="base_url"
        )
    settings = settings_from(settings, options)
    sweep_levels(concurrencies, settings)  # validate early
    log.debug("sweep %s levels=%s api=%s api_key=%s", base_url, concurrencies, settings.api, _mask(api_key))
    return _Sweep(base_url, concurrencies, settings, run_dir=run_dir, api_key=api_key, server=server,
                  progress=progress, callback=callback, stop_event=stop_event)


def _arguments_of_prepare(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(base_url, concurrencies, **options)`` shown with :func:`_prepare`'s parameters."""
    fn.__signature__ = inspect.signature(_prepare).replace(  # type: ignore[attr-defined]
        return_annotation=inspect.signature(fn).return_annotation)
    return fn


@_arguments_of_prepare
async def run_sweep_async(base_url: str, concurrencies: Sequence[int] | int, **options: Any) -> pd.DataFrame:
    """The coroutine behind :func:`run_sweep` (same arguments), for callers already inside an event loop."""
    return await _prepare(base_url, concurrencies, **options).run()


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _run_coro(coro: Any) -> Any:
    loop = _new_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


@_arguments_of_prepare
def run_sweep(base_url: str, concurrencies: Sequence[int] | int, **options: Any) -> pd.DataFrame:
    """Drive ``base_url`` at each concurrency level in turn; one row per level.

    What the sweep sends and how it paces it is one :class:`SweepSettings`, checked before
    anything is sent: pass ``settings=SweepSettings(...)``, or its fields as keywords (``api``
    to ``exact_prompts``, listed in this signature: ``api`` ("generate" | "completions" |
    "chat"), ``input_len``, ``output_len``, ``requests_per_level`` and/or ``duration``, ``mode``
    ("closed" | "poisson") and ``rate``, ``read_timeout``, ``health_interval``, ``resume``...;
    see :class:`SweepSettings` for each), not both. The other keywords: ``run_dir`` (writes
    sweep.csv and requests.jsonl there), ``api_key``, ``server`` (anything with ``alive()`` and
    ``fatal_lines()``; else /health is polled), ``progress`` (tqdm bars), ``callback`` (called
    with event dicts: level_start, progress, level_done, aborted), ``stop_event`` (a
    ``threading.Event``: once set, the level in progress is cancelled and left out, and the
    levels finished so far are returned; ``frame.attrs["stopped_at"]`` names the level it
    stopped at, and the callback gets a ``stopped`` event).

    Raises :class:`SweepAbortedError` (rows of completed levels are already in sweep.csv) when
    the server dies, and :class:`ConfigError` for bad arguments.
    """
    sweep = _prepare(base_url, concurrencies, **options)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_coro(sweep.run())
    # Inside a running loop (a notebook cell): run on a loop of our own in a thread.
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = _run_coro(sweep.run())
        except BaseException as exc:  # re-raised in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=target, name="glm5-sweep", daemon=True)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
