"""One server configuration launched several times, each launch measured at the same levels: how far
launches of one configuration stand apart on this host (the floor under any forecast's band).

    PYTHONPATH=.:/tmp/site python3 scripts/gpu/repeat_launch.py --model /tmp/m --run-dir RUN \
        --launches 2 --concurrencies 16,64 --duration 15 [--backend sglang|sim] [--extra '{...}']

Each launch is its own phase (``RUN/launch-N/``: server log, sweep, power), written as it finishes;
a rerun skips the launches already measured. Prints each level's output tok/s per launch and the
spread (the largest over the smallest, less one).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from glm5lib import phase  # noqa: E402
from glm5lib.engines.sglang.config import ServerConfig  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts" / "gpu"))
from run_sglang_h200 import capped_config  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--backend", default="sglang", help="sglang, or sim to rehearse on the stand-in")
    ap.add_argument("--launches", type=int, default=2)
    ap.add_argument("--cap", type=int, default=256)
    ap.add_argument("--mem", type=float, default=0.8)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--extra", default="{}", help="more server arguments, as JSON")
    ap.add_argument("--concurrencies", default="16,64")
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--duration", type=float, default=15.0)
    args = ap.parse_args(argv)
    if args.launches < 2:
        ap.error(f"--launches must be at least 2 to compare launches, got {args.launches}")
    run = Path(args.run_dir).resolve()
    run.mkdir(parents=True, exist_ok=True)
    cfg_path = run / "config.json"
    cfg_path.write_text(json.dumps(capped_config(args.model, args.cap, args.mem, args.tp, json.loads(args.extra)),
                                   indent=2) + "\n")
    config = ServerConfig.load(cfg_path)
    levels = [int(c) for c in args.concurrencies.split(",")]
    for n in range(1, args.launches + 1):
        name = f"launch-{n}"
        if (run / name / "sweep.csv").exists():
            continue
        began = time.monotonic()
        phase.measure_phase(config, run, name, backend=args.backend, model=args.model, ready_timeout=420,
                            concurrencies=levels, input_len=args.input_len, output_len=args.output_len,
                            duration=args.duration, warmup=4, progress=False)
        print(f"{name}: {time.monotonic() - began:.0f} s", flush=True)
    measured = sorted((p for p in run.glob("launch-*") if (p / "sweep.csv").exists()),
                      key=lambda p: int(p.name.split("-")[1]))  # launch-10 after launch-9
    frames = {p.name: pd.read_csv(p / "sweep.csv").set_index("concurrency")["output_throughput"] for p in measured}
    table = pd.DataFrame(frames)
    table["spread"] = table.max(axis=1) / table.min(axis=1) - 1.0
    print(table.round(3).to_string())
    table.to_csv(run / "launches.csv")
    return 0


if __name__ == "__main__":
    sys.exit(main())
