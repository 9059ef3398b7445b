"""The tuner on a lever the performance model has no term for without the engine's benchmark: the
prefill chunk, replayed on what real SGLang 0.5.16 measured on one H100 at 64 concurrent requests of
1,024-token prompts (``data/examples/h100-sglang-chunk/``: chunks of 256, 512, 1,024 and 8,192; each a
launch of its own). There every chunk up to 8,192 gave more throughput and a shorter time per token.
Without the benchmark the model's forecast along the chunk is the phase's own step, so a value next to
the evidence reads the same: the search doubles the largest chunk measured instead (under 12 and 15
ms it stopped after its first launch, which broke the limit, and under 20 ms it crept 512, 529, 552).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from grid_replay import GridReplay

from glm5lib import rundir, tune
from glm5lib.engines.sglang.config import ServerConfig

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h100-sglang-chunk"
LEVER = "chunked_prefill_size"
LOAD = 64
PHASES = {256: "baseline", 512: "chunk-512", 1024: "chunk-1k", 8192: "chunk-8k"}


class AtLoad(GridReplay):
    """The recorded phases swept 1-256 concurrent requests: each answers with its level at ``LOAD``."""

    def __init__(self) -> None:
        rows = []
        for value, phase in PHASES.items():
            level = pd.read_csv(EXAMPLE / phase / rundir.SWEEP).set_index("concurrency").loc[LOAD]
            rows.append({"value": value, "phase": phase, "output_throughput": level["output_throughput"],
                         "median_tpot_ms": level["median_tpot_ms"]})
        super().__init__(EXAMPLE, pd.DataFrame(rows), LEVER)
        self._last = {p: (lambda d: d[d["concurrency"] == LOAD])(pd.read_csv(EXAMPLE / p / rundir.SWEEP))
                      for p in self.points["phase"]}


REPLAY = AtLoad()
WORKLOAD = tune.Workload(LOAD, 1024, 128, 20.0, warmup=4)


def test_every_larger_chunk_measured_more_and_a_shorter_time_per_token():
    assert REPLAY.points["output_throughput"].is_monotonic_increasing
    assert REPLAY.points["median_tpot_ms"].is_monotonic_decreasing
    assert float(REPLAY.points.iloc[0]["median_tpot_ms"]) > 15  # the chunk as given breaks 12 and 15 ms


@pytest.mark.parametrize("limit", [12.0, 15.0, 20.0])
def test_the_search_doubles_a_chunk_the_model_cannot_forecast(tmp_path, limit):
    base = ServerConfig.load(EXAMPLE / "capped-config.json")
    launches: list[float] = []
    goal = tune.Goal.parse([f"median_tpot_ms<={limit:g}"])
    result = tune.tune(base, tmp_path, goal, WORKLOAD, backend="sglang", max_launches=4,
                       levers=[f"{LEVER}=256:8192"], measure=REPLAY.measure(tmp_path, launches))
    assert launches == [256, 512, 1024, 2048]
    assert set(result.candidates["prediction_source"].iloc[1:]) == {"probe"}
    picked = float(result.best["changes"][LEVER])
    assert picked == 2048 and REPLAY.figure(picked, "median_tpot_ms") <= limit
    best = float(REPLAY.points.loc[REPLAY.points["median_tpot_ms"] <= limit, "output_throughput"].max())
    assert REPLAY.figure(picked) >= 0.89 * best  # the grid's 8,192 is two more doublings away


def test_the_doubling_ends_where_the_last_one_moved_nothing(tmp_path):
    """A landscape flat beyond 512 (the chunk's figures at 512 everywhere above it): one doubling that
    moved nothing, and the search stops there instead of spending its launches."""
    flat = AtLoad()
    flat.at = lambda value: REPLAY.at(min(value, 512.0))  # type: ignore[method-assign]
    base = ServerConfig.load(EXAMPLE / "capped-config.json")
    launches: list[float] = []
    result = tune.tune(base, tmp_path, tune.Goal.parse(["median_tpot_ms<=20"]), WORKLOAD, backend="sglang",
                       max_launches=6, levers=[f"{LEVER}=256:8192"], measure=flat.measure(tmp_path, launches))
    assert launches == [256, 512, 1024] and result.launches == 3
    assert "moved neither the objective nor the binding limit" in result.stopped
