"""``glm5 diagnose RUN_DIR`` and ``glm5 diff CURRENT REFERENCE``: the command line of :mod:`glm5lib.diagnose`."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import TYPE_CHECKING, Any

from glm5lib import rundir
from glm5lib.cli.options import add_command
from glm5lib.errors import ConfigError, DiagnosisError, UsageError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["register_cli"]



def _print_findings(frame: pd.DataFrame) -> None:
    if frame.empty:
        print("No finding: no rule matched this run's evidence.")
    for i, row in frame.iterrows():
        print(
            f"{i + 1}. {row['finding']}  [{row['rule']}, confidence {row['confidence']:.2f}, score {row['score']:.2f}]"
        )
        for label in ("evidence", "suggestion"):
            print(
                textwrap.fill(
                    str(row[label]),
                    width=100,
                    initial_indent=f"   {label}: ",
                    subsequent_indent="      ",
                )
            )
    skipped = frame.attrs.get("skipped") or []
    if skipped:
        print("\nNot checked:")
        for s in skipped:
            print(f"  - {s}")


def _cli_diagnose(args: argparse.Namespace) -> int:
    """Apply the diagnosis rules to one phase of a run folder and print the findings."""
    from glm5lib.diagnose import PerfModel, diagnose, load_evidence, recommend_running_cap

    # RUN_DIR or --run-dir, the spelling of a run folder every other command takes
    if args.run_dir and args.run_dir_option and args.run_dir != args.run_dir_option:
        raise UsageError(f"RUN_DIR {args.run_dir!r} and --run-dir {args.run_dir_option!r} disagree: give one",
                         field="run_dir")
    args.run_dir = args.run_dir or args.run_dir_option
    if not args.run_dir:
        raise UsageError("give the run folder: glm5 diagnose RUN_DIR (or --run-dir RUN_DIR)", field="run_dir")

    frame = diagnose(
        args.run_dir,
        reference=args.reference,
        environment=args.environment,
        phase=args.phase,
        write=not args.no_write,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "findings": frame.to_dict(orient="records"),
                    "skipped": frame.attrs.get("skipped", []),
                },
                indent=2,
                default=str,
            )
        )
        return 0
    if frame.attrs.get("standin"):
        print(
            f"(run measured on the stand-in server, profile {frame.attrs['standin']!r}: timings come from a model)\n"
        )
    _print_findings(frame)
    if args.capacity:
        ev = load_evidence(args.run_dir, phase=args.phase)
        try:
            model = PerfModel.from_evidence(ev)
        except (DiagnosisError, ConfigError) as exc:
            print(f"\nPerformance model: not fitted ({exc})")
            return 0
        print("\nPerformance model: " + model.describe())
        pool, _ = ev.kv_pool_tokens()
        ctx, _ = ev.context_tokens()
        cap, _ = ev.cap()
        s = ev.sweep_sorted()
        levels = sorted({int(c) for c in s["concurrency"]}) if not s.empty else [64, 256, 1024]
        rec = recommend_running_cap(pool, ctx, target_concurrency=max(levels), current_cap=cap, model=model)
        flag = ev.adapter().capabilities.flag("running_cap")
        if rec.value:
            print(f"\nForecast with {flag} {rec.value} (the most the KV pool holds within the load offered):")
            _print_forecasts(model.forecast({"running_cap": rec.value}, levels))
        print(f"recommended {flag}: {rec.value} ({rec.reason})")
    return 0


def _print_forecasts(forecasts) -> None:
    for f in forecasts:
        figure = f"{f.predicted_tok_s:>9,.0f}" if f.given else f"{'not forecast':>12} ({f.predicted_tok_s:,.0f})"
        print(f"  {f.concurrency:>6,}  {figure}  {f.low_tok_s:>8,.0f}-{f.high_tok_s:<8,.0f} "
              f"running {f.running:>7,.0f}  {f.binding_limit}")


def _cli_diff(args: argparse.Namespace) -> int:
    """CURRENT and REFERENCE: a config .json, a server log, a run folder, a reference name or a
    shipped config name. Ranked by their impact on throughput; --raw lists every field that differs
    between two SGLang configs, unranked."""
    if args.raw:
        from glm5lib.cli.config import raw_diff

        return raw_diff(args.current, args.reference, release=args.release, other_release=args.other_release,
                        as_json=args.json, exit_code=args.exit_code)
    import pandas as pd

    from glm5lib.diagnose import diff_configs

    frame = diff_configs(args.current, args.reference, hide_irrelevant=not args.all)
    if args.json:
        print(frame.to_json(orient="records", indent=2, default_handler=str))
        return 0
    if frame.empty:
        print("The two configurations do not differ.")
        return 0
    with pd.option_context("display.max_colwidth", 70, "display.width", 200):
        print(frame.drop(columns=["flag", "automatic", "kind", "resolved"]).to_string(index=False))
    for row in frame.itertuples():
        if row.resolved:
            print(f"  {row.field}: {row.resolved}")
    context = [row["field"] for row in frame.attrs.get("context", [])]
    if context and not args.all:
        print(f"Context, not ranked (--all shows the values): {', '.join(context)}")
    changed = frame.attrs.get("default_changed", [])
    if changed and not args.all:
        print(
            f"{len(changed)} fields differ only because SGLang changed their default between the two "
            "sides' releases; each side has its own release's default (--all lists them)"
        )
    only = frame.attrs.get("release_only", [])
    if only and not args.all:
        print(f"{len(only)} fields exist in only one side's SGLang release and are at its default (--all lists them)")
    return 0


def register_cli(subparsers: Any) -> None:
    """Add ``glm5 diagnose RUN_DIR`` and ``glm5 diff CURRENT REFERENCE``."""
    p = add_command(subparsers, "diagnose", _cli_diagnose,
                    help="rank the likely bottlenecks of a measured run, with evidence")
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?", help="a run folder or one of its phase folders")
    p.add_argument("--run-dir", dest="run_dir_option", metavar="RUN_DIR", help="the same, as other commands spell it")
    p.add_argument("--phase", help="phase folder inside RUN_DIR (baseline, fix, ...)")
    p.add_argument(
        "--reference",
        # names not listed here: listing them imports the diagnosis (pandas); an unknown name's error lists them
        help="reference run to diff against: a shipped name (under data/reference/), a run folder or a server log",
    )
    p.add_argument(
        "--environment",
        help="environment.json to check incompatibilities against (default: the run's)",
    )
    p.add_argument(
        "--capacity",
        action="store_true",
        help="also fit the performance model, recommend a running cap (the engine's flag for it) and forecast it",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--no-write", action="store_true", help=f"do not write {rundir.FINDINGS}")

    q = add_command(subparsers, "diff", _cli_diff,
                    help="rank the server-argument differences between two configurations (--raw: field by field)")
    q.add_argument("current", metavar="CURRENT")
    q.add_argument("reference", metavar="REFERENCE")
    q.add_argument(
        "--all", action="store_true", help="also list arguments that never matter for throughput"
    )
    q.add_argument("--json", action="store_true", help="print JSON instead of a table")
    q.add_argument("--raw", action="store_true", help="every field that differs between two SGLang configs, unranked")
    q.add_argument("--exit-code", action="store_true", help="with --raw: exit 1 when the configs differ")
    q.add_argument("--release", help="with --raw: SGLang release of CURRENT")
    q.add_argument("--other-release", help="with --raw: SGLang release of REFERENCE")
