"""``glm5 tune``: the best configuration under latency limits, in a few launches (or ``--grid``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from glm5lib import engines, rundir
from glm5lib.cli.options import REQUEST_APIS, add_command, add_quiet
from glm5lib.errors import ConfigError, UsageError

__all__ = ["register_cli"]


def register_cli(subparsers: Any) -> None:
    """Add ``glm5 tune``."""
    p = add_command(subparsers, "tune", _handler,
                    help="find the launch configuration with the most throughput under latency limits, in few launches")
    p.add_argument("run", metavar="RUN_DIR", nargs="?", default=None,
                   help="a run folder whose --phase is the starting evidence (its config, its log, its level)")
    p.add_argument("--phase", default=None, help="the measured phase of RUN_DIR to start from")
    p.add_argument("--backend", choices=engines.names(), default=None,
                   help="what launches each candidate (default: the config's engine, or the stand-in for an "
                        "engine that needs GPUs)")
    p.add_argument("--config", default=None,
                   help="shipped config name or config file (default: the phase's config.json)")
    p.add_argument("--run-dir", default=None, help="run folder for the candidates (default: RUN_DIR, else new)")
    p.add_argument("-c", "--concurrency", type=int, default=None, help="the target load: concurrent requests")
    p.add_argument("--input-len", type=int, default=256, help="prompt tokens (default 256)")
    p.add_argument("--output-len", type=int, default=256, help="output tokens, EOS ignored (default 256)")
    p.add_argument("-d", "--duration", type=float, default=20.0, help="seconds per candidate's level (default 20)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up requests before the level")
    p.add_argument("--api", choices=REQUEST_APIS, default=None,
                   help="request API (default: generate; completions for vLLM)")
    p.add_argument("--slo", action="append", default=[], metavar="METRIC<=VALUE",
                   help="a latency limit, repeatable: median_tpot_ms<=250, p99_ttft_ms<=2000 ...")
    p.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                   help="maximise goodput as vLLM's bench defines it: requests/s within ttft:MS tpot:MS e2el:MS")
    p.add_argument("--max-launches", type=int, default=4, help="launch budget (default 4)")
    p.add_argument("--lever", action="append", default=None, metavar="FIELD[=LOW:HIGH]",
                   help="the lever to move (default: chosen from the binding limit); a command engine's flag "
                        "with its bounds, e.g. --lever=--max-batch=1:256. Given more than once, the levers are "
                        "searched in turn, each from the best the ones before found, sharing --max-launches")
    p.add_argument("--grid", action="store_true", help="measure the exhaustive grid over the same lever")
    p.add_argument("--grid-values", default=None, help="grid values, comma-separated (default: 8 over the range)")
    p.add_argument("--noise", type=float, default=0.03, help="relative noise of a measurement (default 0.03)")
    p.add_argument("--margin", type=float, default=0.03,
                   help="how far under each limit a candidate must be forecast (and the winner measured, less "
                        "the noise, where one was), as a fraction (default 0.03; on a host whose launches of one "
                        "configuration differ by more, raise it)")
    p.add_argument("--recheck", action="store_true", help="launch the winner once more and measure it again")
    p.add_argument("--sim-profile", default=None, help="stand-in profile (with --backend sim)")
    p.add_argument("--engine-command", default=None,
                   help="command engine: argv template as a JSON list, e.g. "
                        "'[\"my-server\", \"--model\", \"{model}\", \"--port\", \"{port}\"]'")
    p.add_argument("--model", default=None, help="model for the command engine's {model}")
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for each launch")
    p.add_argument("--cpus", default=None, metavar="LAYOUT",
                   help="keep each candidate server and the load generator on their own cores: 'split' (the "
                        "client on the last core) or SERVER/CLIENT core lists such as '0-5/6,7' (default: "
                        "$GLM5_CPUS, else no pinning); for engines that compute on the CPU of a small host")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_quiet(p)


def _int_list(text: str) -> list[int]:
    try:
        return [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise ConfigError(f"--grid-values {text!r} is not a comma-separated list of numbers", field="grid") from None


def _from_phase(args: argparse.Namespace) -> tuple[Any, str, Path | None]:
    folder = None
    if args.run or args.phase:
        if not (args.run and args.phase):
            raise ConfigError("RUN_DIR and --phase go together: the phase of RUN_DIR to start from", field="phase")
        folder = Path(args.run) / args.phase
        if not (folder / rundir.SWEEP).exists():
            raise ConfigError(f"{folder} has no {rundir.SWEEP}: measure that phase first", field="phase")
    # --config wins; else the configuration the phase ran, read as the tuner reads it (its evidence's)
    from glm5lib import tune as tn

    config = engines.load_config(args.config) if args.config else (
        tn.config_of(args.run, args.phase) if folder is not None else None)
    if args.backend:
        backend = args.backend
    elif config is not None:  # the config's engine, or the stand-in that rehearses an engine needing GPUs
        caps = engines.get(getattr(config, "engine", None) or engines.DEFAULT_ENGINE).capabilities
        backend = caps.standin_backend or getattr(config, "engine", None) or engines.STANDIN
    else:
        backend = engines.COMMAND if folder is not None and (folder / rundir.COMMAND).exists() else engines.STANDIN
    if config is None and engines.get(backend).capabilities.launches_from_config:
        raise ConfigError(f"--backend {backend} needs --config (e.g. glm5-baseline, vllm-capped) or "
                          "RUN_DIR --phase", field="config")
    return config, backend, folder


def _handler(args: argparse.Namespace) -> int:
    """Launch a candidate configuration, measure it at the target load, let the evidence (and the
    performance model) say which limit binds and which value of which lever should meet the limits
    with the most throughput, launch that, and repeat until no candidate can beat the best by more
    than the noise or --max-launches is spent. Each candidate is a phase tune-N of the run folder;
    tune.csv says why each was chosen; the winner is saved as tune-best.json. Rerun the same command
    to resume. --grid measures the exhaustive grid over the same lever instead."""
    from glm5lib import tune as tn

    config, backend, evidence = _from_phase(args)
    try:
        goal = tn.Goal.parse(args.slo, goodput=args.goodput)
    except ConfigError as exc:  # a malformed --slo is a usage error (exit 2)
        raise UsageError(str(exc), field=exc.field, valid=exc.valid) from None
    if args.concurrency is None:
        raise ConfigError("--concurrency is the target load every candidate is measured at", field="concurrency")
    caps = engines.get(backend).capabilities
    api = args.api or caps.default_api
    options = {} if caps.token_id_prompts else {"token_ids": False}
    workload = tn.Workload(args.concurrency, args.input_len, args.output_len, args.duration, api=api,
                           warmup=args.warmup, sweep_options=options)
    command = None
    if not caps.launches_from_config:
        try:
            command = json.loads(args.engine_command) if args.engine_command else None
        except ValueError:
            raise ConfigError("--engine-command must be a JSON list of strings", field="engine_command") from None
        if not (isinstance(command, list) and command and all(isinstance(c, str) for c in command)):
            raise ConfigError("--backend command needs --engine-command, a JSON list such as "
                              "'[\"my-server\", \"--port\", \"{port}\"]'", field="engine_command")
    # a config type that resolves its model to a local path (vLLM's, for a model folder in the checkout)
    if config is not None and callable(getattr(type(config), "model_path", None)) and config.get("model"):
        model_path = config.model_path()
        config = config.with_changes(model=model_path)
    run = Path(args.run_dir or args.run) if (args.run_dir or args.run) else rundir.new_run_dir()
    launch = {"sim_profile": args.sim_profile, "command": command, "model": args.model,
              "ready_timeout": args.ready_timeout, "progress": not (args.quiet or args.json) and sys.stderr.isatty(),
              "cpus": args.cpus}
    if args.grid:
        values = _int_list(args.grid_values) if args.grid_values else None
        result = tn.grid(config, run, goal, workload, backend=backend, levers=args.lever, values=values,
                         noise=args.noise, **launch)
    else:
        if args.grid_values:
            raise ConfigError("--grid-values needs --grid", field="grid")
        # the phase the run was given is the first point where it was measured in this run folder
        first = args.phase if evidence is not None and evidence.parent.resolve() == run.resolve() else None
        options = tn.SearchOptions(levers=args.lever, noise=args.noise, margin=args.margin)
        if len(args.lever or []) < 2:
            result = tn.tune(config, run, goal, workload, backend=backend, max_launches=args.max_launches,
                             evidence_phase=first, options=options, **launch)
        else:
            result = tn.tune_in_turn(config, run, goal, workload, levers=args.lever, backend=backend,
                                     max_launches=args.max_launches, evidence_phase=first, options=options, **launch)
    data = result.to_dict()
    if args.recheck and result.best is not None:
        data["recheck"] = tn.search.recheck(config, run, goal, workload, result, backend=backend, **launch)
    data["run_dir"] = str(run)
    if args.json:
        print(json.dumps(data, indent=2, default=str))
        return 0
    frame = result.candidates
    cols = [c for c in ["phase", "value", "objective", *[lim.metric for lim in goal.limits], "slo_met",
                        "prediction_source"] if c in frame]
    print(frame[cols].to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    for _, row in frame.iterrows():
        print(f"  {row['phase']}: {row['reason']}")
    if result.best:
        print(f"\nbest: {result.best['changes']} -> {result.best['objective']:,.0f} "
              f"({goal.objective.replace('_', ' ')}), limits met, phase {result.best['phase']}")
    else:
        print("\nno candidate met the limits")
    print(f"launches: {result.launches}; stopped: {result.stopped}")
    if "recheck" in data:
        re = data["recheck"]
        print(f"measured again ({re['phase']}): {re['objective']:,.0f}, limits "
              f"{'met' if re['slo_met'] else 'NOT met'}")
    if result.config_path:
        print(f"winner saved: {result.config_path} (CONFIG for the workbook)")
    print(f"candidates: {run / rundir.TUNE_CSV}")
    return 0
