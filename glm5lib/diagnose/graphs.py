"""CUDA graphs in the performance model: which decode batches replay a graph, and what the
evidence can and cannot say about the steps that do not.

The graph ceiling is the largest batch the engine captures once the running cap no longer bounds
capture; the graph saving is what a graph takes off a step's fixed part, fitted where a phase holds
steps of both kinds, else a prior; an eager step where every fitted step ran as a graph costs what
the evidence cannot show, so the band reaches down to the overhead seen on a GPU.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from typing import Any

from glm5lib.stepmodel import StepParams

__all__ = [
    "EAGER_OVERHEAD_MAX_X",
    "GRAPH_BS_FIELDS",
    "GRAPH_OFF_FIELDS",
    "GRAPH_PRIOR_SHARE",
    "graph_ceiling",
    "with_graph_prior",
]

# Share of the fixed step time a CUDA graph saves when the evidence cannot show it (the shipped
# profiles, measured on GPUs: 20% and 28%; the lower one).
GRAPH_PRIOR_SHARE = 0.2
# How many times the graph step's fixed part a step can take when it runs eagerly, where the phase's
# evidence holds graph steps only: the low end of the band. Measured on one H200 (SGLang 0.5.16, a
# 24-layer 64-expert MoE with Triton kernels, data/examples/h200-sglang): an eager step paid about
# 51 ms over a 2.56 ms fixed part, at batch 1 and at 1,023 alike (20x); with a margin.
EAGER_OVERHEAD_MAX_X = 24.0
# SGLang 0.5.16+ prints the decode graphs' batch limit inside cuda_graph_config
_GRAPH_CONFIG_MAX_BS = re.compile(r"decode=PhaseConfig\([^)]*?max_bs=(\d+)")
GRAPH_OFF_FIELDS = ("disable_cuda_graph", "enforce_eager", "--disable-cuda-graph", "--enforce-eager")
GRAPH_BS_FIELDS = ("cuda_graph_max_bs", "cuda_graph_max_bs_decode", "max_cudagraph_capture_size")


def _int(v: Any) -> int | None:
    """A positive whole number, or None (as the model reads its arguments)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return int(x) if math.isfinite(x) and x > 0 else None


def _first(args: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if args.get(k) not in (None, ""):
            return args[k]
    return None


def graph_ceiling(args: Mapping[str, Any], startup: Mapping[str, Any], cap: int | None) -> int | None:
    """The largest decode batch that replays a CUDA graph once the running cap no longer bounds
    capture: the argument (``cuda_graph_max_bs``...), else the decode limit inside SGLang 0.5.16's
    ``cuda_graph_config``, else the largest batch captured at start-up when capture stopped below
    the cap (at the cap it says only that the cap bounded it: None, unknown above)."""
    value = _int(_first(args, GRAPH_BS_FIELDS))
    if value:
        return value
    m = _GRAPH_CONFIG_MAX_BS.search(str(args.get("cuda_graph_config") or ""))
    if m:
        return int(m.group(1))
    captured = startup.get("cuda_graph_batch_sizes")
    if isinstance(captured, (list, tuple)) and captured:
        top = max(int(b) for b in captured)
        if cap is None or top < cap:
            return top
    return None


def with_graph_prior(params: StepParams) -> StepParams:
    """Steps fitted with CUDA graphs on, with the prior saving put back into the fixed part."""
    saving = params.fixed_ms * GRAPH_PRIOR_SHARE / (1.0 - GRAPH_PRIOR_SHARE)
    return dataclasses.replace(params, fixed_ms=params.fixed_ms + saving, graph_saving_ms=saving)
