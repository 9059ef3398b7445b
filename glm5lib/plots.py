"""Matplotlib figures for the workbook: the evidence, drawn the same way in every notebook.

Every function takes tidy frames as written to a run folder (``sweep.csv`` rows from
:func:`glm5lib.loadgen.run_sweep`, decode rows from :func:`glm5lib.logs.parse_log`, per-level
power rows from :func:`glm5lib.levels.per_level`) and returns a
:class:`matplotlib.figure.Figure`. Figures are built without pyplot, so nothing accumulates in
pyplot's global state during a long sweep; Jupyter shows a returned figure as a PNG
(:class:`PlotFigure` renders itself).

Several phases (``baseline``, ``fix``...) are drawn on the same axes when a mapping
``{label: frame}`` is passed instead of one frame, so before and after read at a glance.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from glm5lib import rundir
from glm5lib.errors import ConfigError

__all__ = [
    "LATENCY_METRICS",
    "PlotFigure",
    "latency_vs_concurrency",
    "power_vs_tdp",
    "running_queued_over_time",
    "save_figure",
    "throughput_vs_concurrency",
    "watch_windows",
]

log = logging.getLogger(__name__)

#: Latency panels drawn by :func:`latency_vs_concurrency`, as (sweep column prefix, label).
LATENCY_METRICS = (
    ("ttft", "time to first token"),
    ("tpot", "time per output token"),
    ("e2e_latency", "end-to-end latency"),
)

# Phase colours stay fixed across figures, so "fix" is the same colour everywhere.
_COLOURS = {"baseline": "#d62728", "fix": "#2ca02c", "reference": "#1f77b4"}
_CYCLE = ["#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]


def _as_mapping(frames: pd.DataFrame | Mapping[str, pd.DataFrame], default: str) -> dict:
    if isinstance(frames, pd.DataFrame):
        return {default: frames}
    if isinstance(frames, Mapping):
        return {str(k): v for k, v in frames.items() if v is not None}
    raise ConfigError(
        f"expected a DataFrame or a mapping of label -> DataFrame, got {type(frames).__name__}",
        field="frames",
    )


def _require(frame: pd.DataFrame, columns: Iterable[str], what: str, label: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ConfigError(
            f"{what} for {label!r} lacks column(s) {missing}; it has {list(frame.columns)}",
            field=missing[0],
            valid=list(frame.columns),
        )


def _colour(label: str, index: int) -> str:
    return _COLOURS.get(label, _CYCLE[index % len(_CYCLE)])


def _concurrency_axis(ax, levels: Iterable[float]) -> None:
    levels = sorted({int(v) for v in levels if pd.notna(v) and v > 0})
    if levels and levels[-1] / max(levels[0], 1) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(levels)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{int(v):,}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda _v, _pos: ""))
    ax.set_xlabel("concurrent requests")
    ax.grid(True, alpha=0.3)


class PlotFigure(Figure):
    """A Figure that Jupyter shows as a PNG even though pyplot never saw it."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", dpi=100)
        return buf.getvalue()


def _new_figure(width: float = 7.0, height: float = 4.2, ncols: int = 1) -> tuple[Figure, list]:
    fig = PlotFigure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def throughput_vs_concurrency(
    sweeps: pd.DataFrame | Mapping[str, pd.DataFrame],
    *,
    metric: str = "output_throughput",
    annotate: bool = True,
    title: str | None = None,
    size: tuple[float, float] | None = None,
    legend: bool | None = None,
) -> Figure:
    """Throughput per concurrency level, one line per phase, each point labelled in tok/s.

    ``metric`` is a sweep column: ``output_throughput`` (generated tok/s, the figure the
    investigation quotes), ``total_throughput`` or ``request_throughput``. ``size`` is the
    figure's (width, height) in inches; ``legend`` defaults to one where several lines are drawn.
    The axis leaves room above the highest point, so its label never sits on the plot's top edge.
    """
    frames = _as_mapping(sweeps, "sweep")
    fig, (ax,) = _new_figure(*(size or (7.0, 4.2)))
    levels: list[float] = []
    points: list[tuple[float, float, int, str]] = []
    top = 0.0
    for i, (label, frame) in enumerate(frames.items()):
        _require(frame, ["concurrency", metric], "sweep", label)
        data = frame.sort_values("concurrency")
        levels.extend(data["concurrency"].tolist())
        if data[metric].notna().any():
            top = max(top, float(data[metric].max()))
        ax.plot(data["concurrency"], data[metric], marker="o", label=label, color=_colour(label, i))
        points += [(x, y, i, label) for x, y in zip(data["concurrency"], data[metric], strict=True) if pd.notna(y)]
    if annotate:
        for x, y, i, label in points:
            # alternate above/below per phase so labels at the same level do not overprint; a
            # label that would fall below the axis goes above its point
            below = i % 2 == 1 and y > 0.12 * top
            ax.annotate(f"{y:,.0f}", (x, y), textcoords="offset points", xytext=(0, -13) if below else (0, 6),
                        ha="center", fontsize=8, color=_colour(label, i))
    _concurrency_axis(ax, levels)
    unit = "req/s" if metric == "request_throughput" else "tok/s"
    ax.set_ylabel(f"{metric.replace('_', ' ')} ({unit})")
    if top > 0:
        ax.set_ylim(0, top * 1.18)  # headroom: the top point's label stays inside the axes
    else:
        ax.set_ylim(bottom=0)
    ax.set_title(title or "Throughput vs concurrency")
    if legend or (legend is None and len(frames) > 1):
        ax.legend(fontsize=8)
    return fig


def latency_vs_concurrency(
    sweeps: pd.DataFrame | Mapping[str, pd.DataFrame],
    *,
    metrics: Iterable[str] = ("ttft", "tpot"),
    stat: str = "median",
    title: str | None = None,
) -> Figure:
    """One panel per latency metric (``ttft``, ``tpot``, ``itl``, ``e2e_latency``), in ms.

    Each panel draws ``<stat>_<metric>_ms`` as a line and, where present, the p99 as a dashed
    line of the same colour, for every phase.
    """
    frames = _as_mapping(sweeps, "sweep")
    metrics = list(metrics)
    if not metrics:
        raise ConfigError("metrics is empty; pass some of ttft, tpot, itl, e2e_latency", field="metrics")
    fig, axes = _new_figure(width=5.0 * len(metrics), ncols=len(metrics))
    levels: list[float] = []
    for ax, metric in zip(axes, metrics, strict=True):
        for i, (label, frame) in enumerate(frames.items()):
            column = f"{stat}_{metric}_ms"
            _require(frame, ["concurrency", column], "sweep", label)
            data = frame.sort_values("concurrency")
            levels.extend(data["concurrency"].tolist())
            colour = _colour(label, i)
            ax.plot(data["concurrency"], data[column], marker="o", color=colour, label=f"{label} {stat}")
            if f"p99_{metric}_ms" in data.columns and stat != "p99":
                ax.plot(data["concurrency"], data[f"p99_{metric}_ms"], linestyle="--", color=colour,
                        alpha=0.7, label=f"{label} p99")
        _concurrency_axis(ax, levels)
        names = dict(LATENCY_METRICS)
        names["itl"] = "inter-token latency"
        ax.set_title(names.get(metric, metric))
        ax.set_ylabel("ms")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def running_queued_over_time(
    decode: pd.DataFrame | Mapping[str, pd.DataFrame],
    *,
    running_cap: int | Mapping[str, int | None] | None = None,
    cap_name: str = "running cap",
    title: str | None = None,
) -> Figure:
    """Running and queued requests from the server log's decode lines over time.

    One panel per phase; the x axis is seconds since the phase's first decode line. A dashed line
    marks ``running_cap`` (one value, or one per phase) when given, labelled ``cap_name`` (the
    engine's name for it): a running count pinned to it while the queue grows is the signature of
    the concurrency cap.
    """
    frames = _as_mapping(decode, "server")
    if not frames:
        raise ConfigError("no decode frames to plot", field="decode")
    fig, axes = _new_figure(width=6.0 * len(frames), ncols=len(frames))
    caps = running_cap if isinstance(running_cap, Mapping) else None
    for ax, (label, frame) in zip(axes, frames.items(), strict=True):
        _require(frame, ["time", "running_req", "queue_req"], "decode frame", label)
        data = frame
        if "rank" in data.columns and data["rank"].notna().any():
            # every TP rank logs the same scheduler state; keep the first rank
            data = data[data["rank"] == data["rank"].dropna().iloc[0]]
        data = data.sort_values("time")
        if data.empty:
            ax.text(0.5, 0.5, "no decode lines in the log", ha="center", va="center",
                    transform=ax.transAxes)
        else:
            t = pd.to_datetime(data["time"]) if not pd.api.types.is_numeric_dtype(data["time"]) else data["time"]
            if pd.api.types.is_numeric_dtype(t):
                seconds = t - t.iloc[0]
            else:
                seconds = (t - t.iloc[0]).dt.total_seconds()
            ax.plot(seconds, data["running_req"], label="running", color="#1f77b4", drawstyle="steps-post")
            ax.plot(seconds, data["queue_req"], label="queued", color="#ff7f0e", drawstyle="steps-post")
        cap = caps.get(label) if caps is not None else running_cap
        if cap:
            ax.axhline(int(cap), color="black", linestyle="--", linewidth=1, label=f"{cap_name} = {int(cap):,}")
        ax.set_xlabel("seconds since first decode line")
        ax.set_ylabel("requests")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.set_title(f"{label}: running and queued requests")
        if ax.get_lines():
            ax.legend(fontsize=8, loc="upper left")
    if title:
        fig.suptitle(title)
    return fig


def power_vs_tdp(
    per_level: pd.DataFrame | Mapping[str, pd.DataFrame],
    *,
    title: str | None = None,
) -> Figure:
    """Mean GPU power per concurrency level against the power limit (TDP), per phase.

    Takes :func:`glm5lib.levels.per_level` frames (``concurrency, mean_power_w,
    power_limit_w``, optionally ``peak_power_w``); the limit is drawn as a horizontal line, the
    right axis reads as a share of the limit, and each mean is labelled in watts.
    """
    frames = _as_mapping(per_level, "gpus")
    fig, (ax,) = _new_figure()
    levels: list[float] = []
    limits: list[float] = []
    for i, (label, frame) in enumerate(frames.items()):
        _require(frame, ["concurrency", "mean_power_w", "power_limit_w"], "per-level power", label)
        data = frame.sort_values("concurrency")
        colour = _colour(label, i)
        levels.extend(data["concurrency"].tolist())
        limits.extend(data["power_limit_w"].dropna().tolist())
        ax.plot(data["concurrency"], data["mean_power_w"], marker="o", color=colour,
                label=f"{label} mean per GPU")
        if "peak_power_w" in data.columns:
            ax.plot(data["concurrency"], data["peak_power_w"], marker="^", linestyle=":",
                    color=colour, alpha=0.7, label=f"{label} peak")
        offset = (0, 7) if i % 2 == 0 else (0, -14)
        for x, y, lim in zip(data["concurrency"], data["mean_power_w"], data["power_limit_w"], strict=True):
            if pd.notna(y) and pd.notna(lim) and lim > 0:
                ax.annotate(f"{y:,.0f} W", (x, y), textcoords="offset points",
                            xytext=offset, ha="center", fontsize=8, color=colour)
    if not any(f["mean_power_w"].notna().any() for f in frames.values()):
        ax.text(0.5, 0.5, "no GPU telemetry was recorded", ha="center", va="center", transform=ax.transAxes)
        return fig
    if limits:
        tdp = max(limits)
        ax.axhline(tdp, color="black", linestyle="--", linewidth=1, label=f"power limit {tdp:,.0f} W")
        ax.set_ylim(0, tdp * 1.1)
        share = ax.secondary_yaxis("right", functions=(lambda w: 100 * w / tdp, lambda p: p * tdp / 100))
        share.set_ylabel("% of power limit")
    else:
        ax.set_ylim(bottom=0)
    _concurrency_axis(ax, levels)
    ax.set_ylabel("W per GPU")
    ax.set_title(title or "GPU power vs power limit")
    ax.legend(fontsize=8, loc="center left")
    return fig


def watch_windows(windows: pd.DataFrame, title: str | None = None) -> Figure:
    """A watched server window by window (``glm5 watch``): output tok/s from its counters on the
    left; running and queued requests on the right, each window labelled with the limit that bound it."""
    _require(windows, ["window", "output_throughput", "running_median", "queued_mean"], "watch windows", "watch")
    fig, (left, right) = _new_figure(10.0, 3.8, ncols=2)
    w = windows.sort_values("window")
    left.plot(w["window"], w["output_throughput"], "o-", color=_CYCLE[0])
    left.set(xlabel="window", ylabel="output tok/s (the engine's counter)", ylim=(0, None))
    right.plot(w["window"], w["running_median"], "o-", color=_COLOURS["fix"], label="running (median)")
    right.plot(w["window"], w["queued_mean"], "s--", color=_COLOURS["baseline"], label="queued (mean)")
    right.set(xlabel="window", ylabel="requests", ylim=(0, None))
    if "binding" in w:
        for x, y, text in zip(w["window"], w["running_median"], w["binding"].astype(str), strict=True):
            right.annotate(text.replace("_", " "), (x, y), textcoords="offset points", xytext=(0, 6), fontsize=7,
                           ha="center")
    right.legend(loc="best", fontsize=8)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    if title:
        fig.suptitle(title)
    return fig


def save_figure(fig: Figure, run_dir: str | Path, name: str, *, dpi: int = 110) -> Path:
    """Write ``fig`` as ``<run_dir>/figures/<name>.png`` and return the path."""
    stem = Path(name).stem
    if not stem or Path(name).name != name:
        raise ConfigError(f"figure name {name!r} must be a plain file name like 'throughput'", field="name")
    path = rundir.figure_path(run_dir, stem)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    log.info("figure written to %s", path)
    return path
