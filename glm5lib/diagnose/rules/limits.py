"""Rules naming the scheduler limit from per-step evidence, on engines that log no prefill lines.

* token budget: the engine takes at most a budget of tokens per step (vLLM's
  ``max_num_batched_tokens``, SGLang's ``chunked_prefill_size``); decodes take one token each,
  prompts the rest. With prompts of P tokens and outputs of O tokens, a running batch of N needs
  about N x (1 + P / O) tokens per step to keep its size, so a budget B sustains a batch of about
  B x O / (O + P): requests queue below the cap while the KV pool stays nearly empty. The
  evidence is the start-up arguments (the budget), the running and queued gauges per level, and,
  where the engine exports it, its histogram of tokens per step (vLLM's
  ``iteration_tokens_total``).
* load offered: every request offered runs, none queues, below the cap and the KV pool: the
  server is not the limit at this load; the question is how far it scales.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from glm5lib.diagnose.evidence import (
    Evidence,
    Finding,
    _col,
    _num,
    _pct,
    logs_prefill_lines,
    samples_text,
    token_budget_field,
)
from glm5lib.diagnose.model import predict_remedy
from glm5lib.diagnose.model.core import POOL_FULL
from glm5lib.diagnose.rules._queue import queued_below_limit
from glm5lib.diagnose.rules.admission import budget_remedy

__all__ = ["budget_arithmetic", "rule_load_bound", "rule_token_budget"]


def _power_of_two_above(x: float) -> int:
    return int(2 ** math.ceil(math.log2(max(2.0, x))))


def budget_arithmetic(budget: float, prompt: float, output: float, running: float) -> dict[str, float]:
    """What a per-step token budget allows: ``room`` (tokens left for prompts beside ``running``
    decodes), ``steps_per_admission`` (steps one prompt needs), ``sustained`` (the running batch
    the budget keeps: ``budget x output / (output + prompt)``)."""
    room = max(budget - running, 1.0)
    return {
        "room": room,
        "steps_per_admission": prompt / room,
        "sustained": budget * output / (output + prompt),
    }


def _level_row(ev: Evidence, conc: float | None) -> dict[str, Any]:
    s = ev.sweep_sorted()
    if conc is None or s.empty:
        return {}
    rows = s[s["concurrency"] == conc]
    return rows.iloc[-1].to_dict() if len(rows) else {}


def _output_tokens(ev: Evidence, level: dict[str, Any]) -> float | None:
    for key in ("output_len",):
        v = pd.to_numeric(pd.Series([level.get(key)]), errors="coerce").iloc[0]
        if pd.notna(v) and v > 0:
            return float(v)
    v, _ = ev.requested_max_tokens()
    return v


def rule_token_budget(ev: Evidence) -> list[Finding]:
    """Requests queue below the cap with the KV pool nearly empty because the per-step token
    budget admits prompts too slowly: named from the budget, the gauges and the step counts."""
    if logs_prefill_lines(ev) and ev.prefill is not None and not ev.prefill.empty:
        return []  # the prefill lines are the denser evidence: rule_prefill_budget reads them
    budget, bsrc = ev.token_budget()
    if budget is None:
        ev.skipped.append(f"token_budget: the engine's {token_budget_field(ev)} is unknown")
        return []
    held = queued_below_limit(ev, "token_budget: no running/queued figures (decode lines or /metrics gauges)")
    if held is None:
        return []
    conc, lines, cap = held
    level = _level_row(ev, conc)
    prompt, psrc = ev.prompt_tokens(level or None)
    output = _output_tokens(ev, level)
    if not prompt or not output:
        ev.skipped.append("token_budget: prompt or output tokens per request unknown")
        return []
    limit = min(c for c in (cap, conc) if c)
    running = ev.running(lines)
    peak = float(_col(lines, "running_req").max())
    queue = _col(lines, "queue_req").fillna(0)
    usage = _col(lines, "token_usage")
    math_ = budget_arithmetic(budget, prompt, output, running)
    steps = ev.steps_in_level(level) if level else None
    if steps is not None:
        if steps["mean"] < 0.5 * budget:
            return []  # the steps ran well below the budget: it is not what holds requests back
    elif not (math_["sustained"] < 0.9 * limit and running <= 1.5 * math_["sustained"] + 1):
        return []
    parts = [
        f"{_level_text(conc)} running requests stayed at a median {_num(running)} (peak {_num(peak)}) of a limit of "
        f"{int(limit)} (cap or offered load) while queued requests averaged {_num(float(queue.mean()))} "
        f"(peak {int(queue.max())}) and KV usage peaked at {float(usage.max()):.2f} ({samples_text(lines)})",
        f"each engine step may take {budget:,} tokens ({bsrc}); a request brings {prompt:,.0f} prompt tokens "
        f"({psrc}) and generates {output:,.0f}: beside {_num(running)} decodes a step has {math_['room']:,.0f} "
        f"tokens for prompts, so admitting one request takes {math_['steps_per_admission']:.1f} steps, and the "
        f"budget sustains about {budget:,} x {output:,.0f} / ({output:,.0f} + {prompt:,.0f}) = "
        f"{math_['sustained']:.1f} running requests",
    ]
    confidence = 0.6
    if steps is not None:
        parts.append(
            f"the engine's per-step token counts (/metrics): {steps['steps']:,.0f} steps in the level took "
            f"{steps['tokens']:,.0f} tokens, {steps['mean']:,.0f} per step on average "
            f"({_pct(steps['mean'] / budget)} of the budget)"
        )
        confidence = 0.8 if steps["mean"] >= 0.75 * budget else 0.65
    needed = limit * (output + prompt) / output
    value = _power_of_two_above(needed)
    budget_field = token_budget_field(ev)
    now = {budget_field: f"{budget:,}"} if ev.arg(budget_field) is None and ev.adapter().capabilities.mixed_steps else {}
    suggestion = budget_remedy(ev, value, **now)
    tpot = pd.to_numeric(pd.Series([level.get("median_tpot_ms")]), errors="coerce").iloc[0] if level else None
    suggestion += (
        f": {int(limit)} running requests need about {int(limit)} x ({output:,.0f} + {prompt:,.0f}) / "
        f"{output:,.0f} = {needed:,.0f} tokens per step. The known cost: a step then carries up to "
        f"{value:,} prompt tokens beside the decodes, so each decode waits for that prefill and TPOT "
        "rises while prompts are admitted"
        + (f" (median TPOT here {float(tpot):.1f} ms; compare the change's)" if tpot is not None and pd.notna(tpot) else "")
        + "; a level too short to admit every prompt never reaches steady state"
    )
    return [
        Finding(
            finding=(
                f"token budget: {budget:,} tokens per step admit prompts of {prompt:,.0f} tokens too slowly "
                f"for {int(limit)} running requests"
            ),
            evidence="; ".join(parts),
            suggestion=suggestion,
            confidence=confidence,
            rule="token_budget",
            prediction=predict_remedy(ev, cap, "with a token budget that keeps up"),
            severity=0.85,
            covers=("token_budget", "prefill_chunk"),
        )
    ]


def _level_text(conc: float | None) -> str:
    return f"at concurrency {int(conc)}" if conc else "over the whole log"


def rule_load_bound(ev: Evidence) -> list[Finding]:
    """The running batch equals the load offered with nothing queued, below the cap and the KV
    pool: the server keeps up with this load, and the next question is how far it scales."""
    levels = [(c, lines) for c, lines in ev.level_decode() if c]
    if not levels:
        ev.skipped.append("load_bound: needs running/queued figures inside sweep levels")
        return []
    conc, lines = levels[0]  # the highest offered level with figures
    cap, cap_src = ev.cap()
    running = _col(lines, "running_req")
    queue = _col(lines, "queue_req").fillna(0)
    usage = _col(lines, "token_usage")
    if cap and cap <= conc:
        return []  # the cap is at or below the load: the cap rule's question
    med, peak = ev.running(lines), float(running.max())
    if not (peak >= conc - max(1, 0.05 * conc) and med >= 0.75 * conc):
        return []
    # a closed loop's replacements queue for a step or two as requests end: only a standing queue counts
    if float(queue.median()) > 0 or float(queue.mean()) > 0.1 * conc or float(usage.max()) >= POOL_FULL:
        return []
    parts = [
        f"at concurrency {int(conc)}, the highest level, running requests ran a median {_num(med)} (peak "
        f"{_num(peak)}) of the {int(conc)} requests offered, queued requests 0 on "
        f"{_pct(float((queue == 0).mean()))} of {samples_text(lines)} (mean {_num(float(queue.mean()))}), "
        f"KV usage at most {float(usage.max()):.2f}"
    ]
    if cap:
        parts.append(f"the cap of {cap} ({cap_src}) is {cap / conc:.1f}x the load")
    else:
        parts.append("no running-request cap is known")
    s = ev.sweep_sorted()
    if len(s) >= 2 and "output_throughput" in s:
        lo, hi = s.iloc[0], s.iloc[-1]
        parts.append(
            f"output throughput {_num(float(lo['output_throughput']))} tok/s at {int(lo['concurrency'])} -> "
            f"{_num(float(hi['output_throughput']))} at {int(hi['concurrency'])}"
        )
    upper = [c for c in (cap, 4 * int(conc)) if c]
    target = int(min(upper))
    return [
        Finding(
            finding="the load offered is the limit: every request offered ran, none queued",
            evidence="; ".join(parts),
            suggestion=(
                f"the server kept up with {int(conc)} concurrent requests, so this run does not show its "
                f"limit; the question is how far it scales: sweep higher concurrencies (up to about {target}) "
                "until the running batch stops following the load or requests queue"
            ),
            confidence=0.8,
            rule="load_bound",
            # a question more than a cause: any inefficiency the server shows at this load ranks above it
            severity=0.3,
        )
    ]
