"""The whole workbook against real vLLM on CPU: --max-num-seqs 2 against 256.

Needs ``make vllm`` (vLLM for CPU and the tiny model in .engines/; CI runs it first) and is
skipped with that reason otherwise. One run of notebooks 01-05, headless, serves as the
evidence for every test here: short levels (concurrency 1, 4, 16, 64; 64-token outputs; 10 s
each) keep it to a few minutes on two cores, vLLM on one and the load generator on the other.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from glm5lib import cpus, diagnose, logs, workbook
from glm5lib.diagnose.model import PerfModel
from glm5lib.engines import vllm as ev
from glm5lib.paths import data_dir

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.notebooks]

# The shipped vllm-capped config caps at 4 (the committed example's run). Here the cap is 2: on a
# 2-core machine that also runs the load generator, a 4-wide batch already reaches much of what the
# tiny model's CPU steps allow, and the 2x gain the test demands would rest on the machine's mood.
CAP = 2
PARAMETERS = {
    "BACKEND": "vllm",
    "CONFIG": "vllm-capped",
    "API": "completions",
    "SWEEP_OPTIONS": {"token_ids": False},  # the tiny model's vocabulary is small: text prompts
    "CONCURRENCIES": [1, 4, 16, 64],
    "INPUT_LEN": 32,
    "OUTPUT_LEN": 64,
    "LEVEL_DURATION_S": 10.0,
    "FIX_CHANGES": {"max_num_seqs": 256},
    "APPLY_PATCH": False,
    "REFERENCE": "vllm-raised",
    "READY_TIMEOUT_S": 600.0,
    "PREDICT_CONCURRENCIES": [64, 128, 256],
}


@pytest.fixture(scope="module")
def run(tmp_path_factory, vllm_installed):
    # vLLM on one core, the load generator (and the kernel that runs it) on the other, as a user of a
    # small host would run it (GLM5_CPUS=split, README): left to share two cores, vLLM's busy-polling
    # scheduler starved the client, whose short batch then led the diagnosis instead of the cap
    mp = pytest.MonkeyPatch()
    mp.setenv(cpus.ENV_VAR, "split")
    base = tmp_path_factory.mktemp("vllm")
    shipped = json.loads((data_dir() / "configs" / "vllm-capped.json").read_text())
    shipped["name"] = f"vllm-capped-{CAP}"
    shipped["server_args"].update(max_num_seqs=CAP, model=ev.VllmConfig.load("vllm-capped").model_path())
    config = base / f"vllm-capped-{CAP}.json"
    config.write_text(json.dumps(shipped, indent=2))
    folder = base / "run"
    try:
        workbook.run_workbook({**PARAMETERS, "CONFIG": str(config)}, run_dir=folder, only=[1, 2, 3, 4, 5],
                              progress=False)
    finally:
        mp.undo()
    return folder


@pytest.mark.timeout(1500)
def test_all_five_notebooks_ran_against_real_vllm(run):
    summary = json.loads((run / "summary.json").read_text())
    assert [n["status"] for n in summary["notebooks"]] == ["ok"] * 5
    assert summary["standin"]["used"] is False
    command = json.loads((run / "baseline" / "command.json").read_text())
    # vLLM 0.32 (what `make vllm` installs) moved its server module and warns on the old path
    assert command["argv"][1:3] == ["-m", "vllm.entrypoints.launchers.api_server.entry"]
    assert "api_server` is deprecated" not in (run / "baseline" / "server.log").read_text()
    assert json.loads((run / "fix" / "config.json").read_text())["server_args"]["max_num_seqs"] == 256


@pytest.mark.timeout(1500)
def test_raising_max_num_seqs_at_least_doubles_throughput_at_the_highest_level(run):
    base = pd.read_csv(run / "baseline" / "sweep.csv").set_index("concurrency")["output_throughput"]
    fix = pd.read_csv(run / "fix" / "sweep.csv").set_index("concurrency")["output_throughput"]
    top = max(PARAMETERS["CONCURRENCIES"])
    assert fix[top] >= 2 * base[top], f"at {top}: {base[top]:.0f} -> {fix[top]:.0f} tok/s"


@pytest.mark.timeout(1500)
def test_baseline_running_count_sits_at_the_cap_read_from_vllms_log(run):
    slog = logs.parse_log(run / "baseline" / "server.log")
    assert slog.startup["max_running_requests"] == CAP  # from vLLM's "non-default args" line
    d = slog.decode
    assert d["running_req"].max() == CAP
    pinned = d[(d["running_req"] == CAP) & (d["queue_req"] > 0)]
    assert len(pinned) >= 3, d[["time", "running_req", "queue_req"]].to_string()
    fix = logs.parse_log(run / "fix" / "server.log").decode
    assert fix["running_req"].max() > CAP


@pytest.mark.timeout(1500)
def test_leading_cause_is_max_num_seqs_and_the_raised_run_is_not_capped(run):
    hypothesis = json.loads((run / "hypothesis.json").read_text())
    assert hypothesis["field"] == "max_num_seqs", hypothesis
    findings = diagnose.diagnose(run, reference=PARAMETERS["REFERENCE"], phase="baseline")
    top = findings.iloc[0]
    assert top["rule"] == "concurrency_cap", findings[["rule", "finding"]].to_string()
    assert "--max-num-seqs" in top["suggestion"] and "start-up log line" in top["evidence"]
    after = diagnose.diagnose(run, reference=PARAMETERS["REFERENCE"], phase="fix")
    assert "concurrency_cap" not in set(after["rule"])


@pytest.mark.timeout(1500)
def test_the_forecast_is_stated_before_the_fix_and_set_beside_its_measurement(run):
    # notebook 3: the hypothesis's forecast, from the capped baseline alone
    forecast = pd.read_csv(run / "forecast.csv").set_index("concurrency")
    assert list(forecast.index) == PARAMETERS["CONCURRENCIES"]
    assert forecast.loc[64, "running"] == 64 and forecast.loc[64, "binding_limit"] == "load"
    # notebook 4: the same forecast beside what the raised run measured
    pred = pd.read_csv(run / "fix" / "prediction.csv").set_index("concurrency")
    fix = pd.read_csv(run / "fix" / "sweep.csv").set_index("concurrency")["output_throughput"]
    assert pred.loc[64, "predicted"] == pytest.approx(forecast.loc[64, "predicted_tok_s"])
    assert pred.loc[64, "measured"] == pytest.approx(fix[64])
    # notebook 3 took vLLM's offline step benchmark of the baseline (the forecast at 64 is 32x the
    # cap's batch). A cap of 2 reads the served step's per-request part between batches 1 and 2
    # only, so at 64 the band is wider than a forecast may be: stated as not forecast, naming the
    # level that would settle it (the recorded pinned cap-4 pair, read between 1 and 4, is given
    # within +3%: tests/unit/diagnose/test_model_recorded.py). Read across one doubling, no batch
    # beyond 2 is given (tests/unit/diagnose/test_model.py::test_a_reading_across_one_doubling...).
    # A level that is given holds its band net of the launches' drift (two shared cores move
    # between launches).
    assert "## Forecast beside measurement" in (run / "report.md").read_text()
    assert not forecast.loc[forecast.index > CAP, "given"].astype(bool).any(), forecast.to_string()
    model = PerfModel.fit_phase(run / "baseline")
    if model.client_starved:
        # the baseline's client was starved of CPU at every level (the two cores busy with something else):
        # its host paced it, so nothing is forecast, no benchmark is asked for, and each level names the
        # baseline again on cores of its own
        assert not forecast["given"].astype(bool).any(), forecast.to_string()
        assert forecast["needs"].str.contains("client on cores of its own").all(), forecast["needs"].tolist()
        assert not (run / "baseline" / "step-profile.csv").exists()
        return
    assert (run / "baseline" / "step-profile.csv").is_file()
    assert not bool(forecast.loc[64, "given"]) and "one level at concurrency 64" in str(forecast.loc[64, "needs"])
    shown = pred[["predicted", "low", "high", "given", "measured", "error", "drift", "error_net_of_drift"]].to_string()
    # Level 1 is the batch the baseline ran: its band is the narrowest, and it is given unless the
    # model saw the client starved of CPU at some level (two shared cores), which widens every band
    width = (pred["high"] - pred["low"]) / pred["predicted"]
    assert width.idxmin() == 1, shown
    assert bool(pred.loc[1, "given"]) or "starved" in model.describe(), (model.describe(), shown)
    for level in pred.index[pred["given"].astype(bool)]:
        # held net of some of the launches' drift (tests/integration/test_vllm_predict.py says why)
        drift = pred.loc[level, "drift"] if pd.notna(pred.loc[level, "drift"]) else 1.0
        ends = sorted((pred.loc[level, "measured"], pred.loc[level, "measured"] / drift))
        assert pred.loc[level, "low"] <= ends[1] and ends[0] <= pred.loc[level, "high"], shown
