"""The scheduler and server-args lines of each emulated SGLang release, as that release writes them.

Read from each release's installed source (tests/integration/contract checks the stand-in's lines against
it): decode and prefill stats in ``sglang/srt/managers/scheduler_metrics_mixin.py`` up to 0.5.9,
``scheduler_components/metrics_reporter.py`` in 0.5.23; the server-args line in
``sglang/srt/entrypoints/engine.py``.

- 0.5.8: both stats lines end with ``", "``; prefill ends at ``#queue-req``.
- 0.5.9: no trailing ``", "``; prefill adds ``input throughput (token/s)`` then ``cuda graph``.
- 0.5.16: the stats lines are written by ``scheduler_components/metrics_reporter.py``, as in 0.5.23:
  prefill adds ``#pending-token`` after ``#queue-req`` and writes ``cuda graph`` before
  ``input throughput (token/s)``, which counts this batch's tokens (0.5.9: the batch before's);
  the server still logs the ``ServerArgs(...)`` repr.
- 0.5.23: ``ServerArgs`` is a msgspec Struct and the server logs its resolved dict,
  ``server_args={'name': value, ...}``, instead of the ``ServerArgs(...)`` repr.

Start-up lines (``sglang/srt/model_executor/``, ``mem_cache/memory_pool.py``) changed too:
``Init torch distributed ends.`` gained ``elapsed`` in 0.5.9 and is gone in 0.5.23;
``Load weight end.`` gained ``elapsed`` in 0.5.9 and had lost ``dtype`` by 0.5.16; from 0.5.16
``KV Cache is allocated.`` names the dtype and the graph capture is ``Capture target decode CUDA
graph begin/end``, with the batch sizes in the begin line in 0.5.16 and in the end line in 0.5.23
(a real 0.5.16 log, tests/fixtures/logs/sglang-0.5.16-h200.log, shows each of these).

The variants a launch configuration calls for (:func:`line_shape`):

- speculative decoding (``--speculative-algorithm``): decode lines carry ``accept len: F,
  accept rate: F, `` after the token usage. The acceptance rate is the release's: 0.5.8 and
  0.5.9 divide accepted tokens (the bonus token included) by the draft tokens, 0.5.16 and 0.5.23
  divide the accepted drafts by the draft tokens after the first;
- prefill CUDA graphs: 0.5.9's prefill ``cuda graph`` is True for a batch of at most
  ``piecewise_cuda_graph_max_tokens`` new tokens (default ``chunked_prefill_size``) when
  ``--enable-piecewise-cuda-graph`` is on; 0.5.16 and 0.5.23 capture prefill graphs by default on CUDA
  (``--cuda-graph-backend-prefill`` breakable) for batches of at most
  ``cuda_graph_max_bs_prefill`` tokens (default ``chunked_prefill_size``, at most
  ``max_total_tokens``) unless they are turned off; 0.5.8's prefill line has no graph field.
  The defaults are SGLang's rule for models without MLA attention (MLA models capture fewer
  prefill tokens by default: 2,048 in 0.5.9, at most 8,192 in 0.5.23).

Hybrid-model, disaggregated and DP-attention shapes are not written (the stand-in models none
of those deployments).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from glm5lib.engines.sglang.config import graphs_off_for

__all__ = [
    "GENERATIONS",
    "NOMINAL_ACCEPT_LENGTH",
    "SPECULATIVE_DEFAULTS",
    "LineShape",
    "capture_lines",
    "decode_line",
    "init_distributed_end_line",
    "kv_allocated_line",
    "line_generation",
    "line_shape",
    "load_weight_end_line",
    "prefill_line",
    "server_args_line",
    "writes_since",
]


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", release)[:3])


#: The releases whose line formats the stand-in writes, oldest first (each checked against that
#: release's source by tests/integration/contract).
GENERATIONS = ("0.5.8", "0.5.9", "0.5.16", "0.5.23")


def line_generation(release: str) -> str:
    """Which of :data:`GENERATIONS` ``release`` writes its lines as: the newest not after it."""
    key = _key(release)
    return [g for g in GENERATIONS if _key(g) <= key][-1] if key >= _key(GENERATIONS[0]) else GENERATIONS[0]


def writes_since(release: str, generation: str) -> bool:
    """``release`` writes its lines as ``generation`` or a later one of :data:`GENERATIONS`."""
    return _key(line_generation(release)) >= _key(generation)


#: Tokens a speculative decoding step yields per request, the bonus token included: a nominal
#: figure (the stand-in does not model speculative decoding's timing), written in decode lines.
NOMINAL_ACCEPT_LENGTH = 2.0
#: (speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens) SGLang 0.5.x
#: chooses when a speculative algorithm is on and they are unset (its choice for GLM-5 and
#: DeepSeek-style models, ``auto_choose_speculative_params``).
SPECULATIVE_DEFAULTS = (3, 1, 4)


@dataclass(frozen=True)
class LineShape:
    """Which variant of the stats lines a launch configuration writes."""

    #: prefill batches of at most this many new tokens replay a CUDA graph (0: none do)
    prefill_graph_tokens: int = 0
    #: ``(accept len, accept rate)`` of speculative decoding's decode lines; None without it
    accept: tuple[float, float] | None = None


def _on(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def line_shape(release: str, values: Mapping[str, Any], *, graphs_off: bool) -> LineShape:
    """The variant ``release`` writes for the resolved server arguments ``values``;
    ``graphs_off``: CUDA graphs are off for both phases (whichever flags said it)."""
    generation = line_generation(release)
    tokens = 0
    if generation == "0.5.9" and _on(values.get("enable_piecewise_cuda_graph")):
        tokens = int(values.get("piecewise_cuda_graph_max_tokens") or values.get("chunked_prefill_size") or 0)
    elif writes_since(release, "0.5.16") and not (graphs_off or graphs_off_for(values, "prefill")):
        tokens = int(values.get("cuda_graph_max_bs_prefill") or values.get("chunked_prefill_size") or 0)
        if values.get("max_total_tokens"):
            tokens = min(tokens, int(values["max_total_tokens"]))
    accept = None
    if values.get("speculative_algorithm"):
        drafts = int(values.get("speculative_num_draft_tokens") or SPECULATIVE_DEFAULTS[2])
        length = min(NOMINAL_ACCEPT_LENGTH, float(drafts))
        if writes_since(release, "0.5.16"):
            rate = (length - 1.0) / (drafts - 1) if drafts > 1 else 0.0
        else:
            rate = length / drafts
        accept = (length, rate)
    return LineShape(prefill_graph_tokens=max(0, tokens), accept=accept)


def decode_line(release: str, *, running: int, tokens: int, usage: float, graph: bool,
                gen_throughput: float, queue: int, accept: tuple[float, float] | None = None) -> str:
    """``Decode batch, #running-req: ...`` as ``release`` logs it every decode_log_interval steps;
    ``accept``: speculative decoding's (accept len, accept rate)."""
    spec = f"accept len: {accept[0]:.2f}, accept rate: {accept[1]:.2f}, " if accept else ""
    line = (
        f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
        f"{spec}cuda graph: {graph}, gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue}"
    )
    return line + ", " if line_generation(release) == "0.5.8" else line


def prefill_line(release: str, *, new_seq: int, new_token: int, cached_token: int, usage: float,
                 running: int, queue: int, pending_token: int, graph: bool, input_throughput: float) -> str:
    """``Prefill batch, #new-seq: ...`` as ``release`` logs it for each prefill batch."""
    head = (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, #cached-token: {cached_token}, "
        f"token usage: {usage:.2f}, #running-req: {running}, #queue-req: {queue}, "
    )
    generation = line_generation(release)
    if generation == "0.5.8":
        return head
    if generation == "0.5.9":
        return head + f"input throughput (token/s): {input_throughput:.2f}, cuda graph: {graph}"
    return head + (
        f"#pending-token: {pending_token}, cuda graph: {graph}, "
        f"input throughput (token/s): {input_throughput:.2f}"
    )


def server_args_line(release: str, values: Mapping[str, Any]) -> str:
    """The start-up ``server_args=...`` line (values already masked by the caller)."""
    if line_generation(release) == "0.5.23":
        return f"server_args={dict(values)!r}"
    inner = ", ".join(f"{k}={v!r}" for k, v in values.items())
    return f"server_args=ServerArgs({inner})"


def init_distributed_end_line(release: str, *, elapsed: float, mem_usage: float) -> str | None:
    """``Init torch distributed ends. ...`` (None for 0.5.23, which no longer logs it)."""
    generation = line_generation(release)
    if generation == "0.5.23":
        return None
    if generation == "0.5.8":
        return f"Init torch distributed ends. mem usage={mem_usage:.2f} GB"
    return f"Init torch distributed ends. elapsed={elapsed:.2f} s, mem usage={mem_usage:.2f} GB"


def load_weight_end_line(release: str, *, elapsed: float, model_type: str, avail: float, mem_usage: float,
                         dtype: str = "torch.bfloat16") -> str:
    """``Load weight end. ...`` as ``release`` logs it."""
    generation = line_generation(release)
    tail = f"avail mem={avail:.2f} GB, mem usage={mem_usage:.2f} GB."
    if generation == "0.5.8":
        return f"Load weight end. type={model_type}, dtype={dtype}, {tail}"
    if generation == "0.5.9":
        return f"Load weight end. elapsed={elapsed:.2f} s, type={model_type}, dtype={dtype}, {tail}"
    return f"Load weight end. elapsed={elapsed:.2f} s, type={model_type}, {tail}"


def kv_allocated_line(release: str, *, tokens: int, kv_gb: float, dtype: str = "torch.bfloat16") -> str:
    """``KV Cache is allocated. ...`` (one K+V pool, as an MLA or packed pool logs it)."""
    if writes_since(release, "0.5.16"):
        return f"KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, KV size: {kv_gb:.2f} GB"
    return f"KV Cache is allocated. #tokens: {tokens}, KV size: {kv_gb:.2f} GB"


def capture_lines(release: str, *, sizes: list[int], avail_before: float, elapsed: float, mem_usage: float,
                  avail_after: float) -> tuple[list[str], list[str]]:
    """The decode CUDA graph capture's lines: (before the capture, after it)."""
    if writes_since(release, "0.5.16"):
        # the captured sizes: in the begin line in 0.5.16, in the end line in 0.5.23
        early, late = (f"bs={sizes}, ", "") if line_generation(release) == "0.5.16" else ("", f"bs={sizes}, ")
        return (
            [f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, {early}"
             f"avail mem={avail_before:.2f} GB"],
            [f"Capture target decode CUDA graph end. {late}elapsed={elapsed:.2f} s, "
             f"mem usage={mem_usage:.2f} GB, avail mem={avail_after:.2f} GB."],
        )
    return (
        [f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail_before:.2f} GB",
         f"Capture cuda graph bs {sizes}"],
        [f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={mem_usage:.2f} GB. "
         f"avail mem={avail_after:.2f} GB."],
    )
