"""The workbook, the forecast and the tuner's grid on real SGLang on one GPU, in resumable steps.

    PYTHONPATH=.:/tmp/site python3 scripts/gpu/run_sglang_h200.py --model /tmp/m --run-dir RUN \
        --deadline 540 [--backend sglang|sim]

Each call runs the steps of the plan not yet done, in order, and stops before a step that would
not finish within ``--deadline`` seconds of the call's start (each step's cost is estimated from
the launches already made), so a GPU host lent for calls of a few minutes runs the whole plan in
several calls; ``RUN/plan.json`` records what was done, when and how long it took.

The plan (SGLang's own argument names; the baseline is the capped config of ``--config``):

1. ``baseline``: notebooks 01-03 (environment, the capped baseline at 1/64/256/1024 concurrent
   requests, the diff against the K2 reference).
2. ``predict``: ``glm5 predict`` from the baseline alone, before anything is changed, for the cap
   raised with CUDA graphs kept and for the seed's full fix (graphs and the radix cache off); with
   ``--settle``, the step profile the first of them asks for is taken first (one offline launch), and
   a ``phase:NAME`` step takes the one its change asks for before forecasting it.
3. ``fix``: notebook 04 with the cap raised to 1,024, graphs kept (phase ``fix``).
4. ``fix-graphs-off``: notebook 04 with the seed's full fix (phase ``fix-graphs-off``).
5. ``next``: notebook 05 on ``fix``, then the report.
6. ``grid``: the running cap (or ``--lever``) over ``--grid`` at ``--target`` concurrent requests, one launch per
   value, under ``--slo`` (phases ``grid/grid-N``, ``grid/tune.csv``).
7. ``tune``: ``glm5lib.tune`` over the same lever, load and limit from the capped baseline, at
   most ``--max-launches`` launches, then the winner measured again (``tune/``).

The next bottleneck's plan (``--steps baseline,predict-next,glm5-fix,frontend,next,tune,grid``):

- ``predict-next``: ``glm5 predict`` from the baseline, before either launch, for glm5lib's fix
  (``--glm5-fix``: the cap raised with graphs kept and the graph ceiling raised to it) and for the
  front-end remedy on top of it (``--frontend``).
- ``glm5-fix``, ``frontend``: notebook 04 with those changes (phases of the same names); notebook
  05 then reads ``--next-phase``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from glm5lib import rundir, stepbench, tune, workbook  # noqa: E402
from glm5lib.engines.sglang.config import ServerConfig  # noqa: E402
from glm5lib.errors import NotebookFailedError  # noqa: E402

log = logging.getLogger("run_sglang_h200")

STEPS = ("baseline", "predict", "fix", "fix-graphs-off", "next", "grid", "tune", "predict-next", "glm5-fix", "frontend")
#: seconds a step takes beyond its launches and levels (notebook start-up, reports)
OVERHEAD_S = 20.0


class OutOfTime(Exception):
    """The next launch would not finish before the call's deadline."""


def capped_config(model: str, cap: int, mem: float, tp: int = 1, extra: dict | None = None) -> dict:
    return {
        "format": "glm5lib.server_config/1",
        "name": "qwen3-moe-1gpu-capped",
        "description": f"A random-weight Qwen3-MoE on one GPU (whichever the host has: environment.json names it), running cap {cap} (the seed's cap)",
        "source": "scripts/gpu/run_sglang_h200.py",
        "server_args": {
            "model_path": model, "tp_size": tp, "max_running_requests": cap, "load_format": "dummy",
            "attention_backend": "triton", "sampling_backend": "pytorch", "mem_fraction_static": mem,
            "enable_metrics": True, **(extra or {}),
        },
    }


class Plan:
    def __init__(self, run: Path, deadline: float) -> None:
        self.run = run
        self.path = run / rundir.PLAN_RECORD
        self.state = json.loads(self.path.read_text()) if self.path.exists() else {"done": {}, "launches": []}
        self.end = time.monotonic() + deadline

    def save(self) -> None:
        self.path.write_text(json.dumps(self.state, indent=2) + "\n")

    def launch_cost(self) -> float:
        """A launch and its level(s), from the ones made so far (a first guess before any)."""
        seen = [x["seconds"] for x in self.state["launches"]]
        return statistics.median(seen) if seen else 200.0

    def left(self) -> float:
        return self.end - time.monotonic()

    def need(self, launches: int, levels_s: float) -> None:
        want = launches * self.launch_cost() + levels_s + OVERHEAD_S
        if self.left() < want:
            raise OutOfTime(f"{self.left():.0f} s left, the next step needs about {want:.0f} s")

    def done(self, step: str, started: float, **facts) -> None:
        self.state["done"][step] = {"seconds": round(time.monotonic() - started, 1), "at": time.time(), **facts}
        self.save()


#: the notebooks that launch a server (the baseline's and a change's)
LAUNCHING = (2, 4)


def _launching_seconds(run: Path, only: list[int], whole: float) -> float:
    """How long the notebook of ``only`` that launched the server ran (``notebooks.json``), else ``whole``."""
    try:
        entries = json.loads((run / rundir.NOTEBOOKS_STATUS).read_text())
    except (OSError, ValueError):
        return whole
    timed = [float(e["seconds"]) for e in entries if isinstance(e, dict) and e.get("seconds") is not None
             and str(e.get("name", ""))[:2].isdigit() and int(str(e["name"])[:2]) in only
             and int(str(e["name"])[:2]) in LAUNCHING]
    return max(timed) if timed else whole


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--backend", default="sglang", help="sglang, or sim to rehearse the plan on the stand-in")
    ap.add_argument("--deadline", type=float, default=540.0, help="seconds this call may run")
    ap.add_argument("--cap", type=int, default=64)
    ap.add_argument("--raised", type=int, default=1024)
    ap.add_argument("--tp", type=int, default=1, help="--tp-size (8 to rehearse on the stand-in's GLM-5 profile)")
    ap.add_argument("--mem", type=float, default=0.8, help="--mem-fraction-static")
    ap.add_argument("--concurrencies", default="1,64,256,1024")
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--duration", type=float, default=25.0, help="seconds per level")
    ap.add_argument("--target", type=int, default=256, help="the grid's and the tuner's load")
    ap.add_argument("--grid", default="64,96,128,160,192,256")
    ap.add_argument("--grid-duration", type=float, default=30.0)
    ap.add_argument("--range-ratio", type=float, default=0.5,
                    help="the grid's and the tuner's lengths drawn in [len x RATIO, len]: lengths that differ "
                         "break the cohorts a closed loop of equal requests forms (1: all equal)")
    ap.add_argument("--lever", default="max_running_requests",
                    help="the SGLang field the grid and the tuner move (FIELD or FIELD=LOW:HIGH, as glm5 tune --lever); "
                         "comma-separated, the tuner searches them in turn (glm5lib.tune.tune_in_turn)")
    ap.add_argument("--evidence", default=None,
                    help="a phase folder measured at the tuner's load, copied in as the tuner's first point (no launch)")
    ap.add_argument("--slo", default="median_tpot_ms<=20")
    ap.add_argument("--max-launches", type=int, default=4)
    ap.add_argument("--steps", default="baseline,predict,fix,fix-graphs-off,next,grid,tune")
    ap.add_argument("--glm5-fix", default='{"max_running_requests": 1024, "cuda_graph_max_bs": 1024}',
                    help="glm5lib's fix, as JSON of SGLang fields")
    ap.add_argument("--frontend", default='{"tokenizer_worker_num": 4, "stream_interval": 4}',
                    help="the front-end remedy, as JSON of SGLang fields, on top of --glm5-fix")
    ap.add_argument("--next-phase", default="fix", help="the phase notebook 05 reads")
    ap.add_argument("--base-extra", default="{}",
                    help="more of the baseline's server arguments, as JSON (e.g. a KV pool: {\"max_total_tokens\": 16384})")
    ap.add_argument("--kept", default=None,
                    help="the fix's changes as JSON (default: the running cap raised to --raised, graphs kept)")
    ap.add_argument("--phase-changes", default="{}",
                    help="the changes of a step phase:NAME (forecast from the baseline, then notebook 04 as phase NAME); "
                         "or {NAME: changes, ...} for several phase steps")
    ap.add_argument("--settle", action="store_true",
                    help="in the predict and phase:NAME steps, take the engine's step profile the forecast asks for "
                         "(glm5lib.stepbench.settle_forecast, one offline launch) before forecasting")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    run = Path(args.run_dir).resolve()
    run.mkdir(parents=True, exist_ok=True)
    plan = Plan(run, args.deadline)
    cfg_path = run / rundir.CAPPED_CONFIG
    cfg_path.write_text(json.dumps(capped_config(args.model, args.cap, args.mem, args.tp,
                                                   json.loads(args.base_extra)), indent=2) + "\n")
    levels = [int(c) for c in args.concurrencies.split(",")]
    common = {
        "BACKEND": args.backend, "CONFIG": str(cfg_path), "MODEL_PATH": args.model, "TP_SIZE": args.tp,
        "APPLY_PATCH": False, "CONCURRENCIES": levels, "INPUT_LEN": args.input_len, "OUTPUT_LEN": args.output_len,
        "LEVEL_DURATION_S": args.duration, "REQUESTS_PER_LEVEL": 0, "READY_TIMEOUT_S": 420,
        "WARMUP_REQUESTS": 4, "GPU_SAMPLE_INTERVAL_S": 0.25,
    }
    kept = json.loads(args.kept) if args.kept else {"max_running_requests": args.raised}
    seed_fix = {"max_running_requests": args.raised, "disable_cuda_graph": True, "disable_radix_cache": True}
    glm5_fix = json.loads(args.glm5_fix)
    frontend = {**glm5_fix, **json.loads(args.frontend)}
    sweep_s = len(levels) * (args.duration + 5)

    def notebooks(only, launches, **params):
        plan.need(launches, launches * sweep_s)
        started = time.monotonic()
        try:
            # the notebooks run are given what they declare (the workbook refuses any other name)
            paths = [p for p in workbook.list_notebooks() if int(p.name[:2]) in only]
            declared = workbook.declared_parameters(paths)
            given = {k: v for k, v in {**common, **params}.items() if k in declared}
            workbook.run_workbook(given, run_dir=run, only=only, progress=False)
        finally:
            if launches:
                # the launch's own cost: the launching notebook's time (02 or 04, as notebooks.json
                # timed it) less its levels; the step's other notebooks (03's diff and benchmark, the
                # reports) launch no server and would make every later launch look dearer than it is
                spent = _launching_seconds(run, only, time.monotonic() - started) - launches * sweep_s
                plan.state["launches"].append({"step": str(only), "seconds": round(max(spent, 30.0), 1)})
                plan.save()

    def predict(changes: dict, name: str) -> None:
        sets = [f"--set={k}={v}" for k, v in changes.items()]
        cmd = [sys.executable, "-m", "glm5lib.cli", "predict", str(run), "--phase", "baseline", *sets,
               "--concurrency", args.concurrencies, "--json"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        (run / "baseline" / rundir.forecast_record(name)).write_text(done.stdout or json.dumps({"error": done.stderr[-4000:]}))
        print(done.stdout[-3000:] or done.stderr[-3000:])

    def settle(changes: dict) -> None:
        """The step profile the forecast of ``changes`` asks for, taken before forecasting (one offline launch)."""
        asked = stepbench.settle_forecast(run, "baseline", changes, levels, take=False)
        if not stepbench.profile_wants(asked.model, asked.forecasts, changes):
            return
        plan.need(1, 0)
        began = time.monotonic()
        settled = stepbench.settle_forecast(run, "baseline", changes, levels, take=True)
        print(f"step profile for {changes}: {settled.note}")
        if settled.profile is not None:
            plan.state["launches"].append({"step": "step-profile", "changes": changes,
                                           "seconds": round(time.monotonic() - began, 1)})
            plan.save()

    goal = tune.Goal.parse([args.slo])
    load = tune.Workload(args.target, args.input_len, args.output_len, args.grid_duration, warmup=4,
                         sweep_options={"range_ratio": args.range_ratio} if args.range_ratio < 1 else {})
    base_cfg = ServerConfig.load(cfg_path)

    def timed_measure(folder: Path):
        def measure(changes, phase, extra=()):
            plan.need(1, 0)
            started = time.monotonic()
            # a lever searched in turn asks for its phase by its path under the folder (lever-1-FIELD/tune-2)
            sub, _, name = phase.rpartition("/")
            inner = tune.search.default_measure(base_cfg, backend=args.backend, run_dir=folder / sub, workload=load,
                                                model=args.model, ready_timeout=420)
            out = inner(changes, name, extra)
            plan.state["launches"].append({"step": f"{folder.name}/{phase}", "changes": changes,
                                           "seconds": round(time.monotonic() - started, 1)})
            plan.save()
            return out
        return measure

    code = 0
    for step in args.steps.split(","):
        if step in plan.state["done"]:
            continue
        started = time.monotonic()
        try:
            if step == "baseline":
                notebooks([1, 2, 3], 1)
            elif step == "predict":
                if args.settle:
                    settle(kept)
                predict(kept, "graphs-kept")
                predict(seed_fix, "seed-fix")
            elif step == "predict-next":
                predict(glm5_fix, "glm5-fix")
                predict(frontend, "frontend")
            elif step == "glm5-fix":
                notebooks([4], 1, FIX_CHANGES=glm5_fix, PHASE="glm5-fix")
            elif step == "frontend":
                notebooks([4], 1, FIX_CHANGES=frontend, PHASE="frontend")
            elif step == "fix":
                notebooks([4], 1, FIX_CHANGES=kept, PHASE="fix")
            elif step == "fix-graphs-off":
                notebooks([4], 1, FIX_CHANGES=seed_fix, PHASE="fix-graphs-off")
            elif step == "next":
                try:
                    notebooks([5], 0, PHASE=args.next_phase)
                except NotebookFailedError as exc:
                    log.warning("notebook 05 did not complete: %s", exc)
            elif step == "grid":
                values = [int(v) for v in args.grid.split(",")]
                result = tune.grid(base_cfg, run / "grid", goal, load, backend=args.backend,
                                   levers=args.lever.split(",")[:1], values=values,
                                   measure=timed_measure(run / "grid"))
                print(result.candidates.to_string())
            elif step == "tune":
                levers = args.lever.split(",")
                first = None
                if args.evidence:  # a phase already measured at this load: the first point, at no launch
                    first = "evidence"
                    if not (run / "tune" / first).exists():
                        shutil.copytree(args.evidence, run / "tune" / first)
                if len(levers) > 1:  # each lever's phases in a folder of its own (lever-N-FIELD/tune-K), timed
                    result = tune.tune_in_turn(base_cfg, run / "tune", goal, load, levers=levers, backend=args.backend,
                                               max_launches=args.max_launches, evidence_phase=first,
                                               measure=timed_measure(run / "tune"))
                else:
                    result = tune.tune(base_cfg, run / "tune", goal, load, backend=args.backend, levers=levers,
                                       max_launches=args.max_launches, evidence_phase=first,
                                       measure=timed_measure(run / "tune"))
                data = result.to_dict()
                if result.best is not None:
                    data["recheck"] = tune.search.recheck(base_cfg, run / "tune", goal, load, result,
                                                          backend=args.backend, measure=timed_measure(run / "tune"))
                (run / "tune" / rundir.TUNE_RESULT).write_text(json.dumps(data, indent=2, default=str) + "\n")
            elif step.startswith("phase:"):
                # one more change, forecast from the baseline and then measured as its own phase
                name = step.split(":", 1)[1]
                changes = json.loads(args.phase_changes)
                if changes and all(isinstance(v, dict) for v in changes.values()):  # {"NAME": {...}, ...}
                    if name not in changes:
                        raise SystemExit(f"--phase-changes names {', '.join(changes)}, not {name!r}")
                    changes = changes[name]
                if args.settle:
                    settle(changes)
                predict(changes, name)
                notebooks([4], 1, FIX_CHANGES=changes, PHASE=name)
            else:
                raise SystemExit(f"unknown step {step!r}; the plan has {', '.join(STEPS)} and phase:NAME")
        except OutOfTime as exc:
            log.info("stopping before %s: %s (the next call goes on from there)", step, exc)
            code = 3
            break
        except NotebookFailedError as exc:
            log.error("%s failed: %s", step, exc)
            plan.state.setdefault("failed", {})[step] = str(exc)[-2000:]
            plan.save()
            code = 1
            break
        plan.done(step, started)
        log.info("step %s done in %.0f s; %.0f s left", step, time.monotonic() - started, plan.left())
    print(json.dumps({"done": list(plan.state["done"]), "left_s": round(plan.left())}))
    return code


if __name__ == "__main__":
    sys.exit(main())
