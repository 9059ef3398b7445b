"""One call measures a phase: server, GPU sampler, metrics scraper, sweep, stop, per-level power.

A *phase* is one server configuration measured under load (``baseline``, ``fix``...), kept in its
own folder of the run (:func:`glm5lib.rundir.phase_dir`). :func:`measure_phase` does all of it:

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

The lower-level steps are public too: :func:`start_server`, :func:`stop_server`,
:func:`phase_log`, :func:`load_command`, :func:`save_server_info`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from glm5lib import cpus as cpu_layout
from glm5lib import engines, http, rundir
from glm5lib import server as server_mod
from glm5lib.errors import ConfigError
from glm5lib.levels import POWER_COLUMNS, per_level
from glm5lib.loadgen import SweepSettings, load_sweep, run_sweep
from glm5lib.loadgen.settings import settings_from, settings_keywords, sweep_levels
from glm5lib.logs import ServerLog, parse_log
from glm5lib.telemetry import GPU_COLUMNS, METRICS_COLUMNS, GpuSampler, MetricsScraper

__all__ = [
    "BACKENDS",
    "PhaseResult",
    "load_command",
    "measure_phase",
    "phase_log",
    "save_server_info",
    "start_server",
    "stop_server",
]

log = logging.getLogger(__name__)

#: Values of a notebook's ``BACKEND`` parameter (the registered engines), besides an http(s)
#: URL to attach to.
BACKENDS = tuple(engines.names())


# --------------------------------------------------------------------------------------------
# the server of a phase
# --------------------------------------------------------------------------------------------
def _check_backend(backend: str) -> str:
    # the registry as it is now: an engine registered from outside glm5lib is a backend too
    if backend in engines.names() or str(backend).startswith(("http://", "https://")):
        return backend
    choices = ", ".join(f"{name!r} ({engines.get(name).description})" for name in engines.names())
    raise ConfigError(
        f"BACKEND {backend!r} is not valid: use {choices} or the http(s) URL of a running server to attach to",
        field="BACKEND",
        valid=[*engines.names(), "http://HOST:PORT"],
    )


def save_server_info(base_url: str, folder: str | Path, *, api_key: str | None = None) -> dict | None:
    """Write the server's ``/get_server_info`` (or ``/server_info``), secrets masked, to
    ``server_info.json``; returns it (None when the server answers neither)."""
    info = http.server_info(base_url, api_key=api_key, timeout=10.0)
    if not info:
        log.warning("%s answers neither /get_server_info nor /server_info; no server_info.json", base_url)
        return None
    (Path(folder) / rundir.SERVER_INFO).write_text(json.dumps(info, indent=2, default=str) + "\n")
    return info


def start_server(
    backend: str,
    config: engines.EngineConfig | None,
    folder: str | Path,
    *,
    sim_profile: str | None = None,
    ready_timeout: float = 600.0,
    api_key: str | None = None,
    extra_args: Sequence[str] = (),
    command: Sequence[str] | None = None,
    command_changes: Mapping[str, Any] | None = None,
    model: str | None = None,
    attach_log: str | Path | None = None,
):
    """Launch (a registered engine, :func:`glm5lib.engines.names`: ``sim``, ``sglang``, ``vllm``
    from ``config``; ``command``: any engine from the argv template ``command``, see
    :func:`glm5lib.server.launch_command`) or attach to (a URL) the server of one phase.

    The server log goes to ``<folder>/server.log``; the configuration to ``config.json`` and
    the server's own ``/get_server_info`` to ``server_info.json`` (secrets masked). When
    attaching, ``attach_log`` is that server's log file if it is readable from here. Returns the
    :mod:`glm5lib.server` object (``Server`` or ``AttachedServer``); end the phase with
    :func:`stop_server`.
    """
    backend = _check_backend(backend)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if backend in engines.names():
        adapter = engines.get(backend)
        srv = adapter.launch(engines.LaunchRequest(
            config=config, log_path=folder / rundir.SERVER_LOG, ready_timeout=ready_timeout, api_key=api_key,
            extra_args=list(extra_args), command=command, command_changes=command_changes, model=model,
            sim_profile=sim_profile,
        ))
        if adapter.capabilities.launches_from_config:
            config.save(folder / rundir.CONFIG)
        if isinstance(srv, server_mod.CommandServer):
            (folder / rundir.COMMAND).write_text(json.dumps(srv.info(), indent=2, default=str) + "\n")
    else:
        srv = engines.attach(backend, api_key=api_key, log_path=attach_log or None)
        cfg = getattr(srv, "config", None)
        if cfg is not None:
            cfg.save(folder / rundir.CONFIG)
    try:
        save_server_info(srv.base_url, folder, api_key=api_key)
    except BaseException:
        srv.stop()
        raise
    return srv


def stop_server(srv, folder: str | Path) -> ServerLog:
    """End a phase: stop a launched server (an attached one is left running) and return its
    parsed log (an empty ServerLog when the log is not readable here).

    An attached server's log is copied into ``<folder>/server.log`` so the run folder holds
    the evidence either way. The server is stopped even when its log cannot be read.
    """
    target = Path(folder) / rundir.SERVER_LOG
    try:
        server_log = srv.logs()
    finally:
        srv.stop()
    source = getattr(srv, "log_path", None)
    if source is not None and Path(source).exists() and Path(source).resolve() != target.resolve():
        shutil.copyfile(source, target)
    if server_log is None:
        log.warning("no server log readable for %s: scheduler evidence is missing from this phase",
                    getattr(srv, "base_url", srv))
        return parse_log("")
    return server_log


def phase_log(folder: str | Path) -> ServerLog:
    """The parsed ``server.log`` of a phase folder; an empty ServerLog when there is none
    (an attached server whose log was not readable)."""
    path = Path(folder) / rundir.SERVER_LOG
    if not path.exists():
        log.warning("%s has no server log; scheduler evidence is missing", folder)
        return parse_log("")
    return parse_log(path)


def load_command(folder: str | Path) -> dict:
    """The ``command.json`` a ``command`` backend phase wrote (argv template, argv, model, engine)."""
    path = Path(folder) / rundir.COMMAND
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: that phase was not launched with BACKEND 'command'",
                          field="BASELINE_PHASE") from None


# --------------------------------------------------------------------------------------------
# one call
# --------------------------------------------------------------------------------------------
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


#: The sweep settings measure_phase has always taken by name; ``sweep_options`` (the older way to
#: pass the others) may not name them.
_BY_NAME = ("api", "input_len", "output_len", "requests_per_level", "duration", "warmup")


@settings_keywords(after="concurrencies")
def measure_phase(
    server: Any,
    run_dir: str | Path,
    phase: str = "baseline",
    *,
    settings: SweepSettings | None = None,
    backend: str = "sim",
    sim_profile: str | None = None,
    ready_timeout: float = 600.0,
    extra_args: Sequence[str] = (),
    command: Sequence[str] | None = None,
    command_changes: Mapping[str, Any] | None = None,
    model: str | None = None,
    attach_log: str | Path | None = None,
    api_key: str | None = None,
    concurrencies: Sequence[int] | int = (1, 64, 256),
    sweep_options: Mapping[str, Any] | None = None,
    gpu: bool = True,
    gpu_interval: float = 0.1,
    metrics: bool = True,
    metrics_interval: float = 1.0,
    progress: bool = True,
    callback: Callable[[dict[str, Any]], None] | None = None,
    stop_event: threading.Event | None = None,
    keep_running: bool | None = None,
    cpus: str | None = None,
    **sweep_settings: Any,
) -> PhaseResult:
    """Measure one phase into ``<run_dir>/<phase>/`` and return a :class:`PhaseResult`.

    ``server`` is what to measure:

    - a :class:`~glm5lib.engines.sglang.config.ServerConfig` (or None with ``backend="command"`` or a URL):
      the server is started with :func:`start_server` on ``backend`` (``"sim"``, ``"sglang"``,
      ``"command"`` with ``command``, or an ``http(s)://`` URL to attach to, ``attach_log`` being
      its log if readable here), and stopped at the end unless ``keep_running=True``;
    - a running server (a :mod:`glm5lib.server` object, e.g. from :func:`start_server` or a
      panel's Launch): it is measured as it is and left running unless ``keep_running=False``.

    The sweep: ``concurrencies``, and one :class:`~glm5lib.loadgen.SweepSettings` as ``settings``
    or its fields as keywords (``api``, ``input_len``, ``output_len``, ``requests_per_level``,
    ``duration``, ``warmup``, ``token_ids``, ``resume``...; the settings' ``model`` through
    ``settings`` or ``sweep_options`` only, since ``model`` here is the one a server is launched
    with), checked before a server is started; ``sweep_options`` (e.g. ``{"token_ids": False,
    "resume": False}``) still passes the fields other than ``api`` to ``warmup``. ``progress``
    shows tqdm bars. ``gpu``/``metrics`` turn the sampler (every ``gpu_interval`` s) and the
    scraper (every ``metrics_interval`` s) on or off; when either has nothing to read, the phase
    is measured without it and ``notes`` says why.

    Widgets: ``callback`` gets each sweep event on the sweep's thread (``progress`` events carry
    ``gpu_power_w``, the GPUs' latest mean power); ``stop_event`` (a ``threading.Event``) ends
    the measurement early: the level in progress is dropped, the finished ones are returned
    with ``stopped_at`` set. Run it in a worker thread to keep a notebook responsive. A panel
    whose Launch already started the server sweeps with telemetry like this (in its sweep
    thread; Stop sets the event, and the server stays up for the next sweep)::

        result = measure_phase(panel.server, panel.run_dir, phase, concurrencies=levels,
                               input_len=..., output_len=..., duration=..., api_key=panel.api_key,
                               progress=False, callback=panel._on_event, stop_event=panel._stop,
                               resume=False)
        panel.sweep = result.sweep  # and result.power, result.gpu for live power

    ``cpus`` keeps the server and the load generator on separate cores of a small host
    (:mod:`glm5lib.cpus`: ``"split"``, ``"0-5/6,7"``; None: the ``GLM5_CPUS`` environment
    variable's layout, if any): a server launched here is pinned to its cores, and the sweep runs
    with this process on the client's. ``notes`` names the layout.

    Raises what the steps raise (:class:`~glm5lib.errors.ConfigError` for bad settings before
    anything starts, ``ServerLaunchError``, :class:`~glm5lib.errors.SweepAbortedError` when the
    server dies: the finished levels, their power and the log are on disk by then).
    """
    options = dict(sweep_options or {})
    extra = [name for name in SweepSettings.field_names() if name not in _BY_NAME]
    clash = sorted(set(options) & {*_BY_NAME, *sweep_settings, "run_dir", "server", "api_key", "progress", "callback",
                                   "stop_event", "concurrencies", "settings"})
    if clash:
        raise ConfigError(f"sweep_options {clash} are measure_phase's own arguments: pass them directly",
                          field="sweep_options", valid=extra)
    unknown = sorted(set(options) - set(extra))
    if unknown:
        raise ConfigError(f"sweep_options {unknown} are not sweep settings", field="sweep_options", valid=extra)
    # every setting is checked before a server is started for it
    settings = settings_from(settings, {**sweep_settings, **options})
    sweep_levels(concurrencies, settings)
    for name, value in (("gpu_interval", gpu_interval), ("metrics_interval", metrics_interval)):
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
            raise ConfigError(f"{name}={value!r} must be a positive number of seconds", field=name)
    layout = cpu_layout.layout(cpus)
    folder = rundir.phase_dir(run_dir, phase)
    launched = not _is_running_server(server)
    if launched:
        if server is not None and not isinstance(server, engines.config_types()):
            raise ConfigError(
                f"server={server!r} is neither a ServerConfig to launch (any engine's: "
                f"{', '.join(t.__name__ for t in engines.config_types())}) nor a running server",
                field="server", valid=[*(t.__name__ for t in engines.config_types()), "a glm5lib.server object",
                                       "None (command or URL backend)"])
        with cpu_layout.using(layout):
            srv = start_server(backend, server, folder, sim_profile=sim_profile, ready_timeout=ready_timeout,
                               api_key=api_key, extra_args=extra_args, command=command,
                               command_changes=command_changes, model=model, attach_log=attach_log)
        info = _read_json(folder / rundir.SERVER_INFO)
    else:
        srv = server
        info = save_server_info(srv.base_url, folder, api_key=api_key) or {}
        cfg = getattr(srv, "config", None)
        if cfg is not None and not (folder / rundir.CONFIG).exists():
            cfg.save(folder / rundir.CONFIG)
    stop_at_end = launched if keep_running is None else not keep_running
    notes: list[str] = []
    if layout is not None:
        notes.append(f"CPU layout {layout.spec!r}: " + (layout.describe() if launched else
                     f"load generator on CPU {cpu_layout.format_cpus(layout.client)} (the server was already running)"))
    paths = {"folder": folder, "sweep": folder / rundir.SWEEP, "requests": folder / rundir.REQUESTS,
             "server_log": folder / rundir.SERVER_LOG, "power": folder / rundir.POWER}
    sampler: GpuSampler | None = None
    scraper: MetricsScraper | None = None
    sweep: pd.DataFrame | None = None
    server_log: ServerLog | None = None
    gpu_frame = pd.DataFrame(columns=GPU_COLUMNS)
    metrics_frame = pd.DataFrame(columns=METRICS_COLUMNS)
    power = pd.DataFrame()
    try:
        if gpu:
            sampler = GpuSampler(interval=gpu_interval, base_url=srv.base_url, out=folder / rundir.GPU,
                                 api_key=api_key).start()
            if sampler.available:
                paths["gpu"] = folder / rundir.GPU
            else:
                notes.append(f"no GPU telemetry: {sampler.reason}")
        if metrics:
            scraper = MetricsScraper(srv.base_url, interval=metrics_interval, out=folder / rundir.METRICS,
                                     api_key=api_key).start()
            paths["metrics"] = folder / rundir.METRICS
        if settings.model is None and getattr(srv, "model", None):
            settings = dataclasses.replace(settings, model=srv.model)
        with cpu_layout.pinned_here(layout.client if layout else None):
            sweep = run_sweep(
                srv.base_url, concurrencies, settings=settings, run_dir=folder, api_key=api_key, server=srv,
                progress=progress, callback=_with_marks(callback, sampler, scraper),
                stop_event=stop_event,
            )
    finally:
        # every exit path: an error, Ctrl-C, a stop: the threads end, the server goes
        try:
            if sampler is not None:
                gpu_frame = sampler.stop()
        finally:
            try:
                if scraper is not None:
                    metrics_frame = scraper.stop()
                    if scraper.enabled is False and scraper.reason:
                        notes.append(f"/metrics not served: {scraper.reason}")
            finally:
                try:
                    if sweep is None:
                        sweep = load_sweep(folder)  # the sweep raised: what it finished before
                    power = _power(gpu_frame, sweep)
                    power.to_csv(folder / rundir.POWER, index=False)
                except Exception as exc:  # the way out must still stop the server
                    log.warning("power per level not written for phase %s: %s", phase, exc)
                finally:
                    if stop_at_end:
                        server_log = stop_server(srv, folder)
    if server_log is None:
        server_log = _live_log(srv)
    stopped_at = sweep.attrs.get("stopped_at")
    if stopped_at is not None:
        notes.append(f"stopped on request at level {stopped_at}; {len(sweep)} finished level(s) kept")
    for note in notes:
        log.info("phase %s: %s", phase, note)
    if metrics and "metrics" in paths and metrics_frame.empty:
        paths.pop("metrics")
    return PhaseResult(
        phase=phase, folder=folder, base_url=srv.base_url, sweep=sweep, gpu=gpu_frame, metrics=metrics_frame,
        power=power, server_log=server_log, server_info=info or {}, paths=paths, notes=notes,
        stopped_at=stopped_at, server=None if stop_at_end else srv,
    )


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
    except Exception as exc:
        log.warning("the log of %s could not be read (%s)", getattr(srv, "base_url", srv), exc)
        parsed = None
    return parsed if parsed is not None else parse_log("")
