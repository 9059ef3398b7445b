"""How a client-bound level is put in words: a starved client is not called the limit."""

from __future__ import annotations

from glm5lib.loadgen.selfcheck import client_bound_text, client_limited


def _row(cpu: float, lag: float, itl: float) -> dict:
    bound, ratio = client_limited(cpu, lag, itl)
    assert bound
    return {"client_cpu_pct": cpu, "loop_lag_p99_ms": lag, "median_itl_ms": itl, "loop_lag_itl_ratio": ratio,
            "other_processes": "VLLM::Worker[7] 97%"}


def test_a_client_below_half_a_core_reads_as_starved_with_the_processes_that_held_the_cores():
    text = client_bound_text(_row(4.0, 323.0, 12.0))
    assert text.startswith("the client was starved of CPU, not busy (CPU 4% of a core")
    assert "VLLM::Worker[7] 97%" in text and "323.0 ms at p99" in text and "2692% of the median" in text
    assert "the limit" not in text


def test_tokens_arriving_together_are_named_as_bursts_not_an_infinite_ratio():
    text = client_bound_text(_row(6.0, 1484.0, 0.0))
    assert "bursts (median inter-token interval 0.0 ms)" in text and "inf" not in text


def test_a_busy_client_is_the_limit():
    text = client_bound_text(_row(95.0, 40.0, 50.0))
    assert text.startswith("the client was the limit (CPU 95% of a core; loop lag p99 40.0 ms, 80% of the median")


def test_missing_figures_are_said_as_missing_not_raised():
    text = client_bound_text({"client_cpu_pct": None, "loop_lag_p99_ms": 30.0})
    assert "no inter-token interval measured" in text and "other processes: none" in text
