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

Only the plain-model, non-disaggregated, non-speculative shapes are written (the stand-in
models none of those variants).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["decode_line", "line_generation", "prefill_line", "server_args_line"]


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
