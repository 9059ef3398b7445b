"""Tests for glm5lib.diagnose.references: server arguments read with their own release's names and defaults."""

from __future__ import annotations

from pathlib import Path

from glm5lib.cli import main
from glm5lib.diagnose import diff_configs
from glm5lib.diagnose.references import arg, config_defaults, flag_of, release_of, resolve_config
from glm5lib.logs import parse_server_args

FIXTURE = Path(__file__).parents[2] / "fixtures" / "logs" / "sglang-0.5.23-server-args.log"


def _log_0_5_23() -> dict:
    # SGLang 0.5.23's own server_args line for glm5-fix (tests/fixtures/logs/SOURCES.md)
    return dict(parse_server_args(FIXTURE.read_text()))


def test_names_and_defaults_come_from_the_arguments_release(monkeypatch):
    from glm5lib.engines.sglang.config import _releases as releases

    monkeypatch.setattr(releases, "installed_release", lambda: None)  # an SGLang installed here would be the default
    args = _log_0_5_23()
    assert release_of(args) == "0.5.23"
    assert release_of({"version": "0.5.9", "tp_size": 8}) == "0.5.9"
    assert release_of({"version": "0.5.8.post1"}) == "0.5.8"
    # a few fields: the default release, unless some names exist only in older releases
    assert release_of({"tp_size": 8}) == release_of({}) == "0.5.23"
    assert release_of({"cuda_graph_max_bs_decode": 64, "tp_size": 8}) == "0.5.23"
    assert release_of({"cuda_graph_max_bs": 64, "tp_size": 8}) == "0.5.9"
    assert release_of({"cuda_graph_bs": [1, 2, 4]}) == "0.5.9"
    # names of both generations: the default release still fits as well as any
    assert release_of({"cuda_graph_max_bs": 64, "enable_tf32_matmul": True}) == "0.5.23"
    reference = resolve_config("k2-thinking").args
    assert release_of(reference) in ("0.5.8", "0.5.9")
    assert "cuda_graph_max_bs_decode" in config_defaults("0.5.23") and "cuda_graph_max_bs_decode" not in config_defaults("0.5.9")
    assert config_defaults("0.5.23")["cuda_graph_backend_decode"] is None
    # 0.5.23 logs the deprecated switch as False and says "graphs off" per phase
    assert args["disable_cuda_graph"] is False and arg(args, "disable_cuda_graph") is True
    assert arg({"cuda_graph_max_bs_decode": 64}, "cuda_graph_max_bs") == 64
    assert arg({"cuda_graph_max_bs": 48}, "cuda_graph_max_bs_decode") == 48
    assert arg({"disable_cuda_graph": True}, "cuda_graph_backend_prefill") == "disabled"
    assert arg({}, "disable_cuda_graph") is False


def test_flags_are_the_release_own():
    assert flag_of("disable_cuda_graph", "0.5.9") == "--disable-cuda-graph"
    assert flag_of("disable_cuda_graph", "0.5.23") == (
        "--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill disabled")
    assert flag_of("cuda_graph_max_bs", "0.5.23") == "--cuda-graph-max-bs-decode"
    assert flag_of("cuda_graph_max_bs", "0.5.9") == "--cuda-graph-max-bs"
    assert flag_of("fp4_gemm_runner_backend") == "--fp4-gemm-backend"
    assert flag_of("not_a_field_anywhere") == "--not-a-field-anywhere"


def test_a_0_5_23_log_lines_up_with_a_0_5_9_era_reference():
    frame = diff_configs(_log_0_5_23(), "k2-thinking")
    fields = list(frame["field"])
    assert len(fields) == len(set(fields))
    # both run without CUDA graphs, spelt differently: no difference, no per-phase rows
    assert not {"disable_cuda_graph", "cuda_graph_backend_decode", "cuda_graph_backend_prefill",
                "cuda_graph_max_bs_decode"} & set(fields)
    row = frame.set_index("field").loc["max_running_requests"]
    assert (row["current"], row["reference"]) == (1024, 2048)
    # the flag column speaks the current config's release
    assert frame.set_index("field").loc["attention_backend", "flag"] == "--attention-backend"


def test_report_says_graphs_off_for_a_0_5_23_phase(tmp_path):
    # 0.5.23 logs disable_cuda_graph=False and turns graphs off per phase: the report reads the intent
    from glm5lib import report

    (tmp_path / "fix").mkdir()
    (tmp_path / "fix" / "server.log").write_text(FIXTURE.read_text())
    config = report.summarize(tmp_path)["phases"]["fix"]["config"]
    assert config["disable_cuda_graph"] is True and config["max_running_requests"] == 1024


_RESOLVED_AT_START = ("enable_tf32_matmul", "swa_full_tokens_ratio", "mamba_full_memory_ratio", "mm_enable_dp_encoder")


def test_values_sglang_resolves_at_start_are_not_differences_from_a_reference():
    # 0.5.23 logs the resolved value of fields it declares resolvable (their input default None):
    # the fallback it falls back to is no user choice, so glm5-fix's own log matches glm5-fix
    from glm5lib.engines.sglang.config import ServerConfig

    spec = ServerConfig(release="0.5.23").catalogue.specs["swa_full_tokens_ratio"]
    assert (spec.default, spec.resolvable, spec.fallback) == (None, True, 0.8)
    config = ServerConfig.from_server_args(FIXTURE.read_text())
    assert not set(config.explicit) & set(_RESOLVED_AT_START)
    assert config.diff(ServerConfig.load("glm5-fix", release="0.5.23")) == {}
    assert diff_configs(str(FIXTURE), "glm5-fix").empty
    # a value the user did choose still differs, and the reference's side says why it reads False
    chosen = {**_log_0_5_23(), "enable_tf32_matmul": True}
    frame = diff_configs(chosen, "glm5-fix")
    assert list(frame["field"]) == ["enable_tf32_matmul"] and frame["reference"].tolist() == [False]
    assert "resolved at start-up by SGLang 0.5.23 (its declared fallback)" in frame["resolved"][0]


def test_fields_of_one_release_left_at_their_default_are_not_ranked():
    args = _log_0_5_23()
    frame = diff_configs(args, "k2-thinking")
    ranked = frame[frame["kind"] == "setting"]
    only = frame[frame["kind"] == "release"].set_index("field")
    # 0.5.23 has ~200 fields 0.5.9 lacks (and lost some): context, not ranked differences
    assert len(only) > 150 and len(ranked) < 30
    assert ranked.iloc[0]["field"] == "max_running_requests"
    assert only.loc["asr_max_buffer_seconds", "rationale"].startswith("not in SGLang 0.5.9")
    assert only.loc["enable_piecewise_cuda_graph", "rationale"].startswith("not in SGLang 0.5.23")
    assert set(only["impact"]) == {"none"} and not only["automatic"].any()
    # an unset switch 0.5.23 logs as False (its default None) is not set either
    assert "enable_tf32_matmul" in only.index
    hidden = diff_configs(args, "k2-thinking", hide_irrelevant=True)
    assert set(hidden["kind"]) == {"setting"}
    assert {r["field"] for r in hidden.attrs["release_only"]} == set(only.index)
    assert hidden.iloc[0]["field"] == "max_running_requests"
    # set away from its default, a field new in 0.5.23 stays ranked, saying why
    args.update(enable_tf32_matmul=True, asr_max_buffer_seconds=120)
    row = diff_configs(args, "k2-thinking").set_index("field").loc["enable_tf32_matmul"]
    assert row["kind"] == "setting" and not row["automatic"]
    assert row["rationale"].startswith("new in SGLang 0.5.23, the reference (SGLang 0.5.9) cannot have set it")
    # and one the reference set in a field the current release lacks
    ref = dict(resolve_config("k2-thinking").args, enable_piecewise_cuda_graph=True)
    row = diff_configs(_log_0_5_23(), ref).set_index("field").loc["enable_piecewise_cuda_graph"]
    assert row["kind"] == "setting"
    assert row["rationale"].startswith("not in SGLang 0.5.23, set by the reference (SGLang 0.5.9)")


def test_cli_diff_counts_the_fields_of_one_release_it_does_not_rank(capsys):
    assert main(["diff", str(FIXTURE), "k2-thinking"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert lines[1].split()[0] == "max_running_requests"
    assert "asr_max_buffer_seconds" not in "\n".join(lines)
    assert any(line.endswith("exist in only one side's SGLang release and are at its default (--all lists them)")
               for line in lines)
    assert main(["diff", str(FIXTURE), "k2-thinking", "--all"]) == 0
    assert "asr_max_buffer_seconds" in capsys.readouterr().out


def test_fields_whose_default_changed_between_the_releases_are_not_ranked():
    # 0.5.9 -> 0.5.23 changed defaults such as hicache_mem_layout ('layer_first' -> 'page_first')
    # and kt_method (None -> 'AMXINT4'): a 0.5.23 log and a 0.5.9 log that both left them alone differ
    frame = diff_configs(_log_0_5_23(), "k2-thinking")
    changed = frame[frame["kind"] == "default"].set_index("field")
    assert {"hicache_mem_layout", "kt_method", "encoder_transfer_backend", "hicache_ratio"} <= set(changed.index)
    assert changed.loc["hicache_mem_layout", "rationale"].startswith(
        "default changed: SGLang 0.5.9 'layer_first', SGLang 0.5.23 'page_first'")
    assert set(changed["impact"]) == {"none"} and not changed["automatic"].any()
    ranked = frame[frame["kind"] == "setting"]
    assert ranked.iloc[0]["field"] == "max_running_requests"
    assert "unknown" not in set(ranked["impact"])
    # listed after the context rows, before the fields of one release only
    kinds = list(dict.fromkeys(frame["kind"]))
    assert kinds == ["setting", "context", "default", "release"]
    hidden = diff_configs(_log_0_5_23(), "k2-thinking", hide_irrelevant=True)
    assert {r["field"] for r in hidden.attrs["default_changed"]} == set(changed.index)
    assert not set(hidden["field"]) & set(changed.index)
    # set away from its own release's default on either side, the field stays ranked, saying so
    cur = {**_log_0_5_23(), "hicache_mem_layout": "page_first_direct"}
    row = diff_configs(cur, "k2-thinking").set_index("field").loc["hicache_mem_layout"]
    assert row["kind"] == "setting"
    assert row["rationale"].startswith(
        "default changed: SGLang 0.5.9 'layer_first', SGLang 0.5.23 'page_first'; set by the current side")
    ref = dict(resolve_config("k2-thinking").args, kt_method="AMXINT8")
    row = diff_configs(_log_0_5_23(), ref).set_index("field").loc["kt_method"]
    assert row["kind"] == "setting" and "set by the reference side" in row["rationale"]
    # the same release on both sides: no default changed, an ordinary difference
    row = diff_configs(cur, _log_0_5_23()).set_index("field").loc["hicache_mem_layout"]
    assert row["kind"] == "setting" and not row["rationale"].startswith("default changed")
    # a changed default of a setting that matters for throughput stays ranked with its impact:
    # 0.5.9 ran NVFP4 GEMMs with flashinfer_cutlass by default, 0.5.23 picks 'auto'
    ref = dict(resolve_config("k2-thinking").args, fp4_gemm_runner_backend="flashinfer_cutlass")
    frame = diff_configs(_log_0_5_23(), ref, hide_irrelevant=True)
    row = frame.set_index("field").loc["fp4_gemm_runner_backend"]
    assert row["kind"] == "setting" and row["impact"] in ("high", "medium")
    assert row["rationale"].startswith("default changed: SGLang 0.5.9 'flashinfer_cutlass', SGLang 0.5.23 'auto'")
    assert "fp4_gemm_runner_backend" not in {r["field"] for r in frame.attrs["default_changed"]}


def test_cli_diff_counts_the_fields_whose_default_changed(capsys):
    assert main(["diff", str(FIXTURE), "k2-thinking"]) == 0
    out = capsys.readouterr().out
    assert "hicache_mem_layout" not in out and "kt_method" not in out
    assert "fields differ only because SGLang changed their default between the two sides' releases" in out
    assert main(["diff", str(FIXTURE), "k2-thinking", "--all"]) == 0
    assert "hicache_mem_layout" in capsys.readouterr().out


def test_log_summary_shows_the_release_own_graph_batch_field(capsys):
    # 0.5.23 logs cuda_graph_max_bs_decode/_prefill where 0.5.9 logged cuda_graph_max_bs
    from glm5lib.logs import parse_log, summarize

    shown = summarize(parse_log(FIXTURE))["server_args"]
    assert {"cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill"} <= set(shown)
    assert "cuda_graph_max_bs" not in shown and shown["disable_cuda_graph"] is True
    assert main(["logs", str(FIXTURE)]) == 0
    assert "cuda_graph_max_bs_decode = None" in capsys.readouterr().out


def test_a_field_of_one_release_is_ranked_only_where_its_side_set_it():
    from glm5lib.diagnose.diff import _judged_release_only

    left = _judged_release_only(("current", "0.5.23", "0.5.9", False), "setting", "high", "why")
    assert left == ("release", "none", "not in SGLang 0.5.9: the current side has SGLang 0.5.23's default")
    kind, cls, text = _judged_release_only(("reference", "0.5.23", "0.5.9", True), "setting", "high", "why")
    assert (kind, cls) == ("setting", "high")
    assert text == "not in SGLang 0.5.9, set by the reference (SGLang 0.5.23): why"


def test_a_changed_default_is_ranked_where_a_side_set_it_or_it_matters():
    from glm5lib.diagnose.diff import _judged_default_changed

    reason = "default changed: SGLang 0.5.9 1, SGLang 0.5.23 2"
    unset = (reason, {"current": False, "reference": False})
    assert _judged_default_changed(unset, "setting", "unknown", "why")[:2] == ("default", "none")
    assert _judged_default_changed(unset, "setting", "high", "why") == (
        "setting", "high", f"{reason}; each side has its own release's default, and it matters: why")
    set_here = (reason, {"current": True, "reference": False})
    assert _judged_default_changed(set_here, "setting", "low", "why")[2] == f"{reason}; set by the current side: why"


def test_an_explicit_capacity_far_below_the_other_side_is_a_cap_signature():
    from glm5lib.diagnose.diff import _cap_signature

    assert _cap_signature("max_running_requests", 64, 1024, True)
    assert not _cap_signature("max_running_requests", 64, 1024, False)  # chosen automatically
    assert not _cap_signature("max_running_requests", 512, 1024, True)
    assert not _cap_signature("log_level", 1, 1024, True)  # not a capacity limit


def test_a_misspelt_phase_is_refused_with_the_phases_the_run_holds(tmp_path):
    import pytest

    from glm5lib.diagnose.references import find_phase
    from glm5lib.errors import DiagnosisError

    for name in ("baseline", "fix"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sweep.csv").write_text("concurrency\n1\n")
    with pytest.raises(DiagnosisError, match=r"did you mean 'baseline'\? phases in .*: baseline, fix$"):
        find_phase(tmp_path, "basline")
    with pytest.raises(DiagnosisError, match=r"phases in .*: baseline, fix$") as refused:
        find_phase(tmp_path, "tune-9")
    assert "did you mean" not in str(refused.value)
