"""Diagnosis: config diff against a reference run, bottleneck rules with evidence, capacity model.

Three tools, used in this order by the workbook:

* :func:`diff_configs` lines up two server configurations (ServerConfig objects, server-args
  dicts, config.json files, SGLang logs, or shipped reference names) and ranks every difference
  by how much that argument can move throughput for a high-concurrency decode workload, using
  the impact table in ``data/knowledge/impact.json``.
* :func:`diagnose` reads a run folder (server log, sweep results, per-request records, GPU
  telemetry, environment snapshot) and applies rules, each a function of an :class:`Evidence`
  bundle of tidy DataFrames, so every rule can be checked on frames built by hand. Findings
  carry evidence strings that quote the numbers they rest on.
* :class:`CapacityModel` fits decode step time against batch size and KV tokens from a run's
  decode lines, predicts throughput at other caps and concurrencies (with the fit's error), and
  recommends a ``--max-running-requests`` the KV pool supports.

Known flag/hardware incompatibilities live in ``data/knowledge/incompatibilities.json`` and are
checked against the environment snapshot; users can add their own entries there.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import math
import re
import textwrap
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from glm5lib import rundir
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.paths import data_dir

__all__ = [
    "DIFF_COLUMNS",
    "FINDING_COLUMNS",
    "RULES",
    "CapacityModel",
    "Evidence",
    "Finding",
    "Recommendation",
    "diagnose",
    "diff_configs",
    "evaluate",
    "list_references",
    "load_evidence",
    "load_impact",
    "load_incompatibilities",
    "recommend_max_running_requests",
    "reference_dir",
    "register_cli",
    "resolve_server_args",
]

logger = logging.getLogger(__name__)

DIFF_COLUMNS = [
    "field",
    "current",
    "reference",
    "impact",
    "rank",
    "rationale",
    "flag",
    "automatic",
]
FINDING_COLUMNS = ["finding", "evidence", "suggestion", "confidence", "rule", "severity", "score"]

_IMPACT_ORDER = {"high": 0, "medium": 1, "low": 2, "unknown": 3, "none": 4}
_SECRET_KEY = re.compile(r"(^|_)(api_key|key|secret|password|token|hf_token)$", re.IGNORECASE)

# SGLang 0.5.x defaults of the fields the rules read, for configs that leave them unset.
_FALLBACK_DEFAULTS: dict[str, Any] = {
    "max_running_requests": None,
    "max_total_tokens": None,
    "mem_fraction_static": None,
    "chunked_prefill_size": None,
    "schedule_policy": "fcfs",
    "page_size": None,
    "tp_size": 1,
    "dp_size": 1,
    "attention_backend": None,
    "moe_runner_backend": "auto",
    "fp4_gemm_runner_backend": "auto",
    "enable_flashinfer_allreduce_fusion": False,
    "disable_radix_cache": False,
    "cuda_graph_max_bs": None,
    "disable_cuda_graph": False,
    "disable_custom_all_reduce": False,
}


# --------------------------------------------------------------------------------------------
# Knowledge files
# --------------------------------------------------------------------------------------------


def _knowledge_path(name: str) -> Path:
    return data_dir() / "knowledge" / name


@functools.lru_cache(maxsize=8)
def _load_json(path: str) -> Any:
    p = Path(path)
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise DiagnosisError(
            f"knowledge file {p} is missing (expected in data/knowledge/)"
        ) from None
    except json.JSONDecodeError as exc:
        raise DiagnosisError(f"knowledge file {p} is not valid JSON: {exc}") from None


def load_impact(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The impact table: server-arg field -> {"impact", "weight", "rationale"}."""
    data = _load_json(str(path or _knowledge_path("impact.json")))
    fields = data.get("fields")
    if not isinstance(fields, dict):
        raise DiagnosisError(f"impact table {path or 'impact.json'} has no 'fields' object")
    for name, entry in fields.items():
        if entry.get("impact") not in _IMPACT_ORDER:
            raise DiagnosisError(
                f"impact table entry {name!r} has impact {entry.get('impact')!r}; "
                f"valid: {', '.join(_IMPACT_ORDER)}"
            )
    return fields


def load_incompatibilities(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Known flag/hardware incompatibilities (entries of ``incompatibilities.json``)."""
    data = _load_json(str(path or _knowledge_path("incompatibilities.json")))
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise DiagnosisError(
            f"incompatibility file {path or 'incompatibilities.json'} has no 'entries' list"
        )
    for e in entries:
        missing = [
            k
            for k in ("id", "title", "severity", "suggestion", "source", "rationale")
            if k not in e
        ]
        if missing:
            raise DiagnosisError(
                f"incompatibility entry {e.get('id', '?')!r} lacks {', '.join(missing)}"
            )
    return entries


# --------------------------------------------------------------------------------------------
# Resolving configurations from many kinds of input
# --------------------------------------------------------------------------------------------


def list_references() -> list[str]:
    """Names of the reference runs shipped (or dropped) under ``data/reference/``."""
    root = data_dir() / "reference"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / rundir.SERVER_LOG).is_file())


def reference_dir(name: str) -> Path:
    """The folder of a reference run by name, e.g. ``reference_dir("k2-thinking")``."""
    path = data_dir() / "reference" / name
    if not (path / rundir.SERVER_LOG).is_file():
        raise ConfigError(
            f"no reference run named {name!r} (looked for {path / rundir.SERVER_LOG}; "
            f"references: {', '.join(list_references()) or 'none'})",
            field="reference",
            valid=list_references(),
        )
    return path


def _parse_log(path: Path):
    try:
        from glm5lib.logs import parse_log
    except ImportError as exc:  # the log parser is part of the package; this is a broken install
        raise DiagnosisError(f"cannot read {path}: glm5lib.logs is unavailable ({exc})") from exc
    return parse_log(path)


def _config_names() -> list[str]:
    root = data_dir() / "configs"
    return sorted(p.stem for p in root.glob("*.json")) if root.is_dir() else []


def _args_from_json_file(path: Path) -> dict[str, Any]:
    try:
        from glm5lib.config import ServerConfig

        return dict(ServerConfig.load(path).to_dict())
    except ImportError:
        pass
    except Exception as exc:
        # Fields of another SGLang release, say: a diff should still show them.
        logger.warning("reading %s as plain JSON: %s", path, exc)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}", field="config") from None
    if isinstance(data, dict) and isinstance(data.get("server_args"), dict):
        return dict(data["server_args"])
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if not k.startswith("_")}
    raise ConfigError(f"{path} does not hold a JSON object of server arguments", field="config")


def _args_from_folder(path: Path) -> dict[str, Any]:
    log = path / rundir.SERVER_LOG
    args: dict[str, Any] = {}
    if (path / rundir.CONFIG).is_file():
        args.update(_args_from_json_file(path / rundir.CONFIG))
    if log.is_file():
        args.update(_parse_log(log).server_args or {})
    if not args:
        raise ConfigError(
            f"{path} holds neither {rundir.CONFIG} nor a {rundir.SERVER_LOG} with a server_args line",
            field="config",
        )
    return args


def resolve_server_args(source: Any) -> tuple[dict[str, Any], str]:
    """Turn any configuration source into ``(server_args dict, label)``.

    Accepted: a ServerConfig (anything with ``to_dict()``), a ServerLog (``.server_args``), a
    dict, a path to a config JSON, a server log, a run/phase/reference folder, a shipped
    reference name (``"k2-thinking"``) or a shipped config name (``"glm5-baseline"``).
    """
    if isinstance(source, Mapping):
        return dict(source), "dict"
    if (
        hasattr(source, "to_dict")
        and callable(source.to_dict)
        and not isinstance(source, pd.DataFrame)
    ):
        return dict(source.to_dict()), type(source).__name__
    if hasattr(source, "server_args") and isinstance(source.server_args, Mapping):
        return dict(source.server_args), "server log"
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            try:
                folder = _find_phase(path, None)
            except DiagnosisError as exc:
                raise ConfigError(str(exc), field="config") from None
            return _args_from_folder(folder), str(folder)
        if path.is_file():
            if path.suffix == ".json":
                return _args_from_json_file(path), str(path)
            parsed = _parse_log(path)
            if not parsed.server_args:
                raise ConfigError(
                    f"{path} has no server_args=ServerArgs(...) line: give a log from the server's start, "
                    "a config .json, or a run folder",
                    field="config",
                )
            return dict(parsed.server_args), str(path)
        name = str(source)
        if name in list_references():
            return _args_from_folder(reference_dir(name)), f"reference {name}"
        if name in _config_names():
            return _args_from_json_file(data_dir() / "configs" / f"{name}.json"), f"config {name}"
        raise ConfigError(
            f"configuration source {name!r} is not a file, a folder, a reference name or a shipped config "
            f"name (names: {', '.join(list_references() + _config_names()) or 'none shipped'})",
            field="config",
            valid=list_references() + _config_names(),
        )
    raise ConfigError(
        f"cannot read a configuration from a {type(source).__name__}: give a ServerConfig, a dict, "
        "a path or a reference name",
        field="config",
    )


@functools.lru_cache(maxsize=1)
def _config_defaults() -> dict[str, Any]:
    """Every field's default, from glm5lib.config's flag catalogue when available."""
    defaults = dict(_FALLBACK_DEFAULTS)
    try:
        from glm5lib.config import SGLANG_FLAGS
    except ImportError:
        return defaults
    for name, spec in SGLANG_FLAGS.items():
        if getattr(spec, "in_server_args", True):
            defaults[name] = getattr(spec, "default", None)
    return defaults


def _flag_for(field: str) -> str:
    try:
        from glm5lib.config import flag_for

        return flag_for(field)
    except Exception:
        return "--" + field.replace("_", "-")


_NUM_RE = re.compile(r"^[+-]?\d+(\.\d+)?([eE][+-]?\d+)?$")


def _norm(value: Any) -> Any:
    """Normalise a server-arg value so that '64', 64 and 64.0 compare equal."""
    if isinstance(value, str):
        s = value.strip()
        if s in ("True", "true"):
            return True
        if s in ("False", "false"):
            return False
        if s in ("None", "null", ""):
            return None
        if _NUM_RE.match(s):
            f = float(s)
            return int(f) if f.is_integer() else f
        return s
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, tuple):
        return [_norm(v) for v in value]
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def _mask(field: str, value: Any) -> Any:
    if value is not None and _SECRET_KEY.search(field):
        return "***"
    return value


def _arg(args: Mapping[str, Any], field: str) -> Any:
    if field in args:
        return _norm(args[field])
    return _norm(_config_defaults().get(field, _FALLBACK_DEFAULTS.get(field)))


def diff_configs(current: Any, reference: Any, hide_irrelevant: bool = False) -> pd.DataFrame:
    """Every server argument that differs between ``current`` and ``reference``, ranked by impact.

    Returns a DataFrame with columns ``field, current, reference, impact, rank, rationale, flag``
    (rank 1 = most able to move throughput). Fields that never matter for throughput come last,
    or are dropped when ``hide_irrelevant`` is true. Secrets are shown as ``***``.
    """
    cur, _ = resolve_server_args(current)
    ref, _ = resolve_server_args(reference)
    impact = load_impact()
    rows = []
    for field in sorted(set(cur) | set(ref)):
        a, b = _arg(cur, field), _arg(ref, field)
        if a == b:
            continue
        entry = impact.get(field, {})
        cls = entry.get("impact", "unknown")
        if hide_irrelevant and cls == "none":
            continue
        rationale = entry.get("rationale", "not in the impact table: check SGLang's documentation")
        # None where SGLang's default is None means "chosen at start": the values may not differ.
        auto = [side for side, v in (("current", a), ("reference", b)) if v is None]
        automatic = bool(auto) and _config_defaults().get(field, None) is None
        if automatic:
            rationale += (
                f" ({auto[0]}: None = chosen automatically at start, so the running values may agree;"
                " compare the resolved value in that server's log)"
            )
        rows.append(
            {
                "field": field,
                "current": _mask(field, a),
                "reference": _mask(field, b),
                "impact": cls,
                "rationale": rationale,
                "flag": _flag_for(field),
                "automatic": automatic,
                "_order": (_IMPACT_ORDER[cls], automatic, -float(entry.get("weight", 0)), field),
            }
        )
    rows.sort(key=lambda r: r["_order"])
    frame = pd.DataFrame(rows, columns=[*DIFF_COLUMNS, "_order"]).drop(columns="_order")
    frame["rank"] = range(1, len(frame) + 1)
    return frame[DIFF_COLUMNS].reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# Evidence and findings
# --------------------------------------------------------------------------------------------

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
    log_text: str = ""
    standin: str | None = None
    source: str | None = None
    skipped: list[str] = dataclasses.field(default_factory=list)

    # -- derived facts used by several rules --
    def arg(self, field: str) -> Any:
        return _arg(self.server_args, field)

    def active_decode(self) -> pd.DataFrame:
        """Decode lines of one rank (the first seen) with at least one running request."""
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
            v = _norm(self.startup.get(key)) if self.startup else None
            if isinstance(v, (int, float)) and v > 0:
                return int(v), where
        v = self.arg("max_running_requests")
        if isinstance(v, (int, float)) and v > 0:
            return int(v), "server arguments"
        return None, "unset"

    def kv_pool_tokens(self) -> tuple[int | None, str]:
        """KV pool size in tokens (max_total_num_tokens) and where it came from."""
        v = _norm(self.startup.get("max_total_num_tokens")) if self.startup else None
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
        try:
            from glm5lib.logs import to_epoch

            t = pd.to_numeric(to_epoch(d["time"]), errors="coerce")
        except Exception:  # a time column the log parser did not produce
            return d.iloc[0:0]
        return d[(t.to_numpy() >= float(a)) & (t.to_numpy() <= float(b))]

    def sweep_sorted(self) -> pd.DataFrame:
        s = self.sweep
        if s is None or s.empty or "concurrency" not in s:
            return _frame(["concurrency"])
        s = s.copy()
        s["concurrency"] = pd.to_numeric(s["concurrency"], errors="coerce")
        return s.dropna(subset=["concurrency"]).sort_values("concurrency").reset_index(drop=True)


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
    return s.map(lambda v: _norm(v) is True if not isinstance(v, bool) else v).astype(bool)


# --------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------


def rule_concurrency_cap(ev: Evidence) -> list[Finding]:
    """Decode #running-req pinned at max-running-requests while requests queue and TTFT grows."""
    d = ev.active_decode()
    if d.empty:
        ev.skipped.append("concurrency_cap: no decode lines with running requests")
        return []
    cap, cap_src = ev.cap()
    running = _col(d, "running_req")
    queue = _col(d, "queue_req").fillna(0)
    inferred = False
    if cap is None:
        # No configured cap known: a plateau that requests queue behind is the signature.
        cap = int(running.max())
        inferred = True
        cap_src = "the highest #running-req seen"
    threshold = cap - max(0, math.floor(0.03 * cap))
    pinned = running >= threshold
    queued = queue > 0
    both = pinned & queued
    share = float(both.mean())
    if both.sum() < 3 or share < 0.2:
        return []
    if inferred and float(_col(d, "token_usage").where(both).max()) >= 0.9:
        return []  # a KV-bound plateau, handled by the KV rule

    parts = []
    s = ev.sweep_sorted()
    # The sharpest evidence: the decode lines of the highest offered level above the cap.
    above_cap = s[s["concurrency"] > cap] if not s.empty else s
    if len(above_cap):
        top = above_cap.iloc[-1]
        lv = ev.decode_in_level(top)
        if len(lv) >= 3:
            lv_run = _col(lv, "running_req")
            lv_q = _col(lv, "queue_req").fillna(0)
            lv_pinned = (lv_run >= threshold) & (lv_q > 0)
            parts.append(
                f"at concurrency {int(top['concurrency'])} #running-req stayed at {cap} on "
                f"{_pct(float(lv_pinned.mean()))} of its {len(lv)} decode lines while #queue-req "
                f"averaged {_num(float(lv_q.mean()))}"
            )
    parts += [
        ("over the whole log " if parts else "")
        + f"#running-req stayed at {cap} on {_pct(share)} of decode lines while #queue-req averaged "
        f"{_num(float(queue[both].mean()))} (max {int(queue[both].max())}); "
        f"token usage there averaged {float(_col(d, 'token_usage')[both].mean()):.2f}, so KV was not the limit"
    ]
    confidence = 0.45 if inferred else 0.7
    if not s.empty and "output_throughput" in s:
        above = s[s["concurrency"] > cap]
        at = s[s["concurrency"] <= cap]
        if len(above):
            hi = above.iloc[-1]
            lo = at.iloc[-1] if len(at) else None
            ttft_col = "median_ttft_ms" if "median_ttft_ms" in s else "mean_ttft_ms"
            if lo is not None:
                t0, t1 = float(lo["output_throughput"]), float(hi["output_throughput"])
                sentence = (
                    f"from concurrency {int(lo['concurrency'])} to {int(hi['concurrency'])} output "
                    f"throughput moved {_num(t0)} -> {_num(t1)} tok/s"
                )
                grew = False
                if ttft_col in s:
                    a, b = float(lo[ttft_col]), float(hi[ttft_col])
                    grew = b > 2 * max(a, 1e-9)
                    sentence += (
                        f" while {ttft_col.split('_')[0]} TTFT grew {_num(a)} -> {_num(b)} ms"
                    )
                plateau = t1 < 1.3 * t0 and hi["concurrency"] >= 2 * lo["concurrency"]
                parts.append(sentence)
                if plateau and grew:
                    confidence += 0.2
                elif plateau or grew:
                    confidence += 0.1
            elif ttft_col in s:
                parts.append(
                    f"median TTFT at concurrency {int(hi['concurrency'])} was {_num(float(hi[ttft_col]))} ms"
                )
    if inferred:
        parts.append("the configured cap is unknown; the plateau was read from the decode lines")
    else:
        parts.append(f"cap read from the {cap_src}")

    rec = None
    pool, _ = ev.kv_pool_tokens()
    ctx, _ = ev.context_tokens()
    target = int(s["concurrency"].max()) if not s.empty else None
    if pool and ctx:
        model = None
        try:
            model = CapacityModel.fit(ev.decode)
        except DiagnosisError:
            pass
        rec = recommend_max_running_requests(
            pool, ctx, target_concurrency=target, model=model, current_cap=cap
        )
    if rec is not None and rec.value is not None and rec.value > cap:
        suggestion = f"raise --max-running-requests from {cap} to {rec.value}: {rec.reason}"
    else:
        suggestion = (
            f"raise --max-running-requests above {cap}, as far as the KV pool allows (check token usage "
            "stays below ~0.95 with no retractions after the change)"
        )
    ref_cap = _norm((ev.reference_args or {}).get("max_running_requests"))
    if isinstance(ref_cap, int) and ref_cap > cap:
        suggestion += f"; the reference run ({ev.reference_label or 'reference'}) used {ref_cap}"
    return [
        Finding(
            finding=f"concurrency cap: at most {cap} requests run at once while the rest queue",
            evidence="; ".join(parts),
            suggestion=suggestion,
            confidence=min(confidence, 0.95),
            rule="concurrency_cap",
            severity=0.9,
            covers=("max_running_requests",),
        )
    ]


def rule_kv_capacity(ev: Evidence) -> list[Finding]:
    """Token usage near 1, requests held back below the cap, or retractions: KV bounds concurrency."""
    d = ev.active_decode()
    r = ev.retractions if ev.retractions is not None else _frame(["retracted_reqs"])
    if d.empty and r.empty:
        ev.skipped.append("kv_capacity: no decode lines or retractions")
        return []
    usage = _col(d, "token_usage")
    running = _col(d, "running_req")
    full = usage >= 0.95
    n_retract = len(r)
    retracted = int(_col(r, "retracted_reqs").fillna(0).sum()) if n_retract else 0
    share_full = float(full.mean()) if len(d) else 0.0
    # The scheduler stops admitting before the pool is full (it reserves room for the tokens
    # running requests will still generate), so requests queue below the cap at high usage.
    cap, _ = ev.cap()
    below_cap = running < (cap - max(1, math.floor(0.03 * cap))) if cap else running >= 0
    held = (usage >= 0.85) & (_col(d, "queue_req").fillna(0) > 0) & below_cap
    share_held = float(held.mean()) if len(d) else 0.0
    full_signal = bool(full.sum() >= 3 and share_full >= 0.05)
    held_signal = bool(held.sum() >= 3 and share_held >= 0.15)
    if n_retract == 0 and not full_signal and not held_signal:
        return []
    parts = []
    if len(d) and usage.notna().any():
        peak_text = f"token usage peaked at {float(usage.max()):.2f}"
        if full.any():
            peak_text += f" and was >= 0.95 on {_pct(share_full)} of decode lines"
        parts.append(peak_text)
        if full.any():
            parts.append(f"#running-req there averaged {_num(float(running[full].mean()))}")
        if held_signal:
            parts.append(
                f"on {_pct(share_held)} of decode lines requests queued (#queue-req averaging "
                f"{_num(float(_col(d, 'queue_req')[held].mean()))}) at usage >= 0.85 while "
                f"#running-req ({_num(float(running[held].mean()))} on average) stayed below the cap"
                + (f" of {cap}" if cap else "")
            )
    if n_retract:
        parts.append(f"{n_retract} retraction events sent {retracted} requests back to the queue")
    pool, pool_src = ev.kv_pool_tokens()
    ctx, _ = ev.context_tokens()
    supported = None
    if pool:
        text = f"KV pool {pool:,} tokens ({pool_src})"
        if ctx:
            supported = int(pool // ctx)
            text += f" holds about {supported} requests of {ctx:,.0f} tokens"
        parts.append(text)
    mem = ev.arg("mem_fraction_static")
    suggestion = "to run more requests at once, enlarge the KV pool: raise --mem-fraction-static"
    suggestion += f" (now {mem})" if mem is not None else ""
    suggestion += ", use --kv-cache-dtype fp8_e4m3, or spread the model over more GPUs"
    if supported and cap and cap > supported:
        suggestion = (
            f"--max-running-requests {cap} is above the ~{supported} requests the KV pool holds, so the "
            "pool, not the cap, sets concurrency"
            + (" (and retractions waste work)" if n_retract else "")
            + "; "
            + suggestion
        )
    return [
        Finding(
            finding="KV cache capacity: the token pool bounds how many requests run at once",
            evidence="; ".join(parts),
            suggestion=suggestion,
            confidence=0.85 if n_retract else (0.65 if full_signal else 0.55),
            rule="kv_capacity",
            severity=0.7,
            covers=("max_total_tokens", "mem_fraction_static", "kv_cache_dtype"),
        )
    ]


def rule_cuda_graph(ev: Evidence) -> list[Finding]:
    """Decode batches run without CUDA graphs because they exceed cuda_graph_max_bs."""
    d = ev.active_decode()
    if d.empty or "cuda_graph" not in d:
        ev.skipped.append("cuda_graph: no decode lines with a cuda graph field")
        return []
    if ev.arg("disable_cuda_graph") is True:
        return []  # graphs are off on purpose; the reference diff covers that choice
    graph = _bool_col(d, "cuda_graph")
    running = _col(d, "running_req")
    max_bs = ev.arg("cuda_graph_max_bs")
    src = "cuda_graph_max_bs"
    if not isinstance(max_bs, (int, float)):
        if not graph.any():
            return []
        max_bs = int(running[graph].max())
        src = "the largest batch that ran with a graph"
    over = (~graph) & (running > max_bs)
    share = float(over.mean())
    if over.sum() < 3 or share < 0.1:
        return []
    p95 = float(running[over].quantile(0.95))
    target = int(math.ceil(p95 / 8) * 8)
    return [
        Finding(
            finding=f"CUDA graphs not used for batches above {int(max_bs)}",
            evidence=(
                f"cuda graph: False on {_pct(share)} of decode lines, all with #running-req above "
                f"{int(max_bs)} ({src}); those batches reached {int(running[over].max())} (p95 {p95:.0f})"
            ),
            suggestion=(
                f"raise --cuda-graph-max-bs to about {target} so those batches replay a graph (capture takes "
                "memory from the KV pool: check max_total_num_tokens afterwards); at very large batches the "
                "launch overhead a graph saves is a small share of the step"
            ),
            confidence=0.8,
            rule="cuda_graph",
            severity=0.4,
            covers=("cuda_graph_max_bs",),
        )
    ]


def rule_saturation(ev: Evidence) -> list[Finding]:
    """Throughput stopped growing with offered load though neither the cap nor KV was the limit.

    The capacity model then says where the decode step's time goes: a large fixed part per step
    (launches, all-reduce latency, scheduling) or a large part per running request (kernels).
    """
    s = ev.sweep_sorted()
    if "completed" in s:
        s = s[_col(s, "completed").fillna(0) > 0].reset_index(
            drop=True
        )  # levels that finished requests
    if len(s) < 2 or "output_throughput" not in s:
        ev.skipped.append(
            "saturation: needs a sweep of at least two levels with completed requests"
        )
        return []
    thr = _col(s, "output_throughput")
    conc = s["concurrency"]
    hit = None
    for i in range(len(s) - 1, 0, -1):
        for j in range(i - 1, -1, -1):
            if conc[i] >= 1.8 * conc[j]:
                if thr[i] < 1.15 * thr[j]:
                    hit = (j, i)
                break
        if hit:
            break
    if hit is None:
        return []
    j, i = hit
    d = ev.active_decode()
    cap, _ = ev.cap()
    if not d.empty:
        running = _col(d, "running_req")
        queued = _col(d, "queue_req").fillna(0) > 0
        if cap and float(((running >= cap - math.floor(0.03 * cap)) & queued).mean()) >= 0.2:
            return []  # the concurrency cap explains it
        if float(((_col(d, "token_usage") >= 0.85) & queued).mean()) >= 0.15:
            return []  # the KV pool explains it
    parts = [
        f"from concurrency {int(conc[j])} to {int(conc[i])} output throughput moved only "
        f"{_num(float(thr[j]))} -> {_num(float(thr[i]))} tok/s"
    ]
    if d.empty:
        parts.append(
            "no decode lines, so a running-request cap or a full KV pool could not be ruled out"
        )
    else:
        parts.append(
            f"#running-req reached {int(_col(d, 'running_req').max())}"
            + (f" of a cap of {cap}" if cap else "")
            + f", token usage at most {float(_col(d, 'token_usage').max()):.2f}"
        )
    suggestion = (
        "the server is saturated below its cap and KV limits: the decode step itself is the limit; "
        "profile one decode step (torch profiler / nsys) to split it into attention, MoE GEMMs, "
        "all-reduce and scheduling"
    )
    try:
        model = CapacityModel.fit(ev.decode)
    except DiagnosisError:
        model = None
    if model is not None and model.per_request_ms > 0:
        b = int(_col(d, "running_req").max())
        step = float(model.step_ms(b))
        fixed = model.intercept_ms / step if step > 0 else 0.0
        parts.append(
            f"{model.describe()}: at {b} running the fixed part is {_pct(fixed)} of a {step:.1f} ms step, "
            f"and throughput cannot pass ~{_num(1000.0 / model.per_request_ms)} tok/s however many run"
        )
        if fixed >= 0.5:
            suggestion = (
                "most of each decode step does not depend on the batch: per-step overhead (kernel "
                "launches without CUDA graphs, all-reduce latency over PCIe without P2P, scheduler CPU "
                "time); try CUDA graphs at these batch sizes, GPU P2P for the custom all-reduce, and "
                "check the overlap scheduler is on; " + suggestion.split(": ", 1)[1]
            )
        else:
            suggestion = (
                "most of each decode step grows with the batch: the kernels are the limit (MoE GEMMs, "
                "attention, FP4 GEMM tactics); try other --moe-runner-backend / --attention-backend "
                "choices, FlashInfer autotuning, fp8 KV cache; " + suggestion.split(": ", 1)[1]
            )
    return [
        Finding(
            finding="throughput saturated: more concurrent requests no longer help",
            evidence="; ".join(parts),
            suggestion=suggestion,
            confidence=0.6 if not d.empty else 0.35,
            rule="saturation",
            severity=0.5,
        )
    ]


def _level_windows(s: pd.DataFrame) -> list[tuple[float, float]]:
    out = []
    for _, row in s.iterrows():
        a = row.get("window_start", np.nan)
        b = row.get("window_end", np.nan)
        if pd.isna(a) or pd.isna(b):
            a, b = row.get("start_time", np.nan), row.get("end_time", np.nan)
        out.append((float(a), float(b)))
    return out


def rule_gpu_underused(ev: Evidence) -> list[Finding]:
    """At the throughput peak the GPUs draw far less than their power limit: the limit is elsewhere."""
    s = ev.sweep_sorted()
    g = ev.gpu
    if s.empty or "output_throughput" not in s or g is None or g.empty or "power_w" not in g:
        ev.skipped.append("gpu_underused: needs sweep.csv and gpu.csv")
        return []
    peak_i = int(_col(s, "output_throughput").idxmax())
    peak = s.loc[peak_i]
    (a, b) = _level_windows(s.loc[[peak_i]])[0]
    times = _col(g, "time")
    if math.isnan(a) or math.isnan(b):
        ev.skipped.append("gpu_underused: the sweep has no level time windows")
        return []
    w = g[(times >= a) & (times <= b)]
    if w.empty:
        ev.skipped.append(
            f"gpu_underused: no GPU samples inside the peak level's window ({a:.0f}-{b:.0f})"
        )
        return []
    per_gpu = w.groupby("gpu").agg(
        power=("power_w", lambda x: pd.to_numeric(x, errors="coerce").mean()),
        limit=("power_limit_w", lambda x: pd.to_numeric(x, errors="coerce").max())
        if "power_limit_w" in w
        else ("power_w", lambda x: np.nan),
        util=("gpu_util", lambda x: pd.to_numeric(x, errors="coerce").mean())
        if "gpu_util" in w
        else ("power_w", lambda x: np.nan),
    )
    power = float(per_gpu["power"].mean())
    limit = float(per_gpu["limit"].mean())
    util = float(per_gpu["util"].mean())
    frac = power / limit if limit and not math.isnan(limit) else float("nan")
    low_power = not math.isnan(frac) and frac < 0.5
    low_util = not math.isnan(util) and util < 50
    if not (low_power or low_util):
        return []
    n = len(per_gpu)
    text = (
        f"at concurrency {int(peak['concurrency'])}, the peak at {_num(float(peak['output_throughput']))} tok/s, "
        f"the {n} GPUs drew {power:.0f} W"
    )
    if not math.isnan(frac):
        text += f" of {limit:.0f} W on average ({_pct(frac)} of the limit, busiest GPU {per_gpu['power'].max():.0f} W)"
    if not math.isnan(util):
        text += f" at {util:.0f}% utilisation"
    if low_power and not low_util and not math.isnan(util):
        text += (
            "; utilisation counts the time any kernel runs, so a busy-looking GPU at a small share of "
            "its power limit is running small, latency-bound kernels"
        )
    if ev.environment and ev.environment.get("standin"):
        text += " (simulated telemetry from the stand-in)"
    suggestion = (
        "the GPUs are far from their compute or power limit, so the limit is elsewhere: the scheduler (a running-request "
        "cap, small batches), CPU launch overhead (CUDA graphs off), communication (all-reduce over PCIe "
        "without P2P) or slow kernels; act on the other findings first, then profile one decode step "
        "(torch profiler / nsys) to see where the time goes"
    )
    return [
        Finding(
            finding="GPUs under-used at the throughput peak",
            evidence=text,
            suggestion=suggestion,
            confidence=0.7 if low_power and low_util else 0.55,
            rule="gpu_underused",
            severity=0.6,
        )
    ]


def rule_client_bound(ev: Evidence) -> list[Finding]:
    """Sweep levels the load generator flagged as limited by the client itself."""
    s = ev.sweep_sorted()
    if s.empty or "client_bound" not in s:
        ev.skipped.append("client_bound: the sweep has no client_bound column")
        return []
    bound = s[_bool_col(s, "client_bound")]
    if bound.empty:
        return []
    details = []
    for _, row in bound.iterrows():
        bits = []
        if pd.notna(row.get("client_cpu_pct", np.nan)):
            bits.append(f"client CPU {float(row['client_cpu_pct']):.0f}%")
        if pd.notna(row.get("loop_lag_p99_ms", np.nan)):
            bits.append(f"event-loop lag p99 {float(row['loop_lag_p99_ms']):.0f} ms")
        details.append(
            f"concurrency {int(row['concurrency'])}" + (f" ({', '.join(bits)})" if bits else "")
        )
    return [
        Finding(
            finding="load generator was the bottleneck at some levels",
            evidence=f"{len(bound)} of {len(s)} levels flagged client-bound: " + "; ".join(details),
            suggestion=(
                "figures at those levels measure the client, not the server: run the load generator on "
                "another machine or in more processes, raise the server's --stream-interval so fewer chunks "
                "are sent, or cross-check with sglang.bench_serving"
            ),
            confidence=0.9,
            rule="client_bound",
            severity=0.75,
        )
    ]


_CRASH_ADVICE = {
    "nan": (
        "server crashed: NaN in the logits",
        "NaN logits usually come from an attention or GEMM kernel on this GPU/model pair: switch "
        "--attention-backend (now {attention_backend}; triton is the most portable), keep "
        "--moe-runner-backend and --fp4-gemm-backend at auto, and retry with --disable-cuda-graph to rule out capture",
    ),
    "oom_pool": (
        "server failed: not enough memory for the KV pool",
        "the weights left too little for the KV pool: raise --mem-fraction-static (now {mem_fraction_static}) "
        "or use more GPUs / a smaller --context-length",
    ),
    "oom": (
        "server crashed: CUDA out of memory",
        "activations or CUDA graphs did not fit beside the KV pool: lower --mem-fraction-static "
        "(now {mem_fraction_static}), --chunked-prefill-size or --cuda-graph-max-bs",
    ),
    "nccl": (
        "server crashed: NCCL error",
        "check GPU peer-to-peer (nvidia-smi topo -p2p r), IOMMU/ACS settings and the container's /dev/shm "
        "size; retry with NCCL_P2P_DISABLE=1 to confirm; in the investigated setup a Proxmox VM broke P2P "
        "and an LXC container worked",
    ),
    "health_check": (
        "server stopped answering (watchdog)",
        "the scheduler hung: look at the log just before the watchdog line; raise --watchdog-timeout only "
        "if start-up or a very long batch explains it",
    ),
    "scheduler_exception": (
        "server crashed: scheduler exception",
        "read the traceback in the log; re-run with the same flags and --log-level debug to reproduce",
    ),
    "sigquit": (
        "a server child process died",
        "the parent received SIGQUIT from a failed child: the traceback before it names the cause",
    ),
    "other": ("server logged a fatal error", "read the quoted log line"),
}


def rule_crashes(ev: Evidence) -> list[Finding]:
    """Fatal errors in the server log (NaN, OOM, NCCL, watchdog, exceptions) and failed requests."""
    out: list[Finding] = []
    e = ev.errors
    if e is not None and not e.empty and "kind" in e:
        kinds = e.copy()
        msg = kinds.get("message", pd.Series("", index=kinds.index)).fillna("").astype(str)
        kinds["key"] = kinds["kind"].astype(str)
        kinds.loc[
            (kinds["key"] == "oom") & msg.str.contains("Not enough memory", case=False), "key"
        ] = "oom_pool"
        # sigquit and scheduler_exception accompany a more specific cause: report them only alone
        specific = set(kinds["key"]) - {"sigquit", "scheduler_exception", "other"}
        for key, group in kinds.groupby("key", sort=False):
            if key in ("sigquit", "scheduler_exception", "other") and specific:
                continue
            title, advice = _CRASH_ADVICE.get(key, _CRASH_ADVICE["other"])
            fmt = {f: ev.arg(f) for f in ("attention_backend", "mem_fraction_static")}
            first = group.iloc[0]
            ranks = group["rank"].dropna().nunique() if "rank" in group else 0
            when = f" at {first['time']}" if "time" in group and pd.notna(first.get("time")) else ""
            evidence = f"{len(group)} line(s){when}"
            if ranks:
                evidence += f" on {ranks} rank(s)"
            evidence += f": {str(first.get('message') or first.get('text') or '').strip()[:200]!r}"
            out.append(
                Finding(
                    finding=title,
                    evidence=evidence,
                    suggestion=advice.format(
                        **{k: ("default" if v is None else v) for k, v in fmt.items()}
                    ),
                    confidence=0.95,
                    rule=f"crash:{key}",
                    severity=1.0,
                )
            )
    s = ev.sweep_sorted()
    if not s.empty and "failed" in s:
        failed = _col(s, "failed").fillna(0)
        bad = s[failed > 0]
        if len(bad):
            summary = "; ".join(
                f"{int(r['failed'])} at concurrency {int(r['concurrency'])}"
                + (
                    f" ({str(r['error_summary'])[:120]})"
                    if pd.notna(r.get("error_summary", np.nan)) and str(r.get("error_summary"))
                    else ""
                )
                for _, r in bad.iterrows()
            )
            out.append(
                Finding(
                    finding="requests failed during the sweep",
                    evidence=f"{int(failed.sum())} failed requests: {summary}",
                    suggestion="failures distort throughput and latency: fix their cause (see the server log) before comparing levels",
                    confidence=0.9,
                    rule="request_errors",
                    severity=0.65,
                )
            )
    return out


def _gpu_ccs(env: Mapping[str, Any]) -> list[str]:
    ccs = []
    for g in env.get("gpus") or []:
        cc = g.get("compute_capability")
        if not cc:
            name = str(g.get("name", ""))
            if re.search(r"RTX PRO \d+ Blackwell|RTX 50\d0", name):
                cc = "12.0"
        if cc:
            ccs.append(str(cc))
    return ccs


def _p2p_ok(env: Mapping[str, Any]) -> bool | None:
    matrix = env.get("p2p")
    if not matrix:
        return None
    for i, row in enumerate(matrix):
        for j, v in enumerate(row):
            if i != j and str(v).upper() != "OK":
                return False
    return True


def _p2p_summary(env: Mapping[str, Any]) -> str:
    matrix = env.get("p2p") or []
    pairs = [str(v) for i, row in enumerate(matrix) for j, v in enumerate(row) if i < j]
    bad = [v for v in pairs if v.upper() != "OK"]
    if not bad:
        return f"GPU P2P OK on all {len(pairs)} pairs"
    kinds = ", ".join(sorted(set(bad)))
    return f"GPU P2P not available on {len(bad)} of {len(pairs)} pairs (status {kinds})"


def _line_around(text: str, start: int, end: int) -> str:
    """The whole line of ``text`` holding the span start:end."""
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    return text[first : last if last >= 0 else len(text)]


def _matches(value: Any, want: Any) -> bool:
    if isinstance(want, list):
        return any(_norm(value) == _norm(w) for w in want)
    return _norm(value) == _norm(want)


def rule_incompatibilities(ev: Evidence) -> list[Finding]:
    """Known flag/hardware incompatibilities (data/knowledge/incompatibilities.json)."""
    out = []
    env = ev.environment
    env_known = bool(env) and env.get("source") != "unavailable"
    for entry in load_incompatibilities():
        when = entry.get("when") or {}
        if not ev.server_args and when:
            continue
        if not all(_matches(ev.arg(f), v) for f, v in when.items()):
            continue
        if entry.get("log_pattern"):
            m = re.search(entry["log_pattern"], ev.log_text or "")
            if not m:
                continue
            line = _line_around(ev.log_text, m.start(), m.end())
        else:
            line = None
        confidence = 0.85
        facts = [", ".join(f"{f}={ev.arg(f)!r}" for f in when)] if when else []
        ccs_wanted = entry.get("compute_capability")
        if ccs_wanted:
            if not env_known:
                confidence = 0.3
                facts.append(
                    "no environment snapshot, so the GPU architecture could not be checked"
                )
            else:
                ccs = _gpu_ccs(env)
                hit = sorted({c for c in ccs if c in ccs_wanted})
                if not hit:
                    continue
                names = sorted({str(g.get("name", "?")) for g in env.get("gpus") or []})
                facts.append(
                    f"{len(ccs)}x {', '.join(names)} (compute capability {', '.join(hit)})"
                )
        env_cond = entry.get("environment") or {}
        if env_cond:
            if not env_known:
                continue
            if "p2p_ok" in env_cond:
                ok = _p2p_ok(env)
                if ok is None or ok != env_cond["p2p_ok"]:
                    continue
                facts.append(_p2p_summary(env))
            n_gpus = len(env.get("gpus") or [])
            if n_gpus < int(env_cond.get("min_gpus", 0)):
                continue
        if line is not None:
            facts.append(f"log line: {line.strip()[:200]!r}")
        evidence = "; ".join(facts)
        if entry.get("effect"):
            evidence += f": {entry['effect']}" if evidence else entry["effect"]
        out.append(
            Finding(
                finding=entry["title"],
                evidence=evidence + f" [source: {entry['source']}]",
                suggestion=entry["suggestion"],
                confidence=confidence,
                rule=f"incompatibility:{entry['id']}",
                severity=float(entry["severity"]),
                covers=tuple(when),
            )
        )
    return out


def _ruled_out(field: str, current: Any, reference: Any, ev: Evidence) -> str | None:
    """Why this run's evidence rules a difference out as the bottleneck, or None."""
    d = ev.active_decode()
    if field == "max_running_requests" and isinstance(current, int) and not d.empty:
        top = int(_col(d, "running_req").max())
        if top < current - max(1, math.floor(0.03 * current)):
            return f"the cap was never reached (#running-req at most {top} of {current})"
        if isinstance(reference, int) and current >= reference:
            return "this run already allows as many running requests as the reference"
    if field in ("max_total_tokens", "mem_fraction_static", "kv_cache_dtype") and not d.empty:
        peak = float(_col(d, "token_usage").max())
        if peak < 0.9 and ev.retractions.empty:
            return f"KV was never short (token usage at most {peak:.2f}, no retractions)"
    if field == "cuda_graph_max_bs" and not d.empty and isinstance(current, int):
        top = int(_col(d, "running_req").max())
        if top <= current:
            return f"no decode batch exceeded it (largest {top})"
    if (
        field in ("chunked_prefill_size", "max_prefill_tokens")
        and not d.empty
        and float(_col(d, "queue_req").fillna(0).max()) == 0
    ):
        return "no request ever waited in the queue"
    return None


def rule_reference_diff(ev: Evidence) -> list[Finding]:
    """Differences from the reference run the evidence cannot rule out, in diff rank order."""
    if not ev.reference_args:
        ev.skipped.append("reference_diff: no reference run given")
        return []
    if not ev.server_args:
        ev.skipped.append("reference_diff: this run's server arguments are unknown")
        return []
    diff = diff_configs(ev.server_args, ev.reference_args, hide_irrelevant=True)
    label = ev.reference_label or "the reference"
    out: list[Finding] = []
    ruled: list[str] = []
    minor: list[str] = []
    automatic: list[str] = []
    n = max(len(diff), 1)
    for _, row in diff.iterrows():
        field = row["field"]
        if field in ("model_path", "tokenizer_path", "served_model_name"):
            continue
        why = _ruled_out(field, row["current"], row["reference"], ev)
        if why:
            ruled.append(f"{field} ({why})")
            continue
        if row["impact"] not in ("high", "medium"):
            minor.append(f"{field}={row['current']!r} vs {row['reference']!r}")
            continue
        if row.get("automatic"):
            automatic.append(f"{field}: {row['current']!r} here, {row['reference']!r} there")
            continue
        severity = (0.5 if row["impact"] == "high" else 0.35) - 0.1 * (int(row["rank"]) - 1) / n
        ref_value = row["reference"]
        try_it = (
            row["flag"]
            if isinstance(ref_value, bool) and ref_value
            else f"{row['flag']} {ref_value}"
        )
        if isinstance(ref_value, bool) and not ref_value:
            try_it = f"without {row['flag']}"
        out.append(
            Finding(
                finding=f"differs from {label}: {field} = {row['current']!r} here, {ref_value!r} there",
                evidence=f"diff rank {int(row['rank'])} ({row['impact']} impact): {row['rationale']}; not ruled out by this run's evidence",
                suggestion=f"try {try_it} (one change at a time, same sweep)",
                confidence=0.35,
                rule="reference_diff",
                severity=round(severity, 4),
                covers=(field,),
            )
        )
    if ruled:
        out.append(
            Finding(
                finding=f"differences from {label} ruled out by the evidence",
                evidence="; ".join(ruled),
                suggestion="no action: kept for the record",
                confidence=0.8,
                rule="reference_diff_ruled_out",
                severity=0.02,
            )
        )
    if automatic:
        out.append(
            Finding(
                finding=f"differences from {label} where one side was chosen automatically",
                evidence="None means SGLang picks the value at start, so these may not differ in the "
                "running servers: " + "; ".join(automatic),
                suggestion="compare the resolved values in the two servers' server_args log lines; set "
                "a flag explicitly only where the resolved values differ",
                confidence=0.3,
                rule="reference_diff_automatic",
                severity=0.15,
            )
        )
    if minor:
        out.append(
            Finding(
                finding=f"minor differences from {label}",
                evidence="low-impact arguments: "
                + "; ".join(minor[:12])
                + (" ..." if len(minor) > 12 else ""),
                suggestion="unlikely to explain a throughput gap; align them last",
                confidence=0.3,
                rule="reference_diff_minor",
                severity=0.1,
            )
        )
    if "model_path" in set(diff["field"]):
        for f in out:
            if f.rule == "reference_diff":
                f.evidence += (
                    f" (the reference runs another model, {ev.reference_args.get('model_path')!r})"
                )
    return out


RULES: list[Callable[[Evidence], list[Finding]]] = [
    rule_crashes,
    rule_concurrency_cap,
    rule_kv_capacity,
    rule_cuda_graph,
    rule_saturation,
    rule_gpu_underused,
    rule_client_bound,
    rule_incompatibilities,
    rule_reference_diff,
]


def evaluate(
    ev: Evidence, rules: Iterable[Callable[[Evidence], list[Finding]]] | None = None
) -> pd.DataFrame:
    """Apply the rules to an :class:`Evidence` bundle; findings most important first.

    A reference difference already explained by an evidence-backed finding (same field) is
    dropped. ``frame.attrs["skipped"]`` lists rules that lacked the data they need.
    """
    findings: list[Finding] = []
    for rule in rules if rules is not None else RULES:
        findings.extend(rule(ev))
    covered = {c for f in findings if f.rule != "reference_diff" for c in f.covers}
    findings = [f for f in findings if not (f.rule == "reference_diff" and set(f.covers) & covered)]
    rows = [
        {
            "finding": f.finding,
            "evidence": f.evidence,
            "suggestion": f.suggestion,
            "confidence": round(f.confidence, 2),
            "rule": f.rule,
            "severity": f.severity,
            "score": f.score,
        }
        for f in findings
    ]
    frame = pd.DataFrame(rows, columns=FINDING_COLUMNS)
    frame = frame.sort_values(["score", "severity"], ascending=False, kind="stable").reset_index(
        drop=True
    )
    frame.attrs["skipped"] = list(ev.skipped)
    frame.attrs["source"] = ev.source
    frame.attrs["standin"] = ev.standin
    return frame


# --------------------------------------------------------------------------------------------
# Reading a run folder
# --------------------------------------------------------------------------------------------

_PHASE_FILES = (rundir.SERVER_LOG, rundir.SWEEP, rundir.CONFIG, rundir.REQUESTS, rundir.GPU)


def _is_phase(path: Path) -> bool:
    return any((path / f).is_file() for f in _PHASE_FILES)


def _find_phase(run_dir: Path, phase: str | None) -> Path:
    if not run_dir.exists():
        raise DiagnosisError(f"run folder {run_dir} does not exist")
    if phase is not None:
        p = run_dir / phase
        if not _is_phase(p):
            raise DiagnosisError(f"{p} holds none of {', '.join(_PHASE_FILES)}")
        return p
    if _is_phase(run_dir):
        return run_dir
    phases = sorted(p.name for p in run_dir.iterdir() if p.is_dir() and _is_phase(p))
    if len(phases) == 1:
        return run_dir / phases[0]
    if not phases:
        raise DiagnosisError(
            f"{run_dir} is not a run folder: it holds none of {', '.join(_PHASE_FILES)} and no phase folder with them"
        )
    raise DiagnosisError(
        f"{run_dir} has several phases ({', '.join(phases)}): name one (phase=... or --phase)"
    )


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


def load_evidence(
    run_dir: str | Path,
    reference: Any = None,
    environment: Any = None,
    phase: str | None = None,
) -> Evidence:
    """Read one phase of a run folder into an :class:`Evidence` bundle."""
    path = _find_phase(Path(run_dir), phase)
    ev = Evidence(source=str(path))
    args: dict[str, Any] = {}
    if (path / rundir.CONFIG).is_file():
        try:
            args.update(_args_from_json_file(path / rundir.CONFIG))
        except (ConfigError, json.JSONDecodeError) as exc:
            ev.skipped.append(f"config.json unreadable: {exc}")
    log_path = path / rundir.SERVER_LOG
    if log_path.is_file():
        log = _parse_log(log_path)
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
    if (path / rundir.SWEEP).is_file():
        ev.sweep = pd.read_csv(path / rundir.SWEEP)
    if (path / rundir.REQUESTS).is_file() and (path / rundir.REQUESTS).stat().st_size:
        ev.requests = pd.read_json(path / rundir.REQUESTS, lines=True)
    if (path / rundir.GPU).is_file() and (path / rundir.GPU).stat().st_size:
        ev.gpu = pd.read_csv(path / rundir.GPU)
    ev.environment = _read_environment(environment, path)
    if reference is not None:
        ev.reference_args, ev.reference_label = resolve_server_args(reference)
        if isinstance(reference, str) and reference in list_references():
            ev.reference_label = f"the {reference} reference run"
    return ev


def diagnose(
    run_dir: str | Path,
    reference: Any = None,
    environment: Any = None,
    *,
    phase: str | None = None,
    write: bool = True,
) -> pd.DataFrame:
    """Findings for one phase of a run folder, most important first.

    Columns: ``finding, evidence, suggestion, confidence, rule, severity, score``. ``reference``
    is anything :func:`resolve_server_args` takes (e.g. ``"k2-thinking"``); ``environment`` a
    snapshot dict or path (default: ``environment.json`` in the phase or run folder). The
    findings are also written to ``findings.csv`` in the phase folder unless ``write`` is false.
    """
    ev = load_evidence(run_dir, reference=reference, environment=environment, phase=phase)
    frame = evaluate(ev)
    if write and ev.source:
        frame.to_csv(Path(ev.source) / rundir.FINDINGS, index=False)
    return frame


# --------------------------------------------------------------------------------------------
# Capacity model
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Recommendation:
    """A recommended ``--max-running-requests`` and why."""

    value: int | None
    kv_bound: int | None
    target_concurrency: int | None
    context_tokens: float | None
    max_total_num_tokens: int | None
    predicted_throughput: float | None
    current_throughput: float | None
    reason: str


def _round_down(x: float, step: int = 8) -> int:
    return max(1, int(x // step * step)) if x >= step else max(1, int(x))


def recommend_max_running_requests(
    max_total_num_tokens: int | None,
    context_tokens: float | None,
    *,
    target_concurrency: int | None = None,
    headroom: float = 0.9,
    model: CapacityModel | None = None,
    current_cap: int | None = None,
) -> Recommendation:
    """The largest cap the KV pool supports for this workload (no retraction), within the load offered.

    ``context_tokens`` is what one request holds at its end (prompt + output); ``headroom`` keeps
    part of the pool free for the scheduler's estimates. With ``model``, predicted throughput at
    the recommended and current caps is reported.
    """
    if not 0 < headroom <= 1:
        raise ConfigError(f"headroom must be in (0, 1], got {headroom}", field="headroom")
    kv_bound = None
    if max_total_num_tokens and context_tokens:
        if context_tokens <= 0:
            raise ConfigError(
                f"context_tokens must be positive, got {context_tokens}", field="context_tokens"
            )
        kv_bound = int(headroom * max_total_num_tokens // context_tokens)
    candidates = [c for c in (kv_bound, target_concurrency) if c]
    if not candidates:
        return Recommendation(
            None,
            None,
            target_concurrency,
            context_tokens,
            max_total_num_tokens,
            None,
            None,
            "KV pool size or workload context length unknown: measure max_total_num_tokens first",
        )
    value = _round_down(min(candidates))
    reasons = []
    if kv_bound:
        reasons.append(
            f"a {max_total_num_tokens:,}-token KV pool at {_pct(headroom)} holds {kv_bound} requests of "
            f"{context_tokens:,.0f} tokens"
        )
    if target_concurrency and (kv_bound is None or target_concurrency < kv_bound):
        reasons.append(f"the highest offered concurrency is {target_concurrency}")
    pred = cur = None
    lo, hi = model.batch_range if model is not None else (0, 0)
    if model is not None and hi < 1.5 * lo:
        reasons.append(
            f"the decode lines cover batch sizes {lo}-{hi} only, too narrow to predict other batches"
        )
    elif model is not None:
        pred = float(model.throughput(value))
        if current_cap:
            # what the current cap actually lets run: bounded by the offered load and the pool
            pool_holds = int(max_total_num_tokens // context_tokens) if kv_bound else None
            now = min(c for c in (current_cap, target_concurrency, pool_holds) if c)
            cur = float(model.throughput(now))
            beyond = value > 1.1 * hi
            reasons.append(
                f"the decode model predicts {_num(pred)} tok/s with {value} running vs {_num(cur)} with "
                f"{now} running now (fit error {_pct(model.mape)}"
                + (f"; extrapolated beyond the measured batches {lo}-{hi}" if beyond else "")
                + ")"
            )
    return Recommendation(
        value,
        kv_bound,
        target_concurrency,
        context_tokens,
        max_total_num_tokens,
        pred,
        cur,
        "; ".join(reasons),
    )


@dataclasses.dataclass
class CapacityModel:
    """Decode step time as a linear function of batch size and KV tokens, fitted from decode lines.

    ``step_ms = intercept_ms + per_request_ms * batch + per_ktoken_ms * kv_tokens / 1000``; step
    time comes from each decode line as ``#running-req / gen throughput``; SGLang divides by the
    time since the previous decode line, so prefill batches in between are folded in at the
    workload's own mix. Lines far off the fit (the first after an idle gap) are dropped; ``mape`` is the fit's mean relative error in
    throughput on the lines it was fitted to.
    """

    intercept_ms: float
    per_request_ms: float
    per_ktoken_ms: float
    n_points: int
    n_outliers: int
    mape: float
    rmse_ms: float
    batch_range: tuple[int, int]
    tokens_per_request: float
    columns: tuple[str, ...]

    @classmethod
    def fit(cls, decode: pd.DataFrame) -> CapacityModel:
        if decode is None or decode.empty:
            raise DiagnosisError("cannot fit a capacity model: no decode lines")
        missing = {"running_req", "gen_throughput"} - set(decode.columns)
        if missing:
            raise DiagnosisError(
                f"cannot fit a capacity model: decode frame lacks {', '.join(sorted(missing))}"
            )
        d = Evidence(decode=decode).active_decode()
        b = _col(d, "running_req")
        g = _col(d, "gen_throughput")
        t = _col(d, "num_token") if "num_token" in d else pd.Series(np.nan, index=d.index)
        ok = (b > 0) & (g > 0)
        b, g, t = b[ok].to_numpy(float), g[ok].to_numpy(float), t[ok].to_numpy(float)
        if len(b) < 3:
            raise DiagnosisError(
                f"cannot fit a capacity model: need at least 3 decode lines with running requests and throughput, got {len(b)}"
            )
        step = 1000.0 * b / g
        use_tokens = bool(np.isfinite(t).all()) and np.ptp(t) > 0
        if use_tokens and len(np.unique(b)) > 1 and abs(np.corrcoef(b, t)[0, 1]) > 0.995:
            use_tokens = False  # collinear with batch: not separately identifiable
        cols = ["intercept", "batch"] + (["ktokens"] if use_tokens else [])
        if len(np.unique(b)) < 2:
            cols = ["batch"]  # a single batch size: only the per-request slope through the origin
        mask = np.ones(len(b), bool)
        coef: dict[str, float] = {}
        for _ in range(3):
            coef = cls._solve(b[mask], t[mask] / 1000.0, step[mask], list(cols))
            pred = cls._eval(coef, b, t / 1000.0)
            resid = step - pred
            mad = float(np.median(np.abs(resid[mask] - np.median(resid[mask])))) * 1.4826
            new = np.abs(resid) <= max(3.5 * mad, 0.05 * float(np.median(step)))
            if new.sum() < 3 or (new == mask).all():
                break
            if "intercept" in cols and len(np.unique(b[new])) < 2:
                # Rejecting a whole batch size would leave intercept and slope unidentifiable
                # (one noisy cluster, e.g. single-request lines, is still the only lever arm).
                break
            mask = new
        pred = cls._eval(coef, b[mask], t[mask] / 1000.0)
        thr_pred = b[mask] * 1000.0 / pred
        mape = float(np.mean(np.abs(thr_pred - g[mask]) / g[mask]))
        rmse = float(np.sqrt(np.mean((pred - step[mask]) ** 2)))
        tpr = float(np.nanmedian(t / b)) if np.isfinite(t).any() else float("nan")
        return cls(
            intercept_ms=coef.get("intercept", 0.0),
            per_request_ms=coef.get("batch", 0.0),
            per_ktoken_ms=coef.get("ktokens", 0.0),
            n_points=int(mask.sum()),
            n_outliers=int((~mask).sum()),
            mape=mape,
            rmse_ms=rmse,
            batch_range=(int(b.min()), int(b.max())),
            tokens_per_request=tpr,
            columns=tuple(c for c in cols if c in coef),
        )

    @staticmethod
    def _solve(b: np.ndarray, kt: np.ndarray, y: np.ndarray, cols: list[str]) -> dict[str, float]:
        # Least squares; a negative coefficient is not physical, so drop it and refit.
        while cols:
            x = np.column_stack(
                [{"intercept": np.ones_like(b), "batch": b, "ktokens": kt}[c] for c in cols]
            )
            sol, *_ = np.linalg.lstsq(x, y, rcond=None)
            neg = [c for c, v in zip(cols, sol, strict=True) if v < 0]
            if not neg:
                return dict(zip(cols, (float(v) for v in sol), strict=True))
            cols = [c for c in cols if c not in neg]
        return {"intercept": float(np.median(y))}

    @staticmethod
    def _eval(coef: Mapping[str, float], b: Any, kt: Any) -> np.ndarray:
        b = np.asarray(b, float)
        kt = np.nan_to_num(np.asarray(kt, float))
        return (
            coef.get("intercept", 0.0) + coef.get("batch", 0.0) * b + coef.get("ktokens", 0.0) * kt
        )

    def step_ms(self, batch: Any, kv_tokens: Any = None) -> np.ndarray:
        """Predicted decode step time (ms) at a batch size and KV tokens in use (default: typical per request)."""
        batch = np.asarray(batch, float)
        if kv_tokens is None:
            kv_tokens = batch * (
                0.0 if math.isnan(self.tokens_per_request) else self.tokens_per_request
            )
        coef = {
            "intercept": self.intercept_ms,
            "batch": self.per_request_ms,
            "ktokens": self.per_ktoken_ms,
        }
        return self._eval(coef, batch, np.asarray(kv_tokens, float) / 1000.0)

    def throughput(self, batch: Any, kv_tokens: Any = None) -> np.ndarray:
        """Predicted generated tokens per second with ``batch`` requests decoding."""
        return np.asarray(batch, float) * 1000.0 / self.step_ms(batch, kv_tokens)

    def predict(
        self,
        concurrency: Iterable[int] | int,
        *,
        cap: int | None = None,
        max_total_num_tokens: int | None = None,
        context_tokens: float | None = None,
    ) -> pd.DataFrame:
        """Throughput at each offered concurrency under a running-request cap and a KV pool.

        The running batch is the smallest of concurrency, cap and what the KV pool holds
        (``max_total_num_tokens / context_tokens``). Columns: concurrency, cap, batch,
        limited_by, step_ms, throughput, throughput_low, throughput_high, extrapolated.
        """
        levels = (
            [int(concurrency)]
            if isinstance(concurrency, (int, np.integer))
            else [int(c) for c in concurrency]
        )
        if any(c <= 0 for c in levels):
            raise ConfigError(
                f"concurrency levels must be positive, got {levels}", field="concurrency"
            )
        kv_limit = (
            int(max_total_num_tokens // context_tokens)
            if max_total_num_tokens and context_tokens
            else None
        )
        rows = []
        for c in levels:
            limits = {"concurrency": c}
            if cap:
                limits["cap"] = int(cap)
            if kv_limit:
                limits["kv"] = kv_limit
            by = min(limits, key=lambda k: (limits[k], list(limits).index(k)))
            batch = max(1, limits[by])
            per_req = self.tokens_per_request
            if math.isnan(per_req) and context_tokens:
                per_req = 0.75 * context_tokens  # prompt plus half the output, for similar lengths
            tokens = batch * (0.0 if math.isnan(per_req) else per_req)
            step = float(self.step_ms(batch, tokens))
            thr = batch * 1000.0 / step
            rows.append(
                {
                    "concurrency": c,
                    "cap": cap,
                    "batch": batch,
                    "limited_by": by,
                    "step_ms": step,
                    "throughput": thr,
                    "throughput_low": thr * (1 - self.mape),
                    "throughput_high": thr * (1 + self.mape),
                    "extrapolated": batch > 1.1 * self.batch_range[1]
                    or batch < self.batch_range[0],
                }
            )
        return pd.DataFrame(rows)

    def recommend_max_running_requests(
        self,
        max_total_num_tokens: int | None,
        context_tokens: float | None,
        *,
        target_concurrency: int | None = None,
        headroom: float = 0.9,
        current_cap: int | None = None,
    ) -> Recommendation:
        """See :func:`recommend_max_running_requests`; predictions come from this model."""
        return recommend_max_running_requests(
            max_total_num_tokens,
            context_tokens,
            target_concurrency=target_concurrency,
            headroom=headroom,
            model=self,
            current_cap=current_cap,
        )

    def describe(self) -> str:
        terms = [f"{self.intercept_ms:.2f} ms", f"{self.per_request_ms:.3f} ms x batch"]
        if self.per_ktoken_ms:
            terms.append(f"{self.per_ktoken_ms:.3f} ms per 1k KV tokens")
        return (
            f"decode step = {' + '.join(terms)}; fitted on {self.n_points} decode lines "
            f"(batch {self.batch_range[0]}-{self.batch_range[1]}, {self.n_outliers} outliers dropped), "
            f"throughput error {_pct(self.mape)}"
        )


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _print_findings(frame: pd.DataFrame) -> None:
    if frame.empty:
        print("No finding: no rule matched this run's evidence.")
    for i, row in frame.iterrows():
        print(
            f"{i + 1}. {row['finding']}  [{row['rule']}, confidence {row['confidence']:.2f}, score {row['score']:.2f}]"
        )
        for label in ("evidence", "suggestion"):
            print(
                textwrap.fill(
                    str(row[label]),
                    width=100,
                    initial_indent=f"   {label}: ",
                    subsequent_indent="      ",
                )
            )
    skipped = frame.attrs.get("skipped") or []
    if skipped:
        print("\nNot checked:")
        for s in skipped:
            print(f"  - {s}")


def _cli_diagnose(args: argparse.Namespace) -> int:
    frame = diagnose(
        args.run_dir,
        reference=args.reference,
        environment=args.environment,
        phase=args.phase,
        write=not args.no_write,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "findings": frame.to_dict(orient="records"),
                    "skipped": frame.attrs.get("skipped", []),
                },
                indent=2,
                default=str,
            )
        )
        return 0
    if frame.attrs.get("standin"):
        print(
            f"(run measured on the stand-in server, profile {frame.attrs['standin']!r}: timings come from a model)\n"
        )
    _print_findings(frame)
    if args.capacity:
        ev = load_evidence(args.run_dir, phase=args.phase)
        try:
            model = CapacityModel.fit(ev.decode)
        except DiagnosisError as exc:
            print(f"\nCapacity model: not fitted ({exc})")
            return 0
        print("\nCapacity model: " + model.describe())
        pool, _ = ev.kv_pool_tokens()
        ctx, _ = ev.context_tokens()
        cap, _ = ev.cap()
        s = ev.sweep_sorted()
        levels = sorted({int(c) for c in s["concurrency"]}) if not s.empty else [64, 256, 1024]
        table = model.predict(levels, cap=cap, max_total_num_tokens=pool, context_tokens=ctx)
        print(table.round(1).to_string(index=False))
        rec = model.recommend_max_running_requests(
            pool, ctx, target_concurrency=max(levels), current_cap=cap
        )
        print(f"recommended --max-running-requests: {rec.value} ({rec.reason})")
    return 0


def _cli_diff(args: argparse.Namespace) -> int:
    frame = diff_configs(args.current, args.reference, hide_irrelevant=not args.all)
    if args.json:
        print(frame.to_json(orient="records", indent=2, default_handler=str))
        return 0
    if frame.empty:
        print("The two configurations do not differ.")
        return 0
    with pd.option_context("display.max_colwidth", 70, "display.width", 200):
        print(frame.drop(columns=["flag", "automatic"]).to_string(index=False))
    return 0


def register_cli(subparsers: Any) -> None:
    """Add ``glm5 diagnose RUN_DIR`` and ``glm5 diff CURRENT REFERENCE``."""
    p = subparsers.add_parser(
        "diagnose",
        help="rank the likely bottlenecks of a measured run, with evidence",
        description="Apply the diagnosis rules to one phase of a run folder and print the findings.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder or one of its phase folders")
    p.add_argument("--phase", help="phase folder inside RUN_DIR (baseline, fix, ...)")
    p.add_argument(
        "--reference",
        help=f"reference run to diff against (name: {', '.join(list_references()) or 'none shipped'}, folder or log)",
    )
    p.add_argument(
        "--environment",
        help="environment.json to check incompatibilities against (default: the run's)",
    )
    p.add_argument(
        "--capacity",
        action="store_true",
        help="also fit the capacity model and recommend --max-running-requests",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--no-write", action="store_true", help=f"do not write {rundir.FINDINGS}")
    p.set_defaults(func=_cli_diagnose)

    q = subparsers.add_parser(
        "diff",
        help="rank the server-argument differences between two configurations",
        description="CURRENT and REFERENCE: a config .json, a server log, a run folder, a reference name or a shipped config name.",
    )
    q.add_argument("current", metavar="CURRENT")
    q.add_argument("reference", metavar="REFERENCE")
    q.add_argument(
        "--all", action="store_true", help="also list arguments that never matter for throughput"
    )
    q.add_argument("--json", action="store_true", help="print JSON instead of a table")
    q.set_defaults(func=_cli_diff)
