"""CUDA graphs in the performance model: what the evidence can and cannot say about the steps
that do not replay a graph.

Which decode batches replay one is the engine's limit ``graph_max_batch`` (its adapter reads it:
:meth:`glm5lib.engines.EngineAdapter.limits`); the graph saving is what a graph takes off a step's fixed part, fitted where a phase holds
steps of both kinds, else a prior; an eager step where every fitted step ran as a graph costs what
the evidence cannot show, so the band reaches down to the overhead seen on a GPU.
"""

from __future__ import annotations

import dataclasses

from glm5lib.stepmodel import StepParams

__all__ = [
    "EAGER_OVERHEAD_MAX_X",
    "GRAPH_PRIOR_SHARE",
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

def with_graph_prior(params: StepParams) -> StepParams:
    """Steps fitted with CUDA graphs on, with the prior saving put back into the fixed part."""
    saving = params.fixed_ms * GRAPH_PRIOR_SHARE / (1.0 - GRAPH_PRIOR_SHARE)
    return dataclasses.replace(params, fixed_ms=params.fixed_ms + saving, graph_saving_ms=saving)
