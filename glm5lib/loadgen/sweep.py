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
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import gc
import inspect
import json
import logging
import math
import os
import tempfile
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import aiohttp
import numpy as np
import pandas as pd
import psutil

from glm5lib import rundir
from glm5lib.errors import ConfigError, LoadGenError, SweepAbortedError
from glm5lib.loadgen.client import API_PATHS, RequestRecord, build_body, stream_request
from glm5lib.loadgen.health import check_alive, exit_details, wait_while_starting
from glm5lib.loadgen.metrics import SWEEP_COLUMNS, level_stats
from glm5lib.loadgen.records import find_level, load_requests, load_sweep, write_level_row
from glm5lib.loadgen.settings import SweepSettings, sweep_levels
from glm5lib.loadgen.workload import RequestSpec, load_prompts, make_workload

__all__ = ["client_limited", "load_requests", "load_sweep", "run_sweep", "run_sweep_async"]

log = logging.getLogger(__name__)

# The client limited a level when its event loop lagged, at p99, by a large part of the interval
# between tokens the level actually had, so that reading the streams delayed them, and either
# its process used nearly a whole core (one event loop cannot use more) or the lag outlasted the
# whole interval (a client starved of CPU by a busy machine is the limit all the same). A lag
# alone is no verdict: 30 ms is noise against 70 ms between tokens and decisive against 5 ms.
CLIENT_CPU_BOUND_PCT = 80.0
LOOP_LAG_ITL_FRACTION = 0.5
# Without a measured inter-token interval (no stream had two chunks), the lag is judged alone.
LOOP_LAG_BOUND_MS = 25.0
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


def client_limited(cpu_pct: float, loop_lag_p99_ms: float, median_itl_ms: float) -> tuple[bool, float]:
    """Was the client the limit of a level? Returns ``(verdict, loop_lag_p99_ms / median_itl_ms)``.

    True when the event loop's p99 lag was at least :data:`LOOP_LAG_ITL_FRACTION` of the level's
    median inter-token interval and the client's process used at least
    :data:`CLIENT_CPU_BOUND_PCT` % of a core, or when the lag was at least the whole interval
    (tokens waited longer for the client than for the server, whatever kept the client from
    running). A median interval of 0 (tokens arrive together: the server outpaces the reader)
    gives an infinite ratio; with no interval at all (no stream had two chunks) the lag is held
    against :data:`LOOP_LAG_BOUND_MS` and the CPU must be busy.
    """
    lag = float(loop_lag_p99_ms) if loop_lag_p99_ms is not None else float("nan")
    itl = float(median_itl_ms) if median_itl_ms is not None else float("nan")
    busy = bool(cpu_pct is not None and np.isfinite(cpu_pct) and cpu_pct >= CLIENT_CPU_BOUND_PCT)
    if not np.isfinite(lag) or not np.isfinite(itl) or itl < 0:
        return busy and bool(np.isfinite(lag) and lag >= LOOP_LAG_BOUND_MS), float("nan")
    ratio = lag / itl if itl > 0 else (float("inf") if lag > 0 else 0.0)
    return bool(ratio >= 1.0 or (busy and ratio >= LOOP_LAG_ITL_FRACTION)), ratio


class _LevelState:
    """Counters the progress bar, the callback and the watchdog read while a level runs."""

    def __init__(self, planned: int = 0) -> None:
        self.planned = planned
        # Cleared on a refused or dropped connection: no new request goes out until a health
        # check says the server is still there, so a dead server does not eat a level's requests.
        self.gate = asyncio.Event()
        self.gate.set()
        self.unchecked = False
        self.finished = False
        self.issued = 0
        self.completed = 0
        self.failed = 0
        self.cancelled = 0
        self.output_tokens = 0
        self.last_issue: float | None = None
        self.deadline: float | None = None
        self.first_error: str | None = None  # the level's records are on disk, not kept here
        self.fatal_before = 0  # fatal lines in the server's log when the level began
        self.connection_errors = asyncio.Event()
        self.rejected = 0  # HTTP 4xx
        self.inflight: dict[int, tuple[RequestRecord, asyncio.Task]] = {}
        self.last_data: float | None = None  # the newest chunk of a request that has ended

    def newest_data(self) -> float | None:
        """time.time() of the newest chunk any request of the level received (None: none yet)."""
        newest = self.last_data
        for rec, _task in list(self.inflight.values()):
            if rec.chunk_times and (newest is None or rec.chunk_times[-1] > newest):
                newest = rec.chunk_times[-1]
        return newest


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
        self.jsonl: BinaryIO | None = None
        self.records_path: Path | None = None
        self.proc = psutil.Process(os.getpid())
        self.stopped_at: int | None = None

    # -- records ---------------------------------------------------------------------------
    def _sink(self, rec: RequestRecord, state: _LevelState | None) -> None:
        if self.jsonl is not None:
            self.jsonl.write(rec.to_json().encode() + b"\n")
            self.jsonl.flush()
        if state is None:
            return
        if rec.chunk_times and (state.last_data is None or rec.chunk_times[-1] > state.last_data):
            state.last_data = rec.chunk_times[-1]
        if rec.status == "ok":
            state.completed += 1
        elif rec.status == "cancelled":
            state.cancelled += 1
        else:
            state.failed += 1
            if state.first_error is None:
                state.first_error = rec.error or ""
            if rec.connection_lost:
                state.gate.clear()
                state.unchecked = True
                state.connection_errors.set()
            if rec.http_status is not None and 400 <= rec.http_status < 500:
                state.rejected += 1
                if state.completed == 0:
                    state.connection_errors.set()
        state.output_tokens += rec.output_tokens or 0

    async def _one(
        self, session: aiohttp.ClientSession, spec: RequestSpec, level: int, level_id: str,
        state: _LevelState | None, warmup: bool = False,
    ) -> None:
        rec = RequestRecord(level=level, index=spec.index, warmup=warmup, level_id=level_id)
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
        except Exception:  # a log that cannot be read says nothing either way
            return 0

    async def _no_new_fatal_lines(self, state: _LevelState) -> None:
        """Raise _Aborted when the server logged a fatal error during the level (it is dying)."""
        if self.server is None:
            return
        try:
            lines = list(await asyncio.to_thread(self.server.fatal_lines))
        except Exception:
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

    # -- self-check ------------------------------------------------------------------------
    @staticmethod
    async def _lag_probe(lags: array, interval: float = 0.01) -> None:
        clock = time.perf_counter
        while True:  # ended by cancellation; asyncio.sleep never swallows it
            t = clock()
            await asyncio.sleep(interval)
            lags.append(clock() - t - interval)

    async def _stop_watch(self, interval: float = 0.1) -> None:
        """Return once the caller's stop event is set (a threading.Event: polled, not awaited)."""
        while not self.stop_event.is_set():
            await asyncio.sleep(interval)

    async def _reporter(self, state: _LevelState, level: int, bar: Any, t0: float) -> None:
        """Refresh the bar and call the callback once every PROGRESS_INTERVAL_S, no more often."""
        last_t, last_tok, last_trim = t0, 0, t0
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
                    bar.n = min(round(now - t0, 1), float(self.settings.duration))
                else:
                    bar.n = done
                bar.set_postfix_str(
                    f"done={state.completed} failed={state.failed} in-flight={state.issued - done} "
                    f"{rate:,.0f} tok/s",
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
    async def _run_level(
        self, session: aiohttp.ClientSession, conc: int, rate: float, specs: list[RequestSpec],
        level_id: str, bar: Any,
    ) -> tuple[_LevelState, float, float, array]:
        state = _LevelState(planned=len(specs))
        state.fatal_before = await self._fatal_count()
        t0 = time.time()
        deadline = t0 + self.settings.duration if self.settings.duration else None
        state.deadline = deadline
        lags = array("d")  # 100 a second: 8 bytes each, not a float object each
        cpu0 = self.proc.cpu_times()
        wall0 = time.perf_counter()
        it = iter(specs)
        tasks: set[asyncio.Task] = set()

        async def worker() -> None:
            for spec in it:
                if not state.gate.is_set():
                    await state.gate.wait()
                if deadline is not None and time.time() >= deadline:
                    return
                await self._one(session, spec, conc, level_id, state)

        async def poisson() -> None:
            rng = np.random.default_rng([self.settings.seed, conc, int(rate * 1000)])
            sem = asyncio.Semaphore(conc)
            next_t = time.perf_counter()

            async def capped(spec: RequestSpec) -> None:
                try:
                    await self._one(session, spec, conc, level_id, state)
                finally:
                    sem.release()

            for spec in specs:
                next_t += float(rng.exponential(1.0 / rate))
                delay = next_t - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                await sem.acquire()
                if not state.gate.is_set():
                    await state.gate.wait()
                if deadline is not None and time.time() >= deadline:
                    sem.release()
                    return
                task = asyncio.create_task(capped(spec))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            while tasks:
                await asyncio.gather(*list(tasks), return_exceptions=True)

        if math.isinf(rate):
            main = [asyncio.create_task(worker()) for _ in range(conc)]
        else:
            main = [asyncio.create_task(poisson())]
        helpers = [
            asyncio.create_task(self._lag_probe(lags)),
            asyncio.create_task(self._reporter(state, conc, bar, t0)),
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
            pending = set(main)
            while pending:
                timeout = None if deadline is None else max(0.0, deadline - time.time())
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
                if deadline is not None and time.time() >= deadline:
                    break
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
            extra = [stopper] if stopper is not None else []
            for t in [*main, *tasks, watchdog, *helpers, *extra]:
                t.cancel()
            await asyncio.gather(*main, *tasks, watchdog, *helpers, *extra, return_exceptions=True)
            if gc_was_enabled:
                gc.enable()
        wall = time.perf_counter() - wall0
        cpu1 = self.proc.cpu_times()
        cpu_pct = 100.0 * ((cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)) / max(wall, 1e-9)
        if aborted is not None:
            raise aborted
        if stopped:
            raise _Stopped()
        return state, cpu_pct, wall, lags

    async def _warmup(self, session: aiohttp.ClientSession, conc: int) -> None:
        if not self.settings.warmup:
            return
        specs = make_workload(
            self.settings.warmup, level=-1, seed=self.settings.seed, input_len=self.settings.input_len,
            output_len=min(self.settings.output_len, 16), range_ratio=1.0, dataset=self._dataset_pairs,
            token_ids=self.settings.token_ids,
        )
        sem = asyncio.Semaphore(max(1, min(conc, self.settings.warmup)))
        recs: list[RequestRecord] = []

        async def one(spec: RequestSpec) -> None:
            async with sem:
                rec = RequestRecord(level=conc, index=spec.index, warmup=True, level_id="warmup")
                body = build_body(self.settings.api, spec.prompt, spec.output_len, model=self.model,
                                  ignore_eos=self.settings.ignore_eos, temperature=self.settings.temperature,
                                  extra_body=self.settings.extra_body)
                try:
                    await stream_request(session, self.url, body, self.headers, rec, self.settings.api)
                finally:
                    recs.append(rec)
                    self._sink(rec, None)

        await asyncio.gather(*(one(s) for s in specs))
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

    def _level_records(self, offset: int, level_id: str) -> Callable[[], Iterator[RequestRecord]]:
        """The level's records as they are on disk, read again on each call (from ``offset``)."""
        self.jsonl.flush()
        path, needle = self.records_path, f'"level_id":{json.dumps(level_id)}'.encode()

        def read() -> Iterator[RequestRecord]:
            with open(path, "rb") as lines:
                lines.seek(offset)
                for line in lines:
                    if needle in line:
                        rec = RequestRecord.from_json(line)
                        if not rec.warmup:
                            yield rec

        return read

    def _write_row(self, row: dict[str, Any]) -> None:
        if self.out_dir is not None:
            write_level_row(self.out_dir, row)

    async def run(self) -> pd.DataFrame:
        levels = sweep_levels(self.concurrencies, self.settings)
        done_rows: dict[int, dict[str, Any]] = {}
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            if self.settings.resume:
                existing = load_sweep(self.out_dir)
                for n, (conc, rate) in enumerate(levels):
                    key = self._key(conc, rate)
                    match = find_level(existing, key)
                    if match is not None:
                        done_rows[n] = match
                        log.info("level %s already in %s: skipped (resume)", conc, self.out_dir / rundir.SWEEP)
            self.records_path = self.out_dir / rundir.REQUESTS
        else:
            # Without a run folder the records are spooled to a temporary file all the same: a
            # level's statistics are read back from its lines, not kept in memory.
            spool = tempfile.TemporaryDirectory(prefix="glm5-sweep-")
            self.records_path = Path(spool.name) / rundir.REQUESTS
        self.jsonl = open(self.records_path, "ab")  # noqa: SIM115
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
                            f"the server at {self.base_url} died during warm-up: {exc}",
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
            self.jsonl.close()
            if self.out_dir is None:
                spool.cleanup()
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

    def _count_for(self, conc: int) -> int:
        if self.settings.requests_per_level is not None:
            return int(self.settings.requests_per_level)
        if self.settings.duration:
            # Enough never to run out before the deadline at any plausible speed.
            return max(1000, conc * 64)
        return max(2 * conc, 16)

    async def _level(self, session: aiohttp.ClientSession, conc: int, rate: float,
                     completed_levels: list[int]) -> dict[str, Any]:
        n = self._count_for(conc)
        specs = make_workload(
            n, level=conc if math.isinf(rate) else f"{conc}@{rate}", seed=self.settings.seed,
            input_len=self.settings.input_len, output_len=self.settings.output_len, range_ratio=self.settings.range_ratio,
            dataset=self._dataset_pairs, token_ids=self.settings.token_ids,
        )
        level_id = f"c{conc}{'' if math.isinf(rate) else f'-r{rate:g}'}-{int(time.time() * 1000)}"
        bar = None
        if self.progress:
            # tqdm.auto looks for ipywidgets (a notebook front end) when imported: only with bars
            from tqdm.auto import tqdm

            desc = f"C={conc}" if math.isinf(rate) else f"rate={rate:g}/s C<={conc}"
            if self.settings.duration and self.settings.requests_per_level is None:
                bar = tqdm(total=float(self.settings.duration), desc=desc, unit="s", leave=True,
                           mininterval=PROGRESS_INTERVAL_S, miniters=0,
                           bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s{postfix}")
            else:
                bar = tqdm(total=n, desc=desc, unit="req", leave=True, mininterval=PROGRESS_INTERVAL_S,
                           miniters=0)
        if self.callback is not None:
            self._call_back({"event": "level_start", "level": conc, "request_rate": rate,
                             "requests": n, "duration": self.settings.duration})
        self.jsonl.flush()
        offset = self.jsonl.tell()
        try:
            try:
                state, cpu_pct, _wall, lags = await self._run_level(session, conc, rate, specs, level_id, bar)
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
        stats = level_stats(self._level_records(offset, level_id), concurrency=conc,
                            last_issue=state.last_issue, deadline=state.deadline, closed=math.isinf(rate))
        lag_p99 = float(np.percentile(np.frombuffer(lags), 99)) * 1000.0 if lags else float("nan")
        bound, lag_ratio = client_limited(cpu_pct, lag_p99, stats.get("median_itl_ms", float("nan")))
        row: dict[str, Any] = {
            **self._key(conc, rate),
            "max_concurrency": conc,
            **stats,
            "client_cpu_pct": cpu_pct,
            "loop_lag_p99_ms": lag_p99,
            "loop_lag_itl_ratio": lag_ratio,
            "client_bound": bound,
            "level_id": level_id,
        }
        if row["client_bound"]:
            log.warning(
                "level %s: the client was the limit (CPU %.0f%% of a core; loop lag p99 %.1f ms, %.0f%% of "
                "the median inter-token interval of %.1f ms)",
                conc, cpu_pct, lag_p99, 100 * lag_ratio, stats.get("median_itl_ms", float("nan")),
            )
        if str(row["window_note"]).startswith("whole level"):
            log.warning(
                "level %s: throughput over the %s; a longer level (duration=) gives a steady state",
                conc, row["window_note"],
            )
        if row["failed"]:
            log.warning("level %s: %d failed requests: %s", conc, row["failed"], row["error_summary"])
        self._write_row(row)
        if self.callback is not None:
            self._call_back({"event": "level_done", "level": conc, "row": row})
        return row


# What a sweep writes to and reports to; the settings keywords come from SweepSettings itself.
_SWEEP_ARGS = (
    ("settings", "SweepSettings | None", None),
    ("run_dir", "str | Path | None", None),
    ("api_key", "str | None", None),
    ("server", "_ServerLike | None", None),
    ("progress", "bool", True),
    ("callback", "Callable[[dict[str, Any]], None] | None", None),
    ("stop_event", "threading.Event | None", None),
)


def _signature() -> inspect.Signature:
    """``(base_url, concurrencies, *, <every SweepSettings field>, settings, run_dir, ...)``."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter("base_url", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="str"),
        inspect.Parameter("concurrencies", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          annotation="Sequence[int] | int"),
    ]
    params += [inspect.Parameter(f.name, keyword, default=f.default, annotation=f.type)
                for f in dataclasses.fields(SweepSettings)]
    params += [inspect.Parameter(name, keyword, default=default, annotation=kind) for name, kind, default in _SWEEP_ARGS]
    return inspect.Signature(params, return_annotation="pd.DataFrame")


_SIGNATURE = _signature()


def _takes_the_settings(fn: Callable[..., Any]) -> Callable[..., Any]:
    # One list of keywords (SweepSettings' fields), shown by help() and inspect.signature and
    # checked as Python checks a written-out signature (unknown keywords raise TypeError).
    fn.__signature__ = _SIGNATURE  # type: ignore[attr-defined]
    return fn


@_takes_the_settings
async def run_sweep_async(base_url: str, concurrencies: Sequence[int] | int, **options: Any) -> pd.DataFrame:
    """The coroutine behind :func:`run_sweep` (same arguments), for callers already inside an event loop."""
    return await _make(base_url, concurrencies, options).run()


def _make(base_url: Any, concurrencies: Any, options: dict[str, Any]) -> _Sweep:
    """Validate everything before anything is sent; ``settings`` replaces the setting keywords."""
    bound = _SIGNATURE.bind(base_url, concurrencies, **options)  # TypeError for an unknown keyword
    args = {name: bound.arguments.get(name, default) for name, _, default in _SWEEP_ARGS}
    given = {k: v for k, v in bound.arguments.items() if k in SweepSettings.field_names()}
    settings = args["settings"]
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"base_url {base_url!r} is not valid: use a URL like http://127.0.0.1:30000", field="base_url"
        )
    if settings is None:
        settings = SweepSettings(**given)
    elif not isinstance(settings, SweepSettings):
        raise ConfigError(f"settings={settings!r} must be a SweepSettings", field="settings")
    else:
        defaults = {f: getattr(SweepSettings, f) for f in SweepSettings.field_names()}
        changed = sorted(k for k, v in given.items() if v is not defaults[k] and v != defaults[k])
        if changed:
            raise ConfigError(f"settings= and the keywords {changed} both set the sweep: use one or the other",
                              field="settings", valid=["settings", *changed])
    sweep_levels(concurrencies, settings)  # validate early
    log.debug("sweep %s levels=%s api=%s api_key=%s", base_url, concurrencies, settings.api, _mask(args["api_key"]))
    return _Sweep(base_url, concurrencies, settings, run_dir=args["run_dir"], api_key=args["api_key"],
                  server=args["server"], progress=args["progress"], callback=args["callback"],
                  stop_event=args["stop_event"])


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


@_takes_the_settings
def run_sweep(base_url: str, concurrencies: Sequence[int] | int, **options: Any) -> pd.DataFrame:
    """Drive ``base_url`` at each concurrency level in turn; one row per level.

    The settings keywords (``api`` to ``resume``) make a :class:`SweepSettings`, which checks
    them all before anything is sent; or pass ``settings=SweepSettings(...)`` instead of them.
    Keyword arguments: ``api`` ("generate" | "completions" | "chat"), ``model`` (OpenAI APIs; read
    from /v1/models when None), ``input_len``, ``output_len``, ``range_ratio`` (lengths uniform in
    [len*ratio, len]), ``dataset`` (prompt file), ``requests_per_level`` and/or ``duration``
    (seconds; in-flight requests are cancelled at the deadline), ``warmup`` (requests before the
    first level, excluded), ``mode`` ("closed" | "poisson") and ``rate`` (requests/s, one or a
    list; with poisson each concurrency is a cap on requests in flight), ``run_dir`` (writes
    sweep.csv and requests.jsonl there), ``api_key``, ``seed``, ``server`` (anything with
    ``alive()`` and ``fatal_lines()``; else /health is polled), ``progress`` (tqdm bars),
    ``callback`` (called with event dicts: level_start, progress, level_done, aborted),
    ``resume`` (skip levels already in sweep.csv), ``token_ids`` (random prompts as token ids;
    default for generate/completions), ``ignore_eos``, ``temperature``, ``extra_body``,
    ``read_timeout`` (seconds without data before a request fails), ``health_interval`` (seconds
    between health checks), ``health_timeout`` (seconds a /health probe may take),
    ``stop_event`` (a ``threading.Event``: once set, the level in progress is cancelled and left
    out, and the levels finished so far are returned; ``frame.attrs["stopped_at"]`` names the
    level it stopped at, and the callback gets a ``stopped`` event).

    Raises :class:`SweepAbortedError` (rows of completed levels are already in sweep.csv) when
    the server dies, and :class:`ConfigError` for bad arguments.
    """
    sweep = _make(base_url, concurrencies, options)
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
