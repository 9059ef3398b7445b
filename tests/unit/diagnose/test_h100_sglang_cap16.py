"""The diagnosis and the forecast replayed on real SGLang 0.5.16 on one H100 with a cap of 16 under
1,024-token prompts (data/examples/h100-sglang-cap16): a case the model was not built from. The
raised cap's forecast, written before its launch, held at every level; the seed's fix (graphs off)
missed by about +20% until an eager step no level ran stopped borrowing the graph steps' ratio. Each
level's forecast replayed from the baseline is judged in test_model_recorded.py."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from glm5lib import diagnose as dg
from glm5lib.diagnose.model.profile import StepProfile

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h100-sglang-cap16"


def test_the_capped_baseline_leads_with_the_cap_and_proposes_the_offered_load():
    [first, *_] = list(dg.diagnose(EXAMPLE, phase="baseline", write=False).itertuples())
    assert first.rule == "concurrency_cap"
    assert "stayed at 16" in first.evidence
    assert "from 16 to 256" in first.suggestion


def test_the_recorded_forecast_of_the_raised_cap_held_at_every_level():
    """Written by notebook 04 before the launch: every level given, every one inside its band."""
    recorded = pd.read_csv(EXAMPLE / "fix" / "prediction.csv")
    assert list(recorded["concurrency"]) == [1, 16, 64, 256]
    assert recorded["given"].all() and recorded["inside_band"].all(), recorded.to_string()
    assert (recorded["error"].abs() < 0.12).all(), recorded["error"].tolist()


def test_a_kind_of_step_no_level_ran_loses_the_host_time_the_other_kind_hid():
    """Graph steps read at two batches fix ``a`` and ``k``; an eager step at the same batch loses
    ``(1 - a)`` of the graph step there, not ``(1 - a)`` of itself."""
    profile = StepProfile({"graph": [(1.0, 4.0), (16.0, 8.0)], "eager": [(1.0, 60.0), (16.0, 50.0)], "any": []},
                          "a benchmark")
    profile.fit_scale([(1.0, 3.0, False), (16.0, 6.8, False)])
    a, k = profile.scale["graph"], profile.per_request["graph"]
    assert 0.6 < a < 0.9
    graph16, spread = profile.step(16.0, eager=False)
    assert graph16 == pytest.approx(a * 8.0 + k * 16.0)
    eager16, eager_spread = profile.step(16.0, eager=True)
    assert eager16 == pytest.approx(50.0 - (1.0 - a) * 8.0 + k * 16.0)
    assert eager16 > a * 50.0 + k * 16.0 + 5.0  # what borrowing the ratio gave
    assert eager_spread == pytest.approx(2.0 * spread)
    assert "host time the phase's graph steps hid" in profile.describe()


def test_the_hypothesis_is_restated_with_the_step_profile_notebook_3_took(tmp_path):
    """Read without the baseline's step profile, the raised cap has no forecast at 256 and the
    hypothesis asks for the benchmark; once the profile is beside the phase, restating it gives the
    forecast the profile settles, as notebook 3 does after taking it."""
    import shutil

    from glm5lib import report

    shutil.copytree(EXAMPLE / "baseline", tmp_path / "baseline")
    profile = tmp_path / "baseline" / "step-profile.csv"
    kept = profile.read_bytes()
    profile.unlink()
    diff = dg.diff_configs(tmp_path / "baseline", "k2-thinking")
    before = report.leading_hypothesis(diff, dg.diagnose(tmp_path, reference="k2-thinking", phase="baseline"))
    assert "at concurrency 256 the performance model has no forecast" in before["test"]
    assert "sglang.bench_one_batch" in before["test"]
    profile.write_bytes(kept)
    after = report.restate_hypothesis(before, diff, tmp_path, "baseline", "k2-thinking")
    assert after["field"] == before["field"] == "max_running_requests"
    assert "at concurrency 256 the performance model forecasts 6,871 tok/s (5,790-7,952)" in after["test"]
    assert after["changes"] == {"max_running_requests": 256}
