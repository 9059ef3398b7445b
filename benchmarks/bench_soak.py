"""Soak: many streams for a long time against the stand-in; the client must not leak.

Drives one closed-loop level of ``--streams`` concurrent streaming requests for ``--duration``
seconds against the stand-in (its own process, modelled timing), sampling this process's
resident memory and open file descriptors as it goes, and prints:

* RSS and open fds over time (one line per sample), and their change over the second half of
  the level, when the client's steady state is reached (flat means no leak per request);
* the accounting of every request: completed + failed + cancelled against the requests sent
  (records in requests.jsonl, and the sweep's own count of issued requests).

::

    python benchmarks/bench_soak.py                        # 2,048 streams for 10 minutes
    python benchmarks/bench_soak.py --streams 256 --duration 20

Prints figures; asserts nothing (tests/test_soak.py runs a short variant with assertions).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from glm5lib.loadgen import run_sweep
from glm5lib.server import run_standin


def soak(streams: int, duration: float, *, output_len: int = 64, input_len: int = 16,
         sample_every: float = 1.0, run_dir: Path | None = None) -> dict[str, Any]:
    """Run the soak; return samples and counts (see the module docstring)."""
    me = psutil.Process()
    samples: list[tuple[float, int, int]] = []  # (seconds since start, rss bytes, open fds)
    done = threading.Event()
    progress: list[dict[str, Any]] = []

    def sample() -> None:
        t0 = time.monotonic()
        while not done.is_set():
            samples.append((time.monotonic() - t0, me.memory_info().rss, me.num_fds()))
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
                    callback=lambda e: progress.append(e) if e.get("event") == "progress" else None,
                )
            finally:
                done.set()
                sampler.join()
        fds_after = me.num_fds()
        records = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    row = frame.iloc[0]
    return {
        "samples": samples,
        "sent": sum(1 for r in records if not r["warmup"]),
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=2048, help="concurrent streams (default 2048)")
    ap.add_argument("--duration", type=float, default=600.0, help="seconds (default 600)")
    ap.add_argument("--output-len", type=int, default=64, help="tokens per request (default 64)")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples (default 10)")
    args = ap.parse_args()
    t0 = time.monotonic()
    out = soak(args.streams, args.duration, output_len=args.output_len, sample_every=args.every)
    wall = time.monotonic() - t0
    print(f"soak: {args.streams} streams for {args.duration:g} s (wall {wall:.0f} s), "
          f"{args.output_len} tokens per request, {out['output_throughput']:.0f} tok/s")
    print(f"{'t_s':>8} {'rss_mib':>9} {'fds':>6}")
    for t, rss, fds in out["samples"]:
        print(f"{t:8.1f} {rss / 2**20:9.1f} {fds:6d}")
    rss_growth, fd_growth = second_half_growth(out["samples"])
    print(f"second half: RSS {rss_growth:+.1f} MiB, fds {fd_growth:+d}; "
          f"fds before {out['fds_before']}, after {out['fds_after']}")
    total = out["completed"] + out["failed"] + out["cancelled"]
    print(f"requests: sent {out['sent']} (issued {out['issued']} at the last progress event), "
          f"completed {out['completed']} + failed {out['failed']} + cancelled {out['cancelled']} = {total} "
          f"({'all accounted for' if total == out['sent'] else 'MISMATCH'})")


if __name__ == "__main__":
    main()
