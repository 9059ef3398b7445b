"""What SGLang chooses at start-up for a field left unset, where its log does not say.

A field its release resolves at start-up (``Arg(resolvable=True)``, 0.5.23 on) and declares a
fallback for takes that fallback; the largest CUDA-graph batch is the largest batch captured; the
running cap of 0.5.x comes from the request pool: ``min(max(tokens / context x 512, 2048), 4096)``
requests, the running batch at most half the KV tokens (``model_runner`` / ``scheduler``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from glm5lib.engines.base import AutomaticValue
from glm5lib.engines.sglang.config import resolved_fallback

__all__ = ["sglang_automatic"]

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


def sglang_automatic(field: str, args: Mapping[str, Any], startup: Mapping[str, Any] | None = None,
                     environment: Mapping[str, Any] | None = None) -> AutomaticValue | None:
    """SGLang's value for ``field`` left unset in ``args``; None where it has no rule for it."""
    startup = startup or {}
    if field == "cuda_graph_max_bs":
        sizes = startup.get("cuda_graph_batch_sizes") or args.get("cuda_graph_bs")
        if isinstance(sizes, (list, tuple)) and sizes:
            v = int(max(int(s) for s in sizes))
            return AutomaticValue(field, v, (v,), "the largest captured CUDA graph batch",
                                  text=f"{v} (largest captured CUDA graph batch)")
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
