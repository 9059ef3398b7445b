"""Where glm5lib finds its shipped data and where runs are written.

The shipped data (stand-in profiles, reference logs, configs) lives in the repository's
``data/`` folder beside the package. ``GLM5_DATA_DIR`` points elsewhere when the package is
installed without the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir", "runs_dir"]


def data_dir() -> Path:
    """The folder holding profiles/, configs/, reference/ and examples/."""
    override = os.environ.get("GLM5_DATA_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parent.parent / "data"


def runs_dir() -> Path:
    """The default parent of run folders (``data/runs``), or ``GLM5_RUNS_DIR``."""
    override = os.environ.get("GLM5_RUNS_DIR")
    if override:
        return Path(override)
    return data_dir() / "runs"
