"""One call measures a phase: server, GPU sampler, metrics scraper, sweep, stop, per-level power.

A *phase* is one server configuration measured under load (``baseline``, ``fix``...), kept in its
own folder of the run (:func:`glm5lib.rundir.phase_dir`). :func:`run_phase` measures one
:class:`~glm5lib.phase.plan.PhasePlan` (:func:`measure_phase` takes the plan's fields as keywords):

1. launches the server (the stand-in, SGLang, any engine from a command template) or attaches to
   one by URL, or takes a server that is already running;
2. starts :class:`~glm5lib.telemetry.GpuSampler` and :class:`~glm5lib.telemetry.MetricsScraper`;
3. runs :func:`~glm5lib.loadgen.run_sweep`;
4. stops the sampler, the scraper and (when it launched it) the server in every exit path, an
   error or Ctrl-C included;
5. returns a :class:`PhaseResult`: the sweep, GPU and metrics frames, power per level, the
   server's parsed log and ``/get_server_info``, the paths written, and notes on what could not
   be measured (no GPU telemetry, ``/metrics`` not served).

Everything is written to the phase folder as it arrives (``requests.jsonl`` per request,
``sweep.csv`` per level, ``gpu.csv``/``metrics.csv`` per sample), ``power.csv`` at the end, so a
measurement cut short keeps what it measured.

For an interactive panel, ``callback`` receives every sweep event (``level_start``, ``progress``
about once a second with ``gpu_power_w`` added, ``level_done``, ``stopped``, ``aborted``) from
the sweep's thread, and setting ``stop_event`` ends the measurement early (the level in progress
is dropped, finished levels are kept); call it from a worker thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from glm5lib import cpus as cpu_layout
from glm5lib import engines, http, rundir
from glm5lib.errors import ConfigError
from glm5lib.levels import POWER_COLUMNS, per_level
from glm5lib.loadgen import SweepSettings, load_sweep, run_sweep
from glm5lib.loadgen.settings import settings_from
from glm5lib.logs import ServerLog, parse_log
from glm5lib.phase.plan import (
    DEFAULT_CONCURRENCIES,
    EnginePlan,
    LoadPlan,
    PhasePlan,
    TelemetryOptions,
)
from glm5lib.phase.serving import launch_engine, save_server_info, stop_server
from glm5lib.telemetry import GPU_COLUMNS, METRICS_COLUMNS, GpuSampler, MetricsScraper

__all__ = ["KEYWORDS", "PhaseResult", "measure_phase", "run_phase"]

log = logging.getLogger(__name__)


@dataclass
class PhaseResult:
    """What :func:`measure_phase` measured; every frame is also on disk under ``folder``."""

    phase: str
    folder: Path
    base_url: str
    #: one row per finished level (``sweep.csv``)
    sweep: pd.DataFrame
    #: GPU samples (``gpu.csv``); empty when no GPU telemetry was available
    gpu: pd.DataFrame
    #: ``/metrics`` scrapes (``metrics.csv``); empty when the server serves none
    metrics: pd.DataFrame
    #: power, energy per token and PCIe bytes per token per level (``power.csv``)
    power: pd.DataFrame
    #: the server's parsed log (an empty ServerLog when it is not readable here)
    server_log: ServerLog
    #: ``/get_server_info`` with secrets masked ({} when the server has none)
    server_info: dict[str, Any] = field(default_factory=dict)
    #: the files written, by kind: sweep, requests, gpu, metrics, power, server_log, ...
    paths: dict[str, Path] = field(default_factory=dict)
    #: what could not be measured, and why ("/metrics not served: ...")
    notes: list[str] = field(default_factory=list)
    #: the level the measurement was stopped at through ``stop_event`` (None: it ran to the end)
    stopped_at: int | None = None
    #: the server object, when it is still running (a server passed in, or ``keep_running=True``)
    server: Any = None

    @property
    def peak(self) -> dict[str, float] | None:
        """The level with the highest output throughput: ``{"concurrency", "output_throughput"}``."""
        if self.sweep.empty or "output_throughput" not in self.sweep:
            return None
        tput = pd.to_numeric(self.sweep["output_throughput"], errors="coerce")
        if tput.isna().all():
            return None
        i = tput.idxmax()
        return {"concurrency": int(self.sweep.loc[i, "concurrency"]), "output_throughput": float(tput[i])}

    def __repr__(self) -> str:
        peak = self.peak
        best = f", peak {peak['output_throughput']:,.0f} tok/s at {peak['concurrency']}" if peak else ""
        notes = f", notes={self.notes}" if self.notes else ""
        return f"PhaseResult({self.phase!r}, {len(self.sweep)} levels{best}, folder={str(self.folder)!r}{notes})"


def _is_running_server(obj: Any) -> bool:
    return hasattr(obj, "base_url") and callable(getattr(obj, "stop", None))


def _power(gpu: pd.DataFrame, sweep: pd.DataFrame) -> pd.DataFrame:
    if sweep.empty:
        return pd.DataFrame(columns=POWER_COLUMNS)
    return per_level(gpu, sweep)


def _with_power(callback: Callable[[dict[str, Any]], None], sampler: GpuSampler | None):
    """The caller's callback, with the GPUs' latest mean power added to each progress event."""
    def relay(event: dict[str, Any]) -> None:
        if event.get("event") == "progress" and sampler is not None and sampler.running:
            watts = [row["power_w"] for row in sampler.latest().values()]
            watts = [w for w in watts if isinstance(w, (int, float)) and not np.isnan(w)]
            event = {**event, "gpu_power_w": float(np.mean(watts)) if watts else None}
        callback(event)
    return relay


def _with_marks(callback: Callable[[dict[str, Any]], None] | None, sampler: GpuSampler | None,
                scraper: MetricsScraper | None) -> Callable[[dict[str, Any]], None] | None:
    """The sweep's callback: histograms snapshotted at each level's start and end, then the caller's."""
    relay = _with_power(callback, sampler) if callback is not None else None
    if scraper is None or not scraper.enabled:
        return relay

    def marks(event: dict[str, Any]) -> None:
        if event.get("event") in ("level_start", "level_done"):
            scraper.mark()
        if relay is not None:
            relay(event)
    return marks


class _Measurement:
    """One phase being measured: the server, the telemetry threads, what they wrote, and the way
    out that stops them (and the server, when the phase owns it) whatever happened."""

    def __init__(self, plan: PhasePlan, phase: str, folder: Path, srv: Any, api_key: str | None):
        self.plan, self.phase, self.folder, self.srv, self.api_key = plan, phase, folder, srv, api_key
        self.notes: list[str] = []
        self.paths: dict[str, Path] = {"folder": folder, "sweep": folder / rundir.SWEEP,
                                       "requests": folder / rundir.REQUESTS,
                                       "server_log": folder / rundir.SERVER_LOG, "power": folder / rundir.POWER}
        self.sampler: GpuSampler | None = None
        self.scraper: MetricsScraper | None = None
        self.sweep: pd.DataFrame | None = None
        self.server_log: ServerLog | None = None
        self.gpu = pd.DataFrame(columns=GPU_COLUMNS)
        self.metrics = pd.DataFrame(columns=METRICS_COLUMNS)
        self.power = pd.DataFrame()
        self.stop_at_end = False

    def start_telemetry(self) -> None:
        options, folder = self.plan.telemetry, self.folder
        if options.gpu:
            self.sampler = GpuSampler(interval=options.gpu_interval, base_url=self.srv.base_url,
                                      out=folder / rundir.GPU, api_key=self.api_key).start()
            if self.sampler.available:
                self.paths["gpu"] = folder / rundir.GPU
            else:
                self.notes.append(f"no GPU telemetry: {self.sampler.reason}")
        if options.metrics:
            self.scraper = MetricsScraper(self.srv.base_url, interval=options.metrics_interval,
                                          out=folder / rundir.METRICS, api_key=self.api_key,
                                          metrics_flag=self.metrics_flag()).start()
            self.paths["metrics"] = folder / rundir.METRICS

    def metrics_flag(self) -> str | None:
        """The switch that makes this server serve ``/metrics``, from its engine's adapter (the engine
        whose log it writes, else the phase's backend); None where no registered engine says."""
        for name in (getattr(self.srv, "log_engine", None), self.plan.engine.backend):
            if isinstance(name, str) and name in engines.names():
                return engines.get(name).capabilities.metrics_flag
        return None

    def run_sweep(self, layout: cpu_layout.CpuLayout | None, progress: bool,
                  callback: Callable[[dict[str, Any]], None] | None, stop_event: threading.Event | None) -> None:
        settings = self.plan.load.settings
        if settings.model is None and getattr(self.srv, "model", None):
            settings = dataclasses.replace(settings, model=self.srv.model)
        with cpu_layout.pinned_here(layout.client if layout else None):
            self.sweep = run_sweep(
                self.srv.base_url, self.plan.load.concurrencies, settings=settings, run_dir=self.folder,
                api_key=self.api_key, server=self.srv, progress=progress,
                callback=_with_marks(callback, self.sampler, self.scraper), stop_event=stop_event,
            )

    # -- the way out: every exit path (an error, Ctrl-C, a stop) ends the threads, then the server
    def __enter__(self) -> _Measurement:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.ExitStack() as way_out:  # run last to first, each even when one before raised
            if self.stop_at_end:
                way_out.callback(self._stop_server)
            way_out.callback(self._write_power)
            way_out.callback(self._stop_scraper)
            way_out.callback(self._stop_sampler)

    def _stop_sampler(self) -> None:
        if self.sampler is not None:
            self.gpu = self.sampler.stop()

    def _stop_scraper(self) -> None:
        if self.scraper is not None:
            self.metrics = self.scraper.stop()
            if self.scraper.enabled is False and self.scraper.reason:
                self.notes.append(f"/metrics not served: {self.scraper.reason}")

    def _write_power(self) -> None:
        try:
            if self.sweep is None:
                self.sweep = load_sweep(self.folder)  # the sweep raised: what it finished before
            self.power = _power(self.gpu, self.sweep)
            self.power.to_csv(self.folder / rundir.POWER, index=False)
        except (OSError, ValueError, KeyError) as exc:  # the file, a sweep.csv pandas cannot read, a missing column
            log.warning("power per level not written for phase %s: %s", self.phase, exc)

    def _stop_server(self) -> None:
        self.server_log = stop_server(self.srv, self.folder)

    def result(self, info: dict[str, Any]) -> PhaseResult:
        server_log = self.server_log if self.server_log is not None else _live_log(self.srv)
        sweep = self.sweep
        stopped_at = sweep.attrs.get("stopped_at")
        if stopped_at is not None:
            self.notes.append(f"stopped on request at level {stopped_at}; {len(sweep)} finished level(s) kept")
        for note in self.notes:
            log.info("phase %s: %s", self.phase, note)
        if self.plan.telemetry.metrics and "metrics" in self.paths and self.metrics.empty:
            self.paths.pop("metrics")
        return PhaseResult(
            phase=self.phase, folder=self.folder, base_url=self.srv.base_url, sweep=sweep, gpu=self.gpu,
            metrics=self.metrics, power=self.power, server_log=server_log, server_info=info or {},
            paths=self.paths, notes=self.notes, stopped_at=stopped_at,
            server=None if self.stop_at_end else self.srv,
        )


def _open_server(plan: PhasePlan, server: Any, folder: Path, layout: cpu_layout.CpuLayout | None,
                 api_key: str | None) -> tuple[Any, dict[str, Any]]:
    """(the phase's server, its ``/get_server_info``): launched or attached per ``plan.engine``, or
    ``server`` when one is running already (its info and configuration recorded in ``folder``)."""
    if server is None:
        with cpu_layout.using(layout):
            srv = launch_engine(plan.engine, folder, api_key=api_key)
        return srv, _read_json(folder / rundir.SERVER_INFO)
    info = save_server_info(server.base_url, folder, api_key=api_key) or {}
    cfg = getattr(server, "config", None)
    if cfg is not None and not (folder / rundir.CONFIG).exists():
        cfg.save(folder / rundir.CONFIG)
    return server, info


def run_phase(
    plan: PhasePlan,
    run_dir: str | Path,
    phase: str = "baseline",
    *,
    server: Any = None,
    api_key: str | None = None,
    progress: bool = True,
    callback: Callable[[dict[str, Any]], None] | None = None,
    stop_event: threading.Event | None = None,
) -> PhaseResult:
    """Measure ``plan`` into ``<run_dir>/<phase>/`` and return a :class:`PhaseResult`.

    The server is ``server`` when one is running already (a :mod:`glm5lib.server` object, e.g. a
    panel's; measured as it is and left running unless ``plan.keep_running`` is False), else the
    one ``plan.engine`` launches or attaches to (stopped at the end unless ``plan.keep_running``).
    ``api_key`` is sent to the server and masked in what is written; ``progress`` shows tqdm bars;
    ``callback`` gets each sweep event on the sweep's thread (``progress`` events carry
    ``gpu_power_w``, the GPUs' latest mean power); setting ``stop_event`` ends the measurement
    early: the level in progress is dropped, the finished ones are returned with ``stopped_at``.

    The plan was checked when it was made; raises what the steps raise (``ServerLaunchError``,
    :class:`~glm5lib.errors.SweepAbortedError` when the server dies: the finished levels, their
    power and the log are on disk by then).
    """
    if not isinstance(plan, PhasePlan):
        raise ConfigError(f"plan={plan!r} must be a PhasePlan", field="plan", valid=["PhasePlan"])
    if server is not None and not _is_running_server(server):
        raise ConfigError(f"server={server!r} is not a running server (one with base_url and stop())",
                          field="server", valid=["a glm5lib.server object", "None"])
    if server is None and plan.engine is None:
        raise ConfigError("the plan has no engine: give PhasePlan(engine=EnginePlan(...)) or a running server",
                          field="engine", valid=["EnginePlan", "server="])
    launched = server is None
    http.check_api_key(api_key, "the API key (GLM5_API_KEY)")
    layout = cpu_layout.layout(plan.cpus)
    folder = rundir.phase_dir(run_dir, phase)
    srv, info = _open_server(plan, server, folder, layout, api_key)
    # a server launched with a key of its configuration's own asks for that key
    run = _Measurement(plan, phase, folder, srv, api_key or getattr(srv, "api_key", None))
    run.stop_at_end = launched if plan.keep_running is None else not plan.keep_running
    if layout is not None:
        run.notes.append(f"CPU layout {layout.spec!r}: " + (layout.describe() if launched else
                         f"load generator on CPU {cpu_layout.format_cpus(layout.client)} "
                         "(the server was already running)"))
    with run:
        run.start_telemetry()
        run.run_sweep(layout, progress, callback, stop_event)
    return run.result(info)


# --------------------------------------------------------------------------------------------
# the keyword form
# --------------------------------------------------------------------------------------------
#: The defaults of the keyword form, read from the plan's parts (their one source).
_ENGINE = EnginePlan()
_TELEMETRY = TelemetryOptions()
_SWEEP = {f.name: f.default for f in dataclasses.fields(SweepSettings)}
_ENGINE_FIELDS = tuple(f.name for f in dataclasses.fields(EnginePlan) if f.name != "config")
_TELEMETRY_FIELDS = tuple(f.name for f in dataclasses.fields(TelemetryOptions))
#: The sweep settings measure_phase has always taken by name; ``sweep_options`` (the older way to
#: pass the others) may not name them.
_BY_NAME = ("api", "input_len", "output_len", "requests_per_level", "duration", "warmup")
_OWN = ("run_dir", "server", "api_key", "progress", "callback", "stop_event", "concurrencies", "settings")


def _differs(name: str, value: Any) -> bool:
    default = _SWEEP[name]
    return value is not default and value != default


def _load_plan(given: Mapping[str, Any]) -> LoadPlan:
    """The sweep of the keyword form: ``settings``, or the setting keywords given, plus
    ``sweep_options``; one field set two ways is refused."""
    options = dict(given["sweep_options"] or {})
    named = {n: given[n] for n in SweepSettings.field_names() if n != "model" and _differs(n, given[n])}
    extra = [name for name in SweepSettings.field_names() if name not in _BY_NAME]
    clash = sorted(set(options) & {*_BY_NAME, *named, *_OWN})
    if clash:
        raise ConfigError(f"sweep_options {clash} are measure_phase's own arguments: pass them directly",
                          field="sweep_options", valid=extra)
    unknown = sorted(set(options) - set(extra))
    if unknown:
        raise ConfigError(f"sweep_options {unknown} are not sweep settings", field="sweep_options", valid=extra)
    return LoadPlan(given["concurrencies"], settings_from(given["settings"], {**named, **options}))


def _plan(given: Mapping[str, Any]) -> PhasePlan:
    """The :class:`PhasePlan` of :func:`measure_phase`'s arguments, each part checked as it is made."""
    load = _load_plan(given)
    telemetry = TelemetryOptions(**{n: given[n] for n in _TELEMETRY_FIELDS})
    engine = None
    if not _is_running_server(given["server"]):
        engine = EnginePlan(config=given["server"], **{n: given[n] for n in _ENGINE_FIELDS})
    return PhasePlan(engine=engine, load=load, telemetry=telemetry, cpus=given["cpus"],
                     keep_running=given["keep_running"])


#: measure_phase's keywords beside its own, each a field of the plan's parts, with its default
#: read from that part (their one source)
KEYWORDS: dict[str, Any] = {
    **{n: getattr(_ENGINE, n) for n in _ENGINE_FIELDS},
    "concurrencies": DEFAULT_CONCURRENCIES, "settings": None, "sweep_options": None,
    **{n: _SWEEP[n] for n in SweepSettings.field_names() if n != "model"},
    **{n: getattr(_TELEMETRY, n) for n in _TELEMETRY_FIELDS},
    "cpus": None, "keep_running": None,
}


def measure_phase(
    server: Any,
    run_dir: str | Path,
    phase: str = "baseline",
    *,
    api_key: str | None = None,
    progress: bool = True,
    callback: Callable[[dict[str, Any]], None] | None = None,
    stop_event: threading.Event | None = None,
    **fields: Any,
) -> PhaseResult:
    """:func:`run_phase` with the plan's fields as keywords: measure one phase into
    ``<run_dir>/<phase>/`` and return a :class:`PhaseResult`.

    ``fields`` are the fields of :class:`~glm5lib.phase.plan.PhasePlan`'s parts (:data:`KEYWORDS`
    names them with their defaults): ``server`` is either a running server (a :mod:`glm5lib.server`
    object, e.g. a panel's: measured as it is, left running unless ``keep_running=False``) or the
    configuration an :class:`~glm5lib.phase.plan.EnginePlan` launches (None for
    ``backend="command"`` or a URL; stopped at the end unless ``keep_running=True``) with
    ``backend``, ``sim_profile``, ``ready_timeout``, ``extra_args``, ``command``,
    ``command_changes``, ``model`` (the model a server is launched with) and ``attach_log``; the
    sweep is ``concurrencies`` and one :class:`~glm5lib.loadgen.SweepSettings` as ``settings`` or
    its fields as keywords (the settings' ``model`` through ``settings`` or ``sweep_options``
    only), ``sweep_options`` (e.g. ``{"token_ids": False, "resume": False}``) still passing the
    fields other than ``api`` to ``warmup``; the telemetry is ``gpu``/``gpu_interval`` and
    ``metrics``/``metrics_interval``; ``cpus`` and ``keep_running`` are the plan's own.
    ``api_key``, ``progress``, ``callback`` and ``stop_event`` go to :func:`run_phase`. A name
    that is none of these, and every value, is refused before a server is started
    (:class:`~glm5lib.errors.ConfigError` naming the field, and the nearest names for a misspelt
    one).

    A panel whose Launch already started the server sweeps with telemetry like this (in its sweep
    thread; Stop sets the event, and the server stays up for the next sweep)::

        result = measure_phase(panel.server, panel.run_dir, phase, concurrencies=levels,
                               input_len=..., output_len=..., duration=..., api_key=panel.api_key,
                               progress=False, callback=panel._on_event, stop_event=panel._stop,
                               resume=False)
    """
    unknown = sorted(set(fields) - set(KEYWORDS))
    if unknown:
        near = difflib.get_close_matches(unknown[0], list(KEYWORDS), n=3)
        raise ConfigError(f"measure_phase takes no {unknown[0]!r}"
                          + (f" (did you mean {', '.join(near)}?)" if near else ""),
                          field=unknown[0], valid=list(KEYWORDS))
    plan = _plan({**KEYWORDS, **fields, "server": server})
    running = server if plan.engine is None else None
    return run_phase(plan, run_dir, phase, server=running, api_key=api_key, progress=progress,
                     callback=callback, stop_event=stop_event)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _live_log(srv: Any) -> ServerLog:
    """The parsed log so far of a server left running (an empty ServerLog when unreadable)."""
    try:
        parsed = srv.logs()
    except Exception as exc:  # a boundary: any server's reader (an engine's own log adapter) may fail its own way
        log.warning("the log of %s could not be read (%s)", getattr(srv, "base_url", srv), exc)
        parsed = None
    return parsed if parsed is not None else parse_log("")
