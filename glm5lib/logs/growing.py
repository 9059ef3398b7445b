"""A table that grows at its end, for a follower that builds its tables again after each read.

:class:`GrowingTable` keeps each column in an array with room to spare (its capacity doubles
when it is full): rows appended are written after the kept ones, and :meth:`GrowingTable.frame`
is a DataFrame over the first ``len`` rows of those arrays, made without copying them. An
update thus costs what its new rows cost, however long the log already is.

The tables handed out share the kept arrays under pandas' copy-on-write: a caller writing into
one gets a copy of what it writes to, and the kept rows never change. A part whose columns or
types differ from the kept ones (a new column, a number where there was text) is joined as
``pd.concat`` joins it (once, at the cost of a copy); the kept table then takes the joined
columns and types.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionArray

__all__ = ["GrowingTable"]

_MIN_CAPACITY = 1024


def _backing(values: Any) -> tuple[str, Any, tuple[np.ndarray, ...]] | None:
    """A column's values -> (how to rebuild it, a template, its numpy arrays); None for a kind
    of column not kept in arrays (the table is then joined by concat)."""
    if isinstance(values, np.ndarray):
        return "numpy", None, (values,)
    if isinstance(values, pd.arrays.BooleanArray | pd.arrays.IntegerArray | pd.arrays.FloatingArray):
        return "masked", type(values), (values._data, values._mask)
    if isinstance(values, ExtensionArray) and hasattr(values, "_ndarray") and hasattr(values, "_from_backing_data"):
        return "backed", values, (values._ndarray,)
    return None


def _rebuild(how: str, template: Any, arrays: tuple[np.ndarray, ...]) -> Any:
    if how == "numpy":
        return arrays[0]
    if how == "masked":
        return template(arrays[0], arrays[1], copy=False)
    return template._from_backing_data(arrays[0])


def _values(series: pd.Series) -> Any:
    """A column's values as numpy holds them, or its extension array."""
    array = series.array
    if type(array) is pd.arrays.NumpyExtensionArray:  # not a subclass (text is one)
        return array.to_numpy()
    return array


def _copy_on_write() -> bool:
    """Whether pandas copies a shared table when either side writes to it."""
    if int(pd.__version__.split(".")[0]) >= 3:
        return True
    return pd.get_option("mode.copy_on_write") is True


class GrowingTable:
    """Rows appended at the end of a table; :meth:`frame` hands out the whole without a copy.

    ``refinish`` (optional) is applied to the joined table when a part does not fit the kept
    columns (the caller's last touches, such as putting columns into their order)."""

    def __init__(self, refinish: Callable[[pd.DataFrame], pd.DataFrame] | None = None) -> None:
        self._refinish = refinish
        self._columns: list[str] = []
        self._kinds: list[tuple[str, Any]] = []
        self._arrays: list[list[np.ndarray]] = []
        self._len = 0
        self._capacity = 0
        self._anchor: pd.DataFrame | None = None  # the whole capacity, alive while it is current
        self._whole: pd.DataFrame | None = None  # a table not kept in arrays (joined by concat)

    def __len__(self) -> int:
        return len(self._whole) if self._whole is not None else self._len

    def append(self, part: pd.DataFrame) -> None:
        """Add ``part``'s rows after the kept ones."""
        if not len(part.columns):
            return
        if self._whole is None and self._anchor is None:
            self._keep(part)
            return
        if self._whole is None:
            fitted = self._fit(part)
            if fitted is not None:
                self._write(fitted)
                return
        joined = pd.concat([self.frame(), part], ignore_index=True, sort=False)
        if self._refinish is not None:
            joined = self._refinish(joined)
        self._keep(joined)

    def frame(self) -> pd.DataFrame:
        """The whole table (sharing the kept arrays under copy-on-write)."""
        if self._whole is not None:
            return self._whole.copy(deep=not _copy_on_write())
        if self._anchor is None:
            return pd.DataFrame()
        out = self._anchor.iloc[: self._len]
        out.index = pd.RangeIndex(self._len)
        # Without copy-on-write (pandas 2 by default) a caller's writes would reach the kept
        # arrays: it gets a copy.
        return out if _copy_on_write() else out.copy()

    # ---- internals
    def _keep(self, table: pd.DataFrame) -> None:
        """``table`` becomes the kept rows (in new arrays with room to grow)."""
        kinds, arrays = [], []
        for name in table.columns:
            backing = _backing(_values(table[name]))
            if backing is None or not isinstance(name, str) or table.columns.duplicated().any():
                self._whole, self._anchor = table.reset_index(drop=True), None
                return
            kinds.append(backing[:2])
            arrays.append(list(backing[2]))
        self._whole = None
        self._columns = list(table.columns)
        self._kinds = kinds
        self._len = 0
        self._capacity = 0
        self._arrays = [[np.empty(0, dtype=a.dtype) for a in cols] for cols in arrays]
        self._grow(len(table))
        self._write([tuple(cols) for cols in arrays], len(table))

    def _fit(self, part: pd.DataFrame) -> list[tuple[np.ndarray, ...]] | None:
        """``part``'s columns as the kept arrays take them, or None when it must be joined."""
        if list(part.columns) != self._columns:
            missing = [c for c in self._columns if c not in part.columns]
            if [c for c in part.columns if c not in self._columns] or any(
                self._arrays[self._columns.index(c)][0].dtype != np.float64 or self._kinds[self._columns.index(c)][0] != "numpy"
                for c in missing
            ):
                return None
            part = part.assign(**{c: np.full(len(part), np.nan) for c in missing})[self._columns]  # as concat fills
        out = []
        for name, (how, template), kept in zip(self._columns, self._kinds, self._arrays, strict=True):
            backing = _backing(_values(part[name]))
            if backing is None or backing[0] != how:
                return None
            arrays = backing[2]
            if how == "numpy":
                have, new = kept[0].dtype, arrays[0].dtype
                if new != have:
                    if have.kind == "f" and new.kind in "iuf" and np.promote_types(have, new) == have:
                        arrays = (arrays[0].astype(have),)  # as concat makes an int column among floats
                    else:
                        return None
            elif how == "masked":
                if backing[1] is not template or arrays[0].dtype != kept[0].dtype:
                    return None
            elif backing[1].dtype != template.dtype or arrays[0].dtype != kept[0].dtype:
                return None
            out.append(arrays)
        return out

    def _grow(self, more: int) -> None:
        need = self._len + more
        if need <= self._capacity:
            return
        capacity = max(_MIN_CAPACITY, 2 * self._capacity, need + need // 2)  # room to grow
        grown = []
        for cols in self._arrays:
            new_cols = []
            for a in cols:
                b = np.empty(capacity, dtype=a.dtype)
                if a.dtype == object:
                    b[self._len :] = None
                b[: self._len] = a[: self._len]
                new_cols.append(b)
            grown.append(new_cols)
        self._arrays = grown
        self._capacity = capacity
        self._anchor = pd.DataFrame(
            {
                # (a numpy column's dtype given: object stays object, not inferred as text)
                name: pd.Series(_rebuild(how, template, tuple(cols)), dtype=None if how != "numpy" else cols[0].dtype, copy=False)
                for name, (how, template), cols in zip(self._columns, self._kinds, self._arrays, strict=True)
            },
            copy=False,
        )
        for name, cols in zip(self._columns, self._arrays, strict=True):
            backing = _backing(_values(self._anchor[name]))
            if backing is None or not np.may_share_memory(backing[2][0], cols[0]):
                # pandas copied a column (a kind it converts): rows written later would not
                # show in it. The table is then kept whole and joined by concat.
                self._whole = self._anchor.iloc[: self._len].reset_index(drop=True)
                self._anchor = None
                return

    def _write(self, columns: list[tuple[np.ndarray, ...]], n: int | None = None) -> None:
        n = len(columns[0][0]) if n is None else n
        if not n:
            return
        self._grow(n)
        if self._whole is not None:
            table = pd.DataFrame(
                {name: pd.Series(_rebuild(how, template, cols), copy=False)
                 for name, (how, template), cols in zip(self._columns, self._kinds, columns, strict=True)}
            )
            self._whole = pd.concat([self._whole, table], ignore_index=True, sort=False)
            return
        for kept, new in zip(self._arrays, columns, strict=True):
            for a, b in zip(kept, new, strict=True):
                a[self._len : self._len + n] = b
        self._len += n
