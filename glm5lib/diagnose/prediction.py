"""Predict, then prove: the performance model's forecast of a change beside what the change measured.

The workbook states the hypothesis's forecast before anything changes (notebook 3,
:func:`forecast_hypothesis`, ``forecast.csv`` in the run folder), writes the forecast of the
fix beside the fix's own measurement (notebook 4, :func:`record_prediction`, the fix phase's
``prediction.csv``), and refits the model on the fix to forecast the next levels, saying how much
the fix's own data moved it (notebook 5, :func:`refit_shift`). :func:`section_markdown` is the
report's section of forecast against measurement. Each reads a phase's measurements once, as its
:class:`~glm5lib.diagnose.evidence.Evidence`.
"""

from __future__ import annotations

import ast
import logging
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import rundir
from glm5lib.diagnose.evidence import Evidence, load_evidence
from glm5lib.diagnose.model import Forecast, PerfModel
from glm5lib.diagnose.model.levels import as_float
from glm5lib.errors import ConfigError, DiagnosisError

__all__ = [
    "PREDICTION_COLUMNS",
    "forecast_frame",
    "forecast_hypothesis",
    "hypothesis_changes",
    "launch_drift",
    "record_prediction",
    "refit_shift",
    "section_markdown",
    "unseen_fields",
    "write_forecast",
    "written_changes",
]

log = logging.getLogger(__name__)

PREDICTION_COLUMNS = [
    "concurrency",
    "predicted",
    "low",
    "high",
    "given",
    "measured",
    "error",
    "inside_band",
    "held",
    "running",
    "binding_limit",
    "extrapolated",
    "needs",
    "ttft_predicted_ms",
    "ttft_measured_ms",
    "tpot_predicted_ms",
    "tpot_measured_ms",
    "unseen_changes",
    "notes",
    "changes",
    "drift",
    "error_net_of_drift",
]


def forecast_frame(forecasts: Sequence[Forecast], measured: str | Path | Evidence | None = None) -> pd.DataFrame:
    """One row per forecast (the :meth:`Forecast.to_dict` fields; lists joined by '; ').

    ``measured``: the phase the model was fitted on (its folder or evidence); where it measured a
    forecast's level, ``measured_tok_s`` and ``measured_running`` (the median batch the level ran,
    from the scheduler's figures) go beside the forecast: a level whose batch was still filling
    when it ended measured less than the forecast for its full batch, and says so."""
    rows = []
    for f in forecasts:
        d = f.to_dict()
        for key in ("unseen_changes", "notes", "sources"):
            d[key] = "; ".join(d[key])
        rows.append(d)
    frame = pd.DataFrame(rows)
    if measured is None or frame.empty:
        return frame
    ev = measured if isinstance(measured, Evidence) else load_evidence(Path(measured))
    if ev.sweep is None or ev.sweep.empty or "output_throughput" not in ev.sweep:
        return frame
    levels = ev.sweep[["concurrency", "output_throughput"]].rename(columns={"output_throughput": "measured_tok_s"})
    table = ev.level_table()[["concurrency", "running_median"]].rename(columns={"running_median": "measured_running"})
    levels = levels.merge(table, on="concurrency", how="left")
    levels["concurrency"] = levels["concurrency"].astype(int)
    return frame.merge(levels, on="concurrency", how="left")


def hypothesis_changes(hypothesis: Mapping[str, Any]) -> dict[str, Any]:
    """The change a hypothesis tests: the one its finding proposes and forecast (``changes``: the cap
    raised to what the load and the KV pool support, the graph ceiling with it), else its field set
    to the reference's value."""
    field = hypothesis.get("field")
    if not field:
        raise ConfigError("the hypothesis names no field to change", field="hypothesis")
    proposed = hypothesis.get("changes")
    if isinstance(proposed, Mapping) and proposed:
        return dict(proposed)
    return {str(field): hypothesis.get("reference")}


def _sweep_levels(ev: Evidence) -> list[int]:
    """The concurrency levels a phase's sweep measured ([] without a sweep)."""
    s = ev.sweep
    if s is None or s.empty:
        return []
    return sorted({int(c) for c in pd.to_numeric(s.get("concurrency"), errors="coerce").dropna()})


def _phase(folder: Path, partial: bool = False) -> Evidence:
    """A phase folder's evidence, read once for every figure taken from it (the model's fit, the
    levels, the sweep's figures, whether each level held its batch); ConfigError where the folder
    does not exist (as :meth:`PerfModel.fit_phase`). With ``partial``, a table that cannot be read
    is left out with its reason (a measured phase's record keeps what it can)."""
    if not folder.is_dir():
        raise ConfigError(f"phase folder {folder} does not exist", field="phase")
    return load_evidence(folder.parent, phase=folder.name, partial=partial)


def forecast_hypothesis(
    run_dir: str | Path,
    changes: Mapping[str, Any],
    concurrency: Sequence[int] | None = None,
    *,
    phase: str = "baseline",
    write: bool = True,
) -> tuple[PerfModel, pd.DataFrame]:
    """The model fitted on ``phase`` and its forecast of ``changes`` (default levels: the phase's
    own), written to ``forecast.csv`` in the run folder unless ``write`` is False."""
    run = Path(run_dir)
    ev = _phase(run / phase)
    model = PerfModel.from_evidence(ev)
    levels = list(concurrency) if concurrency else _sweep_levels(ev)
    frame = forecast_frame(model.forecast(changes, levels))
    frame["changes"] = repr(dict(changes))
    if write:
        frame.to_csv(run / rundir.FORECAST_CSV, index=False)
    return model, frame


def write_forecast(run_dir: str | Path, forecasts: Sequence[Forecast], changes: Mapping[str, Any]) -> pd.DataFrame:
    """``forecasts`` of ``changes`` as the run's ``forecast.csv`` (the hypothesis's, stated before
    anything changes); the frame written."""
    frame = forecast_frame(forecasts)
    frame["changes"] = repr(dict(changes))
    frame.to_csv(Path(run_dir) / rundir.FORECAST_CSV, index=False)
    return frame


def record_prediction(
    run_dir: str | Path,
    changes: Mapping[str, Any],
    *,
    baseline: str = "baseline",
    phase: str = "fix",
    write: bool = True,
) -> pd.DataFrame:
    """The baseline model's forecast of ``changes`` at each level the fix measured, beside the
    measurement: ``PREDICTION_COLUMNS``, written to the fix phase's ``prediction.csv``."""
    run = Path(run_dir)
    fix = run / phase
    if not (fix / rundir.SWEEP).is_file():
        raise DiagnosisError(f"{fix} has no {rundir.SWEEP}: measure the fix before comparing")
    # the measured phase is read leniently: a table it cannot read (a requests.jsonl cut short) costs
    # only the figure taken from it, not the record of what was measured
    after = _phase(fix, partial=True)
    sweep = after.sweep
    if sweep is None or sweep.empty:
        raise DiagnosisError(f"{fix / rundir.SWEEP} could not be read: {after.skipped or 'it has no levels'}")
    levels = _sweep_levels(after)
    try:
        before = _phase(run / baseline)
        model: PerfModel | None = PerfModel.from_evidence(before)
    except DiagnosisError as exc:  # no forecast: the measurement is still recorded, with why
        model, why = None, str(exc)
    drift, shared = launch_drift(before, after, model, changes) if model is not None else (None, [])
    held = _held_levels(after)
    rows = []
    for f in model.forecast(changes, levels) if model is not None else []:
        at = sweep[pd.to_numeric(sweep["concurrency"], errors="coerce") == f.concurrency]
        measured = as_float(at["output_throughput"].iloc[0]) if len(at) and "output_throughput" in at else None
        ttft = as_float(at["mean_ttft_ms"].iloc[0]) if len(at) and "mean_ttft_ms" in at else None
        tpot = as_float(at["mean_tpot_ms"].iloc[0]) if len(at) and "mean_tpot_ms" in at else None
        rows.append({
            "concurrency": f.concurrency,
            "predicted": f.predicted_tok_s,
            "low": f.low_tok_s,
            "high": f.high_tok_s,
            "given": f.given,
            "measured": measured,
            "error": None if not measured else (f.predicted_tok_s - measured) / measured,
            "inside_band": None if measured is None else bool(f.low_tok_s <= measured <= f.high_tok_s),
            "held": held.get(f.concurrency),
            "running": f.running,
            "binding_limit": f.binding_limit,
            "extrapolated": f.extrapolated,
            "needs": f.needs,
            "ttft_predicted_ms": f.ttft_ms,
            "ttft_measured_ms": ttft,
            "tpot_predicted_ms": f.tpot_ms,
            "tpot_measured_ms": tpot,
            "unseen_changes": "; ".join(f.unseen_changes),
            "notes": "; ".join(f.notes),
            "changes": repr(dict(changes)),
            "drift": drift,
            "error_net_of_drift": None if not measured or drift is None
            else (f.predicted_tok_s * drift - measured) / measured,
        })
    if model is None:
        for c in levels:
            at = sweep[pd.to_numeric(sweep["concurrency"], errors="coerce") == c]
            rows.append({"concurrency": c, "measured": as_float(at["output_throughput"].iloc[0]) if len(at) else None,
                         "unseen_changes": f"no forecast: {why}", "changes": repr(dict(changes))})
    frame = pd.DataFrame(rows, columns=PREDICTION_COLUMNS)
    frame.attrs["model"] = model.describe() if model is not None else f"no forecast: {why}"
    frame.attrs["drift_levels"] = shared
    if write:
        frame.to_csv(fix / rundir.PREDICTION_CSV, index=False)
    return frame


def _held_levels(ev: Evidence) -> dict[int, bool | None]:
    """Whether each level of a phase held the batch its load and cap allow (the evidence's judgement)."""
    try:
        table = ev.level_table()
    except (DiagnosisError, ConfigError, OSError, ValueError, KeyError) as exc:
        log.info("no level table for %s: %s", ev.source, exc)
        return {}
    out: dict[int, bool | None] = {}
    for r in table.itertuples():
        v = r.batch_held
        out[int(r.concurrency)] = None if v is None or (isinstance(v, float) and math.isnan(v)) else bool(v)
    return out


def launch_drift(
    baseline: Evidence, fix: Evidence, model: PerfModel, changes: Mapping[str, Any]
) -> tuple[float | None, list[int]]:
    """How much faster (above 1) or slower the fix's launch ran than the baseline's where the
    change cannot have mattered: the median ratio of their measured throughputs at the levels
    both measured whose batch and step the change leaves alone (the baseline model says which;
    none where a change is one the model cannot see). A forecast crosses two launches; on a shared or throttled machine the same level
    moves between launches (real vLLM on two CPU cores: 0.76-0.95x at every level of a second
    launch of one configuration), and that movement is not the model's error. None with no
    such level. ``baseline`` and ``fix``: the two phases' evidence (their sweeps)."""
    base, after = baseline.sweep, fix.sweep
    if base is None or after is None or "concurrency" not in base or "concurrency" not in after:
        return None, []
    before_f = {f.concurrency: f for f in model.forecast({}, _sweep_levels(baseline) or [1])}
    ratios, shared = [], []
    for c, f in sorted(before_f.items()):
        a = after[pd.to_numeric(after["concurrency"], errors="coerce") == c]
        b = base[pd.to_numeric(base["concurrency"], errors="coerce") == c]
        if a.empty or b.empty:
            continue
        [g] = model.forecast(changes, [c])
        if g.unseen_changes:
            return None, []  # a change the model cannot see may move any level: none is a control
        if abs(g.running - f.running) > 0.01 * max(f.running, 1.0) or \
                abs(g.predicted_tok_s - f.predicted_tok_s) > 0.01 * f.predicted_tok_s:
            continue  # the change moves this level's batch or step: not a control
        ma, mb = as_float(a["output_throughput"].iloc[0]), as_float(b["output_throughput"].iloc[0])
        if ma and mb:
            ratios.append(ma / mb)
            shared.append(int(c))
    if not ratios:
        return None, []
    return float(pd.Series(ratios).median()), shared


def refit_shift(
    run_dir: str | Path,
    concurrency: Sequence[int],
    *,
    baseline: str = "baseline",
    phase: str = "fix",
) -> pd.DataFrame:
    """The model refitted on the fix phase forecasts ``concurrency`` (no further change), beside
    what the baseline's model forecast there for the fix: ``moved`` is how much the fix's own
    data moved the forecast (relative)."""
    run = Path(run_dir)
    refit = PerfModel.fit_phase(run / phase)
    now = refit.forecast({}, list(concurrency))
    before: list[Forecast | None] = [None] * len(now)
    pred = run / phase / rundir.PREDICTION_CSV
    if pred.is_file():
        try:
            changes = _changes_of(pd.read_csv(pred))
            base = PerfModel.fit_phase(run / baseline)
            # the baseline model, told the fix's changes, at the same levels
            before = list(base.forecast(changes, list(concurrency)))
        except (DiagnosisError, ConfigError, ValueError, SyntaxError) as exc:
            log.info("no baseline forecast to compare the refit with: %s", exc)
    rows = []
    for f, b in zip(now, before, strict=True):
        rows.append({
            "concurrency": f.concurrency,
            "predicted": f.predicted_tok_s,
            "low": f.low_tok_s,
            "high": f.high_tok_s,
            "running": f.running,
            "binding_limit": f.binding_limit,
            "extrapolated": f.extrapolated,
            "baseline_model": None if b is None else b.predicted_tok_s,
            "moved": None if b is None else (f.predicted_tok_s - b.predicted_tok_s) / b.predicted_tok_s,
        })
    frame = pd.DataFrame(rows)
    frame.attrs["model"] = refit.describe()
    return frame


def _changes_of(frame: pd.DataFrame) -> dict[str, Any]:
    if "changes" not in frame or frame.empty:
        return {}
    return written_changes(frame["changes"].iloc[0])


def written_changes(cell: Any) -> dict[str, Any]:
    """A ``prediction.csv`` ``changes`` cell (the dict's repr it was written as) read back; {} where
    empty; a ValueError where it is not a dict's repr."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)) or not str(cell).strip():
        return {}
    try:
        value = ast.literal_eval(str(cell))
    except SyntaxError as exc:
        raise ValueError(f"changes {str(cell)[:80]!r} is not a dict: {exc}") from None
    return dict(value) if isinstance(value, Mapping) else {}


def unseen_fields(cell: Any) -> list[str]:
    """The fields a ``prediction.csv`` ``unseen_changes`` cell names (each note written as
    ``field=value: why``, joined by '; ')."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):
        return []
    return [m.group(1) for m in re.finditer(r"(?:^|; )([A-Za-z_][\w-]*)=", str(cell))]



def _given(row: Any) -> bool:
    v = row.get("given")
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return True  # a file written before forecasts said whether they were given
    return str(v).strip().lower() in ("true", "1") if isinstance(v, str) else bool(v)


def _n(v: Any) -> str:
    x = as_float(v)
    return "-" if x is None else f"{x:,.0f}"


def section_markdown(run_dir: str | Path) -> str | None:
    """The report's "Forecast beside measurement" section, or None when no phase has a prediction."""
    run = Path(run_dir)
    files = sorted(run.glob(f"*/{rundir.PREDICTION_CSV}"))
    if not files:
        return None
    lines = ["## Forecast beside measurement", ""]
    for path in files:
        frame = pd.read_csv(path)
        if frame.empty:
            continue
        changes = frame["changes"].iloc[0] if "changes" in frame else ""
        lines += [
            f"Phase `{path.parent.name}`: the performance model fitted on the baseline alone forecast "
            f"the change {changes} before it was made; the phase then measured it.",
            "",
            "| concurrency | predicted tok/s | band | measured tok/s | error | inside band | running | binds |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        needs = []
        for _, r in frame.iterrows():
            err = as_float(r.get("error"))
            inside = r.get("inside_band")
            given = _given(r)
            held = r.get("held")
            measured = _n(r.get("measured")) + ("" if held is None or pd.isna(held) or bool(held) else " (batch did not hold)")
            figure = _n(r["predicted"]) if given else f"not forecast ({_n(r['predicted'])})"
            lines.append(
                f"| {int(r['concurrency']):,} | {figure} | {_n(r['low'])}-{_n(r['high'])} | "
                f"{measured} | {'-' if err is None else f'{err:+.0%}'} | "
                f"{'-' if pd.isna(inside) else ('yes' if bool(inside) else 'no')} | {_n(r.get('running'))} | "
                f"{str(r.get('binding_limit', '')).replace('frontend:', 'front end: ')}"
                f"{' (extrapolated)' if bool(r.get('extrapolated')) else ''} |"
            )
            if not given and isinstance(r.get("needs"), str) and r.get("needs"):
                needs.append(f"- at {int(r['concurrency']):,}: {r['needs']}")
        unseen = str(frame["unseen_changes"].dropna().iloc[0]) if frame["unseen_changes"].notna().any() else ""
        lines.append("")
        if needs:
            lines += ["Not forecast where the band would pass +/-30%; what would settle each:", "", *needs, ""]
        drift = as_float(frame["drift"].dropna().iloc[0]) if "drift" in frame and frame["drift"].notna().any() else None
        if drift is not None:
            top = frame.dropna(subset=["measured"]).sort_values("concurrency")
            net = as_float(top["error_net_of_drift"].iloc[-1]) if len(top) and "error_net_of_drift" in top else None
            lines += [
                f"The levels both phases ran with the same batch measured {drift:.2f}x in the second launch: "
                f"the machine's own movement between launches, not the change's."
                + (f" Net of it, the forecast at {int(top['concurrency'].iloc[-1]):,} is {net:+.0%} off." if net is not None else ""),
                "",
            ]
        if unseen.startswith("no forecast: "):
            lines += [f"No forecast: {unseen[len('no forecast: '):]}.", ""]
        elif unseen:
            lines += [f"Changes the model cannot see: {unseen}.", ""]
    return "\n".join(lines).rstrip() + "\n"
