"""The tuning run in the report: its candidates, why each was chosen, the winner, and a
throughput-against-latency figure with the limit drawn.

:func:`plot_tune` draws ``tune.csv`` (tuner candidates numbered in launch order, grid points
hollow, the measured-again winner as a star) against the binding limit's latency;
:func:`section_markdown` is the report's ``## Tuning`` section (None when the run has no
``tune.csv``), with the figure saved to ``figures/tune.png``.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from glm5lib import rundir
from glm5lib.plots import save_figure
from glm5lib.tune.goal import LIMIT_METRICS, parse_limit
from glm5lib.tune.search import load_tune

__all__ = ["plot_tune", "section_markdown"]

log = logging.getLogger(__name__)


def _limit_of(frame: pd.DataFrame):
    texts = [t for t in frame.get("binding_limit", pd.Series(dtype=str)).dropna().astype(str) if t]
    if not texts:
        return None
    return parse_limit(pd.Series(texts).mode().iloc[0])


def plot_tune(frame: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Objective against the binding limit's latency, one point per candidate, the limit drawn."""
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    limit = _limit_of(frame)
    metric = limit.metric if limit else next((m for m in LIMIT_METRICS if m in frame), None)
    if frame.empty or metric is None or metric not in frame:
        ax.text(0.5, 0.5, "no candidates measured", ha="center", va="center", transform=ax.transAxes)
        return fig
    styles = {"grid": dict(marker="o", facecolors="none", edgecolors="tab:gray", s=60, label="grid"),
              "evidence": dict(marker="s", color="tab:green", s=50, label="starting evidence"),
              "tune": dict(marker="o", color="tab:blue", s=50, label="tuner"),
              "check": dict(marker="*", color="tab:orange", s=160, label="winner measured again")}
    for kind, style in styles.items():
        part = frame[frame["kind"] == kind]
        if part.empty:
            continue
        ax.scatter(part[metric], part["objective"], zorder=3, **style)
        if kind == "tune":
            for _, row in part.iterrows():
                ax.annotate(f"{int(row['step'])}: {row['value']:g}", (row[metric], row["objective"]),
                            textcoords="offset points", xytext=(5, 5), fontsize=8)
            ax.plot(part[metric], part["objective"], color="tab:blue", alpha=0.3, zorder=2)
    if limit is not None:
        ax.axvline(limit.value, color="tab:red", linestyle="--", label=f"limit {limit}")
    lever = frame["lever"].dropna().iloc[0] if "lever" in frame and frame["lever"].notna().any() else "lever"
    ax.set_xlabel(f"{metric} (ms)")
    ax.set_ylabel("objective (output tok/s or goodput)")
    ax.set_title(title or f"Tuning {lever}: throughput against latency")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def _fmt(value, digits: int = 0) -> str:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value) if value is not None else "n/a"
    return "n/a" if not math.isfinite(v) else f"{v:,.{digits}f}"


def section_markdown(run_dir: str | Path) -> str | None:
    """The report's tuning section, or None when the run has no ``tune.csv``."""
    run = Path(run_dir)
    frame = load_tune(run)
    if frame.empty:
        return None
    limit = _limit_of(frame)
    metric = limit.metric if limit else None
    lines = ["## Tuning", ""]
    lever = frame["lever"].dropna().iloc[0] if frame["lever"].notna().any() else "?"
    tuned = frame[frame["kind"].isin(["evidence", "tune"])]
    grid = frame[frame["kind"] == "grid"]
    launches = int((frame["kind"] == "tune").sum())
    lines.append(f"Lever `{lever}`" + (f", limit `{limit}`" if limit else "") +
                 f": {launches} tuner launch(es)" + (f", a grid of {len(grid)}" if not grid.empty else "") + ".")
    lines.append("")
    header = ["kind", "phase", lever, "objective", *( [metric] if metric else []), "limits met", "why"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, row in frame.iterrows():
        cells = [str(row["kind"]), f"`{row['phase']}`", _fmt(row["value"]), _fmt(row["objective"])]
        if metric:
            cells.append(_fmt(row.get(metric), 1))
        cells += ["yes" if bool(row["slo_met"]) else "no", str(row.get("reason", "")).replace("|", "/")]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    def best_of(part: pd.DataFrame):
        ok = part[part["slo_met"].astype(bool)]
        return ok.loc[ok["objective"].idxmax()] if not ok.empty else None

    tb, gb = best_of(tuned), best_of(grid)
    if tb is not None:
        lines.append(f"Tuner's best: `{lever}={_fmt(tb['value'])}` at {_fmt(tb['objective'])} "
                     f"(phase `{tb['phase']}`).")
    if gb is not None:
        lines.append(f"Grid's best: `{lever}={_fmt(gb['value'])}` at {_fmt(gb['objective'])} "
                     f"(phase `{gb['phase']}`)" + (f"; the tuner reached {tb['objective'] / gb['objective']:.0%} of it "
                                                   f"in {launches} launches against {len(grid)}."
                                                   if tb is not None and gb['objective'] > 0 else "."))
    check = frame[frame["kind"] == "check"]
    for _, row in check.iterrows():
        lines.append(f"Measured again (`{row['phase']}`): {_fmt(row['objective'])}, limits "
                     f"{'met' if bool(row['slo_met']) else 'not met'}.")
    best_path = run / rundir.TUNE_BEST
    if best_path.exists():
        try:
            changes = json.loads(best_path.read_text()).get("server_args", {}).get(lever)
        except ValueError:
            changes = None
        lines.append(f"Winner saved as `{rundir.TUNE_BEST}`" + (f" ({lever}={changes})" if changes is not None else "")
                     + ": load it as the workbook's CONFIG.")
    try:
        path = save_figure(plot_tune(frame), run, "tune")
        lines += ["", f"![Tuning: throughput against latency]({path.relative_to(run).as_posix()})"]
    except Exception as exc:  # the table stands without the figure
        log.warning("tuning figure not drawn: %s", exc)
    lines.append("")
    return "\n".join(lines)
