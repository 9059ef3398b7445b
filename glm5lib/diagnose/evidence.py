"""Evidence and findings: what the rules read, what they return, and reading a run folder.

An :class:`Evidence` bundle holds tidy frames in the log parser's schema (decode and prefill
lines, retractions, errors), the sweep, per-request records, GPU samples, the server arguments,
start-up facts and the environment snapshot. Rules read only these, never an engine's raw lines,
so a bundle can be built by hand in a test or from any engine's adapter.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from glm5lib import rundir
from glm5lib.diagnose.references import (
    _args_from_json_file,
    arg,
    find_phase,
    list_references,
    norm,
    release_of,
    resolve_config,
)
from glm5lib.engines.vllm_defaults import vllm_automatic
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.logs import parse_log, to_epoch

__all__ = [
    "FINDING_COLUMNS",
    "Evidence",
    "Finding",
    "Prediction",
    "decode_from_metrics",
    "load_evidence",
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
    "measured_throughput",
]


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
    # Derived frames several rules read, keyed by the identity of the frame they came from.
    _cache: dict[Any, Any] = dataclasses.field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def cached(self, key: str, source: Any, make: Any) -> Any:
        """``make()``, computed once per ``source`` object (a frame replaced later is recomputed)."""
        hit = self._cache.get(key)
        if hit is not None and hit[0] is source:
            return hit[1]
        value = make()
        self._cache[key] = (source, value)
        return value

    # -- derived facts used by several rules --
    def arg(self, field: str) -> Any:
        return arg(self.server_args, field)

    def active_decode(self) -> pd.DataFrame:
        """Decode lines of one rank (the first seen) with at least one running request."""
        return self.cached("active_decode", self.decode, self._active_decode)

    def _active_decode(self) -> pd.DataFrame:
        d = self.decode
        if d is None or d.empty or "running_req" not in d:
            return _frame(_DECODE_COLS)
        if "rank" in d and d["rank"].nunique(dropna=True) > 1:
            first = d["rank"].dropna().iloc[0]
            d = d[d["rank"].isna() | (d["rank"] == first)]
        d = d[pd.to_numeric(d["running_req"], errors="coerce") > 0]
        return d.reset_index(drop=True)

    def cap(self) -> tuple[int | None, str]:
        """The effective max-running-requests and where it came from."""
        for key, where in (("max_running_requests", "start-up log line"),):
            v = norm(self.startup.get(key)) if self.startup else None
            if isinstance(v, (int, float)) and v > 0:
                return int(v), where
        for key in ("max_running_requests", "max_num_seqs"):
            v = self.arg(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                return int(v), "server arguments"
        if self.engine == "vllm":
            # vLLM logs only the arguments given: an unset max_num_seqs is the value its rule chose
            auto = vllm_automatic("max_num_seqs", self.server_args or {}, self.startup, self.environment)
            if auto is not None and auto.value is not None:
                return auto.value, f"value vLLM chose, max_num_seqs being unset: {auto.how}"
        return None, "unset"

    def kv_pool_tokens(self) -> tuple[int | None, str]:
        """KV pool size in tokens (max_total_num_tokens) and where it came from."""
        v = norm(self.startup.get("max_total_num_tokens")) if self.startup else None
        if isinstance(v, (int, float)) and v > 0:
            return int(v), "start-up log line"
        v = self.arg("max_total_tokens")
        if isinstance(v, (int, float)) and v > 0:
            return int(v), "server arguments"
        d = self.active_decode()
        if not d.empty and {"num_token", "token_usage"} <= set(d.columns):
            usage = pd.to_numeric(d["token_usage"], errors="coerce")
            tokens = pd.to_numeric(d["num_token"], errors="coerce")
            ok = usage > 0.05
            if ok.sum() >= 3:
                return round(
                    float((tokens[ok] / usage[ok]).median())
                ), "decode lines (#token / token usage)"
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
            total = pd.to_numeric(ok["prompt_tokens"], errors="coerce") + pd.to_numeric(
                ok["output_tokens"], errors="coerce"
            )
            total = total.dropna()
            if len(total):
                return float(total.quantile(0.9)), "p90 of prompt+output tokens in requests.jsonl"
        s = self.sweep
        if s is not None and not s.empty and {"input_len", "output_len"} <= set(s.columns):
            v = (
                pd.to_numeric(s["input_len"], errors="coerce")
                + pd.to_numeric(s["output_len"], errors="coerce")
            ).max()
            if pd.notna(v) and v > 0:
                return float(v), "input_len + output_len of the sweep"
        if (
            s is not None
            and not s.empty
            and {"total_input_tokens", "total_output_tokens", "completed"} <= set(s.columns)
        ):
            c = pd.to_numeric(s["completed"], errors="coerce")
            per = (
                pd.to_numeric(s["total_input_tokens"], errors="coerce")
                + pd.to_numeric(s["total_output_tokens"], errors="coerce")
            ) / c
            per = per[c > 0]
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
        if d.empty or "time" not in d or pd.isna(a) or pd.isna(b):
            return d.iloc[0:0]
        t = self.cached("decode_epoch", self.decode, lambda: self._epoch(d))
        if t is None:
            return d.iloc[0:0]
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
        s = s.copy()
        s["concurrency"] = pd.to_numeric(s["concurrency"], errors="coerce")
        return s.dropna(subset=["concurrency"]).sort_values("concurrency").reset_index(drop=True)

    @property
    def engine(self) -> str:
        """The engine that wrote the evidence (``"sglang"`` unless its log adapter says otherwise)."""
        return str((self.startup or {}).get("engine") or "sglang")

    @property
    def release(self) -> str | None:
        """The SGLang release of the evidence's server arguments (:func:`release_of`); None for other engines."""
        return release_of(self.server_args or {}) if self.engine == "sglang" else None

    def prefill_budget(self) -> tuple[int | None, str]:
        """Prompt tokens one prefill batch may take, and where that came from.

        SGLang: the smaller of chunked_prefill_size and max_prefill_tokens (start-up line, else
        arguments); vLLM: max_num_batched_tokens."""
        values = []
        for key in ("chunked_prefill_size", "max_prefill_tokens", "max_num_batched_tokens"):
            v = norm(self.startup.get(key)) if self.startup else None
            where = "start-up log line"
            if not isinstance(v, (int, float)) or v <= 0:
                v, where = self.arg(key), "server arguments"
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
                values.append((int(v), f"{key} ({where})"))
        if not values:
            return None, "unknown"
        return min(values)

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
    """What a remedy should give at the offered load: the capacity model's throughput with its
    error band, beside what was measured there."""

    concurrency: int
    batch_now: int
    batch_after: int
    throughput: float
    low: float
    high: float
    measured: float | None
    extrapolated: bool
    text: str


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
    # The remedy's predicted effect at the offered load (capacity model), when it can be predicted.
    prediction: Prediction | None = None

    @property
    def score(self) -> float:
        return round(self.severity * self.confidence, 4)


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


# Schema column -> the gauges that give it, per engine (SGLang's, then vLLM's names).
_GAUGES = {
    "running_req": ("sglang:num_running_reqs", "vllm:num_requests_running"),
    "queue_req": ("sglang:num_queue_reqs", "vllm:num_requests_waiting"),
    "token_usage": ("sglang:token_usage", "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"),
    "num_token": ("sglang:num_used_tokens",),
    "gen_throughput": ("sglang:gen_throughput",),
}


def decode_from_metrics(metrics: pd.DataFrame) -> pd.DataFrame:
    """Decode rows in the evidence schema from scraped ``/metrics`` gauges (``metrics.csv``: time,
    metric, labels, value), one row per scrape, for servers whose log holds no scheduler lines.

    ``time`` is UTC (time-zone aware); ``token_usage`` is the 0-1 fraction both engines report;
    ``attrs["engine"]`` says whose names were found. Empty when no running-request gauge was scraped.
    """
    if metrics is None or metrics.empty or not {"time", "metric", "value"} <= set(metrics.columns):
        return pd.DataFrame()
    m = metrics[["time", "metric", "value"]].copy()
    m["value"] = pd.to_numeric(m["value"], errors="coerce")
    m["time"] = pd.to_numeric(m["time"], errors="coerce")
    # one value per scrape and gauge: TP ranks repeat the same figure, so take the largest
    wide = m.pivot_table(index="time", columns="metric", values="value", aggfunc="max")
    out = pd.DataFrame(index=wide.index)
    engine = None
    for column, names in _GAUGES.items():
        found = next((n for n in names if n in wide.columns), None)
        if found is not None:
            out[column] = wide[found].to_numpy()
            engine = engine or found.split(":", 1)[0]
    if "running_req" not in out:
        return pd.DataFrame()
    out = out.reset_index()
    out["time"] = pd.to_datetime(out["time"], unit="s", utc=True)
    out["rank"] = ""
    out.attrs["engine"] = engine
    return out


def load_evidence(
    run_dir: str | Path,
    reference: Any = None,
    environment: Any = None,
    phase: str | None = None,
) -> Evidence:
    """Read one phase of a run folder into an :class:`Evidence` bundle."""
    path = find_phase(Path(run_dir), phase)
    ev = Evidence(source=str(path))
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
    ev.server_args = args
    metrics_path = path / rundir.METRICS
    if (
        (ev.decode is None or ev.decode.empty or "running_req" not in ev.decode)
        and metrics_path.is_file()
        and metrics_path.stat().st_size
    ):
        gauges = decode_from_metrics(pd.read_csv(metrics_path))
        if not gauges.empty:
            ev.decode = gauges
            ev.decode_source = "metrics"
            if gauges.attrs.get("engine") and "engine" not in ev.startup:
                ev.startup["engine"] = gauges.attrs["engine"]
    if (path / rundir.SWEEP).is_file():
        ev.sweep = pd.read_csv(path / rundir.SWEEP)
    if (path / rundir.REQUESTS).is_file() and (path / rundir.REQUESTS).stat().st_size:
        ev.requests = pd.read_json(path / rundir.REQUESTS, lines=True)
    if (path / rundir.GPU).is_file() and (path / rundir.GPU).stat().st_size:
        ev.gpu = pd.read_csv(path / rundir.GPU)
    ev.environment = _read_environment(environment, path)
    if reference is not None:
        resolved = resolve_config(reference)
        ev.reference_args, ev.reference_label = resolved.args, resolved.label
        ev.reference_startup = resolved.startup
        if isinstance(reference, str) and reference in list_references():
            ev.reference_label = f"the {reference} reference run"
    return ev

