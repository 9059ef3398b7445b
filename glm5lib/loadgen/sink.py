"""Where a sweep puts what it measures: each request's record in JSONL, each level's row in CSV.

:class:`RecordSink` appends a line to ``requests.jsonl`` as each request ends (to a temporary
file when there is no run folder: a level's figures are always read back from its lines, so a
long level holds no records in memory) and gives a level's records again on demand.
:class:`RowSink` writes each level's row to ``sweep.csv`` as the level ends and finds the rows a
resumed sweep already has.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pandas as pd

from glm5lib import rundir
from glm5lib.loadgen.client import RequestRecord
from glm5lib.loadgen.records import find_level, load_sweep, write_level_row

__all__ = ["RecordSink", "RowSink"]


class RecordSink:
    """``requests.jsonl`` of ``out_dir`` (None: a temporary file removed at :meth:`close`)."""

    def __init__(self, out_dir: Path | None) -> None:
        self._spool: tempfile.TemporaryDirectory[str] | None = None
        if out_dir is None:
            self._spool = tempfile.TemporaryDirectory(prefix="glm5-sweep-")
            self.path = Path(self._spool.name) / rundir.REQUESTS
        else:
            self.path = out_dir / rundir.REQUESTS
        self._fh: BinaryIO = open(self.path, "ab")  # noqa: SIM115

    def write(self, rec: RequestRecord) -> None:
        self._fh.write(rec.to_json().encode() + b"\n")
        self._fh.flush()

    def tell(self) -> int:
        """Where the next record goes: a level's records start at the offset told before it."""
        self._fh.flush()
        return self._fh.tell()

    def level_records(self, offset: int, level_id: str) -> Callable[[], Iterator[RequestRecord]]:
        """The level's (non-warm-up) records as they are on disk, read again on each call."""
        self._fh.flush()
        path, needle = self.path, f'"level_id":{json.dumps(level_id)}'.encode()

        def read() -> Iterator[RequestRecord]:
            with open(path, "rb") as lines:
                lines.seek(offset)
                for line in lines:
                    if needle in line:
                        rec = RequestRecord.from_json(line)
                        if not rec.warmup:
                            yield rec

        return read

    def close(self) -> None:
        self._fh.close()
        if self._spool is not None:
            self._spool.cleanup()


class RowSink:
    """``sweep.csv`` of ``out_dir``; without a run folder rows are only returned, not written."""

    def __init__(self, out_dir: Path | None) -> None:
        self.out_dir = out_dir

    def existing(self) -> pd.DataFrame:
        """The rows already in ``sweep.csv`` (empty without a run folder)."""
        return load_sweep(self.out_dir) if self.out_dir is not None else pd.DataFrame()

    def find(self, existing: pd.DataFrame, key: dict[str, Any]) -> dict[str, Any] | None:
        """The row of the level ``key`` names among ``existing``, or None."""
        return find_level(existing, key)

    def write(self, row: dict[str, Any]) -> None:
        if self.out_dir is not None:
            write_level_row(self.out_dir, row)
