"""An ipywidgets panel for JupyterLab: pick a config, launch/stop the server, run a sweep live.

``ServerPanel(run_dir)`` shows a config picker (the shipped configs of ``data/configs/`` or a
JSON path), the backend (``sim``, ``sglang`` or a URL to attach to), the sweep settings, Launch /
Stop / Sweep buttons, a tqdm progress bar, a status line and a throughput plot redrawn while the
sweep runs. The sweep runs in a background thread, so the notebook stays responsive and Stop
works mid-sweep; results go to ``<run_dir>/<phase>/`` like the notebooks' own.

Every button has a method doing the same (:meth:`ServerPanel.launch`, :meth:`~ServerPanel.stop`,
:meth:`~ServerPanel.start_sweep`), so the panel works, and is tested, without a browser.
"""

from __future__ import annotations

import ast
import logging
import threading
import time
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pandas as pd

from glm5lib import rundir
from glm5lib.errors import ConfigError, Glm5Error

__all__ = ["ServerPanel"]

log = logging.getLogger(__name__)


def _png(fig) -> bytes:
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()


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


class ServerPanel:
    """Launch/stop a server and run a concurrency sweep with live progress, in one panel."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        config: str = "glm5-baseline",
        backend: str = "sim",
        phase: str = "panel",
        concurrencies: list[int] | tuple[int, ...] = (1, 64, 256),
        input_len: int = 256,
        output_len: int = 128,
        duration: float = 5.0,
        sim_profile: str | None = None,
        api_key: str | None = None,
        ready_timeout: float = 1800.0,
    ):
        from tqdm.notebook import tqdm

        from glm5lib.config import shipped_configs

        self.run_dir = Path(run_dir)
        self.sim_profile = sim_profile
        self.api_key = api_key
        self.ready_timeout = ready_timeout
        self.server: Any = None
        self.sweep: pd.DataFrame | None = None
        self.error: BaseException | None = None
        self.events: list[dict] = []
        self._rows: list[dict] = []
        self._live: dict[int, float] = {}
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

        names = list(shipped_configs())
        self.config = widgets.Combobox(value=config, options=names, description="config",
                                       placeholder="shipped name or JSON path", ensure_option=False)
        self.backend = widgets.Combobox(value=backend, options=["sim", "sglang"], description="backend",
                                        placeholder="sim, sglang or http://host:port")
        self.phase = widgets.Text(value=phase, description="phase")
        self.concurrencies = widgets.Text(value=", ".join(str(c) for c in concurrencies), description="levels")
        self.input_len = widgets.BoundedIntText(value=input_len, min=1, max=1_000_000, description="input len")
        self.output_len = widgets.BoundedIntText(value=output_len, min=1, max=1_000_000, description="output len")
        self.duration = widgets.BoundedFloatText(value=duration, min=0.5, max=36_000, description="level s")
        self.launch_button = widgets.Button(description="Launch", button_style="primary", icon="play")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.sweep_button = widgets.Button(description="Sweep", button_style="success", icon="line-chart",
                                           disabled=True)
        self.status = widgets.HTML(value="no server")
        self.plot = widgets.Image(format="png")
        self.bar = tqdm(total=0, desc="sweep", unit="level", display=False, leave=True)
        self.launch_button.on_click(lambda _b: self._guard(self.launch))
        self.stop_button.on_click(lambda _b: self._guard(self.stop))
        self.sweep_button.on_click(lambda _b: self._guard(self.start_sweep))
        self.widget = widgets.VBox([
            widgets.HBox([self.config, self.backend, self.phase]),
            widgets.HBox([self.concurrencies, self.input_len, self.output_len, self.duration]),
            widgets.HBox([self.launch_button, self.stop_button, self.sweep_button]),
            self.bar.container,
            self.status,
            self.plot,
        ])

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
        running = self.sweeping
        self.launch_button.disabled = up
        self.stop_button.disabled = not up
        self.sweep_button.disabled = not up or running

    @property
    def folder(self) -> Path:
        return rundir.phase_dir(self.run_dir, self.phase.value.strip() or "panel")

    @property
    def sweeping(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- actions -------------------------------------------------------------------------------
    def launch(self):
        """Start (or attach to) the server chosen in the panel; returns it."""
        from glm5lib import workbook
        from glm5lib.config import ServerConfig

        if self.server is not None:
            return self.server
        self.error = None
        config = ServerConfig.load(self.config.value.strip())
        backend = self.backend.value.strip()
        self._say(f"starting {backend} with {self.config.value} ...")
        self.server = workbook.start_server(backend, config, self.folder, sim_profile=self.sim_profile,
                                            ready_timeout=self.ready_timeout, api_key=self.api_key)
        self._say(f"server ready at {self.server.base_url} (log: {getattr(self.server, 'log_path', None)})")
        self._buttons()
        return self.server

    def stop(self) -> None:
        """Stop the server (a sweep in progress then ends with the server's error)."""
        if self.server is None:
            return
        srv, self.server = self.server, None
        srv.stop()
        self._say("server stopped")
        self._buttons()

    def start_sweep(self, *, wait: bool = False) -> threading.Thread:
        """Run a sweep with the panel's settings in a background thread (``wait`` joins it)."""
        if self.server is None:
            raise ConfigError("no server: press Launch (or call launch()) first", field="server")
        if self.sweeping:
            raise ConfigError("a sweep is already running", field="sweep")
        levels = _parse_levels(self.concurrencies.value)
        self.error = None
        self.sweep = None
        self._rows, self._live, self.events = [], {}, []
        self.bar.reset(total=len(levels))
        self._thread = threading.Thread(target=self._run, args=(levels,), name="glm5-panel-sweep", daemon=True)
        self._thread.start()
        self._buttons()
        if wait:
            self.wait()
        return self._thread

    def wait(self, timeout: float | None = None) -> pd.DataFrame | None:
        """Block until the sweep ends; returns its frame (None when it failed: see ``error``)."""
        if self._thread is not None:
            self._thread.join(timeout)
        return self.sweep

    # -- the sweep thread ------------------------------------------------------------------------
    def _run(self, levels: list[int]) -> None:
        from glm5lib import loadgen

        srv = self.server
        try:
            self.sweep = loadgen.run_sweep(
                srv.base_url, levels, input_len=self.input_len.value, output_len=self.output_len.value,
                duration=float(self.duration.value), run_dir=self.folder, api_key=self.api_key,
                server=srv, progress=False, callback=self._on_event, resume=False,
            )
            self._say(f"sweep done: {len(self.sweep)} levels in {self.folder / rundir.SWEEP}")
        except BaseException as exc:  # shown in the panel; the thread must not die silently
            self.error = exc
            self._say(f"<b>sweep stopped</b>: {exc}")
        finally:
            self._draw()
            self._buttons()

    def _on_event(self, event: dict) -> None:
        with self._lock:
            self.events.append(event)
        kind, level = event.get("event"), event.get("level")
        if kind == "level_start":
            self.bar.set_description(f"C={level}")
        elif kind == "progress":
            self._live[level] = float(event.get("recent_output_throughput") or 0.0)
            self.bar.set_postfix(done=event.get("completed"), in_flight=event.get("in_flight"),
                                 tok_s=f"{self._live[level]:,.0f}")
            if time.time() - getattr(self, "_drawn_at", 0.0) > 2.0:
                self._draw()
        elif kind == "level_done":
            self._rows.append(dict(event.get("row") or {}))
            self._live.pop(level, None)
            self.bar.update(1)
            self._draw()

    def _draw(self) -> None:
        """Redraw the plot: finished levels as measured, the running level's recent rate dashed."""
        from glm5lib import plots

        self._drawn_at = time.time()
        done = pd.DataFrame(self._rows)
        frames = {}
        if not done.empty and {"concurrency", "output_throughput"} <= set(done.columns):
            frames["measured"] = done
        if self._live:
            frames["running level (recent)"] = pd.DataFrame(
                {"concurrency": list(self._live), "output_throughput": list(self._live.values())})
        if not frames:
            return
        try:
            fig = plots.throughput_vs_concurrency(frames, title=f"{self.phase.value}: throughput (live)")
            self.plot.value = _png(fig)
        except Exception:  # a drawing problem must not stop the measurement
            log.exception("live plot not drawn")
