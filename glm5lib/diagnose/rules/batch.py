"""Rules about the running batch: the running-request cap, the KV pool, CUDA graph coverage."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from glm5lib import engines
from glm5lib.diagnose.evidence import (
    Evidence,
    Finding,
    _bool_col,
    _col,
    _frame,
    _num,
    _pct,
    reserves_future_tokens,
    samples_text,
)
from glm5lib.diagnose.knowledge import remedy
from glm5lib.diagnose.model import Recommendation, predict_remedy, recommend_running_cap
from glm5lib.diagnose.model.prefill import prefill_ceiling
from glm5lib.diagnose.model.queries import model_of
from glm5lib.diagnose.rules._queue import held_at_cap, offered_load

__all__ = ["rule_concurrency_cap", "rule_cuda_graph", "rule_kv_capacity", "rule_prefill_graph"]


def _noun(d) -> str:
    """'decode lines', '/metrics scrapes' or both: what the shares in a finding are shares of."""
    return samples_text(d).split(" ", 1)[1]


@dataclass(frozen=True, eq=False)
class _Pinned:
    """Where the running requests sat at the cap while others queued (the rule's signature)."""

    cap: int
    source: str  # where the cap was read
    inferred: bool  # no configured cap known: the plateau read from the decode samples
    both: pd.Series  # the decode samples at the cap with requests queued
    share: float  # their share of the decode samples


def rule_concurrency_cap(ev: Evidence) -> list[Finding]:
    """Running requests pinned at the running cap while requests queue and TTFT grows."""
    d = ev.active_decode()
    if d.empty:
        ev.skipped.append("concurrency_cap: no decode lines with running requests")
        return []
    pin = _pinned_at_cap(ev, d)
    if pin is None:
        return []
    cap = pin.cap
    s = ev.sweep_sorted()
    parts = _pinned_evidence(ev, d, s, pin)
    confidence = 0.45 if pin.inferred else 0.7
    plateau_parts, bonus = _plateau_evidence(s, cap)
    parts += plateau_parts
    confidence += bonus
    if pin.inferred:
        parts.append("the configured cap is unknown; the plateau was read from the decode lines")
    else:
        parts.append(f"cap read from the {pin.source}")

    rec = _recommended_cap(ev, cap, int(_col(d, "running_req").max()), s)
    suggestion = _raise_cap_suggestion(ev, cap, rec)
    raised = rec.value if rec is not None and rec.value is not None and rec.value > cap else None
    changes, graph_text = _graph_ceiling_change(ev, raised)
    suggestion += graph_text
    prediction = predict_remedy(
        ev, raised, f"raising the cap to {raised}" + (" and the graph ceiling with it" if changes else "")
        if raised else "without the cap", changes=changes or None,
    )
    if prediction is not None:
        suggestion += f"; {prediction.text}"
    return [
        Finding(
            prediction=prediction,
            finding=f"concurrency cap: at most {cap} requests run at once while the rest queue",
            evidence="; ".join(parts),
            suggestion=suggestion,
            confidence=min(confidence, 0.95),
            rule="concurrency_cap",
            severity=0.9,
            covers=("running_cap",),
        )
    ]


def _pinned_at_cap(ev: Evidence, d: pd.DataFrame) -> _Pinned | None:
    """The running requests pinned at the cap (configured, or the plateau seen) while requests
    queued, on enough decode samples; None where they were not, or the plateau is the KV pool's."""
    cap, cap_src = ev.cap()
    running = _col(d, "running_req")
    queue = _col(d, "queue_req").fillna(0)
    inferred = False
    if cap is None:
        # No configured cap known: a plateau that requests queue behind is the signature.
        cap = int(running.max())
        inferred = True
        cap_src = "the most running requests seen"
    both = held_at_cap(running, queue, cap)
    share = float(both.mean())
    if both.sum() < 3 or share < 0.2:
        return None
    if inferred and float(_col(d, "token_usage").where(both).max()) >= 0.9:
        return None  # a KV-bound plateau, handled by the KV rule
    return _Pinned(cap, cap_src, inferred, both, share)


def _pinned_evidence(ev: Evidence, d: pd.DataFrame, s: pd.DataFrame, pin: _Pinned) -> list[str]:
    """What the decode samples say: at the highest offered level above the cap (the sharpest
    evidence, where it has samples enough) and over the whole log."""
    cap, both = pin.cap, pin.both
    queue = _col(d, "queue_req").fillna(0)
    parts = []
    above_cap = s[s["concurrency"] > cap] if not s.empty else s
    if len(above_cap):
        top = above_cap.iloc[-1]
        lv = ev.decode_in_level(top)
        if len(lv) >= 3:
            lv_run = _col(lv, "running_req")
            lv_q = _col(lv, "queue_req").fillna(0)
            lv_pinned = held_at_cap(lv_run, lv_q, cap)
            parts.append(
                f"at concurrency {int(top['concurrency'])} running requests stayed at {cap} on "
                f"{_pct(float(lv_pinned.mean()))} of its {samples_text(lv)} while queued requests "
                f"averaged {_num(float(lv_q.mean()))}"
            )
    parts += [
        ("over the whole log " if parts else "")
        + f"running requests stayed at {cap} on {_pct(pin.share)} of {_noun(d)} while queued requests averaged "
        f"{_num(float(queue[both].mean()))} (max {int(queue[both].max())}); "
        f"token usage there averaged {float(_col(d, 'token_usage')[both].mean()):.2f}, so KV was not the limit"
    ]
    return parts


def _bucket_of(level: pd.Series, column: str) -> str:
    """Where a figure was read off a histogram (a watched server's /metrics), the bucket it lies in:
    the interpolated value within it is no measurement."""
    bucket = level.get(column + "_bucket")
    if not isinstance(bucket, str) or "-" not in bucket:
        return ""
    lo, _, hi = bucket.partition("-")
    try:
        low, high = float(lo), float(hi)
    except ValueError:
        return ""
    edge = f"{_num(low)} ms or more" if high == float("inf") else f"{_num(low)}-{_num(high)} ms"
    return f" (interpolated inside the server histogram's {edge} bucket)"


def _plateau_evidence(s: pd.DataFrame, cap: int) -> tuple[list[str], float]:
    """What the sweep says from the last level at or below the cap to the highest above it
    (throughput flat, TTFT growing), and how much that adds to the finding's confidence."""
    if s.empty or "output_throughput" not in s:
        return [], 0.0
    above = s[s["concurrency"] > cap]
    at = s[s["concurrency"] <= cap]
    if not len(above):
        return [], 0.0
    hi = above.iloc[-1]
    lo = at.iloc[-1] if len(at) else None
    ttft_col = "median_ttft_ms" if "median_ttft_ms" in s else "mean_ttft_ms"
    if lo is None:
        if ttft_col in s:
            return [f"median TTFT at concurrency {int(hi['concurrency'])} was {_num(float(hi[ttft_col]))} ms"
                    + _bucket_of(hi, ttft_col)], 0.0
        return [], 0.0
    t0, t1 = float(lo["output_throughput"]), float(hi["output_throughput"])
    sentence = (
        f"from concurrency {int(lo['concurrency'])} to {int(hi['concurrency'])} output "
        f"throughput moved {_num(t0)} -> {_num(t1)} tok/s"
    )
    grew = False
    if ttft_col in s:
        a, b = float(lo[ttft_col]), float(hi[ttft_col])
        grew = b > 2 * max(a, 1e-9)
        sentence += f" while {ttft_col.split('_')[0]} TTFT grew {_num(a)} -> {_num(b)} ms"
    plateau = t1 < 1.3 * t0 and hi["concurrency"] >= 2 * lo["concurrency"]
    if plateau and grew:
        return [sentence], 0.2
    if plateau or grew:
        return [sentence], 0.1
    return [sentence], 0.0


def _recommended_cap(ev: Evidence, cap: int, ran_batch: int, s: pd.DataFrame) -> Recommendation | None:
    """The running cap the KV pool allows for the sweep's top concurrency (a recommendation with
    its reason), or None where the pool or the context length is unknown."""
    pool, _ = ev.kv_pool_tokens()
    ctx, _ = ev.context_tokens()
    target = int(s["concurrency"].max()) if not s.empty else None
    if not (pool and ctx):
        return None
    return recommend_running_cap(
        pool,
        ctx,
        target_concurrency=target,
        current_cap=cap,
        ran_batch=ran_batch,
        say_throughput=False,  # the forecast below is the performance model's, as glm5 predict's
    )


def _raise_cap_suggestion(ev: Evidence, cap: int, rec: Recommendation | None) -> str:
    """The remedy: raise the cap (to the recommended figure where there is one above it), its known
    cost, and the reference run's cap where it was higher."""
    if rec is not None and rec.value is not None and rec.value > cap:
        suggestion = f"{remedy('raise_running_cap', ev.engine, release=ev.release, current=cap, value=rec.value)}: {rec.reason}"
    else:
        suggestion = (
            remedy("raise_running_cap", ev.engine, release=ev.release, current=cap, value="as many as the KV pool holds")
            + " (check token usage stays below ~0.95 with no retractions after the change)"
        )
        if rec is not None and rec.reason:
            suggestion += f"; no figure recommended: {rec.reason}"
    suggestion += (
        "; the known cost: every step grows with the batch, so TPOT rises as throughput does, and a cap above "
        "what the KV pool holds turns into retractions"
    )
    ref_args = ev.reference_args or {}
    ref_cap = engines.limits_in(ref_args).running_cap
    if isinstance(ref_cap, int) and ref_cap > cap:
        suggestion += f"; the reference run ({ev.reference_label or 'reference'}) used {ref_cap}"
    return suggestion


def _graph_ceiling_change(ev: Evidence, raised: int | None) -> tuple[dict[str, int], str]:
    """The graph ceiling raised with the cap where the raised cap passes it (above it every step
    runs eagerly), and what the suggestion says of it; nothing where graphs are off or it fits."""
    changes: dict[str, int] = {}
    model = model_of(ev)
    ceiling = model.bounds.graph_max_batch if model is not None and model.bounds.graphs else None
    if raised and ceiling and raised > ceiling and ev.adapter().capabilities.field("graph_max_batch"):
        # above the graph ceiling every step runs eagerly (SGLang issue 33483): raise it with the cap
        changes["graph_max_batch"] = raised
        return changes, (
            f"; with graphs kept, also {remedy('cover_batch_with_graphs', ev.engine, release=ev.release, value=raised)}: "
            f"with the cap raised, the engine captures decode graphs only up to {ceiling} (its graph ceiling; "
            "today's capture stops lower where the cap does), and a batch above that runs eagerly"
        )
    return changes, ""


def rule_kv_capacity(ev: Evidence) -> list[Finding]:
    """Token usage near 1, requests held back below the cap, or retractions: KV bounds concurrency."""
    d = ev.active_decode()
    r = ev.retractions if ev.retractions is not None else _frame(["retracted_reqs"])
    if d.empty and r.empty:
        ev.skipped.append("kv_capacity: no decode lines or retractions")
        return []
    usage = _col(d, "token_usage")
    running = _col(d, "running_req")
    full = usage >= 0.95
    n_retract = len(r)
    retracted = int(_col(r, "retracted_reqs").fillna(0).sum()) if n_retract else 0
    share_full = float(full.mean()) if len(d) else 0.0
    # The scheduler stops admitting before the pool is full (it reserves room for the tokens
    # running requests will still generate), so requests queue below the cap at high usage.
    cap, _ = ev.cap()
    queue = _col(d, "queue_req").fillna(0)
    below_cap = ~held_at_cap(running, queue, cap) if cap else running >= 0
    held = (usage >= 0.85) & (queue > 0) & below_cap
    share_held = float(held.mean()) if len(d) else 0.0
    full_signal = bool(full.sum() >= 3 and share_full >= 0.05)
    held_signal = bool(held.sum() >= 3 and share_held >= 0.15)
    if n_retract == 0 and not full_signal and not held_signal:
        return []
    parts = []
    if len(d) and usage.notna().any():
        peak_text = f"token usage peaked at {float(usage.max()):.2f}"
        if full.any():
            peak_text += f" and was >= 0.95 on {_pct(share_full)} of {_noun(d)}"
        parts.append(peak_text)
        if full.any():
            parts.append(f"running requests there averaged {_num(float(running[full].mean()))}")
        if held_signal:
            parts.append(
                f"on {_pct(share_held)} of {_noun(d)} requests queued (queued requests averaging "
                f"{_num(float(_col(d, 'queue_req')[held].mean()))}) at usage >= 0.85 while "
                f"running requests ({_num(float(running[held].mean()))} on average) stayed below the cap"
                + (f" of {cap}" if cap else "")
            )
    if n_retract:
        word = "retraction" if reserves_future_tokens(ev) else "preemption"  # SGLang's word, vLLM's
        parts.append(f"{n_retract} {word} events sent {retracted} requests back to the queue")
    pool, pool_src = ev.kv_pool_tokens()
    ctx, _ = ev.context_tokens()
    supported = None
    if pool:
        text = f"KV pool {pool:,} tokens ({pool_src})"
        if ctx:
            supported = int(pool // ctx)
            text += f" holds about {supported} requests of {ctx:,.0f} tokens"
        parts.append(text)
    suggestion = "to run more requests at once, " + str(
        remedy("enlarge_kv_pool", ev.engine, release=ev.release, lookup=ev.arg)
    )
    prediction = None
    set_pool = _pool_set_by_hand(ev, pool)
    if set_pool is not None:
        # the pool is the size the engine was told, not what its memory allows: that field is the lever,
        # sized for the requests that would run (the offered load, up to the cap) where the sweep says
        offered = offered_load(ev)
        load = min(offered, cap) if offered and cap else offered
        want = int(math.ceil(load * ctx / 1024.0) * 1024) if load and ctx else 0
        if want > set_pool:
            suggestion = "to run more requests at once, " + str(remedy(
                "raise_kv_tokens", ev.engine, release=ev.release, lookup=ev.arg, current=f"{set_pool:,}",
                value=f"{want:,}", load=load, context=f"{ctx:,.0f}"))
            prediction = predict_remedy(ev, None, f"a KV pool of {want:,} tokens", changes={"kv_tokens": want})
            if prediction is not None:
                suggestion += f"; {prediction.text}"
        else:
            suggestion = "to run more requests at once, " + str(remedy(
                "raise_kv_tokens_unsized", ev.engine, release=ev.release, lookup=ev.arg, current=f"{set_pool:,}"))
    cap_flag = ev.adapter().capabilities.flag("running_cap")
    if supported and cap and cap > supported:
        suggestion = (
            f"{cap_flag} {cap} is above the ~{supported} requests the KV pool holds, so the "
            "pool, not the cap, sets concurrency"
            + (" (and retractions waste work)" if n_retract else "")
            + "; "
            + suggestion
        )
    return [
        Finding(
            prediction=prediction,
            finding="KV cache capacity: the token pool bounds how many requests run at once",
            evidence="; ".join(parts),
            suggestion=suggestion,
            confidence=0.85 if n_retract else (0.65 if full_signal else 0.55),
            rule="kv_capacity",
            severity=0.7,
            covers=("kv_tokens", "kv_fraction", "kv_cache_dtype"),
        )
    ]


def _pool_set_by_hand(ev: Evidence, pool: int | None) -> int | None:
    """The KV pool's size where the engine's own field for it set it, else None. The engine
    allocates the smaller of that value and what its memory holds, so the field set the pool only
    where the pool is about the value given (pages round it down a little); a pool well below it was
    sized by the memory, and enlarging the memory is the lever."""
    field = ev.adapter().capabilities.field("kv_tokens")
    given = engines.whole_size(ev.arg(field)) if field else None
    if not pool or not given or given <= 0:
        return None
    return given if _POOL_ROUNDING * given <= pool <= given * 1.01 else None


#: the least share of a pool size given by hand the engine's pool keeps after page rounding
_POOL_ROUNDING = 0.97


def decode_sizes_between(low: float, high: float) -> list[int]:
    """The decode sizes a graph ceiling raised from ``low`` to ``high`` adds (SGLang's schedule: 8
    apart to 256, 16 to 512, 32 above)."""
    step = [(256, 8), (512, 16), (10**9, 32)]
    out, b = [], int(low)
    while True:
        b += next(s for top, s in step if b < top)
        if b > high:
            return out
        out.append(b)


def rule_cuda_graph(ev: Evidence) -> list[Finding]:
    """Decode batches run without CUDA graphs because they exceed the largest captured batch."""
    d = ev.log_decode()  # only the log's lines say whether a step replayed a graph
    if d.empty or "cuda_graph" not in d:
        ev.skipped.append("cuda_graph: no decode lines with a cuda graph field")
        return []
    lim = ev.limits()
    if lim.graphs_off:
        return []  # graphs are off on purpose; the reference diff covers that choice
    graph = _bool_col(d, "cuda_graph")
    running = _col(d, "running_req")
    given = lim.source("graph_max_batch") == "server arguments"
    max_bs = lim.graph_max_batch if given else None
    src = lim.name("graph_max_batch") if given else ""
    captured = (ev.startup or {}).get("cuda_graph_batch_sizes")
    if not isinstance(max_bs, (int, float)) and isinstance(captured, (list, tuple)) and captured:
        max_bs, src = max(int(b) for b in captured), "the largest batch captured at start-up"
    if not isinstance(max_bs, (int, float)):
        if not graph.any():
            return []
        max_bs = int(running[graph].max())
        src = "the largest batch that ran with a graph"
    big = running > max_bs
    over = (~graph) & big
    # judged among the lines above the captured sizes: a level of large batches is eager whatever
    # share of the whole log it is (the H200 run: 6 of 454 lines, every one of its 1,024-level lines)
    if over.sum() < 3 or over.sum() < 0.5 * big.sum():
        return []
    p95 = float(running[over].quantile(0.95))
    target = int(math.ceil(p95 / 8) * 8)
    cost = ""
    if "gen_throughput" in d:
        rate = _col(d, "gen_throughput")
        step = running / rate.where(rate > 0) * 1000.0
        near = graph & (running > 0.5 * max_bs) & (running <= max_bs) & step.notna()
        if over.sum() and near.sum() and step[over].notna().any():
            e_ms, e_run = float(step[over].median()), float(running[over].median())
            g_ms, g_run = float(step[near].median()), float(running[near].median())
            cost = (f"; from the decode lines' own rates an eager step at {e_run:.0f} running took {e_ms:.1f} ms, "
                    f"a graph step at {g_run:.0f} running {g_ms:.1f} ms ({e_ms / g_ms:.1f}x the time for "
                    f"{e_run / g_run:.1f}x the batch)")
    changes = {"graph_max_batch": target}
    what = f"capturing graphs up to {target}"
    startup = ev.startup or {}
    took = startup.get("decode_cuda_graph_capture_time_s", startup.get("cuda_graph_capture_time_s"))
    held = startup.get("decode_cuda_graph_mem_usage_gb", startup.get("cuda_graph_mem_usage_gb"))
    cost_text = (f"; capturing the decode graphs up to {int(max_bs)} took {float(took):.0f} s of this start-up"
                 + (f" and {float(held):.2f} GB" if held is not None else "")
                 + f"; up to {target} captures {len(decode_sizes_between(max_bs, target))} more sizes, each a "
                 "little more start-up time and memory taken from the KV pool" if took else "")
    prediction = predict_remedy(ev, None, what, changes=changes)
    return [
        Finding(
            prediction=prediction,
            finding=f"CUDA graphs not used for batches above {int(max_bs)}",
            evidence=(
                f"cuda graph: False on {int(over.sum())} of the {int(big.sum())} decode lines with running requests above "
                f"{int(max_bs)} ({src}); those batches reached {int(running[over].max())} (p95 {p95:.0f}){cost}"
            ),
            suggestion=(
                str(remedy("cover_batch_with_graphs", ev.engine, release=ev.release, value=target))
                + "; capture costs start-up time and memory, and a batch above the largest captured one "
                "runs eagerly, paying every layer's kernel launches" + cost_text
                + (f"; {prediction.text}" if prediction is not None else "")
            ),
            confidence=0.8,
            rule="cuda_graph",
            severity=0.4,
            covers=("graph_max_batch",),
        )
    ]


def rule_prefill_graph(ev: Evidence) -> list[Finding]:
    """Whole prefill chunks run eager: the chunk is not a size the engine captures as a graph, or it
    lies above a ceiling the engine set itself.

    An engine that captures prefill steps as CUDA graphs does so on a grid of token counts up to its
    chunk (SGLang 0.5.16: every 4 to 32, 16 to 256, 32 to 512, 64 to 1,024, 256 to 4,096, 512
    beyond); a chunk between two sizes runs each of its full chunks eager (on one H100, a 530-token
    chunk read 13,600 prompt tok/s against 45,300 at 512, and the load's throughput fell 59%:
    data/examples/h100-sglang-tune-in-turn). For models with MLA attention SGLang stops capturing at
    a ceiling of its own (2,048 tokens in 0.5.16, 8,192 in 0.5.23), so a chunk on the grid above it
    runs eager by the engine's choice: that is said apart, and the chunk is not called wrong. Read
    from the log's prefill lines: the largest step that ran under a graph, and the steps above it
    that did not; the sizes captured from the start-up log where it lists them."""
    p = ev.prefill
    if p is None or p.empty or "cuda_graph" not in p or "new_token" not in p:
        ev.skipped.append("prefill_graph: no prefill lines with a cuda graph field")
        return []
    if "rank" in p and p["rank"].nunique(dropna=True) > 1:
        p = p[p["rank"].isna() | (p["rank"] == p["rank"].dropna().iloc[0])]
    graph, tokens = _bool_col(p, "cuda_graph"), _col(p, "new_token")
    if not graph.any():
        return []  # no prefill step ran under a graph: none were captured (off, or a release without them)
    largest = int(tokens[graph].max())
    over = (~graph) & (tokens > largest)
    if over.sum() < 3 or over.sum() < 0.5 * (tokens > largest).sum():
        return []
    adapter = ev.adapter()
    chunk = ev.limits().get("prefill_chunk")
    known = isinstance(chunk, (int, float))
    sizes = adapter.prefill_grid(ev.release)
    logged = adapter.captured_prefill(ev.startup)  # what the start-up log says was captured wins
    ceiling = prefill_ceiling(logged, sizes, chunk) if known else None
    if known and ceiling is None and chunk in sizes:
        ceiling = largest  # a chunk the grid captures, whose full chunks ran eager all the same
    evidence = (f"cuda graph: False on {int(over.sum())} of the {int((tokens > largest).sum())} prefill lines of more "
                f"than {largest} tokens (the largest step that ran under a graph), up to {int(tokens[over].max())} "
                f"tokens; the chunk is {f'{chunk:g}' if known else 'unknown'}")
    cost = _graph_cost(p, graph, tokens, over, largest)
    field = adapter.capabilities.field("prefill_chunk") or "the prefill chunk"
    if ceiling is not None and known and ceiling < chunk:
        raise_it = adapter.capabilities.prefill_graph_max_field
        return [Finding(
            finding=f"prefill steps of more than {ceiling} tokens run without CUDA graphs: the engine captures "
                    f"prefill graphs up to {ceiling} tokens, below the chunk of {chunk:g}",
            evidence=evidence + (f"; the start-up log's list of captured sizes ends at {ceiling}" if logged else "") + cost,
            suggestion=(f"the ceiling is {adapter.title}'s own, not the chunk's: it lowers it for models with MLA "
                        "attention (SGLang 0.5.16 to 2,048 tokens, 0.5.23 to 8,192, so that graphed prefill does not "
                        "dispatch slower kernels) and to the KV pool's size. "
                        + (f"{raise_it} raises it, and " if raise_it else "")
                        + f"{field} {ceiling} runs every full chunk under a graph but splits longer prompts: measure "
                        "either against this run before keeping it"),
            confidence=0.6, rule="prefill_graph", severity=0.2, covers=("prefill_chunk",))]
    below = max(logged or [int(s) for s in sizes if known and s <= chunk], default=largest)
    above = min((int(s) for s in sizes if known and s > chunk), default=None)
    choice = f"{below}" + (f" or {above}" if above else "")
    return [Finding(
        finding=f"prefill steps of more than {below} tokens run without CUDA graphs",
        evidence=evidence + (f", and the largest size captured under it is {below}"
                             + (" (the start-up log's list)" if logged else "") if (logged or sizes) and known else "")
        + cost,
        suggestion=(f"set {field} to a size the engine captures as a prefill graph, {choice}: a chunk between "
                    "two captured sizes runs every full chunk eager, and the decode steps waiting behind it "
                    "take longer" + ("" if sizes else "; the engine's start-up log lists the sizes it captured")),
        confidence=0.75, rule="prefill_graph", severity=0.4, covers=("prefill_chunk",))]


def _graph_cost(p: pd.DataFrame, graph: pd.Series, tokens: pd.Series, over: pd.Series, largest: int) -> str:
    """The log's input throughput on the eager steps against graph steps of the upper half of the
    graphed sizes, where the lines carry it."""
    rate = _col(p, "input_throughput")
    if not (rate[over].notna().any() and rate[graph].notna().any()):
        return ""
    eager, graphed = float(rate[over].median()), float(rate[graph & (tokens > 0.5 * largest)].median())
    if not (math.isfinite(graphed) and eager > 0):
        return ""
    return (f"; the log's input throughput on those steps was {eager:,.0f} prompt tok/s against "
            f"{graphed:,.0f} on graph steps of {largest // 2}-{largest} tokens ({graphed / eager:.1f}x)")
