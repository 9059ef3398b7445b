"""Rules about failures: fatal errors in the server log and failed requests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from glm5lib.diagnose.evidence import Evidence, Finding, _col
from glm5lib.diagnose.knowledge import fill_remedy

__all__ = ["rule_crashes"]

_CRASH_ADVICE = {
    "nan": (
        "server crashed: NaN in the logits",
        "NaN logits usually come from an attention or GEMM kernel on this GPU/model pair: switch "
        "{flag:attention_backend} (now {attention_backend}; triton is the most portable), keep "
        "{flag:moe_runner_backend} and {flag:fp4_gemm_runner_backend} at auto, and retry with {flag:disable_cuda_graph} "
        "to rule out capture",
    ),
    "oom_pool": (
        "server failed: not enough memory for the KV pool",
        "the weights left too little for the KV pool: raise {flag:mem_fraction_static} (now {mem_fraction_static}) "
        "or use more GPUs / a smaller {flag:context_length}",
    ),
    "oom": (
        "server crashed: CUDA out of memory",
        "activations or CUDA graphs did not fit beside the KV pool: lower {flag:mem_fraction_static} "
        "(now {mem_fraction_static}), {flag:chunked_prefill_size} or {flag:cuda_graph_max_bs}",
    ),
    "nccl": (
        "server crashed: NCCL error",
        "check GPU peer-to-peer (nvidia-smi topo -p2p r), IOMMU/ACS settings and the container's /dev/shm "
        "size; retry with NCCL_P2P_DISABLE=1 to confirm; in the investigated setup a Proxmox VM broke P2P "
        "and an LXC container worked",
    ),
    "health_check": (
        "server stopped answering (watchdog)",
        "the scheduler hung: look at the log just before the watchdog line; raise {flag:watchdog_timeout} only "
        "if start-up or a very long batch explains it",
    ),
    "scheduler_exception": (
        "server crashed: scheduler exception",
        "read the traceback in the log; re-run with the same flags and {flag:log_level} debug to reproduce",
    ),
    "sigquit": (
        "a server child process died",
        "the parent received SIGQUIT from a failed child: the traceback before it names the cause",
    ),
    "other": ("server logged a fatal error", "read the quoted log line"),
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
            title, advice = _CRASH_ADVICE.get(key, _CRASH_ADVICE["other"])
            fmt = {f: ev.arg(f) for f in ("attention_backend", "mem_fraction_static")}
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
                    suggestion=fill_remedy(advice, ev.release, **fmt),
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


