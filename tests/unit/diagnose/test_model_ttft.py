"""The TTFT line beside the queue (glm5lib.diagnose.model.ttft), on levels made up to show each rule."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from glm5lib.diagnose.model.ttft import fit_ttft


def level(concurrency, running, ttft, input_len=1000, output_len=100, u_ms=10.0, tpot_ms=9.0):
    return SimpleNamespace(concurrency=concurrency, running=running, ttft_ms=ttft, input_len=input_len,
                           output_len=output_len, u_ms=u_ms, tpot_ms=tpot_ms)


def test_the_line_passes_through_the_request_alone_and_takes_its_slope_from_the_loaded_levels():
    line = fit_ttft([level(1, 1, 30.0), level(16, 16, 190.0), level(64, 64, 650.0)], lambda p: False)
    assert line.at(1000)[0] == pytest.approx(30.0)
    assert line.per_token_ms == pytest.approx(0.01, rel=0.02) and line.anchor is None
    assert line.at(64000)[0] == line.at(64000)[1]  # a slope read: the edge is the point


def test_a_level_short_of_its_load_counts_every_prompt_offered_where_they_waited_for_their_prefill():
    levels = [level(1, 1, 30.0), level(64, 32, 660.0)]
    assert fit_ttft(levels, lambda p: True).at(64 * 1000)[0] == pytest.approx(660.0)  # 64 prompts ahead, not 32
    # queued behind a cap instead, the level says nothing of the line: one point, a flat line whose
    # upper edge beyond it is the line through the point and zero
    flat = fit_ttft(levels, lambda p: False)
    assert (flat.fixed_ms, flat.per_token_ms) == (30.0, 0.0)
    assert flat.at(1000) == (30.0, 30.0) and flat.at(64 * 1000) == (30.0, pytest.approx(64 * 30.0))


def test_without_a_request_alone_it_is_least_squares_and_without_any_ttft_the_service_time_speaks():
    line = fit_ttft([level(16, 16, 170.0), level(64, 64, 650.0)], lambda p: False)
    assert (line.fixed_ms, line.per_token_ms) == (pytest.approx(10.0), pytest.approx(0.01))
    none = [level(64, 32, None), level(128, 32, None)]
    assert fit_ttft(none, lambda p: False).at(32 * 1000)[0] == pytest.approx(100 * 10.0 - 99 * 9.0)
    assert fit_ttft([], lambda p: False) is None
