"""The recorded real-engine runs under data/examples, as the diagnosis test modules read them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from glm5lib import diagnose as dg

EXAMPLES = Path(__file__).resolve().parents[3] / "data" / "examples"
#: the concurrency levels the recorded chunk runs measured
CHUNK_LEVELS = [1, 16, 64, 256]


def measured(example: Path, phase: str) -> pd.Series:
    """A recorded phase's output tok/s by concurrency, as its sweep measured it."""
    return pd.read_csv(example / phase / "sweep.csv").set_index("concurrency")["output_throughput"]


def assert_recorded_forecast(model: Any, record: Path, changes: dict[str, Any], levels: list[int]) -> None:
    """The forecast a GPU host wrote before a launch (``record``) is what ``model`` gives from the
    recorded files today: same levels, verdicts, points and bands."""
    recorded = json.loads(record.read_text())
    now = model.forecast(changes, levels)
    assert [r["concurrency"] for r in recorded] == levels
    for r, f in zip(recorded, now, strict=True):
        assert r["given"] == f.given
        assert f.predicted_tok_s == pytest.approx(r["predicted_tok_s"], rel=1e-6)
        assert (f.low_tok_s, f.high_tok_s) == pytest.approx((r["low_tok_s"], r["high_tok_s"]), rel=1e-6)


def leading_finding(example: Path, rule: str, phase: str = "baseline") -> pd.Series:
    """The first finding of a recorded phase diagnosed against the shipped reference, held to be ``rule``'s."""
    findings = dg.diagnose(example, reference="k2-thinking", phase=phase, write=False)
    first = findings.iloc[0]
    assert first["rule"] == rule, findings[["rule", "score"]].to_string()
    return first
