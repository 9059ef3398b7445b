"""Hugging Face ``transformers serve`` (continuous batching) as one engine adapter.

Its configuration is :class:`TransformersConfig` (``transformers serve`` options under their own
names, checked against the catalogue of its release in ``flags/``); :func:`launch_transformers`
starts it; its log is read by :mod:`glm5lib.engines.transformers.log`.

How its continuous batching behaves (transformers 5.17, ``generation/continuous_batching/``):
one scheduler step carries prompt chunks and decoding requests together under one token budget,
``--cb-max-batch-tokens`` (a decoding request takes one token of it, so the budget also caps the
requests running at once: at most min(1,024, budget)); the paged KV cache holds ``--cb-num-blocks``
blocks of ``--cb-block-size`` tokens, sized from ``--cb-max-memory-percent`` of the memory left
after the weights when not given; both are chosen when the first request arrives. It admits a
request when blocks for its prompt are free (no reserve for the tokens it will generate) and,
when blocks run out, *offloads* running requests (sends them back to the queue, their KV copied
to CPU or recomputed). It logs no per-step lines and serves no ``/metrics``; its API accepts
only OpenAI's own fields (no ``ignore_eos``, no token-id prompts, no ``stream_options``).
"""

from __future__ import annotations

from typing import Any

from glm5lib.engines.base import AutomaticValue, Capabilities, EngineAdapter, LaunchRequest, Lever
from glm5lib.engines.flagconfig import LeverSpec, blocks_as_kv_tokens, catalogue_levers
from glm5lib.engines.transformers.config import (
    BUNDLED_RELEASES,
    CONFIG_FORMAT,
    DEFAULT_RELEASE,
    TransformersConfig,
    launch_transformers,
    serve_argv,
    transformers_flags,
    transformers_python,
)
from glm5lib.errors import ConfigError

__all__ = [
    "ADAPTER",
    "BUNDLED_RELEASES",
    "CAPABILITIES",
    "CONFIG_FORMAT",
    "DEFAULT_RELEASE",
    "METRICS",
    "TransformersConfig",
    "launch_transformers",
    "levers",
    "serve_argv",
    "transformers_automatic",
    "transformers_flags",
    "transformers_python",
]

#: the block size its cache uses when --cb-block-size is not given (ContinuousBatchingConfig)
DEFAULT_BLOCK_SIZE = 256
#: fields it resolves at its first request when unset, and logs under the same names (its log adapter)
_RESOLVED = ("cb_max_batch_tokens", "cb_num_blocks", "cb_block_size")

CAPABILITIES = Capabilities(
    reserves_future_tokens=False,
    logs_prefill_lines=False,
    logs_decode_lines=False,
    # one flag bounds both: the tokens of a step, and so the requests decoding in it
    token_budget_field="cb_max_batch_tokens",
    running_cap_field="cb_max_batch_tokens",
    kv_fraction_field="cb_max_memory_percent",
    # no flag sets the largest graph batch; --cb-use-cuda-graph turns graphs *on* (its False is
    # --no-cb-use-cuda-graph), the opposite sense of a switch that turns them off
    cuda_graph_bs_field=None,
    cuda_graph_off_field=None,
    startup_keys={"running_cap": "max_running_requests", "token_budget": "cb_max_batch_tokens",
                  "kv_tokens": "max_total_num_tokens"},
    resolved_facts={name: name for name in _RESOLVED},
    mixed_steps=True,
    requeue_word="offload",
    resolves_automatic_values=True,
    default_api="completions",
    token_id_prompts=False,  # it answers 400 to token-id prompts
)

#: it serves no /metrics (GET /metrics answers 404)
METRICS: dict[str, tuple[str, ...]] = {}

_LEVERS: tuple[LeverSpec, ...] = (
    ("cb_max_batch_tokens", "int", 16, 32768, "x2",
     "tokens one continuous-batching step may compute, prompt chunks and decoding requests together "
     "(so also the requests decoding at once)", "running"),
    ("cb_max_memory_percent", "float", 0.5, 0.95, "0.05",
     "fraction of the memory left after the weights that the paged KV cache takes", "memory"),
)


def levers(release: str | None = None) -> list[Lever]:
    """Its tuning levers with safe bounds, those ``release``'s catalogue has."""
    return catalogue_levers(_LEVERS, transformers_flags(release)[0])


def transformers_automatic(field: str, args: Any, startup: Any = None, environment: Any = None) -> AutomaticValue | None:
    """What the engine chose for ``field`` left unset in ``args``: the paged cache's sizes, read
    from its ``Paged cache initialized`` line (it sizes them from free memory when the first request
    arrives); None where the field was given or the log did not say."""
    if (args or {}).get(field) is not None:
        return None
    startup = startup or {}
    if field in _RESOLVED and startup.get(field):
        how = "transformers serve's paged cache line (it sizes the cache from free memory at the first request)"
        return AutomaticValue(field, int(startup[field]), how=how)
    return None


#: the KV cache set in blocks (``cb_num_blocks``, of ``cb_block_size`` tokens, 256 unless set) as
#: the neutral ``kv_tokens``
_change_hook = blocks_as_kv_tokens("cb_num_blocks", ("cb_block_size", "--cb-block-size"), "cb_block_size",
                                   DEFAULT_BLOCK_SIZE)


def _limits_hook(values: dict, sources: dict, names: dict, args: Any, startup: Any) -> None:
    """The KV pool in tokens where the log gives it in blocks only (5.19 logs the cache's blocks,
    not their tokens): the blocks in force times the configured block size (256 unless set)."""
    if values.get("kv_tokens") is not None:
        return
    blocks = (startup or {}).get("cb_num_blocks") or (args or {}).get("cb_num_blocks")
    size = (args or {}).get("cb_block_size") or DEFAULT_BLOCK_SIZE
    try:
        tokens = int(blocks) * int(size)
    except (TypeError, ValueError):
        return
    if tokens > 0:
        where = "start-up log line" if (startup or {}).get("cb_num_blocks") else "server arguments"
        values["kv_tokens"] = tokens
        sources["kv_tokens"] = f"{where} (blocks) x cb_block_size"
        names["kv_tokens"] = "cb_num_blocks"


def _launch(request: LaunchRequest) -> Any:
    config = request.config
    if config is None and request.model:
        config = TransformersConfig({"force_model": request.model})
    if not isinstance(config, TransformersConfig):
        raise ConfigError("BACKEND 'transformers' needs a transformers config: CONFIG names a JSON file with "
                          "\"engine\": \"transformers\" and \"server_args\" (e.g. {\"force_model\": ..., "
                          f"\"cb_max_batch_tokens\": 64}}), not {type(config).__name__}", field="CONFIG")
    if request.api_key:
        raise ConfigError("transformers serve takes no API key (it has no --api-key flag): leave API_KEY "
                          "(GLM5_API_KEY, --api-key-file) unset",
                          field="api_key")
    return launch_transformers(config, log_path=request.log_path, ready_timeout=request.ready_timeout,
                               extra_args=list(request.extra_args), port=request.port)


ADAPTER = EngineAdapter(
    name="transformers",
    title="transformers serve",
    description="Hugging Face `transformers serve --continuous-batching` launched here from a transformers config",
    capabilities=CAPABILITIES,
    metrics=METRICS,
    log_engine="transformers",
    config_type=TransformersConfig,
    launcher=_launch,
    lever_maker=levers,
    automatic_resolver=transformers_automatic,
    change_hook=_change_hook,
    limits_hook=_limits_hook,
)
