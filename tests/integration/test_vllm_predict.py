"""Predict, then prove, on real vLLM on CPU: a capped baseline and the engine's own step benchmark
forecast the raised cap.

Needs ``make vllm`` (vLLM for CPU and the tiny model in .engines/) and is skipped with that
reason otherwise. The baseline runs ``--max-num-seqs 16`` at 2, 4, 8 and 16 concurrent requests;
fitted on it alone, the model cannot give a forecast at 64 (4x beyond the batches it ran) and names
the measurement that would settle it: vLLM's offline engine timing one step at 64 (one process
launch, no HTTP server; :mod:`glm5lib.engines.vllm.step_bench_main`). ``stepbench.take_step_profile``
takes it before the raised run is launched, and the forecast is then given, or withheld for the one
thing the profile cannot see: vLLM's API server and its engine took turns on the server's one core
(``server_cpus`` 1, used in full at every level), and how the front end's growing work contends with a
step of 64 is not in the evidence, so it names the level to measure. The raised run then measures 8
and 16 (the same batch as before the change: the launches' own drift) and 64.

Levels last 15 s. The engine runs on one core and the load generator on the other
(``cpus="split"``, :mod:`glm5lib.cpus`): left to itself on two cores, vLLM binds its worker to one
and busy-polls the other from its scheduler, where the client runs, and launches of one
configuration measured up to 1.7x apart. Pinned, a forecast given at 64 must hold its band net of
the launches' drift (read at 8 and 16). The recorded pinned pair
with a step benchmark (data/examples/predict-pairs/vllm-cpu-pinned-max-num-seqs-4-256-profile) read
+3% at 64 and +5% at 16.
"""

from __future__ import annotations

import pandas as pd
import pytest

from glm5lib import cpus, engines, phase, stepbench
from glm5lib.diagnose import prediction
from glm5lib.diagnose.model import PerfModel
from glm5lib.engines import vllm as ev

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CAP = 16
RAISED = {"max_num_seqs": 256}
SWEEP = {"api": "completions", "input_len": 32, "output_len": 64, "duration": 15.0, "warmup": 2,
         "sweep_options": {"token_ids": False}, "progress": False, "gpu": False, "cpus": "split"}


def held_net_of_some_drift(row, spread: float = 0.0) -> bool:
    """The band ``low``-``high`` meets the measurement taken anywhere between raw (none of the
    launches' drift) and net of all of it (``measured / drift``), each end known to within
    ``spread`` (how far the control levels' own ratios stood from each other)."""
    ends = sorted((row["measured"], row["measured"] / row["drift"]))
    return row["low"] * (1 - spread) <= ends[1] and ends[0] <= row["high"] * (1 + spread)


def control_spread(run, levels) -> float:
    """Half the relative gap between the control levels' fix/baseline ratios: how well the
    machine's drift between the two launches is known (0 where they agree)."""
    base = pd.read_csv(run / "baseline" / "sweep.csv").set_index("concurrency")["output_throughput"]
    fix = pd.read_csv(run / "fix" / "sweep.csv").set_index("concurrency")["output_throughput"]
    ratios = [float(fix[c] / base[c]) for c in levels if c in base and c in fix and base[c] > 0]
    if len(ratios) < 2:
        return 0.0
    return (max(ratios) - min(ratios)) / (max(ratios) + min(ratios))


@pytest.mark.timeout(1800)
def test_a_capped_baseline_forecasts_a_gain_at_the_raised_caps_top_level_and_records_it(
        tmp_path, vllm_installed):
    config = engines.load_config("vllm-capped").with_changes(
        max_num_seqs=CAP, model=ev.VllmConfig.load("vllm-capped").model_path())
    phase.measure_phase(config, tmp_path, "baseline", backend="vllm", ready_timeout=600,
                        concurrencies=[2, 4, 8, 16], **SWEEP)
    [blind] = PerfModel.fit_phase(tmp_path / "baseline").forecast(RAISED, [64])
    # 4x beyond the batches run: withheld and naming vLLM's step benchmark, or (a baseline whose
    # levels fit tightly) given from the curve alone; either way the benchmark is taken here
    assert blind.given or (blind.measurement["kind"] == "step_profile" and "step_bench_main.py" in blind.needs)
    with cpus.using("split"):  # the benchmark on the server's core, as the server ran
        taken = stepbench.take_step_profile(tmp_path, "baseline", [64])
    model = PerfModel.fit_phase(tmp_path / "baseline")
    [f] = model.forecast(RAISED, [64])
    assert model.profile is not None and any("step profile" in s for s in f.sources), model.describe()
    assert set(pd.read_csv(taken)["batch"]) >= {2, 4, 8, 16, 64}
    assert model.engine == "vllm" and model.bounds.running_cap == CAP
    # the batch the fit reads is the requests the engine may hold, not the log's sparse snapshots
    assert [round(p.running) for p in model.levels] == [2, 4, 8, 16]
    assert f.running == 64 and f.binding_limit == "load", model.describe()
    # Given, or withheld for the one reason the profile cannot settle: vLLM's API server and its
    # engine took turns on the server's one core at every level (server_cpus 1, 100% used), and how
    # the front end's growing work contends with a step of 64 is not in the evidence (a local run
    # measured the served step at 64 at 2x the offline one, where 2-16 had read 1.1-1.2x: +67% off; a CI
    # run's given forecast, 5,782 tok/s at +/-28%, measured 8,738: -25% net of the launches' drift)
    if model.shares_cores:
        assert any("takes turns with the step" in s for s in f.sources), f.sources
    if not f.given:
        assert model.shares_cores and "shared every core" in f.needs, (model.describe(), f.needs)
        assert f.measurement == {"kind": "level", "concurrency": 64, "changes": RAISED}, f.needs
    forecast = prediction.write_forecast(tmp_path, [f], RAISED)

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
    # 64 against a band of 1,443-3,872, -44%, but -11% net of that drift; another's read 0.68x
    # while 64 measured only 12% under its forecast). The control levels' drift need not reach the
    # top level in full (a batch of 64 leans on the engine's core, 8 and 16 on the client's too),
    # so the band must meet the measurement somewhere between its raw value and its value net of
    # the whole drift: wrong when neither the model nor the machine's drift accounts for it. The
    # drift itself is known only as well as 8 and 16 agree on it (a CI run read 0.95x as their
    # median while 64 measured 0.5% above the band's top)
    assert top["drift"] > 0, table
    if f.given:
        spread = control_spread(tmp_path, frame.attrs["drift_levels"])
        assert held_net_of_some_drift(top, spread), (model.describe(), table, f"control spread {spread:.1%}")
    else:  # the level it named was the one measured: the record says so beside the figure
        assert not bool(top["given"]) and "one level at concurrency 64" in str(top["needs"]), table
    # the client kept its core: its event loop lagged by milliseconds (3-6 ms pinned), not by the
    # 0.4-2.5 s it lagged when vLLM's scheduler polled its core
    for name in ("baseline", "fix"):
        lag = pd.read_csv(tmp_path / name / "sweep.csv")["loop_lag_p99_ms"]
        assert (lag < 100).all(), (name, lag.tolist())
