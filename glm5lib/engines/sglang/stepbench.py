"""SGLang's offline step benchmark (``bench_one_batch``) and its CUDA-graph schedule.

``python -m sglang.bench_one_batch`` (``sglang.benchmark.one_batch`` from 0.5.15; the old module is
a deprecated wrapper until 0.5.20 and gone in 0.5.21) loads the model with the server's own
arguments and times one prefill and every decode step of a batch, for each ``--batch-size`` given,
in one process and without the HTTP server. Per point it prints (0.5.4-0.5.23 alike)::

    Prefill. latency: 0.01234 s, throughput:  20000.00 token/s
    Decode 0. Batch size: 64, latency: 0.00571 s, throughput:  11208.41 token/s
    Decode.  median latency: 0.00572 s, median throughput:  11189.16 token/s
    Total. latency:  1.479 s, throughput:  22150.09 token/s

after a warm-up point printed the same way before ``Benchmark ...``; a batch the KV pool cannot
hold is ``skipping (bs, il, ol) due to max batch size limit``. Its decode steps replay the decode
CUDA graph up to the largest captured size (the capture line names them) and run eagerly above it
or with ``--disable-cuda-graph``. Its request pool is the running cap, so the benchmark runs with
the cap raised to the largest batch asked.

SGLang captures decode graphs for the sizes of :func:`decode_graph_sizes` up to the ceiling
(``cuda_graph_max_bs``), trimmed to the request pool.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from glm5lib.engines.base import StepBenchmark, whole_size
from glm5lib.engines.sglang.config import ServerConfig, decode_graph_sizes, release_of

__all__ = ["BENCHMARK", "bench_command", "decode_graph_sizes", "kv_tokens_needed", "parse_bench_output"]

_PREFILL = re.compile(r"Prefill\. latency: ([\d.]+) s")
_DECODE_I = re.compile(r"Decode (\d+)\. Batch size: (\d+), latency: ([\d.]+) s")
_DECODE_MEDIAN = re.compile(r"Decode\.\s+median latency: ([\d.]+) s")
_TOTAL = re.compile(r"Total\. latency:\s*([\d.]+) s")
_CAPTURED = (
    re.compile(r"Capture cuda graph bs \[([\d,\s]*)\]"),
    re.compile(r"Capture target decode CUDA graph (?:begin|end)\.[^\n]*?bs=\[([\d,\s]*)\]"),
)
# what SGLang resolves at start-up and logs (0.5.16's cuda_graph_config): not a user's flag
_RESOLVED = ("cuda_graph_config",)
_GRAPH_CEILINGS = ("cuda_graph_max_bs", "cuda_graph_max_bs_decode")
# the last release whose old module still runs (a deprecated wrapper from 0.5.15)
_OLD_MODULE_UNTIL = (0, 5, 20)


def _release_tuple(release: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in str(release).split(".")[:3])
    except ValueError:
        return (0,)


def bench_module(release: str | None) -> str:
    """The benchmark's module in ``release`` (the old name where it still runs)."""
    return ("sglang.bench_one_batch" if release is None or _release_tuple(release) <= _OLD_MODULE_UNTIL
            else "sglang.benchmark.one_batch")


def bench_command(args: Mapping[str, Any], batches: Sequence[int], input_len: int, output_len: int, *,
                  graphs_off: bool | None = None, python: str | None = None, module: str | None = None,
                  changes: Mapping[str, Any] | None = None) -> list[str]:
    """The benchmark's argv for a phase's server arguments (logged ``ServerArgs`` or a config's
    fields): the same model and flags, the running cap raised to the largest batch, graphs switched
    off (True), on (False) or left as they are (None); ``changes`` (fields of a change being
    forecast: its graph ceiling, graphs off) on top."""
    batches = sorted({int(b) for b in batches if int(b) >= 1})
    if not batches:
        raise ValueError("no batch size to benchmark")
    if isinstance(args, ServerConfig):
        config = args
    else:
        # the resolved graph configuration a log prints is SGLang's own, not a flag's value
        given = {k: v for k, v in dict(args).items() if k not in _RESOLVED}
        cap = given.get("max_running_requests")
        for name in _GRAPH_CEILINGS:
            if cap is not None and given.get(name) == cap:
                given.pop(name)  # the ceiling a release clamped to the cap: not one the user set
        config = ServerConfig.from_server_args(given)
    changes = {**dict(changes or {}), "max_running_requests": max(batches)}
    # The benchmark prefills every request of a batch in one pass (the server chunks it), so the
    # activations of batch x input tokens need room the KV pool would otherwise take (0.5.16 on one
    # H100: 1,024 x 256 tokens ran out of memory with the pool at its default size). The pool needs
    # only the largest batch's tokens: capping it leaves the rest free, as SGLang's
    # ``max_total_tokens`` does (it allocates min(profiled, max_total_tokens)). A pool the deployment
    # sets smaller is raised to it too: the benchmark allocates the whole batch at once and fails
    # where the pool cannot hold it, and the pool's size does not change what a step costs (a
    # forecast that raises the pool asks for batches the deployment's own pool never held).
    changes["max_total_tokens"] = kv_tokens_needed(max(batches), input_len, output_len,
                                                   whole_size(config.get("page_size")) or 1)
    if graphs_off is not None:
        changes["disable_cuda_graph"] = bool(graphs_off)
    config = config.with_changes(**changes)
    drop = [f for f in ("host", "port", "api_key", "enable_metrics", "log_requests") if config.get(f) is not None]
    if drop:
        config = config.without(*drop)
    release = release_of(dict(args)) if not isinstance(args, ServerConfig) else args.release
    argv = [python or "python", "-m", module or bench_module(release), *config.to_argv(),
            "--batch-size", *map(str, batches), "--input-len", str(int(input_len)),
            "--output-len", str(max(int(output_len), 2)), "--run-name", "glm5lib"]
    return argv


#: KV tokens beyond the benchmark's own requests: its warm-up batch and page rounding
_KV_MARGIN = 1.15
_KV_FLOOR = 16384


def kv_tokens_needed(batch: int, input_len: int, output_len: int, page_size: int = 1) -> int:
    """The KV pool the benchmark's largest batch needs: its requests' whole sequences, each rounded
    up to whole pages, and a margin."""
    page = max(int(page_size), 1)
    per_request = -(-(int(input_len) + max(int(output_len), 2)) // page) * page
    return max(_KV_FLOOR, int(batch * per_request * _KV_MARGIN))


def parse_bench_output(text: str, *, graphs_off: bool | None = None) -> list[dict[str, Any]]:
    """The benchmark's measured points (after ``Benchmark ...``): ``batch``, ``step_ms`` (the median
    decode step), ``prefill_ms``, ``total_ms``, ``graphs`` (True where the batch is within the
    captured sizes, False above them or with graphs off, None where the output does not say)."""
    captured: list[int] = []
    for pattern in _CAPTURED:
        for m in pattern.finditer(text):
            captured = [int(x) for x in m.group(1).replace(" ", "").split(",") if x]
    start = text.find("Benchmark ...")
    body = text[start:] if start >= 0 else text
    rows: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    decodes: list[float] = []
    for line in body.splitlines():
        m = _PREFILL.search(line)
        if m:
            current, decodes = {"prefill_ms": float(m.group(1)) * 1000.0}, []
            continue
        if current is None:
            continue
        m = _DECODE_I.search(line)
        if m:
            current["batch"] = int(m.group(2))
            decodes.append(float(m.group(3)) * 1000.0)
            continue
        m = _DECODE_MEDIAN.search(line)
        if m:
            current["step_ms"] = float(m.group(1)) * 1000.0
            continue
        m = _TOTAL.search(line)
        if m:
            current["total_ms"] = float(m.group(1)) * 1000.0
            if "step_ms" not in current and decodes:
                current["step_ms"] = sorted(decodes)[len(decodes) // 2]
            if "batch" in current and "step_ms" in current:
                b = current["batch"]
                if graphs_off:
                    current["graphs"] = False
                elif captured:
                    current["graphs"] = b <= max(captured)
                else:
                    current["graphs"] = None
                rows.append(current)
            current = None
    return rows


BENCHMARK = StepBenchmark(
    title="SGLang's bench_one_batch",
    command=bench_command,
    parse=parse_bench_output,
    hint="it needs SGLang and the GPUs the server runs on (pip install 'glm5lib[sglang]' on a GPU host)",
)
