"""A sweep's records on disk: ``sweep.csv`` (one row per level) and ``requests.jsonl``.

A level is identified by :data:`KEY_COLUMNS`; writing a level's row replaces an earlier row of
the same level (a rerun), atomically, so the file is whole after any crash; a resumed sweep finds
the levels it already has with :func:`find_level`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import rundir
from glm5lib.loadgen.metrics import SWEEP_COLUMNS

__all__ = ["KEY_COLUMNS", "find_level", "load_requests", "load_sweep", "write_level_row"]

#: The columns that identify a level of a sweep.
KEY_COLUMNS = ("concurrency", "mode", "request_rate", "api", "input_len", "output_len")


def load_sweep(run_dir: str | Path) -> pd.DataFrame:
    """The ``sweep.csv`` of a run (phase) folder; an empty frame with the columns when absent."""
    path = Path(run_dir) / rundir.SWEEP
    if not path.exists():
        return pd.DataFrame(columns=SWEEP_COLUMNS)
    return pd.read_csv(path)


def load_requests(run_dir: str | Path, *, complete_levels_only: bool = True) -> pd.DataFrame:
    """Per-request records of a run folder as a DataFrame (``requests.jsonl``).

    With ``complete_levels_only`` the records of level attempts that never reached sweep.csv
    (an interrupted level that was later rerun) are left out.
    """
    path = Path(run_dir) / rundir.REQUESTS
    if not path.exists():
        return pd.DataFrame()
    frame = pd.read_json(path, lines=True)
    if complete_levels_only and not frame.empty and "level_id" in frame:
        done = set(load_sweep(run_dir).get("level_id", pd.Series(dtype=str)).dropna())
        frame = frame[frame["level_id"].isin(done) | frame["warmup"].astype(bool)]
    return frame.reset_index(drop=True)


def _same_level(row: pd.Series, key: dict[str, Any]) -> bool:
    for k, v in key.items():
        if k not in row.index:
            return False
        have = row[k]
        if isinstance(v, float) and math.isinf(v):
            if not (isinstance(have, (int, float)) and math.isinf(float(have))):
                return False
        elif isinstance(v, (int, float)):
            try:
                if float(have) != float(v):
                    return False
            except (TypeError, ValueError):
                return False
        elif str(have) != str(v):
            return False
    return True


def find_level(frame: pd.DataFrame, key: dict[str, Any]) -> dict[str, Any] | None:
    """The last row of ``frame`` for the level ``key`` identifies, or None."""
    if frame.empty:
        return None
    match = frame[frame.apply(_same_level, axis=1, key=key)]
    return None if match.empty else match.iloc[-1].to_dict()


def write_level_row(out_dir: str | Path, row: dict[str, Any]) -> None:
    """Add a level's row to ``sweep.csv`` in ``out_dir``, replacing an earlier row of that level."""
    path = Path(out_dir) / rundir.SWEEP
    frame = load_sweep(out_dir)
    key = {k: row[k] for k in KEY_COLUMNS}
    if not frame.empty:
        frame = frame[~frame.apply(_same_level, axis=1, key=key)]
    new = pd.DataFrame([row], columns=SWEEP_COLUMNS)
    frame = new if frame.empty else pd.concat([frame, new], ignore_index=True)
    tmp = path.with_suffix(".csv.tmp")
    frame.to_csv(tmp, index=False)
    os.replace(tmp, path)
