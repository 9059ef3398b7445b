"""Rules for why the running batch stays below the offered load, besides the cap and a full pool.

Each reads the evidence schema only (decode and prefill tables, retractions, start-up facts,
the sweep), so it holds for any engine whose adapter fills them; remedies come from
``data/knowledge/remedies.json`` in the evidence's engine's own flags.

* admission reserve: SGLang admits a request only if the pool can hold its prompt plus
  ``min(max_new_tokens, 4096) x new_token_ratio`` for it and for every running request
  (``PrefillAdder``; the ratio starts at ``0.7 x schedule_conservativeness`` and decays to 0.14 of
  that over 600 decode steps), so requests wait while token usage is low;
* prefill budget: every prefill batch takes the whole budget (chunked_prefill_size /
  max_prefill_tokens; vLLM's max_num_batched_tokens) while requests queue;
* retraction churn: requests sent back to the queue and prefilled again, over and over;
* under-fed server: the batch stays below the offered load with nothing queued, so requests are
  not reaching the scheduler (the client, the HTTP front end or the tokenizer);
* data-parallel imbalance: one DP rank runs a full batch while another idles.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

from glm5lib.diagnose.evidence import (
    Evidence,
    Finding,
    _bool_col,
    _col,
    _num,
    _pct,
)
from glm5lib.diagnose.knowledge import remedy
from glm5lib.diagnose.model import predict_remedy
from glm5lib.diagnose.model.core import POOL_FULL, PREFILL_FULL, reserve_scale
from glm5lib.diagnose.model.levels import as_float
from glm5lib.diagnose.model.queries import model_of
from glm5lib.diagnose.rules._frontend import frontend_at
from glm5lib.diagnose.rules._queue import offered_load, queued_below_limit

__all__ = [
    "budget_remedy",
    "rule_admission_reserve",
    "rule_dp_imbalance",
    "rule_prefill_budget",
    "rule_retraction_churn",
    "rule_underfed",
]

# SGLang's constants (scheduler.py / schedule_policy.py, 0.5.x).
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
CLIP_MAX_NEW_TOKENS = 4096
# A prefill budget at or below this many tokens leaves the prefill kernels under-filled.
_SMALL_PREFILL_BUDGET = 2048


def _conservativeness(ev: Evidence) -> float:
    """The scale of the admission's reserve (SGLang's schedule_conservativeness; 1 by default)."""
    return reserve_scale(ev.limits().admission_reserve)


def _reserve_field(ev: Evidence) -> str:
    return ev.adapter().capabilities.field("admission_reserve") or "admission reserve scale"


def _prefill_at_budget(ev: Evidence) -> tuple[float, int, int, int | None, str]:
    """(share of prefill batches that took the whole budget, how many, of how many, budget, source)."""
    budget, src = ev.prefill_budget()
    p = ev.prefill
    if budget is None or p is None or p.empty or "new_token" not in p:
        return 0.0, 0, 0, budget, src
    new = _col(p, "new_token").dropna()
    if new.empty:
        return 0.0, 0, 0, budget, src
    if float(new.max()) > 1.05 * budget:
        # Batches larger than the smaller limit: a build may let the token budget bound a batch
        # of whole prompts and the prefill chunk only the prompt it cuts.
        lim = ev.limits()
        larger = max((v for v in (lim.token_budget, lim.prefill_chunk) if v), default=None)
        named = lim.name("token_budget") if larger == lim.token_budget else lim.name("prefill_chunk")
        if isinstance(larger, (int, float)) and larger >= new.max():
            budget, src = int(larger), f"{named} (batches exceed the smaller limit)"
        else:
            budget, src = int(new.max()), "the largest prefill batch in the log"
    full = new >= PREFILL_FULL * budget
    return float(full.mean()), int(full.sum()), len(new), budget, src


def _count(x: float) -> str:
    return f"{x:,.0f}"


def _level_text(conc: float | None) -> str:
    return f"at concurrency {int(conc)}" if conc else "over the whole log"


def rule_admission_reserve(ev: Evidence) -> list[Finding]:
    """Requests wait while KV usage is low: the admission reserve for future tokens fills the pool."""
    adapter = ev.adapter()
    if not adapter.capabilities.reserves_future_tokens:
        ev.skipped.append(f"admission_reserve: {adapter.title} reserves no future tokens when it admits a request")
        return []
    held = queued_below_limit(ev, "admission_reserve: no decode lines with running requests")
    if held is None:
        return []
    share, n_full, _, _, _ = _prefill_at_budget(ev)
    if n_full >= 3 and share >= 0.5:
        return []  # every prefill batch is full: the prefill budget rule explains it
    conc, lines, cap = held
    running = ev.running(lines)
    queue = float(_col(lines, "queue_req").fillna(0).mean())
    usage = float(_col(lines, "token_usage").mean())
    c = _conservativeness(ev)
    r_init = min(INIT_NEW_TOKEN_RATIO * c, 1.0)
    r_min = r_init * MIN_NEW_TOKEN_RATIO_FACTOR
    if not ev.retractions.empty and "new_token_ratio_after" in ev.retractions:
        after = _col(ev.retractions, "new_token_ratio_after").dropna()
        if len(after):
            r_init = max(r_init, float(after.max()))
    pool, pool_src = ev.kv_pool_tokens()
    max_new, max_src = ev.requested_max_tokens()
    parts = [
        f"{_level_text(conc)} running requests stayed at a median {_count(running)}"
        + (f", below the cap of {cap}" if cap else "")
        + f", while queued requests averaged {_num(queue)} and token usage only {usage:.2f}"
    ]
    confidence = 0.45
    target = int(min(c_ for c_ in (cap, conc) if c_)) if (cap or conc) else int(running * 2)
    value = round(max(0.05, 0.5 * c), 2)
    if pool and max_new:
        m = min(max_new, CLIP_MAX_NEW_TOKENS)
        free = pool * (1.0 - usage)
        lo, hi = running * m * r_min, running * m * r_init
        parts.append(
            f"SGLang admits a request only if the KV pool also holds min(max_new_tokens, 4096) x "
            f"new_token_ratio for it and for each running request: {_count(running)} running x {m:,.0f} "
            f"max tokens ({max_src}) x a ratio of {r_min:.2f}-{r_init:.2f} ({_reserve_field(ev)} "
            f"{c:g}) reserves {lo:,.0f}-{hi:,.0f} tokens against the {free:,.0f} free of a "
            f"{pool:,}-token pool ({pool_src})"
        )
        if hi < 0.5 * free:
            return []  # the reserve cannot explain the wait
        confidence = 0.75
        value = round(min(max(0.05, free / (target * m * INIT_NEW_TOKEN_RATIO)), 0.8 * c), 2)
    else:
        parts.append(
            "the KV pool size or the requests' max_tokens is unknown, so the reserve could not be sized"
        )
    suggestion = remedy(
        "lower_admission_reserve", ev.engine, release=ev.release, reserve=c, value=value
    )
    return [
        Finding(
            finding="admission reserve: requests wait while the KV pool is mostly empty",
            evidence="; ".join(parts),
            suggestion=str(suggestion),
            confidence=confidence,
            rule="admission_reserve",
            prediction=predict_remedy(ev, ev.cap()[0], "with admission no longer held back"),
            severity=0.85,
            covers=("admission_reserve",),
        )
    ]


def _power_of_two_above(x: float) -> int:
    return int(2 ** math.ceil(math.log2(max(2.0, x))))


def _budget_changes(ev: Evidence, value: int) -> dict[str, Any]:
    """The prefill budget widened to ``value``: the token budget, and the prefill chunk where one field of
    the engine sets both (SGLang's chunked_prefill_size), so the change is recorded in that field; any
    other field of the engine that caps the budget too and is below ``value`` now (SGLang's
    max_prefill_tokens) is raised with it, or the budget would not widen."""
    caps = ev.adapter().capabilities
    field = caps.field("token_budget")
    both = field is not None and caps.field("prefill_chunk") == field
    out: dict[str, Any] = {"token_budget": value, "prefill_chunk": value} if both else {"token_budget": value}
    for alias, limit in caps.field_aliases.items():
        now = as_float(ev.arg(alias))
        if limit == "token_budget" and now is not None and now < value:
            out[alias] = value
    return out


def budget_remedy(ev: Evidence, value: int, **now: Any) -> str:
    """The remedy that widens the prefill budget to ``value``, with the engine's other field that caps it
    (SGLang's max_prefill_tokens) to raise too, unless that field is known and admits ``value`` already."""
    caps = ev.adapter().capabilities
    others = [a for a, limit in caps.field_aliases.items() if limit == "token_budget"]
    # each other field that caps the budget is known and admits ``value`` already: it is named as no obstacle
    admitted = bool(others) and all((as_float(ev.arg(a)) or 0) >= value for a in others)
    intent = "widen_prefill_chunk" if admitted else "widen_prefill_budget"
    return str(remedy(intent, ev.engine, release=ev.release, value=value, lookup=ev.arg, **now))


def rule_prefill_budget(ev: Evidence) -> list[Finding]:
    """Every prefill batch takes the whole token budget while requests queue below the cap."""
    share, n_full, n_prefill, budget, src = _prefill_at_budget(ev)
    if n_prefill == 0:
        ev.skipped.append(
            "prefill_budget: no prefill lines" + ("" if ev.token_budget()[0] else " and no known prefill budget")
            + "; the per-step budget is checked from the running/queued figures and step counts (token_budget)"
        )
        return []
    if n_full < 3 or share < 0.5:
        return []
    cap, _ = ev.cap()
    offered = offered_load(ev)
    limit = min(c for c in (cap, offered) if c) if (cap or offered) else None
    # The prefill lines say what the scheduler saw when it admitted: the queue behind the
    # batch and the running set beside it (decode lines are rare when prefill takes every turn).
    p = ev.prefill
    queue = _col(p, "queue_req").fillna(0)
    # the running set once this batch joined it (the line counts the running set before)
    new_seq = _col(p, "new_seq").fillna(0)
    running = _col(p, "running_req") + new_seq
    usage = _col(p, "token_usage")
    if float((queue > 0).mean()) < 0.5 or float(usage.max()) >= POOL_FULL:
        return []
    # A full batch of whole prompts runs the prefill kernels efficiently: the budget is the
    # limit only when it is small, or cuts prompts so that batches carry one chunk each.
    full = _col(p, "new_token") >= 0.9 * budget
    chunked = float((new_seq[full] <= 1).mean()) if full.any() else 0.0
    if budget > _SMALL_PREFILL_BUDGET and chunked < 0.5:
        return []
    decode_usage = _col(ev.active_decode(), "token_usage")
    if len(decode_usage) and float((decode_usage >= POOL_FULL).mean()) >= 0.15:
        return []  # the KV pool fills between prefills: the KV rule's case
    if limit is not None and not float(running.median()) < 0.9 * limit - 1:
        return []
    value = _power_of_two_above(max(4 * budget, 8192))
    parts = [
        f"{n_full} of {n_prefill} prefill batches ({_pct(share)}) took the whole budget of {budget:,} "
        f"tokens ({src}), {_pct(chunked)} of them one chunk of a longer prompt",
        f"queued requests behind them averaged {_num(float(queue.mean()))} while running requests stayed at a "
        f"median {_count(float(running.median()))}"
        + (f" of a limit of {int(limit)} (cap or offered load)" if limit else "")
        + f" and token usage at most {float(usage.max()):.2f}",
        "so prompts arrive faster than the budget lets the scheduler take them in",
    ]
    suggestion = budget_remedy(ev, value)
    suggestion = f"{suggestion} (larger prefill batches stall the running decodes longer: watch ITL)"
    return [
        Finding(
            finding=f"prefill budget: {budget:,} prompt tokens per batch cannot admit the offered load",
            evidence="; ".join(parts),
            suggestion=suggestion,
            confidence=0.7,
            rule="prefill_budget",
            prediction=predict_remedy(ev, None, f"with the prefill budget widened to {value:,} tokens",
                                      changes=_budget_changes(ev, value)),
            severity=0.8,
            covers=("token_budget", "prefill_chunk"),
        )
    ]


#: the share of admissions retracted above which the recomputation itself leads the findings
_CHURN_COSTLY = 0.05


def rule_retraction_churn(ev: Evidence) -> list[Finding]:
    """Requests retracted (preempted) again and again: each one is prefilled a second time."""
    r = ev.retractions
    if r is None or r.empty:
        return []
    events = len(r)
    retracted = int(_col(r, "retracted_reqs").fillna(1).sum())
    p = ev.prefill
    admitted = int(_col(p, "new_seq").fillna(0).sum()) if p is not None and not p.empty else 0
    churn = retracted / admitted if admitted else float("nan")
    if events < 3 or (retracted < 20 and not (churn >= _CHURN_COSTLY)):
        return []
    word = ev.adapter().capabilities.requeue_word
    parts = [f"{events} {word} events sent {retracted} requests back to the queue"]
    if admitted:
        parts[0] += f", {_pct(churn)} of the {admitted} admissions in the prefill lines"
    parts.append("each comes back through prefill, recomputing its prompt and every token it had generated")
    if "new_token_ratio_after" in r:
        after = _col(r, "new_token_ratio_after").dropna()
        if len(after) and float(after.max()) >= 0.3:
            parts.append(
                f"new_token_ratio jumped to {float(after.max()):.2f} after them, holding back admission"
            )
    pool, _ = ev.kv_pool_tokens()
    ctx, _ = ev.context_tokens()
    value = int(pool // ctx) if pool and ctx else None
    if value:
        parts.append(f"the KV pool holds about {value} requests at their full {ctx:,.0f} tokens")
    suggestion = remedy(
        "reduce_retraction",
        ev.engine, release=ev.release,
        value=value or "what the KV pool holds",
        reserve=_conservativeness(ev),
    )
    return [
        Finding(
            finding=f"{word} churn: requests are admitted, evicted from the KV pool and prefilled again",
            evidence="; ".join(parts),
            suggestion=str(suggestion),
            confidence=0.85 if events >= 5 else 0.75,
            rule="retraction_churn",
            # churn that recomputes a small share of the admissions costs little: the pool's bound
            # (kv_capacity, 0.7) is then what to act on (one H200, SGLang 0.5.16, a 16,384-token
            # pool: 2% of admissions retracted, and a larger pool gave 2.8x: data/examples/h200-sglang-kv)
            severity=0.6 if churn < _CHURN_COSTLY else 0.8,  # an unknown share (nan) leads
            covers=("running_cap", "admission_reserve"),
        )
    ]


def rule_underfed(ev: Evidence) -> list[Finding]:
    """The batch stays below the offered load with nothing queued: requests are not reaching the
    scheduler (the load generator, the HTTP front end or the tokenizer is the limit); or the batch
    is full but the serving process, busy on its core, streams less than the engine generates."""
    levels = [(c, lines) for c, lines in ev.level_decode() if c]
    if not levels:
        ev.skipped.append("underfed: needs decode lines inside sweep levels")
        return []
    hits, busy_frontend = _underfed_levels(ev, levels)
    if not hits and not busy_frontend:
        return []
    s = ev.sweep_sorted()
    client = s[_bool_col(s, "client_bound")] if not s.empty and "client_bound" in s else s.iloc[0:0]
    if "client_cpu_pct" in client:
        # a starved client (below half a core) is a caveat on latency, not the reason for the batch
        client = client[~(_col(client, "client_cpu_pct") < 50.0)]
    text = "; ".join(
        f"at concurrency {int(c)} the server ran a median {_count(r)} requests with none queued"
        for c, r, _ in hits[:4]
    )
    for conc, who, pct, made, got in busy_frontend[:2]:
        text += ("; " if text else "") + (
            f"at concurrency {int(conc)} the server's serving process ({who}) used {pct:.0f}% of its one core "
            f"while its decode lines generated {made:,.0f} tok/s and the client received {got:,.0f}")
    if len(client):
        text += f"; the load generator flagged {len(client)} level(s) as client-bound"
        confidence = 0.8
    elif busy_frontend:
        text += "; the load generator had CPU to spare, so the serving process is the limit"
        confidence = 0.75
    else:
        text += "; the load generator did not flag itself, so the HTTP front end or the tokenizer is the likelier limit"
        confidence = 0.6
    suggestion = str(remedy("unload_the_frontend", ev.engine, release=ev.release))
    prediction = None
    if busy_frontend:
        remedies = _frontend_remedies(ev)
        if remedies:
            suggestion += "; forecast at the highest offered level: " + "; ".join(p.text for p in remedies)
            prediction = max(remedies, key=lambda p: (p.given, p.throughput))
    if prediction is None:
        prediction = predict_remedy(ev, ev.cap()[0], "with the offered load reaching the scheduler")
    finding = ("the server was fed less than the offered load: requests did not reach the scheduler" if hits else
               "the serving front end streamed less than the engine generated: the batch was full, the serving "
               "process busy on its core")
    return [
        Finding(
            finding=finding,
            evidence=text,
            suggestion=suggestion,
            confidence=confidence,
            rule="underfed",
            prediction=prediction,
            severity=0.7,
            covers=("stream_interval", "frontend_workers"),
        )
    ]


def _underfed_levels(ev: Evidence, levels: list[tuple[float, pd.DataFrame]]) -> tuple[list[Any], list[Any]]:
    """``(hits, busy_frontend)``: the levels whose batch stayed short of the load with nothing queued
    ``(conc, running, limit)``, and those where the serving process was busy and the client received
    well under what the engine generated ``(conc, process, pct, made, got)``, full batch or not."""
    cap, _ = ev.cap()
    sweep = ev.sweep_sorted()
    hits, busy_frontend = [], []
    for conc, lines in levels:
        if conc < 4:
            continue
        running = ev.running(lines)
        queue = float(_col(lines, "queue_req").fillna(0).median())
        usage = float(_col(lines, "token_usage").max())
        limit = min(c for c in (cap, conc) if c)
        if queue != 0 or usage >= POOL_FULL:
            continue
        front = frontend_at(ev, conc, lines, sweep)
        if running < 0.75 * limit or (front is not None and running < 0.95 * limit):
            hits.append((conc, running, limit))
        if front is not None:
            busy_frontend.append((conc, *front))
    return hits, busy_frontend


# what the front-end remedies are forecast at: twice the processes, and chunks of this many tokens
_STREAM_CHUNK = 4


def _frontend_remedies(ev: Evidence) -> list[Any]:
    """The performance model's forecasts of taking work off the front end: twice the processes of
    the role that binds, and streamed chunks of :data:`_STREAM_CHUNK` tokens."""
    model = model_of(ev)
    if model is None or not model.frontend:
        return []
    role = model.frontend.binding(model.bounds.workers)
    caps = ev.adapter().capabilities
    out = []
    if role is not None and role.workers_field:
        n = 2 * max(model.bounds.workers.get(role.name, 1), 1)
        p = predict_remedy(ev, None, f"with {n} {role.name} processes", changes={role.workers_field: n})
        if p is not None:
            out.append(p)
    field = caps.field("stream_interval")
    if field and model.bounds.stream_interval < _STREAM_CHUNK:
        p = predict_remedy(ev, None, f"streaming {_STREAM_CHUNK} tokens a chunk", changes={field: _STREAM_CHUNK})
        if p is not None:
            out.append(p)
    return out


_DP_RE = re.compile(r"DP(\d+)")


def rule_dp_imbalance(ev: Evidence) -> list[Finding]:
    """Data-parallel ranks run very different batches while requests wait on the busy one."""
    d = ev.decode
    if d is None or d.empty or "rank" not in d or "running_req" not in d:
        return []
    dp = d["rank"].astype(str).str.extract(_DP_RE, expand=False)
    if dp.nunique(dropna=True) < 2:
        return []
    frame = pd.DataFrame(
        {"dp": dp, "running": _col(d, "running_req"), "queue": _col(d, "queue_req").fillna(0)}
    ).dropna(subset=["dp"])
    per = frame.groupby("dp").agg(running=("running", "mean"), queue=("queue", "mean"))
    busy, idle = per["running"].idxmax(), per["running"].idxmin()
    hi, lo = float(per.loc[busy, "running"]), float(per.loc[idle, "running"])
    if hi < 1.5 * max(lo, 1e-9) or hi - lo < 4 or float(per["queue"].max()) <= 0:
        return []
    text = (
        f"{len(per)} data-parallel ranks: DP{busy} ran {_count(hi)} requests on average, DP{idle} {_count(lo)}; "
        "queued requests per rank averaged "
        + ", ".join(f"DP{k} {_num(float(v))}" for k, v in per["queue"].items())
    )
    return [
        Finding(
            finding="data-parallel imbalance: one replica queues while another idles",
            evidence=text,
            suggestion=str(
                remedy("balance_data_parallel", ev.engine, release=ev.release, load_balance_method=ev.arg("load_balance_method"))
            ),
            confidence=0.7,
            rule="dp_imbalance",
            severity=0.6,
            covers=("load_balance_method", "dp_size"),
        )
    ]
