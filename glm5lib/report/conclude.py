"""What a run concludes: the numbers of each phase, before against after, the leading cause.

:func:`summarize` reads what the notebooks left in a run folder and returns the numbers as a
JSON-ready dict (what ``summary.json`` holds). Each phase's measurements (sweep, server log,
``/metrics``, GPU samples, configuration, command, server info, environment) are read once, as
its :class:`~glm5lib.diagnose.evidence.Evidence` (:func:`load_phase`, through the report's one
:class:`~glm5lib.diagnose.evidence.EvidenceCache`, :func:`reading`, which the report's sections
read too), under the evidence's one precedence between the log, the configuration and the gauges;
what the notebooks concluded (a phase's ``findings.csv`` and ``patch.json``; the run's
``diff.csv``, ``hypothesis.json`` and ``notebooks.json``) is read beside it. It decides, it does not render: the Markdown and
the HTML report are drawn from this dict (:mod:`glm5lib.report.markdown`,
:mod:`glm5lib.report.html`).

Which phase is the measurement *before* the change and which is *after* is decided once
(:func:`phase_roles`, ``summary["roles"]``): the workbook's ``baseline`` and ``fix`` when they
exist, otherwise the phases in the order they were measured. The level the summary quotes beside
the peak (``summary["story_level"]``) is the lowest level at which the *before* phase already
delivered its peak (within 5%): where more concurrency stopped buying throughput.

Measurements from glm5lib's stand-in server are never passed off as GPU measurements: when any
phase's server log banner (``ServerLog.standin``), server info or environment snapshot says it
came from the stand-in, ``summary["standin"]["used"]`` says so, with the profile name.

Anything missing (a notebook not run yet, a run that failed half-way) is reported as missing,
not as an error.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import engines, rundir
from glm5lib.diagnose.evidence import Evidence, EvidenceCache, command_flags
from glm5lib.diagnose.model import MAX_BAND
from glm5lib.diagnose.prediction import unseen_fields, written_changes
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.levels import per_level
from glm5lib.report._files import clean, fmt, read_csv, read_json
from glm5lib.report.quality import level_window

__all__ = ["frames_and_summary", "list_phases", "phase_roles", "reading", "summarize", "verdict"]

log = logging.getLogger(__name__)

#: The workbook's phase names (notebooks 2 and 4's ``PHASE`` defaults): before and after the fix.
BEFORE, AFTER = "baseline", "fix"
#: A level within this share of the peak already delivers it (the "saturation" level).
_AT_PEAK = 0.05

_PHASE_ORDER = (BEFORE, AFTER)
_LEVEL_COLUMNS = (
    "concurrency", "completed", "cancelled", "failed", "output_throughput", "total_throughput",
    "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
    "median_e2e_latency_ms", "client_bound", "median_ttft_ms_bucket", "median_e2e_latency_ms_bucket",
)


def list_phases(run_dir: str | Path, evidence: EvidenceCache | None = None) -> list[str]:
    """Phase folders of a run (those with a sweep or a server log): baseline and fix first, then
    the others in the order they were measured. Through ``evidence`` (the report's :func:`reading`)
    that order is each sweep's first request, which a copy or a checkout keeps; without it, the
    files' times."""
    run = Path(run_dir)
    found = {
        p.name: _measured_at(p, evidence)
        for p in (run.iterdir() if run.is_dir() else ())
        if p.is_dir() and ((p / rundir.SWEEP).exists() or (p / rundir.SERVER_LOG).exists())
    }
    ordered = [p for p in _PHASE_ORDER if p in found]
    return ordered + sorted((p for p in found if p not in _PHASE_ORDER), key=lambda p: (found[p], p))


def _measured_at(phase: Path, evidence: EvidenceCache | None) -> float:
    """When a phase was measured: its sweep's first ``start_time`` as ``evidence`` reads it, else
    its files' modification time."""
    if evidence is not None:
        try:
            sweep = evidence.load(phase).sweep
        except (DiagnosisError, ConfigError, OSError, ValueError, KeyError):
            sweep = None
        if sweep is not None and "start_time" in sweep.columns:
            first = pd.to_numeric(sweep["start_time"], errors="coerce").min()
            if pd.notna(first):
                return float(first)
    return min((phase / f).stat().st_mtime for f in (rundir.SWEEP, rundir.SERVER_LOG) if (phase / f).exists())


def _decode_stats(decode: pd.DataFrame | None, cap: int | None) -> dict:
    """The server log's decode lines (every line of the first rank, idle ones included) in figures."""
    if decode is None or decode.empty or "running_req" not in decode.columns:
        return {"decode_lines": 0}
    data = decode
    if "rank" in data.columns and data["rank"].notna().any():
        data = data[data["rank"] == data["rank"].dropna().iloc[0]]
    stats = {
        "decode_lines": len(data),
        "max_running_req": int(data["running_req"].max()),
        "mean_running_req": float(data["running_req"].mean()),
        "max_queue_req": int(data["queue_req"].max()) if "queue_req" in data else None,
        "mean_queue_req": float(data["queue_req"].mean()) if "queue_req" in data else None,
    }
    if "gen_throughput" in data.columns:
        stats["peak_gen_throughput"] = float(data["gen_throughput"].max())
    if cap and "queue_req" in data.columns:
        pinned = (data["running_req"] >= cap) & (data["queue_req"] > 0)
        stats["pinned_at_cap_share"] = float(pinned.mean())
    return stats


def _gauge_stats(ev: Evidence, cap: int | None) -> dict | None:
    """The running and queued peaks the ``/metrics`` gauges saw over the sweep's levels (sampled
    about once a second: denser than a log that writes a decode line every N steps), or None."""
    try:
        levels = ev.gauge_levels()
    except (KeyError, ValueError, ConfigError) as exc:
        log.warning("%s: /metrics gauges unreadable for the report (%s)", ev.source, exc)
        return None
    if levels.empty or "max_running" not in levels or not levels["max_running"].notna().any():
        return None
    stats = {"samples": int(levels["gauge_samples"].fillna(0).sum()),
             "max_running_req": int(levels["max_running"].max())}
    if "max_queued" in levels and levels["max_queued"].notna().any():
        stats["max_queue_req"] = int(levels["max_queued"].max())
    if cap:
        stats["reached_cap"] = bool(stats["max_running_req"] >= cap)
    # the evidence's precedence: the gauges saw a batch the log's decode lines missed (or it has none)
    stats["log_missed_peak"] = ev.gauges_saw_more()
    return stats


def _timeline(ev: Evidence) -> pd.DataFrame | None:
    """The phase's running and queued requests over time for the figure (the evidence's precedence)."""
    try:
        return ev.timeline()
    except (KeyError, ValueError, ConfigError):  # gauges that cannot be windowed: the log's lines
        return ev.log_lines()


def _metrics_note(ev: Evidence, adapter: engines.EngineAdapter | None) -> dict:
    """How many ``/metrics`` rows a phase recorded, and a note where it recorded none (naming the
    switch that turns the engine's ``/metrics`` on, where it has one)."""
    rows = len(ev.metrics) if ev.metrics is not None else 0
    if rows:
        return {"rows": rows}
    switch = adapter.capabilities.metrics_flag if adapter is not None else "the engine's metrics switch"
    why = f"the server ran without {switch} (or /metrics was not reachable)" if switch else "/metrics was not reachable"
    return {"rows": 0, "note": (
        f"no /metrics samples: {why}, so its queue and running-request gauges come from the server log only")}


def _power_per_level(gpu: pd.DataFrame | None, sweep: pd.DataFrame | None) -> pd.DataFrame | None:
    if gpu is None or sweep is None or gpu.empty or sweep.empty:
        return None
    try:
        return per_level(gpu, sweep)
    except (ConfigError, KeyError, ValueError, TypeError) as exc:  # a partial gpu.csv must not cost the whole report
        log.warning("power per level could not be computed: %s", exc)
        return None


def _standin_of(ev: Evidence) -> str | None:
    if ev.standin:
        return str(ev.standin)
    info = ev.server_info
    if isinstance(info, Mapping) and isinstance(info.get("standin"), Mapping):
        return str(info["standin"].get("profile") or "unknown profile")
    return None


#: Keys of a config file that describe it rather than set a server argument.
_NOT_ARGUMENTS = frozenset({"format", "name", "description", "source", "server_args", "env", "engine",
                            "sglang_version", "vllm_version"})


def _phase_adapter(ev: Evidence) -> engines.EngineAdapter | None:
    """The adapter of the engine that served a phase, as its evidence tells it; None when it does not
    (the evidence's own default engine is not taken for a word of the run folder)."""
    named = (ev.startup or {}).get("engine") or getattr(ev.config, "engine", None)
    if named:
        return engines.get(str(named), default=engines.COMMAND)
    if ev.config is not None:  # a configuration read as its engine's: that engine (not the stand-in)
        found = [a for a in engines.adapters() if not a.capabilities.is_standin and a.config_type is type(ev.config)]
        if found:
            return found[0]
    args = ev.server_args or {}
    own = [a for a in engines.adapters() if not a.capabilities.is_standin and a.capabilities.launches_from_config
           and set(a.capabilities.report_fields) & set(args)]
    return own[0] if own else None


def _engine_of(adapter: engines.EngineAdapter | None, standin: str | None) -> str:
    """The engine that served a phase (``"unknown"`` when the run folder does not tell)."""
    if standin:
        return "stand-in"
    return adapter.name if adapter is not None else "unknown"


def _report_fields() -> list[str]:
    return list(dict.fromkeys(f for a in engines.adapters() for f in a.capabilities.report_fields))


def _recorded(frame: pd.DataFrame | None) -> pd.DataFrame | None:
    """A table the phase recorded, or None where the evidence holds only its empty placeholder."""
    if frame is None or (frame.empty and len(frame.columns) <= 3 and frame.dtypes.eq(object).all()):
        return None
    return frame


def reading() -> EvidenceCache:
    """The report's reading of its phases: each phase's evidence once for every part of the report,
    a half-written table left out (:func:`~glm5lib.diagnose.evidence.load_evidence`'s ``partial``)."""
    return EvidenceCache(partial=True)


def load_phase(run: Path, phase: str, phases: EvidenceCache | None = None) -> Evidence:
    """One phase's evidence as the report reads it (through ``phases``, the report's :func:`reading`;
    a one-off read without); a phase whose evidence cannot be read at all is an empty one."""
    try:
        return (phases or reading()).load(run / phase)
    except (DiagnosisError, ConfigError, OSError, ValueError, KeyError) as exc:
        log.warning("%s: phase %s unreadable for the report (%s: %s)", run, phase, type(exc).__name__, exc)
        return Evidence(source=str(run / phase), skipped=[f"unreadable: {exc}"])


def _phase_summary(run: Path, phase: str, ev: Evidence | None = None) -> tuple[dict, dict]:
    """(summary dict, frames for figures) of one phase, from its evidence (read here when not given)."""
    ev = ev if ev is not None else load_phase(run, phase)
    folder = run / phase
    sweep = _recorded(ev.sweep)
    gpu = _recorded(ev.gpu)
    command = ev.command or {}
    # the evidence's precedence (the log's arguments, else the configuration's); a command's own flags
    # are left to the command, which the summary quotes as typed
    typed = command_flags(command.get("argv") or []) if isinstance(command, Mapping) else {}
    args = {k: v for k, v in (ev.server_args or {}).items() if k not in typed}
    adapter = _phase_adapter(ev)
    lim = (engines.limits_of(adapter, args, ev.startup or {}, ev.environment)
           if adapter is not None else engines.limits_in(args))
    graphs_field = adapter.capabilities.field("graphs_off") if adapter is not None else None
    shown = dict(args)
    if lim.graphs_off and graphs_field:  # graphs off in any spelling (SGLang 0.5.23: per phase)
        shown[graphs_field] = True
    cap = lim.running_cap
    cap_field = (adapter or engines.get(engines.DEFAULT_ENGINE)).capabilities.field("running_cap")

    summary: dict[str, Any] = {
        "config": {k: shown.get(k) for k in _report_fields() if k in shown},
        "running_cap": cap,
        # how an automatic cap was resolved (None when the cap was given or logged)
        "cap_automatic": lim.automatic.get("running_cap"),
        # the cap under the engine's own name
        "cap_name": cap_field,
        # a phase launched from an engine's command (BACKEND "command"): the knob is in its argv
        "command": command.get("argv") if isinstance(command, Mapping) else None,
        "standin": _standin_of(ev),
        "levels": [],
        "throughput": {},
    }
    summary["engine"] = _engine_of(adapter, summary["standin"])
    resolved = {k: v for k, v in args.items() if k not in _NOT_ARGUMENTS and not isinstance(v, Mapping)}
    frames: dict[str, Any] = {"sweep": sweep, "decode": ev.log_lines(), "cap": cap,
                              "cap_name": cap_field,
                              "arguments": resolved}
    if sweep is not None and "concurrency" in sweep.columns:
        sweep = sweep.sort_values("concurrency")
        cols = [c for c in _LEVEL_COLUMNS if c in sweep.columns]
        summary["levels"] = [clean(row) for row in sweep[cols].to_dict(orient="records")]
        if "output_throughput" in sweep.columns:
            summary["throughput"] = {
                str(int(c)): clean(t) for c, t in zip(sweep["concurrency"], sweep["output_throughput"], strict=True)
            }
            best = sweep.loc[sweep["output_throughput"].idxmax()] if sweep["output_throughput"].notna().any() else None
            if best is not None:
                summary["peak"] = {"concurrency": int(best["concurrency"]),
                                   "output_throughput": float(best["output_throughput"]), **_window_of(best)}
        if "failed" in sweep.columns:
            summary["failed_requests"] = int(sweep["failed"].fillna(0).sum())
        if "cancelled" in sweep.columns:
            summary["cut_at_deadline"] = int(sweep["cancelled"].fillna(0).sum())
        summary["metrics"] = _metrics_note(ev, adapter)
        gauges = _gauge_stats(ev, cap)
        if gauges:
            summary["gauges"] = gauges
            frames["decode"] = _timeline(ev)  # the gauges where they saw a batch the log missed
    if (folder / rundir.SERVER_LOG).exists():  # the log's own figures, beside the gauges
        summary["decode"] = _decode_stats(ev.log_lines(), cap)
        if ev.errors is not None and not ev.errors.empty and "kind" in ev.errors:
            summary["errors"] = clean(ev.errors["kind"].value_counts().to_dict())
    power = _power_per_level(gpu, sweep)
    frames["power"] = power
    if power is not None and not power.empty:
        keep = [c for c in ("concurrency", "mean_power_w", "peak_power_w", "power_limit_w",
                            "mean_gpu_util", "joules_per_token") if c in power.columns]
        summary["power"] = [clean(r) for r in power[keep].to_dict(orient="records")]
    findings = read_csv(folder / rundir.FINDINGS)
    if findings is not None:
        keep = [c for c in ("finding", "evidence", "suggestion", "confidence", "rule") if c in findings.columns]
        summary["findings"] = [clean(r) for r in findings[keep].to_dict(orient="records")]
    patch = read_json(folder / rundir.PATCH_RECORD)
    if patch:
        summary["patch"] = clean(patch)
    return summary, frames


def _comparison(before: dict, after: dict) -> list[dict]:
    rows = []
    for level in sorted(set(before) & set(after), key=int):
        b, a = before[level], after[level]
        gain = a / b if b and a is not None else None
        rows.append({"concurrency": int(level), "before": b, "after": a, "gain": gain})
    return rows


def _prediction(run: Path, before: str, after: str, measured: Mapping[str, Any]) -> dict | None:
    """The forecast of what *after* changed, beside what *after* measured (``measured``: tok/s by level).

    The forecast written before *after*'s launch (its ``prediction.csv``: the performance model of
    *before*, with the step profile taken for it) is the one the workbook stands behind; where there
    is none, the forecast of *before*'s leading remedy that its findings carry, as the rules made it
    before any step profile. The level is the one that forecast is for (else the highest forecast);
    ``given`` says whether the forecast's band was within +/-30% (wider is not a forecast)."""
    findings = read_csv(run / before / rundir.FINDINGS)
    needed = {"predicted_concurrency", "predicted_throughput", "predicted_low", "predicted_high"}
    top = None
    if findings is not None and not findings.empty and needed <= set(findings.columns):
        rows = findings.dropna(subset=["predicted_concurrency", "predicted_throughput"])
        top = rows.iloc[0] if not rows.empty else None
    written = read_csv(run / after / rundir.PREDICTION_CSV)
    if written is not None and {"concurrency", "predicted", "low", "high"} <= set(written.columns):
        written = written.dropna(subset=["concurrency", "predicted"])
    else:
        written = None
    if written is not None and not written.empty:
        levels = [int(c) for c in written["concurrency"]]
        concurrency = int(top["predicted_concurrency"]) if top is not None and int(
            top["predicted_concurrency"]) in levels else max(levels)
        row = written[written["concurrency"].astype(int) == concurrency].iloc[0]
        source = "forecast"
    elif top is not None:
        concurrency = int(top["predicted_concurrency"])
        row = pd.Series({"predicted": top["predicted_throughput"], "low": top["predicted_low"],
                         "high": top["predicted_high"], "given": top.get("predicted_given")})
        source = "findings"
    else:
        return None
    predicted, low, high = float(row["predicted"]), float(row["low"]), float(row["high"])
    # as the model judged it; a folder written before it said so: the band's width against the limit
    narrow = _band_given(predicted, low, high)
    verdict_ = row.get("given")
    given = str(verdict_).strip().lower() in ("true", "1", "1.0") if pd.notna(verdict_) else narrow
    after_tok_s = measured.get(str(concurrency))
    # what the forecast itself was for: the changes it was asked about and those it has no term for
    # (a findings forecast is the rule's remedy alone); the report names what it did not see
    asked: dict[str, Any] = {}
    if source == "forecast":
        try:
            asked["changes"] = sorted(written_changes(row.get("changes"))) or None
        except ValueError as exc:
            log.warning("%s: %s", after, exc)
        asked["unseen"] = unseen_fields(row.get("unseen_changes")) or None
    same_level = top is not None and int(top["predicted_concurrency"]) == concurrency
    return clean({
        "source": source,
        "rule": None if top is None else top.get("rule"),
        "concurrency": concurrency,
        "predicted": predicted,
        "low": low,
        "high": high,
        "given": given,
        "wide": not narrow,
        "before": top.get("measured_throughput") if same_level else None,
        "after": after_tok_s,
        "within": None if after_tok_s is None else bool(low <= after_tok_s <= high),
        "text": top.get("prediction") if source == "findings" else None,
        **{k: v for k, v in asked.items() if v is not None},
    })


def _window_of(level: Mapping[str, Any]) -> dict[str, float]:
    """How much of a level its figures were read over (:func:`level_window`: ``window_s``,
    ``level_s``, ``ramp_s``), and the requests it ``completed`` ({} where the sweep did not record
    its window)."""
    out: dict[str, float] = dict(level_window(level))
    if not out:
        return {}
    done = pd.to_numeric(pd.Series([level.get("completed")]), errors="coerce").iloc[0]
    if pd.notna(done):
        out["completed"] = int(done)
    return out


def _band_given(predicted: float, low: float, high: float) -> bool:
    """A band whose half-width is within the model's limit for a forecast (:data:`MAX_BAND`): how a
    folder that did not record the model's own verdict is read."""
    return predicted > 0 and max(high / predicted - 1.0, 1.0 - low / predicted) <= MAX_BAND + 1e-9


def _leading_cause(run: Path) -> dict | None:
    hypothesis = read_json(run / rundir.HYPOTHESIS)
    if isinstance(hypothesis, Mapping) and hypothesis.get("field"):
        return clean(dict(hypothesis))
    diff = read_csv(run / rundir.DIFF)
    if diff is None or diff.empty or "field" not in diff.columns:
        return None
    top = diff.sort_values("rank").iloc[0] if "rank" in diff.columns else diff.iloc[0]
    keep = [c for c in ("field", "current", "reference", "impact", "rank", "rationale") if c in diff.columns]
    return clean({c: top[c] for c in keep})


def phase_roles(phases: Mapping[str, Any] | list[str]) -> tuple[str | None, str | None]:
    """``(before, after)``: the phases a comparison sets side by side (either may be ``None``).

    The workbook's ``baseline`` and ``fix`` when measured; otherwise the first phase (in
    :func:`list_phases` order) is *before* and the next one *after*.
    """
    names = [p for p in phases]
    before = BEFORE if BEFORE in names else (names[0] if names else None)
    rest = [p for p in names if p != before]
    after = AFTER if AFTER in rest else (rest[0] if rest else None)
    return before, after


def _story_level(phase: Mapping[str, Any]) -> int | None:
    """The level quoted beside the peak: the lowest that already delivered the peak (within 5%),
    where more concurrency stopped buying throughput."""
    measured = {int(k): v for k, v in (phase.get("throughput") or {}).items() if v is not None}
    peak = (phase.get("peak") or {}).get("output_throughput")
    if not measured or not peak:
        return None
    return min(c for c, v in measured.items() if v >= (1 - _AT_PEAK) * peak)


def frames_and_summary(run_dir: str | Path, evidence: EvidenceCache | None = None) -> tuple[dict, dict]:
    """``(summary, frames)``: :func:`summarize`'s dict and the frames the figures are drawn from;
    ``evidence``: the report's :func:`reading` of its phases (one of its own without)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ConfigError(f"run folder {run} does not exist", field="run_dir")
    evidence = evidence if evidence is not None else reading()
    phases: dict[str, dict] = {}
    frames: dict[str, dict] = {}
    for phase in list_phases(run, evidence):
        phases[phase], frames[phase] = _phase_summary(run, phase, load_phase(run, phase, evidence))
    environment = read_json(run / rundir.ENVIRONMENT) or {}
    env_standin = bool(environment.get("standin")) if isinstance(environment, Mapping) else False
    profiles = {p: s["standin"] for p, s in phases.items() if s.get("standin")}
    summary: dict[str, Any] = {
        "run_dir": str(run.resolve()),
        "run_id": run.name,
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "standin": {"used": bool(profiles) or env_standin, "profiles": profiles,
                    "environment": env_standin},
        "phases": phases,
        "throughput": {p: s["throughput"] for p, s in phases.items() if s.get("throughput")},
        "leading_cause": _leading_cause(run),
        "notebooks": read_json(run / rundir.NOTEBOOKS_STATUS) or [],
    }
    if isinstance(environment, Mapping) and environment:
        gpus = environment.get("gpus") or []
        summary["environment"] = clean({
            "source": environment.get("source"),
            "gpu_count": len(gpus),
            "gpu_names": sorted({g.get("name") for g in gpus if g.get("name")}),
            "power_limit_w": max((g.get("power_limit_w") or 0 for g in gpus), default=None),
            "driver_version": environment.get("driver_version"),
            "packages": environment.get("packages"),
            "warnings": environment.get("warnings") or [],
        })
    before, after = phase_roles(phases)
    summary["roles"] = {"before": before, "after": after}
    if before is not None and after is not None:
        summary["comparison"] = _comparison(phases[before]["throughput"], phases[after]["throughput"])
        changes = {
            k: (phases[before]["config"].get(k), v)
            for k, v in phases[after]["config"].items()
            if phases[before]["config"].get(k) != v
        }
        summary["fix_changes"] = clean(changes)
        prediction = _prediction(run, before, after, phases[after]["throughput"])
        if prediction:
            summary["prediction"] = prediction
    if before is not None:
        summary["story_level"] = _story_level(phases[before])
    # What binds once the fix is in: the *after* phase's own findings, never a later phase's that
    # measured something else (a watched server, a tuner's candidate, the baseline again).
    if after is not None and phases[after].get("findings"):
        summary["next_bottleneck"] = {"phase": after, "findings": phases[after]["findings"][:5]}
    return clean(summary), frames


def summarize(run_dir: str | Path) -> dict:
    """The run's numbers as a JSON-ready dict (what ``summary.json`` holds)."""
    return frames_and_summary(run_dir)[0]


def verdict(summary: Mapping[str, Any]) -> str:
    """One paragraph: the measured gain of the fix per concurrency level, or why there is none."""
    rows = summary.get("comparison") or []
    if not rows:
        return "No before/after comparison yet: run the baseline and the fix phases."
    parts = [f"{fmt(r['concurrency'])}: {fmt(r['before'])} -> {fmt(r['after'])} tok/s "
             f"({r['gain']:.2f}x)" for r in rows if r.get("gain") is not None]
    gains = [r["gain"] for r in rows if r.get("gain") is not None]
    better = [r for r in rows if (r.get("gain") or 0) >= 1.1]
    if not better:
        head = "The fix did not raise throughput by 10% or more at any level."
    else:
        head = (f"The fix raised throughput by 10% or more at {len(better)} of {len(rows)} levels, "
                f"most ({max(gains):.2f}x) at {fmt(max(better, key=lambda r: r['gain'])['concurrency'])} "
                "concurrent requests.")
    return head + " Per level: " + "; ".join(parts) + "."

