"""Forecast error of the performance model on recorded before/after pairs.

    python benchmarks/bench_predict.py                        # the shipped pairs
    python benchmarks/bench_predict.py --standin              # + the stand-in's story, measured now
    python benchmarks/bench_predict.py --pair RUN_DIR '{"max_num_seqs": 256}'   # + any run folder
    python benchmarks/bench_predict.py --record-vllm OUT --baseline-set max_num_batched_tokens=32 \\
        --fix-set max_num_batched_tokens=2048                 # record a real vLLM pair first

For each pair the model is fitted on the baseline phase ALONE, told the change, and its forecast
at every level the fix measured is set beside the measurement: error (predicted / measured - 1)
and whether the measurement fell inside the band. The headline per pair is the top level.

Shipped pairs (``data/examples``): real vLLM 0.32 on CPU, ``--max-num-seqs 4 -> 256``
(``cpu-vllm``); ``transformers serve`` on one H200, ``--cb-max-batch-tokens 64`` removed
(``h200-transformers-serve``, no scheduler log: the batch is inferred from the limits); real SGLang
0.5.16 on one H200, cap 64 -> 1,024 with CUDA graphs kept and with the seed's graphs-off fix
(``h200-sglang``, phases ``fix`` and ``fix-graphs-off``); recorded
vLLM pairs under ``data/examples/predict-pairs/*`` (each with its ``pair.json``: the change, the
date and the versions). ``--standin`` measures the workbook's story on the stand-in (cap 64 ->
1,024, CUDA graphs and radix cache off) with the project's own launch and sweep code; ``--levels``
and ``--duration`` shorten it. Measured figures move with whatever else shares the machine.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import phase as measure
from glm5lib import rundir
from glm5lib.cli.predict import parse_value
from glm5lib.diagnose import prediction
from glm5lib.paths import data_dir

EXAMPLES = data_dir() / "examples"
STORY_CHANGES = {"max_running_requests": 1024, "disable_cuda_graph": True, "disable_radix_cache": True}
# (title, run folder, change, the phase that measured it); the baseline phase is "baseline"
SHIPPED = [
    ("real vLLM 0.32 on CPU, --max-num-seqs 4 -> 256", EXAMPLES / "cpu-vllm", {"max_num_seqs": 256}, "fix"),
    ("transformers serve on 1x H200, --cb-max-batch-tokens 64 removed",
     EXAMPLES / "h200-transformers-serve", {"--cb-max-batch-tokens": None}, "fix"),
    ("real SGLang 0.5.16 on 1x H200, cap 64 -> 1,024, CUDA graphs kept",
     EXAMPLES / "h200-sglang", {"max_running_requests": 1024}, "fix"),
    ("real SGLang 0.5.16 on 1x H200, cap 64 -> 1,024, graphs and radix cache off (the seed's fix)",
     EXAMPLES / "h200-sglang", STORY_CHANGES, "fix-graphs-off"),
]


def recorded_pairs() -> list[tuple[str, Path, dict[str, Any]]]:
    out = []
    for meta in sorted((EXAMPLES / "predict-pairs").glob("*/pair.json")):
        info = json.loads(meta.read_text())
        out.append((info["title"], meta.parent, dict(info["changes"]), "fix"))
    return out


def evaluate(title: str, run: Path, changes: dict[str, Any], phase: str = "fix") -> pd.DataFrame:
    frame = prediction.record_prediction(run, changes, phase=phase, write=False)
    print(f"\n== {title}\n   {run} ({phase})\n   change: {changes}\n   model: {frame.attrs['model']}")
    cols = ["concurrency", "predicted", "low", "high", "measured", "error", "inside_band", "drift", "running", "binding_limit",
            "ttft_predicted_ms", "ttft_measured_ms", "tpot_predicted_ms", "tpot_measured_ms"]
    shown = frame[cols].rename(columns={"ttft_predicted_ms": "ttft_pred", "ttft_measured_ms": "ttft_meas",
                                        "tpot_predicted_ms": "tpot_pred", "tpot_measured_ms": "tpot_meas"})
    print(shown.round({"predicted": 0, "low": 0, "high": 0, "measured": 0, "error": 3, "running": 1, "ttft_pred": 0,
                       "ttft_meas": 0, "tpot_pred": 1, "tpot_meas": 1}).to_string(index=False))
    unseen = frame["unseen_changes"].dropna()
    if len(unseen) and unseen.iloc[0]:
        print(f"   not seen by the model: {unseen.iloc[0]}")
    frame.attrs["title"] = title
    return frame


def _sets(items: list[str]) -> dict[str, Any]:
    out = {}
    for item in items or []:
        key, _, value = item.partition("=")
        out[key.strip()] = parse_value(value.strip())
    return out


def measure_standin(out: Path, levels: list[int], duration: float, output_len: int, fix_duration: float) -> Path:
    from glm5lib.engines.sglang.config import ServerConfig

    base = ServerConfig.load("glm5-baseline")
    kw = {"concurrencies": levels, "input_len": 256, "output_len": output_len,
          "warmup": 2, "progress": False, "gpu": False, "metrics": False}
    measure.measure_phase(base, out, "baseline", backend="sim", duration=duration, **kw)
    # the workbook's fix levels are longer: 1,024 uncapped prompts take ~11 s to prefill
    measure.measure_phase(base.with_changes(**STORY_CHANGES), out, "fix", backend="sim", duration=fix_duration, **kw)
    return out


def record_vllm(out: Path, baseline_set: dict[str, Any], fix_set: dict[str, Any], levels: list[int],
                duration: float, title: str | None, fix_levels: list[int] | None = None,
                cpus: str | None = None) -> Path:
    from glm5lib import engines
    from glm5lib.engines import vllm as ev

    config = engines.load_config("vllm-capped").with_changes(**baseline_set)
    kw = {"concurrencies": levels, "api": "completions", "input_len": 32, "output_len": 64, "duration": duration,
          "warmup": 2, "sweep_options": {"token_ids": False}, "progress": False, "gpu": False, "cpus": cpus}
    measure.measure_phase(config, out, "baseline", backend="vllm", ready_timeout=600, **kw)
    kw["concurrencies"] = fix_levels or levels
    measure.measure_phase(config.with_changes(**fix_set), out, "fix", backend="vllm", ready_timeout=600, **kw)
    version = None
    try:
        import subprocess

        version = subprocess.run([ev.vllm_python(), "-c", "import vllm; print(vllm.__version__)"],
                                 capture_output=True, text=True, check=False, timeout=120).stdout.strip() or None
    except OSError:
        pass
    (out / "pair.json").write_text(json.dumps({
        "title": title or f"real vLLM on CPU, {baseline_set} -> {fix_set}",
        "changes": fix_set,
        "baseline_set": baseline_set,
        "recorded": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "vllm_version": version,
        "python": platform.python_version(),
        "machine": (f"{platform.machine()}, {os.cpu_count()} cores, CPU layout {cpus!r}" if cpus else
                    f"{platform.machine()}, shared cores: figures move by tens of percent between runs"),
        "levels": {"baseline": levels, "fix": fix_levels or levels},
        "level_duration_s": duration,
    }, indent=2) + "\n")
    for ph in ("baseline", "fix"):  # keep what the model reads; drop bulky per-request records
        (out / ph / rundir.REQUESTS).unlink(missing_ok=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--standin", action="store_true", help="measure the stand-in's story now and add it")
    p.add_argument("--levels", default="1,64,256,1024", help="stand-in levels (default: the workbook's)")
    p.add_argument("--duration", type=float, default=12.0, help="seconds per measured level (the workbook's baseline)")
    p.add_argument("--fix-duration", type=float, default=15.0, help="seconds per stand-in fix level (the workbook's)")
    p.add_argument("--output-len", type=int, default=256, help="stand-in output tokens per request")
    p.add_argument("--pair", nargs=2, action="append", metavar=("RUN_DIR", "CHANGES_JSON"), default=[],
                   help="another run folder with baseline/ and fix/, and the change between them")
    p.add_argument("--record-vllm", metavar="OUT", help="record a real vLLM pair into OUT first")
    p.add_argument("--baseline-set", action="append", default=[], metavar="FIELD=VALUE")
    p.add_argument("--fix-set", action="append", default=[], metavar="FIELD=VALUE")
    p.add_argument("--vllm-levels", default="1,4,16,64")
    p.add_argument("--fix-levels", help="levels of the recorded fix phase (default: --vllm-levels)")
    p.add_argument("--title", help="title of a recorded vLLM pair")
    p.add_argument("--cpus", default=None, help="CPU layout of a recorded vLLM pair (glm5lib.cpus: 'split', '0-5/6,7')")
    args = p.parse_args(argv)

    pairs = [*SHIPPED, *recorded_pairs()]
    if args.record_vllm:
        out = record_vllm(Path(args.record_vllm), _sets(args.baseline_set), _sets(args.fix_set),
                          [int(x) for x in args.vllm_levels.split(",")], args.duration, args.title,
                          [int(x) for x in args.fix_levels.split(",")] if args.fix_levels else None, args.cpus)
        info = json.loads((out / "pair.json").read_text())
        pairs.append((info["title"], out, info["changes"], "fix"))
    for run_dir, changes in args.pair:
        pairs.append((f"run folder {run_dir}", Path(run_dir), json.loads(changes), "fix"))
    tmp = None
    if args.standin:
        tmp = tempfile.TemporaryDirectory(prefix="bench-predict-")
        levels = [int(x) for x in args.levels.split(",")]
        run = measure_standin(Path(tmp.name), levels, args.duration, args.output_len, args.fix_duration)
        pairs.append((f"stand-in story, cap 64 -> 1,024, graphs and radix cache off (output {args.output_len})",
                      run, STORY_CHANGES, "fix"))
    rows = []
    levels = []
    for title, run, changes, phase in pairs:
        frame = evaluate(title, run, changes, phase)
        for _, r in frame.dropna(subset=["measured"]).iterrows():
            levels.append({"pair": title[:60], "concurrency": int(r["concurrency"]), "error": f"{r['error']:+.0%}",
                           "inside_band": bool(r["inside_band"]), "running": r["running"]})
        top = frame.dropna(subset=["measured"]).iloc[-1]
        rows.append({"pair": title, "concurrency": int(top["concurrency"]), "predicted": round(top["predicted"]),
                     "band": f"{top['low']:,.0f}-{top['high']:,.0f}", "measured": round(top["measured"]),
                     "error": f"{top['error']:+.0%}", "inside_band": bool(top["inside_band"]),
                     # the launches' own movement at the levels the change left alone, and the
                     # error net of it (prediction.launch_drift)
                     "drift": "-" if pd.isna(top["drift"]) else f"{top['drift']:.2f}x",
                     "net_error": "-" if pd.isna(top["error_net_of_drift"]) else f"{top['error_net_of_drift']:+.0%}"})
    print("\n== forecast error per pair and level")
    print(pd.DataFrame(levels).to_string(index=False))
    print("\n== forecast error at each pair's top level")
    print(pd.DataFrame(rows).to_string(index=False))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
