"""What SGLang chooses at start-up for a field left unset, where its log does not say.

A field its release resolves at start-up (``Arg(resolvable=True)``, 0.5.23 on) and declares a
fallback for takes that fallback; the largest CUDA-graph batch is the largest batch captured; the
running cap of 0.5.x comes from the request pool: ``min(max(tokens / context x 512, 2048), 4096)``
requests, the running batch at most half the KV tokens (``model_runner`` / ``scheduler``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from glm5lib.engines.base import AutomaticValue
from glm5lib.engines.sglang.config import resolved_fallback

__all__ = ["default_graph_max_bs", "sglang_automatic"]

_POOL_MIN, _POOL_MAX, _POOL_PER_CONTEXT = 2048, 4096, 512


def _positive(value: Any) -> float | None:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return value


# SGLang's default decode graph ceiling (_handle_gpu_memory_settings, 0.5.4-0.5.18; 0.5.23's memory
# hook): (GPU memory below this many GiB, ceiling below TP 4, ceiling at TP 4 or more)
_GRAPH_BY_MEMORY = ((20, 8, 8), (35, 24, 80), (60, 32, 160), (90, 256, 512), (160, 256, 512), (math.inf, 512, 512))


def default_graph_max_bs(gpu_memory_bytes: float | None, tp_size: float = 1) -> int | None:
    """SGLang's decode CUDA-graph ceiling when none is given: by the GPU's memory and the tensor
    parallelism (256 on an 80-141 GiB GPU below TP 4, 512 at TP 4 or more); None without the memory."""
    if not gpu_memory_bytes:
        return None
    gib = float(gpu_memory_bytes) / 1024**3
    for below, small, large in _GRAPH_BY_MEMORY:
        if gib < below:
            return large if tp_size >= 4 else small
    return None


def _gpu_memory(environment: Mapping[str, Any] | None) -> float | None:
    gpus = (environment or {}).get("gpus") or []
    if gpus and isinstance(gpus[0], Mapping):
        return _positive(gpus[0].get("memory_total_bytes"))
    return None


def sglang_automatic(field: str, args: Mapping[str, Any], startup: Mapping[str, Any] | None = None,
                     environment: Mapping[str, Any] | None = None) -> AutomaticValue | None:
    """SGLang's value for ``field`` left unset in ``args``; None where it has no rule for it."""
    startup = startup or {}
    if field == "cuda_graph_max_bs":
        sizes = startup.get("cuda_graph_batch_sizes") or args.get("cuda_graph_bs")
        cap = _positive(startup.get("max_running_requests")) or _positive(args.get("max_running_requests"))
        if isinstance(sizes, (list, tuple)) and sizes:
            v = int(max(int(s) for s in sizes))
            if not (cap and v >= cap):
                return AutomaticValue(field, v, (v,), "the largest captured CUDA graph batch",
                                      text=f"{v} (largest captured CUDA graph batch)")
        # capture stopped at the running cap (the request pool): the ceiling once the cap is
        # raised is SGLang's default for the GPU's memory and the tensor parallelism
        default = default_graph_max_bs(_gpu_memory(environment), _positive(args.get("tp_size")) or 1)
        if default is not None:
            return AutomaticValue(field, default, (default,), "SGLang's rule by GPU memory and TP size", text=(
                f"{default} by SGLang's rule (_handle_gpu_memory_settings): the GPU's memory and tp_size "
                f"{int(_positive(args.get('tp_size')) or 1)}; the captured sizes stopped at the running cap"))
    fallback = resolved_fallback(field, args)
    if fallback is not None:
        value, how = fallback
        return AutomaticValue(field, value, (value,), how, text=how)
    if field != "max_running_requests":
        return None
    tokens = _positive(startup.get("max_total_num_tokens")) or _positive(args.get("max_total_tokens"))
    context = _positive(startup.get("context_len")) or _positive(args.get("context_length"))
    if tokens and context:
        pool = min(max(int(tokens / context * _POOL_PER_CONTEXT), _POOL_MIN), _POOL_MAX)
        v = max(1, min(pool, int(tokens // 2)))
        return AutomaticValue(field, v, (v,), "SGLang's rule", text=(
            f"{v:,} by SGLang's rule: min(max({int(tokens):,} KV tokens / {int(context):,} context "
            f"x {_POOL_PER_CONTEXT}, {_POOL_MIN}), {_POOL_MAX}), at most half the KV pool"))
    return AutomaticValue(field, None, (_POOL_MIN,), "SGLang's rule", text=(
        f"at least {_POOL_MIN:,} by SGLang's rule: min(max(KV tokens / context length x "
        f"{_POOL_PER_CONTEXT}, {_POOL_MIN}), {_POOL_MAX}) requests, at most half the KV pool "
        f"(the pool size is not in this source; any pool over {2 * _POOL_MIN:,} tokens gives "
        f"{_POOL_MIN:,}-{_POOL_MAX:,})"))
