"""How far each level's measurement can be trusted: a report section from each phase's sweep.

Per phase and level: the prompt length the server counted against the one asked (and how the
prompts were sized), whether the level reached a steady state (else its whole-level figure and
why, and how long it was extended), how many requests measured a TPOT, and the client's
self-check (its CPU, its event loop's lag, the other processes that held the cores).
:func:`section_markdown` renders it as Markdown with a ``## Title`` and one table per phase; in
the report it takes each sweep from the phase's evidence as the report read it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import rundir
from glm5lib.diagnose.evidence import EvidenceCache
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.loadgen.metrics import SUB_CYCLE

__all__ = ["SHORT_WINDOW", "level_window", "section_markdown"]

TITLE = "## Measurement quality"
# Prompts further than this from the asked length are marked in the table.
_PROMPT_TOLERANCE = 0.1
#: A level read over less than this share of its length is quoted with how little it was read over
#: (the rest admitted the load: its figure may not be the steady rate).
SHORT_WINDOW = 0.5


def _num(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number


def _fmt(value: Any, digits: int = 0, suffix: str = "") -> str:
    number = _num(value)
    return "n/a" if math.isnan(number) else f"{number:,.{digits}f}{suffix}"


def _cell(text: Any) -> str:
    return "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text).replace("|", "/")


def level_window(level: Any) -> dict[str, float]:
    """How much of a sweep level its figures were read over: ``window_s`` of its ``level_s`` seconds,
    from ``ramp_s`` after its start, and ``sub_cycle`` 1.0 where that window held less than one
    cycle of a closed loop (:data:`~glm5lib.loadgen.metrics.SUB_CYCLE`: its rate reads above the one
    the loop sustains); {} where the sweep recorded no window."""
    start, end = _num(level.get("start_time")), _num(level.get("end_time"))
    w0, w1 = _num(level.get("window_start")), _num(level.get("window_end"))
    window, whole = w1 - w0, end - start
    if not (window > 0 and whole > 0):  # NaN compares false: no window recorded
        return {}
    out = {"window_s": round(window, 2), "level_s": round(whole, 2), "ramp_s": round(w0 - start, 2)}
    if SUB_CYCLE in str(level.get("window_note") or ""):
        out["sub_cycle"] = 1.0
    return out


def _row(level: pd.Series) -> str:
    asked, served, ratio = _num(level.get("input_len")), level.get("mean_prompt_tokens"), _num(
        level.get("prompt_length_ratio"))
    prompt = f"{_fmt(asked)} -> {_fmt(served)} ({_fmt(ratio, 2)}x, {_cell(level.get('prompt_source')) or 'n/a'})"
    if not math.isnan(ratio) and abs(ratio - 1.0) > _PROMPT_TOLERANCE:
        prompt = f"**{prompt}**"
    steady = level.get("steady")
    if str(steady).lower() in ("true", "1", "1.0"):
        state = "steady"
        read = level_window(level)
        if read and read["window_s"] < SHORT_WINDOW * read["level_s"]:
            state += f", over the last {read['window_s']:.1f} s of {read['level_s']:.1f} (the rest admitted the load)"
        if read.get("sub_cycle"):
            state += (", **less than one cycle** of the load (decode without the prefill that follows it: "
                      "above the rate the loop sustains)")
    elif str(steady).lower() in ("false", "0", "0.0"):
        why = _cell(level.get("steady_note")).removeprefix("not steady: ")
        state = f"**not steady**: {why}" if why else "**not steady**"
    else:
        state = _cell(level.get("window_note")) or "n/a"
    extended = _num(level.get("extended_s"))
    if extended and not math.isnan(extended):
        state += f" (extended {extended:.0f} s)"
    client = (f"{_fmt(level.get('client_cpu_pct'))}% CPU, lag p99 {_fmt(level.get('loop_lag_p99_ms'), 1)} ms; "
              f"host {_fmt(level.get('host_cpu_pct'))}% busy; others: {_cell(level.get('other_processes')) or 'none'}")
    return (f"| {_fmt(level.get('concurrency'))} | {prompt} | {state} | {_fmt(level.get('tpot_requests'))} | "
            f"{client} |")


def _sweep(folder: Path, phases: EvidenceCache) -> pd.DataFrame | None:
    """A phase's sweep, from its evidence; None where it cannot be read."""
    try:
        return phases.load(folder).sweep
    except (DiagnosisError, ConfigError, OSError, ValueError, KeyError):  # pandas' parser errors are ValueErrors
        return None


def section_markdown(run_dir: str | Path, phases: EvidenceCache | None = None) -> str | None:
    """The section for every phase of ``run_dir`` whose sweep recorded these figures; None when none
    did. ``phases``: the report's reading of the phases, whose evidence holds each sweep (the section
    called alone reads each phase once itself, the tables it cannot read left out, as the report does)."""
    run = Path(run_dir)
    if not run.is_dir():
        return None
    phases = phases or EvidenceCache(partial=True)
    lines = [TITLE, "",
             "Prompt tokens asked -> counted by the server, whether each level reached a steady state (a level "
             "that did not is measured whole), requests that measured a TPOT, and the client's self-check.", ""]
    found = False
    for folder in sorted(p for p in run.iterdir() if (p / rundir.SWEEP).is_file()):
        sweep = _sweep(folder, phases)
        if sweep is None or sweep.empty or "steady" not in sweep.columns:
            continue
        found = True
        lines += [f"### Phase `{folder.name}`", "",
                  "| concurrency | prompt tokens | steady state | TPOT requests | client |",
                  "|---|---|---|---|---|"]
        lines += [_row(level) for _, level in sweep.iterrows()]
        lines.append("")
    return "\n".join(lines) if found else None
