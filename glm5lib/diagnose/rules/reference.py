"""Rules about the reference run: differences the evidence cannot rule out, in diff rank order."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from glm5lib import engines
from glm5lib.diagnose.diff import diff_configs
from glm5lib.diagnose.evidence import Evidence, Finding, _col

__all__ = ["rule_reference_diff"]


# Fields whose value is a number of GPUs the server spreads over: a reference value above the
# host's GPU count is not something this host can try.
_GPU_FIELDS = ("tp_size", "pp_size", "dp_size", "ep_size")
# Values longer than this are shown cut (SGLang 0.5.16 prints cuda_graph_config as ~1,000 characters).
_SHOWN_CHARS = 60


def shown(value: Any) -> str:
    """``repr(value)``, cut to a readable length."""
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "...)"


def host_gpus(ev: Evidence) -> int | None:
    """How many GPUs the measured host has, from the run's environment snapshot (None: unknown)."""
    env = ev.environment or {}
    gpus = env.get("gpus")
    if isinstance(gpus, list) and (gpus or env.get("source") in ("nvml", "sim")):
        return len(gpus)
    return None


def _beyond_host(field: str, reference: Any, ev: Evidence) -> str | None:
    """Why the host cannot do what the reference did, or None."""
    if field not in _GPU_FIELDS or not isinstance(reference, int) or isinstance(reference, bool):
        return None
    gpus = host_gpus(ev)
    if gpus is not None and reference > gpus:
        return f"this host has {gpus} GPU(s); {field} {reference} needs at least {reference}"
    return None


def _ruled_out(field: str, current: Any, reference: Any, ev: Evidence) -> str | None:
    """Why this run's evidence rules a difference out as the bottleneck, or None."""
    beyond = _beyond_host(field, reference, ev)
    if beyond:
        return beyond
    d = ev.active_decode()
    limit = engines.limit_of(field, ev.adapter())
    if limit == "running_cap" and isinstance(current, int) and not d.empty:
        top = int(_col(d, "running_req").max())
        if top < current - max(1, math.floor(0.03 * current)):
            return f"the cap was never reached (running requests at most {top} of {current})"
        if isinstance(reference, int) and current >= reference:
            return "this run already allows as many running requests as the reference"
    if (limit in ("kv_tokens", "kv_fraction") or field == "kv_cache_dtype") and not d.empty:
        peak = float(_col(d, "token_usage").max())
        if peak < 0.9 and ev.retractions.empty:
            return f"KV was never short (token usage at most {peak:.2f}, no retractions)"
    if limit == "graph_max_batch" and not d.empty and isinstance(current, int):
        top = int(_col(d, "running_req").max())
        if top <= current:
            return f"no decode batch exceeded it (largest {top})"
    if limit in ("stream_interval", "frontend_workers") and _more(current, reference):
        # a larger interval streams fewer chunks, more workers share them: the reference's value
        # loads the serving front end more, never less
        what = "streams fewer chunks per token" if limit == "stream_interval" else "runs more front-end processes"
        return f"this run {what} than the reference ({shown(current)} against {shown(reference)})"
    if (
        limit in ("token_budget", "prefill_chunk")
        and not d.empty
        and float(_col(d, "queue_req").fillna(0).max()) == 0
    ):
        return "no request ever waited in the queue"
    return None


def _more(current: Any, reference: Any) -> bool:
    try:
        return float(current) > float(reference)
    except (TypeError, ValueError):
        return False


def rule_reference_diff(ev: Evidence) -> list[Finding]:
    """Differences from the reference run the evidence cannot rule out, in diff rank order."""
    if not ev.reference_args:
        ev.skipped.append("reference_diff: no reference run given")
        return []
    if not ev.server_args:
        ev.skipped.append("reference_diff: this run's server arguments are unknown")
        return []
    diff = diff_configs(
        ev.server_args,
        ev.reference_args,
        hide_irrelevant=True,
        current_startup=ev.startup,
        reference_startup=ev.reference_startup,
    )
    context = {row["field"] for row in diff.attrs.get("context", [])}
    label = ev.reference_label or "the reference"
    out: list[Finding] = []
    ruled: list[tuple[str, str]] = []  # (field, why the evidence rules it out)
    minor: list[str] = []
    automatic: list[str] = []
    n = max(len(diff), 1)
    for _, row in diff.iterrows():
        field = row["field"]  # a setting: the model's identity is context, which the diff leaves out
        why = _ruled_out(field, row["current"], row["reference"], ev)
        if why:
            ruled.append((field, why))
        elif row["impact"] not in ("high", "medium"):
            minor.append(f"{field}={shown(row['current'])} vs {shown(row['reference'])}")
        elif row.get("automatic"):
            automatic.append(f"{field}: {shown(row['current'])} here, {shown(row['reference'])} there")
        else:
            out.append(_difference_finding(ev, row, label, n))
    # a switch with a known cost after those that cost nothing to try (stable: diff rank otherwise)
    out.sort(key=lambda f: -f.severity)
    out += _summary_findings(label, ruled, automatic, minor)
    if "model_path" in context | set(diff["field"]):
        for f in out:
            if f.rule == "reference_diff":
                f.evidence += (
                    f" (the reference runs another model, {ev.reference_args.get('model_path')!r})"
                )
    return out


def _difference_finding(ev: Evidence, row: pd.Series, label: str, n: int) -> Finding:
    """The finding of one difference the evidence cannot rule out (``row``: its row of the diff
    of ``n`` rows): its severity by impact and rank, halved where trying it has a known cost."""
    field = row["field"]
    severity = (0.5 if row["impact"] == "high" else 0.35) - 0.1 * (int(row["rank"]) - 1) / n
    cost = str(row.get("cost") or "")
    if field in _GPU_FIELDS and host_gpus(ev) is None:
        cost = ("the host's GPU count is unknown (no environment.json in the run folder: glm5 env --json > "
                "RUN/environment.json records it); try it only where the GPUs exist")
    if cost:
        # a switch with a known cost comes after the differences that cost nothing to try
        severity *= 0.5
    else:
        cost = "not forecast: measure it alone, one launch, before keeping it"
    ref_value = row["reference"]
    return Finding(
        finding=f"differs from {label}: {field} = {shown(row['current'])} here, {shown(ref_value)} there",
        evidence=f"diff rank {int(row['rank'])} ({row['impact']} impact): {row['rationale']}"
        + (f" [{row['resolved']}]" if row.get("resolved") else "")
        + "; not ruled out by this run's evidence; its cost: " + cost,
        suggestion=f"try {_try_it(row['flag'], ref_value)} (one change at a time, same sweep)",
        confidence=0.35,
        rule="reference_diff",
        severity=round(severity, 4),
        covers=(field,),
    )


def _try_it(flag: str, ref_value: Any) -> str:
    """How to try the reference's value: its switch on or off, or its flag with the value."""
    if isinstance(ref_value, bool):
        return flag if ref_value else f"without {flag}"
    return f"{flag} {ref_value}"


def _summary_findings(label: str, ruled: list[tuple[str, str]], automatic: list[str],
                      minor: list[str]) -> list[Finding]:
    """The findings that gather the differences ruled out (covering the fields ruled out, so that
    no hypothesis tests one), those chosen automatically on one side and the minor ones (each only
    where there are some)."""
    out: list[Finding] = []
    if ruled:
        out.append(
            Finding(
                finding=f"differences from {label} ruled out by the evidence",
                evidence="; ".join(f"{field} ({why})" for field, why in ruled),
                suggestion="no action: kept for the record",
                confidence=0.8,
                rule="reference_diff_ruled_out",
                severity=0.02,
                covers=tuple(field for field, _ in ruled),
            )
        )
    if automatic:
        out.append(
            Finding(
                finding=f"differences from {label} where one side was chosen automatically",
                evidence="None means SGLang picks the value at start, so these may not differ in the "
                "running servers: " + "; ".join(automatic),
                suggestion="compare the resolved values in the two servers' server_args log lines; set "
                "a flag explicitly only where the resolved values differ",
                confidence=0.3,
                rule="reference_diff_automatic",
                severity=0.15,
            )
        )
    if minor:
        out.append(
            Finding(
                finding=f"minor differences from {label}",
                evidence="low-impact arguments: "
                + "; ".join(minor[:12])
                + (" ..." if len(minor) > 12 else ""),
                suggestion="unlikely to explain a throughput gap; align them last",
                confidence=0.3,
                rule="reference_diff_minor",
                severity=0.1,
            )
        )
    return out
