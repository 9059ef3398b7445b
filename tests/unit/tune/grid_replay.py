"""A recorded grid of launches answering the tuner's launches, for the replay tests.

Each candidate the tuner launches is answered with the grid's level at that value: the nearest
point's sweep row (and, where asked, its server log, config and server info, so the evidence the
tuner reads is the engine's), with throughput and latencies linear in log(value) between the grid
points. No process is started.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from glm5lib import rundir

INTERPOLATED = ("output_throughput", "median_tpot_ms", "median_itl_ms", "median_ttft_ms")
EVIDENCE = (rundir.SERVER_LOG, rundir.CONFIG, "server_info.json")


class GridReplay:
    """``points``: the grid's rows (``value``, ``phase``), each phase a folder under ``folder``."""

    def __init__(self, folder: Path, points: pd.DataFrame, lever: str, evidence: Sequence[str] = EVIDENCE) -> None:
        self.folder, self.lever, self.evidence = folder, lever, tuple(evidence)
        self.points = points.sort_values("value").reset_index(drop=True)
        self._x = np.log(self.points["value"].astype(float).to_numpy())
        self._last = {p: pd.read_csv(folder / p / rundir.SWEEP).iloc[[-1]] for p in self.points["phase"]}

    def nearest(self, value: float) -> pd.Series:
        return self.points.iloc[int(np.argmin(abs(self._x - np.log(value))))]

    def at(self, value: float) -> pd.DataFrame:
        """The grid's level at ``value``: the nearest point's row, its figures interpolated."""
        row = self._last[self.nearest(value)["phase"]].copy()
        for column in INTERPOLATED:
            ys = [float(self._last[p][column].iloc[0]) for p in self.points["phase"]]
            row[column] = float(np.interp(np.log(value), self._x, np.asarray(ys, dtype=float)))
        return row

    def figure(self, value: float, column: str = "output_throughput") -> float:
        return float(self.at(value)[column].iloc[0])

    def measure(self, run_dir: Path, launches: list[float]) -> Callable[..., Path]:
        """The tuner's ``measure``: writes the level at the candidate's value into its phase folder."""

        def measure(changes, phase, extra_levels=()):
            value = float(changes[self.lever])
            launches.append(value)
            folder = run_dir / phase
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            for name in self.evidence:
                src = self.folder / self.nearest(value)["phase"] / name
                if src.exists():
                    shutil.copy(src, folder / name)
            self.at(value).to_csv(folder / rundir.SWEEP, index=False)
            return folder

        return measure

    def check_search(self, run_dir: Path, base: Any, workload: Any, limit: float, *, low: int, high: int,
                     steady: pd.DataFrame | None = None) -> None:
        """Tune ``base``'s lever over ``low:high`` under median TPOT <= ``limit`` on this grid: the
        first launch is the configuration as given (``low``), at most 4 launches, and the pick reaches
        95% of the best grid point (of ``steady``: every point) that meets the limit, and meets it."""
        from glm5lib import tune

        goal = tune.Goal.parse([f"median_tpot_ms<={limit:g}"])
        launches: list[float] = []
        result = tune.tune(base, run_dir, goal, workload, backend="sglang", max_launches=4,
                           levers=[f"{self.lever}={low}:{high}"], measure=self.measure(run_dir, launches))
        shown = result.candidates[["value", "objective", "median_tpot_ms", "slo_met"]]
        assert launches[0] == low and len(launches) == result.launches <= 4, launches
        assert result.best is not None, shown
        picked = float(result.best["changes"][self.lever])
        points = self.points if steady is None else steady
        best = float(points[points["median_tpot_ms"] <= limit]["output_throughput"].max())
        assert self.figure(picked) >= 0.95 * best, (picked, best, shown)
        assert self.figure(picked, "median_tpot_ms") <= limit, shown
