"""Forecast, then measure; then tune: the performance model and the tuner against a real GPU engine.

    PYTHONPATH=. python3 scripts/gpu/run_forecast_tune.py forecast --model /tmp/tinymoe --run-dir RUN
    PYTHONPATH=. python3 scripts/gpu/run_forecast_tune.py grid --model /tmp/tinymoe --run-dir RUN
    PYTHONPATH=. python3 scripts/gpu/run_forecast_tune.py tune --model /tmp/tinymoe --run-dir RUN --slo 'median_tpot_ms<=40'

``forecast``: the workbook's notebooks 01 and 02 measure the baseline (the engine's capped
setting), ``glm5 predict`` forecasts the raised setting at every level from the baseline alone
(``baseline/forecast-cli.json``), then notebooks 04 and 05 measure the raised setting, and notebook
04 writes ``fix/prediction.csv`` (forecast, band, measured and error per level).

``grid``: the exhaustive grid over one lever (``--lever``, a flag of the engine with its bounds),
one launch a point, at one target load (phases ``grid-N`` of ``RUN/grid``).

``tune``: ``glm5lib.tune`` over the same lever and load under ``--slo`` in at most
``--max-launches`` launches (phases ``tune-N`` of ``RUN/tune``), then the winner measured again.

Each stage is a separate call so that each stays within a few minutes; they share the engine
preset, the model and the load, and ``engine.json`` records versions, GPU and commands.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import run_engine_workbook as rew  # noqa: E402

from glm5lib import engines, rundir, server, tune, workbook  # noqa: E402
from glm5lib.errors import NotebookFailedError  # noqa: E402

log = logging.getLogger("run_forecast_tune")


def _manifest(run: Path, engine, capped: list[str], args: argparse.Namespace, **extra) -> None:
    path = run / rundir.ENGINE_RECORD
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update({
        "engine": engine.name, "engine_description": engine.description, "baseline_command": capped,
        "sweep_options": dict(engine.sweep_options), "gpus": rew._gpus(),
        "versions": {d: rew._version(d) for d in ("transformers", "torch", "glm5lib")},
        "model": rew._model_facts(args.model),
    })
    data.setdefault("stages", {})[args.stage] = {**extra, "finished": time.time()}
    path.write_text(json.dumps(data, indent=2) + "\n")


def forecast(args: argparse.Namespace, engine, capped: list[str]) -> int:
    run = Path(args.run_dir).resolve()
    run.mkdir(parents=True, exist_ok=True)
    raised = {args.flag: args.raised}
    levels = [int(c) for c in args.concurrencies.split(",")]
    params = {
        "BACKEND": "command", "ENGINE_COMMAND": capped, "MODEL_PATH": args.model, "API": engine.api,
        "FIX_CHANGES": raised, "APPLY_PATCH": False, "CONCURRENCIES": levels,
        "INPUT_LEN": args.input_len, "OUTPUT_LEN": args.output_len, "LEVEL_DURATION_S": args.duration,
        "REQUESTS_PER_LEVEL": 0, "READY_TIMEOUT_S": 300, "WARMUP_REQUESTS": 4,
        "SWEEP_OPTIONS": dict(engine.sweep_options),
    }
    try:
        workbook.run_workbook(params, run_dir=run, only=[1, 2], progress=False)
    except NotebookFailedError as exc:
        log.error("%s", exc)
        return 1
    # the forecast, from the baseline alone, before the raised setting is launched
    cmd = [sys.executable, "-m", "glm5lib.cli", "predict", str(run), "--phase", "baseline",
           f"--set={args.flag}={args.raised}", "--concurrency", args.concurrencies, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    (run / "baseline" / rundir.forecast_record("cli")).write_text(done.stdout)
    print(done.stdout or done.stderr)
    try:
        workbook.run_workbook(params, run_dir=run, only=[4], progress=False)
    except NotebookFailedError as exc:
        log.error("%s", exc)
        return 1
    try:
        workbook.run_workbook(params, run_dir=run, only=[5], progress=False)
    except NotebookFailedError as exc:
        log.warning("notebook 05 did not complete: %s", exc)
    _manifest(run, engine, capped, args, fix_changes=raised, predict_command=cmd[2:],
              levels=levels, fix_command=server.apply_flag_changes(capped, raised))
    prediction = run / "fix" / rundir.PREDICTION_CSV
    if prediction.exists():
        print(prediction.read_text())
    return 0


def _goal_and_load(args: argparse.Namespace, engine) -> tuple[tune.Goal, tune.Workload]:
    goal = tune.Goal.parse(args.slo or ["median_tpot_ms<=1000000"])
    load = tune.Workload(args.target, args.input_len, args.output_len, args.duration, api=engine.api,
                         warmup=4, sweep_options=dict(engine.sweep_options))
    return goal, load


def grid(args: argparse.Namespace, engine, capped: list[str]) -> int:
    run = Path(args.run_dir).resolve() / "grid"
    goal, load = _goal_and_load(args, engine)
    values = [int(v) for v in args.grid_values.split(",")]
    result = tune.grid(None, run, goal, load, backend="command", levers=[args.lever], values=values,
                       command=capped, model=args.model, ready_timeout=300)
    _manifest(run.parent, engine, capped, args, lever=args.lever, values=values, target=args.target)
    print(result.candidates.to_string())
    return 0


def tune_(args: argparse.Namespace, engine, capped: list[str]) -> int:
    run = Path(args.run_dir).resolve() / "tune"
    goal, load = _goal_and_load(args, engine)
    result = tune.tune(None, run, goal, load, backend="command", levers=[args.lever],
                       max_launches=args.max_launches, command=capped, model=args.model, ready_timeout=300)
    data = result.to_dict()
    if result.best is not None:
        data["recheck"] = tune.search.recheck(None, run, goal, load, result, backend="command",
                                              command=capped, model=args.model, ready_timeout=300)
    (run / rundir.TUNE_RESULT).write_text(json.dumps(data, indent=2, default=str) + "\n")
    _manifest(run.parent, engine, capped, args, lever=args.lever, slo=args.slo, target=args.target,
              max_launches=args.max_launches)
    print(json.dumps(data, indent=2, default=str))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["forecast", "grid", "tune"])
    ap.add_argument("--engine", default="transformers-serve", help="preset name in glm5lib.engines")
    ap.add_argument("--model", required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--flag", default="--cb-max-batch-tokens", help="the batching flag under test")
    ap.add_argument("--capped", type=int, default=64, help="the baseline's value of --flag")
    ap.add_argument("--raised", type=int, default=1024, help="the raised value of --flag (forecast)")
    ap.add_argument("--concurrencies", default="1,8,32,128", help="levels of the forecast stage")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--target", type=int, default=128, help="concurrency of the grid and the tuner")
    ap.add_argument("--lever", default="--cb-max-batch-tokens=16:2048")
    ap.add_argument("--grid-values", default="16,32,64,128,256,512,1024")
    ap.add_argument("--slo", action="append", default=[], help="latency limit, e.g. median_tpot_ms<=40")
    ap.add_argument("--max-launches", type=int, default=4)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    engine = engines.get_engine(args.engine)
    capped = engine.command_for("capped", {args.flag: str(args.capped)})
    stage = {"forecast": forecast, "grid": grid, "tune": tune_}[args.stage]
    return stage(args, engine, capped)


if __name__ == "__main__":
    sys.exit(main())
