"""A level counts only once the running batch reaches what the load and the cap allow, or holds a
smaller one steadily: judged on the real H200 grid (SGLang 0.5.16, 256 concurrent, 25-s levels)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from glm5lib.tune.search import _pick, batch_held

RUN = Path(__file__).resolve().parents[3] / "data" / "examples" / "h200-sglang"


@pytest.mark.parametrize(("phase", "held"), [("grid-1", True), ("grid-3", True), ("grid-4", False), ("grid-5", False)])
def test_a_level_whose_batch_swung_in_cohorts_is_not_steady(phase, held):
    ok, why = batch_held(RUN / "grid" / phase, 256)
    assert ok is held, why
    assert ("swung" in why) is (not held)


def test_a_level_at_its_cap_with_a_queue_is_steady():
    ok, why = batch_held(RUN / "baseline", 1024)
    assert ok and "of the 64" in why


def test_a_level_without_scheduler_lines_is_not_judged(tmp_path):
    (tmp_path / "p").mkdir()
    assert batch_held(tmp_path / "p", 8) == (True, "no scheduler figures to judge the level by")


def _row(phase: str, objective: float, held: bool) -> dict:
    return {"phase": phase, "objective": objective, "output_throughput": objective, "slo_met": True,
            "binding_limit": "", "binding_ratio": 0.5, "running": math.nan, "changes": "{}",
            "batch_held": held, "held_note": ""}


def test_the_winner_is_a_steady_level_while_one_meets_the_limits():
    rows = [_row("tune-1", 14_076.0, True), _row("tune-2", 15_000.0, False)]
    assert _pick(rows, 0.03)["phase"] == "tune-1"
    # no steady candidate at all: the best measured still wins, and says it was not steady
    assert _pick([_row("tune-2", 15_000.0, False)], 0.03)["batch_held"] is False


def test_a_candidate_counts_the_requests_its_level_completed():
    """The grid's cap 64 at 256 offered completed 957 requests in its 25-s level (grid/tune.csv):
    the tuner's reading of a candidate carries the sweep's figure, not the scheduler table's (which
    has none), beside the batch the scheduler held."""
    from glm5lib.tune import Goal, Workload
    from glm5lib.tune.search import _evaluate

    out = _evaluate(RUN / "grid" / "grid-1", Goal.parse(["median_tpot_ms<=20"]), Workload(256, 256, 256, 25.0))
    assert out["completed"] == 957
    assert out["running"] == pytest.approx(64, abs=1) and out["batch_held"] is True


def test_a_swinging_candidate_that_beat_every_steady_one_is_measured_once_more():
    """The stand-in's cap 511 met the limit at 3,006 tok/s while its batch swung 16-511 (the same
    value held 512 in another launch); the steady best was 796. With launches left, the search
    measures it once more rather than stop at 796; a second swing is final."""
    from glm5lib.tune import Goal, Workload
    from glm5lib.tune.search import SearchOptions, _Search

    lever = type("L", (), {"field": "max_running_requests"})()
    search = _Search(RUN, Goal.parse(["median_tpot_ms<=250"]), Workload(1024, 128, 32, 6.0), lever,
                     SearchOptions(), None, None)
    steady = {**_row("tune-1", 796.0, True), "changes": '{"max_running_requests": 64}'}
    swung = {**_row("tune-3", 3006.0, False), "changes": '{"max_running_requests": 511}'}
    search.rows = [steady, swung]
    again = search.again(0.03)
    assert again is not None and again.value == 511 and "swung" in again.reason
    search.rows.append({**swung, "phase": "tune-4"})
    assert search.again(0.03) is None
    # nothing to gain over the steady best: no launch spent on it
    search.rows = [steady, {**swung, "objective": 800.0}]
    assert search.again(0.03) is None
