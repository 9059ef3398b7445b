"""The diagnosis and the forecast replayed on real SGLang 0.5.16 on one H100
(data/examples/h100-sglang-next): the capped baseline, then glm5lib's fix (the cap and the graph
ceiling raised to 1,024) with its forecast written before the launch.

At 1,024 offered the engine ran 1,023 requests for about six seconds at 43 k tok/s by its decode
lines, then one straggler alone, while the client received 11.0 k tok/s from a serving process at
96% of its core: the front end, not the kernels and not the feed, held that level."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from glm5lib import diagnose as dg
from glm5lib.diagnose.model import predict

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h100-sglang-next"
FIX = {"max_running_requests": 1024, "cuda_graph_max_bs": 1024}


def _findings(phase: str) -> list:
    return list(dg.diagnose(EXAMPLE, phase=phase, write=False).itertuples())


def test_the_capped_baseline_leads_with_the_cap():
    [first, *_] = _findings("baseline")
    assert first.rule == "concurrency_cap"
    assert "stayed at 64" in first.evidence


def test_each_level_of_the_fix_held_its_batch_by_time_not_by_lines():
    """The 1,024 level's 13 decode lines: 6 at 1,023 running, 6 of the last request alone, one of the
    ramp. Read over lines the median batch was 7; over the time each line stands for, 1,023."""
    ev = dg.load_evidence(EXAMPLE, phase="glm5-fix")
    table = ev.level_table().set_index("concurrency")
    assert table.loc[1024, "running_median"] == 1023
    assert table["batch_held"].all(), table["held_note"].tolist()
    [lines] = [lines for c, lines in ev.level_decode() if c == 1024]
    assert float(lines["running_req"].median()) < 10  # what the lines alone said


def test_the_fix_leads_with_the_front_end_and_saturation_does_not_blame_the_kernels():
    findings = _findings("glm5-fix")
    first = findings[0]
    assert first.rule == "underfed"
    assert first.finding.startswith("the serving front end streamed less than the engine generated")
    assert "sglang.launch_server) used 96% of its one core" in first.evidence
    assert "requests did not reach the scheduler" not in first.finding
    assert "--tokenizer-worker-num" in first.suggestion and "--stream-interval" in first.suggestion
    sat = [f for f in findings if f.rule == "saturation"]
    for f in sat:
        assert "the kernels are the limit" not in f.suggestion
        assert "serving front end" in f.suggestion


def test_the_forecast_written_before_the_launch_is_the_recorded_one():
    """The forecast the GPU host wrote from the baseline (forecast-glm5-fix.json) gave 1 and 64 and
    withheld 256 and 1,024, each naming one launch; the prediction.csv beside the fix compares it."""
    written = json.loads((EXAMPLE / "baseline" / "forecast-glm5-fix.json").read_text())
    rows = {int(r["concurrency"]): r for r in (written if isinstance(written, list) else written["forecasts"])}
    assert rows[1]["given"] and rows[64]["given"]
    assert not rows[256]["given"] and not rows[1024]["given"]
    assert all(rows[c]["measurement"] == {"kind": "level", "concurrency": c, "changes": FIX} for c in (256, 1024))
    recorded = pd.read_csv(EXAMPLE / "glm5-fix" / "prediction.csv").set_index("concurrency")
    assert abs(recorded.loc[1, "error"]) < 0.05 and abs(recorded.loc[64, "error"]) < 0.15
    # the tokenizer front end's ceiling read flat from 64 running: +31% and +62% over what was measured
    assert recorded.loc[256, "error"] > 0.25 and recorded.loc[1024, "error"] > 0.5


@pytest.mark.parametrize(("level", "measured"), [(256, 13561), (1024, 10954)])
def test_todays_forecast_reads_the_front_ends_growth_with_the_streams(level, measured):
    """From the same baseline, with SGLang's serving role's stated growth of its per-token cost per
    doubling of the streams, the front end's ceiling lands within 10% of what the fix measured; the
    band stays wider than +/-30% (one launch's reading of the front end moves by a fifth), so the
    forecast is withheld and names the one level that would settle it."""
    [f] = predict(EXAMPLE, "baseline", FIX, [level])
    assert f.binding_limit == "frontend:tokenizer"
    assert abs(f.predicted_tok_s / measured - 1) < 0.10, f.predicted_tok_s
    assert f.low_tok_s <= measured <= f.high_tok_s
    assert not f.given and f.measurement["kind"] == "level" and f.measurement["concurrency"] == level
    assert any("per doubling beyond the 64 it ran" in s for s in f.sources)


def test_the_raised_graph_ceiling_is_read_from_the_start_up_log():
    """0.5.16 captured 68 decode batch sizes up to 1,024 (the log's ``Capture target decode CUDA graph
    begin ... bs=[...]`` line): no step of the fix ran eagerly, and no finding says one did."""
    ev = dg.load_evidence(EXAMPLE, phase="glm5-fix")
    assert int(ev.arg("cuda_graph_max_bs")) == 1024
    lines = ev.active_decode()
    assert lines["cuda_graph"].astype(str).str.lower().isin(("true", "1")).all()
    assert not dg.rule_cuda_graph(ev)


FRONTEND = {**FIX, "tokenizer_worker_num": 4, "stream_interval": 4}


def test_the_front_end_remedy_is_not_read_as_a_crash_and_moved_the_limit():
    """Four tokenizer workers stop as four processes (tests/fixtures/logs/
    sglang-0.5.16-h100-tokenizer-workers.log): no finding says a process died. The front end no
    longer leads: the client received 32 k tok/s at 1,024 (10.95 k before), the decode lines 30-50 k."""
    findings = _findings("frontend")
    assert not [f for f in findings if f.rule.startswith("crash")], [f.finding for f in findings]
    assert not [f for f in findings if f.rule == "underfed"]
    sweep = pd.read_csv(EXAMPLE / "frontend" / "sweep.csv").set_index("concurrency")
    before = pd.read_csv(EXAMPLE / "glm5-fix" / "sweep.csv").set_index("concurrency")
    assert sweep.loc[1024, "output_throughput"] > 2.5 * before.loc[1024, "output_throughput"]
    assert sweep.loc[256, "output_throughput"] > 1.5 * before.loc[256, "output_throughput"]


def test_the_front_end_remedys_forecast_from_the_baseline_held_where_it_was_given():
    """Written by notebook 04 on the GPU host before the launch, from the capped baseline and its
    step profile (1, 64, 256): given at 1, 64 and 256 and each inside its band within 15%; 1,024
    withheld (the step at 1,024 was not in the evidence; the benchmark taken for it ran out of
    memory, baseline/step-profile-1024.log)."""
    rows = pd.read_csv(EXAMPLE / "frontend" / "prediction.csv").set_index("concurrency")
    for c in (1, 64, 256):
        assert bool(rows.loc[c, "given"]) and bool(rows.loc[c, "inside_band"]), rows.loc[c]
        assert abs(rows.loc[c, "error"]) < 0.15
    assert not bool(rows.loc[1024, "given"])
    written = json.loads((EXAMPLE / "baseline" / "forecast-frontend-2995991.json").read_text())
    by = {int(r["concurrency"]): r for r in (written if isinstance(written, list) else written["forecasts"])}
    assert by[256]["predicted_tok_s"] == pytest.approx(rows.loc[256, "predicted"], rel=1e-6)


@pytest.mark.parametrize(("level", "measured"), [(256, 21742), (1024, 32210)])
def test_from_the_fix_the_engines_step_where_the_front_end_held_the_client_back_is_read_off_its_decode_lines(
        level, measured):
    """The fix's 256 and 1,024 levels were paced by the front end, so their client throughput says
    nothing of the engine's step; their decode lines do (25.9 k and 42.9 k tok/s at the full batch).
    Scaled to served steps on the levels the engine paced (1 and 64), they forecast the remedy within
    10%, given. Read off the levels alone, the model extrapolated the step from 1-64: -41% and -43%,
    withheld (glm5-fix/forecast-frontend-2995991.json, written before the remedy's launch)."""
    [f] = predict(EXAMPLE, "glm5-fix", FRONTEND, [level])
    assert f.given and f.low_tok_s <= measured <= f.high_tok_s, (f.predicted_tok_s, f.low_tok_s, f.high_tok_s)
    assert abs(f.predicted_tok_s / measured - 1) < 0.10
    assert any("decode lines" in s for s in f.sources), f.sources
    written = json.loads((EXAMPLE / "glm5-fix" / "forecast-frontend-2995991.json").read_text())
    [before] = [r for r in written if int(r["concurrency"]) == level]
    assert not before["given"] and before["predicted_tok_s"] < 0.65 * measured


def test_an_engine_whose_lines_are_not_step_paced_keeps_its_levels_as_they_are():
    """vLLM logs its generation rate every ten seconds, idle time included: no level of the CPU
    example reads a step off its lines."""
    from glm5lib.diagnose.model import PerfModel

    model = PerfModel.fit_phase(EXAMPLE.parent / "cpu-vllm" / "fix")
    assert all(p.line_step_ms is None for p in model.levels)
    ours = PerfModel.fit_phase(EXAMPLE / "glm5-fix")
    assert {round(p.line_batch) for p in ours.levels if p.line_batch} == {1, 64, 256, 1023}


def test_the_benchmark_a_withheld_forecast_names_runs_the_changed_graph_ceiling():
    """The remedy's 1,024 forecast from the baseline lacks a graph step at 1,024. The benchmark the
    notebook ran for it used the baseline's graph ceiling and timed an eager step
    (step-profile-retaken/: 27.6 ms, graphs False); the command named now carries the change's
    ceiling, and none of its other fields (the tokenizer workers are no step's), in SGLang 0.5.16's own
    flag: the per-phase ``--cuda-graph-max-bs-decode`` (``--cuda-graph-max-bs`` is its deprecated alias)."""
    from glm5lib import engines
    from glm5lib.diagnose.evidence import load_evidence

    [f] = predict(EXAMPLE, "baseline", FRONTEND, [1024])
    assert not f.given and "--cuda-graph-max-bs-decode 1024" in f.needs and "--batch-size 1024" in f.needs
    assert "--cuda-graph-max-bs " not in f.needs
    assert "--max-total-tokens" in f.needs and "tokenizer-worker" not in f.needs
    ev = load_evidence(EXAMPLE, phase="baseline")
    assert engines.step_kind_changes(FRONTEND, ev.engine, ev.server_args) == {"cuda_graph_max_bs": 1024}
    retaken = pd.read_csv(EXAMPLE / "step-profile-retaken" / "step-profile.csv").set_index("batch")
    assert not bool(retaken.loc[1024, "graphs"]) and bool(retaken.loc[256, "graphs"])


def test_the_reference_diff_does_not_undo_the_front_end_remedy():
    """The K2 reference streams every token with one tokenizer process; the remedy streams every
    fourth with four. The reference's values load the front end more, so the diff rules them out
    instead of suggesting ``--stream-interval 1``."""
    from glm5lib.paths import data_dir

    findings = list(dg.diagnose(EXAMPLE, reference=data_dir() / "reference" / "k2-thinking", phase="frontend",
                                write=False).itertuples())
    assert not [f for f in findings if "--stream-interval 1" in f.suggestion]
    [ruled] = [f for f in findings if f.rule == "reference_diff_ruled_out"]
    assert "stream_interval (this run streams fewer chunks per token than the reference (4 against 1))" in ruled.evidence
    assert "tokenizer_worker_num (this run runs more front-end processes" in ruled.evidence


def test_a_benchmark_profile_is_read_as_served_on_the_levels_the_engine_paced(tmp_path):
    """The baseline's profile (graph steps at 1, 64, 256) beside the fix's phase: its 256 level was
    the front end's, so only 1 and 64 scale the profile to served steps."""
    import shutil

    from glm5lib.diagnose.model import PerfModel

    shutil.copytree(EXAMPLE / "glm5-fix", tmp_path / "glm5-fix")
    shutil.copy(EXAMPLE / "baseline" / "step-profile.csv", tmp_path / "glm5-fix" / "step-profile.csv")
    model = PerfModel.fit_phase(tmp_path / "glm5-fix")
    assert model.profile is not None and model.profile.source != "the engine's decode lines at each level's full batch"
    assert model.profile.read_up_to["graph"] == pytest.approx(64, abs=0.5) and model.profile.read_from["graph"] == 1


@pytest.mark.parametrize("spelling", ["graph-max-batch", "--cuda-graph-max-bs", "cuda-graph-max-bs"])
def test_a_graph_ceiling_spelt_as_a_flag_or_with_hyphens_reaches_the_benchmark(spelling):
    [f] = predict(EXAMPLE, "baseline", {"running_cap": 1024, spelling: 1024}, [1024])
    assert "--cuda-graph-max-bs-decode 1024" in f.needs, f.needs
