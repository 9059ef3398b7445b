"""What a digest of an SGLang log shows first: the server arguments that decide throughput."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from glm5lib.engines.sglang.config import cuda_graphs_off

__all__ = ["IMPORTANT_ARGS", "args_digest"]

# The arguments that decide throughput (see the diagnosis notes), shown first.
IMPORTANT_ARGS = (
    "model_path",
    "served_model_name",
    "tp_size",
    "dp_size",
    "ep_size",
    "pp_size",
    "max_running_requests",
    "max_total_tokens",
    "mem_fraction_static",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "schedule_policy",
    "page_size",
    "kv_cache_dtype",
    "quantization",
    "attention_backend",
    "decode_attention_backend",
    "prefill_attention_backend",
    "moe_runner_backend",
    "fp4_gemm_runner_backend",
    "enable_flashinfer_allreduce_fusion",
    "disable_radix_cache",
    "disable_cuda_graph",
    "cuda_graph_max_bs",  # up to 0.5.9; 0.5.23 sizes decode and prefill graphs apart
    "cuda_graph_max_bs_decode",
    "cuda_graph_max_bs_prefill",
    "enable_dp_attention",
    "speculative_algorithm",
    "enable_metrics",
    "api_key",
)


def args_digest(important: dict[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """The digest's arguments with CUDA graphs on/off read in any release's spelling (0.5.23
    switches them per phase and logs the legacy switch as False)."""
    if "disable_cuda_graph" in important:
        important["disable_cuda_graph"] = cuda_graphs_off(args)
    return important
