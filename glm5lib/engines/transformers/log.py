"""Read ``transformers serve`` logs into the same :class:`~glm5lib.logs.ServerLog` tables as SGLang's.

What ``transformers serve`` (transformers 5.x, continuous batching) writes, and where it lands:

* its own logger's lines, ``[transformers] <message>`` (``transformers/utils/logging.py``; the
  server's ``--log-level`` is ``warning`` unless given): ``Loading <model>@<revision>``
  (``startup["model"]``, ``revision``), one ``[Request received] Model: <model>, CB: True``
  per request (``startup["requests_received"]``, ``continuous_batching``), ``Failed to load
  <model>: <error>`` (an error); at ``--log-level info`` also ``Model config <Class> {...}`` (a JSON dump),
  whose ``max_position_embeddings`` becomes ``context_len`` (and ``model_type``,
  ``architectures``);
* the continuous-batching logger's lines, ``YYYY-MM-DD HH:MM:SS,mmm - ContinuousBatchingLogger -
  LEVEL - <message>`` (``generation/continuous_batching/requests.py``), the only lines with a time.
  Its INFO lines show only when that logger is at INFO (glm5lib's launcher raises it; ``--log-level``
  does not reach it). The paged cache is sized when the first request arrives, not at start-up:
  ``Paged cache initialized: self.max_batch_tokens = N, self.num_blocks = N, self.block_size = N``
  gives ``cb_max_batch_tokens``, ``cb_num_blocks``, ``cb_block_size``, the KV pool in tokens
  (``max_total_num_tokens``, ``kv_cache_tokens``: blocks x block size) and the running cap
  (``max_running_requests`` = min(1024, max_batch_tokens), the rule of
  ``continuous_batching/initialization.py``: one decoding request takes one token of a step);
  ``Memory available for cache allocation: N MB`` gives ``kv_mem_available_gb``; ``Using cuda
  graphs for (varlen, decode) paths: (A, B)`` gives ``cuda_graph_varlen``/``cuda_graph_decode``;
  ``Offloaded N requests (A to CPU, B soft reset): S starved requests remain for F free blocks.``
  (KV blocks ran out: requests sent back to the queue) is a row of ``retractions``; ``ERROR -
  Error in generation loop: ...`` (the worker died: every later request fails with 503) an
  ``engine_dead`` error with its traceback;
* uvicorn's lines: ``Started server process [pid]``, ``Application startup complete.`` (ready),
  ``Uvicorn running on <url>``, access lines (the ``http`` table: a 503 on ``/health`` once the
  worker died), ``ERROR:    Exception in ASGI application`` and its traceback (an error whose
  kind its last line decides);
* a traceback at start-up (a model that cannot be loaded) is an error of kind ``other``.

It logs no per-step lines (running and queued requests, KV use), so ``decode`` and ``prefill``
stay empty, and it serves no ``/metrics``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from glm5lib.engines.lineparser import LineParser
from glm5lib.logs.engine import LogEngine
from glm5lib.logs.fatal import classify_fatal
from glm5lib.logs.model import ServerLog, parser_facts
from glm5lib.logs.text import EXC_LINE_RE, TRACEBACK, is_tqdm, strip_ansi
from glm5lib.masking import mask_text

__all__ = ["ENGINE", "TransformersParser", "looks_like_transformers"]

#: the most requests one step holds whatever the token budget (``FALLBACK_DEFAULTS``)
MAX_REQUESTS_PER_BATCH = 1024
_TF = "[transformers] "
_CB_RE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) - ContinuousBatchingLogger - (\w+) - (.*)$")
_LOADING_RE = re.compile(r"^Loading (\S+?)(?:@(\S+))?$")
_RECEIVED_RE = re.compile(r"^\[Request received\] Model: (.*), CB: (True|False)$")
_FAILED_LOAD_RE = re.compile(r"^Failed to load (\S+): (.*)$")
_DUMP_RE = re.compile(r"^(Model config|Generate config) (\w+) \{$")
_PAGED_RE = re.compile(r"Paged cache initialized: self\.max_batch_tokens = (\d+), self\.num_blocks = (\d+), "
                       r"self\.block_size = (\d+)")
# 5.19 (generation/continuous_batching/cache.py): the cache in sectors of one page of every layer's
# KV (the configured num_blocks), their size in MB; the page's tokens are not logged
_SECTORS_RE = re.compile(r"Paged cache initialized: self\.max_batch_tokens = (\d+), self\.num_sectors = (\d+), "
                         r"mb_per_sector = (\d+)")
_AVAILABLE_RE = re.compile(r"Memory available for cache allocation: (\d+) MB")
_GRAPHS_RE = re.compile(r"Using cuda graphs for \(varlen, decode\) paths: \((True|False), (True|False)\)")
_OFFLOAD_RE = re.compile(r"Offloaded (\d+) requests \((\d+) to CPU, (\d+) soft reset\): (\d+) starved requests "
                         r"remain for (\d+) free blocks")
_HTTP_RE = re.compile(r'^INFO:\s+([\d.:\[\]a-f]+):\d+ - "(\w+) (\S+) HTTP/[\d.]+" (\d{3})')
_UVICORN_RE = re.compile(r"^(INFO|WARNING|ERROR):\s+(.*)$")
_PID_RE = re.compile(r"Started server process \[(\d+)\]")
_URL_RE = re.compile(r"Uvicorn running on (\S+)")
_WORKER_DEAD_RE = re.compile(r"CB worker (?:is dead|died)|Error in generation loop|Generation thread terminated")
_OOM_RE = re.compile(r"OutOfMemoryError|out of memory", re.IGNORECASE)
_MAX_SKIPPED_EXAMPLES = 20
_MAX_BLOCK_LINES = 400
RETRACT_COLUMNS = ("retracted_reqs", "new_token_ratio_before", "new_token_ratio_after")
DECODE_COLUMNS = ("running_req", "num_token", "token_usage", "cuda_graph", "gen_throughput", "queue_req")
PREFILL_COLUMNS = ("new_seq", "new_token", "cached_token", "token_usage", "running_req", "queue_req")

# Lines only transformers serve prints.
_MARKS = ("[transformers] [Request received] Model:", " - ContinuousBatchingLogger - ")
_LOADING_MARK_RE = re.compile(r"^\[transformers\] Loading \S+@\S+$", re.MULTILINE)


def looks_like_transformers(head: str) -> bool:
    """True when the start of a log reads like ``transformers serve``'s."""
    return any(mark in head for mark in _MARKS) or _LOADING_MARK_RE.search(head) is not None


def _kind(text: str) -> str:
    """An error's kind from its text: ``oom`` (and the other fatal signatures), ``engine_dead``
    when the continuous-batching worker died, else ``other``."""
    if _OOM_RE.search(text):
        return "oom"
    fatal = classify_fatal(text)
    if fatal is not None:
        return fatal
    return "engine_dead" if _WORKER_DEAD_RE.search(text) else "other"


class TransformersParser(LineParser):
    """Line-by-line reader of a ``transformers serve`` log (the :class:`glm5lib.logs.LogParser` methods)."""

    def __init__(self, date: str | None = None) -> None:
        super().__init__("transformers")
        # a multi-line block being read: ("error", the error's row) or ("config", [lines])
        self._block: tuple[str, Any] | None = None
        self._block_lines = 0

    # -- lines ---------------------------------------------------------------------------------

    def feed(self, lines: Iterable[str], final: bool = True) -> None:
        for line in lines:
            self.lines += 1
            self._line(strip_ansi(line.rstrip("\r\n")))

    def finish(self) -> None:
        self._close_block()

    def _line(self, line: str) -> None:
        if self._block is not None and self._in_block(line):
            return
        if not line.strip():
            return
        if line.startswith(_TF):
            self._transformers(line[len(_TF):])
            return
        if " - ContinuousBatchingLogger - " in line:
            m = _CB_RE.match(line)
            if m:
                self._cb(m, line)
                return
        if line.startswith(("INFO:", "WARNING:", "ERROR:")):
            self._uvicorn(line)
            return
        if line.startswith(TRACEBACK):
            self._open_error(None, line, None)
            return
        if is_tqdm(line):
            return  # "Loading weights: 100%|..." bars
        self.skipped += 1
        if len(self.skipped_examples) < _MAX_SKIPPED_EXAMPLES:
            self.skipped_examples.append(mask_text(line[:300]))

    def _in_block(self, line: str) -> bool:
        """Whether ``line`` belongs to the block being read (a traceback, a config dump)."""
        kind, held = self._block
        if kind in ("config", "dump"):
            held.append(line)
            if line == "}":
                self._close_block()
            return True
        # a traceback: its frames are indented, its chained-exception notes and last line are not
        starts = (line.startswith(_TF) or " - ContinuousBatchingLogger - " in line
                  or line.startswith(("INFO:", "WARNING:", "ERROR:")))
        if starts or self._block_lines >= _MAX_BLOCK_LINES:
            self._close_block()
            return False
        self._block_lines += 1
        held["text"] += "\n" + mask_text(line)
        exc = EXC_LINE_RE.match(line) if not line.startswith((" ", "\t")) else None
        if exc:
            held["message"] = mask_text(line.strip())
            held["kind"] = _kind(held["text"])
        return True

    def _close_block(self) -> None:
        if self._block is None:
            return
        kind, held = self._block
        self._block, self._block_lines = None, 0
        if kind == "config":
            self._model_config(held)

    def _open_error(self, stamp: pd.Timestamp | None, line: str, message: str | None) -> None:
        self._close_block()
        row = {"time": stamp, "rank": "", "kind": _kind(line), "message": mask_text(message or line.strip()),
               "text": mask_text(line)}
        self.errors.append(row)
        self._block, self._block_lines = ("error", row), 0

    def _transformers(self, msg: str) -> None:
        m = _RECEIVED_RE.match(msg)
        if m:
            self.startup["requests_received"] = self.startup.get("requests_received", 0) + 1
            self.startup.setdefault("continuous_batching", m.group(2) == "True")
            return
        m = _LOADING_RE.match(msg)
        if m and "model" not in self.startup:
            self.startup["model"] = m.group(1)
            if m.group(2):
                self.startup["revision"] = m.group(2)
            return
        m = _FAILED_LOAD_RE.match(msg)
        if m:
            self._open_error(self.last_time, _TF + msg, msg)
            return
        m = _DUMP_RE.match(msg) if msg.endswith(" {") else None
        if m:  # a JSON dump: the model's config is read, the generation config passed over
            self._close_block()
            model = m.group(1) == "Model config"
            if model:
                self.startup.setdefault("model_class", m.group(2))
            self._block, self._block_lines = ("config" if model else "dump", ["{"]), 0

    def _model_config(self, lines: list[str]) -> None:
        try:
            config = json.loads("\n".join(lines))
        except json.JSONDecodeError:
            return
        if not isinstance(config, dict):
            return
        if isinstance(config.get("max_position_embeddings"), int):
            self.startup.setdefault("context_len", config["max_position_embeddings"])
        if isinstance(config.get("model_type"), str):
            self.startup.setdefault("model_type", config["model_type"])
        if isinstance(config.get("architectures"), list):
            self.startup.setdefault("architectures", list(config["architectures"]))

    def _cb(self, m: re.Match[str], line: str) -> None:
        stamp = pd.Timestamp(f"{m.group(1)}.{m.group(2)}")
        self.first_time = self.first_time or stamp
        self.last_time = stamp
        level, msg = m.group(3), m.group(4)
        if level in ("ERROR", "CRITICAL"):
            self._open_error(stamp, line, msg)
            return
        if "Paged cache initialized" in msg:
            # blocks of so many tokens (the pool's size in tokens follows) or sectors of so many MB
            for shape, unit in ((_PAGED_RE, "cb_block_size"), (_SECTORS_RE, "cb_mb_per_block")):
                p = shape.search(msg)
                if p:
                    tokens, blocks, size = (int(g) for g in p.groups())
                    self.startup.setdefault("cb_max_batch_tokens", tokens)
                    self.startup.setdefault("cb_num_blocks", blocks)
                    self.startup.setdefault(unit, size)
                    if unit == "cb_block_size":
                        self.startup.setdefault("max_total_num_tokens", blocks * size)
                        self.startup.setdefault("kv_cache_tokens", blocks * size)
                    self.startup.setdefault("max_running_requests", min(MAX_REQUESTS_PER_BATCH, tokens))
                    return
        if "Offloaded " in msg:
            o = _OFFLOAD_RE.search(msg)
            if o:
                n, cpu, soft, starved, free = (int(g) for g in o.groups())
                self.retract_rows.append({
                    "time": stamp, "rank": "", "retracted_reqs": n, "new_token_ratio_before": np.nan,
                    "new_token_ratio_after": np.nan, "offloaded_to_cpu": cpu, "soft_reset": soft,
                    "starved_reqs": starved, "free_blocks": free,
                })
                return
        a = _AVAILABLE_RE.search(msg) if "Memory available" in msg else None
        if a:
            self.startup.setdefault("kv_mem_available_gb", round(int(a.group(1)) / 1024, 3))
            return
        g = _GRAPHS_RE.search(msg) if "Using cuda graphs" in msg else None
        if g:
            self.startup.setdefault("cuda_graph_varlen", g.group(1) == "True")
            self.startup.setdefault("cuda_graph_decode", g.group(2) == "True")

    def _uvicorn(self, line: str) -> None:
        h = _HTTP_RE.match(line)
        if h:
            self.http_rows.append([None, h.group(1), h.group(2), h.group(3), int(h.group(4))])
            return
        u = _UVICORN_RE.match(line)
        msg = u.group(2) if u else line
        if u and u.group(1) == "ERROR":
            self._open_error(self.last_time, line, msg.strip())
            return
        if "Application startup complete" in msg:
            self.became_ready = True
            self.ready_at = self.ready_at or self.last_time  # uvicorn's lines carry no time
            return
        p = _PID_RE.search(msg)
        if p:
            self.startup.setdefault("pid", int(p.group(1)))
            return
        r = _URL_RE.search(msg)
        if r:
            self.startup.setdefault("url", r.group(1))
            return
        if msg.startswith("Shutting down"):
            self.stopping = True

    # -- tables --------------------------------------------------------------------------------

    def build(self) -> ServerLog:
        return ServerLog(
            **parser_facts(self),
            startup=dict(self.startup),
            decode=_empty(DECODE_COLUMNS),
            prefill=_empty(PREFILL_COLUMNS),
            retractions=_frame(self.retract_rows, RETRACT_COLUMNS),
            errors=_errors_frame(self.errors),
            http=_http_frame(self.http_rows),
        )

    def drain(self) -> ServerLog:
        """The rows read since the last drain, let go of here; the log's facts as so far.
        An error whose traceback is still being read waits for the next drain."""
        open_error = self._block[1] if self._block is not None and self._block[0] == "error" else None
        held = [open_error] if open_error is not None and self.errors and self.errors[-1] is open_error else []
        if held:
            self.errors.pop()
        slog = self.build()
        for rows in (self.retract_rows, self.errors, self.http_rows):
            del rows[:]
        self.errors.extend(held)
        return slog


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="datetime64[ns]" if c == "time" else object)
                         for c in ("time", "rank", *columns)})


def _frame(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> pd.DataFrame:
    if not rows:
        return _empty(columns)
    frame = pd.DataFrame(rows)
    frame["time"] = pd.to_datetime(frame["time"])
    base = ["time", "rank", *columns]
    return frame[base + [c for c in frame.columns if c not in base]].reset_index(drop=True)


def _errors_frame(errors: list[dict[str, Any]]) -> pd.DataFrame:
    if not errors:
        return _empty(("kind", "message", "text"))
    frame = pd.DataFrame(errors, columns=["time", "rank", "kind", "message", "text"])
    frame["time"] = pd.to_datetime(frame["time"])
    return frame


def _http_frame(rows: list[list[Any]]) -> pd.DataFrame:
    cols = ["time", "client", "method", "path", "status"]
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype="datetime64[ns]" if c == "time" else object) for c in cols})
    frame = pd.DataFrame(rows, columns=cols)
    frame["time"] = pd.to_datetime(frame["time"])
    return frame


def _new_parser(date: str | None = None, *, incremental: bool = True) -> TransformersParser:
    parser = TransformersParser(date=date)
    parser.incremental = incremental
    return parser


ENGINE = LogEngine(name="transformers", detect=looks_like_transformers, new_parser=_new_parser,
                   cap_keys=("max_running_requests", "cb_max_batch_tokens"),
                   important_args=("force_model", "continuous_batching", "cb_max_batch_tokens", "cb_num_blocks",
                                   "cb_block_size", "cb_max_memory_percent", "cb_use_cuda_graph"))
