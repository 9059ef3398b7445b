"""The diagnosis and the forecast on the real H200 run (data/examples/h200-sglang): what the host cannot do is
ruled out, every proposal states its cost, long values are shown cut."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rule_findings import only_finding

from glm5lib import diagnose as dg

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h200-sglang"


@pytest.fixture
def run(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    shutil.copytree(EXAMPLE / "baseline", out / "baseline")
    shutil.copy(EXAMPLE / "environment.json", out / "environment.json")
    return out


def fix_evidence(tmp_path):
    """The evidence of the H200 run's fix phase, read from a copy of it."""
    run = tmp_path / "run"
    shutil.copytree(EXAMPLE / "fix", run / "fix")
    return dg.load_evidence(run, phase="fix")


def _diff_findings(run):
    ev = dg.load_evidence(run, reference="k2-thinking", phase="baseline")
    return dg.rule_reference_diff(ev)


def test_the_host_cannot_run_the_references_tensor_parallelism(run):
    out = _diff_findings(run)
    proposed = [f.covers[0] for f in out if f.rule == "reference_diff"]
    assert "tp_size" not in proposed
    ruled = next(f for f in out if f.rule == "reference_diff_ruled_out")
    assert "this host has 1 GPU(s); tp_size 8 needs at least 8" in ruled.evidence


def test_without_an_environment_the_gpu_count_is_said_to_be_unknown(run):
    (run / "environment.json").unlink()
    out = _diff_findings(run)
    tp = next(f for f in out if f.rule == "reference_diff" and f.covers[0] == "tp_size")
    assert "GPU count is unknown" in tp.evidence


def test_every_proposal_states_its_cost_and_graphs_off_comes_after_the_cap(run):
    out = [f for f in _diff_findings(run) if f.rule == "reference_diff"]
    assert out and all("its cost: " in f.evidence for f in out)
    fields = [f.covers[0] for f in out]
    graphs = out[fields.index("disable_cuda_graph")]
    assert "2.1 -> 53 ms at batch 1" in graphs.evidence
    assert "at large batches this matters less" not in graphs.evidence
    assert fields.index("max_running_requests") < fields.index("disable_cuda_graph")


def test_long_values_are_shown_cut(run):
    out = _diff_findings(run)
    minor = next(f for f in out if f.rule == "reference_diff_minor")
    assert "cuda_graph_config=" in minor.evidence
    assert "CudaGraphConfig(decode=PhaseConfig(backend='full', max_b...)" in minor.evidence
    assert all(len(f.finding) < 200 for f in out)


FIX_PHASE_FINDINGS = [
    # 6 of 454 decode lines ran eagerly, every line of its 1,024 level; the finding judges the lines
    # above the largest captured batch, not the whole log
    pytest.param(dg.rule_cuda_graph, ("above 256 (the largest batch captured at start-up)",
                                      "an eager step at 1023 running took"), "about 1024",
                 id="eager-steps-above-the-captured-batches"),
    # at 256: 199 running of 256 offered, none queued (above the old 75% bar), SGLang's
    # launch_server process at 99% of a core, 16.5 k tok/s generated against 11.6 k received
    pytest.param(dg.rule_underfed, ("-m sglang.launch_server) used 99% of its one core",
                                    "the serving process is the limit"), "--tokenizer-worker-num",
                 id="busy-serving-process-outpaced-by-the-engine"),
]


@pytest.mark.parametrize(("rule", "evidence", "suggestion"), FIX_PHASE_FINDINGS)
def test_the_fix_phases_limits_are_named_with_their_cost(tmp_path, rule, evidence, suggestion):
    """The H200 fix phase: each of its limits is one finding, its numbers in the evidence."""
    f = only_finding(rule, fix_evidence(tmp_path))
    for phrase in evidence:
        assert phrase in f.evidence
    assert suggestion in f.suggestion


def test_a_serving_process_at_half_a_core_is_not_named(tmp_path):
    """The fix phase's level at 256 with the serving process at half a core is not the serving
    process's doing."""
    ev = fix_evidence(tmp_path)
    sweep = ev.sweep.copy()
    sweep["other_processes"] = sweep["other_processes"].str.replace(
        "-m sglang.launch_server 99%", "-m sglang.launch_server 50%", regex=False)
    ev.sweep = sweep
    assert all("serving process" not in f.evidence for f in dg.rule_underfed(ev))


def test_the_cap_findings_projection_is_glm5_predicts(run):
    """One model: the cap finding states the forecast glm5 predict gives for the same change (the cap
    raised, and with graphs kept the graph ceiling with it), and no second figure (the H200 run once
    had 31,113 beside 13,060 for one question)."""
    from glm5lib.diagnose.model import predict

    ev = dg.load_evidence(run, phase="baseline")
    [cap] = dg.rule_concurrency_cap(ev)
    assert "decode model predicts" not in cap.suggestion
    assert cap.prediction is not None and cap.prediction.batch_after == 1024
    assert "--cuda-graph-max-bs" in cap.suggestion and "up to 256" in cap.suggestion
    [f] = predict(run, "baseline", {"max_running_requests": 1024, "graph_max_batch": 1024}, [1024])
    assert cap.prediction.throughput == pytest.approx(f.predicted_tok_s)
    assert cap.prediction.given == f.given and not f.given  # 16x beyond the batches the baseline ran
    assert "no forecast within +/-30%" in cap.suggestion and "to settle it, measure" in cap.suggestion


def test_the_gpu_runs_diagnosis_leads_with_the_cap_then_the_serving_process(run):
    """The whole diagnosis on the recorded H200 phases: the capped baseline leads with the cap;
    after the fix, with SGLang's serving process (not a crash at shutdown, not the client)."""
    base = dg.evaluate(dg.load_evidence(run, reference="k2-thinking", phase="baseline"))
    assert base.iloc[0]["rule"] == "concurrency_cap"
    assert not base["rule"].astype(str).str.startswith(("crash", "client_bound")).any()
    shutil.copytree(EXAMPLE / "fix", run / "fix")
    fix = dg.evaluate(dg.load_evidence(run, reference="k2-thinking", phase="fix"))
    assert fix.iloc[0]["rule"] == "underfed" and "sglang.launch_server" in fix.iloc[0]["evidence"]
    assert "cuda_graph" in set(fix["rule"])
    assert not fix["rule"].astype(str).str.startswith(("crash", "client_bound")).any()


def test_the_scheduler_section_says_which_levels_never_held_their_batch():
    from glm5lib.diagnose.section import section_markdown

    text = section_markdown(EXAMPLE / "grid")
    parts = {p.split("`")[1]: p for p in text.split("### Phase ")[1:]}
    assert "Not steady at concurrency 256: its batch swung between 95 and 160" in parts["grid-4"]
    assert "Not steady" in parts["grid-5"]
    assert all("Not steady" not in parts[p] for p in ("grid-1", "grid-2", "grid-3"))
