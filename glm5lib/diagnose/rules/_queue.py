"""What the admission, per-step-limit and throughput rules share: the levels where requests queue
below the batch's limit."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pandas as pd

from glm5lib.diagnose.evidence import Evidence, _col
from glm5lib.diagnose.model.core import POOL_FULL


def held_at_cap(running: pd.Series, queue: pd.Series, cap: int) -> pd.Series:
    """The samples where the running cap holds requests back: the batch at the cap (within 3%: a
    sample lags a step) and more waiting than the cap's free slots. Running 250 with 6 waiting under a
    cap of 256 is a load the cap admits: what keeps those 6 waiting is elsewhere (the prefill budget,
    the KV pool)."""
    queue = queue.fillna(0)
    return (running >= cap - math.floor(0.03 * cap)) & (queue > 0) & (running + queue > cap)


def offered_load(ev: Evidence) -> int | None:
    """The highest load the sweep offered (concurrent requests), None without a sweep."""
    top = pd.to_numeric(ev.sweep_sorted()["concurrency"], errors="coerce").max()
    return int(top) if pd.notna(top) and top >= 1 else None


def levels_with_limit(ev: Evidence) -> Iterator[tuple[float | None, pd.DataFrame, int | None, float, pd.Series]]:
    """Each level's ``(concurrency, decode lines, cap, limit, running requests)``, where the limit
    is the smaller of the cap and the offered load; levels with neither are passed over."""
    cap, _ = ev.cap()
    for conc, lines in ev.level_decode():
        limit = min(c for c in (cap, conc) if c) if (cap or conc) else None
        if limit is None:
            continue
        yield conc, lines, cap, limit, _col(lines, "running_req")


def queued_below_limit(ev: Evidence, no_decode: str) -> tuple[float | None, pd.DataFrame, int | None] | None:
    """The highest offered level where requests queued while the batch stayed below its limit
    (cap or offered load) and the KV pool was not full: ``(concurrency, decode lines, cap)``.

    None when there is none; when there are no decode figures with running requests at all,
    ``no_decode`` (the rule's reason) goes to ``ev.skipped`` first."""
    if ev.active_decode().empty:
        ev.skipped.append(no_decode)
        return None
    for conc, lines, cap, limit, _running in levels_with_limit(ev):
        queued = _col(lines, "queue_req").fillna(0) > 0
        usage = _col(lines, "token_usage")
        if (
            ev.running(lines) < 0.9 * limit - 1
            and float(queued.mean()) >= 0.3
            and not float(usage.max()) >= POOL_FULL
        ):
            return conc, lines, cap
    return None
