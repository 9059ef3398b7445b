"""The diagnosis rules, by theme, and :func:`evaluate`, which applies them to an Evidence bundle.

Each rule is a function ``Evidence -> list[Finding]``; a rule that lacks the data it needs
appends the reason to ``Evidence.skipped`` and returns nothing. A new rule goes in the module of
its theme and into :data:`RULES`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

import pandas as pd

from glm5lib import engines
from glm5lib.diagnose.evidence import FINDING_COLUMNS, Evidence, Finding
from glm5lib.diagnose.rules.admission import (
    rule_admission_reserve,
    rule_dp_imbalance,
    rule_prefill_budget,
    rule_retraction_churn,
    rule_underfed,
)
from glm5lib.diagnose.rules.batch import (
    rule_concurrency_cap,
    rule_cuda_graph,
    rule_kv_capacity,
    rule_prefill_graph,
)
from glm5lib.diagnose.rules.crashes import rule_crashes
from glm5lib.diagnose.rules.environment import rule_incompatibilities
from glm5lib.diagnose.rules.limits import rule_load_bound, rule_token_budget
from glm5lib.diagnose.rules.phases import rule_tradeoff
from glm5lib.diagnose.rules.reference import rule_reference_diff
from glm5lib.diagnose.rules.throughput import rule_client_bound, rule_gpu_underused, rule_saturation

__all__ = [
    "CAVEAT_RULES",
    "RULES",
    "evaluate",
    "rule_admission_reserve",
    "rule_client_bound",
    "rule_concurrency_cap",
    "rule_crashes",
    "rule_cuda_graph",
    "rule_dp_imbalance",
    "rule_gpu_underused",
    "rule_incompatibilities",
    "rule_kv_capacity",
    "rule_load_bound",
    "rule_prefill_budget",
    "rule_prefill_graph",
    "rule_reference_diff",
    "rule_retraction_churn",
    "rule_saturation",
    "rule_token_budget",
    "rule_tradeoff",
    "rule_underfed",
]

# Findings about how far the measurement can be trusted, not about what limits the server.
CAVEAT_RULES = frozenset({"client_starved"})

RULES: list[Callable[[Evidence], list[Finding]]] = [
    rule_crashes,
    rule_concurrency_cap,
    rule_kv_capacity,
    rule_cuda_graph,
    rule_prefill_graph,
    rule_admission_reserve,
    rule_prefill_budget,
    rule_token_budget,
    rule_retraction_churn,
    rule_underfed,
    rule_load_bound,
    rule_dp_imbalance,
    rule_saturation,
    rule_gpu_underused,
    rule_client_bound,
    rule_tradeoff,
    rule_incompatibilities,
    rule_reference_diff,
]


def evaluate(
    ev: Evidence, rules: Iterable[Callable[[Evidence], list[Finding]]] | None = None
) -> pd.DataFrame:
    """Apply the rules to an :class:`Evidence` bundle; findings most important first.

    A reference difference already explained by an evidence-backed finding (same field) is
    dropped. ``frame.attrs["skipped"]`` lists rules that lacked the data they need.
    """
    findings: list[Finding] = []
    for rule in rules if rules is not None else RULES:
        findings.extend(rule(ev))
    # a finding covers limits by their neutral names, a reference difference the engine's field
    # (the ruled-out differences are a reference finding too: they explain nothing)
    covered = {engines.topic(c) for f in findings if not f.rule.startswith("reference_diff") for c in f.covers}
    findings = [f for f in findings
                if not (f.rule == "reference_diff" and {engines.topic(c) for c in f.covers} & covered)]
    rows = [
        {
            "finding": f.finding,
            "evidence": f.evidence,
            "suggestion": f.suggestion,
            "confidence": round(f.confidence, 2),
            "rule": f.rule,
            "severity": f.severity,
            "score": f.score,
            "prediction": f.prediction.text if f.prediction else None,
            "predicted_concurrency": f.prediction.concurrency if f.prediction else None,
            "predicted_throughput": round(f.prediction.throughput, 1) if f.prediction else None,
            "predicted_low": round(f.prediction.low, 1) if f.prediction else None,
            "predicted_high": round(f.prediction.high, 1) if f.prediction else None,
            "predicted_given": f.prediction.given if f.prediction else None,
            "measured_throughput": (
                round(f.prediction.measured, 1) if f.prediction and f.prediction.measured else None
            ),
            "covers": " ".join(f.covers),
            "remedy": json.dumps(f.prediction.changes, sort_keys=True) if f.prediction and f.prediction.changes else None,
        }
        for f in findings
    ]
    frame = pd.DataFrame(rows, columns=FINDING_COLUMNS)
    # caveats on the measurement come after every cause, whatever their score
    caveat = frame["rule"].isin(CAVEAT_RULES)
    frame = (
        frame.assign(_caveat=caveat)
        .sort_values(["_caveat", "score", "severity"], ascending=[True, False, False], kind="stable")
        .drop(columns="_caveat")
        .reset_index(drop=True)
    )
    frame.attrs["skipped"] = list(ev.skipped)
    frame.attrs["source"] = ev.source
    frame.attrs["standin"] = ev.standin
    return frame

