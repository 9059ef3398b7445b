"""``glm5 workbook run``: the workbook's notebooks, headless, into a run folder."""

from __future__ import annotations

import contextlib
from pathlib import Path

from glm5lib import rundir
from glm5lib.cli.options import add_command, add_quiet
from glm5lib.errors import ConfigError, NotebookFailedError

__all__ = ["register_cli"]


def _cmd_run(args) -> int:
    from glm5lib.progress import RunProgress
    from glm5lib.workbook import parse_parameter, run_workbook

    params = dict(parse_parameter(p) for p in args.parameter or [])
    try:
        only = [int(n) for n in args.only.split(",")] if args.only else None
    except ValueError:
        raise ConfigError(f"--only {args.only!r} is not a comma-separated list of notebook numbers, e.g. 2,4",
                          field="only") from None
    # Progress comes from the run folder (a line per notebook and per level, a live line while a
    # level runs), not from papermill's cell counter, in a terminal and in a CI log alike.
    run_dir = Path(args.run_dir) if args.run_dir else rundir.new_run_dir()
    watch = contextlib.nullcontext() if args.quiet else RunProgress(run_dir)
    try:
        with watch:
            out = run_workbook(params, run_dir=run_dir, only=only, progress=False,
                               report=not args.no_report, notebooks=args.notebooks,
                               on_status=None if args.quiet else watch.notebook_status)
    except NotebookFailedError as exc:
        if exc.run_dir:
            print(f"Workbook results so far are in {exc.run_dir}")
            report = Path(exc.run_dir) / rundir.REPORT
            if report.exists():
                print(f"Report (partial): {report}")
        raise
    print(f"Workbook results are in {out}")
    report = out / rundir.REPORT
    if report.exists():
        print(f"Report: {report}")
    if (out / rundir.REPORT_HTML).exists():
        print(f"HTML report (self-contained): {out / rundir.REPORT_HTML}")
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("workbook", help="run the workbook's notebooks headless with papermill")
    wsub = p.add_subparsers(dest="workbook_command", metavar="ACTION", required=True)
    run = add_command(wsub, "run", _cmd_run, help="execute the notebooks in order into a run folder")
    run.add_argument(
        "-p", "--parameter", action="append", metavar="NAME=VALUE",
        help="notebook parameter, a Python literal (repeatable), e.g. -p CONCURRENCIES=[1,64]",
    )
    run.add_argument("--run-dir", help="run folder (default: data/runs/<timestamp>)")
    run.add_argument("--only", help="comma-separated notebook numbers to run, e.g. 2,4")
    add_quiet(run)
    run.add_argument("--notebooks", help="folder of NN-*.ipynb notebooks (default: the workbook's)")
    run.add_argument("--no-report", action="store_true", help="do not write report.md, report.html and summary.json")
