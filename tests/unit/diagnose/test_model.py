"""The performance model (glm5lib.diagnose.model) on levels whose truth the test states itself.

Each sweep here is built from a step formula written out in the test (never the model's own code),
so a fit that recovers it, a band that holds it and a forecast that is withheld where the evidence
cannot carry it are each checked against an independent figure. The recorded real runs are judged
in test_model_recorded.py.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from glm5lib.cli import main
from glm5lib.diagnose import model as pm
from glm5lib.diagnose import prediction
from glm5lib.diagnose.evidence import Evidence
from glm5lib.errors import ConfigError, DiagnosisError


def true_step(batch: float, fixed: float = 40.0, per: float = 0.9, exponent: float = 0.8) -> float:
    """The synthetic engine's step (ms) at ``batch``."""
    return fixed + per * batch**exponent


def sweep(levels, *, cap=None, step=true_step, input_len=256, output_len=256, ttft_ms=50.0, processes=None):
    rows = []
    for c in levels:
        b = min(c, cap) if cap else c
        u = step(b)
        service = output_len * u
        rows.append({
            "concurrency": c, "completed": 100, "output_throughput": 1000.0 * b / u,
            "total_input_tokens": 100 * input_len, "total_output_tokens": 100 * output_len,
            "mean_ttft_ms": ttft_ms + service * (c / b - 1), "mean_tpot_ms": (service - ttft_ms) / (output_len - 1),
            "mean_concurrency": c,
            "other_processes": processes(b, 1000.0 * b / u) if processes else "",
        })
    return pd.DataFrame(rows)


def tok_s(batch: float, step=true_step) -> float:
    return 1000.0 * batch / step(batch)


def test_the_fit_recovers_the_step_and_forecasts_a_raised_cap_within_its_band():
    ev = Evidence(sweep=sweep([1, 4, 16, 64, 256], cap=64), server_args={"max_running_requests": 64,
                                                                          "disable_cuda_graph": True})
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    assert model.exponent_fitted and model.params.exponent == pytest.approx(0.8, abs=0.021)
    assert model.params.fixed_ms == pytest.approx(40.0, rel=0.05)
    assert model.fit_error < 0.01 and model.seen["batch"] == (1.0, 64.0)
    [f] = model.forecast({"max_running_requests": 256}, [256])
    truth = tok_s(256)
    assert f.running == 256 and f.binding_limit == "load" and f.extrapolated
    assert f.given and f.band <= pm.MAX_BAND
    assert f.predicted_tok_s == pytest.approx(truth, rel=0.05)
    assert f.low_tok_s < truth < f.high_tok_s
    # the cap it ran under still binds when nothing changes, and requests queue for their turn
    [capped] = model.forecast(None, [1024])
    assert capped.running == 64 and capped.binding_limit == "running_cap"
    [inside] = model.forecast({}, [16])
    assert capped.ttft_ms > 10 * inside.ttft_ms


def test_far_beyond_two_batch_sizes_the_forecast_is_withheld_and_names_the_step_to_measure():
    ev = Evidence(sweep=sweep([1, 64, 256], cap=64), server_args={"max_running_requests": 64,
                                                                   "disable_cuda_graph": True})
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    assert not model.exponent_fitted and "prior" in model.describe()
    near, far = model.forecast({"max_running_requests": 2048}, [96, 2048])
    assert near.given and near.band <= pm.MAX_BAND
    assert near.low_tok_s < tok_s(96) < near.high_tok_s
    assert not far.given and far.band > pm.MAX_BAND
    assert far.measurement == {"kind": "step_profile", "batches": [2048], "graphs_off": None}
    assert "the step at batch 2048" in far.needs and "one_batch" in far.needs
    assert far.low_tok_s < tok_s(2048) < far.high_tok_s  # withheld, yet its band is honest


def test_one_batch_size_cannot_split_the_step_so_nothing_beyond_it_is_given():
    ev = Evidence(sweep=sweep([64, 256], cap=64), server_args={"max_running_requests": 64, "disable_cuda_graph": True})
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    assert "one batch size" in model.describe()
    [same] = model.forecast({}, [256])
    assert same.given and same.predicted_tok_s == pytest.approx(tok_s(64), rel=0.01)
    [f] = model.forecast({"max_running_requests": 512}, [512])
    assert not f.given and f.low_tok_s < tok_s(512) < f.high_tok_s


def test_limits_decide_the_batch_and_name_what_binds():
    args = {"max_num_seqs": 256, "max_num_batched_tokens": 8192}
    model = pm.PerfModel.from_evidence(Evidence(sweep=sweep([1, 4, 16, 64]), server_args=args,
                                                startup={"max_total_num_tokens": 200_000}), engine="vllm")
    # 8192 tokens a step feed at most 8192 x 256 / 512 = 4096 decoding requests; the pool holds
    # 200,000 / (256 + 256) = 390 at their full length, a little more while they grow
    [pool] = model.forecast({"max_num_seqs": 4096}, [4096])
    assert pool.binding_limit == "kv_tokens" and 390 <= pool.running <= 521
    [budget] = model.forecast({"max_num_seqs": 4096, "max_num_batched_tokens": 512, "kv_cache_memory_bytes": None}, [4096])
    assert budget.binding_limit == "token_budget" and budget.running == pytest.approx(256)
    [load] = model.forecast({}, [64])
    assert load.binding_limit == "load" and load.running == 64


def _graph_phase(sizes, levels, launch_ms=None, cap=None):
    """An SGLang-like phase whose decode steps replay graphs up to max(sizes), padded to the next
    size, and run eagerly above at ``hypot(launch, step)`` (the truth the test states)."""
    def step(b):
        if b <= max(sizes):
            padded = min(s for s in sizes if s >= b)
            return 2.0 + 0.15 * padded**0.8
        return math.hypot(launch_ms, 2.0 + 0.15 * b**0.8)

    args = {"max_running_requests": cap or max(levels), "cuda_graph_max_bs": max(sizes)}
    return Evidence(sweep=sweep(levels, cap=cap, step=step), server_args=args,
                    startup={"cuda_graph_batch_sizes": list(sizes)}), step


SIZES = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64]


def test_a_batch_between_captured_sizes_pays_the_next_size():
    ev, step = _graph_phase(SIZES, [1, 8, 16, 32, 64])
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    assert model.bounds.graph_sizes == tuple(SIZES)
    [f] = model.forecast({}, [41])  # runs as 48
    assert f.predicted_tok_s == pytest.approx(1000.0 * 41 / step(48), rel=0.03)
    assert f.predicted_tok_s < 0.97 * 1000.0 * 41 / (2.0 + 0.15 * 41**0.8)


def test_eager_levels_beside_graph_levels_give_the_launch_time_and_graphs_off_is_forecast():
    ev, _step = _graph_phase(SIZES, [1, 16, 64, 128, 256], launch_ms=50.0)
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    assert model.eager is not None and model.eager.kind == "phase"
    assert model.eager.launch_ms == pytest.approx(50.0, rel=0.1)
    [f] = model.forecast({"disable_cuda_graph": True}, [16])
    truth = 1000.0 * 16 / math.hypot(50.0, 2.0 + 0.15 * 16**0.8)
    assert f.eager and f.given and f.predicted_tok_s == pytest.approx(truth, rel=0.1)
    assert "kernel launches" in " ".join(f.sources)


def test_an_eager_step_no_evidence_shows_is_not_forecast_and_names_the_graphs_off_benchmark():
    ev, _ = _graph_phase(SIZES, [1, 16, 64, 256], cap=64)
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    assert model.eager is None and "not in the evidence" in model.describe()
    [f] = model.forecast({"disable_cuda_graph": True, "max_running_requests": 256}, [16])
    assert not f.given and f.eager
    assert f.measurement["kind"] == "step_profile" and f.measurement["graphs_off"] is True
    assert "--disable-cuda-graph" in f.needs and "what an eager step costs" in f.needs


def test_a_step_profile_carries_the_forecast_where_the_levels_cannot():
    # a phase capped at 4 (batches 1 and 4) and the engine's offline benchmark at 1-64: the served
    # step is 10% longer than the offline one (prompts folded in), which the levels at 1 and 4 show
    ev = Evidence(sweep=sweep([1, 4, 16, 64], cap=4), server_args={"max_num_seqs": 4})
    without = pm.PerfModel.from_evidence(ev, engine="vllm")
    [blind] = without.forecast({"max_num_seqs": 256}, [64])
    assert not blind.given
    ev.step_profile = pd.DataFrame({"batch": [1, 4, 16, 64], "step_ms": [true_step(b) / 1.1 for b in (1, 4, 16, 64)],
                                    "graphs": [None] * 4, "source": "vLLM's offline engine"})
    model = pm.PerfModel.from_evidence(ev, engine="vllm")
    assert model.profile is not None and model.profile.scale["any"] == pytest.approx(1.1, rel=0.01)
    [f] = model.forecast({"max_num_seqs": 256}, [64])
    assert f.given and f.predicted_tok_s == pytest.approx(tok_s(64), rel=0.02)
    assert any("step profile" in s for s in f.sources)


def test_a_reading_across_one_doubling_forecasts_no_batch_beyond_it():
    # a phase capped at 2 reads the served step's two numbers (scale, per-request part) from batches 1
    # and 2 only: a noise of a few percent in either moves the per-request slope by tens of percent,
    # and on two shared CPU cores such readings missed the raised run by -37% and +62% at 4. The
    # batch the phase ran is given; one doubling beyond it is not, and the level that settles it is named
    profile = pd.DataFrame({"batch": [1, 2, 16, 64], "step_ms": [true_step(b) / 1.1 for b in (1, 2, 16, 64)],
                            "graphs": [None] * 4, "source": "vLLM's offline engine"})
    ev = Evidence(sweep=sweep([1, 4, 16, 64], cap=2), server_args={"max_num_seqs": 2}, step_profile=profile)
    model = pm.PerfModel.from_evidence(ev, engine="vllm")
    at_two, at_four = model.forecast({"max_num_seqs": 256}, [2, 4])
    assert at_two.given and at_two.predicted_tok_s == pytest.approx(tok_s(2), rel=0.02)
    assert not at_four.given and at_four.band > pm.MAX_BAND
    assert at_four.measurement["kind"] == "level" and "one level at concurrency 4" in at_four.needs
    # read across two doublings (a cap of 4), the same profile carries the forecast to 64
    ev4 = Evidence(sweep=sweep([1, 4, 16, 64], cap=4), server_args={"max_num_seqs": 4}, step_profile=profile)
    [far] = pm.PerfModel.from_evidence(ev4, engine="vllm").forecast({"max_num_seqs": 256}, [64])
    assert far.given and far.predicted_tok_s == pytest.approx(tok_s(64), rel=0.05)


def test_a_phase_whose_client_was_starved_throughout_gives_no_forecast_and_says_how_to_measure_again():
    # the recorded vLLM pairs whose baseline's client was starved at every level: of the four levels
    # given from them whose batch held, one held its band (+25%, -50% and -35% off); such a phase
    # shows its host's pace, not the engine's, however well the curve fits
    s = sweep([1, 4, 16, 64], cap=4)
    s["client_bound"], s["client_cpu_pct"] = True, 30.0
    model = pm.PerfModel.from_evidence(Evidence(sweep=s, server_args={"max_num_seqs": 4}), engine="vllm")
    assert model.client_starved and model.host_paced and model.fit_error < 0.01
    forecasts = model.forecast({"max_num_seqs": 256}, [1, 4])
    assert not any(f.given for f in forecasts)
    for f in forecasts:
        assert "GLM5_CPUS=split" in f.needs and f"one level at concurrency {f.concurrency}" in f.needs
        assert "starved of CPU at every level" in f.needs
        assert f.measurement == {"kind": "level", "concurrency": f.concurrency, "changes": {"max_num_seqs": 256}}
    assert "no level is forecast from it" in model.describe()
    # every core busy but the client keeping up (another tenant's load): the band widens, the batch
    # the phase ran is still given
    busy = sweep([1, 4, 16, 64], cap=4)
    busy["host_cpu_pct"] = 99.0
    loaded = pm.PerfModel.from_evidence(Evidence(sweep=busy, server_args={"max_num_seqs": 4}), engine="vllm")
    [at_four] = loaded.forecast({"max_num_seqs": 256}, [4])
    assert loaded.host_paced and not loaded.client_starved and at_four.given
    assert "band widens 15%" in loaded.describe()
    # and with the client on a core of its own, the same
    [own] = pm.PerfModel.from_evidence(Evidence(sweep=sweep([1, 4, 16, 64], cap=4), server_args={"max_num_seqs": 4}),
                                       engine="vllm").forecast({"max_num_seqs": 256}, [4])
    assert own.given and own.band < at_four.band


def _busy(per_token: float, idle: float = 5.0):
    def processes(batch, thr):
        return f"sglang::scheduler[1] 100%; python3[2] -m sglang.launch_server {idle + per_token * thr:.0f}%"
    return processes


def test_the_serving_front_end_is_a_ceiling_and_more_processes_raise_it():
    # the serving process uses 5% of its core idle plus 0.4% per 1,000 tok/s received: 23,750 tok/s
    # fill it; at 64 running (19,500 tok/s) it was 83% busy, and at 128 the engine alone would give 28,070
    step = lambda b: 2.0 + 0.02 * b  # noqa: E731
    s = sweep([1, 8, 32, 64], step=step, processes=_busy(0.004))
    ev = Evidence(sweep=s, server_args={"max_running_requests": 64, "disable_cuda_graph": True})
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    [role] = model.frontend.roles
    assert role.name == "tokenizer" and role.ceiling() == pytest.approx(23750, rel=0.03)
    engine_alone = 1000.0 * 128 / step(128)
    [f] = model.forecast({"max_running_requests": 128}, [128])
    # 128 streams are one doubling beyond the 64 the phase ran: SGLang's tokenizer manager's per-token
    # cost grows by its stated share per doubling, and the ceiling falls by it
    growth = role.stream_growth
    assert growth > 0 and role.ceiling(running=64) == pytest.approx(role.ceiling())
    assert f.binding_limit == "frontend:tokenizer"
    assert f.predicted_tok_s == pytest.approx(23750 / (1 + growth), rel=0.03)
    assert any("per doubling beyond the 64 it ran" in src for src in f.sources)
    assert f.engine_tok_s == pytest.approx(engine_alone, rel=0.03)
    [two] = model.forecast({"max_running_requests": 128, "tokenizer_worker_num": 2}, [128])
    assert two.binding_limit == "load" and two.predicted_tok_s == pytest.approx(engine_alone, rel=0.03)
    assert any("one core each" in n for n in two.notes)
    [chunks] = model.forecast({"max_running_requests": 128, "stream_interval": 4}, [128])
    assert chunks.binding_limit == "load" and any("per 4 tokens" in n for n in chunks.notes)


def test_a_field_with_no_term_withholds_the_forecast_and_a_neutral_one_does_not():
    ev = Evidence(sweep=sweep([1, 4, 16, 64], cap=64), server_args={"max_running_requests": 64, "disable_cuda_graph": True})
    model = pm.PerfModel.from_evidence(ev, engine="sglang")
    [f] = model.forecast({"attention_backend": "triton"}, [16])
    assert not f.given and f.unseen_changes and "attention_backend" in f.needs
    assert f.measurement == {"kind": "level", "concurrency": 16, "changes": {"attention_backend": "triton"}}
    [g] = model.forecast({"disable_radix_cache": True}, [16])
    assert g.given and any("not modelled" in n for n in g.notes)


def test_starved_clients_at_every_level_widen_the_band():
    healthy = sweep([1, 4, 16, 64], cap=64)
    starved = healthy.assign(client_bound=True, client_cpu_pct=20.0)
    args = {"max_running_requests": 64, "disable_cuda_graph": True}
    fine = pm.PerfModel.from_evidence(Evidence(sweep=healthy, server_args=args), engine="sglang")
    paced = pm.PerfModel.from_evidence(Evidence(sweep=starved, server_args=args), engine="sglang")
    assert paced.host_paced and not fine.host_paced and "starved" in paced.describe()
    [a], [b] = fine.forecast({}, [16]), paced.forecast({}, [16])
    assert b.band > a.band


def test_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        pm.PerfModel.fit_phase(tmp_path / "empty")
    with pytest.raises(DiagnosisError, match="at least 2"):
        pm.PerfModel.from_evidence(Evidence(sweep=sweep([8])), engine="sglang")
    model = pm.PerfModel.from_evidence(Evidence(sweep=sweep([1, 8])), engine="sglang")
    with pytest.raises(ConfigError, match="integers of at least 1"):
        model.forecast({}, [0])
    with pytest.raises(ConfigError, match="must map"):
        model.forecast(["max_running_requests"], [8])


def _run(tmp_path, levels=(1, 4, 16, 64), cap=4):
    run = tmp_path / "run"
    (run / "baseline").mkdir(parents=True)
    sweep(levels, cap=cap).to_csv(run / "baseline" / "sweep.csv", index=False)
    (run / "baseline" / "config.json").write_text(json.dumps(
        {"format": "glm5lib.server_config/1", "server_args": {"max_running_requests": cap, "disable_cuda_graph": True}}))
    fix = sweep([1, 4, 16, 64], cap=64)
    (run / "fix").mkdir()
    fix.to_csv(run / "fix" / "sweep.csv", index=False)
    return run


def test_record_prediction_writes_given_and_what_would_settle_the_rest(tmp_path):
    run = _run(tmp_path)
    frame = prediction.record_prediction(run, {"max_running_requests": 64}, phase="fix")
    on_disk = pd.read_csv(run / "fix" / "prediction.csv")
    assert list(on_disk.columns) == prediction.PREDICTION_COLUMNS
    assert bool(frame.set_index("concurrency").loc[4, "given"])
    far = frame.set_index("concurrency").loc[64]
    assert not far["given"] and "the step at batch 64" in far["needs"]
    text = prediction.section_markdown(run)
    assert "not forecast" in text and "what would settle each" in text



def test_a_forecast_frame_sets_what_the_phase_measured_beside_each_level_it_ran(tmp_path):
    run = _run(tmp_path)
    model = pm.PerfModel.fit_phase(run / "baseline")
    frame = prediction.forecast_frame(model.forecast({"running_cap": 64}, [4, 32, 64]), measured=run / "baseline")
    got = pd.read_csv(run / "baseline" / "sweep.csv").set_index("concurrency")["output_throughput"]
    rows = frame.set_index("concurrency")
    assert rows.loc[4, "measured_tok_s"] == got[4] and rows.loc[64, "measured_tok_s"] == got[64]
    assert pd.isna(rows.loc[32, "measured_tok_s"]) and "measured_running" in frame
    assert "measured_tok_s" not in prediction.forecast_frame(model.forecast({}, [4]))  # none asked: none added


def test_a_fix_phase_with_a_table_cut_short_is_still_recorded(tmp_path):
    """A requests.jsonl cut short in the measured phase costs only what is read from it (whether each
    level held its batch), not the record of what was measured; a sweep that cannot be read says so."""
    run = _run(tmp_path)
    (run / "fix" / "requests.jsonl").write_text('{"concurrency": 4, "ok": tr')
    frame = prediction.record_prediction(run, {"max_running_requests": 64}, phase="fix", write=False)
    assert list(frame["concurrency"]) == [1, 4, 16, 64] and frame["measured"].notna().all()
    (run / "fix" / "sweep.csv").write_text('concurrency,output_throughput\n"1,2\n')
    with pytest.raises(DiagnosisError, match=r"sweep\.csv could not be read"):
        prediction.record_prediction(run, {"max_running_requests": 64}, phase="fix", write=False)

def test_the_forecast_beside_the_measurement_reads_each_phase_once(tmp_path, monkeypatch):
    """The model's fit, the levels, the fix's figures, the launches' drift and whether each level held
    its batch all come from one load of each phase's evidence; no sweep.csv is read beside it."""
    from glm5lib.diagnose import evidence

    run = _run(tmp_path)
    loads, sweeps = [], []
    find, read_csv = evidence.find_phase, pd.read_csv
    monkeypatch.setattr(evidence, "find_phase", lambda run_dir, phase: loads.append(phase) or find(run_dir, phase))
    monkeypatch.setattr(pd, "read_csv", lambda path, *a, **k: sweeps.append(str(path)) or read_csv(path, *a, **k))
    prediction.record_prediction(run, {"max_running_requests": 64}, phase="fix", write=False)
    assert sorted(loads) == ["baseline", "fix"]
    # the baseline's sweep twice: its own evidence and the fix's (the phase it changed)
    assert sorted(p.rsplit("/", 2)[-2] for p in sweeps if p.endswith("sweep.csv")) == ["baseline", "baseline", "fix"]
    loads.clear()
    prediction.forecast_hypothesis(run, {"max_running_requests": 64}, write=False)
    assert loads == ["baseline"]


def test_glm5_predict_prints_json_and_refuses_a_misspelt_limit(tmp_path, capsys):
    run = _run(tmp_path)
    assert main(["predict", str(run), "--phase", "baseline", "--set", "running_cap=16", "--concurrency", "16",
                 "--json"]) == 0
    [f] = json.loads(capsys.readouterr().out)
    assert f["running"] == 16 and f["binding_limit"] == "load" and "given" in f and "needs" in f
    assert main(["predict", str(run), "--phase", "baseline", "--set", "runing_cap=16", "--concurrency", "16"]) == 2
    assert "did you mean running_cap" in capsys.readouterr().err
    # a value the limit cannot take is refused too, never forecast as if the limit were unset
    for setting in ("running_cap=abc", "max_running_requests=-4", "graphs_off=maybe"):
        assert main(["predict", str(run), "--phase", "baseline", "--set", setting, "--concurrency", "16"]) == 2
        assert "takes " in capsys.readouterr().err, setting
    assert main(["predict", str(run), "--phase", "baseline", "--set", "running_cap=none", "--concurrency", "16"]) == 0


def test_a_server_that_shared_its_cores_with_its_front_end_widens_beyond_its_batches():
    """vLLM on one CPU core beside its own API server: every level's server processes used the one core
    they may run on (``server_cpus`` 1, 100%), so the front end's work per token took turns with the
    step. At the batches run the forecast is as before; beyond them the band widens by the front end's
    share of the step, and the reason names the shared cores. The same sweep on cores of its own is
    not widened."""
    step = lambda b: 2.0 + 0.1 * b  # noqa: E731
    s = sweep([1, 4, 8, 16], cap=16, step=step, processes=_busy(0.004, idle=15.0))
    s["others_cpu_pct"], s["server_cpus"] = 100.0, 1
    args = {"max_running_requests": 16, "disable_cuda_graph": True}
    shared = pm.PerfModel.from_evidence(Evidence(sweep=s, server_args=args), engine="sglang")
    alone = pm.PerfModel.from_evidence(Evidence(sweep=s.assign(server_cpus=8), server_args=args), engine="sglang")
    assert shared.shares_cores and not alone.shares_cores
    # a front end that had no core of its own has no ceiling of its own: its cost is in the step
    [role] = shared.frontend.roles
    assert role.shares_cores and role.ceiling() == float("inf") and "no ceiling of its own" in role.describe()
    [a16], [s16] = alone.forecast({}, [16]), shared.forecast({}, [16])
    assert s16.band == pytest.approx(a16.band)
    [a64], [s64] = alone.forecast({"max_running_requests": 64}, [64]), shared.forecast({"max_running_requests": 64}, [64])
    assert s64.predicted_tok_s == pytest.approx(a64.predicted_tok_s)
    assert s64.band > a64.band
    assert any("takes turns with the step" in src for src in s64.sources)
    assert not any("takes turns" in src for src in a64.sources)
