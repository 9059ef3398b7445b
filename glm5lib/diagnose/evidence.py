"""Evidence and findings: what the rules read, what they return, and reading a run folder.

An :class:`Evidence` bundle holds tidy frames in the log parser's schema (decode and prefill
lines, retractions, errors), the sweep, per-request records, GPU samples, the server arguments,
start-up facts and the environment snapshot. Rules read only these, never an engine's raw lines,
so a bundle can be built by hand in a test or from any engine's adapter.

:func:`load_evidence` is the one reading of a phase folder: the rules, the performance model, the
report (:mod:`glm5lib.report`, every section of it) and the tuner (:mod:`glm5lib.tune.search`) read
a phase through it, once per phase through one :class:`EvidenceCache` where they read a phase for
several figures, and none of them opens the phase's measurement files again. Where two sources give
the same fact, one precedence holds for every reader, stated here:

- **Server arguments** (``Evidence.server_args``, and the limits read from them): the server log's
  arguments win over the configuration's (``config.json``), which win over the flags of the
  command a ``command`` backend ran (``command.json``). The log records what the engine actually
  ran with (its release's defaults and the values it resolved at start-up included); the
  configuration is what was asked, the command's flags what was typed. A field only one source
  has comes from that source; a command's flag is read as its field (:meth:`Evidence.arg`:
  ``--tp-size`` as ``tp_size``).
- **Scheduler figures** (running, queued, KV use): per sweep level, the denser of the server log's
  decode lines and the ``/metrics`` gauges' scrapes (:meth:`Evidence.active_decode`); outside every
  level, the log's; the gauges alone where the log has no decode line (``decode_source``). Over
  the whole phase (:meth:`Evidence.timeline`), the log's lines unless the gauges saw a larger
  running batch inside the levels (:meth:`Evidence.gauges_saw_more`: the log missed the peak).
- **Engine**: the log's own word (``startup["engine"]``), else the engine the command names, else
  the one whose ``/metrics`` names were scraped. ``config.json`` is read as the configuration of
  the engine it names, else of that engine (:attr:`Evidence.config`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from glm5lib import engines, rundir
from glm5lib.diagnose.linetime import running_quantile
from glm5lib.diagnose.references import (
    _args_from_json_file,
    arg,
    find_phase,
    list_references,
    norm,
    resolve_config,
)
from glm5lib.diagnose.scrapes import (
    decode_from_metrics,
    preemptions_from_metrics,
    step_tokens_from_metrics,
)
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.levels import metrics_per_level
from glm5lib.loadgen.selfcheck import judge_levels
from glm5lib.logs import parse_log, to_epoch

__all__ = [
    "FINDING_COLUMNS",
    "Evidence",
    "EvidenceCache",
    "Finding",
    "Prediction",
    "command_flags",
    "decode_from_metrics",
    "level_throughput",
    "load_evidence",
    "logs_prefill_lines",
    "preemptions_from_metrics",
    "reserves_future_tokens",
    "running_cap_field",
    "samples_text",
    "step_tokens_from_metrics",
    "token_budget_field",
]

FINDING_COLUMNS = [
    "finding",
    "evidence",
    "suggestion",
    "confidence",
    "rule",
    "severity",
    "score",
    "prediction",
    "predicted_concurrency",
    "predicted_throughput",
    "predicted_low",
    "predicted_high",
    "predicted_given",  # the band within +/-30% and nothing unmodelled: a forecast to act on
    "measured_throughput",
    "covers",  # the configuration fields the finding is about, space-separated
    "remedy",  # the change the forecast is of, as JSON (neutral limit names or the engine's fields)
]


# A level is steady once its running batch reaches this share of what the load and the cap allow,
# or holds a smaller batch steadily (its 10th percentile at least this share of its 90th: a limit
# the cap does not show, such as the KV pool or a busy front end, holds it there).
HELD_SHARE = 0.85
# ... and spent no more than a quarter of its time below this share of it (cohorts that drain and refill;
# a level's first and last lines, filling and draining, take up to a tenth)
SWING_FLOOR = 0.7

_DECODE_COLS = [
    "time",
    "rank",
    "running_req",
    "num_token",
    "token_usage",
    "cuda_graph",
    "gen_throughput",
    "queue_req",
]


def _frame(cols: Iterable[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})


@dataclasses.dataclass
class Evidence:
    """Everything the rules look at, as tidy frames with the contract columns.

    Build one by hand in tests, or with :func:`load_evidence` from a run folder. Empty frames
    mean "not measured"; rules that need them skip and say why in ``Evidence.skipped``.
    """

    decode: pd.DataFrame = dataclasses.field(default_factory=lambda: _frame(_DECODE_COLS))
    prefill: pd.DataFrame = dataclasses.field(default_factory=lambda: _frame(["time", "rank"]))
    retractions: pd.DataFrame = dataclasses.field(
        default_factory=lambda: _frame(["time", "rank", "retracted_reqs"])
    )
    errors: pd.DataFrame = dataclasses.field(
        default_factory=lambda: _frame(["time", "rank", "kind", "message", "text"])
    )
    sweep: pd.DataFrame = dataclasses.field(default_factory=lambda: _frame(["concurrency"]))
    requests: pd.DataFrame = dataclasses.field(default_factory=lambda: _frame(["level", "status"]))
    gpu: pd.DataFrame = dataclasses.field(
        default_factory=lambda: _frame(["time", "gpu", "power_w"])
    )
    server_args: dict[str, Any] = dataclasses.field(default_factory=dict)
    startup: dict[str, Any] = dataclasses.field(default_factory=dict)
    environment: dict[str, Any] | None = None
    reference_args: dict[str, Any] | None = None
    reference_label: str | None = None
    reference_startup: dict[str, Any] = dataclasses.field(default_factory=dict)
    log_text: str = ""
    standin: str | None = None
    source: str | None = None
    skipped: list[str] = dataclasses.field(default_factory=list)
    # Where ``decode`` came from: the server log, or /metrics gauges when the log had no lines.
    decode_source: str = "log"
    # Decode-schema rows from the scraped /metrics gauges (one per scrape, ``epoch`` in seconds),
    # read beside the log's lines so each level takes the denser of the two; empty: not scraped.
    gauges: pd.DataFrame = dataclasses.field(default_factory=lambda: _frame(_DECODE_COLS))
    # Cumulative per-step token counters from /metrics (vLLM's iteration-token histogram):
    # ``epoch``, ``steps``, ``tokens``; empty: not exported.
    step_tokens: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    # The engine's offline step benchmark of this phase's configuration (``step-profile.csv``:
    # batch, step_ms, graphs, ...); empty: none taken.
    step_profile: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    # The command a "command" backend ran (``command.json``); None: launched from a configuration.
    command: dict[str, Any] | None = None
    # The configuration the phase was launched from (its adapter's config object, the user's own
    # fields and release); None: none recorded or unreadable.
    config: Any = None
    # The server's /get_server_info as recorded (``server_info.json``); None: not recorded.
    server_info: dict[str, Any] | None = None
    # The scraped /metrics rows as recorded (``metrics.csv``: time, metric, labels, value); empty:
    # not scraped. ``gauges``, ``step_tokens`` and preemptions are read from it.
    metrics: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    # The sweep of the phase this one changed (the run's baseline when this is a later phase).
    before_sweep: pd.DataFrame | None = None
    before_label: str | None = None
    # Derived frames several rules read, keyed by the identity of the frame they came from.
    _cache: dict[Any, Any] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def cached(self, key: str, source: Any, make: Any) -> Any:
        """``make()``, computed once per ``source`` object (a frame replaced later is recomputed)."""
        parts = source if isinstance(source, tuple) else (source,)  # a tuple: each of its objects
        hit = self._cache.get(key)
        if hit is not None and len(hit[0]) == len(parts) and all(x is y for x, y in zip(hit[0], parts, strict=True)):
            return hit[1]
        value = make()
        self._cache[key] = (parts, value)
        return value

    # -- derived facts used by several rules --
    def arg(self, field: str) -> Any:
        """A server argument by its field name, normalised, its release's default where unset
        (:func:`~glm5lib.diagnose.references.arg`); a command's flag is read as its field
        (``--tp-size`` as ``tp_size``) where no other source gives the field."""
        args = self.server_args or {}
        flags = {str(k).lstrip("-").replace("-", "_"): v for k, v in args.items() if str(k).startswith("--")}
        return arg({**flags, **args}, field)

    def running(self, lines: pd.DataFrame, q: float = 0.5) -> float:
        """The running batch that ``q`` of the lines' time stayed at or below (weighted by the time
        each line stands for where the engine logs every so many steps: :mod:`.linetime`)."""
        per_steps = self.adapter().capabilities.decode_lines_per_steps
        return running_quantile(lines, q, per_steps=per_steps)

    def active_decode(self) -> pd.DataFrame:
        """Decode rows with at least one running request, each level's from its densest source.

        Within a sweep level's time window the server log's decode lines are used when they are
        at least as many as the ``/metrics`` scrapes there, else the scrapes (a log that writes a
        line every N steps can leave a level of long steps with none); rows outside every level
        come from the log. Column ``source`` says which (``"log"`` or ``"metrics"``), ``epoch``
        is each row's time in seconds. Without gauges: the log's lines (:meth:`log_decode`)."""
        return self.cached("active_decode", (self.decode, self.gauges, self.sweep), self._merged_decode)

    def log_decode(self) -> pd.DataFrame:
        """The server log's decode lines of one rank (the first seen) with a running request."""
        if self.decode_source == "metrics":
            return self._active(None, "log")  # the log had none: ``decode`` holds the gauges
        return self.cached("log_decode", self.decode, lambda: self._active(self.decode, "log"))

    def gauge_decode(self) -> pd.DataFrame:
        """The ``/metrics`` scrapes (decode schema) with a running request."""
        return self.cached("gauge_decode", self.gauges, lambda: self._active(self.gauges, "metrics"))

    def _active(self, d: pd.DataFrame | None, source: str) -> pd.DataFrame:
        if d is None or d.empty or "running_req" not in d:
            return _frame([*_DECODE_COLS, "source", "epoch"])
        if "rank" in d and d["rank"].nunique(dropna=True) > 1:
            first = d["rank"].dropna().iloc[0]
            d = d[d["rank"].isna() | (d["rank"] == first)]
        d = d[pd.to_numeric(d["running_req"], errors="coerce") > 0].reset_index(drop=True)
        d = d.assign(source=source)
        if "epoch" not in d:
            t = self._epoch(d) if "time" in d else None
            d["epoch"] = t if t is not None else np.nan
        return d

    def _merged_decode(self) -> pd.DataFrame:
        if self.decode_source == "metrics":
            # the log had no decode lines: the gauges stand in for them
            return self.cached("gauges_as_decode", self.decode, lambda: self._active(self.decode, "metrics"))
        gauges = self.gauge_decode()
        log = self.log_decode()
        if gauges.empty:
            return log
        windows = self._level_windows()
        if not windows:
            return log if len(log) >= len(gauges) else gauges
        t_log = _col(log, "epoch").to_numpy(dtype=float)
        t_g = _col(gauges, "epoch").to_numpy(dtype=float)
        inside = np.zeros(len(log), dtype=bool)
        parts = []
        for a, b in windows:
            in_log = (t_log >= a) & (t_log <= b)
            in_g = (t_g >= a) & (t_g <= b)
            inside |= in_log
            parts.append(log[in_log] if in_log.sum() >= in_g.sum() else gauges[in_g])
        parts.append(log[~inside])
        parts = [p for p in parts if not p.empty]
        if not parts:
            return log
        out = pd.concat(parts, ignore_index=True)
        return out.sort_values("epoch", kind="stable").reset_index(drop=True)

    def log_lines(self) -> pd.DataFrame | None:
        """The server log's decode lines as parsed (every rank, idle lines included); None when the
        log has none (``decode`` then holds the gauges) or there is no log."""
        if self.decode_source != "log" or self.decode is None or "running_req" not in self.decode:
            return None
        return self.decode

    def gauge_levels(self) -> pd.DataFrame:
        """The ``/metrics`` rows over each sweep level's window (:func:`glm5lib.levels.metrics_per_level`:
        ``max_running``, ``max_queued``, ``gauge_samples``...); empty without scraped rows or levels.
        Raises what that function raises for a sweep it cannot window (ConfigError, KeyError,
        ValueError)."""
        m, s = self.metrics, self.sweep
        if m is None or m.empty or s is None or s.empty:
            return pd.DataFrame()
        return self.cached("gauge_levels", (m, s), lambda: metrics_per_level(m, s))

    def gauge_peak(self) -> float | None:
        """The largest running batch the ``/metrics`` gauges saw inside the sweep's levels
        (:meth:`gauge_levels`); None without gauges or levels."""
        levels = self.gauge_levels()
        if levels.empty or "max_running" not in levels or not levels["max_running"].notna().any():
            return None
        return float(levels["max_running"].max())

    def gauges_saw_more(self) -> bool:
        """Whether the gauges saw, inside the levels, a larger running batch than the log's decode
        lines ever show, or the log has none (raises as :meth:`gauge_levels` does)."""
        peak, logged = self.gauge_peak(), self.log_lines()
        return peak is not None and (logged is None or logged.empty or peak > int(logged["running_req"].max()))

    def timeline(self) -> pd.DataFrame | None:
        """Running and queued requests over the whole phase, for a figure: the gauges' scrapes
        where they saw more (:meth:`gauges_saw_more`) and counted the queue, else the log's lines."""
        g = self.gauges
        if g is None or g.empty or "queue_req" not in g or not self.gauges_saw_more():
            return self.log_lines()
        return g

    def _level_windows(self) -> list[tuple[float, float]]:
        s = self.sweep
        if s is None or s.empty or not {"start_time", "end_time"} <= set(s.columns):
            return []
        a, b = _col(s, "start_time"), _col(s, "end_time")
        return [(float(x), float(y)) for x, y in zip(a, b, strict=True) if pd.notna(x) and pd.notna(y)]

    def adapter(self) -> engines.EngineAdapter:
        """The adapter of the engine that wrote the evidence."""
        return engines.get(self.engine, default=engines.DEFAULT_ENGINE)

    def limits(self) -> engines.Limits:
        """The limits in force (:class:`~glm5lib.engines.Limits`, by their neutral names), read by
        the engine's adapter from the start-up facts and the server arguments."""
        return self.adapter().limits(self.server_args or {}, self.startup or {}, self.environment)

    def cap(self) -> tuple[int | None, str]:
        """The effective running cap and where it came from."""
        lim = self.limits()
        return lim.running_cap, lim.source("running_cap")

    def kv_pool_tokens(self) -> tuple[int | None, str]:
        """KV pool size in tokens and where it came from."""
        lim = self.limits()
        if lim.kv_tokens:
            return lim.kv_tokens, lim.source("kv_tokens")
        d = self.active_decode()
        if not d.empty and {"num_token", "token_usage"} <= set(d.columns):
            usage, tokens = _col(d, "token_usage"), _col(d, "num_token")
            ok = usage > 0.05
            if ok.sum() >= 3:
                return round(float((tokens[ok] / usage[ok]).median())), "decode lines (#token / token usage)"
        return None, "unknown"

    def context_tokens(self) -> tuple[float | None, str]:
        """Tokens one request holds in KV at its end (prompt + output) for this run's workload."""
        r = self.requests
        if r is not None and not r.empty and {"prompt_tokens", "output_tokens"} <= set(r.columns):
            ok = r
            if "status" in r:
                ok = ok[ok["status"] == "ok"]
            if "warmup" in ok:
                ok = ok[~ok["warmup"].fillna(False).astype(bool)]
            total = (_col(ok, "prompt_tokens") + _col(ok, "output_tokens")).dropna()
            if len(total):
                return float(total.quantile(0.9)), "p90 of prompt+output tokens in requests.jsonl"
        s = self.sweep
        if s is not None and not s.empty and {"input_len", "output_len"} <= set(s.columns):
            v = (_col(s, "input_len") + _col(s, "output_len")).max()
            if pd.notna(v) and v > 0:
                return float(v), "input_len + output_len of the sweep"
        if s is not None and not s.empty and {"total_input_tokens", "total_output_tokens", "completed"} <= set(s.columns):
            c = _col(s, "completed")
            per = ((_col(s, "total_input_tokens") + _col(s, "total_output_tokens")) / c)[c > 0]
            if len(per):
                return float(per.max()), "tokens per completed request in the sweep"
        return None, "unknown"

    def decode_in_level(self, level: Mapping[str, Any]) -> pd.DataFrame:
        """Active decode lines logged while one sweep level ran (log clock read as local time).

        Empty when the level has no start/end times, the log times cannot be converted, or the
        two clocks do not overlap (a log from another machine or time zone).
        """
        d = self.active_decode()
        a, b = level.get("start_time", np.nan), level.get("end_time", np.nan)
        if d.empty or "epoch" not in d or pd.isna(a) or pd.isna(b):
            return d.iloc[0:0]
        t = _col(d, "epoch").to_numpy(dtype=float)
        return d[(t >= float(a)) & (t <= float(b))]

    @staticmethod
    def _epoch(d: pd.DataFrame) -> np.ndarray | None:
        try:
            return pd.to_numeric(to_epoch(d["time"]), errors="coerce").to_numpy(dtype=float)
        except (TypeError, ValueError, OverflowError):  # a time column the log parser did not produce
            return None

    def sweep_sorted(self) -> pd.DataFrame:
        s = self.sweep
        if s is None or s.empty or "concurrency" not in s:
            return _frame(["concurrency"])
        return self._sweep_sorted(s)

    @staticmethod
    def _sweep_sorted(s: pd.DataFrame) -> pd.DataFrame:
        s = s.copy()
        s["concurrency"] = pd.to_numeric(s["concurrency"], errors="coerce")
        if "output_throughput" in s and "total_output_tokens" in s:
            # a level whose steady window counted nothing though tokens streamed is read whole
            # (level_throughput), so no rule quotes 0 tok/s for it; ``not_steady`` says why
            read = [level_throughput(r) for r in s.to_dict(orient="records")]
            s["output_throughput"] = [v for v, _ in read]
            s["not_steady"] = [n for _, n in read]
        return s.dropna(subset=["concurrency"]).sort_values("concurrency").reset_index(drop=True)

    @property
    def engine(self) -> str:
        """The engine that wrote the evidence (the default engine unless its log adapter says otherwise)."""
        return str((self.startup or {}).get("engine") or engines.DEFAULT_ENGINE)

    @property
    def release(self) -> str | None:
        """The engine release the evidence's server arguments fit (its adapter's reading); None
        where the adapter cannot tell."""
        return self.adapter().release_of(self.server_args or {})

    def prefill_budget(self) -> tuple[int | None, str]:
        """Prompt tokens one step may prefill (the per-step token budget), and where that came
        from (the engine's field and its source)."""
        lim = self.limits()
        if lim.token_budget:
            return lim.token_budget, f"{lim.name('token_budget')} ({lim.source('token_budget')})"
        return None, "unknown"

    def token_budget(self) -> tuple[int | None, str]:
        """The per-step token budget (:meth:`prefill_budget`), or the value the engine chose when
        its budget was left unset."""
        budget, src = self.prefill_budget()
        if budget is None:
            adapter = self.adapter()
            field = adapter.capabilities.token_budget_field
            auto = (adapter.automatic(field, self.server_args or {}, self.startup, self.environment)
                    if field and adapter.capabilities.resolves_automatic_values else None)
            if auto is not None and auto.value is not None:
                return int(auto.value), f"{field} {adapter.title} chose, being unset: {auto.how}"
        return budget, src

    def prompt_tokens(self, level: Mapping[str, Any] | None = None) -> tuple[float | None, str]:
        """Median prompt tokens per request (of one level when given), and where from."""
        r = self.requests
        if r is not None and not r.empty and "prompt_tokens" in r:
            rows = r
            if level is not None and "level_id" in r and pd.notna(level.get("level_id", np.nan)):
                rows = r[r["level_id"] == level["level_id"]]
            if "warmup" in rows:
                rows = rows[~rows["warmup"].fillna(False).astype(bool)]
            v = pd.to_numeric(rows["prompt_tokens"], errors="coerce").dropna()
            v = v[v > 0]
            if len(v):
                return float(v.median()), "median prompt_tokens in requests.jsonl"
        s = self.sweep_sorted() if level is None else pd.DataFrame([dict(level)])
        if not s.empty and "mean_prompt_tokens" in s:
            v = _col(s, "mean_prompt_tokens").dropna()
            if len(v) and float(v.median()) > 0:
                return float(v.median()), "mean prompt tokens per request in the sweep"
        if not s.empty and {"total_input_tokens", "completed"} <= set(s.columns):
            c = _col(s, "completed") + _col(s, "cancelled").fillna(0) if "cancelled" in s else _col(s, "completed")
            per = (_col(s, "total_input_tokens") / c)[c > 0].dropna()
            if len(per):
                return float(per.median()), "input tokens per request in the sweep"
        if not s.empty and "input_len" in s:
            v = _col(s, "input_len").dropna()
            if len(v):
                return float(v.max()), "input_len of the sweep (asked, not measured)"
        return None, "unknown"

    def steps_in_level(self, level: Mapping[str, Any]) -> dict[str, float] | None:
        """Engine steps inside a level from the per-step token counters: ``steps``, ``tokens``
        and their ``mean`` per step; None without counters covering the level."""
        st = self.step_tokens
        a, b = level.get("start_time", np.nan), level.get("end_time", np.nan)
        if st is None or st.empty or pd.isna(a) or pd.isna(b) or "steps" not in st:
            return None
        # the snapshots nearest the level's ends (histograms may be kept only at level boundaries)
        t = _col(st, "epoch").to_numpy(dtype=float)
        first = st.iloc[int(np.nanargmin(np.abs(t - float(a))))]
        last = st.iloc[int(np.nanargmin(np.abs(t - float(b))))]
        steps = float(last["steps"] - first["steps"])
        if not steps > 0:
            return None
        out = {"steps": steps, "tokens": float(last.get("tokens", np.nan) - first.get("tokens", np.nan))}
        out["mean"] = out["tokens"] / steps
        return out

    def level_decode(self) -> list[tuple[float | None, pd.DataFrame]]:
        """Active decode lines per sweep level, highest offered level first: ``[(concurrency,
        lines)]``. Levels whose time window holds fewer than 3 lines are left out; when no level
        has lines (no sweep, or clocks that do not overlap), the whole log as ``(None, lines)``."""
        out = []
        s = self.sweep_sorted()
        for i in range(len(s) - 1, -1, -1):
            lines = self.decode_in_level(s.iloc[i])
            if len(lines) >= 3:
                out.append((float(s.iloc[i]["concurrency"]), lines))
        if not out:
            d = self.active_decode()
            if not d.empty:
                out.append((None, d))
        return out

    def level_table(self) -> pd.DataFrame:
        """Per sweep level, what the scheduler's figures say, from the level's densest source:
        ``concurrency``, ``source`` (``"log"``, ``"metrics"`` or ``"missing"``), ``samples``,
        ``running_median``, ``running_max``, ``queued_mean``, ``queued_max``, ``kv_max`` (0-1;
        NaN where the source has no such figure) and ``tokens_per_step`` (from step counters)."""
        rows = []
        for _, level in self.sweep_sorted().iterrows():
            lines = self.decode_in_level(level)
            row: dict[str, Any] = {"concurrency": int(level["concurrency"]), "source": "missing", "samples": 0}
            if len(lines):
                sources = sorted(set(lines["source"])) if "source" in lines else ["log"]
                row.update(
                    source="+".join(sources),
                    samples=len(lines),
                    running_median=self.running(lines),
                    running_max=float(_col(lines, "running_req").max()),
                    queued_mean=float(_col(lines, "queue_req").mean()),
                    queued_max=float(_col(lines, "queue_req").max()),
                    kv_max=float(_col(lines, "token_usage").max()),
                )
            steps = self.steps_in_level(level)
            row["tokens_per_step"] = steps["mean"] if steps else np.nan
            row["batch_held"], row["held_note"] = self._held(_steady_part(lines, level), int(level["concurrency"]))
            rows.append(row)
        cols = ["concurrency", "source", "samples", "running_median", "running_max", "queued_mean",
                "queued_max", "kv_max", "tokens_per_step", "batch_held", "held_note"]
        return pd.DataFrame(rows, columns=cols)

    def _held(self, lines: pd.DataFrame, concurrency: int) -> tuple[bool | None, str]:
        """Whether a level's lines show the batch its load and the running cap allow, or a smaller
        one held steadily, and why (None: too few figures to judge). A batch that swung (cohorts of
        requests that start and end together: the H200's cap 160 at 256 offered alternated 160 and
        96 running) or was still filling when the level ended is no steady level: its figures are
        not the configuration's."""
        running = _col(lines, "running_req").dropna() if len(lines) else pd.Series(dtype=float)
        if len(running) < 3:
            return None, "no scheduler figures to judge the level by"
        cap = self.cap()[0]
        allowed = min(concurrency, int(cap)) if cap else concurrency
        median, low, high = (self.running(lines, q) for q in (0.5, 0.1, 0.9))
        if median >= HELD_SHARE * allowed and self.running(lines, 0.25) >= SWING_FLOOR * allowed:
            return True, f"held {median:.0f} running of the {allowed} the load and the cap allow"
        if low >= HELD_SHARE * high:
            return True, (f"held {median:.0f} running steadily ({low:.0f}-{high:.0f}) below the {allowed} the load "
                          "and the cap allow: a limit the cap does not show holds the batch there")
        return False, (f"its batch swung between {low:.0f} and {high:.0f} running (median {median:.0f}) below the "
                       f"{allowed} the load and the cap allow: requests started and ended in cohorts, or the level "
                       "ended before the batch settled, so its figures are not this configuration's steady ones")

    def requested_max_tokens(self) -> tuple[float | None, str]:
        """The max_tokens requests asked for (what SGLang reserves against), and where from."""
        r = self.requests
        if r is not None and not r.empty:
            for col in ("max_tokens", "max_new_tokens", "output_len"):
                if col in r:
                    v = pd.to_numeric(r[col], errors="coerce").dropna()
                    if len(v):
                        return float(v.median()), f"median {col} in requests.jsonl"
        s = self.sweep
        if s is not None and not s.empty and "output_len" in s:
            v = pd.to_numeric(s["output_len"], errors="coerce").dropna()
            if len(v):
                return float(v.max()), "output_len of the sweep (sent as max_tokens)"
        return None, "unknown"


@dataclasses.dataclass
class Prediction:
    """What a remedy should give at the offered load: the performance model's throughput with its
    band, beside what was measured there."""

    concurrency: int
    batch_now: int
    batch_after: int
    throughput: float
    low: float
    high: float
    measured: float | None
    extrapolated: bool
    text: str
    # the band is narrow enough to act on (else ``needs`` names what would settle it)
    given: bool = True
    needs: str = ""
    binding: str = ""
    # the change forecast: neutral limit names (running_cap, graph_max_batch) or the engine's fields
    changes: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Finding:
    """One diagnosis: what, the numbers behind it, what to do, how sure, how much it matters."""

    finding: str
    evidence: str
    suggestion: str
    confidence: float
    rule: str
    severity: float
    covers: tuple[str, ...] = ()
    # The remedy's forecast at the offered load (the performance model's), when it can be made.
    prediction: Prediction | None = None

    @property
    def score(self) -> float:
        return round(self.severity * self.confidence, 4)


# -- engine facts the rules need, answered by the engine's adapter (glm5lib.engines) --
def _capabilities(ev: Evidence):
    return ev.adapter().capabilities


def reserves_future_tokens(ev: Evidence) -> bool:
    """Does the engine hold KV room for tokens a request will still generate when it admits it?
    (SGLang does; vLLM does not.)"""
    return bool(_capabilities(ev).reserves_future_tokens)


def logs_prefill_lines(ev: Evidence) -> bool:
    """Does the engine log one line per prefill batch (SGLang) rather than only periodic stats?"""
    return bool(_capabilities(ev).logs_prefill_lines)


def token_budget_field(ev: Evidence) -> str:
    """The engine's own name for its per-step token budget."""
    return _capabilities(ev).field("token_budget") or engines.get(engines.DEFAULT_ENGINE).capabilities.field("token_budget")


def running_cap_field(ev: Evidence) -> str:
    """The engine's own name for its cap on running requests."""
    return _capabilities(ev).field("running_cap") or engines.get(engines.DEFAULT_ENGINE).capabilities.field("running_cap")


def _num_or_nan(row: dict[str, Any], key: str) -> float:
    v = pd.to_numeric(pd.Series([row.get(key)]), errors="coerce").iloc[0]
    return float(v) if pd.notna(v) else np.nan


def level_throughput(row: dict[str, Any]) -> tuple[float, str | None]:
    """A sweep row's output tok/s and why it is not the steady figure (None when it is).

    The steady window's throughput when the level was steady and it counted tokens; otherwise the
    whole level's (output tokens over its length), with the reason: the level's own
    ``steady_note`` where recorded, else "no steady window" with its note."""
    steady_thr = _num_or_nan(row, "output_throughput")
    steady = row.get("steady")
    flagged = steady is False or (isinstance(steady, str) and steady.lower() == "false")
    if steady_thr > 0 and not flagged:
        return steady_thr, None
    tokens = _num_or_nan(row, "total_output_tokens")
    duration = _num_or_nan(row, "duration")
    whole = _num_or_nan(row, "output_throughput_overall")
    if not whole > 0 and tokens > 0 and duration > 0:
        whole = tokens / duration
    if not whole > 0:
        return steady_thr, None
    note = row.get("steady_note") if isinstance(row.get("steady_note"), str) else None
    if not note:
        window = row.get("window_note")
        note = f"no steady window ({window})" if isinstance(window, str) and window else "no steady window"
    tokens_text = f"{tokens:,.0f} tokens in {duration:.1f} s" if tokens > 0 and duration > 0 else "whole level"
    return whole, f"not steady: {note}; {tokens_text}"


def samples_text(lines: pd.DataFrame) -> str:
    """'8 /metrics scrapes' or '12 decode lines': how many figures a statement rests on, and whose."""
    if "source" in lines and len(lines) and (lines["source"] == "metrics").all():
        return f"{len(lines)} /metrics scrapes"
    if "source" in lines and len(lines) and (lines["source"] == "metrics").any():
        return f"{len(lines)} decode lines and /metrics scrapes"
    return f"{len(lines)} decode lines"


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else (f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}")


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    if name not in frame:
        return pd.Series(np.nan, index=frame.index, dtype=float)
    return pd.to_numeric(frame[name], errors="coerce")


def _bool_col(frame: pd.DataFrame, name: str) -> pd.Series:
    if name not in frame:
        return pd.Series(False, index=frame.index)
    s = frame[name]
    if s.dtype == bool:
        return s
    return s.map(lambda v: norm(v) is True if not isinstance(v, bool) else v).astype(bool)



def _read_environment(environment: Any, phase: Path) -> dict[str, Any] | None:
    if isinstance(environment, Mapping):
        return dict(environment)
    candidates = (
        [Path(environment)]
        if environment is not None
        else [phase / rundir.ENVIRONMENT, phase.parent / rundir.ENVIRONMENT]
    )
    for c in candidates:
        if c.is_file():
            try:
                return json.loads(c.read_text())
            except json.JSONDecodeError as exc:
                raise DiagnosisError(f"environment snapshot {c} is not valid JSON: {exc}") from None
    if environment is not None:
        raise DiagnosisError(f"environment snapshot {environment} does not exist")
    return None


# The phase a later phase is compared with.
BEFORE_PHASE = "baseline"


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def command_flags(argv: Iterable[Any]) -> dict[str, Any]:
    """``--flag value`` and bare ``--switch`` pairs of a command line, by flag (``--cb-max-batch-tokens``)."""
    out: dict[str, Any] = {}
    items = [str(a) for a in argv]
    for n, item in enumerate(items):
        if not item.startswith("--"):
            continue
        name, eq, value = item.partition("=")
        if eq:
            out[name] = value
        elif n + 1 < len(items) and not items[n + 1].startswith("--"):
            out[name] = items[n + 1]
        else:
            out[name] = True
    return out


def load_evidence(
    run_dir: str | Path,
    reference: Any = None,
    environment: Any = None,
    phase: str | None = None,
    partial: bool = False,
) -> Evidence:
    """Read one phase of a run folder into an :class:`Evidence` bundle (the module's precedence
    decides between its sources).

    With ``partial``, a table or snapshot that is there but cannot be read (a run stopped while it
    wrote ``sweep.csv``, a truncated ``requests.jsonl``) is left out and named in ``skipped``
    instead of raising, so a report of a half-finished run still covers what it has."""
    path = find_phase(Path(run_dir), phase)
    ev = Evidence(source=str(path))
    _read_arguments(ev, path)
    _read_metrics(ev, path / rundir.METRICS)
    _read_config(ev, path)
    _read_tables(ev, path, partial)
    try:
        ev.environment = _read_environment(environment, path)
    except DiagnosisError as exc:
        if not partial:
            raise
        ev.skipped.append(str(exc))
    if reference is not None:
        resolved = resolve_config(reference)
        ev.reference_args, ev.reference_label = resolved.args, resolved.label
        ev.reference_startup = resolved.startup
        if isinstance(reference, str) and reference in list_references():
            ev.reference_label = f"the {reference} reference run"
    return ev


def _stamp(folder: Path) -> tuple:
    """What load_evidence of ``folder`` reads, as (file, modification time, size): the phase's
    files, the run's environment snapshot and the baseline's sweep."""
    files = sorted(folder.iterdir()) if folder.is_dir() else []
    files += [folder.parent / rundir.ENVIRONMENT, folder.parent / BEFORE_PHASE / rundir.SWEEP]
    out = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        out.append((f.name, st.st_mtime_ns, st.st_size))
    return tuple(out)


class EvidenceCache:
    """:func:`load_evidence` once per phase folder: a phase read again gives the same
    :class:`Evidence` (or raises the same error) until a file of it changes (a candidate measured
    again). One serves a whole report (each of its sections) or a tuning run. For readers that do
    not change what they read: the rules add to ``skipped``, so a diagnosis is given a copy."""

    def __init__(self, partial: bool = False) -> None:
        self._held: dict[Path, tuple[tuple, Evidence | Exception]] = {}
        self.partial = partial  # passed to load_evidence: unreadable tables left out, not raised
        self.loads = 0  # how many times a phase was read from disk

    def load(self, folder: str | Path) -> Evidence:
        """The evidence of one phase folder (raises as :func:`load_evidence` does)."""
        folder = Path(folder)
        key, stamp = folder.resolve(), _stamp(folder)
        hit = self._held.get(key)
        if hit is None or hit[0] != stamp:
            self.loads += 1
            try:
                read: Evidence | Exception = load_evidence(folder.parent, phase=folder.name, partial=self.partial)
            except (DiagnosisError, ConfigError, ValueError, KeyError) as exc:
                read = exc
            # an OSError (a file not readable yet, its permissions mended) is not held: it is tried again
            hit = self._held[key] = (stamp, read)
        if isinstance(hit[1], Exception):
            raise hit[1].with_traceback(None)  # the same error each time, its traceback not grown
        return hit[1]


def _read_arguments(ev: Evidence, path: Path) -> None:
    """The server log's tables and start-up facts, and the server arguments in the module's
    precedence: the log's over ``config.json``'s over the flags of ``command.json``."""
    args: dict[str, Any] = {}
    if (path / rundir.CONFIG).is_file():
        try:
            args.update(_args_from_json_file(path / rundir.CONFIG))
        except (ConfigError, json.JSONDecodeError) as exc:
            ev.skipped.append(f"config.json unreadable: {exc}")
    log_path = path / rundir.SERVER_LOG
    if log_path.is_file():
        log = parse_log(log_path)
        args.update(log.server_args or {})
        for name in ("decode", "prefill", "retractions", "errors"):
            frame = getattr(log, name, None)
            if isinstance(frame, pd.DataFrame):
                setattr(ev, name, frame)
        ev.startup = dict(getattr(log, "startup", {}) or {})
        ev.standin = getattr(log, "standin", None)
        ev.log_text = log_path.read_text(errors="replace")
    else:
        ev.skipped.append("server.log missing: log-based rules skipped")
    command = _read_json(path / rundir.COMMAND)
    if command is not None:
        # an engine launched from a command line: its limits are the flags it ran with, and it is
        # the engine the command names where its log does not say
        ev.command = command
        args = {**command_flags(command.get("argv") or []), **args}
        if not ev.startup.get("engine"):
            named = str(command.get("engine") or "")
            ev.startup["engine"] = named if named in engines.names() else engines.COMMAND
    ev.server_args = args


def _read_config(ev: Evidence, path: Path) -> None:
    """``config.json`` as a configuration object (``Evidence.config``): the configuration of the
    engine the file names, else of the evidence's engine once the log, the command and the gauges
    have said which (:attr:`Evidence.engine`), else of the default engine."""
    file = path / rundir.CONFIG
    if not file.is_file():
        return
    named = str((_read_json(file) or {}).get("engine") or "")
    takes_config = [e for e in (named, ev.engine) if e in engines.names() and engines.get(e).config_loader]
    engine = takes_config[0] if takes_config else engines.DEFAULT_ENGINE
    try:
        ev.config = engines.get(engine).load_config(file)
    except (ConfigError, OSError, ValueError, json.JSONDecodeError) as exc:
        ev.skipped.append(f"{rundir.CONFIG} not read as {engine}'s configuration: {exc}")


def _read_metrics(ev: Evidence, metrics_path: Path) -> None:
    """``/metrics`` scrapes: the gauges (the decode table where the log has none), the step token
    counters, the preemption counter, and the engine their names belong to."""
    if not (metrics_path.is_file() and metrics_path.stat().st_size):
        return
    try:
        metrics = pd.read_csv(metrics_path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        ev.skipped.append(f"metrics.csv unreadable: {exc}")
        metrics = pd.DataFrame()
    ev.metrics = metrics
    gauges = decode_from_metrics(metrics)
    ev.step_tokens = step_tokens_from_metrics(metrics)
    if ev.retractions is None or ev.retractions.empty:
        preempted = preemptions_from_metrics(metrics)
        if not preempted.empty:
            ev.retractions = preempted  # vLLM V1 logs no line per preemption; its counter counts them
    if not gauges.empty:
        ev.gauges = gauges
        if ev.decode is None or ev.decode.empty or "running_req" not in ev.decode:
            ev.decode = gauges
            ev.decode_source = "metrics"
        if gauges.attrs.get("engine") and "engine" not in ev.startup:
            ev.startup["engine"] = gauges.attrs["engine"]


def _read_tables(ev: Evidence, path: Path, partial: bool) -> None:
    """The sweep (and the phase before it), per-request records, GPU samples, server info and the
    step profile; with ``partial`` an unreadable table is named in ``skipped`` instead of raising."""

    def table(name: str, read: Any = pd.read_csv, sized: bool = True) -> pd.DataFrame | None:
        file = path / name
        if not file.is_file() or (sized and not file.stat().st_size):
            return None  # not recorded (or, ``sized``, recorded empty)
        try:
            return read(file)
        except (OSError, ValueError) as exc:  # pandas' parser and empty-data errors are ValueErrors
            if not partial:
                raise
            ev.skipped.append(f"{name} unreadable: {exc}")
            return None

    sweep = table(rundir.SWEEP, sized=False)
    if sweep is not None:
        ev.sweep = judge_levels(sweep)
    before = table(f"../{BEFORE_PHASE}/{rundir.SWEEP}", sized=False) if path.name != BEFORE_PHASE else None
    if before is not None:
        ev.before_sweep, ev.before_label = judge_levels(before), BEFORE_PHASE
    for name, field, read in ((rundir.REQUESTS, "requests", lambda p: pd.read_json(p, lines=True)),
                              (rundir.GPU, "gpu", pd.read_csv)):
        frame = table(name, read)
        if frame is not None:
            setattr(ev, field, frame)
    ev.server_info = _read_json(path / rundir.SERVER_INFO)
    if (path / rundir.STEP_PROFILE).is_file() and (path / rundir.STEP_PROFILE).stat().st_size:
        try:
            ev.step_profile = pd.read_csv(path / rundir.STEP_PROFILE)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            ev.skipped.append(f"{rundir.STEP_PROFILE} unreadable: {exc}")


def _steady_part(lines: pd.DataFrame, level: Mapping[str, Any]) -> pd.DataFrame:
    """A level's decode lines inside its steady window (``window_start``-``window_end``: the client's
    own judgement of when every stream was running), where the level has one and it holds three
    lines or more; the whole level's otherwise. A short level's filling and draining are not a swing."""
    a, b = level.get("window_start", np.nan), level.get("window_end", np.nan)
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return lines
    if not (np.isfinite(a) and np.isfinite(b)) or "epoch" not in lines or b <= a:
        return lines
    t = pd.to_numeric(lines["epoch"], errors="coerce").to_numpy(dtype=float)
    part = lines[(t >= a) & (t <= b)]
    return part if len(part) >= 3 else lines

