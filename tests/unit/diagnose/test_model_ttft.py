"""The TTFT line beside the queue (glm5lib.diagnose.model.ttft), on levels made up to show each rule."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from glm5lib.diagnose.model.ttft import fit_ttft


def level(concurrency, running, ttft, input_len=1000, output_len=100, u_ms=10.0, tpot_ms=9.0):
    return SimpleNamespace(concurrency=concurrency, running=running, ttft_ms=ttft, input_len=input_len,
                           output_len=output_len, u_ms=u_ms, tpot_ms=tpot_ms)


def test_the_line_passes_through_the_request_alone_and_takes_its_slope_from_the_loaded_levels():
    fixed, per_token = fit_ttft([level(1, 1, 30.0), level(16, 16, 190.0), level(64, 64, 650.0)], lambda p: False)
    assert fixed + per_token * 1000 == pytest.approx(30.0)
    assert per_token == pytest.approx(0.01, rel=0.02)


def test_a_level_short_of_its_load_counts_every_prompt_offered_where_they_waited_for_their_prefill():
    levels = [level(1, 1, 30.0), level(64, 32, 660.0)]
    fixed, per_token = fit_ttft(levels, lambda p: True)
    assert fixed + per_token * 64 * 1000 == pytest.approx(660.0)  # 64 prompts ahead, not 32
    # queued behind a cap instead, the level says nothing of the line: one point, a flat line
    assert fit_ttft(levels, lambda p: False) == (30.0, 0.0)


def test_without_a_request_alone_it_is_least_squares_and_without_any_ttft_the_service_time_speaks():
    fixed, per_token = fit_ttft([level(16, 16, 170.0), level(64, 64, 650.0)], lambda p: False)
    assert (fixed, per_token) == (pytest.approx(10.0), pytest.approx(0.01))
    none = [level(64, 32, None), level(128, 32, None)]
    fixed, per_token = fit_ttft(none, lambda p: False)
    assert fixed + per_token * 32 * 1000 == pytest.approx(100 * 10.0 - 99 * 9.0)
    assert fit_ttft([], lambda p: False) is None
