"""How long glm5lib.diagnose takes on long runs, and how long the performance model takes to fit.

    python benchmarks/bench_diagnose.py [--lines 100000] [--repeat 3]

Three figures:

* the rules (``evaluate``) over an Evidence bundle with ``--lines`` decode lines (a day of
  decode logging at SGLang's default interval is about 20,000 to 100,000 lines), a 10-level
  sweep and 8 GPUs sampled at 10 Hz over the same span;
* ``PerfModel.from_evidence`` on that bundle (its sweep levels, the decode lines of each level,
  the limits), what every finding's forecast costs once per bundle;
* ``diagnose`` on the shipped K2-Thinking reference folder (log parsing included).

Best of ``--repeat`` runs, wall-clock seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np
import pandas as pd

from glm5lib import diagnose as dg


def synthetic_evidence(n_lines: int, seed: int = 0) -> dg.Evidence:
    rng = np.random.default_rng(seed)
    batch = rng.integers(1, 513, n_lines)
    tokens = batch * rng.uniform(300, 600, n_lines)
    step = (20.0 + 0.15 * batch + 0.05 * tokens / 1000) * (1 + rng.normal(0, 0.02, n_lines))
    thr = batch * 1000 / step
    idle = rng.random(n_lines) < 0.01
    thr[idle] /= 50
    t0 = pd.Timestamp("2026-01-01 00:00:00")
    decode = pd.DataFrame(
        {
            "time": t0 + pd.to_timedelta(np.arange(n_lines) * 2.0, unit="s"),
            "rank": "TP0",
            "running_req": batch,
            "num_token": tokens.astype(int),
            "token_usage": tokens / 1_000_000,
            "cuda_graph": batch <= 256,
            "gen_throughput": thr,
            "queue_req": np.where(batch > 400, 50, 0),
        }
    )
    start = 1_767_225_600.0
    span = n_lines * 2.0
    levels = [2**k for k in range(10)]
    sweep = pd.DataFrame(
        {
            "concurrency": levels,
            "completed": 100,
            "failed": 0,
            "output_throughput": [min(c, 512) * 40.0 for c in levels],
            "median_ttft_ms": [100.0 * (1 + c / 512) for c in levels],
            "start_time": [start + i * span / 10 for i in range(10)],
            "end_time": [start + (i + 1) * span / 10 for i in range(10)],
            "client_bound": False,
        }
    )
    n_gpu = int(span * 10)
    gpu = pd.DataFrame(
        {
            "time": np.repeat(start + np.arange(n_gpu) / 10.0, 8)[: 8 * n_gpu],
            "gpu": np.tile(np.arange(8), n_gpu),
            "power_w": 250.0,
            "power_limit_w": 600.0,
            "gpu_util": 80.0,
        }
    )
    return dg.Evidence(
        decode=decode,
        sweep=sweep,
        gpu=gpu,
        server_args={"max_running_requests": 512, "cuda_graph_max_bs": 256},
        startup={"max_total_num_tokens": 1_000_000},
    )


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--lines", type=int, default=100_000, help="decode lines in the synthetic run"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    ev = synthetic_evidence(args.lines)
    t_rules, frame = best_of(
        args.repeat, lambda: dg.evaluate(dataclasses.replace(ev, skipped=[]))
    )
    print(
        f"rules over {args.lines:,} decode lines, {len(ev.gpu):,} GPU samples: {t_rules:.3f} s "
        f"({len(frame)} findings: {', '.join(frame['rule'])})"
    )

    t_fit, model = best_of(args.repeat, lambda: dg.PerfModel.from_evidence(dataclasses.replace(ev, skipped=[])))
    print(f"performance model fit on the bundle ({args.lines:,} decode lines, {len(ev.sweep)} levels): {t_fit:.3f} s")
    print(f"  {model.describe()}")

    ref = dg.reference_dir("k2-thinking")
    t_ref, found = best_of(args.repeat, lambda: dg.diagnose(ref, write=False))
    print(
        f"diagnose on the K2-Thinking reference folder (parse included): {t_ref:.3f} s, "
        f"top finding: {found.iloc[0]['rule'] if len(found) else 'none'}"
    )


if __name__ == "__main__":
    main()
