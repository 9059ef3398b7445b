"""Lining samples up with sweep levels: the one definition of a level's time window.

A sweep (``sweep.csv``, :func:`glm5lib.loadgen.run_sweep`) holds one row per concurrency level;
telemetry (``gpu.csv``, ``metrics.csv``) and server logs hold samples stamped with epoch seconds
on the same clock. Everything that asks "what happened during the level at 256 streams" reads
the level's window from :func:`level_windows`:

- the steady-state window (``window_start``/``window_end``) where the sweep gives one, else the
  whole level (``start_time``/``end_time``);
- the tokens generated in that window (``output_throughput`` x window span, else
  ``total_output_tokens``).

On top of it: :func:`assign_levels` tags samples with their level, :func:`per_level` gives power,
energy per token and PCIe bytes per token per level, :func:`metrics_per_level` the server's
gauges per level.

This module reads frames only; it imports nothing that collects them, so collectors
(:mod:`glm5lib.telemetry`) and readers (:mod:`glm5lib.diagnose`, :mod:`glm5lib.report`) can all
depend on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from glm5lib import engines
from glm5lib.errors import ConfigError

__all__ = [
    "DEFAULT_GAUGES",
    "POWER_COLUMNS",
    "SCHEDULER_GAUGES",
    "WINDOW_COLUMNS",
    "assign_levels",
    "level_windows",
    "metrics_per_level",
    "per_level",
]

#: Columns of :func:`level_windows`.
WINDOW_COLUMNS = ["concurrency", "start", "end", "windowed", "output_tokens", "output_throughput"]

#: Server gauges :func:`metrics_per_level` summarises by default.
DEFAULT_GAUGES = (
    "sglang:num_running_reqs",
    "sglang:num_queue_reqs",
    "sglang:token_usage",
    "sglang:gen_throughput",
)

_GENERATION_COUNTERS = ("sglang:generation_tokens_total", "sglang:generation_tokens")

#: Other engines' /metrics names -> SGLang's, so every engine's gauges land in the same columns:
#: built from each engine adapter's one /metrics map (:func:`glm5lib.engines.metric_aliases`).
METRIC_ALIASES = engines.metric_aliases()


def _numeric(sweep: pd.DataFrame, column: str) -> pd.Series:
    return pd.to_numeric(sweep[column], errors="coerce").astype(float)


def level_windows(sweep: pd.DataFrame) -> pd.DataFrame:
    """The time window and token count of each level of a sweep frame.

    One row per sweep row, on the sweep's index, with columns :data:`WINDOW_COLUMNS`:
    ``start``/``end`` (epoch seconds) are the steady-state window where the row has
    ``window_start``/``window_end``, else its ``start_time``/``end_time``; ``windowed`` says
    which; ``output_tokens`` is ``output_throughput`` over a steady-state window, else
    ``total_output_tokens``. A row with neither window has NaN ``start``/``end``.

    Raises :class:`~glm5lib.errors.ConfigError` when the frame has no ``concurrency`` column or
    no row with a window at all.
    """
    if "concurrency" not in sweep.columns:
        raise ConfigError("the sweep frame has no 'concurrency' column (expected loadgen's sweep.csv)",
                          field="sweep_frame", valid=["concurrency", "window_start", "window_end"])
    nan = pd.Series(np.nan, index=sweep.index, dtype=float)
    starts, ends = nan, nan
    windowed = pd.Series(False, index=sweep.index)
    if {"window_start", "window_end"} <= set(sweep.columns):
        starts, ends = _numeric(sweep, "window_start"), _numeric(sweep, "window_end")
        windowed = starts.notna() & ends.notna()
    if {"start_time", "end_time"} <= set(sweep.columns):
        starts = starts.where(windowed, _numeric(sweep, "start_time"))
        ends = ends.where(windowed, _numeric(sweep, "end_time"))
    if starts.isna().all():
        raise ConfigError(
            "the sweep frame gives no time window per level: it needs window_start/window_end "
            "or start_time/end_time (epoch seconds)", field="sweep_frame",
            valid=["window_start", "window_end", "start_time", "end_time"])
    throughput = _numeric(sweep, "output_throughput") if "output_throughput" in sweep.columns else nan
    tokens = (throughput * (ends - starts)).where(windowed, np.nan)
    if "total_output_tokens" in sweep.columns:
        tokens = tokens.fillna(_numeric(sweep, "total_output_tokens"))
    return pd.DataFrame({
        "concurrency": sweep["concurrency"],
        "start": starts,
        "end": ends,
        "windowed": windowed.astype(bool),
        "output_tokens": tokens,
        "output_throughput": throughput,
    }, index=sweep.index, columns=WINDOW_COLUMNS)


def assign_levels(frame: pd.DataFrame, sweep_frame: pd.DataFrame) -> pd.DataFrame:
    """Copy of a sample frame (a ``time`` column) with a ``concurrency`` column: the level whose
    window holds each sample, NaN between levels (where windows overlap, the later row wins)."""
    windows = level_windows(sweep_frame)
    times = pd.to_numeric(frame["time"], errors="coerce").to_numpy(dtype=float)
    levels = np.full(len(frame), np.nan)
    for start, end, concurrency in zip(windows["start"].to_numpy(), windows["end"].to_numpy(),
                                       windows["concurrency"].to_numpy(), strict=True):
        levels[(times >= start) & (times <= end)] = concurrency
    result = frame.copy()
    result["concurrency"] = levels
    return result


def _rate_integral(t: np.ndarray, v: np.ndarray, span: float) -> float:
    """Integral over a window of `span` seconds from samples (t, v): mean rate times span."""
    ok = ~np.isnan(v)
    if ok.sum() == 0:
        return np.nan
    t, v = t[ok], v[ok]
    if len(t) == 1 or t[-1] <= t[0]:
        return float(v.mean()) * span
    area = float(np.sum((v[1:] + v[:-1]) / 2.0 * np.diff(t)))
    return area / (t[-1] - t[0]) * span


#: Columns of :func:`per_level`.
POWER_COLUMNS = ["concurrency", "mean_power_w", "peak_power_w", "power_limit_w", "power_fraction",
                  "total_power_w", "mean_gpu_util", "mean_sm_clock_mhz", "energy_j", "output_tokens",
                  "output_throughput", "joules_per_token", "pcie_bytes_per_token", "n_gpus", "n_samples",
                  "window_start", "window_end"]


def per_level(gpu_frame: pd.DataFrame, sweep_frame: pd.DataFrame) -> pd.DataFrame:
    """GPU telemetry joined over each sweep level's window.

    Columns: concurrency, mean_power_w (per GPU), peak_power_w, power_limit_w (per GPU),
    power_fraction, total_power_w (all GPUs), mean_gpu_util, mean_sm_clock_mhz, energy_j (all
    GPUs, from the energy counter where read, else the power integral), output_tokens,
    joules_per_token, pcie_bytes_per_token (TX+RX over all GPUs), n_gpus, n_samples.
    The window is each level's steady-state window (window_start/window_end) where the sweep
    gives one, else its start_time/end_time; tokens are output_throughput over that window.
    """
    missing = [c for c in ("time", "gpu", "power_w") if c not in gpu_frame.columns]
    if missing:
        raise ConfigError(f"the GPU frame lacks columns {missing} (expected GpuSampler.frame())",
                          field="gpu_frame", valid=["time", "gpu", "power_w"])
    windows = level_windows(sweep_frame)
    rows = []
    for w in windows.itertuples():
        span = w.end - w.start
        part = gpu_frame[(gpu_frame["time"] >= w.start) & (gpu_frame["time"] <= w.end)]
        row: dict[str, Any] = {"concurrency": w.concurrency, "window_start": w.start, "window_end": w.end,
                               "output_throughput": w.output_throughput, "output_tokens": w.output_tokens,
                               "n_gpus": int(part["gpu"].nunique()), "n_samples": len(part)}
        if part.empty or not span > 0:
            row.update({k: np.nan for k in ("mean_power_w", "peak_power_w", "power_limit_w", "power_fraction",
                                            "total_power_w", "mean_gpu_util", "mean_sm_clock_mhz", "energy_j",
                                            "joules_per_token", "pcie_bytes_per_token")})
            rows.append(row)
            continue
        per_gpu = []
        for _, g in part.sort_values("time").groupby("gpu"):
            t = g["time"].to_numpy(dtype=float)
            power = g["power_w"].to_numpy(dtype=float)
            energy = g["energy_j"].to_numpy(dtype=float) if "energy_j" in g else np.full(len(g), np.nan)
            ok = ~np.isnan(energy)
            if ok.sum() >= 2 and t[ok][-1] > t[ok][0]:
                joules = (energy[ok][-1] - energy[ok][0]) / (t[ok][-1] - t[ok][0]) * span
            else:
                joules = _rate_integral(t, power, span)
            pcie = np.nan
            if {"pcie_tx_bytes_s", "pcie_rx_bytes_s"} <= set(g.columns):
                both = g["pcie_tx_bytes_s"].to_numpy(dtype=float) + g["pcie_rx_bytes_s"].to_numpy(dtype=float)
                pcie = _rate_integral(t, both, span)
            per_gpu.append({
                "mean_power": np.nanmean(power) if (~np.isnan(power)).any() else np.nan,
                "limit": g["power_limit_w"].mean() if "power_limit_w" in g else np.nan,
                "util": g["gpu_util"].mean() if "gpu_util" in g else np.nan,
                "clock": g["sm_clock_mhz"].mean() if "sm_clock_mhz" in g else np.nan,
                "joules": joules, "pcie": pcie,
            })
        pg = pd.DataFrame(per_gpu)
        energy_j = pg["joules"].sum(min_count=1)
        pcie_bytes = pg["pcie"].sum(min_count=1)
        tokens = w.output_tokens
        row.update({
            "mean_power_w": pg["mean_power"].mean(),
            "peak_power_w": part["power_w"].max(),
            "power_limit_w": pg["limit"].mean(),
            "total_power_w": pg["mean_power"].sum(min_count=1),
            "mean_gpu_util": pg["util"].mean(),
            "mean_sm_clock_mhz": pg["clock"].mean(),
            "energy_j": energy_j,
            "joules_per_token": energy_j / tokens if tokens and tokens > 0 else np.nan,
            "pcie_bytes_per_token": pcie_bytes / tokens if tokens and tokens > 0 else np.nan,
        })
        row["power_fraction"] = row["mean_power_w"] / row["power_limit_w"] if row["power_limit_w"] else np.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=POWER_COLUMNS)


def _per_scrape(metrics_frame: pd.DataFrame, names: Sequence[str]) -> dict[str, pd.Series]:
    """Each named metric as a time series, its samples summed per scrape (data-parallel ranks each
    report their own running and queued requests; ``telemetry.metric_series`` offers other
    aggregations and label filters)."""
    if metrics_frame.empty:
        return {}
    if metrics_frame["metric"].isin(list(METRIC_ALIASES)).any():
        metrics_frame = metrics_frame.assign(metric=metrics_frame["metric"].replace(METRIC_ALIASES))
    rows = metrics_frame[metrics_frame["metric"].isin(list(names))]
    return {str(name): group.groupby("time")["value"].sum().rename(name)
            for name, group in rows.groupby("metric", sort=False)}


#: The scheduler figures :func:`metrics_per_level` gives under engine-neutral names: column ->
#: the gauge (after :data:`METRIC_ALIASES`) that gives it.
SCHEDULER_GAUGES = {
    "running": "sglang:num_running_reqs",
    "queued": "sglang:num_queue_reqs",
    "kv_usage": "sglang:token_usage",
}


def metrics_per_level(metrics_frame: pd.DataFrame, sweep_frame: pd.DataFrame,
                      gauges: Sequence[str] = DEFAULT_GAUGES) -> pd.DataFrame:
    """Server gauges over each level's window: ``mean_<name>`` and ``max_<name>`` per gauge
    (name without the ``sglang:`` prefix), plus ``generation_tokens_per_s`` from the counter.

    Every engine's scheduler figures also come under one set of names, from the gauges sampled
    at each scrape (about once a second, denser than a scheduler log that writes a line every
    40 steps): ``running``, ``queued`` and ``kv_usage`` (0-1 fraction of the KV pool) are the
    window's means, ``max_running``, ``max_queued`` and ``max_kv_usage`` its peaks,
    ``gauge_samples`` the scrapes inside the window, and ``gauges_missing`` names the figures
    no scrape gave for the level (NaN in their columns; "" when all three are there).

    A ``max_num_running_reqs`` flat at a round number while ``mean_num_queue_reqs`` grows is
    the signature of a ``--max-running-requests`` cap.
    """
    windows = level_windows(sweep_frame)
    wanted = dict.fromkeys([*gauges, *SCHEDULER_GAUGES.values(), *_GENERATION_COUNTERS])
    series = _per_scrape(metrics_frame, list(wanted))
    counter = next((series[name] for name in _GENERATION_COUNTERS if name in series), None)
    rows = []
    for w in windows.itertuples():
        row: dict[str, Any] = {"concurrency": w.concurrency}
        parts = {}
        for g in wanted:
            s = series.get(g)
            parts[g] = s[(s.index >= w.start) & (s.index <= w.end)] if s is not None else pd.Series(dtype=float)
        for g in gauges:
            short = g.split(":", 1)[-1]
            part = parts[g]
            row[f"mean_{short}"] = part.mean() if len(part) else np.nan
            row[f"max_{short}"] = part.max() if len(part) else np.nan
        rate = np.nan
        if counter is not None:
            part = counter[(counter.index >= w.start) & (counter.index <= w.end)]
            if len(part) >= 2 and part.index[-1] > part.index[0]:
                rate = (part.iloc[-1] - part.iloc[0]) / (part.index[-1] - part.index[0])
        row["generation_tokens_per_s"] = rate
        missing = []
        samples = 0
        for column, g in SCHEDULER_GAUGES.items():
            part = parts[g].dropna()
            samples = max(samples, len(part))
            row[column] = float(part.mean()) if len(part) else np.nan
            row[f"max_{column}"] = float(part.max()) if len(part) else np.nan
            if not len(part):
                missing.append(column)
        row["gauge_samples"] = samples
        row["gauges_missing"] = ",".join(missing)
        rows.append(row)
    return pd.DataFrame(rows)
