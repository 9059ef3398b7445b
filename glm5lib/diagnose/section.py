"""The report's section on scheduler limits: each level's running, queued and KV figures from the
densest source (server log or ``/metrics`` gauges, or marked missing) and the leading findings.

:func:`section_markdown` is what the report includes; it reads each phase's evidence once (the
report's, when the report gives it its reading of the phases), and the phase's ``findings.csv``.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

import pandas as pd

from glm5lib import rundir
from glm5lib.diagnose.evidence import Evidence, EvidenceCache
from glm5lib.diagnose.references import _is_phase
from glm5lib.diagnose.rules import CAVEAT_RULES, evaluate
from glm5lib.errors import DiagnosisError

__all__ = ["section_markdown"]

log = logging.getLogger(__name__)

_SOURCE = {"log": "server log", "metrics": "/metrics", "log+metrics": "log and /metrics", "missing": "missing"}


def _cell(v: float, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:,.{digits}f}"


def _phases(run: Path) -> list[Path]:
    if _is_phase(run):
        return [run]
    return [p for p in sorted(run.iterdir()) if p.is_dir() and _is_phase(p)]


def _findings(phase: Path, ev: Evidence) -> pd.DataFrame:
    """The phase's ``findings.csv``, else the rules run on its evidence (a copy: they note what they
    skipped, and the evidence is the report's)."""
    path = phase / rundir.FINDINGS
    if path.is_file() and path.stat().st_size:
        try:
            return pd.read_csv(path)
        except (pd.errors.ParserError, pd.errors.EmptyDataError):
            log.warning("findings.csv of %s unreadable: diagnosing again", phase)
    return evaluate(dataclasses.replace(ev, skipped=list(ev.skipped)))


def section_markdown(run_dir: str | Path, phases: EvidenceCache | None = None) -> str | None:
    """``## Scheduler limits``: per phase, a table of each level's scheduler figures and where they
    came from, then the leading cause and the caveats on the measurement; None without a sweep.
    ``phases``: the report's reading of the phases (each phase read once here without)."""
    run = Path(run_dir)
    if not run.is_dir():
        return None
    phases = phases if phases is not None else EvidenceCache()
    lines = ["## Scheduler limits", "",
             "Running, queued and KV figures per level, each from its densest source (the server log's "
             "scheduler lines where they are frequent, else the `/metrics` gauges scraped every second).", ""]
    any_table = False
    for phase in _phases(run):
        try:
            ev = phases.load(phase)
        except DiagnosisError as exc:
            log.warning("scheduler limits of %s: %s", phase, exc)
            continue
        table = ev.level_table()
        if table.empty:
            continue
        any_table = True
        lines += [f"### Phase `{phase.name}`", "",
                  "| concurrency | source | samples | running median | running peak | queued mean | queued peak "
                  "| KV peak | tokens/step |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in table.to_dict(orient="records"):
            lines.append(
                f"| {r['concurrency']:,} | {_SOURCE.get(r['source'], r['source'])} | {r['samples']} | "
                f"{_cell(r.get('running_median'))} | {_cell(r.get('running_max'))} | "
                f"{_cell(r.get('queued_mean'), 1)} | {_cell(r.get('queued_max'))} | {_cell(r.get('kv_max'), 2)} | "
                f"{_cell(r.get('tokens_per_step'))} |")
        lines.append("")
        for r in table.to_dict(orient="records"):
            if r.get("batch_held") is False:
                lines += [f"Not steady at concurrency {r['concurrency']:,}: {r['held_note']}.", ""]
        findings = _findings(phase, ev)
        if findings is not None and not findings.empty and "rule" in findings:
            causes = findings[~findings["rule"].isin(CAVEAT_RULES)]
            caveats = findings[findings["rule"].isin(CAVEAT_RULES)]
            if len(causes):
                top = causes.iloc[0]
                lines += [f"Leading finding: **{top['finding']}**. {top['evidence']}.", ""]
                if isinstance(top.get("suggestion"), str) and top["suggestion"]:
                    lines += [f"What to do: {top['suggestion']}.", ""]
            for _, c in caveats.iterrows():
                lines += [f"Caveat: {c['finding']}. {c['evidence']}.", ""]
    return "\n".join(lines) if any_table else None
