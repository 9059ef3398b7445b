"""Rows into the tables of :class:`glm5lib.logs.ServerLog`: times, tracebacks, errors and http.

Shared by every engine's parser, so that each fills the tables with the same columns and types.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from glm5lib.logs.fatal import classify_fatal
from glm5lib.logs.text import EXC_LINE_RE
from glm5lib.masking import mask_text

__all__ = ["ERROR_COLUMNS", "HTTP_COLUMNS", "block_row", "convert_column", "empty_frame", "errors_frame", "http_frame", "to_timestamps"]

ERROR_COLUMNS = ("time", "rank", "kind", "message", "text")
HTTP_COLUMNS = ("time", "client", "method", "path", "status")


def empty_frame(columns: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """A table with no rows: ``time`` as datetime64, the other columns as object."""
    return pd.DataFrame({c: pd.Series(dtype="datetime64[ns]" if c == "time" else object) for c in columns})


def errors_frame(errors: list[dict[str, Any]]) -> pd.DataFrame:
    """Error rows (dicts with the keys of :data:`ERROR_COLUMNS`) -> the ``errors`` table."""
    if not errors:
        return empty_frame(ERROR_COLUMNS)
    frame = pd.DataFrame(errors, columns=list(ERROR_COLUMNS))
    frame["time"] = to_timestamps(frame["time"])
    return frame


def http_frame(rows: list[tuple[Any, ...]]) -> pd.DataFrame:
    """Access-line rows ``(time, client, method, path, status)`` -> the ``http`` table."""
    if not rows:
        return empty_frame(HTTP_COLUMNS)
    frame = pd.DataFrame(rows, columns=list(HTTP_COLUMNS))
    frame["time"] = to_timestamps(frame["time"])
    return frame


def block_row(block: dict[str, Any]) -> dict[str, Any]:
    lines = [ln for ln in block["lines"]]
    while lines and not lines[-1].strip():
        lines.pop()
    key = (tuple(lines), block.get("head"))
    known = _BLOCKS.get(key)
    if known is None:
        known = _read_block(lines, block.get("head"))
        if len(_BLOCKS) >= _BLOCKS_MAX:
            _BLOCKS.clear()
        _BLOCKS[key] = known
    text, message, kind = known
    return {"time": block["time"], "rank": block["rank"], "kind": kind, "message": message, "text": text}


# Blocks read before: every rank prints the same traceback, and a crashing server prints it
# again at each restart (masking and classifying one is most of the cost of an error row).
_BLOCKS: dict[tuple[tuple[str, ...], str | None], tuple[str, str, str]] = {}
_BLOCKS_MAX = 256


def _read_block(lines: list[str], head: str | None) -> tuple[str, str, str]:
    """A block's masked text, masked message and kind."""
    text = mask_text("\n".join(lines))
    message = ""
    for ln in reversed(lines):
        if EXC_LINE_RE.match(ln) and not ln.strip().startswith(("File ", "Traceback")):
            message = ln.strip()
            break
    if not message:
        # No exception line (the traceback was cut off): the head says most.
        message = next((ln.strip() for ln in lines if ln.strip()), "")
    kind = classify_fatal(text) or "other"
    if kind == "other" and head:
        kind = head
    return text, mask_text(message), kind


def fill_hybrid(frame: pd.DataFrame) -> None:
    """Hybrid (SWA / mamba) models log per-pool counts; fill the common columns as SGLang's
    metrics do: the fuller pool counts."""
    for col, parts in (("num_token", ("full_token", "swa_token")), ("token_usage", ("full_token_usage", "swa_token_usage"))):
        present = [p for p in parts if p in frame.columns]
        if not present:
            continue
        filled = pd.concat([pd.to_numeric(frame[p], errors="coerce") for p in present], axis=1).max(axis=1)
        if col not in frame.columns:
            frame[col] = filled
        elif pd.api.types.is_numeric_dtype(frame[col].dtype):
            frame[col] = frame[col].fillna(filled)


def to_timestamps(values: Any) -> pd.Series:
    """Time strings (or datetimes) -> datetime64[ns]; what cannot be read becomes NaT."""
    series = pd.Series(values, dtype=object) if not isinstance(values, pd.Series) else values
    if pd.api.types.is_datetime64_dtype(series.dtype):
        return series if series.dtype == "datetime64[ns]" else series.astype("datetime64[ns]")
    try:
        return pd.Series(np.array(series.to_numpy(), dtype="datetime64[ns]"), index=series.index)
    except (ValueError, TypeError):
        pass
    try:
        parsed = pd.to_datetime(series, format="ISO8601")
    except (ValueError, TypeError):
        parsed = pd.to_datetime(series, errors="coerce", format="mixed")
    return parsed.astype("datetime64[ns]")


_BOOL_VALUES = {"True": True, "False": False, "true": True, "false": False}


def convert_column(col: Any) -> Any:
    """Raw string values of one column (an object array, None where absent) -> a typed array."""
    col = np.asarray(col, dtype=object)
    nulls = np.equal(col, None)
    has_nulls = bool(nulls.any())
    if has_nulls and nulls.all():
        return col
    sample = col[np.argmin(nulls)] if has_nulls else col[0]
    if sample in _BOOL_VALUES:
        if not has_nulls:
            trues = col == "True"
            if (trues | (col == "False")).all():
                return trues
        return pd.array([_BOOL_VALUES.get(v) if v is not None else None for v in col], dtype="boolean")
    if isinstance(sample, str) and sample.endswith("%"):
        cleaned = [v[:-1] if isinstance(v, str) and v.endswith("%") else v for v in col]
        return pd.to_numeric(pd.Series(cleaned, dtype=object), errors="coerce").to_numpy(dtype=float) / 100.0
    if not has_nulls:
        if isinstance(sample, str) and "." not in sample and "e" not in sample:
            try:
                return col.astype(np.int64)
            except (ValueError, TypeError, OverflowError):
                pass
        try:
            return col.astype(np.float64)
        except (ValueError, TypeError, OverflowError):
            pass
    converted = pd.to_numeric(pd.Series(col, dtype=object), errors="coerce")
    if int(converted.isna().sum()) > int(nulls.sum()):
        return col  # text values: keep them as text
    return converted.to_numpy()
