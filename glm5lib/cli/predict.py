"""``glm5 predict RUN_DIR --phase P --set FIELD=VALUE --concurrency N[,M...]``: forecast a change.

The command line of :func:`glm5lib.diagnose.model.predict`: the performance model is fitted on
the named phase only and forecasts throughput, TTFT and TPOT once the engine's own fields change.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from glm5lib import rundir
from glm5lib.cli.options import add_command, settings_given
from glm5lib.errors import ConfigError, UsageError

__all__ = ["parse_concurrency", "parse_value", "register_cli"]


def parse_value(text: str) -> Any:
    """A ``--set`` value: JSON where it parses (``256``, ``true``, ``null``), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        low = text.strip().lower()
        if low in ("true", "false", "none"):
            return {"true": True, "false": False, "none": None}[low]
        return text


def _parse_set(items: list[str] | None) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for item in settings_given(items):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects FIELD=VALUE, got {item!r}", field="--set")
        changes[key.strip()] = parse_value(value.strip())
    return changes


def parse_concurrency(text: str) -> list[int]:
    """``64,256`` -> [64, 256]; every level an integer of at least 1."""
    levels = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            n = int(part)
        except ValueError:
            n = 0
        if n < 1:
            raise UsageError(
                f"--concurrency expects integers of at least 1 separated by commas (e.g. 64,256), got {text!r}",
                field="--concurrency",
            )
        levels.append(n)
    if not levels:
        raise UsageError("--concurrency: give at least one level, e.g. 64,256", field="--concurrency")
    return levels


def _fmt(x: float | None, unit: str = "") -> str:
    return "-" if x is None else f"{x:,.0f}{unit}"


def _cli_predict(args: argparse.Namespace) -> int:
    """Fit the performance model on one phase of a run folder and forecast what a change of the
    engine's own fields gives at each concurrency."""
    from pathlib import Path

    from glm5lib.diagnose.model import PerfModel

    changes = _parse_set(args.set)
    levels = parse_concurrency(args.concurrency)
    for name, value in (("--input-len", args.input_len), ("--output-len", args.output_len)):
        if value is not None and value < 1:
            raise UsageError(f"{name} must be at least 1, got {value}", field=name)
    run = Path(args.run_dir)
    if not run.is_dir():
        raise ConfigError(f"run folder {run} does not exist", field="RUN_DIR")
    phase = run / args.phase
    if not phase.is_dir():
        phases = sorted(p.name for p in run.iterdir() if (p / rundir.SWEEP).is_file())
        raise ConfigError(
            f"phase {args.phase!r} not found in {run}; phases there: {', '.join(phases) or 'none'}",
            field="--phase",
            valid=phases,
        )
    model = PerfModel.fit_phase(phase)
    _check_names(changes, model.engine)
    out = model.forecast(changes, levels, input_len=args.input_len, output_len=args.output_len)
    if args.json:
        print(json.dumps([f.to_dict() for f in out], indent=2))
        return 0
    print(model.describe())
    print(f"changes: {changes or 'none'}")
    print(f"{'concurrency':>11} {'tok/s':>9} {'band':>17} {'running':>8} {'binds':>12} {'TTFT ms':>9} {'TPOT ms':>8}")
    for f in out:
        band = f"{_fmt(f.low_tok_s)}-{_fmt(f.high_tok_s)}"
        figure = _fmt(f.predicted_tok_s) if f.given else f"({_fmt(f.predicted_tok_s)})"
        print(
            f"{f.concurrency:>11} {figure:>9} {band:>17} {f.running:>8.0f} "
            f"{f.binding_limit:>12} {_fmt(f.ttft_ms):>9} {(f'{f.tpot_ms:.1f}' if f.tpot_ms else '-'):>8}"
            + ("" if f.given else "  not forecast") + ("  (extrapolated)" if f.extrapolated else "")
        )
    for note in out[0].unseen_changes if out else []:
        print(f"no term for: {note}")
    for note in out[0].notes if out else []:
        print(f"note: {note}")
    for f in out:
        if not f.given:
            why = "a changed field has no term" if f.unseen_changes else "the band passes +/-30%"
            print(f"not forecast at {f.concurrency} ({why}): to settle it, measure {f.needs}")
    return 0


def _check_names(changes: dict[str, Any], engine: str) -> None:
    """Refuse a name that is neither a limit, a field the engine's adapter translates, nor unlike a
    limit's name (``runing_cap``: did you mean ``running_cap``?), before anything is forecast."""
    import difflib

    from glm5lib import engines

    adapter = engines.get(engine, default=engines.COMMAND)
    roles = {r.workers_field for r in adapter.capabilities.serving_roles if r.workers_field}
    for name in changes:
        key = str(name).lstrip("-").replace("-", "_")
        value = changes[name]
        found, _ = engines.limit_changes({name: value}, adapter)
        unreadable = [limit for limit, got in found.items()
                      if (got is None and value is not None)
                      or (limit == "graphs_off" and isinstance(value, str)
                          and value.strip().lower() not in ("true", "false", "1", "0", "yes", "no"))]
        if unreadable:
            limit = unreadable[0]
            kind = "true or false" if limit == "graphs_off" else "a positive number"
            raise UsageError(f"--set {name}={value!r}: {limit} takes {kind} "
                             f"(e.g. --set {name}={'true' if limit == 'graphs_off' else 256}), or none to unset it",
                             field="--set")
        if found or key in roles:
            continue
        close = difflib.get_close_matches(key, [*engines.LIMITS, *adapter.capabilities.fields.values(), *roles],
                                          n=3, cutoff=0.8)
        if close and key not in close:
            raise UsageError(f"--set {name}: not a limit or a field of {adapter.title}; did you mean "
                             f"{' or '.join(close)}? (limits: {', '.join(engines.LIMITS)})", field="--set",
                             valid=list(engines.LIMITS))


def register_cli(subparsers: Any) -> None:
    """Add ``glm5 predict`` and ``glm5 profile``."""
    register_profile_cli(subparsers)
    p = add_command(subparsers, "predict", _cli_predict,
                    help="forecast throughput, TTFT and TPOT after a config change, from one measured phase")
    _add_phase(p, "the phase folder to fit on (baseline, fix, ...)")
    p.add_argument(
        "--set",
        action="append",
        metavar="FIELD=VALUE",
        help="a limit to change by its neutral name (running_cap=256, token_budget=8192, kv_tokens, "
             "kv_fraction, graph_max_batch, graphs_off, prefill_chunk, frontend_workers, stream_interval) or the "
             "engine's own field (repeatable)",
    )
    p.add_argument("--concurrency", required=True, metavar="N[,M...]", help="offered concurrency levels")
    _add_lengths(p)
    p.add_argument("--json", action="store_true", help="print a list of forecast objects as JSON")


def _add_phase(parser: argparse.ArgumentParser, phase_help: str) -> None:
    """``RUN_DIR --phase P``: the measured phase a command reads."""
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run folder")
    parser.add_argument("--phase", required=True, help=phase_help)


def _add_lengths(parser: argparse.ArgumentParser) -> None:
    """``--input-len`` and ``--output-len``, the phase's own where left out."""
    parser.add_argument("--input-len", type=int, help="prompt tokens per request (default: the phase's)")
    parser.add_argument("--output-len", type=int, help="output tokens per request (default: the phase's)")


def _cli_profile(args: argparse.Namespace) -> int:
    """Run the phase's engine's own offline step benchmark (SGLang's bench_one_batch, vLLM's offline
    engine, the stand-in's imitation) with the phase's configuration, at the phase's own batch sizes
    and those given, and write step-profile.csv into the phase folder: the evidence a forecast
    beyond the phase's batches, or of CUDA graphs switched off, needs."""
    from glm5lib.stepbench import take_step_profile

    graphs = {"as-run": None, "off": True, "on": False}[args.graphs]
    path = take_step_profile(args.run_dir, args.phase, [int(b) for b in args.batch_size or []], graphs_off=graphs,
                             input_len=args.input_len, output_len=args.output_len, timeout=args.timeout)
    import pandas as pd

    frame = pd.read_csv(path)
    print(f"wrote {path} (the benchmark's own output beside it: {path.with_name(rundir.STEP_PROFILE_LOG)})")
    print(frame[["batch", "step_ms", "prefill_ms", "graphs"]].to_string(index=False))
    print(f"the performance model of {args.phase} now reads it: glm5 predict {args.run_dir} --phase {args.phase} ...")
    return 0


def register_profile_cli(subparsers: Any) -> None:
    """Add ``glm5 profile``."""
    p = add_command(subparsers, "profile", _cli_profile,
                    help="time one engine step at chosen batch sizes with the engine's offline benchmark (one launch, no HTTP)")
    _add_phase(p, "the phase whose configuration to benchmark")
    p.add_argument("--batch-size", type=int, nargs="+", metavar="B", help="batch sizes beyond the phase's own")
    p.add_argument("--graphs", choices=("as-run", "off", "on"), default="as-run",
                   help="CUDA graphs as the phase ran them (default), switched off, or on")
    _add_lengths(p)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before the benchmark is stopped")
