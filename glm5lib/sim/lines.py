"""The scheduler and server-args lines of each emulated SGLang release, as that release writes them.

Read from each release's installed source (tests/contract checks the stand-in's lines against
it): decode and prefill stats in ``sglang/srt/managers/scheduler_metrics_mixin.py`` up to 0.5.9,
``scheduler_components/metrics_reporter.py`` in 0.5.23; the server-args line in
``sglang/srt/entrypoints/engine.py``.

- 0.5.8: both stats lines end with ``", "``; prefill ends at ``#queue-req``.
- 0.5.9: no trailing ``", "``; prefill adds ``input throughput (token/s)`` then ``cuda graph``.
- 0.5.23: prefill adds ``#pending-token`` after ``#queue-req`` and writes ``cuda graph`` before
  ``input throughput (token/s)``; ``ServerArgs`` is a msgspec Struct and the server logs its
  resolved dict, ``server_args={'name': value, ...}``, instead of the ``ServerArgs(...)`` repr.

Start-up lines (``sglang/srt/model_executor/``, ``mem_cache/memory_pool.py``) changed too:
``Init torch distributed ends.`` gained ``elapsed`` in 0.5.9 and is gone in 0.5.23;
``Load weight end.`` gained ``elapsed`` in 0.5.9 and lost ``dtype`` in 0.5.23; 0.5.23's
``KV Cache is allocated.`` names the dtype and its graph capture is ``Capture target decode CUDA
graph begin/end`` with the batch sizes in the end line.

Only the plain-model, non-disaggregated, non-speculative shapes are written (the stand-in
models none of those variants).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "capture_lines",
    "decode_line",
    "init_distributed_end_line",
    "kv_allocated_line",
    "line_generation",
    "load_weight_end_line",
    "prefill_line",
    "server_args_line",
]


def _key(release: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", release)[:3])


def line_generation(release: str) -> str:
    """Which bundled release's line formats ``release`` writes: ``0.5.8``, ``0.5.9`` or ``0.5.23``."""
    key = _key(release)
    if key >= (0, 5, 23):
        return "0.5.23"
    if key >= (0, 5, 9):
        return "0.5.9"
    return "0.5.8"


def decode_line(release: str, *, running: int, tokens: int, usage: float, graph: bool,
                gen_throughput: float, queue: int) -> str:
    """``Decode batch, #running-req: ...`` as ``release`` logs it every decode_log_interval steps."""
    line = (
        f"Decode batch, #running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
        f"cuda graph: {graph}, gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue}"
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
    if line_generation(release) == "0.5.23":
        return f"KV Cache is allocated. dtype: {dtype}, #tokens: {tokens}, KV size: {kv_gb:.2f} GB"
    return f"KV Cache is allocated. #tokens: {tokens}, KV size: {kv_gb:.2f} GB"


def capture_lines(release: str, *, sizes: list[int], avail_before: float, elapsed: float, mem_usage: float,
                  avail_after: float) -> tuple[list[str], list[str]]:
    """The decode CUDA graph capture's lines: (before the capture, after it)."""
    if line_generation(release) == "0.5.23":
        return (
            [f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
             f"avail mem={avail_before:.2f} GB"],
            [f"Capture target decode CUDA graph end. bs={sizes}, elapsed={elapsed:.2f} s, "
             f"mem usage={mem_usage:.2f} GB, avail mem={avail_after:.2f} GB."],
        )
    return (
        [f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail_before:.2f} GB",
         f"Capture cuda graph bs {sizes}"],
        [f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={mem_usage:.2f} GB. "
         f"avail mem={avail_after:.2f} GB."],
    )
