"""``glm5 report RUN_DIR``: write a run's ``report.md``, ``report.html`` and ``summary.json`` again."""

from __future__ import annotations

from glm5lib import rundir
from glm5lib.cli.options import add_command

__all__ = ["register_cli"]


def _cmd_report(args) -> int:
    from glm5lib.report import write_report
    from glm5lib.report.runs import find_run

    path = write_report(find_run(args.run_dir))
    print(f"Report: {path}")
    print(f"HTML report: {path.with_name(rundir.REPORT_HTML)}")
    return 0


def register_cli(sub) -> None:
    p = add_command(
        sub, "report", _cmd_report,
        help=f"write {rundir.REPORT}, {rundir.REPORT_HTML} and {rundir.SUMMARY} of a run folder again",
        description=("Read a run folder (one made by an older glm5lib too) and write its report: "
                     f"{rundir.REPORT}, the self-contained {rundir.REPORT_HTML} (figures embedded, no "
                     f"outside resource) and {rundir.SUMMARY}."),
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder, or a run's name under data/runs/")
