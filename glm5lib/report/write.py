"""Writing a run's report: ``summary.json``, ``report.md`` and ``report.html`` from its folder.

The three come from one reading of the run folder (:mod:`glm5lib.report.conclude`), so they
hold the same numbers: each phase's evidence is read once (:func:`~glm5lib.report.conclude.reading`),
for the summary and for every section other modules contribute (:mod:`glm5lib.report.sections`);
``report.html`` is rendered from ``report.md``'s text. A run folder made by an older glm5lib gets
both reports too: only the files it has are read.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from glm5lib import rundir
from glm5lib.report.conclude import frames_and_summary, reading
from glm5lib.report.figures import draw_figures
from glm5lib.report.html import render_html
from glm5lib.report.markdown import render_markdown
from glm5lib.report.sections import extra_sections

__all__ = ["write_report"]

log = logging.getLogger(__name__)


def write_report(run_dir: str | Path) -> Path:
    """Draw the figures, write ``summary.json``, ``report.md`` and ``report.html``; return
    ``report.md``'s path (``report.html`` lies beside it)."""
    run = Path(run_dir)
    phases = reading()
    summary, frames = frames_and_summary(run, phases)
    figures = draw_figures(run, frames)
    summary["figures"] = figures
    (run / rundir.SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    text = render_markdown(summary, figures, extra_sections(run, phases))
    path = run / rundir.REPORT
    path.write_text(text)
    (run / rundir.REPORT_HTML).write_text(render_html(text, run))
    log.info("report written to %s (and %s)", path, rundir.REPORT_HTML)
    return path
