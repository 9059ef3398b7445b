"""The run folders of a runs directory: when, which engine, the headline figures, how each ended.

:func:`list_runs` reads each run's ``notebooks.json`` and ``summary.json`` (the report's numbers;
a run without one is summarized from its files) and returns one row per run, newest first.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from glm5lib import rundir
from glm5lib.errors import ConfigError
from glm5lib.paths import runs_dir
from glm5lib.report._files import read_json
from glm5lib.report.conclude import list_phases, summarize

__all__ = ["find_run", "is_run_dir", "list_runs", "run_state"]

log = logging.getLogger(__name__)


def find_run(value: str | Path, root: str | Path | None = None) -> Path:
    """A run folder named on the command line: a path, or a run's name under the runs folder."""
    path = Path(str(value)).expanduser()
    if path.is_dir():
        return path
    parent = Path(root) if root is not None else runs_dir()
    if len(path.parts) == 1 and (parent / path.name).is_dir():
        return parent / path.name
    raise ConfigError(f"run folder {value!s} does not exist (as a path, or as a run under {parent})",
                      field="run_dir")


def is_run_dir(folder: Path) -> bool:
    """True for a folder the workbook wrote: notebooks' status, a summary or a phase folder."""
    return folder.is_dir() and (
        (folder / rundir.NOTEBOOKS_STATUS).exists() or (folder / rundir.SUMMARY).exists()
        or bool(list_phases(folder)))


def run_state(notebooks: Any) -> str:
    """``"finished"``, ``"failed at notebook NN"``, ``"running notebook NN ..."`` or ``"not run"``."""
    if not isinstance(notebooks, list) or not notebooks:
        return "not run"
    for n in notebooks:
        status, name = n.get("status"), str(n.get("name") or "?")
        if status == "failed":
            return f"failed at notebook {name[:2]}"
        if status == "running":
            return f"running notebook {name[:2]} (or stopped there)"
        if status not in ("ok", "skipped"):
            return f"{status or 'unknown'} at notebook {name[:2]}"
    return "finished"


def _started(run: Path, notebooks: Any) -> _dt.datetime:
    stamps = [n.get("started") for n in notebooks or [] if isinstance(n, Mapping)
              and isinstance(n.get("started"), (int, float))]
    when = min(stamps) if stamps else run.stat().st_mtime
    return _dt.datetime.fromtimestamp(when, tz=_dt.timezone.utc)


def _summary(run: Path) -> dict:
    summary = read_json(run / rundir.SUMMARY)
    newest = max((p.stat().st_mtime for phase in list_phases(run) for p in (run / phase).glob("*.csv")),
                 default=0.0)
    current = isinstance(summary, Mapping) and all(
        isinstance(p, Mapping) and "engine" in p for p in (summary.get("phases") or {}).values())
    if current and (run / rundir.SUMMARY).stat().st_mtime >= newest:
        return dict(summary)
    try:
        return summarize(run)
    except Exception as exc:  # one unreadable run must not hide the others
        log.warning("run %s could not be summarized: %s", run, exc)
        return {}


def list_runs(root: str | Path | None = None) -> list[dict[str, Any]]:
    """One row per run folder under ``root`` (default: the workbook's runs folder), newest first:
    ``run``, ``path``, ``date`` (UTC), ``engine``, ``phases``, each phase's peak (``peak_<phase>``
    tok/s), ``gain`` (the largest before/after ratio), ``standin`` and ``state``."""
    folder = Path(root) if root is not None else runs_dir()
    if not folder.is_dir():
        raise ConfigError(f"runs folder {folder} does not exist", field="root")
    rows = []
    for run in sorted(p for p in folder.iterdir() if is_run_dir(p)):
        notebooks = read_json(run / rundir.NOTEBOOKS_STATUS)
        summary = _summary(run)
        phases = summary.get("phases") or {}
        engines = sorted({str(p.get("engine")) for p in phases.values() if p.get("engine")})
        gains = [r["gain"] for r in summary.get("comparison") or [] if r.get("gain")]
        row: dict[str, Any] = {
            "run": run.name, "path": str(run), "date": _started(run, notebooks).strftime("%Y-%m-%d %H:%M"),
            "engine": ", ".join(engines) or ("stand-in" if (summary.get("standin") or {}).get("used") else "n/a"),
            "phases": ", ".join(phases),
        }
        for name, data in phases.items():
            row[f"peak_{name}"] = (data.get("peak") or {}).get("output_throughput")
        row["gain"] = max(gains) if gains else None
        row["standin"] = bool((summary.get("standin") or {}).get("used"))
        row["state"] = run_state(notebooks)
        rows.append(row)
    rows.sort(key=lambda r: r["date"], reverse=True)
    return rows
