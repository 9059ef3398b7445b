"""The values vLLM chooses at start for ``max_num_seqs`` and ``max_num_batched_tokens`` left unset.

vLLM logs only the arguments a user gave (``non-default args: {...}``); when ``max_num_seqs`` is
not among them the running-request cap is whatever vLLM chose, and it logs that choice only at
DEBUG level. :func:`vllm_automatic` works it out as vLLM 0.32.0 does
(``EngineArgs.get_batch_defaults`` and ``_set_default_max_num_seqs_and_batched_tokens_args`` in
``vllm/engine/arg_utils.py``), for its OpenAI-compatible server:

* the device picks the table: on CPU 128 requests and 2,048 tokens a step per rank
  (``x pipeline x tensor parallel size``); on a GPU with 160 GiB or more 1,024 and 16,384; on
  one with 70 GiB or more that is not an A100, 1,024 and 8,192; on any other GPU 256 and 2,048;
  TPUs keep the GPU's requests with their chip's tokens (v6e 1,024, v5e 512, v5p 256);
* expert-parallel MoE with a low-latency all-to-all over data parallel ranks takes 256 tokens;
* ``--performance-mode throughput`` doubles each value left unset;
* unset tokens: at least the context length when chunked prefill is off, at most
  ``max_num_seqs x`` the context length;
* unset requests: at most the tokens of a step (``--max-num-batched-tokens 64`` caps at 64).

The device comes from the log's start-up facts (``CPU KV cache size: ...`` -> ``device="cpu"``)
or the environment snapshot (the GPUs' name and memory). Where it is not known the result lists
every value the rule can give, and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from glm5lib.engines.base import AutomaticValue

__all__ = ["RULE_RELEASE", "VLLM_AUTOMATIC_FIELDS", "AutomaticValue", "vllm_automatic"]

#: the vLLM release whose rule this is
RULE_RELEASE = "0.32.0"
VLLM_AUTOMATIC_FIELDS = ("max_num_seqs", "max_num_batched_tokens")

_GIB = 1 << 30
# (requests, tokens) a step for the OpenAI server (UsageContext.OPENAI_API_SERVER)
_CPU_PER_RANK = (128, 2048)
_GPU_160 = (1024, 16384)
_GPU_70 = (1024, 8192)
_GPU_OTHER = (256, 2048)
_TPU_TOKENS = {"V6E": 1024, "V5E": 512, "V5P": 256}
_BATCHED_DP_MOE_TOKENS = 256  # SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS_FOR_BATCHED_DP
_LOW_LATENCY_ALL2ALL = ("deepep_low_latency", "nixl_ep")


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return int(value)


def _device(startup: Mapping[str, Any], environment: Mapping[str, Any] | None) -> tuple[str | None, str, float | None]:
    """(device kind, its name, total memory in bytes) as far as the sources tell."""
    kind = str(startup.get("device") or "").lower() or None
    gpus = [g for g in (environment or {}).get("gpus") or [] if isinstance(g, Mapping)]
    if kind is None and gpus and not (environment or {}).get("standin"):
        kind = "gpu"
    if kind in (None, "cpu", "tpu") or not gpus:
        return kind, str(startup.get("device_name") or ""), None
    memory = _int(gpus[0].get("memory_total_bytes"))
    return kind, str(gpus[0].get("name") or ""), memory


def _tables(kind: str | None, name: str, memory: float | None, world: int) -> list[tuple[tuple[int, int], str]]:
    """Every (requests, tokens) row of vLLM's table the device can select, each with its reason."""
    if kind == "cpu":
        return [((_CPU_PER_RANK[0] * world, _CPU_PER_RANK[1] * world),
                 f"on CPU ({_CPU_PER_RANK[0]} requests and {_CPU_PER_RANK[1]:,} tokens a step x world size {world})")]
    if kind == "tpu":
        chip = name.upper()
        if chip in _TPU_TOKENS:
            return [((_GPU_OTHER[0], _TPU_TOKENS[chip]), f"on TPU {chip}")]
        return [((_GPU_OTHER[0], t), f"on TPU {c}") for c, t in _TPU_TOKENS.items()]
    gpu = []
    if memory is not None:
        if memory >= 160 * _GIB:
            gpu = [(_GPU_160, f"on a GPU with 160 GiB or more ({name}, {memory / _GIB:.0f} GiB)")]
        elif memory >= 70 * _GIB and "a100" not in name.lower():
            gpu = [(_GPU_70, f"on a GPU with 70-160 GiB, not an A100 ({name}, {memory / _GIB:.0f} GiB)")]
        else:
            gpu = [(_GPU_OTHER, f"on a GPU under 70 GiB or an A100 ({name}, {memory / _GIB:.0f} GiB)")]
    else:
        gpu = [(_GPU_160, "on a GPU with 160 GiB or more"), (_GPU_70, "on one with 70-160 GiB"),
               (_GPU_OTHER, "on a smaller one or an A100")]
    if kind is None:
        cpu = _tables("cpu", name, None, world)
        return [*cpu, *gpu]
    return gpu


def vllm_automatic(
    field: str,
    args: Mapping[str, Any],
    startup: Mapping[str, Any] | None = None,
    environment: Mapping[str, Any] | None = None,
) -> AutomaticValue | None:
    """The value vLLM chose at start for ``max_num_seqs`` or ``max_num_batched_tokens`` when
    ``args`` (vLLM's names) leave it unset; None for any other field or one that is set.

    ``startup``: the log's start-up facts (``device``, ``context_len``, ``engine_version``;
    ``device_name`` for a TPU's chip); ``environment``: the run's environment snapshot (GPU name
    and memory). See the module's docstring for the rule; ``tests/test_vllm_defaults.py``
    checks it against the installed vLLM's own ``get_batch_defaults`` on every device it tells apart.
    """
    if field not in VLLM_AUTOMATIC_FIELDS or _int(args.get(field)) is not None:
        return None
    startup = startup or {}
    world = (_int(args.get("pipeline_parallel_size")) or 1) * (_int(args.get("tensor_parallel_size")) or 1)
    kind, name, memory = _device(startup, environment)
    context = _int(args.get("max_model_len")) or _int(startup.get("context_len"))
    set_seqs, set_tokens = _int(args.get("max_num_seqs")), _int(args.get("max_num_batched_tokens"))
    batched_dp_moe = (
        args.get("all2all_backend") in _LOW_LATENCY_ALL2ALL
        and bool(args.get("enable_expert_parallel"))
        and (_int(args.get("data_parallel_size")) or 1) > 1
    )
    throughput = args.get("performance_mode") == "throughput"
    chunked = args.get("enable_chunked_prefill") is not False

    results: list[tuple[int, str]] = []
    for (seqs, tokens), where in _tables(kind, name, memory, world):
        notes = []
        if batched_dp_moe:
            tokens = _BATCHED_DP_MOE_TOKENS
            notes.append(f"{tokens} tokens for expert-parallel MoE with a low-latency all-to-all")
        if throughput:
            seqs, tokens = seqs * 2, tokens * 2
            notes.append("doubled by --performance-mode throughput")
        if set_seqs is not None:
            seqs = set_seqs
        if set_tokens is None:
            if context is not None and not chunked and context > tokens:
                tokens = context
                notes.append(f"raised to the context length {context:,} (chunked prefill off)")
            if context is not None and seqs * context < tokens:
                tokens = seqs * context
                notes.append(f"at most {seqs:,} requests x {context:,} tokens")
        else:
            tokens = set_tokens
        if field == "max_num_seqs":
            if tokens < seqs:
                notes.append(f"at most max_num_batched_tokens {tokens:,}")
            seqs = min(seqs, tokens)
        value = seqs if field == "max_num_seqs" else tokens
        results.append((value, where + "".join(f", {n}" for n in notes)))

    rule = f"vLLM {RULE_RELEASE}'s rule for its OpenAI server"
    version = startup.get("engine_version")
    if version and str(version) != RULE_RELEASE:
        rule += f" (this log is from vLLM {version}, whose rule may differ)"
    values = tuple(sorted({v for v, _ in results}))
    if len(values) == 1:
        return AutomaticValue(field, values[0], values, f"{rule} {results[0][1]}")
    unknown = "the device is not in the log or the environment" if kind is None else "the GPU's memory is not known"
    options = "; ".join(f"{v:,} {where}" for v, where in results)
    return AutomaticValue(field, None, values, f"{rule}: {options}; {unknown}")
