"""The result of parsing a log: :class:`ServerLog`, the evidence schema every engine fills.

Whichever engine wrote the log (SGLang, vLLM...), its parser fills the same tables with the
same column names and units, so that rules and plots read one schema and never an engine's
raw lines (see the package docstring for the columns).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from glm5lib.logs.fatal import ERROR_KINDS
from glm5lib.masking import mask_mapping

__all__ = ["ServerLog", "parser_facts", "summarize"]

@dataclass
class ServerLog:
    """Everything :func:`parse_log` reads from one SGLang server log.

    Tables (pandas DataFrames, one row per log line, in log order):

    * ``decode``: ``time, rank, running_req, num_token, token_usage, cuda_graph, gen_throughput,
      queue_req`` then whatever else the SGLang version printed (``largest_len``, ``accept_len``,
      ``accept_rate``, ``full_token``, ``swa_token``..., ``est_decode_tflops_per_gpu``,
      ``fwd_occupancy``, ``iter``...). ``cuda_graph`` is a nullable boolean (2024 lines do not
      say; ``cpu graph``/``npu graph`` land here too). Hybrid models fill ``num_token`` and
      ``token_usage`` from the fuller pool, as SGLang's own metrics do.
    * ``prefill``: ``time, rank, new_seq, new_token, cached_token, token_usage, running_req,
      queue_req`` then extras (``cache_hit_rate`` as a fraction, ``input_throughput``...).
    * ``retractions``: ``time, rank, retracted_reqs, new_token_ratio_before, new_token_ratio_after``.
    * ``errors``: ``time, rank, kind, message, text``; ``kind`` in :data:`ERROR_KINDS`, ``message``
      the final exception line, ``text`` the whole (masked) traceback.
    * ``http``: uvicorn access lines: ``time, client, method, path, status``.

    ``time`` is the naive timestamp printed in the log (NaT when a line had none; lines of builds
    that print only the clock get the ``date`` given to :func:`parse_log`, else the last date
    seen, else 1970-01-01). ``rank`` is the rank label as printed (``"TP0"``, ``"DP1 TP1"``,
    ``"TP0 EP0"``), ``""`` when the server ran without parallelism. ``startup`` holds facts such
    as ``max_total_num_tokens``, ``max_running_requests``, ``context_len``, ``kv_cache_tokens``,
    ``kv_cache_size_gb``, ``weight_load_time_s``, ``weight_mem_usage_gb``,
    ``cuda_graph_capture_time_s``, ``cuda_graph_batch_sizes``, ``available_gpu_mem_gb``; the
    first rank's value wins. ``standin`` is the profile name when the log comes from glm5lib's
    stand-in server (its first line says so), else None. ``reader`` is the engine's log adapter
    (:class:`~glm5lib.logs.engine.LogEngine`) that read it: the names its running cap goes by and
    the arguments its digest shows first.
    """

    server_args: dict[str, Any] = field(default_factory=dict)
    server_args_incomplete: bool = False
    startup: dict[str, Any] = field(default_factory=dict)
    ready_at: pd.Timestamp | None = None
    decode: pd.DataFrame = field(default_factory=pd.DataFrame)
    prefill: pd.DataFrame = field(default_factory=pd.DataFrame)
    retractions: pd.DataFrame = field(default_factory=pd.DataFrame)
    errors: pd.DataFrame = field(default_factory=pd.DataFrame)
    http: pd.DataFrame = field(default_factory=pd.DataFrame)
    skipped: int = 0
    skipped_examples: list[str] = field(default_factory=list)
    standin: str | None = None
    standin_path: str | None = None
    became_ready: bool = False
    lines: int = 0
    first_time: pd.Timestamp | None = None
    last_time: pd.Timestamp | None = None
    # the LogEngine that read it (set by the parser it handed out; None for a log no adapter read)
    reader: Any = field(default=None, repr=False, compare=False)

    @property
    def ready(self) -> bool:
        """True when the log says the server became ready (even if that line had no time)."""
        return self.became_ready or self.ready_at is not None

    @property
    def fatal(self) -> bool:
        """True when the log holds at least one error row."""
        return not self.errors.empty

    def running_cap(self) -> int | None:
        """The running cap the log states (a start-up fact, else a server argument), under the
        names its engine's log adapter gives; None where it states none."""
        keys = self.reader.cap_keys if self.reader is not None else ()
        for source in (self.startup, self.server_args):
            for key in keys:
                value = source.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    return value
        return None

    def crash_cause(self) -> str | None:
        """The most specific error kind in the log (oom before nccl before sigquit...), or None."""
        if self.errors.empty:
            return None
        kinds = set(self.errors["kind"])
        for kind in ERROR_KINDS:
            if kind in kinds:
                return kind
        return None

    def summary(self) -> dict[str, Any]:
        """A JSON-ready digest: the args that matter, startup facts, decode stats and errors."""
        return summarize(self)

    def __repr__(self) -> str:
        return (
            f"ServerLog(lines={self.lines}, server_args={len(self.server_args)} fields"
            f"{' (incomplete)' if self.server_args_incomplete else ''}, ready_at={self.ready_at}, "
            f"decode={len(self.decode)} rows, prefill={len(self.prefill)} rows, "
            f"retractions={len(self.retractions)}, errors={len(self.errors)}, skipped={self.skipped}"
            f"{f', standin={self.standin!r}' if self.standin else ''})"
        )



def parser_facts(parser: Any) -> dict[str, Any]:
    """The :class:`ServerLog` fields every engine's parser keeps under the same names (what the
    log says of the server and of itself), read off ``parser`` for its ``build``."""
    return {
        "server_args": dict(parser.server_args),
        "ready_at": parser.ready_at,
        "skipped": parser.skipped,
        "skipped_examples": list(parser.skipped_examples),
        "became_ready": parser.became_ready,
        "lines": parser.lines,
        "first_time": parser.first_time,
        "last_time": parser.last_time,
    }


def summarize(slog: ServerLog) -> dict[str, Any]:
    """A JSON-ready digest of ``slog``: the args that matter (secrets masked), startup facts,
    decode statistics, errors and the crash cause."""
    args = mask_mapping(slog.server_args)
    reader = slog.reader
    important = {k: args[k] for k in (reader.important_args if reader is not None else ()) if k in args}
    if reader is not None and reader.args_digest is not None:
        important = reader.args_digest(important, args)
    out: dict[str, Any] = {
        "lines": slog.lines,
        "standin": slog.standin,
        "first_time": _iso(slog.first_time),
        "last_time": _iso(slog.last_time),
        "ready_at": _iso(slog.ready_at),
        "server_args": important,
        "server_args_fields": len(slog.server_args),
        "server_args_incomplete": slog.server_args_incomplete,
        "startup": slog.startup,
        "skipped": slog.skipped,
    }
    d = slog.decode
    if not d.empty:
        # Mangled logs can leave text in a numeric column: statistics skip it.
        d = d.copy()
        for col in ("running_req", "queue_req", "token_usage", "gen_throughput"):
            d[col] = pd.to_numeric(d[col], errors="coerce")
        busy = d[d["running_req"] > 0]
        out["decode"] = {
            "rows": len(d),
            "max_running_req": _num(d["running_req"].max()),
            "mean_running_req_busy": _num(busy["running_req"].mean()) if not busy.empty else None,
            "max_queue_req": _num(d["queue_req"].max()),
            "max_token_usage": _num(d["token_usage"].max()),
            "max_gen_throughput": _num(d["gen_throughput"].max()),
            "mean_gen_throughput_busy": _num(busy["gen_throughput"].mean()) if not busy.empty else None,
            "cuda_graph_share": _num(pd.to_numeric(d["cuda_graph"], errors="coerce").mean()),
        }
        cap = slog.running_cap()
        if isinstance(cap, int) and cap > 0:
            out["decode"]["rows_at_running_cap"] = int((d["running_req"] >= cap).sum())
    else:
        out["decode"] = {"rows": 0}
    out["prefill"] = {"rows": len(slog.prefill)}
    out["retractions"] = {
        "rows": len(slog.retractions),
        "retracted_reqs": _num(pd.to_numeric(slog.retractions["retracted_reqs"], errors="coerce").sum())
        if not slog.retractions.empty
        else 0,
    }
    out["errors"] = [
        {"time": _iso(r.time), "rank": r.rank, "kind": r.kind, "message": r.message}
        for r in slog.errors.itertuples(index=False)
    ]
    out["crash_cause"] = slog.crash_cause()
    return out


def _iso(ts: Any) -> str | None:
    if ts is None or (isinstance(ts, float) and math.isnan(ts)) or ts is pd.NaT:
        return None
    return pd.Timestamp(ts).isoformat(sep=" ")


def _num(value: Any) -> Any:
    if value is None or value is pd.NA:
        return None
    if isinstance(value, np.integer | int) and not isinstance(value, bool):
        return int(value)
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else round(f, 4)

