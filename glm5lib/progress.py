"""Live progress of a workbook run for a terminal or a CI log, read from the run folder.

The notebooks run in a kernel the runner cannot see into, but what they leave in the run folder
can be watched: each phase's ``sweep.csv`` gains a row when a level ends, ``server.log`` gains
the server's decode lines (running and queued requests, generation throughput) and ``gpu.csv``
the GPU samples; ``notebooks.json`` says which notebook runs. :class:`RunProgress` polls those
files and gives

- a line when a notebook starts and when it ends (ok in N s, or failed with the error);
- one line per finished level: output throughput, median TTFT and TPOT, the requests running
  on the server (median of its decode lines in the level's window) and the queue, GPU power
  per GPU against its limit, and how many requests finished or were cut at the deadline;
- a live line while a level runs, from the last decode line and the latest GPU samples.

On a terminal the live line is rewritten in place; elsewhere (a CI log) it is printed as a line
of its own at most every ``live_every`` seconds, so logs stay short.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import pandas as pd

from glm5lib import rundir
from glm5lib.logs import follow_log, to_epoch
from glm5lib.report import NOTEBOOKS_STATUS

__all__ = ["RunProgress", "format_level_line"]

log = logging.getLogger(__name__)

_GPU_TAIL_BYTES = 64 * 1024


def _num(value: Any, digits: int = 0) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "n/a"
    if math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def format_level_line(phase: str, row: Mapping[str, Any], *, running: tuple[float, float] | None = None,
                      power: tuple[float, float] | None = None) -> str:
    """One finished level as a line: ``baseline C=256: 880 tok/s, TTFT 1,234 ms, ...``.

    ``running`` is (median running, max queued) from the server log over the level's window;
    ``power`` is (mean W per GPU, power limit W per GPU) from the GPU samples over it.
    """
    parts = [f"{phase} C={_num(row.get('concurrency'))}: {_num(row.get('output_throughput'))} tok/s",
             f"TTFT {_num(row.get('median_ttft_ms'))} ms", f"TPOT {_num(row.get('median_tpot_ms'), 1)} ms"]
    if running is not None:
        parts.append(f"running {_num(running[0])} (queued up to {_num(running[1])})")
    if power is not None:
        limit = f" of {_num(power[1])} W" if power[1] == power[1] and power[1] else ""
        parts.append(f"GPU {_num(power[0])} W{limit}")
    done = f"{_num(row.get('completed'))} finished"
    if (row.get("cancelled") or 0) > 0:
        done += f", {_num(row.get('cancelled'))} cut at deadline"
    if (row.get("failed") or 0) > 0:
        done += f", {_num(row.get('failed'))} failed"
    return ", ".join(parts) + f" ({done})"


class _Phase:
    """What has been read of one phase folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.rows_seen = 0
        self.sweep_size = -1
        self.follower: Any = None
        self.decode: pd.DataFrame | None = None
        self.decode_epoch: pd.Series | None = None

    def server_log(self) -> pd.DataFrame | None:
        """The decode lines so far, with ``epoch`` seconds (read incrementally)."""
        path = self.folder / rundir.SERVER_LOG
        if not path.exists():
            return None
        try:
            if self.follower is None:
                self.follower = follow_log(path)
            decode = self.follower.update().decode
            if decode is None or decode.empty or "time" not in decode.columns:
                return None
            if self.decode is None or len(decode) != len(self.decode):
                decode = decode.copy()
                if "rank" in decode.columns and decode["rank"].notna().any():
                    decode = decode[decode["rank"] == decode["rank"].dropna().iloc[0]]
                decode["epoch"] = to_epoch(decode["time"]).to_numpy()
                self.decode = decode
            return self.decode
        except Exception as exc:  # progress must never cost the run
            log.debug("server log of %s not read: %s", self.folder, exc)
            return None

    def gpu(self, *, tail: bool) -> pd.DataFrame | None:
        """GPU samples: the whole file, or (``tail``) only its last lines."""
        path = self.folder / rundir.GPU
        try:
            size = path.stat().st_size
            with path.open("rb") as fh:
                header = fh.readline()
                if tail and size > _GPU_TAIL_BYTES:
                    fh.seek(size - _GPU_TAIL_BYTES)
                    fh.readline()  # a partial line
                body = fh.read()
            import io

            cut = body.rfind(b"\n")
            frame = pd.read_csv(io.BytesIO(header + body[: cut + 1]))
            return frame if {"time", "gpu", "power_w"} <= set(frame.columns) and not frame.empty else None
        except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
            return None


def _window(row: dict) -> tuple[float, float] | None:
    for a, b in (("window_start", "window_end"), ("start_time", "end_time")):
        try:
            start, end = float(row[a]), float(row[b])
        except (KeyError, TypeError, ValueError):
            continue
        if end > start:
            return start, end
    return None


def _power(gpu: pd.DataFrame | None, start: float, end: float) -> tuple[float, float] | None:
    if gpu is None:
        return None
    part = gpu[(gpu["time"] >= start) & (gpu["time"] <= end)]
    if part.empty:
        return None
    limit = float(part["power_limit_w"].max()) if "power_limit_w" in part.columns else float("nan")
    return float(part.groupby("gpu")["power_w"].mean().mean()), limit


def _running(decode: pd.DataFrame | None, start: float, end: float) -> tuple[float, float] | None:
    if decode is None or "running_req" not in decode.columns:
        return None
    part = decode[(decode["epoch"] >= start) & (decode["epoch"] <= end)]
    if part.empty:
        return None
    queued = float(part["queue_req"].max()) if "queue_req" in part.columns else float("nan")
    return float(part["running_req"].median()), queued


class RunProgress:
    """Watch a run folder and write a line per finished level, and a live line meanwhile.

    ``write`` receives each text (a line, or with ``live`` on a terminal a ``\\r``-led
    rewrite); by default it goes to ``stream`` (stderr). Use as a context manager, or
    :meth:`start` / :meth:`stop`; :meth:`poll` does one round (for tests and callers that
    poll themselves) and returns the lines it wrote.
    """

    def __init__(
        self,
        run_dir: str | Path,
        *,
        stream: IO[str] | None = None,
        interval: float = 1.0,
        live_every: float = 15.0,
        live: bool | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.live_every = live_every
        isatty = getattr(self.stream, "isatty", None)
        self.tty = bool(isatty()) if isatty is not None else False
        self.live = live if live is not None else True
        self._phases: dict[str, _Phase] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._live_at = 0.0
        self._live_text = ""
        self.lines: list[str] = []
        self._write: Callable[[str], None] = self._to_stream
        self._lock = threading.RLock()  # the watcher thread and the runner's status calls
        self._notebooks = self._read_notebooks() or {}  # as they were before the run: not news

    # -- output ------------------------------------------------------------------------------
    def _to_stream(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream must not stop the run
            pass

    def _emit(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)
            if self.tty and self._live_text:
                self._write("\r" + " " * len(self._live_text) + "\r")
                self._live_text = ""
            self._write(line + "\n")

    def _emit_live(self, text: str, now: float) -> None:
        with self._lock:
            self._emit_live_locked(text, now)

    def _emit_live_locked(self, text: str, now: float) -> None:
        if self.tty:
            try:
                width = os.get_terminal_size(self.stream.fileno()).columns - 1
            except (AttributeError, OSError, ValueError):
                width = 119
            text = text[: max(20, width)]
            pad = " " * max(0, len(self._live_text) - len(text))
            self._write("\r" + text + pad)
            self._live_text = text
        elif now - self._live_at >= self.live_every:
            self.lines.append(text)
            self._write(text + "\n")
        else:
            return
        self._live_at = now

    # -- one round ---------------------------------------------------------------------------
    def _phase_folders(self) -> list[Path]:
        if not self.run_dir.is_dir():
            return []
        return sorted(p for p in self.run_dir.iterdir()
                      if p.is_dir() and ((p / rundir.SWEEP).exists() or (p / rundir.SERVER_LOG).exists()))

    def poll(self, now: float | None = None, *, live: bool = True) -> list[str]:
        """Read what changed; write and return the lines of levels that finished since the last call."""
        now = time.time() if now is None else now
        written: list[str] = self._notebook_lines()
        active: tuple[float, _Phase] | None = None
        for folder in self._phase_folders():
            phase = self._phases.setdefault(folder.name, _Phase(folder))
            written += self._new_levels(phase)
            for name in (rundir.SERVER_LOG, rundir.GPU):
                try:
                    changed = (folder / name).stat().st_mtime
                except OSError:
                    continue
                if active is None or changed > active[0]:
                    active = (changed, phase)
        if live and self.live and active is not None and now - active[0] < 5 * max(self.interval, 1.0):
            text = self._live_line(active[1], now)
            if text:
                self._emit_live(text, now)
        return written

    def _read_notebooks(self) -> dict[str, tuple] | None:
        """The notebooks' states as the file holds them; None when it cannot be read whole (not
        there yet, or read while the runner rewrites it): what was known stays known."""
        try:
            entries = json.loads((self.run_dir / NOTEBOOKS_STATUS).read_text())
        except (OSError, ValueError):
            return None
        return self._states(entries)

    @staticmethod
    def _states(entries: object) -> dict[str, tuple]:
        if not isinstance(entries, list):
            return {}
        return {str(e.get("name")): (e.get("status"), e.get("started"), e.get("seconds"), e.get("error"))
                for e in entries if isinstance(e, dict)}

    def notebook_status(self, entries: list[dict]) -> list[str]:
        """Take the notebooks' status as the runner writes it (``run_workbook(on_status=...)``).

        Polling alone misses a notebook that starts and ends between two rounds; the runner
        calls this at each change, so every notebook gets its ``running`` line.
        """
        return self._notebook_lines(self._states(entries))

    def _notebook_lines(self, now: dict[str, tuple] | None = None) -> list[str]:
        """``notebook 02-measure-baseline.ipynb: running`` / ``: ok in 95 s`` as the runner records them."""
        with self._lock:
            if now is None:
                now = self._read_notebooks()
                if now is None:
                    return []
            return self._notebook_lines_locked(now)

    def _notebook_lines_locked(self, now: dict[str, tuple]) -> list[str]:
        out = []
        for name, state in now.items():
            if self._notebooks.get(name) == state:
                continue
            status, _started, seconds, error = state
            if status == "running":
                line = f"notebook {name}: running"
            elif status == "ok":
                line = f"notebook {name}: ok in {_num(seconds)} s"
            else:
                line = f"notebook {name}: {status}" + (f" ({error})" if error else "")
            self._emit(line)
            out.append(line)
        self._notebooks = now
        return out

    def _new_levels(self, phase: _Phase) -> list[str]:
        path = phase.folder / rundir.SWEEP
        try:
            size = path.stat().st_size
        except OSError:
            return []
        if size == phase.sweep_size:
            return []
        phase.sweep_size = size
        try:
            sweep = pd.read_csv(path)
        except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
            return []
        if len(sweep) < phase.rows_seen:  # rewritten from scratch (a new sweep)
            phase.rows_seen = 0
        new = sweep.iloc[phase.rows_seen:].to_dict(orient="records")
        phase.rows_seen = len(sweep)
        if not new:
            return []
        decode = phase.server_log()
        gpu = phase.gpu(tail=False)
        out = []
        for row in new:
            window = _window(row)
            running = _running(decode, *window) if window else None
            whole = _window({k: row.get(k) for k in ("start_time", "end_time")})
            if running is None and whole:  # decode lines are seconds apart: the whole level then
                running = _running(decode, *whole)
            power = _power(gpu, *window) if window else None
            line = format_level_line(phase.folder.name, row, running=running, power=power)
            self._emit(line)
            out.append(line)
        return out

    def _live_line(self, phase: _Phase, now: float) -> str:
        parts = []
        decode = phase.server_log()
        if decode is not None and not decode.empty:
            last = decode.iloc[-1]
            parts.append(f"running {_num(last.get('running_req'))}")
            if "queue_req" in decode.columns:
                parts.append(f"queued {_num(last.get('queue_req'))}")
            if "gen_throughput" in decode.columns:
                parts.append(f"{_num(last.get('gen_throughput'))} tok/s (server log, {now - last['epoch']:.0f} s ago)")
        gpu = phase.gpu(tail=True)
        if gpu is not None:
            recent = gpu[gpu["time"] >= gpu["time"].max() - 2.0]
            power = _power(recent, -math.inf, math.inf)
            if power is not None:
                parts.append(f"GPU {_num(power[0])} W")
        if not parts:
            return ""
        done = phase.rows_seen
        return (f"  ... {phase.folder.name} ({done} level{'' if done == 1 else 's'} done), now: "
                + ", ".join(parts))

    # -- background ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # progress must never cost the run
                log.debug("progress poll failed", exc_info=True)

    def start(self) -> RunProgress:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="glm5-run-progress", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching, after a last round so the last level's line is not lost."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        try:
            self.poll(live=False)
        except Exception:
            log.debug("last progress poll failed", exc_info=True)
        if self.tty and self._live_text:
            self._write("\r" + " " * len(self._live_text) + "\r")
            self._live_text = ""

    def __enter__(self) -> RunProgress:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
