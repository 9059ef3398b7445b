"""How the tuner holds when every launch carries a draw: the recorded real-vLLM landscape, replayed noisy.

    python benchmarks/bench_tune_noise.py                          # draws of 0, 5% and 10%
    python benchmarks/bench_tune_noise.py --sigma 0.05 --runs 200 --margin 0.2 --noise 0.1

The landscape is the grid real vLLM measured (``tests/fixtures/tune/vllm-grid/``: ``max_num_seqs``
1-64 at 64 concurrent requests under a median TPOT limit). Each run repeats what the live test
(``tests/integration/test_tune_vllm.py``) does, with no process started: a first launch at the
largest cap, whose TPOT moves the limit to "today's speed"; the tuner in at most 3 more launches;
the pick measured again. Every measurement is the grid's level at that value (linear in
log(value) between grid points) times a draw: TPOT, ITL and TTFT times exp(sigma * z), throughput
divided by it, z standard normal, a fresh z per launch. ``--first-longer K`` gives the first
launch K times the duration (its draw sigma / sqrt(K)).

Printed per draw: how often the pick reaches 95%, 75% and 60% of the grid's best limit-meeting
point (judged on the grid, as the live test does), how often the pick meets the limit when
measured again, both (60% and the recheck), and the launches and picks' medians. A figure, not an
assertion: pinned levels of one launch of vLLM on two shared CPU cores read about 5% apart.

With the live test's margin (0.2) and noise (0.1) the tuner settles at 28 without any draw, 93% of
the grid's best on the grid's scale (32 sits at 93% of the limit, inside the room that margin
keeps), so "reach>=95%" reads 0% here at every draw; the issue's 95% is held on this landscape with
the margin and noise its own draw calls for (``tests/unit/tune/test_replay_vllm_grid.py``). One run
(100 per draw, ``--first-longer 2``): 0%: every column 100%, pick 28 in 2 launches; 5%: reach>=75%
82%, >=60% 94%, recheck 100%, both 94%; 10%: 68%, 81%, 91%, 74%.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from glm5lib import rundir, tune  # noqa: E402
from glm5lib.engines import vllm as ev  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "tune" / "vllm-grid"
SCALED = ("median_tpot_ms", "median_itl_ms", "median_ttft_ms")


class Landscape:
    """The recorded grid's level at any value, and a noisy measurement of it."""

    def __init__(self, folder: Path, meta: dict | None = None, kinds: tuple[str, ...] = ("grid",)) -> None:
        self.meta = meta if meta is not None else json.loads((folder / "meta.json").read_text())
        runs = pd.read_csv(folder / rundir.TUNE_CSV)
        self.grid = runs[runs["kind"] == "grid"].sort_values("value")
        # the points the level is read from: the grid's, or every measured value of the run
        points = runs[runs["kind"].isin(kinds)].drop_duplicates("value").sort_values("value")
        self.levels = [pd.read_csv(folder / p / rundir.SWEEP).query(f"concurrency == {self.meta['concurrency']}")
                       .iloc[[-1]] for p in points["phase"]]
        self.x = np.log(points["value"].astype(float).to_numpy())
        met = self.grid[self.grid["slo_met"].astype(bool)]
        self.met_x = np.log(met["value"].astype(float).to_numpy())
        self.met_y = met["objective"].astype(float).to_numpy()
        self.best = float(self.met_y.max())

    def level(self, value: float) -> pd.DataFrame:
        row = self.levels[int(np.argmin(abs(self.x - np.log(value))))].copy()
        for column in (*SCALED, "output_throughput"):
            ys = np.asarray([float(level[column].iloc[0]) for level in self.levels])
            row[column] = float(np.interp(np.log(value), self.x, ys))
        return row

    def measured(self, value: float, rng: np.random.Generator, sigma: float) -> pd.DataFrame:
        row = self.level(value)
        draw = float(np.exp(sigma * rng.standard_normal()))
        for column in SCALED:
            row[column] = row[column] * draw
        row["output_throughput"] = row["output_throughput"] / draw
        return row

    def on_grid(self, value: float) -> float:
        return float(np.interp(np.log(value), self.met_x, self.met_y))


def one_run(land: Landscape, rng: np.random.Generator, sigma: float, first_longer: float,
            margin: float, noise: float) -> dict:
    meta = land.meta
    lever, top = meta["lever"], max(meta["values"])
    base = ev.VllmConfig.load(meta["config"])
    workload = tune.Workload(meta["concurrency"], meta["input_len"], meta["output_len"], meta["duration"],
                             api="completions", warmup=meta.get("warmup", 2), sweep_options={"token_ids": False})
    run = Path(tempfile.mkdtemp(prefix="glm5-tune-noise-"))
    try:
        def measure(changes, phase, extra_levels=(), draw=sigma):
            folder = run / phase
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            land.measured(float(changes[lever]), rng, draw).to_csv(folder / rundir.SWEEP, index=False)
            return folder

        measure({lever: top}, "first", draw=sigma / np.sqrt(first_longer))
        live = pd.read_csv(run / "first" / rundir.SWEEP).iloc[-1]
        [limit] = [float(text.split("<=")[1]) for text in meta["slo"]]
        limit = round(limit * float(live["median_tpot_ms"]) / float(land.grid.iloc[-1]["median_tpot_ms"]), 2)
        goal = tune.Goal.parse([f"median_tpot_ms<={limit}"])
        result = tune.tune(base, run, goal, workload, backend="vllm", max_launches=3,
                           levers=[f"{lever}={min(meta['values'])}:{top}"], evidence_phase="first",
                           noise=noise, margin=margin, measure=measure)
        if result.best is None:
            return {"launches": 1 + result.launches, "pick": np.nan, "reach": 0.0, "recheck": False}
        pick = float(result.best["changes"][lever])
        again = land.measured(pick, rng, sigma)
        return {"launches": 1 + result.launches, "pick": pick, "reach": land.on_grid(pick) / land.best,
                "recheck": float(again["median_tpot_ms"].iloc[0]) <= limit}
    finally:
        shutil.rmtree(run, ignore_errors=True)


def one_run_standin(land: Landscape, rng: np.random.Generator, sigma: float, margin: float,
                    noise: float, limit: str, caps: list[int]) -> dict:
    """What ``tests/integration/test_tune.py`` does on the stand-in, replayed: the tuner from the
    baseline's cap (64) at a fixed limit in at most 4 launches, the grid of ``caps`` measured with
    its own draws, the pick's measured objective against the grid's best measured, the pick
    measured again."""
    from glm5lib.engines.sglang.config import ServerConfig

    lever = "max_running_requests"
    workload = tune.Workload(concurrency=land.meta["concurrency"], input_len=128, output_len=32, duration=6.0,
                             warmup=1)
    goal = tune.Goal.parse([limit])
    run = Path(tempfile.mkdtemp(prefix="glm5-tune-noise-"))
    try:
        def measure(changes, phase, extra_levels=()):
            folder = run / phase
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            land.measured(float(changes[lever]), rng, sigma).to_csv(folder / rundir.SWEEP, index=False)
            return folder

        cfg = ServerConfig.load("glm5-baseline")
        result = tune.tune(cfg, run, goal, workload, backend="sim", max_launches=4, noise=noise, margin=margin,
                           measure=measure)
        grid = tune.grid(cfg, run, goal, workload, backend="sim", values=caps, measure=measure)
        if result.best is None or grid.best is None:
            return {"launches": result.launches, "pick": np.nan, "reach": 0.0, "recheck": False}
        pick = float(result.best["changes"][lever])
        again = land.measured(pick, rng, sigma)
        return {"launches": result.launches, "pick": pick,
                "reach": float(result.best["objective"]) / float(grid.best["objective"]),
                "recheck": goal.slo_met({m: float(again[m].iloc[0]) for m in again.columns if m.endswith("_ms")})}
    finally:
        shutil.rmtree(run, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sigma", type=float, nargs="+", default=[0.0, 0.05, 0.1],
                        help="each launch's draw (log standard deviation of its TPOT)")
    parser.add_argument("--runs", type=int, default=40, help="runs per draw")
    parser.add_argument("--margin", type=float, default=None, help="the tuner's margin (vLLM: 0.2, stand-in: 0.03)")
    parser.add_argument("--noise", type=float, default=None, help="the tuner's noise (vLLM: 0.1, stand-in: 0.03)")
    parser.add_argument("--first-longer", type=float, default=2.0,
                        help="the first launch measures this many times as long (the live test: 2)")
    parser.add_argument("--standin", type=Path, metavar="RUN_DIR",
                        help="replay the stand-in test instead: a run folder holding a grid of max_running_requests "
                             "at 1,024 concurrent 128+32-token requests (as the stand-in test leaves it), every "
                             "measured value of it a point of the landscape")
    parser.add_argument("--slo", default="median_tpot_ms<=250", help="with --standin: the limit")
    parser.add_argument("--caps", type=int, nargs="+", default=[64, 128, 256, 384, 512, 640, 768, 1024],
                        help="with --standin: the grid the pick is judged against")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    if args.standin:
        margin = 0.03 if args.margin is None else args.margin
        noise = 0.03 if args.noise is None else args.noise
        land = Landscape(args.standin, meta={"concurrency": 1024}, kinds=("grid", "tune", "check"))
        values = sorted(float(np.exp(x)) for x in land.x)
        print(f"landscape: the stand-in's max_running_requests at {', '.join(f'{v:g}' for v in values)}, "
              f"1,024 concurrent; {args.slo}; grid {args.caps}")
        def run_once(rng, sigma):
            return one_run_standin(land, rng, sigma, margin, noise, args.slo, args.caps)
    else:
        margin = 0.2 if args.margin is None else args.margin
        noise = 0.1 if args.noise is None else args.noise
        land = Landscape(FIXTURE)
        meta = land.meta
        print(f"landscape: {meta['lever']} {meta['values']} at {meta['concurrency']} concurrent, {meta['slo']}, "
              f"vLLM {meta['vllm']}, recorded {meta['recorded_at'][:10]}; grid best {land.best:,.0f} tok/s")
        def run_once(rng, sigma):
            return one_run(land, rng, sigma, args.first_longer, margin, noise)
    print(f"tuner: margin {margin}, noise {noise}, at most 4 launches; {args.runs} runs per draw\n")
    rows = []
    for sigma in args.sigma:
        rng = np.random.default_rng(args.seed)
        runs = pd.DataFrame([run_once(rng, sigma) for _ in range(args.runs)])
        rows.append({
            "draw": f"{sigma:.0%}", "reach>=95%": (runs["reach"] >= 0.95).mean(),
            "reach>=75%": (runs["reach"] >= 0.75).mean(), "reach>=60%": (runs["reach"] >= 0.6).mean(),
            "recheck met": runs["recheck"].mean(), "60% and recheck": ((runs["reach"] >= 0.6) & runs["recheck"]).mean(),
            "95% and recheck": ((runs["reach"] >= 0.95) & runs["recheck"]).mean(),
            "launches (median)": runs["launches"].median(), "pick (median)": runs["pick"].median(),
        })
    table = pd.DataFrame(rows).set_index("draw")
    shares = [c for c in table.columns if "median" not in c]
    print(table.to_string(formatters={c: "{:.0%}".format for c in shares}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
