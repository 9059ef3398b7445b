"""Forecast error of the performance model on recorded before/after pairs.

    python benchmarks/bench_predict.py                        # the shipped pairs
    python benchmarks/bench_predict.py --standin              # + the stand-in's story, measured now
    python benchmarks/bench_predict.py --pair RUN_DIR '{"max_num_seqs": 256}'   # + any run folder
    python benchmarks/bench_predict.py --record-vllm OUT --baseline-set max_num_seqs=4 \\
        --fix-set max_num_seqs=256 --cpus split --profile-batches 16,64   # record a real vLLM pair first

For each pair the model is fitted on the baseline phase ALONE (and the engine's offline step
benchmark of it, where the pair recorded one), told the change, and its forecast at every level the
fix measured is set beside the measurement: error (predicted / measured - 1), the band's half-width,
whether the forecast was given (band within +/-30%) and whether the measured level held its batch.
The summary gives, per engine, the median and worst absolute error over the levels whose forecast
was given and whose batch held, and how many were not forecast (a model that withholds everything
scores no error: count both); and the mean TTFT forecast's median and worst absolute error against the
level's mean TTFT, over every level beyond one request.

Shipped pairs (``data/examples``): real SGLang 0.5.16 on one H200, cap 64 -> 1,024 with CUDA graphs
kept and with the seed's graphs-off fix (``h200-sglang``, phases ``fix`` and ``fix-graphs-off``),
and every cap of its grid (``grid/grid-2``... at 256 concurrent requests) forecast from the same cap-64
baseline; real SGLang 0.5.16 on one H100, glm5lib's fix (cap and graph ceiling 1,024) from its cap-64
baseline and the step benchmark taken before the fix's launch (``h100-sglang-next``, ``glm5-fix``); real SGLang
0.5.16 on one H100, cap 16 -> 256 under 1,024-token prompts, graphs kept and off, with the graph and eager
steps its notebooks benchmarked (``h100-sglang-cap16``); real SGLang 0.5.16 on one H200 whose KV pool was
set by hand, raised from 16,384 to 262,144 and to 65,536 tokens, and its admission reserve lowered
(``h200-sglang-kv``); real SGLang 0.5.16 on one H100 whose prefill chunk of 256 tokens was raised to 512,
1,024 and 8,192 under 1,024-token prompts (``h100-sglang-chunk``), and of 512 raised to 2,048 and 8,192 under
2,048-token prompts (``h100-sglang-chunk-long``), and of 512 raised to 2,048, 4,096 and 8,192 under 4,096-token
prompts and 64-token outputs (``h100-sglang-chunk-4k``, forecast on the GPU host before each launch), and
of 1,024 raised to 4,096 under 3,072-token prompts and 128-token outputs (``h100-sglang-chunk-3k``, the same): each
forecast from its baseline and SGLang's benchmark of prefill forwards of two sizes (``baseline/step-profile.csv``);
a cap of 32 raised to 256 under a 512-token chunk, alone and with the chunk raised to 4,096, 2,048-token prompts
(``h100-sglang-cap-chunk``; its measured figures are windows that ended mid-cycle, 6-18% above the cycle rate at
64 and 128: its README); real vLLM 0.32 on CPU, ``--max-num-seqs 4 -> 256`` (``cpu-vllm``, the workbook's example,
whose two launches ran 0.8x and 2x apart at the batches the change leaves alone);
``transformers serve`` on one H200, ``--cb-max-batch-tokens 64`` removed
(``h200-transformers-serve``); recorded vLLM pairs under ``data/examples/predict-pairs/*`` (each with
its ``pair.json``). ``--standin`` measures the workbook's story on the stand-in with the project's own
launch and sweep code (its forecast runs on the stand-in's own step benchmark, so it checks the
plumbing, not the model). Measured figures move with whatever else shares the machine.
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
from glm5lib.stepbench import take_step_profile

EXAMPLES = data_dir() / "examples"
STORY_CHANGES = {"max_running_requests": 1024, "disable_cuda_graph": True, "disable_radix_cache": True}
FRONTEND_CHANGES = {"max_running_requests": 1024, "cuda_graph_max_bs": 1024, "tokenizer_worker_num": 4,
                    "stream_interval": 4}
# (title, run folder, change, the phase that measured it[, the phase forecast from: "baseline" if not named])
SHIPPED = [
    ("real vLLM 0.32 on CPU, --max-num-seqs 4 -> 256 (the workbook's example)", EXAMPLES / "cpu-vllm",
     {"max_num_seqs": 256}, "fix"),
    ("transformers serve on 1x H200, --cb-max-batch-tokens 64 removed",
     EXAMPLES / "h200-transformers-serve", {"--cb-max-batch-tokens": None}, "fix"),
    ("real SGLang 0.5.16 on 1x H200, cap 64 -> 1,024, CUDA graphs kept",
     EXAMPLES / "h200-sglang", {"max_running_requests": 1024}, "fix"),
    ("real SGLang 0.5.16 on 1x H200, cap 64 -> 1,024, graphs and radix cache off (the seed's fix)",
     EXAMPLES / "h200-sglang", STORY_CHANGES, "fix-graphs-off"),
    ("real SGLang 0.5.16 on 1x H100, cap 64 -> 1,024 with the graph ceiling at 1,024 (glm5lib's fix)",
     EXAMPLES / "h100-sglang-next", {"max_running_requests": 1024, "cuda_graph_max_bs": 1024}, "glm5-fix"),
    ("real SGLang 0.5.16 on 1x H100, the front-end remedy (4 tokenizer workers, stream interval 4) on glm5lib's fix, "
     "from the cap-64 baseline", EXAMPLES / "h100-sglang-next", FRONTEND_CHANGES, "frontend"),
    ("real SGLang 0.5.16 on 1x H100, the front-end remedy on glm5lib's fix, from the fix",
     EXAMPLES / "h100-sglang-next", FRONTEND_CHANGES, "frontend", "glm5-fix"),
    ("real SGLang 0.5.16 on 1x H100, cap 16 -> 256, 1,024-token prompts", EXAMPLES / "h100-sglang-cap16",
     {"max_running_requests": 256}, "fix"),
    ("real SGLang 0.5.16 on 1x H100, cap 16 -> 256 with graphs and radix cache off, 1,024-token prompts",
     EXAMPLES / "h100-sglang-cap16", {**STORY_CHANGES, "max_running_requests": 256}, "fix-graphs-off"),
    ("real SGLang 0.5.16 on 1x H200, KV pool 16,384 -> 262,144 tokens (--max-total-tokens), cap 256",
     EXAMPLES / "h200-sglang-kv", {"max_total_tokens": 262144}, "fix"),
    ("real SGLang 0.5.16 on 1x H200, KV pool 16,384 -> 65,536 tokens, cap 256", EXAMPLES / "h200-sglang-kv",
     {"max_total_tokens": 65536}, "pool-64k"),
    ("real SGLang 0.5.16 on 1x H200, KV-bound, --schedule-conservativeness 1.0 -> 0.3", EXAMPLES / "h200-sglang-kv",
     {"schedule_conservativeness": 0.3}, "glm5-fix"),
    *[(f"real SGLang 0.5.16 on 1x H100, prefill chunk {base} -> {chunk:,} ({prompts})", EXAMPLES / run,
       {"chunked_prefill_size": chunk}, phase)
      for run, base, prompts, phases in [
          ("h100-sglang-chunk", 256, "1,024-token prompts", {8192: "chunk-8k", 1024: "chunk-1k", 512: "chunk-512"}),
          ("h100-sglang-chunk-long", 512, "2,048-token prompts", {2048: "chunk-2k", 8192: "chunk-8k"}),
          ("h100-sglang-chunk-4k", 512, "4,096-token prompts, 64-token outputs",
           {2048: "chunk-2k", 4096: "chunk-4k", 8192: "chunk-8k"}),
          ("h100-sglang-chunk-3k", 1024, "3,072-token prompts, 128-token outputs", {4096: "chunk-4k"})]
      for chunk, phase in phases.items()],
    ("real SGLang 0.5.16 on 1x H100, cap 32 -> 256 under a 512-token chunk (2,048-token prompts; measured: windows "
     "that ended mid-cycle, the cycle rate within 3% of the forecast: its README)",
     EXAMPLES / "h100-sglang-cap-chunk", {"max_running_requests": 256}, "cap-256"),
    ("real SGLang 0.5.16 on 1x H100, cap 32 -> 256 and chunk 512 -> 4,096 at once (2,048-token prompts; measured: "
     "windows that ended mid-cycle, 6-16% above the cycle rate)",
     EXAMPLES / "h100-sglang-cap-chunk", {"max_running_requests": 256, "chunked_prefill_size": 4096}, "both"),
]


def grid_pairs() -> list[tuple[str, Path, dict[str, Any], str]]:
    """Each cap of the H200 grid, forecast from the cap-64 baseline (the grid's first point is the
    baseline's own cap)."""
    grid = EXAMPLES / "h200-sglang" / "grid" / rundir.TUNE_CSV
    if not grid.is_file():
        return []
    out = []
    for _, row in pd.read_csv(grid).sort_values("value").iterrows():
        if int(row["value"]) == 64:
            continue
        out.append((f"real SGLang 0.5.16 on 1x H200, grid cap {int(row['value'])} at 256 (from cap 64)",
                    EXAMPLES / "h200-sglang", {"max_running_requests": int(row["value"])}, f"grid/{row['phase']}"))
    return out


def _engine_of(title: str) -> str:
    return title.split(" on ")[0].replace("real ", "")


def recorded_pairs() -> list[tuple[str, Path, dict[str, Any]]]:
    out = []
    for meta in sorted((EXAMPLES / "predict-pairs").glob("*/pair.json")):
        info = json.loads(meta.read_text())
        out.append((info["title"], meta.parent, dict(info["changes"]), "fix"))
    return out


def evaluate(title: str, run: Path, changes: dict[str, Any], phase: str = "fix", baseline: str = "baseline") -> pd.DataFrame:
    frame = prediction.record_prediction(run, changes, baseline=baseline, phase=phase, write=False)
    print(f"\n== {title}\n   {run} ({baseline} -> {phase})\n   change: {changes}\n   model: {frame.attrs['model']}")
    frame["band"] = [max(h / p - 1.0, 1.0 - lo / p) if p else float("nan")
                     for p, lo, h in zip(frame["predicted"], frame["low"], frame["high"], strict=True)]
    cols = ["concurrency", "predicted", "low", "high", "band", "given", "measured", "error", "inside_band", "held",
            "drift", "running", "binding_limit", "tpot_predicted_ms", "tpot_measured_ms"]
    shown = frame[cols].rename(columns={"tpot_predicted_ms": "tpot_pred", "tpot_measured_ms": "tpot_meas"})
    print(shown.round({"predicted": 0, "low": 0, "high": 0, "band": 2, "measured": 0, "error": 3, "running": 1,
                       "tpot_pred": 1, "tpot_meas": 1}).to_string(index=False))
    for _, r in frame.iterrows():
        if not bool(r["given"]) and isinstance(r.get("needs"), str) and r["needs"]:
            print(f"   not forecast at {int(r['concurrency'])}: {r['needs'][:240]}")
    frame.attrs["title"] = title
    return frame


def _abs(part: pd.DataFrame, how: str) -> str:
    """The TTFT forecast's absolute error over ``part``'s levels beyond one request (``how``: median or max)."""
    errors = part.loc[part["concurrency"] > 1, "ttft_error"].dropna().abs()
    return f"{getattr(errors, how)():.0%}" if len(errors) else "-"


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
                cpus: str | None = None, profile_batches: list[int] | None = None) -> Path:
    from glm5lib import engines
    from glm5lib.engines import vllm as ev

    config = engines.load_config("vllm-capped").with_changes(**baseline_set)
    kw = {"concurrencies": levels, "api": "completions", "input_len": 32, "output_len": 64, "duration": duration,
          "warmup": 2, "sweep_options": {"token_ids": False}, "progress": False, "gpu": False, "cpus": cpus}
    measure.measure_phase(config, out, "baseline", backend="vllm", ready_timeout=600, **kw)
    if profile_batches:
        # the engine's offline step benchmark of the baseline, taken before the fix is launched
        take_step_profile(out, "baseline", profile_batches)
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
        "step_profile": ({"batches": profile_batches, "how": "glm5lib.stepbench.take_step_profile on the baseline, "
                          "after its sweep and before the fix's launch"} if profile_batches else None),
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
    p.add_argument("--profile-batches", help="take the engine's offline step benchmark of the recorded baseline at "
                                             "these batch sizes (and its own) before the fix's launch, e.g. 16,64")
    args = p.parse_args(argv)

    pairs = [*SHIPPED, *grid_pairs(), *recorded_pairs()]
    if args.record_vllm:
        out = record_vllm(Path(args.record_vllm), _sets(args.baseline_set), _sets(args.fix_set),
                          [int(x) for x in args.vllm_levels.split(",")], args.duration, args.title,
                          [int(x) for x in args.fix_levels.split(",")] if args.fix_levels else None, args.cpus,
                          [int(x) for x in args.profile_batches.split(",")] if args.profile_batches else None)
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
    levels = []
    for title, run, changes, phase, *source in pairs:
        frame = evaluate(title, run, changes, phase, *source)
        for _, r in frame.dropna(subset=["measured"]).iterrows():
            held = r.get("held")
            levels.append({"engine": _engine_of(title), "pair": title[:70], "concurrency": int(r["concurrency"]),
                           "error": float(r["error"]), "band": float(r["band"]), "given": bool(r["given"]),
                           "held": None if held is None or pd.isna(held) else bool(held),
                           "inside_band": bool(r["inside_band"]),
                           "net_error": None if pd.isna(r["error_net_of_drift"]) else float(r["error_net_of_drift"]),
                           "ttft_error": float(r["ttft_predicted_ms"] / r["ttft_measured_ms"] - 1.0)
                           if pd.notna(r.get("ttft_predicted_ms")) and pd.notna(r.get("ttft_measured_ms"))
                           and r["ttft_measured_ms"] > 0 else None})
    table = pd.DataFrame(levels)
    print("\n== forecast error per pair and level (error: predicted / measured - 1; band: half-width)")
    shown = table.assign(error=table["error"].map(lambda e: f"{e:+.0%}"), band=table["band"].map(lambda b: f"{b:.0%}"),
                         net_error=table["net_error"].map(lambda e: "-" if e is None or pd.isna(e) else f"{e:+.0%}"),
                         ttft_error=table["ttft_error"].map(lambda e: "-" if e is None or pd.isna(e) else f"{e:+.0%}"))
    print(shown.drop(columns=["engine"]).to_string(index=False))
    print("\n== per engine, over the levels whose forecast was given and whose batch held")
    summary = []
    for engine, part in table.groupby("engine", sort=False):
        judged = part[part["given"] & (part["held"] != False)]  # noqa: E712 - None (unknown) counts
        summary.append({
            "engine": engine, "levels": len(part), "given": int(part["given"].sum()),
            "not_forecast": int((~part["given"]).sum()),
            "median_abs_error": f"{judged['error'].abs().median():.0%}" if len(judged) else "-",
            "worst_abs_error": f"{judged['error'].abs().max():.0%}" if len(judged) else "-",
            "inside_band": f"{int(judged['inside_band'].sum())}/{len(judged)}",
            "widest_given_band": f"{part[part['given']]['band'].max():.0%}" if part["given"].any() else "-",
            # the mean TTFT forecast against the level's mean, over every level beyond one request
            "ttft_median_abs_error": _abs(part, "median"), "ttft_worst_abs_error": _abs(part, "max"),
        })
    print(pd.DataFrame(summary).to_string(index=False))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
