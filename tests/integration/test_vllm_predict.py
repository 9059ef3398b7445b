"""Predict, then prove, on real vLLM on CPU: a capped baseline forecasts the raised cap.

Needs ``make vllm`` (vLLM for CPU and the tiny model in .engines/) and is skipped with that
reason otherwise. The baseline runs ``--max-num-seqs 16`` at 2, 4, 8 and 16 concurrent requests
(batch sizes spread 8x, so the model fits its exponent and checks itself on its largest batch);
the model fitted on it alone forecasts ``--max-num-seqs 256`` at 64 before the raised run is
launched; the raised run then measures 8 and 16 (the same batch as before the change: the
launches' own drift) and 64.

Levels last 15 s: on two shared cores the tiny model's HTTP server, not its engine step, paces
8-second levels (the engine's batch swings between 16 and 1 every few seconds), and a level's
throughput moved by up to 56% between two launches of one configuration. Fitted on batches up
to 8, the forecast at 64 missed by a median 51% over 24 recorded pairs; up to 16, by 16%
(within 25% in 62% of pairs at 8 s levels, 88% at 20 s). A forecast whose measurement falls
outside 25% or its band is measured once more in a new launch, and the two measurements' mean
is what the forecast is held to: a machine's noise halves, a wrong model stays wrong.
"""

from __future__ import annotations

import pandas as pd
import pytest

from glm5lib import engines, phase
from glm5lib.diagnose import prediction
from glm5lib.engines import vllm as ev

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CAP = 16
RAISED = {"max_num_seqs": 256}
SWEEP = {"api": "completions", "input_len": 32, "output_len": 64, "duration": 15.0, "warmup": 2,
         "sweep_options": {"token_ids": False}, "progress": False, "gpu": False}


def _holds(row: pd.Series, measured: float) -> bool:
    error = row["predicted"] / measured - 1
    return abs(error) <= 0.25 and row["low"] <= measured <= row["high"]


@pytest.mark.timeout(1500)
def test_a_capped_baseline_forecasts_the_raised_caps_top_level_within_25_percent_and_its_band(
        tmp_path, vllm_installed):
    config = engines.load_config("vllm-capped").with_changes(
        max_num_seqs=CAP, model=ev.VllmConfig.load("vllm-capped").model_path())
    phase.measure_phase(config, tmp_path, "baseline", backend="vllm", ready_timeout=600,
                        concurrencies=[2, 4, 8, 16], **SWEEP)
    model, forecast = prediction.forecast_hypothesis(tmp_path, RAISED, [64])
    assert model.engine == "vllm" and model.limits.running_cap == CAP
    # the batch the fit reads is the requests the engine may hold, not the log's sparse snapshots
    assert [round(p.running) for p in model.levels] == [2, 4, 8, 16]
    assert model.holdout_error is not None, model.describe()
    [f] = model.forecast(RAISED, [64])
    assert f.running == 64 and f.binding_limit == "load" and f.extrapolated

    phase.measure_phase(config.with_changes(**RAISED), tmp_path, "fix", backend="vllm", ready_timeout=600,
                        concurrencies=[8, 16, 64], **SWEEP)
    frame = prediction.record_prediction(tmp_path, RAISED).set_index("concurrency")
    top = frame.loc[64]
    assert top["predicted"] == pytest.approx(float(forecast["predicted_tok_s"].iloc[0]))
    # 8 and 16 ran the same batch in both launches: they are the control for the machine's drift
    assert frame.attrs["drift_levels"] == [8, 16] and frame["drift"].notna().all()
    measured = [float(top["measured"])]
    if not _holds(top, measured[0]):
        phase.measure_phase(config.with_changes(**RAISED), tmp_path, "fix-again", backend="vllm",
                            ready_timeout=600, concurrencies=[64], **SWEEP)
        again = pd.read_csv(tmp_path / "fix-again" / "sweep.csv").set_index("concurrency")
        measured.append(float(again.loc[64, "output_throughput"]))
    mean = sum(measured) / len(measured)
    table = frame[["predicted", "low", "high", "measured", "error", "drift", "error_net_of_drift"]].to_string()
    assert abs(top["predicted"] / mean - 1) <= 0.25, (measured, model.describe(), table)
    assert top["low"] <= mean <= top["high"], (measured, model.describe(), table)
