"""Tests for glm5lib.diagnose.references: server arguments read with their own release's names and defaults."""

from __future__ import annotations

from pathlib import Path

from glm5lib.diagnose import diff_configs
from glm5lib.diagnose.references import arg, config_defaults, flag_of, release_of, resolve_config
from glm5lib.logs import parse_server_args

FIXTURE = Path(__file__).parent / "fixtures" / "logs" / "sglang-0.5.23-server-args.log"


def _log_0_5_23() -> dict:
    # SGLang 0.5.23's own server_args line for glm5-fix (tests/fixtures/logs/SOURCES.md)
    return dict(parse_server_args(FIXTURE.read_text()))


def test_names_and_defaults_come_from_the_arguments_release():
    args = _log_0_5_23()
    assert release_of(args) == "0.5.23"
    assert release_of({"version": "0.5.9", "tp_size": 8}) == "0.5.9"
    assert release_of({"version": "0.5.8.post1"}) == "0.5.8"
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
    from glm5lib.config import ServerConfig

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
