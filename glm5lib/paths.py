"""Where glm5lib finds its shipped data and where runs are written.

The shipped data (stand-in profiles, reference logs, configs) lives in the repository's
``data/`` folder beside the package. ``GLM5_DATA_DIR`` points elsewhere when the package is
installed without the checkout.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["data_dir", "display_path", "runs_dir"]


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


def display_path(path: str | Path) -> str:
    """A path as shown in logs and reports: ``data/...`` for shipped data, else as given.

    Keeps the machine's own folder layout out of logs and reports that get shared.
    """
    p = Path(path)
    try:
        return str(Path("data") / p.resolve().relative_to(data_dir().resolve()))
    except ValueError:
        return str(path)
