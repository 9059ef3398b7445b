"""SGLang as one engine adapter: its config type, launch, capability facts, /metrics names, levers.

SGLang's configuration is :class:`glm5lib.engines.sglang.config.ServerConfig` (``ServerArgs`` fields checked
against the flag catalogue of the release in use); it is launched as ``python -m
sglang.launch_server`` by :func:`launch` (:mod:`glm5lib.engines.sglang.launcher`); its log is read by
:mod:`glm5lib.engines.sglang.log`. Its scheduler reserves KV room for the tokens an admitted request
will still generate (``new_token_ratio``), logs one line per prefill and decode batch, and sends
requests back to the queue by *retraction* when the KV pool runs out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from glm5lib import http
from glm5lib.engines.base import (
    Capabilities,
    EngineAdapter,
    LaunchRequest,
    Lever,
    Program,
    ServingRole,
)
from glm5lib.engines.sglang.automatic import sglang_automatic
from glm5lib.engines.sglang.config import (
    ServerConfig,
    catalogue,
    decode_graph_sizes,
    prefill_graph_sizes,
    release_of,
)
from glm5lib.engines.sglang.limits import change_hook, defaults, limits_hook
from glm5lib.engines.sglang.stepbench import BENCHMARK
from glm5lib.errors import ConfigError
from glm5lib.lazy import module_getattr

__all__ = ["ADAPTER", "CAPABILITIES", "METRICS", "PROGRAM", "SERVING_ROLES", "launch", "launch_from_server_config", "levers", "server_info_of"]

#: SGLang's serving front end: the HTTP server with its tokenizer manager (one process per
#: ``--tokenizer-worker-num``, since 0.5.2; issue 6553) and the detokenizer (``--detokenizer-worker-num``,
#: 0.5.12 on); both handle every streamed chunk (``--stream-interval`` tokens each)
SERVING_ROLES = (
    ServingRole("tokenizer", ("sglang.launch_server", "sglang serve", "sglang::tokenizer", "sglang::http"),
                workers_field="tokenizer_worker_num", description="HTTP server and tokenizer manager",
                stream_growth=0.12,
                growth_source="SGLang 0.5.16's serving process per token: flat from 1 to 64 streams, then +9% and "
                              "+11% per doubling to 256 and 1,024 on an H100, about +15% to 256 on an H200 "
                              "(data/examples/h100-sglang-next, h200-sglang)"),
    ServingRole("detokenizer", ("sglang::detokenizer",), workers_field="detokenizer_worker_num",
                description="detokenizer manager"),
)

#: SGLang's server, run from a ServerConfig
PROGRAM = Program(
    "sglang.launch_server", requires_model=True, requires_package="sglang",
    install_hint="install it on a GPU host with pip install 'glm5lib[sglang]', point python= at the interpreter "
                 "that has it, or use backend='sim' for the stand-in",
)

CAPABILITIES = Capabilities(
    reserves_future_tokens=True,
    logs_prefill_lines=True,
    logs_decode_lines=True,
    decode_lines_per_steps=True,
    token_budget_field="chunked_prefill_size",
    running_cap_field="max_running_requests",
    kv_fraction_field="mem_fraction_static",
    cuda_graph_bs_field="cuda_graph_max_bs",
    cuda_graph_off_field="disable_cuda_graph",
    more_fields={"kv_tokens": "max_total_tokens", "prefill_chunk": "chunked_prefill_size",
                 "frontend_workers": "tokenizer_worker_num", "stream_interval": "stream_interval",
                 "admission_reserve": "schedule_conservativeness"},
    field_aliases={"cuda_graph_max_bs_decode": "graph_max_batch", "max_prefill_tokens": "token_budget"},
    resolved_facts={"max_running_requests": "max_running_requests", "max_total_tokens": "max_total_num_tokens",
                    "chunked_prefill_size": "chunked_prefill_size", "max_prefill_tokens": "max_prefill_tokens",
                    "context_length": "context_len"},
    startup_keys={"running_cap": "max_running_requests", "kv_tokens": "max_total_num_tokens",
                  "token_budget": "chunked_prefill_size", "prefill_chunk": "chunked_prefill_size"},
    neutral_fields={"disable_radix_cache": "prefix caching: the sweep's random prompts share no prefix"},
    prefill_capture_key="cuda_graph_num_tokens",
    prefill_graph_max_field="cuda_graph_max_bs_prefill",
    logs_graph_use=True,
    report_fields=("model_path", "tp_size", "max_running_requests", "attention_backend", "disable_cuda_graph",
                   "cuda_graph_max_bs", "disable_radix_cache", "moe_runner_backend", "fp4_gemm_runner_backend",
                   "enable_flashinfer_allreduce_fusion", "chunked_prefill_size", "mem_fraction_static", "page_size"),
    requeue_word="retraction",
    standin_backend="sim",  # SGLang needs GPUs: a config is rehearsed on the stand-in unless told otherwise
    serving_roles=SERVING_ROLES,
    metrics_flag="--enable-metrics",
)

#: evidence-schema column -> SGLang's /metrics gauges (these are the canonical names the
#: telemetry tables use; other engines' names are aliased to them)
METRICS: dict[str, tuple[str, ...]] = {
    "running_req": ("sglang:num_running_reqs",),
    "queue_req": ("sglang:num_queue_reqs",),
    "token_usage": ("sglang:token_usage",),
    "num_token": ("sglang:num_used_tokens",),
    "gen_throughput": ("sglang:gen_throughput",),
    "retracted_reqs": ("sglang:num_retracted_reqs",),
    "generation_tokens": ("sglang:generation_tokens_total", "sglang:generation_tokens"),
    # output tokens as each decode step makes them (0.5.8 on); generation_tokens_total counts a request's
    # tokens when it finishes, so a window cut through long requests credits them to the wrong window
    "decode_tokens": ('sglang:realtime_tokens_total{mode="decode"}',),
    "prompt_tokens": ("sglang:prompt_tokens_total", "sglang:prompt_tokens"),
    "requests_finished": ("sglang:num_requests_total", "sglang:num_requests"),
    # histograms (their _bucket, _sum and _count samples)
    "ttft_seconds": ("sglang:time_to_first_token_seconds",),
    "itl_seconds": ("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    "e2e_seconds": ("sglang:e2e_request_latency_seconds",),
}

# (field as glm5lib names it, kind, low, high, step, what it does); each field is rendered in the
# release's own name (cuda_graph_max_bs is cuda_graph_max_bs_decode on 0.5.23)
_LEVERS: tuple[tuple[str, str, float, float, str, str, str], ...] = (
    ("max_running_requests", "int", 1, 8192, "x2", "requests the scheduler runs at once", "running"),
    ("chunked_prefill_size", "int", 256, 65536, "x2", "prompt tokens one prefill chunk may take (the per-step token budget)",
     "prefill"),
    ("cuda_graph_max_bs", "int", 1, 1024, "x2", "largest batch captured as a CUDA graph", "running"),
    ("mem_fraction_static", "float", 0.5, 0.95, "0.05", "GPU-memory fraction for weights and KV cache", "memory"),
)


#: the field a release has where it captures prefill CUDA graphs by default (0.5.16's breakable
#: backend); before it, piecewise prefill graphs were off unless asked for
_PREFILL_GRAPHS = "cuda_graph_backend_prefill"


def levers(release: str | None = None) -> list[Lever]:
    """SGLang's tuning levers with safe bounds, under ``release``'s field and flag names. Where the
    release captures prefill CUDA graphs, the prefill chunk's values are the token counts it
    captures: a chunk between two runs every full chunk eager."""
    cat = catalogue(release)
    out = []
    for name, kind, low, high, step, what, acts_on in _LEVERS:
        field = cat.field_name(name)
        if field is None:
            continue
        grid = (tuple(float(v) for v in prefill_graph_sizes(int(high)))
                if name == "chunked_prefill_size" and _PREFILL_GRAPHS in cat.specs else ())
        out.append(Lever(field, kind, low, high, what, flag=cat.specs[field].flag, step=step, acts_on=acts_on,
                         grid=grid))
    return out


def launch_from_server_config(backend: str, request: LaunchRequest, extra_args: Sequence[str] = ()) -> Any:
    """Launch ``backend`` of :func:`launch` (SGLang or the stand-in, both
    configured by a ServerConfig), ``extra_args`` before the request's own."""
    if request.config is None:
        raise ConfigError(f"BACKEND {backend!r} needs a server configuration (CONFIG)", field="CONFIG")
    config = request.config
    if request.api_key:
        # the key the workbook was given (GLM5_API_KEY) is the one the server asks for: it travels as the
        # configuration's api_key, which the launcher hands SGLang in a private --config file
        own = config.api_key
        if own and own != request.api_key:
            raise ConfigError("the configuration's api_key differs from the key given to the launch (GLM5_API_KEY): "
                              "the server would ask for one and the client send the other; give one of them, or the same "
                              "key in both", field="api_key")
        config = config.with_changes(api_key=request.api_key)
    # imported here: SGLang's configuration (this package's ``config``) stays readable without
    # the launcher's dependencies (pandas), for ``glm5 --help`` and the stand-in
    from glm5lib.engines.sglang.launcher import launch

    return launch(config, backend=backend, log_path=request.log_path,
                  ready_timeout=request.ready_timeout, extra_args=[*extra_args, *request.extra_args])


#: names served from the launcher on first use (it loads pandas; SGLang's configuration does not)
_LAZY = dict.fromkeys(("launch", "Server", "programs"), "glm5lib.engines.sglang.launcher")

__getattr__ = module_getattr(__name__, _LAZY, globals())


def server_info_of(standin: bool):
    """An ``identify`` hook: SGLang's server info at a URL, from SGLang (``standin=False``) or
    from glm5lib's stand-in (which says so in it)."""

    def identify(url: str, api_key: str | None, timeout: float) -> dict[str, Any] | None:
        info = http.server_info(url, api_key=api_key, timeout=timeout)
        if not info or isinstance(info.get("standin"), dict) != standin:
            return None
        return info

    return identify


ADAPTER = EngineAdapter(
    name="sglang",
    title="SGLang",
    description="SGLang launched here from a ServerConfig (python -m sglang.launch_server)",
    capabilities=CAPABILITIES,
    metrics=METRICS,
    log_engine="sglang",
    config_type=ServerConfig,
    launcher=lambda request: launch_from_server_config("sglang", request),
    lever_maker=levers,
    program=PROGRAM,
    limits_hook=limits_hook,
    automatic_resolver=sglang_automatic,
    defaults_reader=defaults,
    release_reader=release_of,
    change_hook=change_hook,
    graph_schedule=decode_graph_sizes,
    step_benchmark=BENCHMARK,
    identify=server_info_of(standin=False),
    config_from_info=ServerConfig.from_server_args,
)
