"""Rules about failures: fatal errors in the server log and failed requests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from glm5lib.diagnose.evidence import Evidence, Finding, _col
from glm5lib.diagnose.knowledge import remedy

__all__ = ["rule_crashes"]

# what each fatal kind is called; the advice is a remedy by intent (remedies.json: crash_<kind>), in
# the engine's own flags
_CRASH_TITLES = {
    "nan": "server crashed: NaN in the logits",
    "oom_pool": "server failed: not enough memory for the KV pool",
    "oom": "server crashed: CUDA out of memory",
    "nccl": "server crashed: NCCL error",
    "health_check": "server stopped answering (watchdog)",
    "scheduler_exception": "server crashed: scheduler exception",
    "sigquit": "a server child process died",
    "other": "server logged a fatal error",
}


def rule_crashes(ev: Evidence) -> list[Finding]:
    """Fatal errors in the server log (NaN, OOM, NCCL, watchdog, exceptions) and failed requests."""
    out: list[Finding] = []
    e = ev.errors
    if e is not None and not e.empty and "kind" in e:
        kinds = e.copy()
        msg = kinds.get("message", pd.Series("", index=kinds.index)).fillna("").astype(str)
        kinds["key"] = kinds["kind"].astype(str)
        kinds.loc[
            (kinds["key"] == "oom") & msg.str.contains("Not enough memory", case=False), "key"
        ] = "oom_pool"
        # sigquit and scheduler_exception accompany a more specific cause: report them only alone
        specific = set(kinds["key"]) - {"sigquit", "scheduler_exception", "other"}
        for key, group in kinds.groupby("key", sort=False):
            if key in ("sigquit", "scheduler_exception", "other") and specific:
                continue
            kind = key if key in _CRASH_TITLES else "other"
            title = _CRASH_TITLES[kind]
            first = group.iloc[0]
            ranks = group["rank"].dropna().nunique() if "rank" in group else 0
            when = f" at {first['time']}" if "time" in group and pd.notna(first.get("time")) else ""
            evidence = f"{len(group)} line(s){when}"
            if ranks:
                evidence += f" on {ranks} rank(s)"
            evidence += f": {str(first.get('message') or first.get('text') or '').strip()[:200]!r}"
            out.append(
                Finding(
                    finding=title,
                    evidence=evidence,
                    suggestion=str(remedy(f"crash_{kind}", ev.engine, release=ev.release, lookup=ev.arg)
                                   or remedy("crash_other", ev.engine)),
                    confidence=0.95,
                    rule=f"crash:{key}",
                    severity=1.0,
                )
            )
    s = ev.sweep_sorted()
    if not s.empty and "failed" in s:
        failed = _col(s, "failed").fillna(0)
        bad = s[failed > 0]
        if len(bad):
            summary = "; ".join(
                f"{int(r['failed'])} at concurrency {int(r['concurrency'])}"
                + (
                    f" ({str(r['error_summary'])[:120]})"
                    if pd.notna(r.get("error_summary", np.nan)) and str(r.get("error_summary"))
                    else ""
                )
                for _, r in bad.iterrows()
            )
            out.append(
                Finding(
                    finding="requests failed during the sweep",
                    evidence=f"{int(failed.sum())} failed requests: {summary}",
                    suggestion="failures distort throughput and latency: fix their cause (see the server log) before comparing levels",
                    confidence=0.9,
                    rule="request_errors",
                    severity=0.65,
                )
            )
    return out


