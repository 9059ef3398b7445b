"""Real SGLang 0.5.16 on one H100, a baseline held by a cap of 32 and a 512-token chunk together under
2,048-token prompts (data/examples/h100-sglang-cap-chunk): the diagnosis puts the chunk first, the
forecasts of the cap alone and of both changes were written before their launches, and three launches of
each remedy's top levels show a level's window reading wherever its deadline fell in a loop of like
requests, while the loop's cycle rate (clients x output tokens / mean latency) held within 5%."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pandas as pd
import pytest
from recorded import EXAMPLES, assert_recorded_forecast, leading_finding, measured

from glm5lib.diagnose.model import PerfModel

EXAMPLE = EXAMPLES / "h100-sglang-cap-chunk"
LEVELS = [1, 16, 64, 128]
CAP = {"max_running_requests": 256}
BOTH = {"max_running_requests": 256, "chunked_prefill_size": 4096}
LAUNCHES = {"cap-256": ["cap-256", "cap-256-again/launch-1", "cap-256-again/launch-2"],
            "both": ["both", "both-again/launch-1", "both-again/launch-2"]}


def cycle_rate(phase: str) -> pd.Series:
    """A phase's levels read without a window: clients x mean output tokens / mean end-to-end latency."""
    s = pd.read_csv(EXAMPLE / phase / "sweep.csv").set_index("concurrency")
    return s.index.to_series() * (s["total_output_tokens"] / s["completed"]) / (s["mean_e2e_latency_ms"] / 1000)


@pytest.fixture(scope="module")
def model() -> PerfModel:
    return PerfModel.fit_phase(EXAMPLE / "baseline")


def test_the_chunk_leads_under_the_cap_and_after_it_and_the_load_after_both():
    first = leading_finding(EXAMPLE, "prefill_budget")
    assert "took the whole budget of 512 tokens" in first["evidence"] and "a limit of 32" in first["evidence"]
    assert leading_finding(EXAMPLE, "prefill_budget", phase="cap-256") is not None
    assert leading_finding(EXAMPLE, "load_bound", phase="both") is not None


def test_the_forecast_of_both_written_before_its_launch_is_what_the_model_gives_from_the_files(model):
    assert_recorded_forecast(model, EXAMPLE / "baseline" / "forecast-both.json", BOTH, LEVELS)


def test_the_cap_forecast_was_made_from_a_step_read_below_the_batches_it_served():
    """Written before the second benchmark timed the step at 64 and 128: its points there are the curve's
    reading from levels of at most 31 running; with the timed step they fall within 3% of the cycle rate."""
    recorded = {r["concurrency"]: r for r in json.loads((EXAMPLE / "baseline" / "forecast-cap-256.json").read_text())}
    assert all(r["given"] for r in recorded.values()) and recorded[128]["extrapolated"]
    rates = pd.concat([cycle_rate(p) for p in LAUNCHES["cap-256"]], axis=1).mean(axis=1)
    assert recorded[128]["predicted_tok_s"] / rates[128] - 1 == pytest.approx(0.22, abs=0.02)
    now = {f.concurrency: f for f in PerfModel.fit_phase(EXAMPLE / "baseline").forecast(CAP, [64, 128])}
    for c in (64, 128):
        assert any("bench_one_batch step profile" in s for s in now[c].sources), now[c].sources
        assert now[c].predicted_tok_s == pytest.approx(rates[c], rel=0.03)
        assert now[c].low_tok_s <= rates[c] <= now[c].high_tok_s


def test_windows_swung_with_where_the_deadline_fell_while_cycle_rates_held():
    for remedy, phases in LAUNCHES.items():
        window = pd.concat([measured(EXAMPLE, p).rename(p) for p in phases], axis=1).loc[[64, 128]]
        rate = pd.concat([cycle_rate(p).rename(p) for p in phases], axis=1).loc[[64, 128]]
        assert (window.max(axis=1) / window.min(axis=1) - 1 <= 0.50).all()
        assert (rate.max(axis=1) / rate.min(axis=1) - 1 < 0.05).all(), (remedy, rate)
        assert ((window / rate).min(axis=1) > 1.05).all(), (remedy, window / rate)  # every window read high
    cap = pd.concat([measured(EXAMPLE, p) for p in LAUNCHES["cap-256"]], axis=1).loc[128]
    assert cap.max() / cap.min() > 1.4  # the first launch's window: two decodes and one prefill


def test_the_forecast_of_both_holds_against_the_cycle_rate(model):
    rates = pd.concat([cycle_rate(p) for p in LAUNCHES["both"]], axis=1).mean(axis=1)
    for f in model.forecast(BOTH, LEVELS):
        assert f.given and f.low_tok_s <= rates[f.concurrency] <= f.high_tok_s, (f.concurrency, rates[f.concurrency])
        assert f.predicted_tok_s == pytest.approx(rates[f.concurrency], rel=0.10)


def test_a_forecast_read_off_the_curve_asks_for_the_step_that_settled_it(tmp_path):
    """The baseline as it stood when the cap's forecast was written (its benchmark at batch 4 only): the
    given levels at 64 and 128 read their step off the curve, and settling the forecast asks for one
    benchmark at those batches; with that benchmark's rows back, nothing more is asked."""
    from glm5lib import stepbench

    shutil.copytree(EXAMPLE / "baseline", tmp_path / "baseline")
    profile = tmp_path / "baseline" / "step-profile.csv"
    rows = pd.read_csv(profile)
    rows[rows["batch"] == 4].to_csv(profile, index=False)
    asked = stepbench.settle_forecast(tmp_path, "baseline", CAP, LEVELS, take=False)
    assert all(f.given for f in asked.forecasts) and asked.profile is None
    assert stepbench.profile_wants(asked.model, asked.forecasts, CAP) == [
        {"kind": "step_profile", "batches": [64, 128], "graphs_off": None}]
    assert "not taken" in asked.note
    # beside a level that asks for eager steps, the one launch times them eagerly: the read-off graph steps wait
    eager = dataclasses.replace(asked.forecasts[-1], given=False,
                                measurement={"kind": "step_profile", "batches": [512], "graphs_off": True})
    assert stepbench.profile_wants(asked.model, [*asked.forecasts, eager], CAP) == [eager.measurement]
    rows.to_csv(profile, index=False)
    again = stepbench.settle_forecast(tmp_path, "baseline", CAP, LEVELS, take=False)
    assert stepbench.profile_wants(again.model, again.forecasts, CAP) == [] and "not taken" not in again.note
