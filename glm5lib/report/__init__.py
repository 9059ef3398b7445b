"""The run's story: ``summary.json``, ``report.md`` and a self-contained ``report.html``.

What a run concludes is apart from how it is shown:

- :mod:`~glm5lib.report.conclude`: :func:`summarize` reads a run folder and decides (each
  phase's numbers, before against after, the leading cause, whether the stand-in measured it);
  :func:`verdict` says the fix's gain in one paragraph.
- :mod:`~glm5lib.report.hypothesis`: :func:`leading_hypothesis`, the difference to test first, and
  :func:`restate_hypothesis`, the same read again once a step profile changed its forecast.
- :mod:`~glm5lib.report.environment`: :func:`environment_tables`, the host snapshot as tables.
- :mod:`~glm5lib.report.figures`: the report's figures, drawn or found in ``figures/``.
- :mod:`~glm5lib.report.markdown`: :func:`render_markdown`, the story as Markdown, section by
  section; :mod:`~glm5lib.report.sections`: sections other modules contribute.
- :mod:`~glm5lib.report.html`: :func:`render_html`, that Markdown as one offline page.
- :mod:`~glm5lib.report.write`: :func:`write_report` writes all three into the run folder.
- :mod:`~glm5lib.report.compare`: :func:`compare_runs`, two runs side by side.
- :mod:`~glm5lib.report.runs`: :func:`list_runs`, the run folders and how each ended.

Measurements from glm5lib's stand-in server are never passed off as GPU measurements, and
anything missing (a notebook not run yet, a run that failed half-way) is reported as missing.
"""

from __future__ import annotations

from glm5lib import rundir
from glm5lib.report._files import fmt
from glm5lib.report.compare import RunComparison, compare_runs
from glm5lib.report.conclude import list_phases, phase_roles, summarize, verdict
from glm5lib.report.environment import environment_tables
from glm5lib.report.html import render_html
from glm5lib.report.hypothesis import leading_hypothesis, restate_hypothesis
from glm5lib.report.markdown import render_markdown
from glm5lib.report.runs import list_runs
from glm5lib.report.sections import register as register_section
from glm5lib.report.write import write_report

__all__ = [
    "DIFF",
    "HYPOTHESIS",
    "NOTEBOOKS_STATUS",
    "SERVER_INFO",
    "RunComparison",
    "compare_runs",
    "environment_tables",
    "fmt",
    "leading_hypothesis",
    "list_phases",
    "list_runs",
    "phase_roles",
    "register_section",
    "render_html",
    "render_markdown",
    "restate_hypothesis",
    "summarize",
    "verdict",
    "write_report",
]

#: Files of the run folder that the workbook's notebooks write beside rundir's.
DIFF = rundir.DIFF  # run root: diagnose.diff_configs(baseline, reference)
HYPOTHESIS = rundir.HYPOTHESIS  # run root: the leading hypothesis and how to test it
SERVER_INFO = rundir.SERVER_INFO  # per phase: the server's /get_server_info (secrets masked)
NOTEBOOKS_STATUS = rundir.NOTEBOOKS_STATUS  # run root: which notebooks ran, and how they ended
