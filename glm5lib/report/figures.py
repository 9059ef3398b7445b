"""The report's figures: throughput, latency, running/queued requests and power of every phase.

A figure a notebook already drew of the same phases is referenced, not drawn again; the others
are drawn from the frames :func:`glm5lib.report.conclude.frames_and_summary` returns and saved
under the run's ``figures/``. One figure that cannot be drawn costs only itself.
"""

from __future__ import annotations

import logging
from pathlib import Path

from glm5lib import plots, rundir
from glm5lib.report.conclude import AFTER, BEFORE

__all__ = ["TITLES", "draw_figures"]

log = logging.getLogger(__name__)

#: Each figure's caption in the report.
TITLES = {
    "throughput": "Throughput vs concurrency",
    "latency": "Latency vs concurrency",
    "running-queued": "Running and queued requests (server log, or the /metrics gauges where they saw more)",
    "power": "GPU power vs power limit",
}

def _notebook_figure(run: Path, phases: list[str], name: str) -> Path | None:
    """The figure a notebook already drew of every phase (``figures/<last phase>-<name>.png``).

    Notebook 2 draws the baseline, notebook 4 the baseline and the fix together, so the last
    phase's figure of a baseline/fix run is the report's figure: it is referenced, not drawn
    again under a second name. It must be newer than every phase's sweep and server log.
    """
    if not phases or not set(phases) <= {BEFORE, AFTER} or phases[0] != BEFORE:
        return None
    path = rundir.figure_path(run, f"{phases[-1]}-{name}")
    if not path.is_file():
        return None
    drawn_at = path.stat().st_mtime
    for phase in phases:
        for source in (rundir.SWEEP, rundir.SERVER_LOG, rundir.GPU):
            data = run / phase / source
            if data.exists() and data.stat().st_mtime > drawn_at:
                return None
    return path


def _workload(frame: dict) -> tuple | None:
    """A phase's (prompt, output) tokens per request, as its sweep recorded them (None: not recorded)."""
    sweep = frame.get("sweep")
    if sweep is None or not {"input_len", "output_len"} <= set(sweep.columns) or sweep.empty:
        return None
    return tuple(sorted({(int(i), int(o)) for i, o in sweep[["input_len", "output_len"]].dropna().to_numpy()}))


def _same_workload(frames: dict[str, dict]) -> dict[str, dict]:
    """The phases measured with the first phase's workload: throughput and power against concurrency
    mean nothing side by side across prompt and output lengths (a tuner's short candidates, a watched
    server's own traffic); those left out are logged."""
    first = next(iter(frames), None)
    if first is None:
        return frames
    shape = _workload(frames[first])
    kept = {p: f for p, f in frames.items() if _workload(f) == shape}
    if len(kept) < len(frames):
        log.info("figures: %s left out (another workload than %s's)", ", ".join(sorted(set(frames) - set(kept))), first)
    return kept


def draw_figures(run: Path, frames: dict[str, dict]) -> dict[str, str]:
    """Draw (or find the notebooks' drawing of) each figure of the run: ``{name: relative path}``."""
    made: dict[str, str] = {}
    frames = _same_workload(frames)
    sweeps = {p: f["sweep"] for p, f in frames.items()
              if f.get("sweep") is not None and "output_throughput" in f["sweep"].columns}
    attempts = []
    if sweeps:
        attempts.append(("throughput", lambda: plots.throughput_vs_concurrency(sweeps)))
        if all({"median_ttft_ms", "median_tpot_ms"} <= set(s.columns) for s in sweeps.values()):
            attempts.append(("latency", lambda: plots.latency_vs_concurrency(sweeps)))
    decode = {p: f["decode"] for p, f in frames.items()
              if f.get("decode") is not None and not f["decode"].empty}
    if decode:
        caps = {p: frames[p]["cap"] for p in decode}
        names = {frames[p].get("cap_name") for p in decode} - {None}
        name = names.pop() if len(names) == 1 else "running cap"
        attempts.append(("running-queued", lambda: plots.running_queued_over_time(decode, running_cap=caps, cap_name=name)))
    power = {p: f["power"] for p, f in frames.items() if f.get("power") is not None and not f["power"].empty}
    if power:
        attempts.append(("power", lambda: plots.power_vs_tdp(power)))
    for name, draw in attempts:
        drawn = _notebook_figure(run, list(frames), name)
        if drawn is not None:
            made[name] = drawn.relative_to(run).as_posix()
            continue
        try:
            path = plots.save_figure(draw(), run, name)
        except Exception as exc:  # one bad figure must not cost the whole report
            log.warning("figure %s not drawn: %s", name, exc)
            continue
        made[name] = path.relative_to(run).as_posix()
    return made
