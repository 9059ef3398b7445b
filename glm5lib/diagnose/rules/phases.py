"""Rules comparing a phase with the one it changed: trade-offs, never plain gains.

A change (the fix phase against the baseline) can raise throughput at some levels and lower it
at others, or raise it while time to first token or time per output token blow up (a larger
token budget stalls the running decodes behind long prefills). Each is reported with its
numbers per level. A level that never reached steady state is read whole (tokens over the
level's length), marked "not steady", never as 0 tok/s when tokens streamed.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from glm5lib.diagnose.evidence import Evidence, Finding, _num, _num_or_nan, level_throughput

__all__ = ["level_throughput", "rule_tradeoff"]

# A level faster or slower by this factor has moved; a latency this many times larger blew up.
_MOVED = 1.1
_BLEW_UP = 2.0
# ... and by at least this many milliseconds (a 0.5 -> 1.2 ms move is noise, not a cost).
_MIN_LATENCY_RISE_MS = 20.0


def _latency(row: dict[str, Any], name: str) -> float:
    return _num_or_nan(row, f"median_{name}_ms")


def rule_tradeoff(ev: Evidence) -> list[Finding]:
    """The change helped some levels and hurt others, or bought throughput with latency."""
    # the sweeps as recorded: level_throughput reads each level's steadiness itself
    before, after = ev.before_sweep, ev.sweep
    if (before is None or before.empty or after is None or after.empty
            or "concurrency" not in before or "concurrency" not in after):
        ev.skipped.append("tradeoff: no earlier phase to compare with")
        return []
    before = before.assign(concurrency=pd.to_numeric(before["concurrency"], errors="coerce"))
    after = after.assign(concurrency=pd.to_numeric(after["concurrency"], errors="coerce")).sort_values("concurrency")
    label = ev.before_label or "the earlier phase"
    levels = []
    for _, a in after.iterrows():
        rows = before[before["concurrency"] == a["concurrency"]]
        if rows.empty:
            continue
        b = rows.iloc[-1].to_dict()
        a = a.to_dict()
        tb, nb = level_throughput(b)
        ta, na = level_throughput(a)
        if not (tb > 0 and ta > 0):
            continue
        lat = {k: (_latency(b, k), _latency(a, k)) for k in ("ttft", "tpot")}
        levels.append({"conc": int(a["concurrency"]), "before": tb, "after": ta, "gain": ta / tb,
                       "notes": [n for n in (nb and f"{label} {nb}", na and f"after the change {na}") if n],
                       "lat": lat})
    if not levels:
        return []
    up = [x for x in levels if x["gain"] >= _MOVED]
    down = [x for x in levels if x["gain"] <= 1 / _MOVED]
    costly = []
    for x in up:
        for k, (lb, la) in x["lat"].items():
            if lb > 0 and la >= _BLEW_UP * lb and la - lb >= _MIN_LATENCY_RISE_MS:
                costly.append((x, k, lb, la))
    unsteady = [x for x in levels if x["notes"]]
    if not ((up and down) or costly or (unsteady and (up or down))):
        return []
    parts = []
    for x in levels:
        text = (f"at {x['conc']}: {_num(x['before'])} -> {_num(x['after'])} tok/s ({x['gain']:.2f}x)")
        lat = [f"{k.upper()} {_num(lb)} -> {_num(la)} ms" for k, (lb, la) in x["lat"].items()
               if lb > 0 and la > 0]
        if lat:
            text += ", median " + ", ".join(lat)
        if x["notes"]:
            text += " [" + "; ".join(x["notes"]) + "]"
        parts.append(text)
    if up and down:
        finding = (f"trade-off: the change raised throughput at {len(up)} level(s) and lowered it at "
                   f"{len(down)} of {len(levels)}")
    elif costly:
        x, k, lb, la = max(costly, key=lambda c: c[3] / c[2])
        finding = (f"trade-off: the change raised throughput (up to {max(y['gain'] for y in up):.2f}x) while median "
                   f"{k.upper()} rose {la / lb:.1f}x at {x['conc']} ({_num(lb)} -> {_num(la)} ms)")
    else:
        finding = "trade-off: levels that never reached steady state make the change's effect uncertain"
    suggestion = (
        "weigh the gain against its cost before keeping the change: pick the setting by the latency goal "
        "(a larger token budget admits prompts faster but stalls running decodes behind each prefill, so TPOT "
        "rises; a higher cap queues less but makes each step longer), or choose a value between the two phases'"
    )
    if unsteady:
        suggestion += "; rerun the levels marked not steady for longer before reading their gain"
    return [
        Finding(
            finding=finding,
            evidence=f"against {label}, per level: " + "; ".join(parts),
            suggestion=suggestion,
            confidence=0.85 if (up and down) or costly else 0.6,
            rule="tradeoff",
            # about the change, not the next bottleneck: listed with its numbers, below the limits found
            severity=0.25,
        )
    ]
