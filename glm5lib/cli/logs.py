"""``glm5 logs FILE``: a summary of a server log (the args that matter, start-up, decode, errors)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

from glm5lib.cli.options import add_command, add_quiet
from glm5lib.errors import ConfigError, UsageError

__all__ = ["register_cli"]


def _format_summary(s: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = buf.write
    w(f"lines: {s['lines']}  skipped: {s['skipped']}\n")
    if s["standin"]:
        w(f"stand-in profile: {s['standin']} (not a real SGLang server)\n")
    w(f"time: {s['first_time']} .. {s['last_time']}  ready at: {s['ready_at'] or 'never'}\n")
    w(f"\nserver args ({s['server_args_fields']} fields{', incomplete' if s['server_args_incomplete'] else ''}):\n")
    for k, v in s["server_args"].items():
        w(f"  {k} = {v!r}\n")
    w("\nstartup:\n")
    for k, v in s["startup"].items():
        w(f"  {k} = {v}\n")
    w("\ndecode:\n")
    for k, v in s["decode"].items():
        w(f"  {k} = {v}\n")
    w(f"\nprefill rows: {s['prefill']['rows']}  retractions: {s['retractions']['rows']} "
      f"({s['retractions']['retracted_reqs']} requests)\n")
    w(f"\nerrors: {len(s['errors'])}" + (f"  (cause: {s['crash_cause']})" if s["crash_cause"] else "") + "\n")
    for e in s["errors"][:20]:
        w(f"  [{e['time']} {e['rank']}] {e['kind']}: {e['message'][:200]}\n")
    return buf.getvalue()


def _cmd_logs(args: argparse.Namespace) -> int:
    """Parse an SGLang server log and print what matters for throughput."""
    from glm5lib.logs import available_engines, parse_log, summarize

    engines = ["auto", *available_engines()]
    if args.engine not in engines:
        raise UsageError(f"--engine {args.engine!r}: valid values are {', '.join(engines)}", field="engine", valid=engines)
    path = Path(args.file)
    if not path.is_file():
        raise ConfigError(f"log file {args.file!r} does not exist", field="file")
    # a long log's progress bar (from its size on) unless -q
    slog = parse_log(path, engine=args.engine, progress=False if args.quiet else None)
    summary = summarize(slog)
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print(_format_summary(summary), end="")
    return 0


def register_cli(sub: Any) -> None:
    """Add ``glm5 logs FILE [--json]``: a summary of an SGLang server log."""
    p = add_command(sub, "logs", _cmd_logs,
                    help="summarise an SGLang server log (args that matter, startup, decode stats, errors)")
    p.add_argument("file", help="the server log (e.g. data/runs/<run>/<phase>/server.log)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_quiet(p)
    # Not argparse choices: listing the installed adapters imports the parsers (pandas), and
    # `glm5 logs --help` stays fast; the handler checks the name against them.
    p.add_argument(
        "--engine", default="auto", metavar="ENGINE",
        help="the engine that wrote the log: sglang, vllm or another installed adapter (default: auto, told from its first lines)",
    )
