"""``glm5 compare RUN_A RUN_B``: two runs side by side, per phase and concurrency level."""

from __future__ import annotations

import json
from pathlib import Path

from glm5lib import rundir
from glm5lib.cli.options import add_command

__all__ = ["register_cli"]


def _cmd_compare(args) -> int:
    from glm5lib import plots
    from glm5lib.report import compare_runs
    from glm5lib.report.runs import find_run

    a, b = find_run(args.run_a), find_run(args.run_b)
    cmp = compare_runs(a, b, phase=args.phase)
    if args.json:
        print(json.dumps(cmp.rows, indent=2))
    else:
        print(cmp.to_markdown())
    if not args.no_figure and cmp.sweeps:
        if args.figure:
            target = Path(args.figure)
            target.parent.mkdir(parents=True, exist_ok=True)
            cmp.figure().savefig(target, dpi=110)
        else:
            target = plots.save_figure(cmp.figure(), b, f"compare-{cmp.a}".replace("/", "_"))
        if not args.json:
            print(f"\nFigure: {target}")
    return 0


def register_cli(sub) -> None:
    p = add_command(
        sub, "compare", _cmd_compare,
        help="compare two runs: throughput, latency, power, finished requests, arguments, findings",
        description=("Set two run folders side by side: per phase and concurrency level, output "
                     "throughput, TTFT/TPOT percentiles, end-to-end latency, GPU power and finished "
                     "requests with their ratio (RUN_B / RUN_A); the resolved server arguments that "
                     "differ; findings in one run and not the other. A figure of both goes to "
                     f"{rundir.figure_path('RUN_B', 'compare-<RUN_A>')} unless --figure or --no-figure."),
    )
    p.add_argument("run_a", metavar="RUN_A", help="the first run folder (or a run's name under data/runs/)")
    p.add_argument("run_b", metavar="RUN_B", help="the second run folder; ratios are RUN_B / RUN_A")
    p.add_argument("--phase", help="compare only this phase (default: every phase both runs have)")
    p.add_argument("--json", action="store_true", help="print the per-level rows as a JSON list")
    p.add_argument("--figure", metavar="PATH", help="where to write the figure (a .png or .svg path)")
    p.add_argument("--no-figure", action="store_true", help="draw no figure")
