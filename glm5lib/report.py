"""The run's story in one page: ``report.md`` and ``summary.json`` built from a run folder.

:func:`summarize` reads what the notebooks left in a run folder (each phase's ``sweep.csv``,
``server.log``, ``gpu.csv``, ``config.json``, ``findings.csv``; the run's ``environment.json``,
``diff.csv`` and ``hypothesis.json``; a phase's ``patch.json``) and returns the numbers as a
dict; :func:`write_report` also draws the figures and writes ``report.md`` (the story, with
figures and numbers) and ``summary.json`` (the same numbers, for tests and scripts).

Measurements from glm5lib's stand-in server are never passed off as GPU measurements: when any
phase's server log banner (``ServerLog.standin``), server info or environment snapshot says it
came from the stand-in, the report opens by saying so, with the profile name.

Anything missing (a notebook not run yet, a run that failed half-way) is reported as missing,
not as an error: a partial run still gets a report of what it has.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import plots, rundir
from glm5lib.config import cuda_graphs_off
from glm5lib.engines.vllm_defaults import vllm_automatic
from glm5lib.errors import ConfigError
from glm5lib.levels import per_level
from glm5lib.logs import parse_log

__all__ = [
    "DIFF",
    "HYPOTHESIS",
    "NOTEBOOKS_STATUS",
    "SERVER_INFO",
    "environment_tables",
    "leading_hypothesis",
    "list_phases",
    "render_markdown",
    "summarize",
    "verdict",
    "write_report",
]

log = logging.getLogger(__name__)

#: Files of the run folder that the workbook's notebooks write beside rundir's.
DIFF = rundir.DIFF  # run root: diagnose.diff_configs(baseline, reference)
HYPOTHESIS = rundir.HYPOTHESIS  # run root: the leading hypothesis and how to test it
SERVER_INFO = rundir.SERVER_INFO  # per phase: the server's /get_server_info (secrets masked)
NOTEBOOKS_STATUS = rundir.NOTEBOOKS_STATUS  # run root: which notebooks ran, and how they ended

_PHASE_ORDER = ("baseline", "fix")
_LEVEL_COLUMNS = (
    "concurrency", "completed", "cancelled", "failed", "output_throughput", "total_throughput",
    "request_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms",
    "median_e2e_latency_ms", "client_bound",
)
_CONFIG_FIELDS = (
    "model_path", "tp_size", "max_running_requests", "attention_backend", "disable_cuda_graph",
    "cuda_graph_max_bs", "disable_radix_cache", "moe_runner_backend", "fp4_gemm_runner_backend",
    "enable_flashinfer_allreduce_fusion", "chunked_prefill_size", "mem_fraction_static", "page_size",
    "max_num_seqs", "max_num_batched_tokens", "enforce_eager",
)


# -- reading ----------------------------------------------------------------------------------
def list_phases(run_dir: str | Path) -> list[str]:
    """Phase folders of a run (those with a sweep or a server log), baseline and fix first."""
    run = Path(run_dir)
    found = [
        p.name for p in run.iterdir()
        if p.is_dir() and ((p / rundir.SWEEP).exists() or (p / rundir.SERVER_LOG).exists())
    ] if run.is_dir() else []
    ordered = [p for p in _PHASE_ORDER if p in found]
    return ordered + sorted(p for p in found if p not in _PHASE_ORDER)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None


def _read_csv(path: Path) -> pd.DataFrame | None:
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        return pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None


def _clean(value: Any) -> Any:
    """JSON-safe plain Python values (NaN -> None, numpy -> Python)."""
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, (pd.Timestamp, _dt.datetime)):
        return value.isoformat()
    return value


def _parse_log(path: Path):
    if not path.exists():
        return None
    return parse_log(path)


def _decode_stats(server_log, cap: int | None) -> dict:
    decode = getattr(server_log, "decode", None)
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


def _metrics_note(folder: Path) -> dict:
    """How many ``/metrics`` rows a phase recorded, and a note where it recorded none."""
    path = folder / rundir.METRICS
    rows = 0
    if path.exists():
        with path.open("rb") as fh:
            rows = max(0, sum(1 for _ in fh) - 1)
    if rows:
        return {"rows": rows}
    return {"rows": 0, "note": (
        "no /metrics samples: the server ran without --enable-metrics (or /metrics was not "
        "reachable), so its queue and running-request gauges come from the server log only")}


def _power_per_level(gpu: pd.DataFrame | None, sweep: pd.DataFrame | None) -> pd.DataFrame | None:
    if gpu is None or sweep is None or gpu.empty or sweep.empty:
        return None
    try:
        return per_level(gpu, sweep)
    except Exception as exc:  # a partial gpu.csv must not cost the whole report
        log.warning("power per level could not be computed: %s", exc)
        return None


def _standin_of(server_log, server_info: Any) -> str | None:
    name = getattr(server_log, "standin", None)
    if name:
        return str(name)
    if isinstance(server_info, Mapping) and isinstance(server_info.get("standin"), Mapping):
        return str(server_info["standin"].get("profile") or "unknown profile")
    return None


def _setting(phase: Mapping[str, Any]) -> str:
    """How a phase's server was configured, for the summary: its cap, or the engine command."""
    if phase.get("max_running_requests") is None and phase.get("command"):
        return "command: `" + " ".join(str(a) for a in phase["command"]) + "`"
    automatic = " (automatic)" if phase.get("cap_automatic") else ""
    return f"{phase.get('cap_name') or 'max_running_requests'} = {_fmt(phase.get('max_running_requests'))}{automatic}"


def _phase_summary(run: Path, phase: str) -> tuple[dict, dict]:
    """(summary dict, frames for figures) of one phase."""
    folder = run / phase
    sweep = _read_csv(folder / rundir.SWEEP)
    gpu = _read_csv(folder / rundir.GPU)
    config = _read_json(folder / rundir.CONFIG) or {}
    server_info = _read_json(folder / SERVER_INFO)
    server_log = _parse_log(folder / rundir.SERVER_LOG)
    server_args = dict(getattr(server_log, "server_args", None) or {})
    startup = dict(getattr(server_log, "startup", None) or {})
    merged = {**server_args, **(config if isinstance(config, Mapping) else {})}
    if cuda_graphs_off(merged):  # 0.5.23 says it per phase and logs the deprecated switch as False
        merged["disable_cuda_graph"] = True
    nested = merged.get("server_args")  # a vLLM config keeps its arguments under server_args
    args = {**merged, **(nested if isinstance(nested, Mapping) else {})}
    cap = startup.get("max_running_requests") or args.get("max_running_requests") or args.get("max_num_seqs")
    cap = int(cap) if cap not in (None, "") and not pd.isna(cap) else None
    cap_automatic = None
    if cap is None and "vllm" in (startup.get("engine"), args.get("engine")):
        # vLLM logs only the arguments given: an unset max_num_seqs is what its rule chose
        env = _read_json(folder / rundir.ENVIRONMENT) or _read_json(run / rundir.ENVIRONMENT)
        auto = vllm_automatic("max_num_seqs", args, startup, env if isinstance(env, Mapping) else None)
        if auto is not None and auto.value is not None:
            cap, cap_automatic = auto.value, auto.how

    command = _read_json(folder / rundir.COMMAND) or {}
    summary: dict[str, Any] = {
        "config": {k: merged.get(k) for k in _CONFIG_FIELDS if k in merged},
        "max_running_requests": cap,
        # how an automatic cap was resolved (None when the cap was given or logged)
        "cap_automatic": cap_automatic,
        # the cap under the engine's own name (vLLM: max_num_seqs)
        "cap_name": "max_num_seqs" if ("max_num_seqs" in merged or merged.get("engine") == "vllm")
        else "max_running_requests",
        # a phase launched from an engine's command (BACKEND "command"): the knob is in its argv
        "command": command.get("argv") if isinstance(command, Mapping) else None,
        "standin": _standin_of(server_log, server_info),
        "levels": [],
        "throughput": {},
    }
    frames: dict[str, Any] = {"sweep": sweep, "decode": getattr(server_log, "decode", None), "cap": cap}
    if sweep is not None and "concurrency" in sweep.columns:
        sweep = sweep.sort_values("concurrency")
        cols = [c for c in _LEVEL_COLUMNS if c in sweep.columns]
        summary["levels"] = [_clean(row) for row in sweep[cols].to_dict(orient="records")]
        if "output_throughput" in sweep.columns:
            summary["throughput"] = {
                str(int(c)): _clean(t) for c, t in zip(sweep["concurrency"], sweep["output_throughput"], strict=True)
            }
            best = sweep.loc[sweep["output_throughput"].idxmax()] if sweep["output_throughput"].notna().any() else None
            if best is not None:
                summary["peak"] = {"concurrency": int(best["concurrency"]),
                                   "output_throughput": float(best["output_throughput"])}
        if "failed" in sweep.columns:
            summary["failed_requests"] = int(sweep["failed"].fillna(0).sum())
        if "cancelled" in sweep.columns:
            summary["cut_at_deadline"] = int(sweep["cancelled"].fillna(0).sum())
        summary["metrics"] = _metrics_note(folder)
    if server_log is not None:
        summary["decode"] = _decode_stats(server_log, cap)
        errors = getattr(server_log, "errors", None)
        if errors is not None and not errors.empty:
            summary["errors"] = _clean(errors["kind"].value_counts().to_dict())
    power = _power_per_level(gpu, sweep)
    frames["power"] = power
    if power is not None and not power.empty:
        keep = [c for c in ("concurrency", "mean_power_w", "peak_power_w", "power_limit_w",
                            "mean_gpu_util", "joules_per_token") if c in power.columns]
        summary["power"] = [_clean(r) for r in power[keep].to_dict(orient="records")]
    findings = _read_csv(folder / rundir.FINDINGS)
    if findings is not None:
        keep = [c for c in ("finding", "evidence", "suggestion", "confidence", "rule") if c in findings.columns]
        summary["findings"] = [_clean(r) for r in findings[keep].to_dict(orient="records")]
    patch = _read_json(folder / rundir.PATCH_RECORD)
    if patch:
        summary["patch"] = _clean(patch)
    return summary, frames


def _comparison(before: dict, after: dict) -> list[dict]:
    rows = []
    for level in sorted(set(before) & set(after), key=int):
        b, a = before[level], after[level]
        gain = a / b if b and a is not None else None
        rows.append({"concurrency": int(level), "before": b, "after": a, "gain": gain})
    return rows


def _prediction(run: Path, after: Mapping[str, Any]) -> dict | None:
    """The baseline's predicted effect of its leading remedy beside what the fix measured there."""
    findings = _read_csv(run / "baseline" / rundir.FINDINGS)
    needed = {"predicted_concurrency", "predicted_throughput", "predicted_low", "predicted_high"}
    if findings is None or findings.empty or not needed <= set(findings.columns):
        return None
    rows = findings.dropna(subset=["predicted_concurrency", "predicted_throughput"])
    if rows.empty:
        return None
    top = rows.iloc[0]
    concurrency = int(top["predicted_concurrency"])
    measured = after.get(str(concurrency))
    low, high = float(top["predicted_low"]), float(top["predicted_high"])
    return _clean({
        "rule": top.get("rule"),
        "concurrency": concurrency,
        "predicted": float(top["predicted_throughput"]),
        "low": low,
        "high": high,
        "before": top.get("measured_throughput"),
        "after": measured,
        "within": None if measured is None else bool(low <= measured <= high),
        "text": top.get("prediction"),
    })


def _leading_cause(run: Path) -> dict | None:
    hypothesis = _read_json(run / HYPOTHESIS)
    if isinstance(hypothesis, Mapping) and hypothesis.get("field"):
        return _clean(dict(hypothesis))
    diff = _read_csv(run / DIFF)
    if diff is None or diff.empty or "field" not in diff.columns:
        return None
    top = diff.sort_values("rank").iloc[0] if "rank" in diff.columns else diff.iloc[0]
    keep = [c for c in ("field", "current", "reference", "impact", "rank", "rationale") if c in diff.columns]
    return _clean({c: top[c] for c in keep})


def _frames_and_summary(run_dir: str | Path) -> tuple[dict, dict]:
    run = Path(run_dir)
    if not run.is_dir():
        raise ConfigError(f"run folder {run} does not exist", field="run_dir")
    phases: dict[str, dict] = {}
    frames: dict[str, dict] = {}
    for phase in list_phases(run):
        phases[phase], frames[phase] = _phase_summary(run, phase)
    environment = _read_json(run / rundir.ENVIRONMENT) or {}
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
        "notebooks": _read_json(run / NOTEBOOKS_STATUS) or [],
    }
    if isinstance(environment, Mapping) and environment:
        gpus = environment.get("gpus") or []
        summary["environment"] = _clean({
            "source": environment.get("source"),
            "gpu_count": len(gpus),
            "gpu_names": sorted({g.get("name") for g in gpus if g.get("name")}),
            "power_limit_w": max((g.get("power_limit_w") or 0 for g in gpus), default=None),
            "driver_version": environment.get("driver_version"),
            "packages": environment.get("packages"),
            "warnings": environment.get("warnings") or [],
        })
    if "baseline" in phases and "fix" in phases:
        summary["comparison"] = _comparison(phases["baseline"]["throughput"], phases["fix"]["throughput"])
        changes = {
            k: (phases["baseline"]["config"].get(k), v)
            for k, v in phases["fix"]["config"].items()
            if phases["baseline"]["config"].get(k) != v
        }
        summary["fix_changes"] = _clean(changes)
        prediction = _prediction(run, phases["fix"]["throughput"])
        if prediction:
            summary["prediction"] = prediction
    last = next((p for p in reversed(list(phases)) if phases[p].get("findings")), None)
    if last is not None:
        summary["next_bottleneck"] = {"phase": last, "findings": phases[last]["findings"][:5]}
    return _clean(summary), frames


def _prediction_lines(prediction: Mapping[str, Any] | None, changes: Mapping[str, Any]) -> list[str]:
    if not prediction:
        return []
    c = prediction["concurrency"]
    line = (f"Predicted beside measured: the baseline's capacity model ({prediction.get('rule')}) predicted "
            f"{prediction['predicted']:,.0f} tok/s ({prediction['low']:,.0f}-{prediction['high']:,.0f}) at {c:,} "
            "concurrent requests once its remedy was applied")
    after = prediction.get("after")
    if after is None:
        line += f"; the fix phase did not measure {c:,} concurrent requests."
    else:
        verdict = "within" if prediction.get("within") else ("above" if after > prediction["high"] else "below")
        line += f"; the fix measured {after:,.0f} tok/s there, {verdict} the predicted band."
        if len(changes) > 1 and not prediction.get("within"):
            line += (" The fix changed more than the remedy (" + ", ".join(f"`{k}`" for k in changes)
                     + "), which the model does not see.")
    return [line, ""]


def summarize(run_dir: str | Path) -> dict:
    """The run's numbers as a JSON-ready dict (what ``summary.json`` holds)."""
    return _frames_and_summary(run_dir)[0]


def leading_hypothesis(diff: pd.DataFrame, findings: pd.DataFrame | None = None) -> dict:
    """The configuration difference to test first: the best-ranked one the evidence supports.

    Walks the findings most important first and returns the best-ranked row of ``diff``
    (:func:`glm5lib.diagnose.diff_configs`) whose field or flag the finding names, with the
    finding's evidence and suggestion; with no such finding, the top-ranked difference, marked
    as not yet backed by evidence.
    """
    if diff is None or diff.empty or "field" not in diff.columns:
        raise ConfigError("the config diff is empty: nothing differs from the reference", field="diff")
    ranked = diff.sort_values("rank", kind="stable") if "rank" in diff.columns else diff
    names = {
        row["field"]: [str(row["field"])] + ([str(row["flag"])] if "flag" in ranked.columns and pd.notna(row["flag"]) else [])
        for _, row in ranked.iterrows()
    }
    chosen, backing = None, None
    if findings is not None and not findings.empty:
        for _, finding in findings.iterrows():
            text = " ".join(str(finding.get(c, "")) for c in ("finding", "evidence", "suggestion"))
            text_norm = text.replace("-", "_")
            for _, row in ranked.iterrows():
                if any(n in text or n.lstrip("-").replace("-", "_") in text_norm for n in names[row["field"]]):
                    chosen, backing = row, finding
                    break
            if chosen is not None:
                break
    if chosen is None:
        chosen = ranked.iloc[0]
    out = {k: chosen[k] for k in ("field", "current", "reference", "impact", "rank", "rationale", "flag")
           if k in ranked.columns}
    if backing is not None:
        out.update(evidence=backing.get("evidence"), test=backing.get("suggestion"),
                   finding=backing.get("finding"), confidence=backing.get("confidence"), supported=True)
    else:
        out.update(evidence="no finding in the baseline's evidence names this field yet", supported=False,
                   test=f"relaunch with {out.get('flag') or out['field']} set as in the reference and rerun the sweep")
    return _clean(out)


def verdict(summary: Mapping[str, Any]) -> str:
    """One paragraph: the measured gain of the fix per concurrency level, or why there is none."""
    rows = summary.get("comparison") or []
    if not rows:
        return "No before/after comparison yet: run the baseline and the fix phases."
    parts = [f"{_fmt(r['concurrency'])}: {_fmt(r['before'])} -> {_fmt(r['after'])} tok/s "
             f"({r['gain']:.2f}x)" for r in rows if r.get("gain") is not None]
    gains = [r["gain"] for r in rows if r.get("gain") is not None]
    better = [r for r in rows if (r.get("gain") or 0) >= 1.1]
    if not better:
        head = "The fix did not raise throughput by 10% or more at any level."
    else:
        head = (f"The fix raised throughput by 10% or more at {len(better)} of {len(rows)} levels, "
                f"most ({max(gains):.2f}x) at {_fmt(max(better, key=lambda r: r['gain'])['concurrency'])} "
                "concurrent requests.")
    return head + " Per level: " + "; ".join(parts) + "."


# -- the environment, as tables ----------------------------------------------------------------
_GIB = 1024**3


def _pair(now: Any, top: Any) -> str:
    """``'4 of 5'``: a PCIe link's current value against its maximum (``'5'`` when equal)."""
    if _missing(now) and _missing(top):
        return "n/a"
    if _missing(top) or now == top:
        return _fmt(now)
    return f"{_fmt(now)} of {_fmt(top)}"


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _yes_no(value: Any) -> str:
    return "n/a" if _missing(value) else ("on" if value else "off")


def environment_tables(env: Mapping[str, Any]) -> dict[str, pd.DataFrame]:
    """An environment snapshot (:func:`glm5lib.telemetry.environment`) as tidy tables in human units.

    ``host``: one row per fact (source, host, driver, CUDA, Python, CPUs, memory in GiB, GPU
    count, packages found); ``gpus``: one row per GPU (memory in GiB, power limit in W, clocks in
    MHz, PCIe generation and width as "current of maximum" where they differ); ``packages``: each
    package's version or "not installed".
    """
    info = env.get("host_info") or {}
    packages = dict(env.get("packages") or {})
    found = ", ".join(f"{k} {v}" for k, v in packages.items() if v)
    missing = [k for k, v in packages.items() if not v]
    gpus = list(env.get("gpus") or [])
    memory = info.get("memory_total_bytes")
    source = str(env.get("source") or "n/a") + (" (stand-in: simulated GPUs)" if env.get("standin") else "")
    host = [
        ("source", source),
        ("host", info.get("hostname") or env.get("host")),
        ("OS", info.get("os")),
        ("driver", env.get("driver_version")),
        ("CUDA", env.get("cuda_version")),
        ("Python", info.get("python")),
        ("CPUs", info.get("cpu_count")),
        ("host memory", None if _missing(memory) else f"{memory / _GIB:,.1f} GiB"),
        ("GPUs", len(gpus)),
        ("packages", (found + (f" (not installed: {', '.join(missing)})" if missing else "")) if found
         else f"none installed ({', '.join(missing)})" if missing else "none listed"),
    ]
    if env.get("reason"):
        host.insert(1, ("why", env["reason"]))
    host_frame = pd.DataFrame([(k, "n/a" if _missing(v) else str(v)) for k, v in host],
                              columns=["item", "value"]).set_index("item")
    rows = []
    for g in gpus:
        mem = g.get("memory_total_bytes")
        rows.append({
            "GPU": f"GPU{g.get('index')}",
            "name": g.get("name"),
            "compute capability": g.get("compute_capability"),
            "memory (GiB)": None if _missing(mem) else round(mem / _GIB, 1),
            "power limit (W)": None if _missing(g.get("power_limit_w")) else round(g["power_limit_w"]),
            "max SM clock (MHz)": g.get("sm_clock_max_mhz"),
            "PCIe gen": _pair(g.get("pcie_gen_current"), g.get("pcie_gen_max")),
            "PCIe width": _pair(g.get("pcie_width_current"), g.get("pcie_width_max")),
            "persistence": _yes_no(g.get("persistence_mode")),
            "MIG": _yes_no(g.get("mig_mode")),
        })
    gpu_frame = pd.DataFrame(rows, columns=[
        "GPU", "name", "compute capability", "memory (GiB)", "power limit (W)", "max SM clock (MHz)",
        "PCIe gen", "PCIe width", "persistence", "MIG",
    ]).set_index("GPU")
    package_frame = pd.DataFrame(
        [(k, v or "not installed") for k, v in packages.items()], columns=["package", "version"]
    ).set_index("package")
    return {"host": host_frame, "gpus": gpu_frame, "packages": package_frame}


# -- figures ----------------------------------------------------------------------------------
def _notebook_figure(run: Path, phases: list[str], name: str) -> Path | None:
    """The figure a notebook already drew of every phase (``figures/<last phase>-<name>.png``).

    Notebook 2 draws the baseline, notebook 4 the baseline and the fix together, so the last
    phase's figure of a baseline/fix run is the report's figure: it is referenced, not drawn
    again under a second name. It must be newer than every phase's sweep and server log.
    """
    if not phases or not set(phases) <= set(_PHASE_ORDER) or phases[0] != _PHASE_ORDER[0]:
        return None
    path = run / rundir.FIGURES / f"{phases[-1]}-{name}.png"
    if not path.is_file():
        return None
    drawn_at = path.stat().st_mtime
    for phase in phases:
        for source in (rundir.SWEEP, rundir.SERVER_LOG, rundir.GPU):
            data = run / phase / source
            if data.exists() and data.stat().st_mtime > drawn_at:
                return None
    return path


def _figures(run: Path, frames: dict[str, dict]) -> dict[str, str]:
    made: dict[str, str] = {}
    sweeps = {p: f["sweep"] for p, f in frames.items()
              if f.get("sweep") is not None and "output_throughput" in f["sweep"].columns}
    attempts = []
    if sweeps:
        attempts.append(("throughput", lambda: plots.throughput_vs_concurrency(sweeps)))
        if all({"median_ttft_ms", "median_tpot_ms"} <= set(s.columns) for s in sweeps.values()):
            attempts.append(("latency", lambda: plots.latency_vs_concurrency(sweeps)))
    decode = {p: f["decode"] for p, f in frames.items()
              if f.get("decode") is not None and not f["decode"].empty}
    if decode:
        caps = {p: frames[p]["cap"] for p in decode}
        attempts.append(("running-queued", lambda: plots.running_queued_over_time(decode, max_running_requests=caps)))
    power = {p: f["power"] for p, f in frames.items() if f.get("power") is not None and not f["power"].empty}
    if power:
        attempts.append(("power", lambda: plots.power_vs_tdp(power)))
    for name, draw in attempts:
        drawn = _notebook_figure(run, list(frames), name)
        if drawn is not None:
            made[name] = drawn.relative_to(run).as_posix()
            continue
        try:
            path = plots.save_figure(draw(), run, name)
        except Exception as exc:  # one bad figure must not cost the whole report
            log.warning("figure %s not drawn: %s", name, exc)
            continue
        made[name] = path.relative_to(run).as_posix()
    return made


# -- markdown ---------------------------------------------------------------------------------
def _fmt(value: Any, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}"
    return str(value)


def _table(rows: list[dict], columns: list[tuple[str, str, int]]) -> list[str]:
    present = [(k, h, d) for k, h, d in columns if any(k in r for r in rows)]
    out = ["| " + " | ".join(h for _, h, _ in present) + " |",
           "| " + " | ".join("---:" if d >= 0 else "---" for _, _, d in present) + " |"]
    for r in rows:
        out.append("| " + " | ".join(_fmt(r.get(k), max(d, 0)) for k, _, d in present) + " |")
    return out


def _value_at(summary: dict, phase: str, level: int) -> float | None:
    return (summary.get("throughput", {}).get(phase) or {}).get(str(level))


def render_markdown(summary: dict, figures: Mapping[str, str] | None = None) -> str:
    """``report.md``'s text from a :func:`summarize` dict and the figures' relative paths."""
    figures = dict(figures or {})
    phases = summary.get("phases", {})
    lines = [f"# Throughput investigation: run {summary.get('run_id', '')}", ""]
    standin = summary.get("standin", {})
    if standin.get("used"):
        names = sorted(set(standin.get("profiles", {}).values())) or ["unknown profile"]
        lines += [
            "> **These measurements come from glm5lib's stand-in server, not from SGLang on GPUs.** "
            f"Its timings and GPU telemetry come from a model (profile {', '.join(repr(n) for n in names)}) "
            "calibrated to the published figures of the investigation; they show the method, "
            "not your hardware. Run the workbook with `BACKEND='sglang'` (or an http URL) on a GPU "
            "host for real measurements.",
            "",
        ]
    else:
        lines += ["Measured on a real server (no stand-in banner in the server logs).", ""]

    # the story in a few bullets
    lines += ["## Summary", ""]
    base, fix = phases.get("baseline"), phases.get("fix")
    if base and base.get("peak"):
        at256 = _value_at(summary, "baseline", 256)
        extra = (f"; {_fmt(at256)} tok/s at 256 concurrent requests"
                 if at256 is not None and base["peak"]["concurrency"] != 256 else "")
        lines.append(
            f"- **Baseline**: peak {_fmt(base['peak']['output_throughput'])} tok/s at "
            f"{_fmt(base['peak']['concurrency'])} concurrent requests{extra} "
            f"({_setting(base)})."
        )
    cause = summary.get("leading_cause")
    if cause:
        lines.append(
            f"- **Leading cause**: `{cause.get('field')}` (baseline {_fmt(cause.get('current'))}, "
            f"reference {_fmt(cause.get('reference'))})"
            + (f": {cause['rationale']}" if cause.get("rationale") else "") + "."
        )
    if fix and fix.get("peak"):
        lines.append(
            f"- **Fix**: peak {_fmt(fix['peak']['output_throughput'])} tok/s at "
            f"{_fmt(fix['peak']['concurrency'])} concurrent requests "
            f"({_setting(fix)})."
        )
    comparison = summary.get("comparison") or []
    if comparison:
        best = max((r for r in comparison if r.get("gain")), key=lambda r: r["gain"], default=None)
        if best:
            lines.append(f"- **Gain**: up to {best['gain']:.2f}x at {_fmt(best['concurrency'])} concurrent requests.")
    nb = summary.get("next_bottleneck")
    if nb and nb.get("findings"):
        lines.append(f"- **Next**: {nb['findings'][0].get('finding')} ({nb['phase']} phase).")
    failed = [n for n in summary.get("notebooks", []) if n.get("status") == "failed"]
    for n in failed:
        lines.append(f"- **Incomplete run**: {n.get('name')} failed: {n.get('error', '')}")
    if lines[-1] == "":
        lines.append("- Nothing measured yet in this run folder.")
    lines.append("")

    env = summary.get("environment")
    if env:
        lines += ["## Environment", ""]
        lines.append(
            f"{_fmt(env.get('gpu_count'))} GPU(s): {', '.join(env.get('gpu_names') or ['n/a'])}; "
            f"power limit {_fmt(env.get('power_limit_w'))} W; driver {_fmt(env.get('driver_version'))}; "
            f"source: {_fmt(env.get('source'))}."
        )
        for w in env.get("warnings") or []:
            lines.append(f"- Warning: {w}")
        lines.append("")

    for phase, data in phases.items():
        lines += [f"## Phase `{phase}`", ""]
        if data.get("standin"):
            lines.append(f"Server: glm5lib stand-in, profile `{data['standin']}`.")
        if data.get("config"):
            lines.append("Configuration: " + ", ".join(f"`{k}={v!r}`" for k, v in data["config"].items()) + ".")
        lines.append("")
        if data.get("levels"):
            lines += _table(data["levels"], [
                ("concurrency", "concurrency", 0), ("completed", "completed", 0),
                ("cancelled", "cut at deadline", 0), ("failed", "failed", 0),
                ("output_throughput", "output tok/s", 0), ("median_ttft_ms", "median TTFT ms", 0),
                ("p99_ttft_ms", "p99 TTFT ms", 0), ("median_tpot_ms", "median TPOT ms", 1),
            ])
            lines.append("")
            if data.get("cut_at_deadline"):
                lines += [
                    f"Requests cut at deadline: {data['cut_at_deadline']:,} (still streaming when their "
                    "level's time was up). Their TTFT counts, and their TPOT up to the last token "
                    "received; end-to-end latency needs a finished request.", ""]
        note = (data.get("metrics") or {}).get("note")
        if note:
            lines += [f"Note: {note}.", ""]
        dec = data.get("decode") or {}
        if dec.get("decode_lines"):
            text = (f"Server log: {dec['decode_lines']:,} decode lines; running requests peaked at "
                    f"{_fmt(dec.get('max_running_req'))}, queued at {_fmt(dec.get('max_queue_req'))} "
                    f"(mean {_fmt(dec.get('mean_queue_req'), 1)})")
            cap = data.get("max_running_requests")
            share = dec.get("pinned_at_cap_share")
            if share:
                text += (f"; running pinned at the cap of {_fmt(cap)} with a "
                         f"queue on {share:.0%} of decode lines")
            elif cap and (dec.get("max_running_req") or 0) < cap:
                text += f"; the cap of {_fmt(cap)} running requests was never reached"
            elif cap:
                text += f"; running reached the cap of {_fmt(cap)}, never with a queue"
            lines += [text + ".", ""]
        if data.get("power"):
            lines += _table(data["power"], [
                ("concurrency", "concurrency", 0), ("mean_power_w", "mean W/GPU", 0),
                ("peak_power_w", "peak W/GPU", 0), ("power_limit_w", "limit W", 0),
                ("mean_gpu_util", "GPU util %", 0), ("joules_per_token", "J/token", 2),
            ])
            lines.append("")
        if data.get("patch"):
            p = data["patch"]
            verb = {"modelled": "modelled by the stand-in (not applied)", "reverted": "applied, then reverted",
                    "applied": "applied (not yet reverted)"}.get(p.get("status"), p.get("status"))
            lines += [f"Source patch `{p.get('name')}` to {p.get('package')} "
                      f"{p.get('package_version') or ''}: {verb}; files: {', '.join(p.get('files', []))}.", ""]
        if data.get("errors"):
            lines += ["Server errors: " + ", ".join(f"{k} x{v}" for k, v in data["errors"].items()) + ".", ""]

    if cause:
        lines += ["## Diagnosis", ""]
        lines.append(f"Leading hypothesis: `{cause.get('field')}`.")
        for key in ("evidence", "test"):
            if cause.get(key):
                lines.append(f"- {key.capitalize()}: {cause[key]}")
        lines.append("")

    if comparison:
        lines += ["## Before and after", "", verdict(summary), ""]
        changes = summary.get("fix_changes") or {}
        if changes:
            lines.append("Server arguments that differ, as each server resolved them: "
                         + ", ".join(f"`{k}` {v[0]!r} -> {v[1]!r}" for k, v in changes.items()) + ".")
            lines.append("")
        lines += _table(comparison, [("concurrency", "concurrency", 0), ("before", "baseline tok/s", 0),
                                     ("after", "fix tok/s", 0), ("gain", "gain x", 2)])
        lines.append("")
        lines += _prediction_lines(summary.get("prediction"), changes)

    if nb and nb.get("findings"):
        lines += ["## Next bottleneck", ""]
        for f in nb["findings"]:
            lines.append(f"- **{f.get('finding')}** ({f.get('confidence', 'n/a')}): {f.get('evidence', '')}"
                         + (f" Suggestion: {f['suggestion']}" if f.get("suggestion") else ""))
        lines.append("")

    if figures:
        lines += ["## Figures", ""]
        titles = {"throughput": "Throughput vs concurrency", "latency": "Latency vs concurrency",
                  "running-queued": "Running and queued requests (server log)",
                  "power": "GPU power vs power limit"}
        for name, rel in figures.items():
            lines += [f"![{titles.get(name, name)}]({rel})", ""]
    lines += ["---", f"Numbers: `{rundir.SUMMARY}`. Generated {summary.get('generated_at', '')}.", ""]
    return "\n".join(lines)


def write_report(run_dir: str | Path) -> Path:
    """Draw the figures, write ``summary.json`` and ``report.md``; return the report's path."""
    run = Path(run_dir)
    summary, frames = _frames_and_summary(run)
    figures = _figures(run, frames)
    summary["figures"] = figures
    (run / rundir.SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    path = run / rundir.REPORT
    path.write_text(render_markdown(summary, figures))
    log.info("report written to %s", path)
    return path
