"""The performance model (glm5lib.diagnose.model): fit on one phase, forecast a change, prove it.

The recorded pair is the real vLLM run in data/examples/cpu-vllm (--max-num-seqs 4 -> 256);
synthetic levels made from known step parameters check that the fit recovers them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest

from glm5lib import rundir
from glm5lib.cli import main
from glm5lib.diagnose import model as pm
from glm5lib.diagnose import prediction
from glm5lib.diagnose.evidence import Evidence
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.paths import data_dir

EXAMPLE = data_dir() / "examples" / "cpu-vllm"


def _sweep(params: pm.StepParams, levels, cap=None, input_len=256, output_len=256, ttft_ms=50.0,
           graph_max_bs=None) -> pd.DataFrame:
    rows = []
    for c in levels:
        b = min(c, cap) if cap else c
        u = pm.step_ms(params, b, input_len=input_len, output_len=output_len, graphs=graph_max_bs is not None,
                       graph_max_bs=graph_max_bs)
        thr = 1000.0 * b / u
        service = output_len * u
        rows.append({
            "concurrency": c, "completed": 100, "output_throughput": thr,
            "total_input_tokens": 100 * input_len, "total_output_tokens": 100 * output_len,
            "mean_ttft_ms": ttft_ms + service * (c / b - 1), "mean_tpot_ms": (service - ttft_ms) / (output_len - 1),
            "mean_concurrency": c,
        })
    return pd.DataFrame(rows)


TRUE = pm.StepParams(fixed_ms=40.0, per_seq_ms=0.9, exponent=0.8)


def test_the_fit_recovers_known_step_parameters_and_forecasts_beyond_the_cap():
    ev = Evidence(sweep=_sweep(TRUE, [1, 4, 16, 64, 256], cap=64),
                  server_args={"max_running_requests": 64, "disable_cuda_graph": True})
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    assert not model.limits.graphs and model.params.graph_saving_ms == 0
    assert model.exponent_fitted and model.params.exponent == pytest.approx(0.8, abs=0.021)
    assert model.params.fixed_ms == pytest.approx(40.0, rel=0.05)
    assert model.fit_error < 0.01
    assert model.seen["batch"] == (1.0, 64.0)
    assert model.ttft_fixed_ms == pytest.approx(50.0, rel=0.05)
    [f] = model.forecast({"max_running_requests": 1024}, [1024])
    truth = 1000.0 * 1024 / pm.step_ms(TRUE, 1024, input_len=256, output_len=256)
    assert f.running == 1024 and f.binding_limit == "load"
    assert f.predicted_tok_s == pytest.approx(truth, rel=0.05)
    assert f.extrapolated and f.low_tok_s < truth < f.high_tok_s
    # inside the range it saw, the band is the fit's own error (at least 5%): narrower
    [inside] = model.forecast({}, [16])
    assert not inside.extrapolated
    assert inside.high_tok_s / inside.low_tok_s < f.high_tok_s / f.low_tok_s
    # the cap it ran under still binds when nothing changes
    [capped] = model.forecast(None, [1024])
    assert capped.running == 64 and capped.binding_limit == "running_cap"
    assert capped.ttft_ms > 10 * inside.ttft_ms  # 960 requests queue for their turn


def test_two_batch_sizes_take_the_prior_exponent_and_widen_the_band():
    ev = Evidence(sweep=_sweep(TRUE, [1, 64, 256], cap=64), server_args={"max_running_requests": 64})
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    assert not model.exponent_fitted and model.params.exponent == pm.PRIOR_EXPONENT
    assert model.exponent_range == pm.PRIOR_EXPONENT_RANGE
    [f] = model.forecast({"max_running_requests": 2048}, [1024])
    assert f.low_tok_s < f.predicted_tok_s < f.high_tok_s
    assert f.high_tok_s / f.low_tok_s > 1.5
    assert "prior" in model.describe()


def test_two_close_batch_sizes_let_the_band_cover_a_slope_their_noise_hides():
    # A CPU engine capped at 2 (the workbook's real-vLLM run): its step grows 0.17 ms a request,
    # but the two measured batch sizes, each within 10% of the truth, show almost no growth.
    truth = pm.StepParams(fixed_ms=1.8, per_seq_ms=0.17, exponent=1.0)
    sweep = _sweep(truth, [1, 4, 16, 64], cap=2, input_len=32, output_len=64)
    sweep.loc[0, "output_throughput"] *= 0.93  # batch 1 measured slow, batch 2 fast
    sweep.loc[1:, "output_throughput"] *= 1.07
    model = pm.PerfModel.from_evidence(Evidence(sweep=sweep, server_args={"max_num_seqs": 2}), engine="vllm")
    assert not model.exponent_fitted and model.seen["batch"] == (1.0, 2.0)
    [f] = model.forecast({"max_num_seqs": 256}, [64])
    real = 1000.0 * 64 / pm.step_ms(truth, 64, input_len=32, output_len=64)
    assert f.predicted_tok_s > 1.5 * real  # the point forecast is misled by the flat slope...
    assert f.low_tok_s <= real <= f.high_tok_s  # ...and the band says how little two sizes show


def test_levels_above_the_graphs_batch_limit_show_what_a_graph_saves():
    truth = pm.StepParams(fixed_ms=40.0, per_seq_ms=0.9, exponent=0.8, graph_saving_ms=8.0)
    ev = Evidence(sweep=_sweep(truth, [1, 4, 16, 64, 128], graph_max_bs=32),
                  server_args={"max_running_requests": 128, "cuda_graph_max_bs": 32})
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    assert model.graph_saving_fitted and model.params.graph_saving_ms == pytest.approx(8.0, rel=0.1)
    [f] = model.forecast({"disable_cuda_graph": True}, [16])
    assert f.unseen_changes == []
    expected = 1000.0 * 16 / pm.step_ms(truth, 16, input_len=256, output_len=256)
    assert f.predicted_tok_s == pytest.approx(expected, rel=0.03)


def test_one_batch_size_splits_the_step_and_the_band_spans_either_split():
    ev = Evidence(sweep=_sweep(TRUE, [64, 256], cap=64),
                  server_args={"max_running_requests": 64, "disable_cuda_graph": True})
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    assert "one batch size" in model.describe()
    assert model.params.fixed_ms == pytest.approx(model.params.per_seq_ms * 64**pm.PRIOR_EXPONENT)
    [f] = model.forecast({"max_running_requests": 1024}, [1024])
    u64 = pm.step_ms(TRUE, 64, input_len=256, output_len=256)
    # all per request (growing as B ** the prior exponent) / all fixed
    per_request, linear = 64_000 / u64 * 16 ** (1 - pm.PRIOR_EXPONENT), 1024_000 / u64
    assert f.low_tok_s < per_request and f.high_tok_s > linear
    truth = 1000.0 * 1024 / pm.step_ms(TRUE, 1024, input_len=256, output_len=256)
    assert f.low_tok_s < truth < f.high_tok_s


def test_limits_decide_the_batch_kv_pool_and_token_budget():
    params = pm.StepParams(fixed_ms=5.0, per_seq_ms=0.5, exponent=1.0)
    ev = Evidence(sweep=_sweep(params, [1, 2, 4, 8], input_len=100, output_len=100),
                  server_args={"max_num_seqs": 256, "max_num_batched_tokens": 400})
    model = pm.PerfModel.from_evidence(ev, engine="vllm")
    assert model.limits.mixed_steps and model.limits.token_budget == 400 and model.limits.running_cap == 256
    [f] = model.forecast({}, [1000])
    # 400 tokens a step, each request needs 100 prompt + 100 output: 200 decode at most
    assert f.binding_limit == "token_budget" and f.running == pytest.approx(200)
    [g] = model.forecast({"max_num_batched_tokens": 100_000, "num_gpu_blocks_override": 1250}, [1000])
    assert g.binding_limit == "kv_pool" and g.running < 200
    [h] = model.forecast({"max_num_batched_tokens": 100_000}, [64])
    assert h.binding_limit == "load" and h.running == 64


def test_changes_the_model_cannot_see_are_named_and_widen_the_band():
    ev = Evidence(sweep=_sweep(TRUE, [1, 4, 16, 64], cap=64), server_args={"max_running_requests": 64})
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    assert model.limits.graphs  # SGLang runs decode with CUDA graphs unless told otherwise
    [plain] = model.forecast({"max_running_requests": 128}, [128])
    [f] = model.forecast({"max_running_requests": 128, "disable_cuda_graph": True, "disable_radix_cache": True,
                          "attention_backend": "triton"}, [128])
    named = " | ".join(f.unseen_changes)
    assert "disable_cuda_graph=True" in named and "CUDA graphs" in named and "prior (20% of the fixed" in named
    # the prior saving is back in each step once graphs are off: slower than with graphs
    [graphs_on] = model.forecast({"max_running_requests": 128, "cuda_graph_max_bs": 256}, [128])
    assert f.predicted_tok_s < graphs_on.predicted_tok_s
    assert model.params.graph_saving_ms == pytest.approx(0.25 * (model.params.fixed_ms - model.params.graph_saving_ms))
    assert "disable_radix_cache=True: not modelled" in named
    assert "attention_backend=triton: the step model has no term" in named
    assert f.high_tok_s - f.low_tok_s > plain.high_tok_s - plain.low_tok_s


def test_bad_input_is_refused_with_what_would_be_valid(tmp_path):
    model = pm.PerfModel.fit_phase(EXAMPLE / "baseline")
    for bad in ([], [0], ["64"], [True]):
        with pytest.raises(ConfigError, match="concurrency"):
            model.forecast({}, bad)
    with pytest.raises(ConfigError, match="input_len"):
        model.forecast({}, [4], input_len=0)
    with pytest.raises(ConfigError, match="changes must map"):
        model.forecast(["max_num_seqs"], [4])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="phases there: baseline, fix"):
        pm.predict(EXAMPLE, "nope", {}, [4])
    with pytest.raises(ConfigError, match="valid: input_len, output_len"):
        pm.predict(EXAMPLE, "baseline", {}, [4], prompt_len=3)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DiagnosisError, match="holds none of"):
        pm.PerfModel.fit_phase(tmp_path / "empty")
    one = tmp_path / "one"
    one.mkdir()
    pd.read_csv(EXAMPLE / "baseline" / "sweep.csv").head(1).to_csv(one / "sweep.csv", index=False)
    with pytest.raises(DiagnosisError, match="at least 2 sweep levels"):
        pm.PerfModel.fit_phase(one)


def test_the_recorded_vllm_pair_capped_baseline_forecasts_the_raised_cap():
    model = pm.PerfModel.fit_phase(EXAMPLE / "baseline")
    assert model.engine == "vllm" and model.limits.running_cap == 4
    assert model.limits.kv_pool == 2_097_152 and model.limits.mixed_steps
    assert model.seen["batch"] == (1.0, 4.0) and model.fit_error < 0.1
    fix = pd.read_csv(EXAMPLE / "fix" / "sweep.csv").set_index("concurrency")["output_throughput"]
    forecasts = pm.predict(EXAMPLE, "baseline", {"max_num_seqs": 256}, [64], input_len=None)
    [f] = forecasts
    assert f.running == 64 and f.binding_limit == "load" and f.extrapolated
    measured = float(fix[64])
    assert f.low_tok_s <= measured <= f.high_tok_s
    # the capacity model this replaces forecast 405 tok/s there (-73%)
    assert abs(f.predicted_tok_s / measured - 1) < 0.73
    assert f.ttft_ms is not None and f.tpot_ms is not None and f.tpot_ms > 0


def test_the_hold_out_check_widens_the_band_by_what_the_phase_s_own_curve_missed():
    # a curve that bends beyond what its first levels show: the fit on 1-8 misses 16, so the
    # band past 16 widens by that miss per doubling; a curve the fit follows keeps a narrow band
    steep = pm.StepParams(fixed_ms=5.0, per_seq_ms=2.0, exponent=0.9)
    bent = pd.concat([_sweep(steep, [1, 2, 4, 8]), _sweep(dataclasses.replace(steep, per_seq_ms=1.4), [16])])
    straight = _sweep(steep, [1, 2, 4, 8, 16])
    widths = {}
    for name, sweep in (("bent", bent), ("straight", straight)):
        model = pm.PerfModel.from_evidence(Evidence(sweep=sweep, server_args={"max_running_requests": 16,
                                                                             "disable_cuda_graph": True}),
                                           engine="sglang")
        assert model.holdout_error is not None
        [f] = model.forecast({"max_running_requests": 256}, [128])
        widths[name] = f.high_tok_s / f.low_tok_s
        assert "refitted without its largest batch" in model.describe()
        if name == "bent":
            assert model.holdout_error < -0.1 and model.holdout_per_doubling > 0.1  # 16 ran faster
    assert model.holdout_error == pytest.approx(0.0, abs=0.02) and model.holdout_per_doubling < 0.03
    assert widths["bent"] > 1.3 * widths["straight"], widths


def test_the_batch_is_the_requests_the_engine_may_hold_unless_it_kept_some_waiting():
    # vLLM on two shared CPU cores logs "Running: 1 reqs" at 4 offered with nothing waiting: the
    # rest are in its HTTP server, and a forecast at 64 counts those too
    lines = pd.DataFrame({"time": pd.to_datetime(["2026-12-01 10:00:01", "2026-12-01 10:00:03", "2026-12-01 10:00:05"]),
                          "running_req": [1, 1, 4], "queue_req": [0, 0, 0]})
    sweep = _sweep(TRUE, [1, 4, 16], cap=16)
    sweep["start_time"] = pd.Timestamp("2026-12-01 10:00:00").timestamp()
    sweep["end_time"] = pd.Timestamp("2026-12-01 10:00:06").timestamp()

    class _Ev(Evidence):
        def decode_in_level(self, level):
            return lines if int(level["concurrency"]) == 4 else lines.iloc[0:0]

    model = pm.PerfModel.from_evidence(_Ev(sweep=sweep, server_args={"max_num_seqs": 16}), engine="vllm")
    assert [p.running for p in model.levels] == [1.0, 4.0, 16.0]
    # the same snapshots with requests waiting in the engine: the engine held the batch down
    waiting = lines.assign(queue_req=[3, 3, 0])

    class _Queued(Evidence):
        def decode_in_level(self, level):
            return waiting if int(level["concurrency"]) == 4 else waiting.iloc[0:0]

    queued = pm.PerfModel.from_evidence(_Queued(sweep=sweep, server_args={"max_num_seqs": 16}), engine="vllm")
    assert [p.running for p in queued.levels] == [1.0, 1.0, 16.0]


def test_the_launch_drift_is_read_where_the_change_leaves_the_batch_alone(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    # the fix's launch ran 20% slower at every level: at 1 and 4 (a cap of 4 or 256 runs the same
    # batch there) that is the machine's movement, which the drift columns take out
    fix = pd.read_csv(run / "fix" / "sweep.csv")
    base = pd.read_csv(run / "baseline" / "sweep.csv").set_index("concurrency")["output_throughput"]
    fix.loc[fix["concurrency"].isin([1, 4]), "output_throughput"] = [0.8 * base[1], 0.8 * base[4]]
    fix.to_csv(run / "fix" / "sweep.csv", index=False)
    frame = prediction.record_prediction(run, {"max_num_seqs": 256}).set_index("concurrency")
    assert frame.attrs["drift_levels"] == [1, 4]
    assert frame["drift"].iloc[0] == pytest.approx(0.8)
    row = frame.loc[64]
    assert row["error_net_of_drift"] == pytest.approx((row["predicted"] * 0.8 - row["measured"]) / row["measured"])
    assert "measured 0.80x in the second launch" in prediction.section_markdown(run)


def test_record_prediction_writes_the_forecast_beside_the_measurement(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    frame = prediction.record_prediction(run, {"max_num_seqs": 256})
    on_disk = pd.read_csv(run / "fix" / rundir.PREDICTION_CSV)
    assert list(on_disk.columns) == prediction.PREDICTION_COLUMNS
    assert list(on_disk["concurrency"]) == [1, 4, 16, 64]
    row = on_disk.set_index("concurrency").loc[64]
    assert row["measured"] == pytest.approx(1497.8, abs=0.1)
    assert row["error"] == pytest.approx((row["predicted"] - row["measured"]) / row["measured"])
    assert bool(row["inside_band"]) == (row["low"] <= row["measured"] <= row["high"])
    assert "max_num_seqs" in frame.attrs["model"] or "service time" in frame.attrs["model"]
    text = prediction.section_markdown(run)
    assert text.startswith("## Forecast beside measurement")
    assert "| 64 |" in text and "1,498" in text
    # the report carries the section
    from glm5lib import report

    assert "## Forecast beside measurement" in report.write_report(run).read_text()
    refit = prediction.refit_shift(run, [128, 256])
    assert list(refit["concurrency"]) == [128, 256]
    assert refit["moved"].notna().all() and (refit["predicted"] > 0).all()
    _, forecast = prediction.forecast_hypothesis(run, {"max_num_seqs": 256})
    assert (run / rundir.FORECAST_CSV).is_file() and list(forecast["concurrency"]) == [1, 4, 16, 64]


def test_a_baseline_without_a_fit_still_gets_its_prediction_file_saying_why(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE, run)
    pd.read_csv(run / "baseline" / "sweep.csv").head(1).to_csv(run / "baseline" / "sweep.csv", index=False)
    frame = prediction.record_prediction(run, {"max_num_seqs": 256})
    on_disk = pd.read_csv(run / "fix" / rundir.PREDICTION_CSV)
    assert list(on_disk["concurrency"]) == [1, 4, 16, 64] and on_disk["predicted"].isna().all()
    assert on_disk["measured"].notna().all()
    assert "no forecast: cannot fit" in frame.attrs["model"] and "at least 2 sweep levels" in on_disk["unseen_changes"][0]
    assert "| 64 | - |" in prediction.section_markdown(run)


def test_no_prediction_no_section(tmp_path):
    assert prediction.section_markdown(tmp_path) is None


def test_glm5_predict_prints_json_forecasts(capsys):
    code = main(["predict", str(EXAMPLE), "--phase", "baseline", "--set", "max_num_seqs=256",
                 "--concurrency", "16,64", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert [o["concurrency"] for o in out] == [16, 64]
    for o in out:
        assert {"predicted_tok_s", "low_tok_s", "high_tok_s", "ttft_ms", "tpot_ms"} <= set(o)
        assert o["low_tok_s"] <= o["predicted_tok_s"] <= o["high_tok_s"]
    code = main(["predict", str(EXAMPLE), "--phase", "baseline", "--concurrency", "64", "--input-len", "512"])
    text = capsys.readouterr().out
    assert code == 0 and "service time" in text and "running_cap" in text


@pytest.mark.parametrize("argv, message", [
    (["--concurrency", "0"], "--concurrency expects integers"),
    (["--concurrency", "4", "--set", "max_num_seqs"], "--set expects FIELD=VALUE"),
    (["--concurrency", "4", "--output-len", "0"], "--output-len must be at least 1"),
])
def test_glm5_predict_refuses_bad_input(capsys, argv, message):
    assert main(["predict", str(EXAMPLE), "--phase", "baseline", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_client_starved_at_every_level_is_named_and_widens_the_band():
    healthy = _sweep(TRUE, [1, 4, 16, 64], cap=64)
    starved = healthy.assign(client_bound=True, client_cpu_pct=4.0)
    args = {"max_running_requests": 64, "disable_cuda_graph": True}
    fine = pm.PerfModel.from_evidence(Evidence(sweep=healthy, server_args=args), engine="sglang")
    paced = pm.PerfModel.from_evidence(Evidence(sweep=starved, server_args=args), engine="sglang")
    assert not fine.host_paced and fine.starved_levels == []
    assert paced.host_paced and paced.starved_levels == [1, 4, 16, 64]
    assert "starved of CPU at every level 1, 4, 16, 64" in paced.describe()
    assert "starved" not in fine.describe()
    assert paced.to_dict()["starved_levels"] == [1, 4, 16, 64]
    [a] = fine.forecast({"max_running_requests": 256}, [256])
    [b] = paced.forecast({"max_running_requests": 256}, [256])
    assert b.predicted_tok_s == pytest.approx(a.predicted_tok_s)  # the same fit, a wider band
    assert b.low_tok_s < a.low_tok_s and b.high_tok_s > a.high_tok_s


def test_a_client_busy_but_not_starved_or_starved_at_some_levels_only_does_not_widen_the_band():
    rows = _sweep(TRUE, [1, 4, 16, 64], cap=64)
    busy = rows.assign(client_bound=True, client_cpu_pct=95.0)  # a saturated client: its own limit
    some = rows.assign(client_bound=[True, True, False, False], client_cpu_pct=[3.0, 3.0, 60.0, 70.0])
    args = {"max_running_requests": 64, "disable_cuda_graph": True}
    for sweep, levels in ((busy, []), (some, [1, 4])):
        model = pm.PerfModel.from_evidence(Evidence(sweep=sweep, server_args=args), engine="sglang")
        assert model.starved_levels == levels and not model.host_paced
    assert "starved of CPU at levels 1, 4" in model.describe()


@pytest.mark.parametrize("exponent", [0.56, 1.0])
def test_levels_the_form_follows_exactly_keep_their_exponent_however_far_from_the_prior(exponent):
    # the prior weighs against the levels' own scatter: with none, it pulls nothing
    true = pm.StepParams(fixed_ms=4.0, per_seq_ms=0.5, exponent=exponent)
    model = pm.PerfModel.from_evidence(Evidence(sweep=_sweep(true, [2, 4, 8, 16], input_len=32, output_len=64),
                                                server_args={"max_num_seqs": 16}), engine="vllm")
    assert model.exponent_fitted and model.params.exponent == pytest.approx(exponent, abs=0.011)
    [f] = model.forecast({"max_num_seqs": 256}, [64])
    truth = 1000.0 * 64 / pm.step_ms(true, 64, input_len=32, output_len=64)
    assert f.predicted_tok_s == pytest.approx(truth, rel=0.02)


def test_levels_scattered_as_a_shared_host_scatters_them_are_held_near_the_prior_and_forecast_closer(monkeypatch):
    # four levels, each 10% off at random (a 15-s level on a 2-core VM): the best exponent alone
    # swings across the grid and the forecast at 4x the largest batch with it; the prior, weighed
    # against the scatter the fit itself shows, keeps more forecasts within 25% of the truth
    true = pm.StepParams(fixed_ms=3.6, per_seq_ms=0.37, exponent=0.8)
    levels = [2, 4, 8, 16]
    truth = 1000.0 * 64 / pm.step_ms(true, 64, input_len=32, output_len=64)
    clean = _sweep(true, levels, input_len=32, output_len=64)
    rng = np.random.default_rng(7)
    draws = [np.exp(0.1 * rng.standard_normal(len(levels))) for _ in range(120)]

    def within(prior_sd: float) -> tuple[float, float]:
        monkeypatch.setattr(pm, "PRIOR_EXPONENT_SD", prior_sd)
        hits, spread = [], []
        for scale in draws:
            sweep = clean.assign(output_throughput=clean["output_throughput"] * scale)
            model = pm.PerfModel.from_evidence(Evidence(sweep=sweep, server_args={"max_num_seqs": 16}), engine="vllm")
            [f] = model.forecast({"max_num_seqs": 256}, [64])
            hits.append(abs(f.predicted_tok_s / truth - 1) < 0.25)
            spread.append(model.params.exponent)
        return float(np.mean(hits)), float(np.percentile(spread, 90) - np.percentile(spread, 10))

    # the best exponent alone: a prior of infinite spread weighs nothing
    with_prior, without = within(pm.PRIOR_EXPONENT_SD), within(math.inf)
    assert with_prior[0] >= without[0] + 0.08, (with_prior, without)
    assert with_prior[1] < without[1], (with_prior, without)
