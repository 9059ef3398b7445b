"""Record the vLLM-on-CPU grid the tuner's test replays: ``make tune-grid-fixture``.

The grid is measured with the same launch and sweep code ``glm5 tune --grid`` uses
(:func:`glm5lib.tune.grid`), over ``max_num_seqs`` under a median TPOT limit (a larger running cap
batches more requests per step: more throughput, and longer steps, so a longer TPOT), and kept in
``tests/fixtures/tune/vllm-grid/`` (``tune.csv``, each point's ``sweep.csv`` and
``config.json``, and ``meta.json`` with the date, the versions and the workload). The grid is
resumable: ``--points 1-4`` then ``--points 5-9`` measure it in two shorter runs into the same
``--work`` folder; ``--write`` copies it into the fixture once every point is there.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from glm5lib import __version__, rundir, tune
from glm5lib.engines import vllm as ev

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "tune" / "vllm-grid"
#: what the test replays: the same values are measured by the tuner there
SETTINGS = {
    "config": "vllm-raised",
    "base_changes": {},
    "lever": "max_num_seqs",
    "values": [1, 2, 4, 8, 16, 24, 32, 48, 64],
    "slo": ["median_tpot_ms<=12"],
    "concurrency": 64,
    "input_len": 32,
    "output_len": 64,
    "duration": 10.0,
    # one wave of warm-up requests at the target load before the level: a fresh launch meets each
    # batch size for the first time there (two warm-up requests left the first seconds of a
    # level at 64 running slow: 18 ms of TPOT against 11 after a lighter level)
    "warmup": 64,
    # the engine on one core, the load generator on the other: on two cores a vLLM launch left to
    # itself starves the client, and launches of one configuration then differ by 1.7x
    "cpus": "split",
}


def workload() -> tune.Workload:
    return tune.Workload(SETTINGS["concurrency"], SETTINGS["input_len"], SETTINGS["output_len"],
                         SETTINGS["duration"], api="completions", warmup=SETTINGS["warmup"],
                         sweep_options={"token_ids": False})


def config() -> ev.VllmConfig:
    base = ev.VllmConfig.load(SETTINGS["config"])
    return base.with_changes(model=base.model_path(), **SETTINGS["base_changes"])


def vllm_version() -> str:
    out = subprocess.run([ev.vllm_python(), "-c", "import vllm; print(vllm.__version__)"],
                         capture_output=True, text=True, timeout=300)
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=str(ROOT / "data" / "runs" / "tune-vllm-grid"))
    parser.add_argument("--points", default=None, help="e.g. 1-4: measure only these grid points now")
    parser.add_argument("--write", action="store_true", help="copy the finished grid into the fixture")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    work = Path(args.work)
    values = SETTINGS["values"]
    if args.points:
        lo, _, hi = args.points.partition("-")
        values = values[:int(hi or lo)]  # earlier points are read back, not relaunched
    goal = tune.Goal.parse(SETTINGS["slo"])
    result = tune.grid(config(), work, goal, workload(), backend="vllm", levers=[SETTINGS["lever"]],
                       values=values, cpus=SETTINGS["cpus"])
    print(result.candidates[["phase", "value", "objective", "median_tpot_ms", "slo_met"]].to_string())
    if args.write:
        if len(result.candidates) < len(SETTINGS["values"]):
            print("not every grid point is measured yet", file=sys.stderr)
            return 1
        if FIXTURE.exists():
            shutil.rmtree(FIXTURE)
        FIXTURE.mkdir(parents=True)
        frame = pd.read_csv(work / rundir.TUNE_CSV)
        unused = [m for m in tune.LIMIT_METRICS if m in frame and m not in {lim.metric for lim in goal.limits}]
        frame[frame["kind"] == "grid"].drop(columns=unused).to_csv(FIXTURE / rundir.TUNE_CSV, index=False)
        for phase in result.candidates["phase"]:
            (FIXTURE / phase).mkdir()
            for name in (rundir.SWEEP, rundir.CONFIG):
                if (work / phase / name).exists():
                    # paths inside the checkout are kept relative to it: the fixture names no machine
                    text = (work / phase / name).read_text().replace(f"{ROOT}/", "")
                    (FIXTURE / phase / name).write_text(text)
        mean_prompt = pd.concat([pd.read_csv(work / p / rundir.SWEEP) for p in result.candidates["phase"]])
        meta = {"recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                "glm5lib": __version__, "vllm": vllm_version(), "python": platform.python_version(),
                "machine": f"{platform.machine()}, {__import__('os').cpu_count()} CPU cores",
                "command": "make tune-grid-fixture", **SETTINGS}
        if "mean_prompt_tokens" in mean_prompt:
            meta["prompt_tokens_per_request"] = round(float(mean_prompt["mean_prompt_tokens"].mean()), 1)
        (FIXTURE / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        print(f"fixture written: {FIXTURE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
