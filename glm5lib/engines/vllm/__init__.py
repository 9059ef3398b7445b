"""vLLM as one engine adapter: its config, flag catalogues per release, launch, facts, levers.

vLLM's configuration is :class:`VllmConfig` (``vllm serve`` arguments under vLLM's own names,
``data/configs/vllm-*.json``), checked against the installed vLLM's parser or the bundled
catalogue of its release (:mod:`glm5lib.engines.vllm.releases`); :func:`launch_vllm` starts its
OpenAI server; its log is read by :mod:`glm5lib.engines.vllm.log`; :func:`vllm_automatic` works out the
batch sizes it chooses at start-up when they are not given (it logs only the arguments given).
Its V1 scheduler admits a request without reserving KV room for the tokens it will generate,
logs no per-batch prefill lines (only ten-second stats), and *preempts* requests when KV blocks
run out.
"""

from __future__ import annotations

from typing import Any

from glm5lib import http
from glm5lib.engines.base import Capabilities, EngineAdapter, LaunchRequest, Lever, ServingRole
from glm5lib.engines.flagconfig import LeverSpec, blocks_as_kv_tokens, catalogue_levers
from glm5lib.engines.vllm._config import (
    CONFIG_FORMAT,
    VLLM_MODULE,
    VLLM_MODULES,
    VllmConfig,
    launch_vllm,
    shipped_vllm_configs,
    vllm_flags,
    vllm_module,
    vllm_python,
)
from glm5lib.engines.vllm.defaults import VLLM_AUTOMATIC_FIELDS, AutomaticValue, vllm_automatic
from glm5lib.engines.vllm.releases import BUNDLED_RELEASES, bundled_flags, bundled_release
from glm5lib.engines.vllm.stepbench import BENCHMARK
from glm5lib.errors import ConfigError
from glm5lib.masking import mask_mapping

__all__ = [
    "ADAPTER",
    "BUNDLED_RELEASES",
    "CAPABILITIES",
    "CONFIG_FORMAT",
    "METRICS",
    "VLLM_AUTOMATIC_FIELDS",
    "VLLM_MODULE",
    "VLLM_MODULES",
    "AutomaticValue",
    "VllmConfig",
    "bundled_flags",
    "bundled_release",
    "launch_vllm",
    "levers",
    "shipped_vllm_configs",
    "vllm_automatic",
    "vllm_flags",
    "vllm_module",
    "vllm_python",
]

#: the KV pool set in blocks (``num_gpu_blocks_override``, of ``block_size`` tokens, 16 unless
#: set) as the neutral ``kv_tokens``
_change_hook = blocks_as_kv_tokens("num_gpu_blocks_override", ("block_size",), "block_size", 16)


def graph_sizes(max_size: int) -> list[int]:
    """The decode batch sizes vLLM captures up to ``max_size``: 1, 2, 4, every 8 to 256, every 16
    above (``vllm/config/compilation.py``)."""
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, int(max_size) + 1, 16)]
    return sorted({b for b in sizes if b <= max_size} | {int(max_size)})


#: vLLM's API server: HTTP, tokenizing and detokenizing, one process per ``--api-server-count``
SERVING_ROLES = (
    ServingRole("api_server", ("vllm.entrypoints", "vllm serve", "api_server", "APIServer"),
                workers_field="api_server_count", description="API server (HTTP, tokenizer, detokenizer)"),
)

# one public path per name (the class is defined in a private module)
VllmConfig.__module__ = __name__

CAPABILITIES = Capabilities(
    reserves_future_tokens=False,
    logs_prefill_lines=False,
    logs_decode_lines=True,
    token_budget_field="max_num_batched_tokens",
    running_cap_field="max_num_seqs",
    kv_fraction_field="gpu_memory_utilization",
    cuda_graph_bs_field="max_cudagraph_capture_size",
    cuda_graph_off_field="enforce_eager",
    resolved_facts={"max_num_seqs": "max_running_requests", "max_num_batched_tokens": "max_num_batched_tokens",
                    "max_model_len": "context_len"},
    startup_keys={"running_cap": "max_num_seqs", "token_budget": "max_num_batched_tokens",
                  "kv_tokens": "max_total_num_tokens"},
    neutral_fields={"enable_prefix_caching": "prefix caching: the sweep's random prompts share no prefix"},
    mixed_steps=True,
    report_fields=("max_num_seqs", "max_num_batched_tokens", "enforce_eager"),
    requeue_word="preemption",
    resolves_automatic_values=True,
    budget_at_least_cap=True,
    default_running_cap=256,
    default_api="completions",
    token_id_prompts=False,  # text prompts: the CPU test model's vocabulary is small
    more_fields={"frontend_workers": "api_server_count", "stream_interval": "stream_interval"},
    serving_roles=SERVING_ROLES,
)

#: evidence-schema column -> vLLM's /metrics gauges (its KV usage gauges are 0-1 fractions
#: despite the name, like SGLang's token_usage; 0.32 renamed gpu_cache_usage_perc)
METRICS: dict[str, tuple[str, ...]] = {
    "running_req": ("vllm:num_requests_running",),
    "queue_req": ("vllm:num_requests_waiting",),
    "token_usage": ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"),
    "retracted_reqs": ("vllm:num_preemptions_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "requests_finished": ("vllm:request_success_total",),
    "ttft_seconds": ("vllm:time_to_first_token_seconds",),
    "itl_seconds": ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
    "e2e_seconds": ("vllm:e2e_request_latency_seconds",),
}

_LEVERS: tuple[LeverSpec, ...] = (
    ("max_num_seqs", "int", 1, 4096, "x2", "requests one scheduler step may hold", "running"),
    ("max_num_batched_tokens", "int", 64, 65536, "x2",
     "tokens one scheduler step may compute (the per-step token budget; at least max_num_seqs)", "prefill"),
    ("max_cudagraph_capture_size", "int", 1, 1024, "x2", "largest batch captured as a CUDA graph", "running"),
    ("gpu_memory_utilization", "float", 0.5, 0.95, "0.05", "GPU-memory fraction for weights and KV cache", "memory"),
)


def levers(release: str | None = None) -> list[Lever]:
    """vLLM's tuning levers with safe bounds, those ``release``'s catalogue has."""
    return catalogue_levers(_LEVERS, bundled_flags(release)[0])


def _launch(request: LaunchRequest) -> Any:
    config = request.config
    if not isinstance(config, VllmConfig):
        raise ConfigError("BACKEND 'vllm' needs a vLLM config: CONFIG names one in data/configs/vllm-*.json "
                          f"(e.g. 'vllm-capped'), not {type(config).__name__}", field="CONFIG")
    return launch_vllm(config, log_path=request.log_path, ready_timeout=request.ready_timeout,
                       api_key=request.api_key, extra_args=list(request.extra_args), port=request.port)


def _identify(url: str, api_key: str | None, timeout: float) -> dict[str, Any] | None:
    """vLLM's OpenAI server answers ``/version`` with its release."""
    version = http.get_json(url, "/version", api_key=api_key, timeout=timeout)
    if not (isinstance(version, dict) and "version" in version):
        return None
    models = http.get_json(url, "/v1/models", api_key=api_key, timeout=timeout)
    return mask_mapping({"version": version["version"], "models": models})


ADAPTER = EngineAdapter(
    name="vllm",
    title="vLLM",
    description="vLLM's OpenAI-compatible server launched here from a vLLM config (data/configs/vllm-*.json)",
    capabilities=CAPABILITIES,
    metrics=METRICS,
    log_engine="vllm",
    config_type=VllmConfig,
    launcher=_launch,
    lever_maker=levers,
    automatic_resolver=vllm_automatic,
    change_hook=_change_hook,
    graph_schedule=graph_sizes,
    step_benchmark=BENCHMARK,
    identify=_identify,
)
