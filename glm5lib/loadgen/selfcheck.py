"""The client's view of itself during a level: its CPU, its event loop's lag, who held the cores.

A level's latency is the server's only if the client read each chunk as it came. Two things
delay the reading: a client that is saturated (its one event loop near a whole core, lagging)
and a client that is starved (little CPU of its own, lagging all the same, because other
processes, often the engine itself on the same host, held the cores). :class:`LevelSelfCheck`
records, per level, what tells them apart: the client's CPU share of a core, the loop-lag
percentiles, the host's busy share, and the other processes that held CPU (names and shares of
a core, the largest first). :func:`client_limited` is the sweep's own verdict; a diagnosis
reads the recorded figures to name which of the two it was and how much it may have inflated
the latency (about the loop lag).
"""

from __future__ import annotations

import asyncio
import os
import time
from array import array
from collections.abc import Mapping
from typing import Any

import numpy as np
import psutil

__all__ = [
    "CLIENT_CPU_BOUND_PCT",
    "LOOP_LAG_BOUND_MS",
    "LOOP_LAG_ITL_FRACTION",
    "SELFCHECK_COLUMNS",
    "LevelSelfCheck",
    "client_bound_text",
    "client_limited",
    "free_cores",
    "judge_levels",
    "lag_probe",
]

# The client limited a level when its event loop lagged, at p99, by a large part of the interval
# between tokens the level actually had, so that reading the streams delayed them, and either
# its process used nearly a whole core (one event loop cannot use more) or the lag outlasted the
# whole interval (a client starved of CPU by a busy machine is the limit all the same). A lag
# alone is no verdict: 30 ms is noise against 70 ms between tokens and decisive against 5 ms.
CLIENT_CPU_BOUND_PCT = 80.0
LOOP_LAG_ITL_FRACTION = 0.5
# Without a measured inter-token interval (no stream had two chunks), the lag is judged alone.
LOOP_LAG_BOUND_MS = 25.0
# Other processes named per level: the largest users of CPU, down to this share of a core.
_OTHERS_LISTED = 5
_OTHERS_MIN_PCT = 1.0
# The processes whose cores ``server_cpus`` counts: those that used this much of a core (the engine's,
# not a shell or a notebook runner that woke now and then)
_BUSY_PROCESS_PCT = 10.0

#: The sweep.csv columns :meth:`LevelSelfCheck.finish` adds beside ``client_cpu_pct`` and
#: ``loop_lag_p99_ms``: loop lag p50 and max (ms), the host's logical cores and busy share (%,
#: of all cores), the other processes' CPU (% of one core, summed) and the largest of them
#: (``"python[812] -m vllm.entrypoints.openai.api_server 183%; name[pid] 12%"``, shares of one core).
#: ``server_cpus`` is how many cores the busiest of them (10% of a core or more) may run on (the union
#: of their CPU affinities: the host's count unless a layout such as ``GLM5_CPUS=split`` confined them).
SELFCHECK_COLUMNS = ["loop_lag_p50_ms", "loop_lag_max_ms", "host_cpus", "host_cpu_pct", "others_cpu_pct",
                     "other_processes", "server_cpus"]


def client_limited(cpu_pct: float, loop_lag_p99_ms: float, median_itl_ms: float,
                   free_cores: float | None = None, loop_lag_p50_ms: float | None = None) -> tuple[bool, float]:
    """Was the client the limit of a level? Returns ``(verdict, loop_lag_p99_ms / median_itl_ms)``.

    True when the event loop's p99 lag was at least :data:`LOOP_LAG_ITL_FRACTION` of the level's
    median inter-token interval and the client's process used at least
    :data:`CLIENT_CPU_BOUND_PCT` % of a core, or when the lag was at least the whole interval
    (tokens waited longer for the client than for the server, whatever kept the client from
    running). A median interval of 0 (tokens arrive together: the server outpaces the reader)
    gives an infinite ratio; with no interval at all (no stream had two chunks) the lag is held
    against :data:`LOOP_LAG_BOUND_MS` and the CPU must be busy.

    ``free_cores``: the host's idle cores over the level (``host_cpus`` less its busy share).
    A client that was not busy on a host with a whole core to spare was not starved: a p99 lag
    above the interval there is the loop reading a burst of chunks at once (16-core H200 host,
    256 streams: 44% of a core, p99 14 ms against 5.3 ms between tokens), which late-stamps a
    token now and then but no median; only a median lag (``loop_lag_p50_ms``) of a whole interval
    makes it the limit there.
    """
    lag = float(loop_lag_p99_ms) if loop_lag_p99_ms is not None else float("nan")
    itl = float(median_itl_ms) if median_itl_ms is not None else float("nan")
    busy = bool(cpu_pct is not None and np.isfinite(cpu_pct) and cpu_pct >= CLIENT_CPU_BOUND_PCT)
    if not np.isfinite(lag) or not np.isfinite(itl) or itl < 0:
        return busy and bool(np.isfinite(lag) and lag >= LOOP_LAG_BOUND_MS), float("nan")
    ratio = lag / itl if itl > 0 else (float("inf") if lag > 0 else 0.0)
    spare = free_cores is not None and np.isfinite(free_cores) and free_cores >= 1.0
    if spare and not busy and ratio >= 1.0:
        p50 = float(loop_lag_p50_ms) if loop_lag_p50_ms is not None else float("nan")
        return bool(np.isfinite(p50) and itl > 0 and p50 >= itl), ratio
    return bool(ratio >= 1.0 or (busy and ratio >= LOOP_LAG_ITL_FRACTION)), ratio


def free_cores(host_cpus: Any, host_cpu_pct: Any) -> float:
    """The host's idle cores over a level: ``host_cpus`` less its busy share (NaN when unknown)."""
    try:
        cpus, pct = float(host_cpus), float(host_cpu_pct)
    except (TypeError, ValueError):
        return float("nan")
    if not (np.isfinite(cpus) and np.isfinite(pct)) or cpus <= 0:
        return float("nan")
    return cpus * max(0.0, 100.0 - pct) / 100.0


def judge_levels(sweep: Any) -> Any:
    """A recorded sweep table with ``client_bound`` judged again from its own figures (CPU, loop
    lag, inter-token interval, the host's free cores), so a run recorded before the verdict
    learned of free cores reads as a new one would; rows without the figures keep theirs."""
    need = ("client_cpu_pct", "loop_lag_p99_ms", "median_itl_ms", "host_cpus", "host_cpu_pct")
    if sweep is None or getattr(sweep, "empty", True) or not all(c in sweep for c in need):
        return sweep
    out = sweep.copy()
    verdicts = []
    for _, row in out.iterrows():
        spare = free_cores(row.get("host_cpus"), row.get("host_cpu_pct"))
        if not np.isfinite(spare):
            verdicts.append(row.get("client_bound"))
            continue
        verdicts.append(client_limited(row.get("client_cpu_pct"), row.get("loop_lag_p99_ms"), row.get("median_itl_ms"),
                                       spare, row.get("loop_lag_p50_ms"))[0])
    out["client_bound"] = verdicts
    return out


def client_bound_text(row: Mapping[str, Any]) -> str:
    """What a level's client-bound verdict means, in words: a client busy on its core is the limit;
    one below half a core was starved of CPU by other processes, and its latencies are late."""
    def num(name: str) -> float:
        try:
            return float(row.get(name))
        except (TypeError, ValueError):
            return float("nan")

    cpu, lag, itl, ratio = (num(n) for n in ("client_cpu_pct", "loop_lag_p99_ms", "median_itl_ms", "loop_lag_itl_ratio"))
    if np.isfinite(itl) and itl == 0:
        against = "tokens reached it in bursts (median inter-token interval 0.0 ms)"
    elif np.isfinite(ratio):
        against = f"{100 * ratio:.0f}% of the median inter-token interval of {itl:.1f} ms"
    else:
        against = "no inter-token interval measured"
    others = row.get("other_processes") or "none"
    if np.isfinite(cpu) and cpu < 50.0:
        return (f"the client was starved of CPU, not busy (CPU {cpu:.0f}% of a core; other processes: {others}); "
                f"its event loop lagged {lag:.1f} ms at p99 ({against}), so the latencies it measured are late "
                "by up to that; on a host this small, give the server and the client their own cores "
                "(cpus='split', GLM5_CPUS=split, or glm5 tune --cpus split)")
    return f"the client was the limit (CPU {cpu:.0f}% of a core; loop lag p99 {lag:.1f} ms, {against}; other processes: {others})"


async def lag_probe(lags: array, interval: float = 0.01) -> None:
    """Append the event loop's lag (seconds late) every ``interval`` s until cancelled."""
    clock = time.perf_counter
    while True:  # ended by cancellation; asyncio.sleep never swallows it
        t = clock()
        await asyncio.sleep(interval)
        lags.append(clock() - t - interval)


def _cpu_by_process(me: int) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) so far of every process that can be read, but this one."""
    out: dict[int, tuple[str, float]] = {}
    for proc in psutil.process_iter(["name", "cpu_times"]):
        info = proc.info
        times = info.get("cpu_times")
        if proc.pid == me or times is None:
            continue
        out[proc.pid] = (str(info.get("name") or "?"), float(times.user + times.system))
    return out


def _cores_of(pids: list[int]) -> int:
    """How many cores the processes ``pids`` may run on between them (their affinities' union); 0
    where none can be read."""
    cores: set[int] = set()
    for pid in pids:
        try:
            cores.update(psutil.Process(pid).cpu_affinity())
        except (psutil.Error, AttributeError, OSError):  # gone, not ours, or a platform without affinity
            continue
    return len(cores)


def _what(who: str) -> str:
    """``name[pid]``, with the module a Python process runs (``python[812] -m vllm.entrypoints...``)."""
    try:
        pid = int(who.rsplit("[", 1)[1].rstrip("]"))
        argv = psutil.Process(pid).cmdline()
    except (ValueError, IndexError, psutil.Error):
        return who
    if "-m" in argv[:-1]:
        return f"{who} -m {argv[argv.index('-m') + 1]}"
    return who


class LevelSelfCheck:
    """Started before a level's requests go out, finished after: the client's self-check figures."""

    def __init__(self) -> None:
        self.proc = psutil.Process(os.getpid())
        self.lags = array("d")  # 100 a second: 8 bytes each, not a float object each
        self._others0 = _cpu_by_process(self.proc.pid)
        self._host0 = psutil.cpu_times()
        self._cpu0 = self.proc.cpu_times()
        self._wall0 = time.perf_counter()

    def probe(self) -> Any:
        """The coroutine that samples the loop lag (run it as a task for the level's length)."""
        return lag_probe(self.lags)

    def finish(self) -> dict[str, Any]:
        """``client_cpu_pct``, ``loop_lag_p99_ms`` and :data:`SELFCHECK_COLUMNS` for the level."""
        wall = max(time.perf_counter() - self._wall0, 1e-9)
        cpu1 = self.proc.cpu_times()
        cpu_pct = 100.0 * ((cpu1.user - self._cpu0.user) + (cpu1.system - self._cpu0.system)) / wall
        host1 = psutil.cpu_times()
        busy = sum(host1) - sum(self._host0) - ((host1.idle - self._host0.idle)
                                                 + (getattr(host1, "iowait", 0.0) - getattr(self._host0, "iowait", 0.0)))
        total = sum(host1) - sum(self._host0)
        others: list[tuple[float, str]] = []
        busy_pids: list[int] = []
        for pid, (name, seconds) in _cpu_by_process(self.proc.pid).items():
            before = self._others0.get(pid)
            used = seconds - (before[1] if before is not None else 0.0)
            if used > 0:
                others.append((100.0 * used / wall, f"{name}[{pid}]"))
                if 100.0 * used / wall >= _BUSY_PROCESS_PCT:
                    busy_pids.append(pid)
        others.sort(reverse=True)
        listed = [f"{_what(who)} {pct:.0f}%" for pct, who in others[:_OTHERS_LISTED] if pct >= _OTHERS_MIN_PCT]
        lags = np.frombuffer(self.lags) * 1000.0 if len(self.lags) else np.empty(0)
        return {
            "client_cpu_pct": cpu_pct,
            "loop_lag_p99_ms": float(np.percentile(lags, 99)) if lags.size else float("nan"),
            "loop_lag_p50_ms": float(np.percentile(lags, 50)) if lags.size else float("nan"),
            "loop_lag_max_ms": float(lags.max()) if lags.size else float("nan"),
            "host_cpus": psutil.cpu_count() or 0,
            "host_cpu_pct": 100.0 * busy / total if total > 0 else float("nan"),
            "others_cpu_pct": float(sum(pct for pct, _ in others)),
            "other_processes": "; ".join(listed),
            "server_cpus": _cores_of(busy_pids),
        }
