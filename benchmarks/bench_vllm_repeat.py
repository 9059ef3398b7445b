"""How far apart do levels of one batch read on real vLLM, within a launch and between launches?

    python benchmarks/bench_vllm_repeat.py                      # 3 launches, levels 16-19 at cap 16
    python benchmarks/bench_vllm_repeat.py --launches 4 --cap 16 --levels 16,17,18,19 --duration 15

Needs ``make vllm``. Every level runs the same batch: the cap (``--max-num-seqs``) holds the
engine at ``--cap`` running requests whatever the concurrency above it, so the levels differ only
by when they ran. Each launch is measured as the predict and tune tests measure (the project's
launch and sweep code, completions API, 32-token prompts, 64-token outputs, the engine and the
load generator on their own cores with ``--cpus split``). Printed: every level's throughput and
TPOT, each launch's mean, the coefficient of variation of single levels (all launches together)
and of launch means, and the largest ratio between two levels. That is the noise a forecast or a
tuner compares against on this host; ``benchmarks/bench_machine_noise.py`` gives the host's own
part without any engine.

Two runs on the 2-core test machine (3 launches each, levels 16-19 at cap 16, 15 s a level, 106-115 s
a launch with start-up): 2,049-2,861 tok/s across the 12 levels (1.40x), single levels CV 9.7%,
launch means 2,324, 2,427 and 2,516 (CV 4%); then 1,983-2,866 (1.45x), CV 12.1%, launch means
2,558, 2,152 and 2,284 (CV 8.9%). Levels of one launch scatter by about as much as launches drift
apart, or more: a control level run in both launches carries that scatter into any correction.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from glm5lib import engines, phase  # noqa: E402
from glm5lib.engines import vllm as ev  # noqa: E402
from glm5lib.errors import ServerLaunchError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launches", type=int, default=3)
    ap.add_argument("--cap", type=int, default=16, help="--max-num-seqs (default 16)")
    ap.add_argument("--levels", default="16,17,18,19", help="concurrencies at or above the cap (default 16,17,18,19)")
    ap.add_argument("--duration", type=float, default=15.0, help="seconds per level (default 15: the tests')")
    ap.add_argument("--cpus", default="split", help="core layout (default 'split'; '' for none)")
    ap.add_argument("--out", type=Path, default=None, help="run folder to keep (default: a temporary one)")
    args = ap.parse_args(argv)
    levels = [int(v) for v in args.levels.split(",") if v]
    if args.launches < 2 or not levels or min(levels) < args.cap:
        ap.error(f"give --launches 2 or more and --levels at or above --cap {args.cap} (all run the same batch)")
    try:
        ev.vllm_python()
        model = ev.VllmConfig.load("vllm-capped").model_path()
    except (ServerLaunchError, ValueError) as exc:
        ap.error(str(exc))
    config = engines.load_config("vllm-capped").with_changes(max_num_seqs=args.cap, model=model)
    sweep = {"api": "completions", "input_len": 32, "output_len": 64, "duration": args.duration, "warmup": 2,
             "sweep_options": {"token_ids": False}, "progress": False, "gpu": False, "cpus": args.cpus or None}
    with tempfile.TemporaryDirectory(prefix="vllm-repeat-") as tmp:
        out = args.out or Path(tmp)
        frames = []
        for k in range(args.launches):
            started = time.monotonic()
            phase.measure_phase(config, out, f"launch-{k + 1}", backend="vllm", ready_timeout=600,
                                concurrencies=levels, **sweep)
            f = pd.read_csv(out / f"launch-{k + 1}" / "sweep.csv")[["concurrency", "output_throughput", "median_tpot_ms"]]
            frames.append(f.assign(launch=k + 1))
            print(f"launch {k + 1} ({time.monotonic() - started:.0f} s): "
                  + ", ".join(f"{t:,.0f}" for t in f["output_throughput"]) + " tok/s", flush=True)
    table = pd.concat(frames, ignore_index=True)
    thr = table["output_throughput"].to_numpy(float)
    means = table.groupby("launch")["output_throughput"].mean()
    print()
    print(table.to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    print(f"\nsingle levels: {thr.min():,.0f}-{thr.max():,.0f} tok/s ({thr.max() / thr.min():.2f}x), "
          f"CV {np.std(thr, ddof=1) / thr.mean():.1%}")
    print("launch means: " + ", ".join(f"{m:,.0f}" for m in means)
          + f" (CV {np.std(means, ddof=1) / means.mean():.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
