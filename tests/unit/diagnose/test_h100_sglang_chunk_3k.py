"""Real SGLang 0.5.16 on one H100 with 3,072-token prompts under a 1,024-token prefill chunk and 128-token
outputs (data/examples/h100-sglang-chunk-3k): the prefill term checked on a fourth workload, none of whose
shape (three forwards a prompt, twice the outputs of the 4,096-token run) it was built from. The chunk
forecast was written on the GPU host before its launch; the same configuration was launched a second
time (``chunk-4k-again``, cut after three levels), the first measure of how far two launches stand apart."""

from __future__ import annotations

import pytest
from recorded import EXAMPLES, assert_recorded_forecast, leading_finding, measured

from glm5lib.diagnose.model import MAX_BAND, PerfModel

EXAMPLE = EXAMPLES / "h100-sglang-chunk-3k"
LEVELS = [1, 16, 64, 128]
CHANGE = {"chunked_prefill_size": 4096}


@pytest.fixture(scope="module")
def model() -> PerfModel:
    return PerfModel.fit_phase(EXAMPLE / "baseline")


def test_the_prefill_budget_leads_and_names_the_chunk():
    first = leading_finding(EXAMPLE, "prefill_budget")
    assert "took the whole budget of 1,024 tokens" in first["evidence"]


def test_the_forecast_written_before_the_launch_is_what_the_model_gives_from_the_files(model):
    assert_recorded_forecast(model, EXAMPLE / "baseline" / "forecast-chunk-4k.json", CHANGE, LEVELS)


def test_every_level_is_forecast_and_holds_its_band(model):
    tok_s = measured(EXAMPLE, "chunk-4k")
    for f in model.forecast(CHANGE, LEVELS):
        assert f.given, f.needs
        assert any("prefill chunk 1,024 -> 4,096" in s for s in f.sources), f.sources
        assert max(1 - f.low_tok_s / f.predicted_tok_s, f.high_tok_s / f.predicted_tok_s - 1) <= MAX_BAND
        assert f.low_tok_s <= tok_s[f.concurrency] <= f.high_tok_s, (f.concurrency, tok_s[f.concurrency], f)
        assert tok_s[f.concurrency] == pytest.approx(f.predicted_tok_s, rel=0.10)


def test_the_recorded_run_measured_what_the_readme_says():
    base, chunk, again = (measured(EXAMPLE, p) for p in ("baseline", "chunk-4k", "chunk-4k-again"))
    gains = chunk / base
    assert 1.0 < gains[1] < 1.06 and 1.1 < gains[16] < 1.2 and 1.15 < gains[64] < 1.25 and gains[128] > 1.3, gains
    # two launches of one configuration, the same levels: within 5% of each other at every level both ran
    spread = (again / chunk).dropna()
    assert list(spread.index) == [1, 16, 64] and ((spread - 1).abs() < 0.05).all(), spread
