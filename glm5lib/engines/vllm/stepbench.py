"""vLLM's offline step benchmark: its own ``LLM`` engine timing a decode step per batch size.

``vllm bench latency`` times whole requests at one batch size per process launch (and the CPU
wheel's ``vllm`` script does not start: it looks for a distribution named ``vllm``), so the
benchmark here is a short script run by vLLM's own interpreter (:mod:`.step_bench_main`, which
imports vLLM's public ``LLM``, ``SamplingParams`` and ``EngineArgs`` and nothing of glm5lib): one
launch, every batch size, the server's own engine flags. vLLM on CPU has no CUDA graphs; on a GPU
its steps replay graphs up to its capture ceiling as they do in the server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from glm5lib.engines.base import StepBenchmark
from glm5lib.engines.vllm._config import cpu_env, vllm_python

__all__ = ["BENCHMARK", "SCRIPT", "bench_command", "parse_bench_output"]

SCRIPT = Path(__file__).with_name("step_bench_main.py")
# server-only flags: the offline engine takes the engine's
_SERVER_ONLY = {"host", "port", "served_model_name", "api_key", "uvicorn_log_level", "disable_log_requests",
                "enable_log_requests", "disable_uvicorn_access_log", "model_tag", "api_server_count"}


def _argv_of(args: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in args.items():
        name = str(key).lstrip("-").replace("-", "_")
        if name in _SERVER_ONLY or value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            if value:
                out.append(flag)
            continue
        if isinstance(value, (list, tuple)):
            out += [flag, *map(str, value)]
            continue
        if isinstance(value, Mapping):
            out += [flag, json.dumps(dict(value))]
            continue
        out += [flag, str(value)]
    return out


def bench_command(args: Any, batches: Sequence[int], input_len: int, output_len: int, *,
                  graphs_off: bool | None = None, python: str | None = None, module: str | None = None,
                  changes: Any = None) -> list[str]:
    """The benchmark's argv for a phase's engine arguments (a :class:`VllmConfig` or its fields), with
    ``changes`` (fields of a change being forecast) on top."""
    batches = sorted({int(b) for b in batches if int(b) >= 1})
    if not batches:
        raise ValueError("no batch size to benchmark")
    fields = {**(args.to_dict() if hasattr(args, "to_dict") and hasattr(args, "env") else dict(args)),
              **dict(changes or {})}
    if graphs_off is not None:
        fields["enforce_eager"] = bool(graphs_off)
    return [python or "python", str(SCRIPT), "--batch-size", *map(str, batches), "--input-len", str(int(input_len)),
            "--output-len", str(max(int(output_len), 2)), "--", *_argv_of(fields)]


def parse_bench_output(text: str, *, graphs_off: bool | None = None) -> list[dict[str, Any]]:
    """The script's JSON lines with a ``batch``: ``batch``, ``step_ms``, ``prefill_ms``, ``total_ms``;
    ``graphs`` None (the output does not say whether a step replayed a graph)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "batch" in row and "step_ms" in row:
            row["graphs"] = False if graphs_off else None
            rows.append(row)
    return rows


BENCHMARK = StepBenchmark(
    title="vLLM's offline engine (LLM.generate)",
    command=bench_command,
    parse=parse_bench_output,
    hint="it needs vLLM in the engine's interpreter (make vllm, or GLM5_VLLM_PYTHON)",
    python=vllm_python,
    env=cpu_env,
)
