"""An ipywidgets panel for JupyterLab: pick a config, launch/stop the server, run a sweep live.

``ServerPanel(run_dir)`` shows, on the left, a config picker (the shipped configs of
``data/configs/`` or a JSON path), the backend (``sim``, ``sglang`` or a URL to attach to), the
sweep settings, Launch / Sweep / Stop / Stop server buttons, a tqdm progress bar and a status
line; on the right, a throughput plot (SVG, so it stays sharp at any size, and sized to its box)
redrawn while the sweep runs. The sweep runs in a background thread, so the notebook stays
responsive: Stop ends the sweep at once ("stopped by the user") and keeps the server for the next
sweep; Stop server stops the server (and a sweep in progress). Each sweep is one
:func:`glm5lib.phase.run_phase` on the running server, GPU telemetry included; results go to
``<run_dir>/<phase>/`` (``sweep.csv``, ``requests.jsonl``, ``gpu.csv``, ``power.csv``) like the
notebooks' own, each sweep's files replacing the last's. The plot keeps every sweep of the
session (:attr:`ServerPanel.history`), so a change and a new sweep read against the sweeps before.
The progress bar's line shows only the running level's own numbers: it is cleared when a level
starts, when a sweep ends, on Launch and on Stop server.

Every button has a method doing the same (:meth:`ServerPanel.launch`,
:meth:`~ServerPanel.start_sweep`, :meth:`~ServerPanel.stop_sweep`, :meth:`~ServerPanel.stop`),
so the panel works, and is tested, without a browser.
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import threading
import time
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pandas as pd

from glm5lib import engines, plots, rundir, workbook
from glm5lib.engines.sglang.config import ServerConfig, shipped_configs
from glm5lib.errors import ConfigError, Glm5Error
from glm5lib.loadgen import SweepSettings
from glm5lib.phase import DEFAULT_CONCURRENCIES, LoadPlan, PhasePlan, TelemetryOptions, run_phase

__all__ = ["PANEL_LOAD", "ServerPanel", "WatchDisplay"]

log = logging.getLogger(__name__)


def _svg(fig) -> bytes:
    """The figure as SVG, its fixed size removed so the page sizes it to its box."""
    import io
    import re

    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # text as text: small, sharp, searchable
        fig.savefig(buf, format="svg")
    text = buf.getvalue().decode("utf-8")
    text = re.sub(r'(<svg[^>]*?) width="[^"]*pt" height="[^"]*pt"', r'\1 width="100%"', text, count=1)
    return text.encode("utf-8")


#: The plot's size in inches (the SVG keeps its proportions in the page).
_PLOT_SIZE = (6.4, 3.9)


def _parse_levels(text: str) -> list[int]:
    try:
        value = ast.literal_eval(text.strip() if text.strip().startswith("[") else f"[{text}]")
        levels = [int(v) for v in value]
    except (ValueError, SyntaxError, TypeError):
        levels = []
    if not levels or any(v < 1 for v in levels):
        raise ConfigError(
            f"concurrency levels {text!r} are not valid: give positive integers, e.g. 1, 64, 256",
            field="concurrencies",
        )
    return levels


#: The panel's first sweep: the default levels, short levels of shorter answers (an exploration,
#: not a measurement to report), the other settings the sweep's own defaults.
PANEL_LOAD = LoadPlan.of(DEFAULT_CONCURRENCIES, output_len=128, duration=5.0)


def _panel_load(load: LoadPlan | None, fields: dict[str, Any]) -> LoadPlan:
    """``load``, or :data:`PANEL_LOAD` with ``fields`` (``concurrencies`` and setting fields) changed."""
    if load is not None and fields:
        raise ConfigError(f"load= and the keywords {sorted(fields)} both set the panel's sweep: use one or the other",
                          field="load", valid=["load", *sorted(fields)])
    if load is not None:
        return load
    levels = fields.pop("concurrencies", PANEL_LOAD.concurrencies)
    unknown = sorted(set(fields) - set(SweepSettings.field_names()))
    if unknown:
        raise ConfigError(f"{unknown} are not sweep settings", field=unknown[0],
                          valid=["concurrencies", *SweepSettings.field_names()])
    return LoadPlan(levels, dataclasses.replace(PANEL_LOAD.settings, **fields))


class ServerPanel:
    """Launch/stop a server and run concurrency sweeps with live progress, in one panel."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        config: str = "glm5-baseline",
        backend: str = "sim",
        phase: str = "panel",
        load: LoadPlan | None = None,
        sim_profile: str | None = None,
        api_key: str | None = None,
        ready_timeout: float = 1800.0,
        **load_fields: Any,
    ):
        """A panel measuring into ``<run_dir>/<phase>/``. The sweep's first settings are ``load``
        (default :data:`PANEL_LOAD`) or, as keywords, ``concurrencies`` and the
        :class:`~glm5lib.loadgen.SweepSettings` fields that differ from :data:`PANEL_LOAD`'s
        (``input_len=32, duration=2``); the panel's fields change the levels, the lengths and the
        level's seconds."""
        self.run_dir = Path(run_dir)
        self.sim_profile = sim_profile
        self.api_key = api_key
        self.ready_timeout = ready_timeout
        self.load = _panel_load(load, load_fields)
        self.server: Any = None
        self.sweep: pd.DataFrame | None = None
        self.error: BaseException | None = None
        self.events: list[dict] = []
        #: every sweep of the session that measured a level: ``(label, frame)``, oldest first
        self.history: list[tuple[str, pd.DataFrame]] = []
        self._rows: list[dict] = []
        self._live: dict[int, float] = {}
        self._thread: threading.Thread | None = None
        self._active = False  # a sweep runs (cleared by its thread before it redraws the buttons)
        self._user_stop = threading.Event()
        self._lock = threading.Lock()
        self._level: int | None = None
        self._label = ""
        self.power: pd.DataFrame | None = None
        self.plot_title = ""
        self._make_fields(config, backend, phase)
        self._make_buttons()
        self._make_layout()

    def _make_fields(self, config: str, backend: str, phase: str) -> None:
        """The panel's inputs: config, backend, phase and the sweep's settings (from ``self.load``)."""
        names = list(shipped_configs())
        wide = widgets.Layout(width="100%")
        settings = self.load.settings
        self.config = widgets.Combobox(value=config, options=names, description="config",
                                       placeholder="shipped name or JSON path", ensure_option=False, layout=wide)
        # the engines a shipped configuration launches: those taking the default engine's configuration
        own = engines.get(engines.DEFAULT_ENGINE).config_type
        backends = [a.name for a in engines.adapters() if own is not None and a.config_type is own]
        self.backend = widgets.Combobox(value=backend, options=backends, description="backend",
                                        placeholder=f"{', '.join(backends)} or http://host:port", layout=wide)
        self.phase = widgets.Text(value=phase, description="phase", layout=wide)
        levels = self.load.concurrencies
        levels = [levels] if isinstance(levels, int) else levels
        self.concurrencies = widgets.Text(value=", ".join(str(c) for c in levels), description="levels",
                                          layout=wide)
        self.input_len = widgets.BoundedIntText(value=settings.input_len, min=1, max=1_000_000,
                                                description="input len", layout=wide)
        self.output_len = widgets.BoundedIntText(value=settings.output_len, min=1, max=1_000_000,
                                                 description="output len", layout=wide)
        duration = settings.duration if settings.duration is not None else PANEL_LOAD.settings.duration
        self.duration = widgets.BoundedFloatText(value=duration, min=0.5, max=36_000, description="level s",
                                                 layout=wide)

    def _make_buttons(self) -> None:
        """The buttons, the status line, the plot and the progress bar, wired to the actions."""
        from tqdm.notebook import tqdm

        button = widgets.Layout(width="auto", min_width="6.5em")
        self.launch_button = widgets.Button(description="Launch", button_style="primary", icon="play", layout=button)
        self.sweep_button = widgets.Button(description="Sweep", button_style="success", icon="line-chart",
                                           disabled=True, layout=button)
        self.stop_button = widgets.Button(description="Stop", button_style="warning", icon="pause", disabled=True,
                                          tooltip="stop the sweep; the server keeps running", layout=button)
        self.server_button = widgets.Button(description="Stop server", button_style="danger", icon="stop",
                                            disabled=True, tooltip="stop the server (and a sweep in progress)",
                                            layout=button)
        # room for a few lines, so a longer message does not move what is below the panel
        self.status = widgets.HTML(value="no server", layout=widgets.Layout(width="100%", min_height="5.5em"))
        self.placeholder = widgets.HTML(
            value="<i>No sweep yet: press Launch, then Sweep; the throughput plot appears here.</i>")
        # SVG: sharp at any size; the page gives it its box's width and keeps its proportions.
        self.plot = widgets.Image(format="svg+xml", layout=widgets.Layout(
            display="none", width="100%", height="auto", max_height="60vh", object_fit="contain"))
        # Stable hooks for the page (browser tests, user CSS).
        self.status.add_class("glm5-panel-status")
        self.placeholder.add_class("glm5-panel-placeholder")
        self.plot.add_class("glm5-panel-plot")
        self.bar = tqdm(total=0, desc="no sweep", unit="level", display=False, leave=True, disable=False)
        self.bar.container.add_class("glm5-panel-bar")
        self.launch_button.on_click(lambda _b: self._guard(self.launch))
        self.sweep_button.on_click(lambda _b: self._guard(self.start_sweep))
        self.stop_button.on_click(lambda _b: self._guard(self.stop_sweep))
        self.server_button.on_click(lambda _b: self._guard(self.stop))

    def _make_layout(self) -> None:
        """The controls on the left, the plot's box on the right (``self.widget``)."""
        controls = widgets.VBox(
            [self.config, self.backend, self.phase, self.concurrencies, self.input_len, self.output_len,
             self.duration,
             widgets.HBox([self.launch_button, self.sweep_button, self.stop_button, self.server_button],
                          layout=widgets.Layout(flex_flow="row wrap", gap="4px")),
             self.bar.container, self.status],
            layout=widgets.Layout(flex="0 1 24rem", min_width="18rem", max_width="100%", overflow="hidden"))
        controls.add_class("glm5-panel-controls")
        self.bar.container.layout.width = "100%"
        self.bar.container.layout.overflow = "hidden"
        # The plot's box keeps its height between sweeps, so the page does not jump.
        figure_box = widgets.Box([self.placeholder, self.plot], layout=widgets.Layout(
            flex="1 1 26rem", min_width="18rem", min_height="14rem", align_items="flex-start",
            flex_flow="column", overflow="hidden"))
        figure_box.add_class("glm5-panel-figure")
        self.widget = widgets.HBox([controls, figure_box],
                                   layout=widgets.Layout(flex_flow="row wrap", align_items="flex-start", gap="12px"))
        self.widget.add_class("glm5-panel")

    # -- display ---------------------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def _say(self, text: str) -> None:
        self.status.value = text
        log.info("%s", text)

    def _guard(self, action) -> None:
        try:
            action()
        except Glm5Error as exc:
            self.error = exc
            self._say(f"<b>error</b>: {exc}")

    def _buttons(self) -> None:
        up = self.server is not None
        self.launch_button.disabled = up
        self.server_button.disabled = not up
        self.sweep_button.disabled = not up or self._active
        self.stop_button.disabled = not (up and self._active)

    def _bar_idle(self, text: str) -> None:
        """No sweep runs: the bar says so and shows no numbers (none of an earlier level)."""
        self.bar.reset(total=0)
        self.bar.set_description(text)
        self.bar.set_postfix_str("")

    @property
    def folder(self) -> Path:
        return rundir.phase_dir(self.run_dir, self.phase.value.strip() or "panel")

    @property
    def sweeping(self) -> bool:
        """A sweep is running (its thread has not yet finished its measurement)."""
        return self._active

    # -- actions -------------------------------------------------------------------------------
    def launch(self):
        """Start (or attach to) the server chosen in the panel; returns it."""
        if self.server is not None:
            return self.server
        self.error = None
        config = ServerConfig.load(self.config.value.strip())
        backend = self.backend.value.strip()
        self._bar_idle("no sweep")
        self._say(f"starting {backend} with {self.config.value} ...")
        self.server = workbook.start_server(backend, config, self.folder, sim_profile=self.sim_profile,
                                            ready_timeout=self.ready_timeout, api_key=self.api_key)
        self._server_label = f"{self.config.value.strip()} on {backend}"
        self._say(f"server ready at {self.server.base_url} (log: {getattr(self.server, 'log_path', None)})")
        self._buttons()
        return self.server

    def stop_sweep(self) -> None:
        """End the sweep in progress at once ("stopped by the user"); the server keeps running."""
        if not self._active:
            return
        self._user_stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30.0)
        self._buttons()

    def stop(self) -> None:
        """Stop the server; a sweep in progress ends first, "stopped by the user"."""
        if self.server is None:
            return
        sweeping = self._active
        if sweeping:
            # The sweep ends within a fraction of a second of the event; the server goes after
            # it, so the sweep ends as stopped rather than as a dead server.
            self.stop_sweep()
        srv, self.server = self.server, None
        srv.stop()
        self._bar_idle("no server")
        self._say(self._stopped_text(server_stopped=True) if sweeping else "server stopped")
        self._buttons()

    stop_server = stop

    def _stopped_text(self, server_stopped: bool = False) -> str:
        done = len(self._rows)
        where = f" during level {self._level}" if self._level is not None else ""
        kept = (f"{done} level{'s' if done != 1 else ''} measured, kept in {self.folder / rundir.SWEEP}"
                if done else "no level finished")
        after = "; server stopped" if server_stopped else "; the server keeps running"
        return f"<b>sweep stopped by the user</b>{where} ({kept}){after}"

    def start_sweep(self, *, wait: bool = False) -> threading.Thread:
        """Run a sweep with the panel's settings in a background thread (``wait`` joins it)."""
        if self.server is None:
            raise ConfigError("no server: press Launch (or call launch()) first", field="server")
        if self.sweeping:
            raise ConfigError("a sweep is already running", field="sweep")
        levels = _parse_levels(self.concurrencies.value)
        self.error = None
        self.sweep = None
        self.power = None
        self._rows, self._live, self.events, self._level = [], {}, [], None
        self._label = (f"sweep {len(self.history) + 1}: {getattr(self, '_server_label', self.config.value)}, "
                       f"out {self.output_len.value}")
        self._user_stop.clear()
        self.bar.reset(total=len(levels))
        self.bar.set_description("sweep starting")
        self.bar.set_postfix_str("")
        self._active = True
        if self.history:  # the earlier sweeps stay drawn ("live" in the title); this one's points join them
            self._draw()
        else:
            self.placeholder.value = "<i>Sweep running: the plot fills in as the levels report.</i>"
        self._say(f"sweeping levels {', '.join(map(str, levels))} ...")
        self._thread = threading.Thread(target=self._run, args=(levels,), name="glm5-panel-sweep", daemon=True)
        self._buttons()
        self._thread.start()
        if wait:
            self.wait()
        return self._thread

    def wait(self, timeout: float | None = None) -> pd.DataFrame | None:
        """Block until the sweep ends; returns its frame (None when it failed: see ``error``)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.sweep

    # -- the sweep thread ------------------------------------------------------------------------
    def _plan(self, levels: list[int]) -> PhasePlan:
        """The sweep the panel's fields ask for, on the running server (kept running), with GPU
        telemetry every half second and no ``/metrics`` scraper; each sweep measures every level."""
        settings = dataclasses.replace(self.load.settings, input_len=self.input_len.value,
                                       output_len=self.output_len.value, duration=float(self.duration.value),
                                       resume=False)
        return PhasePlan(engine=None, load=LoadPlan(tuple(levels), settings),
                         telemetry=TelemetryOptions(gpu_interval=0.5, metrics=False), keep_running=True)

    def _run(self, levels: list[int]) -> None:
        srv = self.server
        folder = self.folder
        for name in (rundir.SWEEP, rundir.REQUESTS, rundir.GPU, rundir.METRICS, rundir.POWER):
            (folder / name).unlink(missing_ok=True)  # each sweep's files replace the last's
        outcome = "done"
        try:
            result = run_phase(self._plan(levels), self.run_dir, folder.name, server=srv, api_key=self.api_key,
                               progress=False, callback=self._on_event, stop_event=self._user_stop)
            self.sweep = result.sweep
            self.power = result.power if result.power is not None and not result.power.empty else None
            if result.stopped_at is not None or self._user_stop.is_set():
                outcome = "stopped"
                self._say(self._stopped_text())
            else:
                self._say(f"sweep done: {len(self.sweep)} levels in {folder / rundir.SWEEP}" + self._power_text())
        except BaseException as exc:  # shown in the panel; the thread must not die silently
            if self._user_stop.is_set():
                outcome = "stopped"
                self._say(self._stopped_text())
            else:
                outcome = "failed"
                self.error = exc
                self._say(f"<b>sweep stopped</b>: {exc}")
        finally:
            self._active = False
            measured = len(self._rows)
            self.bar.set_description({"done": f"sweep done ({measured} levels)",
                                      "stopped": f"stopped by the user ({measured} levels)"}.get(outcome, "failed"))
            self.bar.set_postfix_str("")  # the last level's live numbers are not the sweep's result
            self.bar.disp(bar_style="success" if outcome == "done" else "danger", check_delay=False)
            self._draw(final=outcome)
            if self._rows:
                self.history.append((self._label + ("" if outcome == "done" else f" ({outcome})"),
                                     pd.DataFrame(self._rows)))
            self._live.clear()
            self._buttons()

    def _power_text(self) -> str:
        power = self.power
        if power is None or power.empty or "mean_power_w" not in power.columns:
            return ""
        top = power.loc[power["concurrency"].idxmax()]
        limit = top.get("power_limit_w")
        of = f" of {limit:,.0f} W" if limit == limit and limit else ""
        return f"; GPU power at {int(top['concurrency'])}: {top['mean_power_w']:,.0f} W{of} per GPU"

    def _on_event(self, event: dict) -> None:
        with self._lock:
            self.events.append(event)
        kind, level = event.get("event"), event.get("level")
        if kind == "level_start":
            self._level = level
            self._live.clear()  # only the running level is drawn as running
            self.bar.set_postfix_str("")  # no numbers of the level before
            self.bar.set_description(f"C={level}")
        elif kind == "progress":
            if level != self._level:
                return  # a late report of a level already done
            self._live[level] = float(event.get("recent_output_throughput") or 0.0)
            postfix = {"done": event.get("completed"), "in_flight": event.get("in_flight"),
                       "tok_s": f"{self._live[level]:,.0f}"}
            power = event.get("gpu_power_w")
            if power is not None and power == power:
                postfix["gpu_W"] = f"{power:,.0f}"
            self.bar.set_postfix(postfix)
            if time.time() - getattr(self, "_drawn_at", 0.0) > 2.0:
                self._draw()
        elif kind == "level_done":
            self._rows.append(dict(event.get("row") or {}))
            self._live.pop(level, None)
            self.bar.update(1)
            self._draw()

    def _draw(self, final: str | None = None) -> None:
        """Redraw the plot: the session's earlier sweeps, this sweep's finished levels, the
        running level's recent rate.

        ``final`` is how the sweep ended (done, stopped, failed): the title then drops "(live)".
        """
        self._drawn_at = time.time()
        frames = dict(self.history)
        done = pd.DataFrame(self._rows)
        if not done.empty and {"concurrency", "output_throughput"} <= set(done.columns):
            frames[self._label or "this sweep"] = done
        if self._live:
            label = "running level (recent)" if final is None else "level cut short (recent)"
            frames[label] = pd.DataFrame(
                {"concurrency": list(self._live), "output_throughput": list(self._live.values())})
        if not frames:
            if final == "stopped":
                self.placeholder.value = "<i>Sweep stopped by the user before any level reported.</i>"
            elif final == "failed":
                self.placeholder.value = "<i>The sweep failed before any level reported: see the status line.</i>"
            return
        state = {None: "(live)", "done": "", "stopped": "(stopped by the user)", "failed": "(sweep failed)"}[final]
        try:
            fig = plots.throughput_vs_concurrency(frames, title=f"{self.phase.value}: throughput {state}".strip(),
                                                  size=_PLOT_SIZE, legend=True)
            self.plot.value = _svg(fig)
        except Exception:  # a drawing problem must not stop the measurement
            log.exception("live plot not drawn")
            return
        self.plot_title = fig.axes[0].get_title()
        self.placeholder.layout.display = "none"
        self.plot.layout.display = None


class WatchDisplay:
    """A live figure of a watched server (``glm5 watch``): pass :meth:`on_window` as the watch's
    ``on_window`` and the figure under the cell is drawn again as each window ends."""

    def __init__(self, title: str | None = None):
        from IPython.display import display

        self.title = title
        self.rows: list[dict[str, Any]] = []
        self._handle = display(widgets.HTML("<i>waiting for the first window...</i>"), display_id=True)

    def on_window(self, row: dict[str, Any]) -> None:
        self.rows.append(dict(row))
        fig = plots.watch_windows(self.frame, title=self.title)
        if self._handle is not None:
            self._handle.update(fig)

    @property
    def frame(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows)
