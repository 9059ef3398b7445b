"""Run the workbook headless against a real engine: baseline = the engine's capped setting,
fix = its uncapped setting, with GPU telemetry; then pack the run folder.

    PYTHONPATH=. python3 scripts/gpu/run_engine_workbook.py --engine transformers-serve \
        --model /tmp/tinymoe --run-dir data/runs/h200-transformers --archive $OUT/run.tar.gz

Notebooks 01 (environment), 02 (baseline, the preset's "capped" flags in ENGINE_COMMAND) and 04
(fix, the preset's "uncapped" flag changes as FIX_CHANGES) run through ``glm5lib.workbook``;
05 (next bottleneck) runs after them and may fail for engines that do not log SGLang's scheduler
lines (the run keeps what 01-04 produced). ``engine.json`` beside the report records the engine,
its version, the model, the GPU and both commands.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import logging
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from glm5lib import engines, rundir, server, workbook  # noqa: E402
from glm5lib.errors import NotebookFailedError  # noqa: E402

log = logging.getLogger("run_engine_workbook")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _gpus() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,power.limit,memory.total", "--format=csv,noheader"],
                          capture_output=True, text=True, timeout=30)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def _model_facts(model: str) -> dict:
    path = Path(model)
    facts: dict = {"path": model}
    config = path / "config.json"
    if config.exists():
        data = json.loads(config.read_text())
        facts.update({k: data.get(k) for k in ("architectures", "model_type", "hidden_size", "num_hidden_layers",
                                                "num_experts", "num_experts_per_tok", "vocab_size", "torch_dtype", "dtype")
                      if data.get(k) is not None})
    weights = sum(p.stat().st_size for p in path.glob("*.safetensors")) if path.is_dir() else 0
    if weights:
        facts["weights_bytes"] = weights
    return facts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="transformers-serve", help="preset name in glm5lib.engines")
    ap.add_argument("--model", default="", help="model path or id for {model}")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--concurrencies", default="1,16,64,256")
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--ready-timeout", type=float, default=300.0)
    ap.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE",
                    help="flag change on the capped command, e.g. --set=--cb-num-blocks=512 (repeatable)")
    ap.add_argument("--command", help="JSON argv template replacing the preset's (an engine without a preset)")
    ap.add_argument("--capped", help="JSON flag changes replacing the preset's capped setting")
    ap.add_argument("--uncapped", help="JSON flag changes replacing the preset's uncapped setting")
    ap.add_argument("--archive", help="write the run folder as this .tar.gz")
    ap.add_argument("--skip", default="", help="notebooks to leave out, e.g. 5")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    engine = engines.get_engine(args.engine)
    overrides = {k: json.loads(v) for k, v in (("command", args.command), ("capped", args.capped),
                                                ("uncapped", args.uncapped)) if v}
    if overrides:
        settings = dict(engine.settings)
        settings.update({k: overrides[k] for k in ("capped", "uncapped") if k in overrides})
        engine = dataclasses.replace(engine, name=f"{engine.name} (modified)", settings=settings,
                                     command=tuple(overrides.get("command", engine.command)))
    extra = {}
    for item in args.set:
        flag, _, value = item.partition("=")
        extra[flag] = value
    capped = engine.command_for("capped", extra)
    fix_changes = engine.setting("uncapped")
    run = Path(args.run_dir).resolve()
    run.mkdir(parents=True, exist_ok=True)
    concurrencies = [int(c) for c in args.concurrencies.split(",")]
    params = {
        "BACKEND": "command", "ENGINE_COMMAND": capped, "MODEL_PATH": args.model, "API": engine.api,
        "FIX_CHANGES": fix_changes, "APPLY_PATCH": False, "CONCURRENCIES": concurrencies,
        "INPUT_LEN": args.input_len, "OUTPUT_LEN": args.output_len, "LEVEL_DURATION_S": args.duration,
        "REQUESTS_PER_LEVEL": 0, "READY_TIMEOUT_S": args.ready_timeout, "WARMUP_REQUESTS": 4,
        "SWEEP_OPTIONS": dict(engine.sweep_options),
    }
    manifest = {
        "engine": engine.name, "engine_description": engine.description, "knob": engine.knob,
        "baseline_command": capped, "fix_changes": fix_changes, "sweep_options": dict(engine.sweep_options),
        "fix_command": server.apply_flag_changes(capped, fix_changes),
        "versions": {d: _version(d) for d in ("transformers", "torch", "glm5lib", "vllm", "sglang")},
        "python": platform.python_version(), "host": platform.node(), "gpus": _gpus(),
        "model": _model_facts(args.model) if args.model else None,
        "workload": {"concurrencies": concurrencies, "input_len": args.input_len, "output_len": args.output_len,
                     "level_duration_s": args.duration, "api": engine.api},
        "started": time.time(),
    }
    (run / rundir.ENGINE_RECORD).write_text(json.dumps(manifest, indent=2) + "\n")
    skip = {int(n) for n in args.skip.split(",") if n.strip()}
    code = 0
    try:
        workbook.run_workbook(params, run_dir=run, only=[n for n in (1, 2, 4) if n not in skip], progress=False)
    except NotebookFailedError as exc:
        log.error("%s", exc)
        code = 1
    if code == 0 and 5 not in skip:
        try:
            workbook.run_workbook(params, run_dir=run, only=[5], progress=False)
        except NotebookFailedError as exc:
            log.warning("notebook 05 did not complete for %s: %s", engine.name, exc)
    manifest["finished"] = time.time()
    (run / rundir.ENGINE_RECORD).write_text(json.dumps(manifest, indent=2) + "\n")
    for phase in ("baseline", "fix"):
        sweep = run / phase / rundir.SWEEP
        if sweep.exists():
            print(f"--- {phase} {sweep}\n{sweep.read_text()}")
    if args.archive:
        archive = Path(args.archive)
        archive.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(run, arcname=run.name)
        print(f"archive: {archive} ({archive.stat().st_size / 1e6:.1f} MB)")
    return code


if __name__ == "__main__":
    sys.exit(main())
