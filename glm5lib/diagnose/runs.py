"""Diagnosing a run folder: read its evidence, apply the rules, write ``findings.csv``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import rundir
from glm5lib.diagnose.evidence import load_evidence
from glm5lib.diagnose.rules import evaluate

__all__ = ["diagnose"]


def diagnose(
    run_dir: str | Path,
    reference: Any = None,
    environment: Any = None,
    *,
    phase: str | None = None,
    write: bool = True,
) -> pd.DataFrame:
    """Findings for one phase of a run folder, most important first.

    Columns: ``finding, evidence, suggestion, confidence, rule, severity, score``. ``reference``
    is anything :func:`resolve_server_args` takes (e.g. ``"k2-thinking"``); ``environment`` a
    snapshot dict or path (default: ``environment.json`` in the phase or run folder). The
    findings are also written to ``findings.csv`` in the phase folder unless ``write`` is false.
    """
    ev = load_evidence(run_dir, reference=reference, environment=environment, phase=phase)
    frame = evaluate(ev)
    if write and ev.source:
        frame.to_csv(Path(ev.source) / rundir.FINDINGS, index=False)
    return frame

