"""The recorded real-engine runs under data/examples, as the diagnosis test modules read them."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

EXAMPLES = Path(__file__).resolve().parents[3] / "data" / "examples"
#: the concurrency levels the recorded chunk runs measured
CHUNK_LEVELS = [1, 16, 64, 256]


def measured(example: Path, phase: str) -> pd.Series:
    """A recorded phase's output tok/s by concurrency, as its sweep measured it."""
    return pd.read_csv(example / phase / "sweep.csv").set_index("concurrency")["output_throughput"]
