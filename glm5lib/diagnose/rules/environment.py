"""Rules about the environment: known flag/hardware incompatibilities."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from glm5lib.diagnose.evidence import Evidence, Finding
from glm5lib.diagnose.knowledge import load_incompatibilities
from glm5lib.diagnose.references import norm

__all__ = ["rule_incompatibilities"]


def _gpu_ccs(env: Mapping[str, Any]) -> list[str]:
    ccs = []
    for g in env.get("gpus") or []:
        cc = g.get("compute_capability")
        if not cc:
            name = str(g.get("name", ""))
            if re.search(r"RTX PRO \d+ Blackwell|RTX 50\d0", name):
                cc = "12.0"
        if cc:
            ccs.append(str(cc))
    return ccs


def _p2p_ok(env: Mapping[str, Any]) -> bool | None:
    matrix = env.get("p2p")
    if not matrix:
        return None
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            if i != j and str(v).upper() != "OK":
                return False
    return True


def _p2p_summary(env: Mapping[str, Any]) -> str:
    matrix = env.get("p2p") or []
    pairs = [str(v) for i, row in enumerate(matrix) for j, v in enumerate(row) if i < j]
    bad = [v for v in pairs if v.upper() != "OK"]
    if not bad:
        return f"GPU P2P OK on all {len(pairs)} pairs"
    kinds = ", ".join(sorted(set(bad)))
    return f"GPU P2P not available on {len(bad)} of {len(pairs)} pairs (status {kinds})"


def _line_around(text: str, start: int, end: int) -> str:
    """The whole line of ``text`` holding the span start:end."""
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    return text[first : last if last >= 0 else len(text)]


def _matches(value: Any, want: Any) -> bool:
    if isinstance(want, list):
        return any(norm(value) == norm(w) for w in want)
    return norm(value) == norm(want)


def rule_incompatibilities(ev: Evidence) -> list[Finding]:
    """Known flag/hardware incompatibilities (data/knowledge/incompatibilities.json)."""
    out = []
    env = ev.environment
    env_known = bool(env) and env.get("source") != "unavailable"
    for entry in load_incompatibilities():
        when = entry.get("when") or {}
        if not ev.server_args and when:
            continue
        if not all(_matches(ev.arg(f), v) for f, v in when.items()):
            continue
        if entry.get("log_pattern"):
            m = re.search(entry["log_pattern"], ev.log_text or "")
            if not m:
                continue
            line = _line_around(ev.log_text, m.start(), m.end())
        else:
            line = None
        confidence = 0.85
        facts = [", ".join(f"{f}={ev.arg(f)!r}" for f in when)] if when else []
        ccs_wanted = entry.get("compute_capability")
        if ccs_wanted:
            if not env_known:
                confidence = 0.3
                facts.append(
                    "no environment snapshot, so the GPU architecture could not be checked"
                )
            else:
                ccs = _gpu_ccs(env)
                hit = sorted({c for c in ccs if c in ccs_wanted})
                if not hit:
                    continue
                names = sorted({str(g.get("name", "?")) for g in env.get("gpus") or []})
                facts.append(
                    f"{len(ccs)}x {', '.join(names)} (compute capability {', '.join(hit)})"
                )
        env_cond = entry.get("environment") or {}
        if env_cond:
            if not env_known:
                continue
            if "p2p_ok" in env_cond:
                ok = _p2p_ok(env)
                if ok is None or ok != env_cond["p2p_ok"]:
                    continue
                facts.append(_p2p_summary(env))
            n_gpus = len(env.get("gpus") or [])
            if n_gpus < int(env_cond.get("min_gpus", 0)):
                continue
        if line is not None:
            facts.append(f"log line: {line.strip()[:200]!r}")
        evidence = "; ".join(facts)
        if entry.get("effect"):
            evidence += f": {entry['effect']}" if evidence else entry["effect"]
        out.append(
            Finding(
                finding=entry["title"],
                evidence=evidence + f" [source: {entry['source']}]",
                suggestion=entry["suggestion"],
                confidence=confidence,
                rule=f"incompatibility:{entry['id']}",
                severity=float(entry["severity"]),
                covers=tuple(when),
            )
        )
    return out


