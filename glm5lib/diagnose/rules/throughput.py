"""Rules about throughput as load grows: saturation, idle GPUs, a load generator at its limit."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from glm5lib.diagnose.evidence import Evidence, Finding, _bool_col, _col, _num, _pct
from glm5lib.diagnose.model import PerfModel
from glm5lib.diagnose.model.queries import model_of
from glm5lib.diagnose.rules._frontend import frontend_at
from glm5lib.diagnose.rules._queue import held_at_cap, levels_with_limit
from glm5lib.errors import ConfigError
from glm5lib.levels import level_windows

__all__ = ["rule_client_bound", "rule_gpu_underused", "rule_saturation"]


def rule_saturation(ev: Evidence) -> list[Finding]:
    """Throughput stopped growing with offered load though neither the cap nor KV was the limit.

    The capacity model then says where the decode step's time goes: a large fixed part per step
    (launches, all-reduce latency, scheduling) or a large part per running request (kernels).
    """
    s = ev.sweep_sorted()
    if "output_throughput" in s:
        # Levels that measured tokens: a duration-bound level counts the tokens its in-flight
        # streams delivered, so it needs no completed request.
        s = s[_col(s, "output_throughput").fillna(0) > 0].reset_index(drop=True)
    if len(s) < 2 or "output_throughput" not in s:
        ev.skipped.append("saturation: needs a sweep of at least two levels that measured throughput")
        return []
    thr = _col(s, "output_throughput")
    conc = s["concurrency"]
    hit = _flat_pair(conc, thr)
    if hit is None:
        return []
    j, i = hit
    if _admission_held(ev):
        # requests queued below the running limit with the KV pool mostly free: admission (the
        # token budget or the reserve) holds the batch back, not the decode step
        ev.skipped.append("saturation: requests queued below the running limit; admission explains the plateau")
        return []
    d = ev.active_decode()
    cap, _ = ev.cap()
    if not d.empty and _cap_or_kv_explains(d, cap):
        return []
    parts = [
        f"from concurrency {int(conc[j])} to {int(conc[i])} output throughput moved only "
        f"{_num(float(thr[j]))} -> {_num(float(thr[i]))} tok/s"
    ]
    if d.empty:
        parts.append(
            "no decode lines, so a running-request cap or a full KV pool could not be ruled out"
        )
    else:
        parts.append(
            f"running requests reached {int(_col(d, 'running_req').max())}"
            + (f" of a cap of {cap}" if cap else "")
            + f", token usage at most {float(_col(d, 'token_usage').max()):.2f}"
        )
    suggestion = (
        "the server is saturated below its cap and KV limits: the decode step itself is the limit; "
        "profile one decode step (torch profiler / nsys) to split it into attention, MoE GEMMs, "
        "all-reduce and scheduling"
    )
    eager_top = _eager_at_top(ev)
    front_top = _frontend_at_top(ev)
    model = model_of(ev) if not d.empty else None
    if front_top is not None:
        # the engine generated more than the client received while the serving process was busy:
        # the front end holds throughput, and the underfed finding says so; the kernels are not it
        parts.append(front_top)
        suggestion = ("the serving front end streamed less than the engine generated at the highest load: take work "
                      "off it first (the underfed finding: more tokenizer processes, larger stream chunks), then "
                      "judge the decode step; " + suggestion.split(": ", 1)[1])
    elif eager_top is not None:
        # the steps at the top ran eagerly above the graph ceiling: the kernels are not what limits
        # them, and the cuda_graph finding says what does
        parts.append(eager_top)
        suggestion = ("the steps at the highest load ran eagerly (no CUDA graph replayed), paying every layer's "
                      "kernel launches: cover those batches with graphs (the cuda_graph finding) before judging "
                      "the kernels; " + suggestion.split(": ", 1)[1])
    elif model is not None and model.params.per_seq_ms > 0:
        part, suggestion = _step_split(model, int(_col(d, "running_req").max()), suggestion)
        parts.append(part)
    return [
        Finding(
            finding="throughput saturated: more concurrent requests no longer help",
            evidence="; ".join(parts),
            suggestion=suggestion,
            confidence=0.6 if not d.empty else 0.35,
            rule="saturation",
            severity=0.5,
        )
    ]


def _flat_pair(conc: pd.Series, thr: pd.Series) -> tuple[int, int] | None:
    """(j, i): the highest level ``i`` whose throughput rose less than 15% over the nearest level
    ``j`` below it offering at most 1/1.8 of its concurrency; None where every such pair grew."""
    for i in range(len(conc) - 1, 0, -1):
        for j in range(i - 1, -1, -1):
            if conc[i] >= 1.8 * conc[j]:
                if thr[i] < 1.15 * thr[j]:
                    return j, i
                break
    return None


def _cap_or_kv_explains(d: pd.DataFrame, cap: int | None) -> bool:
    """Whether the decode samples put the plateau on the running cap (pinned at it with requests
    queued on a fifth of them) or the KV pool (nearly full with requests queued on 15%)."""
    running, queue = _col(d, "running_req"), _col(d, "queue_req").fillna(0)
    queued = queue > 0
    if cap and float(held_at_cap(running, queue, cap).mean()) >= 0.2:
        return True  # the concurrency cap explains it
    return float(((_col(d, "token_usage") >= 0.85) & queued).mean()) >= 0.15  # the KV pool explains it


def _step_split(model: PerfModel, b: int, suggestion: str) -> tuple[str, str]:
    """What the performance model says of the step at ``b`` running (its fixed share) and the
    suggestion it points to: per-step overhead where that share is half or more, else kernels."""
    p = model.params
    step = model.curve.step(b, model.workload.input_len, model.workload.output_len)
    fixed = p.fixed_ms / step if step > 0 else 0.0
    part = (
        f"the performance model ({model.curve.describe()}): at {b} running the fixed part is {_pct(fixed)} "
        f"of a {step:.1f} ms step"
    )
    if fixed >= 0.5:
        return part, (
            "most of each decode step does not depend on the batch: per-step overhead (kernel "
            "launches without CUDA graphs, all-reduce latency over PCIe without P2P, scheduler CPU "
            "time); try CUDA graphs at these batch sizes, GPU P2P for the custom all-reduce, and "
            "check the overlap scheduler is on; " + suggestion.split(": ", 1)[1]
        )
    return part, (
        "most of each decode step grows with the batch: the kernels are the limit (MoE GEMMs, "
        "attention, FP4 GEMM tactics); try other MoE-runner and attention backends, "
        "FlashInfer autotuning, fp8 KV cache; " + suggestion.split(": ", 1)[1]
    )


def _eager_at_top(ev: Evidence) -> str | None:
    """What says the highest level's decode steps ran eagerly while CUDA graphs were on, or None."""
    if ev.limits().graphs_off:
        return None
    levels = ev.level_decode()
    if not levels or levels[0][0] is None:
        return None
    conc, lines = levels[0]
    if "cuda_graph" not in lines:
        return None
    flags = lines["cuda_graph"].dropna()
    if flags.empty:
        return None
    eager = flags.astype(str).str.strip().str.lower().isin(("false", "0"))
    if float(eager.mean()) < 0.5:
        return None
    return (f"at concurrency {int(conc)} {_pct(float(eager.mean()))} of the decode lines ran without a CUDA graph "
            f"(running requests median {_num(float(_col(lines, 'running_req').median()))})")


def _frontend_at_top(ev: Evidence) -> str | None:
    """What says the serving front end held the highest level with decode lines, or None."""
    levels = [(c, lines) for c, lines in ev.level_decode() if c]
    if not levels:
        return None
    conc, lines = levels[0]
    front = frontend_at(ev, conc, lines)
    if front is None:
        return None
    who, pct, made, got = front
    return (f"at concurrency {int(conc)} the decode lines generated {_num(made)} tok/s while the client received "
            f"{_num(got)}, the serving process ({who}) at {pct:.0f}% of its one core")


def _admission_held(ev: Evidence) -> bool:
    for _, lines, _, limit, _running in levels_with_limit(ev):
        queue = _col(lines, "queue_req").fillna(0)
        # a queue as large as half the batch, most of the time: admission, not the step, holds it
        if (
            ev.running(lines) < 0.9 * limit - 1
            and float((queue > 0).mean()) >= 0.3
            and float(queue.mean()) >= 0.5 * ev.running(lines)
        ):
            return True
    return False


def rule_gpu_underused(ev: Evidence) -> list[Finding]:
    """At the throughput peak the GPUs draw far less than their power limit: the limit is elsewhere."""
    s = ev.sweep_sorted()
    g = ev.gpu
    if s.empty or "output_throughput" not in s or g is None or g.empty or "power_w" not in g:
        ev.skipped.append("gpu_underused: needs sweep.csv and gpu.csv")
        return []
    peak_i = int(_col(s, "output_throughput").idxmax())
    peak = s.loc[peak_i]
    try:
        window = level_windows(s.loc[[peak_i]]).iloc[0]
    except ConfigError:
        window = {"start": np.nan, "end": np.nan}
    a, b = float(window["start"]), float(window["end"])
    times = _col(g, "time")
    if math.isnan(a) or math.isnan(b):
        ev.skipped.append("gpu_underused: the sweep has no level time windows")
        return []
    w = g[(times >= a) & (times <= b)]
    if w.empty:
        ev.skipped.append(
            f"gpu_underused: no GPU samples inside the peak level's window ({a:.0f}-{b:.0f})"
        )
        return []
    per_gpu = w.groupby("gpu").agg(
        power=("power_w", lambda x: pd.to_numeric(x, errors="coerce").mean()),
        limit=("power_limit_w", lambda x: pd.to_numeric(x, errors="coerce").max())
        if "power_limit_w" in w
        else ("power_w", lambda x: np.nan),
        util=("gpu_util", lambda x: pd.to_numeric(x, errors="coerce").mean())
        if "gpu_util" in w
        else ("power_w", lambda x: np.nan),
    )
    power = float(per_gpu["power"].mean())
    limit = float(per_gpu["limit"].mean())
    util = float(per_gpu["util"].mean())
    frac = power / limit if limit and not math.isnan(limit) else float("nan")
    low_power = not math.isnan(frac) and frac < 0.5
    low_util = not math.isnan(util) and util < 50
    if not (low_power or low_util):
        return []
    n = len(per_gpu)
    text = (
        f"at concurrency {int(peak['concurrency'])}, the peak at {_num(float(peak['output_throughput']))} tok/s, "
        f"the {n} GPUs drew {power:.0f} W"
    )
    if not math.isnan(frac):
        text += f" of {limit:.0f} W on average ({_pct(frac)} of the limit, busiest GPU {per_gpu['power'].max():.0f} W)"
    if not math.isnan(util):
        text += f" at {util:.0f}% utilisation"
    if low_power and not low_util and not math.isnan(util):
        text += (
            "; utilisation counts the time any kernel runs, so a busy-looking GPU at a small share of "
            "its power limit is running small, latency-bound kernels"
        )
    if ev.environment and ev.environment.get("standin"):
        text += " (simulated telemetry from the stand-in)"
    suggestion = (
        "the GPUs are far from their compute or power limit, so the limit is elsewhere: the scheduler (a running-request "
        "cap, small batches), CPU launch overhead (CUDA graphs off), communication (all-reduce over PCIe "
        "without P2P) or slow kernels; act on the other findings first, then profile one decode step "
        "(torch profiler / nsys) to see where the time goes"
    )
    return [
        Finding(
            finding="GPUs under-used at the throughput peak",
            evidence=text,
            suggestion=suggestion,
            confidence=0.7 if low_power and low_util else 0.55,
            rule="gpu_underused",
            severity=0.6,
        )
    ]


# Half a core: below it the load generator is not busy enough to be the limit itself.
CLIENT_SATURATED_CPU_PCT = 50.0


def _other_processes(row: pd.Series) -> str | None:
    """What else held the host's cores during a level, when the sweep recorded it: the other
    processes' summed share of a core (``others_cpu_pct``) and the largest of them
    (``other_processes``, ``"name[pid] 183%; name[pid] 12%"``)."""
    names = row.get("other_processes")
    total = row.get("others_cpu_pct", np.nan)
    text = []
    if isinstance(names, str) and names.strip():
        text.append(names.strip())
    elif isinstance(names, (list, tuple)) and names:
        text.append("; ".join(str(n) for n in names))
    if pd.notna(total) and float(total) > 0:
        text.append(f"{float(total):.0f}% of a core in all")
    return ", ".join(text) or None


def _level_bits(row: pd.Series) -> list[str]:
    bits = []
    if pd.notna(row.get("client_cpu_pct", np.nan)):
        bits.append(f"client CPU {float(row['client_cpu_pct']):.0f}%")
    if pd.notna(row.get("loop_lag_p99_ms", np.nan)):
        bits.append(f"event-loop lag p99 {float(row['loop_lag_p99_ms']):.0f} ms")
    return bits


def _fewer_chunks(ev: Evidence) -> str:
    """How to have the server stream fewer chunks, in its own flag where it has one."""
    flag = ev.adapter().capabilities.flag("stream_interval")
    return f"raise the server's {flag} so fewer chunks are sent" if flag else "have the server stream fewer, larger chunks"


def rule_client_bound(ev: Evidence) -> list[Finding]:
    """Levels the load generator flagged as limited by the client, told apart by its CPU:

    * saturated (at least half a core busy, and lag): the client is the limit and leads;
    * starved (below half a core, high event-loop lag): other processes held the cores, so the
      client could not read its streams in time; a caveat on the latency figures (by how much
      they may be inflated), never the cause of the throughput.
    """
    s = ev.sweep_sorted()
    if s.empty or "client_bound" not in s:
        ev.skipped.append("client_bound: the sweep has no client_bound column")
        return []
    bound = s[_bool_col(s, "client_bound")]
    if bound.empty:
        return []
    cpu = _col(bound, "client_cpu_pct")
    saturated = bound[cpu.isna() | (cpu >= CLIENT_SATURATED_CPU_PCT)]
    starved = bound[cpu < CLIENT_SATURATED_CPU_PCT]
    out = []
    if len(saturated):
        details = []
        for _, row in saturated.iterrows():
            bits = _level_bits(row)
            details.append(f"concurrency {int(row['concurrency'])}" + (f" ({', '.join(bits)})" if bits else ""))
        out.append(
            Finding(
                finding="load generator was the bottleneck at some levels",
                evidence=f"{len(saturated)} of {len(s)} levels flagged client-bound with the client busy "
                f"(at least {CLIENT_SATURATED_CPU_PCT:.0f}% of a core): " + "; ".join(details),
                suggestion=(
                    "figures at those levels measure the client, not the server: run the load generator on "
                    "another machine or in more processes, " + _fewer_chunks(ev)
                    + ", or cross-check with the engine's own serving benchmark"
                ),
                confidence=0.9,
                rule="client_bound",
                severity=0.75,
            )
        )
    if len(starved):
        details = []
        lags = []
        for _, row in starved.iterrows():
            bits = _level_bits(row)
            others = _other_processes(row)
            if others:
                bits.append(f"other processes: {others}")
            if pd.notna(row.get("host_cpu_pct", np.nan)) and pd.notna(row.get("host_cpus", np.nan)):
                bits.append(f"host {float(row['host_cpu_pct']):.0f}% busy over {int(row['host_cpus'])} cores")
            details.append(f"concurrency {int(row['concurrency'])}" + (f" ({', '.join(bits)})" if bits else ""))
            lag = row.get("loop_lag_p99_ms", np.nan)
            if pd.notna(lag):
                lags.append(float(lag))
        worst = max(lags) if lags else None
        inflate = (
            f"; a token can wait up to ~{worst:,.0f} ms (the lag p99) before the client reads it, so TTFT and "
            "inter-token figures at those levels may be inflated by that much, and TPOT from short bursts understated"
            if worst
            else ""
        )
        out.append(
            Finding(
                finding="measurement caveat: the load generator was starved of CPU, not saturated",
                evidence=(
                    f"{len(starved)} of {len(s)} levels flagged client-bound while the client used less than "
                    f"{CLIENT_SATURATED_CPU_PCT:.0f}% of a core: " + "; ".join(details)
                    + ": the client was waiting for a core, not working: other processes (on a small host the "
                    "server's own threads) held them" + inflate
                ),
                suggestion=(
                    "read those levels' latencies with care, not as the server's; for exact latency run the load "
                    "generator on cores the server does not use (taskset, another machine) or give the server fewer "
                    "threads; the throughput figures still count what the server delivered"
                ),
                confidence=0.8,
                rule="client_starved",
                severity=0.1,
            )
        )
    return out
