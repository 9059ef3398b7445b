"""Reading a run folder's files for the report, and the plain values the report keeps.

A missing or unreadable file is ``None`` (logged), never an error: a partial run still gets a
report of what it has. :func:`clean` makes values JSON-safe; :func:`fmt` writes a number the way
every part of the report shows it.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["clean", "fmt", "missing", "read_csv", "read_json"]

log = logging.getLogger(__name__)


def read_json(path: Path) -> Any:
    """The JSON value of ``path``, or ``None`` when it is absent or unreadable."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None


def read_csv(path: Path) -> pd.DataFrame | None:
    """The table of ``path``, or ``None`` when it is absent, empty or unreadable."""
    if not path.exists() or path.stat().st_size == 0:
        return None
    try:
        return pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        log.warning("cannot read %s: %s", path, exc)
        return None


def clean(value: Any) -> Any:
    """JSON-safe plain Python values (NaN -> None, numpy -> Python)."""
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, (pd.Timestamp, _dt.datetime)):
        return value.isoformat()
    return value


def missing(value: Any) -> bool:
    """True for ``None`` and NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt(value: Any, digits: int = 0) -> str:
    """A value as the report writes it: ``1,234``, ``yes``/``no``, ``n/a`` for a missing one."""
    if missing(value):
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        return f"{value:,.{digits}f}"
    return str(value)
