"""Start-up facts from SGLang's start-up lines: weight loading, KV cache, CUDA graphs, limits.

Facts of the first rank win; other ranks only fill gaps (a fact one rank did not print).
"""

from __future__ import annotations

import re
from typing import Any

from glm5lib.logs.server_args import SIMPLE_LITERALS

__all__ = ["read_startup"]

_KV_EQ_RE = re.compile(r"([A-Za-z_][\w ]*?)\s*=\s*([^,]+?)(?=,\s*[A-Za-z_][\w ]*\s*=|[,.]?\s*$)")
_NUM_UNIT_RE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*(GB|GiB|MB|s|ms|%)?\.?$")
_BS_LIST_RE = re.compile(r"bs \[([\d,\s]*)\]|bs=\[([\d,\s]*)\]|\[([\d,\s]+)\]")


def _typed(value: str) -> Any:
    value = value.strip().rstrip(".")
    m = _NUM_UNIT_RE.match(value)
    if m:
        num = m.group(1)
        return int(num) if num.lstrip("-").isdigit() else float(num)
    if value in SIMPLE_LITERALS:
        return SIMPLE_LITERALS[value]
    return value


def _kv_pairs(text: str) -> dict[str, Any]:
    """``a=1, avail mem=3.5 GB, type=Cls`` -> {"a": 1, "avail_mem_gb": 3.5, "type": "Cls"}."""
    out: dict[str, Any] = {}
    for m in _KV_EQ_RE.finditer(text):
        key = m.group(1).strip().lower().replace(" ", "_")
        raw = m.group(2).strip()
        unit = _NUM_UNIT_RE.match(raw.rstrip("."))
        if unit and unit.group(2):
            key = f"{key}_{unit.group(2).lower().replace('gib', 'gb')}"
            if unit.group(2) == "%":
                key = key[:-2] + "_pct"
        out[key] = _typed(raw)
    return out


_FIRST_RANK_RE = re.compile(r"(?:[A-Z][A-Z_]*0(?: |$))*")
_GB_RE = re.compile(r"(avail mem|mem usage|K size|V size|KV size)\s*[=:]\s*(\d+(?:\.\d+)?)\s*GB", re.IGNORECASE)
_ELAPSED_RE = re.compile(r"(?:[Tt]ime elapsed|elapsed)\s*[:=]\s*(\d+(?:\.\d+)?)\s*s")


def read_startup(facts: dict[str, Any], others: dict[str, Any], msg: str, rank: str, cut: bool = False) -> None:
    """Record what a start-up message says (weights, KV cache, CUDA graphs, limits) in ``facts``
    (the first rank's: all labels 0, or none) or ``others`` (other ranks, which only fill gaps)."""
    # Facts from the first rank (all labels 0, or none) win; other ranks only fill gaps.
    first_rank = _FIRST_RANK_RE.fullmatch(rank) is not None
    s = facts if first_rank else others
    if msg.startswith("Load weight begin"):
        m = _GB_RE.search(msg)
        if m and first_rank:
            s.setdefault("load_weight_begin_avail_mem_gb", float(m.group(2)))
        return
    if msg.startswith("Load weight end"):
        if not first_rank and "weight_load_time_s" in s:
            return
        kv = _kv_pairs(msg.split(".", 1)[1] if "." in msg else msg)
        key = "weight" if "weight_load_time_s" not in s else "draft_weight"
        if "elapsed_s" in kv:
            s[f"{key}_load_time_s"] = kv.pop("elapsed_s")
        for name, val in kv.items():
            s.setdefault(f"{key}_{name}" if key == "draft_weight" else _weight_key(name), val)
        return
    if msg.startswith("KV Cache is allocated") or "KV Cache is allocated" in msg:
        if "kv_cache_tokens" in s and not first_rank:
            return
        m = re.search(r"#tokens:\s*(\d+)", msg)
        if m:
            s["kv_cache_tokens"] = int(m.group(1))
        m = re.search(r"dtype:\s*([\w.]+)", msg)
        if m:
            s["kv_cache_dtype"] = m.group(1)
        sizes = {k.lower().replace(" ", "_"): float(v) for k, v in _GB_RE.findall(msg)}
        for k, v in sizes.items():
            s[f"kv_cache_{k}_gb".replace("kv_cache_kv_size", "kv_cache_size").replace("_size_gb", "_size_gb")] = v
        total = sizes.get("kv_size", sizes.get("k_size", 0.0) + sizes.get("v_size", 0.0))
        if total:
            s["kv_cache_size_gb"] = round(total, 4)
        return
    if "mem usage:" in msg and "KVPool" in msg:
        m = re.search(r"(\w*KVPool) mem usage:\s*(\d+(?:\.\d+)?)\s*GB", msg)
        if m:
            s.setdefault("kv_cache_size_gb", float(m.group(2)))
        for k, v in re.findall(r"(swa size|full size):\s*(\d+)", msg):
            s.setdefault(f"kv_cache_{k.replace(' ', '_')}_tokens", int(v))
        return
    if msg.startswith("Memory pool end"):
        m = _GB_RE.search(msg)
        if m and "memory_pool_end_avail_mem_gb" not in s:
            s["memory_pool_end_avail_mem_gb"] = float(m.group(2))
        return
    low = msg.lower()
    if low.startswith("capture") and "graph" in low:
        stage = "draft_cuda_graph" if "draft" in low else "cuda_graph"
        if "piecewise" in low:
            stage = "piecewise_cuda_graph"
        bs = _BS_LIST_RE.search(msg)
        # the prefill token counts captured: "num tokens [...]" (piecewise graphs), "num_tokens=[...]"
        # (0.5.16's target prefill graphs); the decode capture's "num_tokens_per_req=1, bs=[...]" is batches
        tokens = "num tokens" in msg or "num_tokens=[" in msg
        if bs and (" bs" in msg or "bs=" in msg or tokens):
            nums = bs.group(1) or bs.group(2) or bs.group(3) or ""
            what = "num_tokens" if tokens else "batch_sizes"
            s.setdefault(f"{stage}_{what}", [int(x) for x in re.findall(r"\d+", nums)])
        if " end" in low:
            # 0.5.14 on captures prefill and decode graphs apart: the decode capture's own cost too
            stages = [stage, "decode_cuda_graph"] if "target decode" in low else [stage]
            for name in stages:
                if f"{name}_capture_time_s" in s:
                    continue
                m = _ELAPSED_RE.search(msg)
                if m:
                    s[f"{name}_capture_time_s"] = float(m.group(1))
                for k, v in _GB_RE.findall(msg):
                    s[f"{name}_{k.lower().replace(' ', '_')}_gb"] = float(v)
        elif " begin" in low:
            m = _GB_RE.search(msg)
            if m:
                s.setdefault(f"{stage}_begin_avail_mem_gb", float(m.group(2)))
        return
    if msg.startswith("max_total_num_tokens="):
        if "max_total_num_tokens" in s and not first_rank:
            return
        pairs = list(_kv_pairs(msg).items())
        if cut and pairs:
            pairs.pop()  # the last value of a cut-off line may itself be cut
        for name, val in pairs:
            s[name] = val
        return
    if msg.startswith("Init torch distributed ends"):
        kv = _kv_pairs(msg.split(".", 1)[1] if "." in msg else "")
        if "elapsed_s" in kv:
            s.setdefault("init_torch_distributed_time_s", kv["elapsed_s"])
        if "mem_usage_gb" in kv:
            s.setdefault("init_torch_distributed_mem_usage_gb", kv["mem_usage_gb"])
        return
    if msg.startswith("Engine startup timings"):
        body = msg.split(":", 1)[1] if ":" in msg else ""
        s.setdefault("startup_timings_s", {k: v for k, v in _kv_pairs(body).items()})
        return


def _weight_key(name: str) -> str:
    return {
        "avail_mem_gb": "weight_avail_mem_gb",
        "mem_usage_gb": "weight_mem_usage_gb",
        "type": "model_class",
        "dtype": "weight_dtype",
        "quant": "weight_quant",
        "quant_algo": "weight_quant_algo",
    }.get(name, f"weight_{name}")
