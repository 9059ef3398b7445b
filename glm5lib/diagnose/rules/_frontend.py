"""The serving front end as the limit: the process that parses, tokenizes and streams, busy on its
one core while the engine generates tokens faster than they reach the client. Read by the
``underfed`` rule (its finding) and by ``saturation`` (which then does not blame the kernels)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from glm5lib.diagnose.evidence import Evidence, _col
from glm5lib.diagnose.model.levels import full_batch, processes

__all__ = ["frontend_at"]

# the serving process's share of its one core from which it counts as busy
_FRONTEND_BUSY_PCT = 90.0
# the engine made tokens this much faster than the client received them
_FRONTEND_GAP = 1.25


def frontend_at(ev: Evidence, conc: float, lines: pd.DataFrame,
                sweep: pd.DataFrame | None = None) -> tuple[str, float, float, float] | None:
    """``(process, % of a core, decode lines' tok/s, client tok/s)`` where a level's serving process
    (one that parses, tokenizes and streams: the engine adapter's first serving role, not the
    scheduler, which polls a core whether busy or not) was busy on its core and the engine generated
    tokens faster than they reached the client (its decode lines' rate at the level's fullest batch).
    ``sweep``: the evidence's sorted sweep, where the caller already has it."""
    s = ev.sweep_sorted() if sweep is None else sweep
    roles: Sequence[Any] = ev.adapter().capabilities.serving_roles
    if s.empty or "other_processes" not in s or "gen_throughput" not in lines or not roles:
        return None
    row = s[_col(s, "concurrency") == conc]
    if row.empty:
        return None
    row = row.iloc[0]
    serving = [(who, pct) for who, pct in processes(row.get("other_processes")) if roles[0].matches(who)]
    best = max(serving, key=lambda wp: wp[1], default=None)
    if best is None or best[1] < _FRONTEND_BUSY_PCT:
        return None
    # the engine's rate while its batch was full: what it could generate when fed (over the whole
    # level it also idles while the front end is late to bring new requests)
    made = float(_col(full_batch(lines), "gen_throughput").median())
    got = float(row.get("output_throughput", np.nan))
    if not (np.isfinite(made) and np.isfinite(got) and got > 0 and made >= _FRONTEND_GAP * got):
        return None
    return best[0], best[1], made, got
