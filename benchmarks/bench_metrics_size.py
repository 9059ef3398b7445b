"""Bytes per hour that a phase's ``/metrics`` record grows by, on the stand-in under load.

Starts the stand-in with the fix's flags (``glm5-fix``: 1,024 running requests, metrics on),
scrapes ``/metrics`` every second into a run folder while a closed-loop sweep holds
``--concurrency`` streams for ``--seconds``, and prints the bytes and rows each metrics file
gained, scaled to an hour::

    python benchmarks/bench_metrics_size.py --concurrency 1024 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from glm5lib.engines.sglang.config import ServerConfig
from glm5lib.engines.sim import run_standin
from glm5lib.loadgen import run_sweep
from glm5lib.telemetry import MetricsScraper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args()
    flags = ServerConfig.load("glm5-fix").to_argv()
    with tempfile.TemporaryDirectory(prefix="glm5-metrics-size-") as tmp, run_standin(*flags) as srv:
        folder = Path(tmp)
        t0 = time.time()
        with MetricsScraper(srv.base_url, interval=1.0, out=folder / "metrics.csv") as scraper:
            run_sweep(srv.base_url, [args.concurrency], duration=args.seconds, input_len=256, output_len=256,
                      run_dir=folder / "sweep", progress=False, warmup=0)
        wall = time.time() - t0
        files = {p.name: p.stat().st_size for p in sorted(folder.iterdir()) if p.is_file()}
        rows = {name: max(0, sum(1 for _ in (folder / name).open("rb")) - 1) for name in files}
        total = sum(files.values())
        print(json.dumps({
            "concurrency": args.concurrency, "seconds": round(wall, 1), "scrapes": scraper.scrapes,
            "files": files, "rows": rows, "bytes": total,
            "bytes_per_hour": round(total / wall * 3600), "mb_per_hour": round(total / wall * 3600 / 1e6, 1),
        }, indent=1))


if __name__ == "__main__":
    main()
