"""The leading hypothesis: the configuration difference the baseline's evidence points at first.

A finding says which configuration fields it is about (``Finding.covers``, the ``covers``
column of ``findings.csv``); the hypothesis is the best-ranked difference from the reference
that the most important finding covers. Findings written before that column existed (run folders
of an older glm5lib) are matched by the field or flag their text names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import engines
from glm5lib.diagnose.runs import diagnose
from glm5lib.errors import ConfigError
from glm5lib.report._files import clean, missing

__all__ = ["leading_hypothesis"]

#: the rule whose finding gathers the differences the evidence ruled out
RULED_OUT = "reference_diff_ruled_out"


def _covered(finding: pd.Series) -> set[str] | None:
    """The fields a finding covers, or ``None`` when its table has no ``covers`` column."""
    if "covers" not in finding.index:
        return None
    value = finding.get("covers")
    # limits by their neutral names (findings written before the vocabulary name fields)
    return set() if missing(value) else {engines.topic(c) for c in str(value).split()}


def _named_in_text(finding: pd.Series, names: list[str]) -> bool:
    text = " ".join(str(finding.get(c, "")) for c in ("finding", "evidence", "suggestion"))
    text_norm = text.replace("-", "_")
    return any(n in text or n.lstrip("-").replace("-", "_") in text_norm for n in names)


def _remedy(finding: pd.Series) -> dict | None:
    """The change a finding's forecast is of (its ``remedy`` column, JSON), or None."""
    raw = finding.get("remedy")
    if not isinstance(raw, str) or not raw.strip():
        return None
    try:
        changes = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return changes if isinstance(changes, dict) and changes else None


def leading_hypothesis(diff: pd.DataFrame, findings: pd.DataFrame | None = None) -> dict:
    """The configuration difference to test first: the best-ranked one the evidence supports.

    Walks the findings most important first and returns the best-ranked row of ``diff``
    (:func:`glm5lib.diagnose.diff_configs`) that the finding covers (its ``covers`` fields; for
    findings without that column, the field or flag its text names), with the finding's evidence
    and suggestion, and the change its forecast is of (``changes``: what the suggestion proposes,
    the graph ceiling raised with the cap for instance); with no such finding, the top-ranked
    difference, marked as not yet backed by evidence.
    """
    if diff is None or diff.empty or "field" not in diff.columns:
        raise ConfigError("the config diff is empty: nothing differs from the reference", field="diff")
    ranked = diff.sort_values("rank", kind="stable") if "rank" in diff.columns else diff
    names = {
        row["field"]: [str(row["field"])] + ([str(row["flag"])] if "flag" in ranked.columns and pd.notna(row["flag"]) else [])
        for _, row in ranked.iterrows()
    }
    chosen, backing = None, None
    if findings is not None and not findings.empty:
        # the differences the evidence ruled out are no hypothesis, whichever finding is about them
        # (a cap never reached is not what to raise, though churn asks to lower it)
        ruled = findings[findings["rule"] == RULED_OUT] if "rule" in findings.columns else findings.iloc[0:0]
        excluded = set().union(*[_covered(f) or set() for _, f in ruled.iterrows()])
        for _, finding in findings.iterrows():
            if finding.get("rule") == RULED_OUT:
                continue
            covered = _covered(finding)
            for _, row in ranked.iterrows():
                if engines.topic(str(row["field"])) in excluded:
                    continue
                hit = (engines.topic(str(row["field"])) in covered) if covered is not None else _named_in_text(finding, names[row["field"]])
                if hit:
                    chosen, backing = row, finding
                    break
            if chosen is not None:
                break
    if chosen is None:
        chosen = ranked.iloc[0]
    out = {k: chosen[k] for k in ("field", "current", "reference", "impact", "rank", "rationale", "flag")
           if k in ranked.columns}
    if backing is not None:
        out.update(evidence=backing.get("evidence"), test=backing.get("suggestion"),
                   finding=backing.get("finding"), confidence=backing.get("confidence"), supported=True)
        remedy = _remedy(backing)
        if remedy:
            out["changes"] = remedy
    else:
        out.update(evidence="no finding in the baseline's evidence names this field yet", supported=False,
                   test=f"relaunch with {out.get('flag') or out['field']} set as in the reference and rerun the sweep")
    return clean(out)


def restate_hypothesis(hypothesis: Mapping[str, Any], diff: pd.DataFrame, run_dir: str | Path, phase: str,
                       reference: Any = None) -> dict:
    """``hypothesis`` read again from ``phase``'s evidence as it stands now: once a step profile was
    taken beside the phase, the findings' forecast (and so the hypothesis's test) changes with it.
    The phase is diagnosed again (its ``findings.csv`` written anew) and the hypothesis those
    findings back is returned where it is about the same field; else ``hypothesis`` as it was."""
    findings = diagnose(run_dir, reference=reference, phase=phase)
    again = leading_hypothesis(diff, findings)
    return again if again.get("field") == hypothesis.get("field") else dict(hypothesis)
