"""The diagnosis and the forecast on real SGLang 0.5.16 on one H200 whose KV pool, set by hand
(``--max-total-tokens 16384``), held about 21 requests of 768 tokens under a cap of 256
(data/examples/h200-sglang-kv): a limit the recorded cap-bound runs never reached. Raising the pool
gave 2.8x at 256 concurrent requests; lowering ``--schedule-conservativeness`` (what the churn
finding's wording pointed at) gave nothing. Each level's forecast replayed from the baseline is
judged in test_model_recorded.py."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from glm5lib import diagnose as dg
from glm5lib.report.hypothesis import leading_hypothesis

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h200-sglang-kv"


def _sweep(phase: str) -> pd.Series:
    return pd.read_csv(EXAMPLE / phase / "sweep.csv").set_index("concurrency")["output_throughput"]


def test_the_pool_raised_by_hand_is_what_moved_throughput():
    """The recorded facts the rules below are judged against."""
    base, pool, reserve = _sweep("baseline"), _sweep("fix"), _sweep("glm5-fix")
    assert pool[256] / base[256] > 2.5
    assert abs(reserve[256] / base[256] - 1.0) < 0.05  # schedule_conservativeness 0.3: nothing


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
    # without the ruled-out finding (an older folder), the churn's cap is what it picked
    older = churn_first[churn_first["rule"] != "reference_diff_ruled_out"]
    assert leading_hypothesis(pd.read_csv(EXAMPLE / "diff.csv"), older)["field"] == "max_running_requests"


def test_the_recorded_forecasts_written_before_each_launch():
    """``fix`` (262,144 tokens): forecast by the plan's step profile (batches 1-64) before its launch;
    ``pool-64k``: by notebook 04, which took the step at batch 100 it asked for first."""
    fix = pd.read_csv(EXAMPLE / "fix" / "prediction.csv").set_index("concurrency")
    assert fix.loc[[1, 16, 64], "given"].all() and not fix.loc[256, "given"]
    assert (fix.loc[[1, 16, 64], "error"].abs() < 0.12).all(), fix["error"].tolist()
    pool = pd.read_csv(EXAMPLE / "pool-64k" / "prediction.csv").set_index("concurrency")
    assert pool["given"].all() and pool["inside_band"].all(), pool.to_string()
    assert pool.loc[256, "binding_limit"] == "kv_tokens" and pool.loc[256, "running"] == 100
