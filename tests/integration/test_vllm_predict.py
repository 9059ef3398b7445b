"""Predict, then prove, on real vLLM on CPU: a capped baseline forecasts the raised cap.

Needs ``make vllm`` (vLLM for CPU and the tiny model in .engines/) and is skipped with that
reason otherwise. The baseline runs ``--max-num-seqs 16`` at 2, 4, 8 and 16 concurrent requests
(batch sizes spread 8x, so the model fits its exponent and checks itself on its largest batch);
the model fitted on it alone forecasts ``--max-num-seqs 256`` at 64 before the raised run is
launched; the raised run then measures 8 and 16 (the same batch as before the change: the
launches' own drift) and 64.

Levels last 15 s. The engine runs on one core and the load generator on the other
(``cpus="split"``, :mod:`glm5lib.cpus`): left to itself on two cores, vLLM binds its worker to one
and busy-polls the other from its scheduler, where the client runs; the client then got 2-9% of a
core, its event loop lagged by up to 2.5 s, launches of one configuration measured up to 1.7x
apart, and the error at 64 ranged from within 25% to -74% between runs. Pinned, the client keeps
its core (loop lag p99 under 10 ms) and the measurement, net of the launches' drift (read at 8
and 16), must fall inside the band. How close the
forecast comes is a figure, not an assertion: pinned, two runs read +13% (3,476 forecast, 3,064
measured) and +38% (5,074 against 3,674: that baseline's level of 8 ran faster steps than its level
of 4, and the machine slowed by 13% between the launches, so +20% net of that drift). The issue's
25% is met in one run of two, so it is not asserted: on this host one batch reads 2,049-2,861 tok/s
in 12 levels of 15 s over three launches (``benchmarks/bench_vllm_repeat.py``, CV 10%), and replayed
at that scatter the model lands within 25% at 64 in about two draws of three
(``benchmarks/bench_predict_noise.py``). ``benchmarks/bench_predict.py`` prints the error on
recorded pairs, the pinned one included.
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
         "sweep_options": {"token_ids": False}, "progress": False, "gpu": False, "cpus": "split"}


@pytest.mark.timeout(1500)
def test_a_capped_baseline_forecasts_a_gain_at_the_raised_caps_top_level_and_records_it(
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
    baseline = pd.read_csv(tmp_path / "baseline" / "sweep.csv").set_index("concurrency")
    table = frame[["predicted", "low", "high", "measured", "error", "drift", "error_net_of_drift"]].to_string()
    # more running requests than the cap allowed: the forecast is a gain over the capped level
    assert top["predicted"] > float(baseline.loc[CAP, "output_throughput"]), (model.describe(), table)
    assert top["low"] < top["predicted"] < top["high"], table
    assert top["measured"] > 0 and top["error"] == pytest.approx(top["predicted"] / top["measured"] - 1), table
    # The band is the model's, at the baseline's speed; the machine's speed moves between launches
    # (a CI run's control levels read 1.60x faster in the raised launch: 4,695 tok/s measured at
    # 64 against a band of 1,443-3,872, -44%, but -11% net of that drift), so the band is held to
    # the measurement at the baseline's speed, the raised run's throughput over its drift
    assert top["drift"] > 0, table
    assert top["low"] <= top["measured"] / top["drift"] <= top["high"], (model.describe(), table)
    # the client kept its core: its event loop lagged by milliseconds (3-6 ms pinned), not by the
    # 0.4-2.5 s it lagged when vLLM's scheduler polled its core
    for name in ("baseline", "fix"):
        lag = pd.read_csv(tmp_path / name / "sweep.csv")["loop_lag_p99_ms"]
        assert (lag < 100).all(), (name, lag.tolist())
