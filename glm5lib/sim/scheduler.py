"""The stand-in's continuous-batching scheduler, run in real time on an asyncio loop.

It follows SGLang's scheduler where it matters for throughput:

- a FCFS waiting queue; new requests are admitted into the running batch while the batch is
  below ``max_running_requests`` and the KV pool can hold their prompt plus a reserve for the
  tokens they may still generate (``new_token_ratio``: 0.7 x ``schedule_conservativeness`` at
  first, decaying to 0.14 of that over 600 decode steps, as SGLang's does);
- prefill runs before decode whenever something can be admitted, in chunks of at most
  ``chunked_prefill_size`` tokens (a long prompt is split over several prefill batches);
- every decode step adds one token to each running request; when the KV pool cannot hold the
  next step, requests are retracted (fewest generated tokens first) back to the front of the
  queue, and ``new_token_ratio`` is raised;
- step times come from the profile (batch size, KV tokens, flags, CUDA graph up to
  ``cuda_graph_max_bs``) and the loop sleeps for them, so clients see real latencies.

Per-token work is kept tiny: a step increments counters and wakes the waiting HTTP handlers,
which build their chunks from precomputed text (see :mod:`glm5lib.sim.text`).
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from glm5lib.engines.sglang.config import DEFAULT_RELEASE
from glm5lib.sim.lines import LineShape, decode_line, prefill_line, writes_since
from glm5lib.sim.logwriter import LogWriter
from glm5lib.sim.profile import Profile, StepContext

__all__ = ["Histogram", "Req", "SchedulerSettings", "SimScheduler"]

# SGLang's constants (python/sglang/srt/managers/schedule_policy.py and scheduler.py, 0.5.x).
# The ratio starts at INIT x schedule_conservativeness (at most 1) and decays over DECAY_STEPS
# decode steps to MIN_FACTOR of its start.
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
CLIP_MAX_NEW_TOKENS = 4096
RETRACT_DECODE_STEPS = 20
# A step that starts this soon (seconds) after the previous one ended continues its timeline.
_TIMELINE_SLACK = 0.25

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 120, 160)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040,
               0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 150, 200, 250,
               300, 350, 500, 1000)


class Histogram:
    """A cumulative histogram that takes weighted observations (one call per step, not per token)."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float, weight: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += weight
        self.count += weight
        self.sum += value * weight

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative (upper bound, count) pairs ending with +Inf, as Prometheus expects."""
        out, acc = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            acc += n
            out.append((repr(float(bound)), acc))
        out.append(("+Inf", self.count))
        return out


class Req:
    """One request inside the scheduler. Counters only; text is made by the HTTP layer."""

    __slots__ = (
        "aborted",
        "arrival",
        "cached",
        "event",
        "final_sent",
        "finish_reason",
        "finish_time",
        "finished",
        "first_chunk_sent",
        "first_token_time",
        "gen",
        "kv",
        "max_new",
        "offset",
        "prefilled",
        "prompt_hash",
        "prompt_len",
        "retractions",
        "rid",
        "sent",
        "sink",
        "stop_at",
        "stream",
        "stream_every",
    )

    def __init__(
        self,
        rid: str,
        prompt_len: int,
        max_new: int,
        stop_at: int,
        stream: bool,
        stream_every: int,
        offset: int = 0,
        prompt_hash: int | None = None,
    ):
        self.rid = rid
        self.prompt_len = prompt_len
        self.max_new = max_new
        # The length at which the request ends: max_new (length) or earlier (an EOS token).
        self.stop_at = stop_at
        self.stream = stream
        self.stream_every = max(1, stream_every)
        self.offset = offset
        self.prompt_hash = prompt_hash
        self.gen = 0
        self.kv = 0
        self.prefilled = 0
        self.cached = 0
        self.retractions = 0
        self.finished = False
        self.aborted = False
        self.finish_reason: str | None = None
        self.arrival = time.time()
        self.first_token_time: float | None = None
        # When the HTTP layer wrote the first chunk carrying a token (streaming only).
        self.first_chunk_sent: float | None = None
        self.finish_time: float | None = None
        self.event = asyncio.Event()
        # Streaming: tokens already written to the client, whether the final chunk went out,
        # and the HTTP layer's direct writer (None = wake the handler through ``event``).
        self.sent = 0
        self.final_sent = False
        self.sink: Callable[[Req], None] | None = None

    def record(self) -> dict:
        """The request's timeline as served (epoch seconds), for /sim/requests."""
        return {
            "rid": self.rid,
            "arrival": self.arrival,
            "first_token": self.first_token_time,
            "first_chunk_sent": self.first_chunk_sent,
            "finish": self.finish_time,
            "prompt_tokens": self.prompt_len,
            "completion_tokens": self.gen,
            "cached_tokens": self.cached,
            "retractions": self.retractions,
            "finish_reason": self.finish_reason,
        }

    @property
    def seq_len(self) -> int:
        """Tokens this request needs in the KV cache now (prompt and generated so far)."""
        return self.prompt_len + self.gen


@dataclass
class SchedulerSettings:
    """The resolved server arguments the scheduler uses."""

    max_running_requests: int
    max_total_tokens: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    page_size: int
    radix_cache: bool
    decode_log_interval: int
    step: StepContext
    enable_metrics: bool = False
    zero_delay: bool = False
    seed: int = 0
    schedule_conservativeness: float = 1.0
    release: str = DEFAULT_RELEASE  # the SGLang release whose log lines are written
    shape: LineShape = field(default_factory=LineShape)  # the variant of its stats lines the configuration calls for


class SimScheduler:
    """Runs the modelled server; HTTP handlers ``submit`` requests and wait on ``req.event``."""

    def __init__(
        self,
        profile: Profile,
        settings: SchedulerSettings,
        log: LogWriter,
        on_finish: Callable[[Req], None] | None = None,
    ):
        self.profile = profile
        self.s = settings
        self.log = log
        self.on_finish = on_finish
        self.capacity = settings.max_total_tokens
        self.waiting: collections.deque[Req] = collections.deque()
        self.running: list[Req] = []
        self.chunked: Req | None = None
        self.used = 0
        self.init_new_token_ratio = min(INIT_NEW_TOKEN_RATIO * settings.schedule_conservativeness, 1.0)
        self.min_new_token_ratio = min(self.init_new_token_ratio * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
        self.new_token_ratio = self.init_new_token_ratio
        self._ratio_decay = (self.init_new_token_ratio - self.min_new_token_ratio) / NEW_TOKEN_RATIO_DECAY_STEPS
        self._wake = asyncio.Event()
        self._rng = random.Random(settings.seed)
        self._radix: collections.OrderedDict[int, int] = collections.OrderedDict()
        self._radix_tokens = 0
        self.start_time = time.time()
        # Counters and recent state read by /metrics, /get_server_info and /sim/gpus.
        self.decode_steps = 0
        self.prefill_batches = 0
        self.generated_total = 0  # as the steps make them (SGLang's realtime_tokens_total)
        self.prompt_total = 0
        self.finished_generated = 0  # as requests finish (SGLang's generation_tokens_total)
        self.finished_prompt = 0
        self.cached_total = 0
        self.requests_total = 0
        self.finished_total = 0
        self.aborted_total = 0
        self.retracted_total = 0
        self.last_gen_throughput = 0.0
        self.last_graph = False
        self._log_tokens = 0
        self._log_tic = time.perf_counter()
        self._prefill_tic = time.perf_counter()
        self._last_prefill_tokens = 0
        self.busy_time = 0.0
        self.dyn_energy_j = 0.0  # per GPU, above idle power
        self.step_power_w = 0.0  # per GPU, during the current step
        self.step_gen_rate = 0.0  # generated tok/s during the current step
        self.step_end_time = 0.0
        self.last_step_done = 0.0  # time.monotonic() a step last ended (SGLang's last_receive_tstamp)
        self._t_next = -1e9
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.recent: collections.deque[Req] = collections.deque(maxlen=4096)
        # Fault hooks: called after each finished request / before each decode step.
        self.hung = False
        self.crash_hook: Callable[[], None] | None = None
        self.stopping = False
        self._task: asyncio.Task | None = None
        self._idle_w = float(profile["power"]["idle_w"])

    # -- public ----------------------------------------------------------------------------------
    def submit(self, req: Req) -> None:
        self.requests_total += 1
        self.waiting.append(req)
        self._wake.set()

    def abort(self, req: Req) -> None:
        """Drop a request whose client went away."""
        if req.finished or req.aborted:
            return
        req.aborted = True
        self.aborted_total += 1
        with contextlib.suppress(ValueError):
            self.waiting.remove(req)
        # Running or chunked requests are dropped at the next step boundary.
        self._wake.set()

    def flush_cache(self) -> bool:
        if self.running or self.waiting:
            return False
        self._radix.clear()
        self._radix_tokens = 0
        return True

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-scheduler")

    async def stop(self) -> None:
        self.stopping = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    @property
    def token_usage(self) -> float:
        return self.used / self.capacity if self.capacity else 0.0

    def power_now(self) -> float:
        """Per-GPU power now: idle plus the current step's dynamic power while a step runs."""
        if time.monotonic() <= self.step_end_time + 0.002:
            return self._idle_w + self.step_power_w
        return self._idle_w

    # -- the loop ----------------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.stopping:
            if self.hung:
                await asyncio.Event().wait()
            self._drop_aborted()
            batch = self._admit()
            if batch:
                await self._prefill(batch, loop)
                continue
            if self.running:
                await self._decode(loop)
                continue
            # Nothing to do: reset the ratio like SGLang does on an empty batch, then sleep.
            self.new_token_ratio = self.init_new_token_ratio
            self._t_next = -1e9  # the next step starts a new timeline
            self._wake.clear()
            if self.waiting and not self._can_admit_ever(self.waiting[0]):
                self._reject(self.waiting.popleft())
                continue
            if self.waiting:
                await asyncio.sleep(0.001)
            else:
                await self._wake.wait()

    async def _sleep(self, seconds: float, loop: asyncio.AbstractEventLoop) -> None:
        """Wait for one modelled step, on a timeline: back-to-back steps start where the last
        one ended, so the CPU time spent handing out tokens between steps (as SGLang's overlap
        scheduler does while the GPU runs) does not lengthen the modelled step."""
        now = time.monotonic()
        start = self._t_next if 0.0 <= now - self._t_next < _TIMELINE_SLACK else now
        self._t_next = start + seconds
        self.step_end_time = self._t_next
        self.busy_time += seconds
        if self.s.zero_delay:
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(max(0.0, self._t_next - now))
        self.last_step_done = time.monotonic()

    def _drop_aborted(self) -> None:
        if any(r.aborted for r in self.running):
            keep = []
            for r in self.running:
                if r.aborted:
                    self._free(r)
                else:
                    keep.append(r)
            self.running = keep
        if self.chunked is not None and self.chunked.aborted:
            self._free(self.chunked)
            self.chunked = None

    def _free(self, r: Req) -> None:
        self.used -= r.kv
        r.kv = 0

    def _reserve(self, r: Req) -> float:
        remaining = min(r.max_new - r.gen, CLIP_MAX_NEW_TOKENS)
        return max(0, remaining) * self.new_token_ratio

    def _can_admit_ever(self, r: Req) -> bool:
        return r.seq_len + 1 <= self.capacity

    def _reject(self, r: Req) -> None:
        r.finished = True
        r.finish_reason = "abort"
        r.finish_time = time.time()
        self.log.warning(
            f"Request {r.rid} needs {r.seq_len} KV tokens, more than the pool's {self.capacity}; aborted."
        )
        r.event.set()

    def _radix_lookup(self, r: Req) -> int:
        if not self.s.radix_cache or r.prompt_hash is None or r.gen:
            return 0
        hit = self._radix.get(r.prompt_hash)
        if hit is None:
            return 0
        self._radix.move_to_end(r.prompt_hash)
        # SGLang always recomputes at least the last prompt token.
        return min(hit, r.prompt_len - 1)

    def _radix_insert(self, r: Req) -> None:
        if not self.s.radix_cache or r.prompt_hash is None:
            return
        if r.prompt_hash not in self._radix:
            self._radix[r.prompt_hash] = r.prompt_len
            self._radix_tokens += r.prompt_len
        # Cached prefixes live in the free part of the pool; evict the oldest beyond it.
        while self._radix and self._radix_tokens > max(0, self.capacity - self.used):
            _, n = self._radix.popitem(last=False)
            self._radix_tokens -= n

    def _admit(self) -> list[tuple[Req, int, int]]:
        """The next prefill batch: (request, new tokens this chunk, cached tokens)."""
        if not self.waiting and self.chunked is None:
            return []
        budget = min(self.s.chunked_prefill_size, self.s.max_prefill_tokens)
        batch: list[tuple[Req, int, int]] = []
        if self.chunked is not None:
            r = self.chunked
            take = min(r.seq_len - r.prefilled, budget)
            batch.append((r, take, 0))
            budget -= take
            if r.prefilled + take < r.seq_len:
                return batch
        room = len(self.running) + (0 if self.chunked is None else 1)
        if room >= self.s.max_running_requests or not self.waiting or budget <= 0:
            return batch
        reserved = sum(self._reserve(r) for r in self.running)
        free = self.capacity - self.used - reserved
        while self.waiting and budget > 0 and room < self.s.max_running_requests:
            r = self.waiting[0]
            cached = self._radix_lookup(r)
            need = r.seq_len - cached
            if need + cached + self._reserve(r) > free and (self.running or batch):
                break
            self.waiting.popleft()
            take = min(need, budget)
            batch.append((r, take, cached))
            r.cached = cached
            r.prefilled = cached
            budget -= take
            free -= need + cached + self._reserve(r)
            room += 1
            if take < need:
                break
        return batch

    async def _prefill(self, batch: list[tuple[Req, int, int]], loop: asyncio.AbstractEventLoop) -> None:
        new_tokens = sum(t for _, t, _ in batch)
        cached_tokens = sum(c for _, _, c in batch)
        n_new_seq = sum(1 for r, _, _ in batch if r is not self.chunked)
        running_before = len(self.running)
        for r, take, cached in batch:
            grow = take + (cached if r.kv == 0 else 0)
            r.kv += grow
            self.used += grow
            r.prefilled += take
        self.prefill_batches += 1
        tic = time.perf_counter()
        gap, self._prefill_tic = tic - self._prefill_tic, tic
        # 0.5.9 divides the previous batch's tokens by the gap, 0.5.16 on this batch's
        counted = new_tokens if writes_since(self.s.release, "0.5.16") else self._last_prefill_tokens
        self._last_prefill_tokens = new_tokens
        # 0.5.16's and 0.5.23's #pending-token: prompt tokens still to prefill (the queue and a chunked rest)
        pending = sum(r.seq_len for r in self.waiting) + sum(
            r.seq_len - r.prefilled for r, _, _ in batch if r.prefilled < r.seq_len)
        self.log.info(prefill_line(
            self.s.release, new_seq=n_new_seq, new_token=new_tokens, cached_token=cached_tokens,
            usage=self.token_usage, running=running_before, queue=len(self.waiting), pending_token=pending,
            graph=0 < new_tokens <= self.s.shape.prefill_graph_tokens,
            input_throughput=counted / gap if gap > 0 else 0.0,
        ))
        dt = self.profile.prefill_ms(new_tokens, cached_tokens, self.s.step) / 1000.0
        self.step_power_w = self.profile.power_w(0.0, new_tokens / dt if dt > 0 else 0.0) - self._idle_w
        self.dyn_energy_j += self.step_power_w * dt
        self.step_gen_rate = 0.0
        await self._sleep(dt, loop)
        now = time.time()
        self.chunked = None
        for r, _take, cached in batch:
            if r.aborted:
                self._free(r)
                continue
            if r.prefilled < r.seq_len:
                self.chunked = r
                continue
            self.prompt_total += r.prompt_len
            self.cached_total += cached
            self._radix_insert(r)
            # The prefill forward samples the first output token (or the next one, after a retraction).
            self.running.append(r)
            self._emit_token(r, now)

    def _emit_token(self, r: Req, now: float) -> None:
        r.gen += 1
        r.kv += 1
        self.used += 1
        self.generated_total += 1
        if r.first_token_time is None:
            r.first_token_time = now
            self.ttft.observe(now - r.arrival)
        if r.gen >= r.stop_at:
            self._finish(r, now)
        elif r.stream and (r.gen == 1 or r.gen % r.stream_every == 0):
            if r.sink is not None:
                r.sink(r)
            else:
                r.event.set()

    def _finish(self, r: Req, now: float) -> None:
        r.finished = True
        r.finish_reason = "length" if r.gen >= r.max_new else "stop"
        r.finish_time = now
        self.finished_total += 1
        self.finished_generated += r.gen
        self.finished_prompt += r.prompt_len
        self.e2e.observe(now - r.arrival)
        self.recent.append(r)
        if r.sink is not None:
            r.sink(r)
            r.sink = None  # the record outlives the connection; do not keep its socket
        r.event.set()
        if self.on_finish is not None:
            self.on_finish(r)

    def _retract(self) -> None:
        """Free KV for the next decode step by sending requests back to the queue (SGLang order)."""
        need = len(self.running)
        order = sorted(self.running, key=lambda r: (r.gen, -r.prompt_len), reverse=True)
        retracted: list[Req] = []
        while self.used + len(order) > self.capacity and len(order) > 1:
            r = order.pop()
            self._free(r)
            r.prefilled = 0
            r.retractions += 1
            retracted.append(r)
        if not retracted:
            return
        keep = set(map(id, order))
        self.running = [r for r in self.running if id(r) in keep]
        for r in reversed(retracted):
            self.waiting.appendleft(r)
        self.retracted_total += len(retracted)
        old = self.new_token_ratio
        decoded = sum(r.gen for r in self.running)
        max_new = sum(r.max_new for r in self.running) or 1
        self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / max_new)
        self.log.info(
            f"KV cache pool is full. Retract requests. #retracted_reqs: {len(retracted)}, "
            f"#new_token_ratio: {old:.4f} -> {self.new_token_ratio:.4f}"
        )
        del need

    async def _decode(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.crash_hook is not None:
            self.crash_hook()
        if self.used + len(self.running) > self.capacity:
            self._retract()
        running = self.running
        bs = len(running)
        ctx = self.s.step
        self.last_graph = self.profile.graph_used(ctx, bs)
        dt = self.profile.decode_ms(bs, self.used, ctx) / 1000.0
        jitter = float(self.profile["decode"]["jitter"])
        if jitter:
            dt *= 1.0 + self._rng.uniform(-jitter, jitter)
        self.step_gen_rate = bs / dt
        self.step_power_w = self.profile.power_w(self.step_gen_rate, 0.0) - self._idle_w
        self.dyn_energy_j += self.step_power_w * dt
        await self._sleep(dt, loop)
        self.new_token_ratio = max(self.min_new_token_ratio, self.new_token_ratio - self._ratio_decay)
        now = time.time()
        if self.s.enable_metrics:
            self.itl.observe(dt, bs)
        emit = self._emit_token
        finished_any = False
        for r in running:
            if r.aborted:
                continue
            emit(r, now)
            finished_any = finished_any or r.finished
        if finished_any or any(r.aborted for r in running):
            keep = []
            for r in running:
                if r.finished or r.aborted:
                    self._free(r)
                else:
                    keep.append(r)
            self.running = keep
        self.decode_steps += 1
        # Like SGLang's num_generated_tokens: decode tokens only.
        self._log_tokens += bs
        if self.decode_steps % self.s.decode_log_interval == 0:
            self._log_decode(bs)

    def _log_decode(self, bs: int) -> None:
        tic = time.perf_counter()
        gap = tic - self._log_tic
        self.last_gen_throughput = self._log_tokens / gap if gap > 0 else 0.0
        self._log_tic = tic
        self._log_tokens = 0
        self.log.info(decode_line(
            self.s.release, running=bs, tokens=self.used, usage=self.token_usage, graph=self.last_graph,
            gen_throughput=self.last_gen_throughput, queue=len(self.waiting), accept=self.s.shape.accept,
        ))
