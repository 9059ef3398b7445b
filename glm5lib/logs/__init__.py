"""Parse inference-server logs and bench_serving output into tidy pandas tables.

A server says a great deal about itself while it runs: its resolved arguments, how much memory
the weights, the KV cache and the CUDA graphs took, and every few steps how many requests are
running, how full the KV pool is and how many tokens per second it generates. This package
turns that text into data:

* :func:`parse_server_args` reads a ``server_args=ServerArgs(...)`` line (wrapped or cut off
  when pasted) into a dict of Python values;
* :func:`parse_log` reads a whole log into a :class:`ServerLog` (server args, start-up facts,
  readiness, decode/prefill/retraction tables, fatal errors);
* :func:`iter_log` reads a log of any size in bounded memory, one :class:`ServerLog` per piece;
* :func:`follow_log` reads a log that a running server is still writing, a piece at a time;
* :func:`parse_bench_result` reads ``bench_serving`` JSONL files and printed result blocks;
* :func:`classify_fatal` tells whether a single line is a fatal signature (OOM, NaN, NCCL...).

The evidence schema
-------------------
Every engine's adapter fills the same tables with the same columns and units, so that the
diagnosis reads one schema and never an engine's raw lines. One row per log line, in log order;
``time`` is the naive timestamp printed in the log (the server's clock, NaT when a line had
none; :func:`to_epoch` converts it), ``rank`` the rank label as printed (``"TP0"``,
``"DP1 TP1"``; ``""`` without parallelism).

``decode`` (one row per scheduler report of decode steps):
    ``running_req`` requests in the running batch; ``num_token`` KV tokens in use;
    ``token_usage`` KV pool use as a 0-1 fraction (hybrid models: the fuller pool);
    ``cuda_graph`` whether the step ran as a captured graph (nullable boolean, NA when the
    engine does not say); ``gen_throughput`` generated tokens per second; ``queue_req``
    requests waiting. Extras as printed: ``accept_len``, ``accept_rate``, ``full_token``,
    ``swa_token``, ``est_decode_tflops_per_gpu``, ``fwd_occupancy`` (0-1), ``iter``...
``prefill`` (one row per prefill batch):
    ``new_seq`` sequences admitted; ``new_token`` prompt tokens computed; ``cached_token``
    prompt tokens served from the prefix cache; ``token_usage`` (0-1); ``running_req``;
    ``queue_req``. Extras: ``cache_hit_rate`` (0-1), ``input_throughput``...
``retractions`` (requests preempted because the KV pool ran out):
    ``retracted_reqs``, ``new_token_ratio_before``, ``new_token_ratio_after``.
``errors``: ``kind`` (one of :data:`ERROR_KINDS`), ``message`` (the final exception line),
    ``text`` (the whole traceback, secrets masked).
``http``: access lines: ``client``, ``method``, ``path``, ``status``.
``startup`` (a dict): ``max_total_num_tokens``, ``max_running_requests``, ``context_len``,
    ``kv_cache_tokens``, ``kv_cache_size_gb``, ``weight_load_time_s``, ``weight_mem_usage_gb``,
    ``cuda_graph_capture_time_s``, ``cuda_graph_batch_sizes``, ``available_gpu_mem_gb``...

Engines
-------
``parse_log(..., engine="auto")`` tells the engine from the log's first lines and hands the
lines to that engine's log adapter (:mod:`glm5lib.logs.engine` finds it by name): each engine's
folder under :mod:`glm5lib.engines` holds its own (SGLang's :mod:`glm5lib.engines.sglang.log`,
vLLM's :mod:`glm5lib.engines.vllm.log`); this package keeps what every engine shares: the schema
above, chunked reading of large files, following a growing log, fatal-line classification.

Formats drift between SGLang releases (2024 to 2026), so scheduler lines are parsed by key:
known keys get fixed snake_case column names, unknown keys become extra columns. Garbage never
raises: lines that cannot be understood are counted in ``ServerLog.skipped`` with examples.
"""

from __future__ import annotations

from glm5lib.logs.bench import parse_bench_result
from glm5lib.logs.engine import LogEngine, LogParser, available_engines
from glm5lib.logs.fatal import ERROR_KINDS, classify_fatal
from glm5lib.logs.follow import LogFollower, follow_log, to_epoch
from glm5lib.logs.model import ServerLog, summarize
from glm5lib.logs.parse import iter_log, parse_log
from glm5lib.logs.server_args import ServerArgs, parse_server_args

__all__ = [
    "ERROR_KINDS",
    "LogEngine",
    "LogFollower",
    "LogParser",
    "ServerArgs",
    "ServerLog",
    "available_engines",
    "classify_fatal",
    "follow_log",
    "iter_log",
    "parse_bench_result",
    "parse_log",
    "parse_server_args",
    "summarize",
    "to_epoch",
]
