"""Diagnose a server in production without adding load: ``glm5 watch``.

:class:`Watch` reads a running engine's own evidence and sends it no inference request: only
``GET /metrics`` (once a second), its server-info endpoint and ``/health`` (once, to identify it).
It follows the engine's log when one is given, samples the GPUs when they are local (NVML, or the
stand-in's simulated ones) and the serving processes' CPU when the server runs on this host, and
cuts time into windows (30 s by default). Each window is a row of ``sweep.csv`` in a phase folder,
with what a sweep level has where the evidence allows it:

* the offered load (running + queued, the engine's gauges) as ``concurrency``, running, queued,
  KV use;
* output tok/s from the engine's generation-token counter, requests finished from its request
  counter, prompt tokens from its prompt-token counter;
* TTFT, inter-token and end-to-end latency (mean, median, p90, p99) from the engine's histograms,
  read as the difference of two snapshots (one at each window's ends);
* GPU power per window (``power.csv``) and the serving processes' CPU (``other_processes``).

So ``glm5 diagnose``, ``glm5 predict``, ``glm5 report``, ``glm5 compare`` and the notebooks read a
watched phase as any other; ``watch.json`` says its levels are windows of real traffic. Each window
gets a line naming the limit that binds ("64 running, 191 queued, KV 2%: the running cap").

Errors come before anything is written: a URL that is not a serving engine, ``/metrics`` switched
off (naming the engine's flag that turns it on), a window shorter than two scrapes. No credential
is written anywhere (the API key is read from the environment and used in headers only).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import math
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
import pandas as pd
import psutil

from glm5lib import engines, http, rundir
from glm5lib.diagnose.model.core import PREFILL_FULL
from glm5lib.diagnose.model.levels import as_float
from glm5lib.errors import ConfigError
from glm5lib.levels import per_level
from glm5lib.logs import follow_log, parse_log, to_epoch
from glm5lib.telemetry import GpuSampler, MetricsScraper, metric_series, save_environment

__all__ = ["WATCH_COLUMNS", "Watch", "WatchResult", "WatchSettings", "histogram_window", "swing_note", "window_row"]

log = logging.getLogger(__name__)


#: the columns of a watched phase's ``sweep.csv`` (those of a sweep level it can fill, and its own)
WATCH_COLUMNS = [
    "concurrency", "mode", "window", "completed", "failed", "duration", "total_input_tokens", "total_output_tokens",
    "request_throughput", "output_throughput", "mean_concurrency", "running_mean", "running_median", "queued_mean",
    "queued_max", "kv_max", "mean_ttft_ms", "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_itl_ms",
    "median_itl_ms", "p90_itl_ms", "p99_itl_ms", "mean_tpot_ms", "median_tpot_ms", "mean_e2e_latency_ms",
    "median_e2e_latency_ms", "p90_e2e_latency_ms", "p99_e2e_latency_ms", "median_ttft_ms_bucket", "p99_ttft_ms_bucket",
    "median_itl_ms_bucket", "median_e2e_latency_ms_bucket", "start_time", "end_time", "window_start",
    "window_end", "token_source", "scheduler_source", "host_cpus", "host_cpu_pct", "other_processes",
    "prefill_forwards", "prefill_full_share", "prefill_budget", "binding", "binding_text",
]
# Scrapes back to back that measure what one costs the server (CPU clocks tick in 10 ms).
COST_SCRAPES = 20
# A window shorter than this many scrapes reads too few gauges to say anything.
MIN_SCRAPES = 3
# Requests this many or more waiting on average: the engine held them back.
QUEUED = 0.5
# The running count this close to the cap counts as at it.
AT_CAP = 0.97
# KV use this high with requests waiting: the pool is the limit.
KV_FULL = 0.9
# A serving process this busy (% of its core) with nothing waiting: the front end is the limit.
FRONTEND_BUSY = 90.0
# This share of a window's prefill forwards at the whole budget, with requests waiting: the budget binds.
BUDGET_FULL = 0.8


@dataclasses.dataclass
class WatchSettings:
    """What to watch, for how long, and where the phase goes."""

    url: str
    log_path: Path | None = None
    duration: float | None = None  # seconds; None: until stopped (Ctrl-C)
    window: float = 30.0
    interval: float = 1.0
    run_dir: Path | None = None
    phase: str = "watch"
    gpu: bool = True
    api_key: str | None = dataclasses.field(default=None, repr=False)

    def check(self) -> None:
        parts = urlparse(str(self.url))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"URL {self.url!r} must be http(s)://HOST:PORT of a serving engine, e.g. "
                              "http://127.0.0.1:30000", field="url")
        if parts.username or parts.password:
            raise ConfigError("URL: give the API key through GLM5_API_KEY, not in the URL (it would be "
                              "written with the phase)", field="url")
        for name in ("window", "interval"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConfigError(f"--{name} {value!r} must be a positive number of seconds", field=name)
        if self.window < MIN_SCRAPES * self.interval:
            raise ConfigError(f"--window {self.window:g} s holds fewer than {MIN_SCRAPES} scrapes "
                              f"{self.interval:g} s apart: give at least {MIN_SCRAPES * self.interval:g} s",
                              field="window")
        if self.duration is not None and not (math.isfinite(self.duration) and self.duration >= self.window):
            raise ConfigError(f"--duration {self.duration!r} must be at least one window ({self.window:g} s), or "
                              "left out to watch until stopped", field="duration")
        if self.log_path is not None and not Path(self.log_path).is_file():
            raise ConfigError(f"--log {self.log_path}: no such file (the engine's log, readable from here)",
                              field="log")
        if not rundir.PHASE_NAME.match(str(self.phase)):
            raise ConfigError(f"--phase {self.phase!r} is not valid: use letters, digits, '_', '-' or '.', like 'watch'",
                              field="phase")


@dataclasses.dataclass
class WatchResult:
    """What a watch recorded: its phase folder, one row per window, and what it cost the server."""

    folder: Path
    windows: pd.DataFrame
    engine: str
    scrape_cost: dict[str, Any]
    stopped: str
    notes: list[str] = dataclasses.field(default_factory=list)


def swing_note(windows: pd.DataFrame, window_s: float) -> str | None:
    """A note where the windows' output tok/s swing by half or more while the offered load holds within
    15%: the traffic's tokens come in bursts (requests that start and finish together) that a window
    catches one or two of, so no one window's figure is the server's rate; None otherwise."""
    if not len(windows) or not {"output_throughput", "concurrency"} <= set(windows):
        return None
    w = windows.dropna(subset=["output_throughput", "concurrency"])
    w = w[(w["concurrency"] > 0) & (w["output_throughput"] > 0)]  # idle windows swing with their load
    if len(w) < 2:
        return None
    tok, load = w["output_throughput"].astype(float), w["concurrency"].astype(float)
    if tok.max() < 1.5 * tok.min() or load.max() > 1.15 * load.min():
        return None
    e2e = (pd.to_numeric(w["median_e2e_latency_ms"], errors="coerce").median() / 1000.0
           if "median_e2e_latency_ms" in w else math.nan)
    longer = (f"; a request lived about {e2e:,.0f} s, so windows of {10 * math.ceil(round(4 * e2e) / 10):.0f} s "
              "or more (--window) hold several lifetimes each") if e2e == e2e and e2e > 0 else ""
    return (f"output tok/s swung from {tok.min():,.0f} to {tok.max():,.0f} between windows while the offered load held "
            f"at {load.min():,.0f}-{load.max():,.0f}: the tokens came in bursts (requests that start and finish "
            f"together) that a {window_s:g}-s window catches more or fewer of, so read the mean over the windows, "
            f"{tok.mean():,.0f} tok/s, rather than any one{longer}")


def _histogram(frame: pd.DataFrame, family: str, at: float) -> pd.DataFrame:
    """The histogram ``family``'s buckets at the snapshot nearest ``at``: columns le, count."""
    rows = frame[frame["metric"] == family + "_bucket"]
    if rows.empty:
        return pd.DataFrame(columns=["le", "count"])
    times = rows["time"].unique()
    snap = times[int(np.argmin(np.abs(times - at)))]
    part = rows[rows["time"] == snap]
    le = part["labels"].map(lambda text: json.loads(text).get("le", "nan"))
    out = pd.DataFrame({"le": pd.to_numeric(le.replace("+Inf", "inf"), errors="coerce"), "count": part["value"]})
    return out.groupby("le", as_index=False)["count"].sum().sort_values("le")


def _snapshot_sum(frame: pd.DataFrame, name: str, at: float) -> float:
    rows = frame[frame["metric"] == name]
    if rows.empty:
        return math.nan
    times = rows["time"].unique()
    snap = times[int(np.argmin(np.abs(times - at)))]
    return float(rows[rows["time"] == snap]["value"].sum())


def histogram_window(frame: pd.DataFrame, family: str, t0: float, t1: float) -> dict[str, float]:
    """``count``, ``mean``, ``p50``, ``p90``, ``p99`` (the family's unit) of the observations between the
    snapshots nearest ``t0`` and ``t1``: the difference of the two cumulative histograms, each
    quantile interpolated linearly within its bucket (as Prometheus's ``histogram_quantile``), whose
    edges are ``p50_bucket``... (``(lo, inf)`` for the last): all a histogram knows of a quantile."""
    a, b = _histogram(frame, family, t0), _histogram(frame, family, t1)
    out = {"count": 0.0, "mean": math.nan, "p50": math.nan, "p90": math.nan, "p99": math.nan}
    if a.empty or b.empty:
        return out
    merged = b.merge(a, on="le", how="left", suffixes=("", "_0")).fillna({"count_0": 0.0})
    cum = (merged["count"] - merged["count_0"]).clip(lower=0.0).cummax().to_numpy()
    edges = merged["le"].to_numpy(dtype=float)
    total = float(cum[-1]) if len(cum) else 0.0
    out["count"] = total
    if total <= 0:
        return out
    s = _snapshot_sum(frame, family + "_sum", t1) - _snapshot_sum(frame, family + "_sum", t0)
    out["mean"] = s / total if math.isfinite(s) else math.nan
    for q, key in ((0.5, "p50"), (0.9, "p90"), (0.99, "p99")):
        rank = q * total
        i = int(np.searchsorted(cum, rank, side="left"))
        hi = edges[i] if i < len(edges) else edges[-1]
        lo = edges[i - 1] if i > 0 else 0.0
        below = cum[i - 1] if i > 0 else 0.0
        inside = cum[i] - below if i < len(cum) else 0.0
        if not math.isfinite(hi):  # the last, unbounded bucket: its lower edge is all that is known
            out[key] = float(lo)
        else:
            out[key] = float(lo + (hi - lo) * ((rank - below) / inside if inside > 0 else 1.0))
        out[key + "_bucket"] = (float(lo), float(hi))
    return out


def _series(frame: pd.DataFrame, names: tuple[str, ...], t0: float, t1: float) -> pd.Series:
    """One gauge's values per scrape inside [t0, t1] (summed over label sets: ranks, engines)."""
    rows = frame[frame["metric"].isin(names) & (frame["time"] >= t0) & (frame["time"] <= t1)]
    return rows.groupby("time")["value"].sum()


_SELECTOR_RE = re.compile(r'^([^{]+)\{(.*)\}$')
_MATCHER_RE = re.compile(r'(\w+)="([^"]*)"')


def _selector(name: str) -> tuple[str, dict[str, str]]:
    """A gauge's name and the labels it selects: ``family{mode="decode"}`` (Prometheus's selector)."""
    m = _SELECTOR_RE.match(name)
    return (m.group(1), dict(_MATCHER_RE.findall(m.group(2)))) if m else (name, {})


def _counter_rate(frame: pd.DataFrame, names: tuple[str, ...], t0: float, t1: float) -> float:
    """A counter's rate over [t0, t1] (per second), between the scrapes nearest the window's ends
    (each scrape's own time: a second's slip at either end is no error)."""
    selected = [_selector(n) for n in names]
    parts = [metric_series(frame, family, **labels) for family, labels in selected if (frame["metric"] == family).any()]
    per = pd.concat(parts, axis=1).sum(axis=1).dropna() if parts else pd.Series(dtype=float)
    if per.empty:
        return math.nan
    times = per.index.to_numpy(dtype=float)
    a = int(np.argmin(np.abs(times - t0)))
    b = int(np.argmin(np.abs(times - t1)))
    if b <= a:
        return math.nan
    return max(float(per.iloc[b]) - float(per.iloc[a]), 0.0) / (times[b] - times[a])


def _lines_in(lines: pd.DataFrame | None, t0: float, t1: float, *, running: bool = True) -> pd.DataFrame | None:
    """The log's scheduler lines inside [t0, t1] (with a running request, where ``running``); None
    without a log."""
    if lines is None or lines.empty or not {"time", "epoch"} & set(lines) or (running and "running_req" not in lines):
        return None
    epoch = lines["epoch"] if "epoch" in lines else pd.to_numeric(to_epoch(lines["time"]), errors="coerce")
    inside = (epoch >= t0) & (epoch <= t1)
    if running:
        inside &= pd.to_numeric(lines["running_req"], errors="coerce") > 0
    return lines[inside]


def window_row(frame: pd.DataFrame, t0: float, t1: float, *, index: int, cap: int | None = None,
               processes: Mapping[str, float] | None = None, host: Mapping[str, float] | None = None,
               roles: tuple[Any, ...] = (), log: Any = None, budget: int | None = None) -> dict[str, Any]:
    """One window of ``/metrics`` scrapes (``metrics.csv``'s rows) as a sweep row, with the limit
    that binds it (``binding``: a neutral limit name; ``binding_text`` in words). Running, queued and
    KV figures come from the scrapes that saw a batch, or from the log's scheduler lines (``log``, the
    engine's parsed log so far: its ``decode`` lines) where they saw more (``scheduler_source``); its
    ``prefill`` lines say how many prefill forwards took the whole per-step token ``budget``."""
    decode = getattr(log, "decode", None)
    names = engines.metric_names
    running = _series(frame, names("running_req"), t0, t1)
    queued = _series(frame, names("queue_req"), t0, t1).reindex(running.index).fillna(0.0)
    usage = _series(frame, names("token_usage"), t0, t1)
    # a scrape of an engine between its stats updates can read nothing running while tokens flow
    # (real vLLM on CPU read 0 running on most scrapes at 1,000 tok/s): the scrapes that saw a batch,
    # or the log's own scheduler lines where they saw more
    active = running > 0
    running, queued = running[active], queued[active]
    source = "metrics"
    lines = _lines_in(decode, t0, t1)
    if lines is not None and len(lines) > len(running):
        running = pd.to_numeric(lines["running_req"], errors="coerce").reset_index(drop=True)
        queued = pd.to_numeric(lines.get("queue_req", pd.Series(0.0, index=lines.index)), errors="coerce").fillna(0.0)
        queued = queued.reset_index(drop=True)
        if "token_usage" in lines:
            usage = pd.to_numeric(lines["token_usage"], errors="coerce").dropna()
        source = "log"
    offered = running + queued
    span = max(t1 - t0, 1e-9)
    # tokens as the decode steps make them where the engine counts them so; else as requests finish
    generated, token_source = _counter_rate(frame, names("decode_tokens"), t0, t1) * span, "decode counter"
    if not math.isfinite(generated):
        generated, token_source = _counter_rate(frame, names("generation_tokens"), t0, t1) * span, "counter"
    prompts = _counter_rate(frame, names("prompt_tokens"), t0, t1) * span
    finished = _counter_rate(frame, names("requests_finished"), t0, t1) * span
    row: dict[str, Any] = {
        "concurrency": round(float(offered.median())) if len(offered) else 0,
        "mode": "watch", "window": index, "duration": span, "failed": 0,
        "completed": finished, "total_output_tokens": generated, "total_input_tokens": prompts,
        "output_throughput": generated / span if math.isfinite(generated) else math.nan,
        "request_throughput": finished / span if math.isfinite(finished) else math.nan,
        "mean_concurrency": float(offered.mean()) if len(offered) else math.nan,
        "running_mean": float(running.mean()) if len(running) else math.nan,
        "running_median": float(running.median()) if len(running) else math.nan,
        "queued_mean": float(queued.mean()) if len(queued) else math.nan,
        "queued_max": float(queued.max()) if len(queued) else math.nan,
        "kv_max": float(usage.max()) if len(usage) else math.nan,
        "start_time": t0, "end_time": t1, "window_start": t0, "window_end": t1, "token_source": token_source,
        "scheduler_source": source,
    }
    for column, prefix in (("ttft_seconds", "ttft"), ("itl_seconds", "itl"), ("e2e_seconds", "e2e_latency")):
        family = next((n for n in names(column) if (frame["metric"] == n + "_bucket").any()), None)
        stats = histogram_window(frame, family, t0, t1) if family else {}
        for key, name in (("mean", "mean"), ("p50", "median"), ("p90", "p90"), ("p99", "p99")):
            value = stats.get(key, math.nan)
            row[f"{name}_{prefix}_ms"] = 1000.0 * value if math.isfinite(value) else math.nan
            if key + "_bucket" in stats:  # a quantile is known only to its bucket: its edges go beside it
                lo, hi = stats[key + "_bucket"]
                row[f"{name}_{prefix}_ms_bucket"] = f"{1000.0 * lo:g}-{1000.0 * hi:g}"
    row["mean_tpot_ms"], row["median_tpot_ms"] = row["mean_itl_ms"], row["median_itl_ms"]
    if processes:
        listed = sorted(processes.items(), key=lambda kv: -kv[1])
        row["other_processes"] = "; ".join(f"{who} {pct:.0f}%" for who, pct in listed if pct >= 1.0)
    if host:
        row.update(host)
    forwards = _lines_in(getattr(log, "prefill", None), t0, t1, running=False)
    if forwards is not None and budget and "new_token" in forwards:
        tokens = pd.to_numeric(forwards["new_token"], errors="coerce").dropna()
        row.update(prefill_forwards=len(tokens), prefill_budget=budget,
                   prefill_full_share=float((tokens >= PREFILL_FULL * budget).mean()) if len(tokens) else math.nan)
    row["binding"], row["binding_text"] = binding_limit(row, cap, processes or {}, roles)
    return row


def binding_limit(row: Mapping[str, Any], cap: int | None, processes: Mapping[str, float],
                  roles: tuple[Any, ...] = ()) -> tuple[str, str]:
    """The limit that binds a window, by its neutral name, and the line that says so."""
    running, queued, kv = row.get("running_median"), row.get("queued_mean"), row.get("kv_max")
    head = (f"{_n(running)} running, {_n(queued)} queued, KV {kv:.0%}" if isinstance(kv, float) and math.isfinite(kv)
            else f"{_n(running)} running, {_n(queued)} queued")
    head += f", {_n(row.get('output_throughput'))} tok/s"
    if not (isinstance(running, float) and math.isfinite(running)) or running <= 0:
        return "idle", f"{head}: idle (nothing ran)"
    waiting = isinstance(queued, float) and queued >= QUEUED
    # at the cap with more waiting than its free slots (a few waiting beside a batch the cap admits wait elsewhere)
    if waiting and cap and running >= AT_CAP * cap and running + queued > cap:
        return "running_cap", f"{head}: the running cap ({cap})"
    if waiting and isinstance(kv, float) and kv >= KV_FULL:
        return "kv_tokens", f"{head}: the KV pool"
    if waiting and not cap:
        return "running_cap", f"{head}: a running cap of about {running:.0f} (requests wait while the KV pool has room)"
    # a row read back from sweep.csv holds floats, numpy's numbers or NaN
    forwards, full = as_float(row.get("prefill_forwards")), as_float(row.get("prefill_full_share"))
    if waiting and forwards is not None and forwards >= 3 and full is not None and full >= BUDGET_FULL:
        return "token_budget", (f"{head}: the prefill budget ({full:.0%} of the window's {int(forwards):,} prefill "
                                f"forwards took the whole {int(row['prefill_budget']):,} tokens while requests waited)")
    if waiting:
        return "admission", (f"{head}: admission (requests wait below the cap of {cap} with the KV pool at {kv:.0%}: "
                             "the per-step token budget or the admission reserve)")
    for role in roles:
        busy = sum(pct for who, pct in processes.items() if role.matches(who))
        if busy >= FRONTEND_BUSY:
            return f"frontend:{role.name}", f"{head}: the {role.name} front end ({busy:.0f}% of its core)"
    return "load", f"{head}: the load offered (nothing waits)"


def _n(x: Any) -> str:
    return f"{x:,.0f}" if isinstance(x, (int, float)) and math.isfinite(float(x)) else "?"


def _is_local(host: str) -> bool:
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    mine = {"127.0.0.1", "::1"}
    for addrs in psutil.net_if_addrs().values():
        mine.update(a.address.split("%")[0] for a in addrs)
    return bool(addresses & mine)


def _server_pids(port: int) -> list[psutil.Process]:
    """The process listening on ``port`` and its children (the engine's serving processes)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError) as exc:  # not allowed to list sockets here (macOS without root)
        log.info("cannot list the listening sockets: %s", exc)
        return []
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid:
            try:
                root = psutil.Process(c.pid)
                return [root, *root.children(recursive=True)]
            except psutil.Error:
                return []
    return []


def _cpu_seconds(procs: list[psutil.Process]) -> dict[str, float]:
    out = {}
    for p in procs:
        try:
            t = p.cpu_times()
            out[_who(p)] = float(t.user + t.system)
        except psutil.Error:
            continue
    return out


def _who(p: psutil.Process) -> str:
    try:
        argv = p.cmdline()
        name = p.name()
    except psutil.Error:
        return f"?[{p.pid}]"
    if "-m" in argv[:-1]:
        return f"{name}[{p.pid}] -m {argv[argv.index('-m') + 1]}"
    return f"{name}[{p.pid}]"


class Watch:
    """One watch of one server; :meth:`run` records it. Everything is checked in the constructor,
    before anything is written."""

    def __init__(self, settings: WatchSettings):
        settings.check()
        self.settings = settings
        self.url = str(settings.url).rstrip("/")
        self.adapter, self.info = engines.identify(self.url, settings.api_key)
        self.engine = self.adapter.name
        probe = http.get(self.url, "/metrics", api_key=settings.api_key, timeout=5.0)
        if not probe.reached or probe.status == 404:
            flag = self.adapter.capabilities.metrics_flag
            raise ConfigError(
                f"{self.url}/metrics " + ("could not be reached" if not probe.reached else "answered 404")
                + (f": {self.adapter.title} serves it only when started with {flag}; restart it with {flag}"
                   if flag else f": {self.adapter.title} serves /metrics on its API port; is this that port?"),
                field="url")
        if probe.status in (401, 403):
            raise ConfigError(f"{self.url}/metrics answered HTTP {probe.status}: set GLM5_API_KEY to the server's key",
                              field="url")
        parts = urlparse(self.url)
        self.local = _is_local(parts.hostname or "")
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        args = dict(self.info) if self.adapter.config_from_info is not None else {}
        startup: dict[str, Any] = {}
        if settings.log_path is not None:  # the arguments and limits its log wrote at start-up
            server_log = parse_log(settings.log_path)
            args = {**dict(server_log.server_args or {}), **args}
            startup = dict(server_log.startup or {})
        limits = self.adapter.limits(args, startup) if (args or startup) else None
        self.cap = limits.running_cap if limits is not None else None
        self.budget = limits.token_budget if limits is not None else None

    def _folder(self) -> Path:
        run = Path(self.settings.run_dir) if self.settings.run_dir else rundir.new_run_dir()
        if (run / self.settings.phase / rundir.SWEEP).exists():
            raise ConfigError(f"{run / self.settings.phase} already holds a measured phase: choose another --phase",
                              field="phase")
        return rundir.phase_dir(run, self.settings.phase)

    def _scrape_cost(self, procs: list[psutil.Process]) -> dict[str, Any]:
        """What one scrape costs the server: its wall time and size, and where the serving process is
        local, the CPU it spent on :data:`COST_SCRAPES` scrapes back to back less what it spends in as
        long a time without them."""
        target = procs[:1]
        before, t0 = _cpu_seconds(target), time.perf_counter()
        sizes = []
        for _ in range(COST_SCRAPES):
            r = http.get(self.url, "/metrics", api_key=self.settings.api_key, timeout=5.0)
            sizes.append(len(r.body or b""))
        wall = (time.perf_counter() - t0) / COST_SCRAPES
        out: dict[str, Any] = {"wall_ms": 1000.0 * wall, "bytes": int(np.median(sizes)) if sizes else 0}
        if target:
            after = _cpu_seconds(target)
            spent = sum(after.values()) - sum(before.values())
            idle0 = _cpu_seconds(target)
            time.sleep(COST_SCRAPES * wall)
            idle = sum(_cpu_seconds(target).values()) - sum(idle0.values())
            out["cpu_ms"] = max(1000.0 * (spent - idle) / COST_SCRAPES, 0.0)
            out["share_of_core_at_interval"] = out["cpu_ms"] / (1000.0 * self.settings.interval)
        return out

    def run(self, *, on_window: Callable[[dict[str, Any]], None] | None = None,
            stop: threading.Event | None = None) -> WatchResult:
        """Watch until the duration is up, ``stop`` is set or Ctrl-C; each window is written to
        ``sweep.csv`` as it ends and passed to ``on_window``."""
        s = self.settings
        folder = self._folder()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / rundir.SERVER_INFO).write_text(json.dumps(self.info, indent=2, default=str) + "\n")
        if (self.local or self.engine == engines.STANDIN) and not (folder.parent / rundir.ENVIRONMENT).exists():
            # the host's GPUs (their memory decides an engine's defaults), when they are the server's
            save_environment(folder.parent, base_url=self.url, api_key=s.api_key)
        procs = _server_pids(self.port) if self.local else []
        cost = self._scrape_cost(procs)
        scraper = MetricsScraper(self.url, interval=s.interval, out=folder / rundir.METRICS, api_key=s.api_key,
                                 histogram_interval=s.window, metrics_flag=self.adapter.capabilities.metrics_flag)
        sampler = None
        if s.gpu and (self.local or self.engine == engines.STANDIN):
            sampler = GpuSampler(interval=0.5, base_url=self.url, out=folder / rundir.GPU)
        log_copy = _LogCopy(s.log_path, folder / rundir.SERVER_LOG) if s.log_path else None
        follower = follow_log(folder / rundir.SERVER_LOG) if log_copy is not None else None
        meta = {"format": "glm5lib.watch/1", "url": self.url, "engine": self.engine, "window_s": s.window,
                "interval_s": s.interval, "started": _now(), "scrape_cost": cost, "local": self.local,
                "what": "windows of real traffic watched through the engine's own /metrics (and log); no inference "
                        "request was sent. A window's concurrency is the offered load the engine's gauges read "
                        "(running + queued), not a load generator's."}
        (folder / rundir.WATCH).write_text(json.dumps(meta, indent=2) + "\n")
        rows: list[dict[str, Any]] = []
        stopped = "the duration is up"
        stop = stop or threading.Event()
        scraper.start()
        if sampler is not None:
            sampler.start()
        started = time.time()
        try:
            t0, cpu0, host0 = started, _cpu_seconds(procs), psutil.cpu_times()
            k = 1
            while True:
                end = started + k * s.window
                if s.duration is not None and end > started + s.duration + 1e-6:
                    break
                while time.time() < end:
                    if log_copy is not None:
                        log_copy.pump()
                    if stop.wait(min(0.5, max(end - time.time(), 0.0))):
                        raise KeyboardInterrupt
                scraper.mark()  # the histograms at this boundary
                t1 = time.time()
                cpu1, host1 = _cpu_seconds(procs), psutil.cpu_times()
                time.sleep(min(1.5 * s.interval, 5.0))  # the marked scrape
                server_log = None
                if follower is not None:
                    log_copy.pump()
                    server_log = follower.update()
                row = self._window(scraper.frame(), t0, t1, k, cpu0, cpu1, host0, host1, server_log)
                rows.append(row)
                pd.DataFrame(rows, columns=WATCH_COLUMNS).to_csv(folder / rundir.SWEEP, index=False)
                if on_window is not None:
                    on_window(row)
                t0, cpu0, host0 = t1, cpu1, host1
                k += 1
        except KeyboardInterrupt:
            stopped = "stopped"
        finally:
            metrics = scraper.stop()
            gpu = sampler.stop() if sampler is not None else None
            if log_copy is not None:
                log_copy.pump()
        windows = pd.DataFrame(rows, columns=WATCH_COLUMNS)
        if gpu is not None and not windows.empty and {"time", "gpu", "power_w"} <= set(gpu.columns) and len(gpu):
            per_level(gpu, windows).to_csv(folder / rundir.POWER, index=False)
        notes = [n for n in (swing_note(windows, s.window),) if n]
        meta.update(stopped=_now(), windows=len(rows), how_it_ended=stopped, scrapes=scraper.scrapes,
                    scrape_errors=scraper.errors, metrics_rows=len(metrics), notes=notes)
        (folder / rundir.WATCH).write_text(json.dumps(meta, indent=2) + "\n")
        return WatchResult(folder, windows, self.engine, cost, stopped, notes)

    def _window(self, frame: pd.DataFrame, t0: float, t1: float, k: int, cpu0: dict[str, float],
                cpu1: dict[str, float], host0: Any, host1: Any, server_log: Any = None) -> dict[str, Any]:
        span = max(t1 - t0, 1e-9)
        processes = {who: 100.0 * (cpu1[who] - cpu0.get(who, cpu1[who])) / span for who in cpu1}
        busy = (sum(host1) - host1.idle) - (sum(host0) - host0.idle)
        total = sum(host1) - sum(host0)
        host = {"host_cpus": psutil.cpu_count(), "host_cpu_pct": 100.0 * busy / total if total > 0 else math.nan}
        return window_row(frame, t0, t1, index=k, cap=self.cap, processes=processes, host=host,
                          roles=self.adapter.capabilities.serving_roles, log=server_log, budget=self.budget)


class _LogCopy:
    """The engine's log copied into the phase as it grows (from where it was when the watch began)."""

    def __init__(self, source: Path, dest: Path):
        self.source, self.dest = Path(source), Path(dest)
        # the start-up lines (the server's arguments, its limits) and what follows from now
        self.offset = 0
        self.dest.write_bytes(b"")

    def pump(self) -> None:
        try:
            size = self.source.stat().st_size
        except OSError:
            return
        if size < self.offset:  # rotated: start again
            self.offset = 0
        if size == self.offset:
            return
        with self.source.open("rb") as src, self.dest.open("ab") as out:
            src.seek(self.offset)
            shutil.copyfileobj(src, out)
            self.offset = src.tell()


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def api_key_from_env() -> str | None:
    """The API key of the watched server, from ``GLM5_API_KEY`` (never from the command line)."""
    return os.environ.get("GLM5_API_KEY") or None
