"""How steady is this host's CPU? The noise floor under every measurement taken on it.

    python benchmarks/bench_machine_noise.py                  # 60 s, every core busy at once
    python benchmarks/bench_machine_noise.py --alone          # each core in turn, the others idle
    python benchmarks/bench_machine_noise.py --seconds 120 --window 2 --levels 5,15,30

No server, no network: one process per core, pinned to it, runs a fixed piece of pure-Python
arithmetic over and over and counts how many it finishes in each window. On a quiet host the
count is the same from window to window; on a shared one (a virtual machine whose host runs
others' work) it moves, and everything measured there moves with it: an engine that computes on
the CPU, a scheduler loop, the load generator.

Printed per core: the work rate's median, min and max over the windows, its coefficient of
variation (CV), the drift (last third against first third), and for each level length L the CV of
L-second means: two levels of L seconds read apart by more than ``2 * sqrt(2) * CV_L`` only about
one time in twenty by the host's noise alone, so that is the smallest difference between two
levels this host can tell from nothing. With several cores, the correlation of their windows says
whether one core's speed tells the other's: a probe on the load generator's core can correct the
engine's only if it does.

One run of each on the 2-core machine the test suite runs on (90 s): both cores busy, chunks of
8-14 ms (each core's rate 1.8x from its slowest 2-s window to its fastest, CV 13-16%), 15-s means
with a CV of 4-9%, so two 15-s levels read up to 10-25% apart by the host alone, and the two cores'
windows correlating +0.45 (another run: +0.06); one core at a time, the other idle, a median chunk
15% shorter (8.4-8.8 ms against 9.9-10.1: a busy neighbour core slows this one) and 15-s levels up
to 10-15% apart. The 30-s figures rest on three blocks a core at 90 s: give --seconds 300 for them.
A figure, not an assertion; repeat it to see the host's day.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import platform
import time

import numpy as np
import pandas as pd

CHUNK = 200_000  # multiply-adds per piece of work: about 10 ms on a 2020s x86-64 core


def _work(n: int) -> int:
    s = 0
    for i in range(n):
        s += i * i
    return s


def _run(core: int, seconds: float, window: float, out: mp.Queue) -> None:
    os.sched_setaffinity(0, {core})
    _work(CHUNK)  # warm up
    rates: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        done = 0
        while (now := time.perf_counter()) - t0 < window:
            _work(CHUNK)
            done += 1
        rates.append(done / (now - t0))
    out.put((core, rates))


def measure(cores: list[int], seconds: float, window: float, together: bool) -> dict[int, np.ndarray]:
    """Work rate (chunks/s) per window for each core, all at once or one after another."""
    ctx = mp.get_context("spawn")
    results: dict[int, np.ndarray] = {}
    groups = [cores] if together else [[c] for c in cores]
    for group in groups:
        queue: mp.Queue = ctx.Queue()
        procs = [ctx.Process(target=_run, args=(c, seconds, window, queue)) for c in group]
        for p in procs:
            p.start()
        for _ in group:
            core, rates = queue.get()
            results[core] = np.asarray(rates, float)
        for p in procs:
            p.join()
    return results


def _cv(x: np.ndarray) -> float:
    return float(np.std(x, ddof=1) / np.mean(x)) if len(x) > 1 else math.nan


def block_cv(rates: np.ndarray, window: float, level_s: float) -> float:
    """CV of the means of consecutive blocks of ``level_s`` seconds (nan with fewer than 3)."""
    k = max(round(level_s / window), 1)
    n = len(rates) // k
    if n < 3:
        return math.nan
    return _cv(rates[: n * k].reshape(n, k).mean(axis=1))


def summarise(results: dict[int, np.ndarray], window: float, levels: list[float]) -> pd.DataFrame:
    rows = []
    for core, r in sorted(results.items()):
        third = max(len(r) // 3, 1)
        row = {
            "core": core,
            "windows": len(r),
            "chunk_ms_median": 1000.0 / float(np.median(r)),
            "rate_min": float(r.min()),
            "rate_median": float(np.median(r)),
            "rate_max": float(r.max()),
            "max_over_min": float(r.max() / r.min()),
            "cv": _cv(r),
            "drift": float(r[-third:].mean() / r[:third].mean() - 1.0),
        }
        for level in levels:
            cv = block_cv(r, window, level)
            row[f"cv_{level:g}s"] = cv
            row[f"resolves_{level:g}s"] = 2 * math.sqrt(2) * cv
        rows.append(row)
    return pd.DataFrame(rows)


def correlations(results: dict[int, np.ndarray]) -> list[tuple[int, int, float]]:
    cores = sorted(results)
    out = []
    for i, a in enumerate(cores):
        for b in cores[i + 1:]:
            n = min(len(results[a]), len(results[b]))
            if n >= 3:
                out.append((a, b, float(np.corrcoef(results[a][:n], results[b][:n])[0, 1])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long each core is measured (default 60)")
    ap.add_argument("--window", type=float, default=2.0, help="seconds per window (default 2)")
    ap.add_argument("--levels", default="5,15,30", help="level lengths in seconds to judge (default 5,15,30)")
    ap.add_argument("--cores", default=None, help="cores to measure, comma-separated (default: all this process may use)")
    ap.add_argument("--alone", action="store_true", help="one core at a time, the others idle (default: all at once)")
    args = ap.parse_args(argv)
    allowed = sorted(os.sched_getaffinity(0))
    cores = [int(c) for c in args.cores.split(",")] if args.cores else allowed
    bad = [c for c in cores if c not in allowed]
    if bad:
        ap.error(f"--cores {args.cores!r}: {bad} not among the cores this process may use ({allowed})")
    if args.window <= 0 or args.seconds < 3 * args.window:
        ap.error(f"--seconds must be at least three windows of --window ({args.seconds} s, {args.window} s given)")
    levels = [float(v) for v in args.levels.split(",") if v]
    print(f"host: {platform.node()} {platform.machine()} {platform.processor() or ''} "
          f"{os.cpu_count()} cores; Python {platform.python_version()}")
    mode = "one core at a time" if args.alone else "all cores busy at once"
    print(f"{args.seconds:g} s per core, {args.window:g}-s windows, {mode}, {CHUNK:,} multiply-adds a chunk\n")
    results = measure(cores, args.seconds, args.window, together=not args.alone)
    table = summarise(results, args.window, levels)
    with pd.option_context("display.width", 200, "display.max_columns", 40):
        print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print()
    for level in levels:
        col = f"resolves_{level:g}s"
        worst = table[col].max()
        if not math.isnan(worst):
            print(f"two levels of {level:g} s: differences under {worst:.0%} can be this host's noise alone")
    if not args.alone:
        for a, b, r in correlations(results):
            print(f"cores {a} and {b}: windows correlate {r:+.2f}"
                  + (" (one core's speed does not tell the other's)" if abs(r) < 0.5 else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
