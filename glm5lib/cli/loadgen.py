"""``glm5 sweep BASE_URL -c 1,64,256 ...``: a concurrency sweep written to a run folder."""

from __future__ import annotations

import argparse
import ast
import functools
import json
import shutil
from pathlib import Path
from typing import Any

from glm5lib import rundir
from glm5lib.cli.options import (
    REQUEST_APIS,
    add_api_key_options,
    add_command,
    add_quiet,
    read_api_key,
)
from glm5lib.errors import ConfigError

__all__ = ["register_cli", "settings_defaults"]


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of whole numbers, e.g. 1,64,256"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("give at least one level, e.g. 1,64,256")
    return values


def _float_list(text: str) -> list[float]:
    try:
        return [float(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of rates, e.g. 2,4,8") from None


#: Where SweepSettings and DEFAULT_CONCURRENCIES are written: ``--help`` reads their defaults there.
_SETTINGS_SOURCE = Path(__file__).resolve().parents[1] / "loadgen" / "settings.py"


@functools.cache
def settings_defaults() -> dict[str, Any]:
    """:class:`~glm5lib.loadgen.SweepSettings`' field defaults and ``concurrencies``
    (``DEFAULT_CONCURRENCIES``), read from their source file: ``--help`` shows them without
    importing the load generator (pandas, aiohttp), which building the parser must not load."""
    tree = ast.parse(_SETTINGS_SOURCE.read_text())
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "DEFAULT_CONCURRENCIES":
            out["concurrencies"] = ast.literal_eval(node.value)
        if isinstance(node, ast.ClassDef) and node.name == "SweepSettings":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                    out[item.target.id] = ast.literal_eval(item.value)
    return out


class _Default:
    """A sweep setting left off the command line: the handler leaves it to
    :class:`~glm5lib.loadgen.SweepSettings` (the one source of the sweep's defaults), whose value
    ``--help`` shows (:func:`settings_defaults`)."""

    def __init__(self, name: str):
        self.name = name

    def __str__(self) -> str:
        value = settings_defaults()[self.name]
        return ",".join(str(c) for c in value) if self.name == "concurrencies" else str(value)


#: The sweep settings the command line sets: option dest -> SweepSettings field.
_SETTINGS = {"api": "api", "model": "model", "input_len": "input_len", "output_len": "output_len",
             "range_ratio": "range_ratio", "dataset": "dataset", "requests": "requests_per_level",
             "duration": "duration", "warmup": "warmup", "mode": "mode", "rate": "rate", "seed": "seed",
             "read_timeout": "read_timeout", "steady_extend": "steady_extend"}


def _setting(name: str) -> _Default:
    return _Default(_SETTINGS.get(name, name))


def register_cli(subparsers: Any) -> None:
    """Add ``glm5 sweep``."""
    p = add_command(subparsers, "sweep", _handler,
                    help="drive a server at rising concurrency and record throughput and latency")
    p.add_argument("base_url", metavar="BASE_URL", help="e.g. http://127.0.0.1:30000")
    p.add_argument("-c", "--concurrency", type=_int_list, default=_Default("concurrencies"),
                   help="levels, comma-separated (default %(default)s)")
    p.add_argument("--api", choices=REQUEST_APIS, default=_setting("api"),
                   help="request API (default %(default)s)")
    p.add_argument("--model", default=_setting("model"), help="model name for OpenAI APIs (default: from /v1/models)")
    p.add_argument("--input-len", type=int, default=_setting("input_len"), help="prompt tokens (default %(default)s)")
    p.add_argument("--output-len", type=int, default=_setting("output_len"),
                   help="output tokens, EOS ignored (default %(default)s)")
    p.add_argument("--range-ratio", type=float, default=_setting("range_ratio"),
                   help="lengths uniform in [len*ratio, len] (default %(default)s)")
    p.add_argument("--dataset", default=_setting("dataset"), help="prompt file (.jsonl, ShareGPT .json, .txt)")
    p.add_argument("-n", "--requests", type=int, default=_setting("requests"), help="requests per level")
    p.add_argument("-d", "--duration", type=float, default=_setting("duration"),
                   help="seconds per level (in-flight requests cancelled)")
    p.add_argument("--warmup", type=int, default=_setting("warmup"),
                   help="warm-up requests before the first level (default %(default)s)")
    p.add_argument("--mode", choices=["closed", "poisson"], default=_setting("mode"),
                   help="arrivals (default %(default)s)")
    p.add_argument("--rate", type=_float_list, default=_setting("rate"), help="poisson: requests/s, comma-separated")
    add_api_key_options(p, "file holding the bearer token (default: $GLM5_API_KEY; never written to the run folder)")
    p.add_argument("--server-log", default=None,
                   help="the server's log file: a sweep stopped by a dead server quotes its fatal lines")
    p.add_argument("--read-timeout", type=float, default=_setting("read_timeout"),
                   help="seconds without data before a request fails (default %(default)s)")
    p.add_argument("--seed", type=int, default=_setting("seed"), help="(default %(default)s)")
    p.add_argument("--steady-extend", type=float, default=_setting("steady_extend"),
                   help="how far past --duration a level not yet steady may run, a multiple of it "
                        "(default %(default)s; 0: never)")
    p.add_argument("--no-exact-prompts", action="store_true",
                   help="text prompts of one word a token instead of sized in the served model's tokens")
    p.add_argument("--run-dir", default=None, help="run folder (default: a new one under data/runs)")
    p.add_argument("--phase", default="sweep", help="phase sub-folder of the run folder (default 'sweep')")
    p.add_argument("--no-resume", action="store_true", help="redo levels already in sweep.csv")
    add_quiet(p, "--no-progress")


def _settings_given(args: argparse.Namespace) -> dict[str, Any]:
    """The sweep settings the command line gave (the others are left to their defaults)."""
    given = {field: getattr(args, dest) for dest, field in _SETTINGS.items()
             if not isinstance(getattr(args, dest), _Default)}
    if given.get("mode") != "poisson":
        given.pop("rate", None)  # a rate means something with poisson arrivals only
    elif not given.get("rate"):
        raise ConfigError("--mode poisson needs --rate", field="rate")
    if args.no_resume:
        given["resume"] = False
    if args.no_exact_prompts:
        given["exact_prompts"] = False
    return given


def _record_environment(run: Path, base_url: str, api_key: str | None) -> None:
    """``environment.json`` of the host serving ``base_url`` when it is this one (loopback) or the
    stand-in, unless the run folder has one: the diagnosis rules out what the host cannot do."""
    from urllib.parse import urlsplit

    from glm5lib.telemetry import environment

    path = run / rundir.ENVIRONMENT
    if path.exists():
        return
    host = urlsplit(base_url).hostname or ""
    env = environment("auto", base_url=base_url, api_key=api_key)
    if env.get("source") == "sim" or host in ("127.0.0.1", "localhost", "::1"):
        path.write_text(json.dumps(env, indent=2, default=str) + "\n")


def _handler(args: argparse.Namespace) -> int:
    """Run a concurrency (or request-rate) sweep against BASE_URL and write sweep.csv and
    requests.jsonl to a run folder. Rerunning with the same folder skips levels already done."""
    import pandas as pd

    from glm5lib.loadgen import SweepSettings, run_sweep
    from glm5lib.loadgen.settings import DEFAULT_CONCURRENCIES
    from glm5lib.server import attach

    api_key = read_api_key(args)
    settings = SweepSettings(**_settings_given(args))  # every setting checked before the run folder is made
    run = Path(args.run_dir) if args.run_dir else rundir.new_run_dir()
    out = rundir.phase_dir(run, args.phase)
    levels = DEFAULT_CONCURRENCIES if isinstance(args.concurrency, _Default) else args.concurrency
    server = None
    if args.server_log:
        if not Path(args.server_log).is_file():
            raise ConfigError(f"--server-log {args.server_log}: no such file (the log the server writes; "
                              "leave it out when the log is not readable here)", field="server_log")
        server = attach(args.base_url, api_key=api_key, log_path=args.server_log)
    _record_environment(run, args.base_url, api_key)
    try:
        frame = run_sweep(args.base_url, levels, settings=settings, run_dir=out, api_key=api_key,
                          progress=not args.quiet, server=server)
    finally:
        if args.server_log:
            # the phase folder holds the server's evidence as the workbook's does, so that
            # glm5 diagnose gives the same answer whichever way the run was made
            shutil.copyfile(args.server_log, out / rundir.SERVER_LOG)
    cols = ["concurrency", "completed", "failed", "cancelled", "output_throughput",
            "median_ttft_ms", "median_itl_ms", "p99_e2e_latency_ms", "client_cpu_pct", "loop_lag_p99_ms",
            "client_bound", "steady", "prompt_length_ratio"]
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(frame[cols].to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    print(f"\nwritten: {out / rundir.SWEEP} and {out / rundir.REQUESTS}")
    if (frame["failed"] > 0).any():
        print("failures:")
        for _, row in frame[frame["failed"] > 0].iterrows():
            print(f"  C={row['concurrency']}: {row['error_summary']}")
    return 0
