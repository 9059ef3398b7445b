"""Config diff: every server argument that differs from a reference, ranked by impact."""

from __future__ import annotations

from typing import Any

import pandas as pd

from glm5lib.diagnose.knowledge import IMPACT_ORDER, load_impact
from glm5lib.diagnose.references import arg, config_defaults, flag_of, resolve_server_args
from glm5lib.masking import mask_value

__all__ = ["DIFF_COLUMNS", "diff_configs"]

DIFF_COLUMNS = [
    "field",
    "current",
    "reference",
    "impact",
    "rank",
    "rationale",
    "flag",
    "automatic",
]


def diff_configs(current: Any, reference: Any, hide_irrelevant: bool = False) -> pd.DataFrame:
    """Every server argument that differs between ``current`` and ``reference``, ranked by impact.

    Returns a DataFrame with columns ``field, current, reference, impact, rank, rationale, flag``
    (rank 1 = most able to move throughput). Fields that never matter for throughput come last,
    or are dropped when ``hide_irrelevant`` is true. Secrets are shown as ``***``.
    """
    cur, _ = resolve_server_args(current)
    ref, _ = resolve_server_args(reference)
    impact = load_impact()
    rows = []
    for field in sorted(set(cur) | set(ref)):
        a, b = arg(cur, field), arg(ref, field)
        if a == b:
            continue
        entry = impact.get(field, {})
        cls = entry.get("impact", "unknown")
        if hide_irrelevant and cls == "none":
            continue
        rationale = entry.get("rationale", "not in the impact table: check SGLang's documentation")
        # None where SGLang's default is None means "chosen at start": the values may not differ.
        auto = [side for side, v in (("current", a), ("reference", b)) if v is None]
        automatic = bool(auto) and config_defaults().get(field, None) is None
        if automatic:
            rationale += (
                f" ({auto[0]}: None = chosen automatically at start, so the running values may agree;"
                " compare the resolved value in that server's log)"
            )
        rows.append(
            {
                "field": field,
                "current": mask_value(field, a),
                "reference": mask_value(field, b),
                "impact": cls,
                "rationale": rationale,
                "flag": flag_of(field),
                "automatic": automatic,
                "_order": (IMPACT_ORDER[cls], automatic, -float(entry.get("weight", 0)), field),
            }
        )
    rows.sort(key=lambda r: r["_order"])
    frame = pd.DataFrame(rows, columns=[*DIFF_COLUMNS, "_order"]).drop(columns="_order")
    frame["rank"] = range(1, len(frame) + 1)
    return frame[DIFF_COLUMNS].reset_index(drop=True)

