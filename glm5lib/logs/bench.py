"""``bench_serving`` results (SGLang's and ``vllm bench serve``'s) into a table."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping
from typing import Any

import pandas as pd

from glm5lib.logs.text import read_text, strip_ansi

__all__ = ["parse_bench_result"]

_BENCH_LABELS = {
    "backend": "backend",
    "traffic request rate": "request_rate",
    "request rate": "request_rate",
    "max request concurrency": "max_concurrency",
    "max reqeuest concurrency": "max_concurrency",
    "successful requests": "completed",
    "failed requests": "failed",
    "benchmark duration (s)": "duration",
    "total input tokens": "total_input_tokens",
    "total input text tokens": "total_input_text_tokens",
    "total input vision tokens": "total_input_vision_tokens",
    "total generated tokens": "total_output_tokens",
    "total generated tokens (retokenized)": "total_output_tokens_retokenized",
    "request throughput (req/s)": "request_throughput",
    "input token throughput (tok/s)": "input_throughput",
    "output token throughput (tok/s)": "output_throughput",
    "peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "peak concurrent requests": "max_concurrent_requests",
    "total token throughput (tok/s)": "total_throughput",
    "total throughput (tok/s)": "total_throughput",
    "concurrency": "concurrency",
    "accept length": "accept_length",
    "request rate configured (rps)": "request_rate",
    "maximum request concurrency": "max_concurrency",
}
_BENCH_METRIC_RE = re.compile(
    r"^(mean|median|std|p\d+(?:\.\d+)?|max|min) (e2e latency|e2el|ttft|tpot|itl) \(ms\)$"
)
_BENCH_METRIC_NAMES = {"e2e latency": "e2e_latency", "e2el": "e2el", "ttft": "ttft", "tpot": "tpot", "itl": "itl"}
_BENCH_HEADER_RE = re.compile(r"^=+\s*Serving Benchmark Result\s*=+\s*$")


def parse_bench_result(path_or_text: str | os.PathLike[str] | bytes) -> pd.DataFrame:
    """bench_serving output -> one row per run, with bench_serving's own field names.

    Reads its ``--output-file`` JSONL (one JSON object per line) and its printed
    ``Serving Benchmark Result`` blocks (mixed in any other output). Each row has ``tool``:
    ``"sglang"``, or ``"vllm"`` for a ``vllm bench serve`` block or JSON record (its latency
    fields keep vLLM's names, e.g. ``mean_e2el_ms``), and ``source``: ``"jsonl"`` or ``"printed"``.
    """
    text = strip_ansi(read_text(path_or_text))
    rows: list[dict[str, Any]] = []
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                obj = json.loads(line)
            except ValueError:
                obj = None
            if isinstance(obj, dict) and ("completed" in obj or "output_throughput" in obj):
                obj = dict(obj)
                obj.setdefault("tool", _bench_tool_json(obj))
                obj.setdefault("source", "jsonl")
                rows.append(obj)
            i += 1
            continue
        if _BENCH_HEADER_RE.match(line):
            row, i = _bench_block(lines, i + 1)
            if row:
                rows.append(row)
            continue
        i += 1
    if not rows and text.strip().startswith("[") and text.strip().endswith("]"):
        try:
            arr = json.loads(text)
            rows = [dict(o, tool=_bench_tool_json(o), source="jsonl") for o in arr if isinstance(o, dict)]
        except ValueError:
            pass
    if not rows:
        return pd.DataFrame(columns=["tool", "source", "backend", "completed", "duration", "output_throughput"])
    frame = pd.DataFrame(rows)
    lead = [c for c in ("tool", "source", "backend", "max_concurrency", "request_rate", "completed") if c in frame.columns]
    return frame[lead + [c for c in frame.columns if c not in lead]]


def _bench_tool_json(obj: Mapping[str, Any]) -> str:
    if any(k in obj for k in ("mean_e2el_ms", "model_id", "tokenizer_id", "burstiness", "num_prompts")) and "dataset_name" not in obj:
        return "vllm"
    if "mean_e2el_ms" in obj and "mean_e2e_latency_ms" not in obj:
        return "vllm"
    return "sglang"


def _bench_block(lines: list[str], i: int) -> tuple[dict[str, Any], int]:
    row: dict[str, Any] = {}
    labels_seen: set[str] = set()
    while i < len(lines):
        raw = lines[i].strip()
        if not raw:
            i += 1
            continue
        if set(raw) == {"="}:
            i += 1
            break
        if _BENCH_HEADER_RE.match(raw) or raw.startswith(("{", "[")):
            break  # the next block or a JSON record: this block was cut off
        if raw.startswith("-") or raw.startswith("="):
            i += 1
            continue
        label, sep, value = raw.partition(":")
        if not sep or len(label) > 60:
            break
        label = label.strip().lower()
        labels_seen.add(label)
        value = value.strip()
        name = _BENCH_LABELS.get(label)
        if name is None:
            m = _BENCH_METRIC_RE.match(label)
            if m:
                stat, metric = m.group(1), _BENCH_METRIC_NAMES[m.group(2)]
                name = f"{stat}_{metric}_ms"
            else:
                name = re.sub(r"[^0-9a-z]+", "_", label).strip("_")
        row[name] = _bench_value(value)
        i += 1
    is_vllm = "failed requests" in labels_seen or "request rate configured (rps)" in labels_seen or (
        "backend" not in labels_seen and any(k.endswith("e2el (ms)") for k in labels_seen)
    )
    row["tool"] = "vllm" if is_vllm else "sglang"
    row["source"] = "printed"
    if not is_vllm:
        # SGLang names the end-to-end latency e2e_latency in its JSON.
        row = {k.replace("_e2el_ms", "_e2e_latency_ms"): v for k, v in row.items()}
    return row, i


def _bench_value(value: str) -> Any:
    # Keep the number when a pasted block carries a note after it ("0   <<< new line").
    first = value.split(maxsplit=1)[0] if value.strip() else value
    if first != value and first[:1].isdigit():
        value = first
    if value in ("inf", "Inf"):
        return math.inf
    if value in ("None", "none", "N/A"):
        return None
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value

