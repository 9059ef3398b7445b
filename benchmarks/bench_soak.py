"""Soak: many streams for a long time against the stand-in; the client must not leak.

Drives one closed-loop level of ``--streams`` concurrent streaming requests for ``--duration``
seconds against the stand-in (its own process, modelled timing), sampling this process's
resident memory and open file descriptors as it goes, and prints:

* RSS and open fds over time (one line per sample, as it runs), RSS at the start and end of the
  load, the slope of RSS after the warm-up (KiB/min, least squares over the samples taken while
  the load ran) and the change of both over the second half of the level (flat means nothing
  kept per request);
* the accounting of every request: completed + failed + cancelled against the requests sent
  (records in requests.jsonl, and the sweep's own count of issued requests).

::

    python benchmarks/bench_soak.py                        # 2,048 streams for 10 minutes
    python benchmarks/bench_soak.py --streams 256 --duration 20

Prints figures; asserts nothing (tests/integration/test_soak.py runs a short variant with assertions).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from glm5lib.engines.sim import run_standin
from glm5lib.loadgen import run_sweep


def soak(streams: int, duration: float, *, output_len: int = 64, input_len: int = 16,
         sample_every: float = 1.0, run_dir: Path | None = None,
         on_sample: Callable[[tuple[float, int, int]], None] | None = None) -> dict[str, Any]:
    """Run the soak; return samples and counts (see the module docstring)."""
    me = psutil.Process()
    samples: list[tuple[float, int, int]] = []  # (seconds since the level began, rss bytes, open fds)
    done = threading.Event()
    began = threading.Event()
    progress: list[dict[str, Any]] = []
    t0 = [0.0]

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event") == "level_start":
            t0[0] = time.monotonic()
            began.set()
        elif event.get("event") == "progress":
            progress.append({**event, "t": time.monotonic() - t0[0]})

    def sample() -> None:
        began.wait()
        while not done.is_set():
            point = (time.monotonic() - t0[0], me.memory_info().rss, me.num_fds())
            samples.append(point)
            if on_sample is not None:
                on_sample(point)
            done.wait(sample_every)

    with tempfile.TemporaryDirectory(prefix="glm5-soak-") as tmp:
        folder = Path(run_dir) if run_dir is not None else Path(tmp)
        fds_before = me.num_fds()
        with run_standin("--max-running-requests", str(streams), "--sim-no-access-log",
                         "--decode-log-interval", "100", ready_timeout=120) as server:
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                frame = run_sweep(
                    server.base_url, [streams], duration=duration, input_len=input_len,
                    output_len=output_len, warmup=0, run_dir=folder, server=server, progress=False,
                    callback=on_event,
                )
            finally:
                done.set()
                began.set()
                sampler.join()
        fds_after = me.num_fds()
        with (folder / "requests.jsonl").open() as lines:  # one record at a time: 40,000 lines and more
            sent = sum(1 for line in lines if not json.loads(line)["warmup"])
    row = frame.iloc[0]
    return {
        "samples": samples,
        "load_end_s": max((e["t"] for e in progress), default=0.0),
        "sent": sent,
        "issued": max((e["issued"] for e in progress), default=0),
        "completed": int(row["completed"]),
        "failed": int(row["failed"]),
        "cancelled": int(row["cancelled"]),
        "fds_before": fds_before,
        "fds_after": fds_after,
        "output_throughput": float(row["output_throughput"]),
    }


def second_half_growth(samples: list[tuple[float, int, int]]) -> tuple[float, int]:
    """(RSS change in MiB, fd change) from the middle sample to the last."""
    if len(samples) < 2:
        return 0.0, 0
    mid, last = samples[len(samples) // 2], samples[-1]
    return (last[1] - mid[1]) / 2**20, last[2] - mid[2]


def rss_slope(samples: list[tuple[float, int, int]], warmup_s: float, end_s: float) -> float:
    """RSS slope in KiB per minute (least squares) over the samples from ``warmup_s`` to ``end_s``."""
    pts = [(t, rss) for t, rss, _ in samples if warmup_s <= t <= end_s]
    if len(pts) < 3:
        return float("nan")
    t, rss = np.array(pts, dtype=float).T
    return float(np.polyfit(t, rss, 1)[0]) * 60.0 / 1024.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=2048, help="concurrent streams (default 2048)")
    ap.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    ap.add_argument("--output-len", type=int, default=64, help="tokens per request (default 64)")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples (default 10)")
    ap.add_argument("--warmup", type=float, default=None,
                    help="seconds left out of the RSS slope (default: a tenth of the duration, at most 60)")
    args = ap.parse_args()
    warmup = args.warmup if args.warmup is not None else min(60.0, args.duration / 10)
    t0 = time.monotonic()
    print(f"{'t_s':>8} {'rss_mib':>9} {'fds':>6}", flush=True)
    out = soak(args.streams, args.duration, output_len=args.output_len, sample_every=args.every,
               on_sample=lambda p: print(f"{p[0]:8.1f} {p[1] / 2**20:9.1f} {p[2]:6d}", flush=True))
    wall = time.monotonic() - t0
    print(f"soak: {args.streams} streams for {args.duration:g} s (wall {wall:.0f} s), "
          f"{args.output_len} tokens per request, {out['output_throughput']:.0f} tok/s")
    during = [s for s in out["samples"] if s[0] <= out["load_end_s"]] or out["samples"]
    first = next((s for s in during if s[0] >= warmup), during[0])
    print(f"RSS: {during[0][1] / 2**20:.1f} MiB at the start, {first[1] / 2**20:.1f} MiB after the "
          f"{warmup:g} s warm-up, {during[-1][1] / 2**20:.1f} MiB at the end of the load "
          f"({out['samples'][-1][1] / 2**20:.1f} MiB after the level's statistics); slope after the warm-up "
          f"{rss_slope(out['samples'], warmup, out['load_end_s']):+.1f} KiB/min")
    rss_growth, fd_growth = second_half_growth(during)
    print(f"second half: RSS {rss_growth:+.1f} MiB, fds {fd_growth:+d}; "
          f"fds before {out['fds_before']}, after {out['fds_after']}")
    total = out["completed"] + out["failed"] + out["cancelled"]
    print(f"requests: sent {out['sent']} (issued {out['issued']} at the last progress event), "
          f"completed {out['completed']} + failed {out['failed']} + cancelled {out['cancelled']} = {total} "
          f"({'all accounted for' if total == out['sent'] else 'MISMATCH'})")


if __name__ == "__main__":
    main()
