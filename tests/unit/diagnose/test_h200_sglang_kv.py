"""The diagnosis and the forecast on real SGLang 0.5.16 on one H200 whose KV pool, set by hand
(``--max-total-tokens 16384``), held about 21 requests of 768 tokens under a cap of 256
(data/examples/h200-sglang-kv): a limit the recorded cap-bound runs never reached. Raising the pool
gave 2.8x at 256 concurrent requests; lowering ``--schedule-conservativeness`` (the admission
reserve, which the stand-in's rehearsal of this plan blamed) gave nothing. Each level's forecast replayed from the baseline is
judged in test_model_recorded.py."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest

from glm5lib import diagnose as dg
from glm5lib.diagnose import prediction
from glm5lib.report.hypothesis import leading_hypothesis

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h200-sglang-kv"


def test_the_pool_leads_and_its_own_flag_is_named_with_a_forecast():
    frame = dg.diagnose(EXAMPLE, reference="k2-thinking", phase="baseline", write=False)
    first = frame.iloc[0]
    assert first["rule"] == "kv_capacity", frame[["rule", "severity"]].to_string()
    assert "KV pool 16,384 tokens" in first["evidence"]
    # the flag that sized the pool, not the memory fraction that did not
    assert "raise --max-total-tokens (now 16,384) to about 196,608" in first["suggestion"]
    assert "not --mem-fraction-static" in first["suggestion"]
    # in SGLang's own field: what notebook 04's FIX_CHANGES takes as it is
    assert json.loads(first["remedy"]) == {"max_total_tokens": 196608}
    # two percent of admissions retracted: the churn is reported, below the pool it comes from
    churn = frame[frame["rule"] == "retraction_churn"].iloc[0]
    assert "2% of the 946 admissions" in churn["evidence"] and churn["severity"] < first["severity"]


def test_the_hypothesis_is_the_pool_with_the_forecast_of_the_remedy():
    findings = dg.diagnose(EXAMPLE, reference="k2-thinking", phase="baseline", write=False)
    diff = pd.read_csv(EXAMPLE / "diff.csv")
    hypothesis = leading_hypothesis(diff, findings)
    assert hypothesis["field"] == "max_total_tokens" and hypothesis["supported"]
    assert hypothesis["changes"] == {"max_total_tokens": 196608}


def test_a_difference_the_evidence_ruled_out_is_never_the_hypothesis():
    """The cap (256) was never reached: even a finding about the cap (churn asks to lower it) does
    not make raising it to the reference's 2,048 the thing to test. Here the churn is made to lead."""
    findings = dg.diagnose(EXAMPLE, reference="k2-thinking", phase="baseline", write=False)
    ruled = findings[findings["rule"] == "reference_diff_ruled_out"].iloc[0]
    assert "max_running_requests" in ruled["covers"].split()
    churn_first = pd.concat([findings[findings["rule"] == "retraction_churn"],
                             findings[findings["rule"] != "retraction_churn"]])
    hypothesis = leading_hypothesis(pd.read_csv(EXAMPLE / "diff.csv"), churn_first)
    assert hypothesis["field"] != "max_running_requests"


def test_the_forecast_notebook_04_wrote_before_the_65k_pool_is_what_the_model_gives_again():
    """``pool-64k/prediction.csv`` was written before that launch, with the step profile as it now
    stands: replayed, the model gives the same forecast, every level inside its band."""
    recorded = pd.read_csv(EXAMPLE / "pool-64k" / "prediction.csv").set_index("concurrency")
    again = prediction.record_prediction(EXAMPLE, {"max_total_tokens": 65536}, phase="pool-64k",
                                         write=False).set_index("concurrency")
    for level in (1, 16, 64, 256):
        assert again.loc[level, "predicted"] == pytest.approx(recorded.loc[level, "predicted"], rel=0.01)
        assert again.loc[level, "given"] and again.loc[level, "inside_band"], again.loc[level]
    assert again.loc[256, "binding_limit"] == "kv_tokens" and again.loc[256, "running"] == 100


def _with(ev, args=None, startup=None):
    out = copy.copy(ev)
    out.server_args = {**ev.server_args, **(args or {})}
    out.startup = {**ev.startup, **(startup or {})}
    return out


def test_only_a_pool_about_the_size_given_was_set_by_hand():
    """SGLang allocates the smaller of --max-total-tokens and what its memory holds: a value well
    above the pool did not size it, and the memory is the lever; a size in SGLang's ``16k`` spelling
    is read; a pool already as large as the load needs has the flag named without a size."""
    ev = dg.load_evidence(EXAMPLE, reference="k2-thinking", phase="baseline")
    memory_bound = dg.rule_kv_capacity(_with(ev, {"max_total_tokens": 100000}))[0]
    assert "--mem-fraction-static (now 0.8)" in memory_bound.suggestion
    assert "--max-total-tokens" not in memory_bound.suggestion and memory_bound.prediction is None
    spelt = dg.rule_kv_capacity(_with(ev, {"max_total_tokens": "16k"}, {"max_total_num_tokens": 16000}))[0]
    assert "raise --max-total-tokens (now 16,000) to about 196,608" in spelt.suggestion
    # the sweep offered 256 against a cap of 256: a pool given larger than that needs is named unsized
    unsized = dg.rule_kv_capacity(_with(ev, {"max_total_tokens": 200000, "max_running_requests": 256},
                                        {"max_total_num_tokens": 200000}))[0]
    assert "raise --max-total-tokens (now 200,000): that flag" in unsized.suggestion
    assert unsized.prediction is None


def test_the_admission_reserve_is_a_term_of_the_model_and_forecast_what_it_measured():
    """``--schedule-conservativeness 0.3`` was launched with "no term" recorded (glm5-fix/prediction.csv).
    The model now scales the reserve it keeps for running requests' future tokens (SGLang's decayed
    ratio, 0.1 at 1): the pool still binds at 25 running, and each level is forecast inside its band."""
    from glm5lib.diagnose.model import PerfModel

    model = PerfModel.fit_phase(EXAMPLE / "baseline")
    assert model.bounds.reserve_ratio == pytest.approx(0.1)
    measured = pd.read_csv(EXAMPLE / "glm5-fix" / "sweep.csv").set_index("concurrency")["output_throughput"]
    bounds, notes, unseen = model.with_changes({"schedule_conservativeness": 0.3})
    assert not unseen and bounds.reserve_ratio == pytest.approx(0.03)
    assert any("keeps 3% of each running request's future tokens free" in n for n in notes), notes
    for f in model.forecast({"schedule_conservativeness": 0.3}, [1, 16, 64, 256]):
        assert f.given, f.needs
        assert f.low_tok_s <= measured[f.concurrency] <= f.high_tok_s, (f.concurrency, f, measured[f.concurrency])
    # a reserve lowered from the default leaves the pool's bound where it was: no more requests fit
    [now] = model.forecast({}, [256])
    [after] = model.forecast({"admission_reserve": 0.3}, [256])
    assert after.binding_limit == "kv_tokens" and after.running == now.running == 25


def test_a_reserve_that_held_the_batch_before_it_decayed_is_not_forecast(tmp_path):
    """A phase whose pool-bound levels never filled the pool ran under the admission's ratio before it
    decayed (the stand-in's slow GLM-5 steps did so within each level): the model's term, the decayed
    reserve, does not describe it, so the change is not forecast and says why."""
    import re
    import shutil

    from glm5lib.diagnose.model import PerfModel

    phase = tmp_path / "run" / "baseline"
    shutil.copytree(EXAMPLE / "baseline", phase)
    log = phase / "server.log"
    log.write_text(re.sub(r"token usage: (\d\.\d\d)",
                          lambda m: f"token usage: {min(float(m[1]), 0.7):.2f}", log.read_text()))
    model = PerfModel.fit_phase(phase)
    _, _, unseen = model.with_changes({"schedule_conservativeness": 0.3})
    assert len(unseen) == 1 and "at most 70% full" in unseen[0] and "before its ratio decayed" in unseen[0]
    assert not any(f.given for f in model.forecast({"schedule_conservativeness": 0.3}, [64, 256]))
