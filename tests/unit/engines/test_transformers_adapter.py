"""glm5lib.engines.transformers: `transformers serve` as an engine adapter (config -> argv, levers,
registry, knowledge) and its log adapter on real output (tests/fixtures/transformers/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from config_errors import refused

from glm5lib import diagnose as dg
from glm5lib import engines
from glm5lib.diagnose.knowledge import load_engine_knobs, load_remedies
from glm5lib.engines import transformers as et
from glm5lib.engines.transformers import log as tlog
from glm5lib.errors import ConfigError, ServerLaunchError
from glm5lib.logs import available_engines, parse_log
from glm5lib.logs.engine import log_adapter, resolve_engine

FIXTURES = Path(__file__).parents[2] / "fixtures"
LOGS = FIXTURES / "logs"  # other engines' logs
OWN = FIXTURES / "transformers"
CB_INFO = OWN / "5.17-cpu-cb-info.log"
WORKER_DEAD = OWN / "5.17-cpu-worker-dead.log"
MISSING = OWN / "5.17-cpu-missing-model.log"
LEVEL_INFO = OWN / "5.17-cpu-log-level-info.log"
H200 = OWN / "5.17-h200-head.log"
ALL = (CB_INFO, WORKER_DEAD, MISSING, LEVEL_INFO, H200)


# -- configuration -> argv -------------------------------------------------------------------------

def test_flags_become_transformers_serve_argv_model_first_and_batching_on():
    config = et.TransformersConfig({"model": "/models/tiny", "cb_max_batch_tokens": 64, "cb_num_blocks": 128,
                                    "cb_block_size": 32, "cb_max_memory_percent": 0.8, "cb_use_cuda_graph": False,
                                    "compile": True, "attn_implementation": "sdpa"})
    assert config.to_argv() == [
        "/models/tiny", "--continuous-batching", "--cb-max-batch-tokens", "64", "--cb-num-blocks", "128",
        "--cb-block-size", "32", "--cb-max-memory-percent", "0.8", "--no-cb-use-cuda-graph", "--compile",
        "--attn-implementation", "sdpa"]
    assert config.get("model") == config.get("model_path") == "/models/tiny"
    assert config.cb_max_batch_tokens == 64 and config.model_timeout == 300  # unset: the catalogue's default
    off = config.with_changes(continuous_batching=False, cb_use_cuda_graph=True)
    assert "--continuous-batching" not in off.to_argv() and "--cb-use-cuda-graph" in off.to_argv()
    # None unsets: the engine sizes the step from free memory; flag spellings are accepted
    freed = config.with_changes(cb_max_batch_tokens=None, **{"--cb-num-blocks": 16})
    assert "--cb-max-batch-tokens" not in freed.to_argv()
    assert freed.to_argv()[freed.to_argv().index("--cb-num-blocks") + 1] == "16"
    assert config.diff(freed) == {"cb_max_batch_tokens": (64, None), "cb_num_blocks": (128, 16)}


def test_the_launch_argv_runs_the_cli_with_its_batching_logger_at_info_and_leaves_the_address_to_the_launcher():
    config = et.TransformersConfig({"force_model": "org/model", "cb_max_batch_tokens": 64, "host": "0.0.0.0",
                                    "port": 9})
    argv = et.serve_argv(config, "/venv/bin/python")
    assert argv[:4] == ["/venv/bin/python", "-c", et.config.BOOTSTRAP, "serve"]
    assert "ContinuousBatchingLogger" in argv[2] and "from transformers.cli.transformers import main" in argv[2]
    assert argv[4:] == ["org/model", "--continuous-batching", "--cb-max-batch-tokens", "64",
                        "--host", "{host}", "--port", "{port}"]  # a config's host/port are ignored


def test_the_catalogue_is_transformers_serves_own_options():
    flags, release = et.transformers_flags()
    assert release == "5.17.0" and release in et.BUNDLED_RELEASES
    assert flags["force_model"]["kind"] == "positional"
    assert {f for f in flags if f.startswith("cb_")} == {
        "cb_block_size", "cb_num_blocks", "cb_max_batch_tokens", "cb_max_memory_percent", "cb_use_cuda_graph"}
    assert flags["cb_use_cuda_graph"]["negatable"] and flags["cb_use_cuda_graph"]["default"] is None
    assert flags["reasoning"]["choices"] == ["on", "off", "auto"]
    # an older release asked for reads the oldest catalogue, a newer one the newest not newer than it
    assert et.transformers_flags("9.0.0")[1] == et.transformers_flags("1.0")[1] == "5.17.0"


def test_bad_names_and_values_name_the_input_and_the_valid_ones():
    err = refused(et.TransformersConfig, {"cb_max_batch_token": 64}, "did you mean 'cb_max_batch_tokens'")
    assert err.field == "cb_max_batch_token" and "cb_max_batch_tokens" in err.valid
    refused(et.TransformersConfig, {"max_num_seqs": 64}, r"max_num_seqs.*not a `transformers serve` option")
    refused(et.TransformersConfig, {"cb_num_blocks": "many"}, "whole number")
    refused(et.TransformersConfig, {"cb_use_cuda_graph": "yes"}, "switch")
    assert refused(et.TransformersConfig, {"cb_max_memory_percent": 90}, "fraction").valid == ["0.0-1.0"]
    assert refused(et.TransformersConfig, {"reasoning": "maybe"}, "choices").valid == ["on", "off", "auto"]
    with pytest.raises(ConfigError, match="names no model"):
        et.TransformersConfig({"cb_num_blocks": 8}).model_path()
    with pytest.raises(ConfigError, match="does not exist"):
        et.TransformersConfig({"force_model": "/no/such/model/here"}).model_path()
    assert et.TransformersConfig({"force_model": "org/model"}).model_path() == "org/model"  # a hub id
    with pytest.raises(ConfigError, match="not transformers"):
        et.TransformersConfig.from_dict({"engine": "vllm", "server_args": {}})


def test_save_and_load_round_trip_and_load_config_finds_the_engine_by_its_name(tmp_path):
    config = et.TransformersConfig({"force_model": "org/model", "cb_max_batch_tokens": 64},
                                   env={"HF_HOME": "/cache"}, meta={"name": "capped"})
    path = config.save(tmp_path / "config.json")
    data = json.loads(path.read_text())
    assert data["format"] == et.CONFIG_FORMAT and data["engine"] == "transformers"
    again = engines.load_config(path)
    assert isinstance(again, et.TransformersConfig) and again == config and again.env == {"HF_HOME": "/cache"}
    assert isinstance(engines.get("transformers").load_config(str(path)), et.TransformersConfig)
    with pytest.raises(ConfigError, match="no transformers config file"):
        et.TransformersConfig.load(tmp_path / "missing.json")


# -- the adapter -----------------------------------------------------------------------------------

def test_the_registry_lists_it_and_its_log_adapter():
    assert "transformers" in engines.names() and "transformers" in available_engines()
    adapter = engines.get("transformers")
    assert adapter is et.ADAPTER and adapter.log_engine == "transformers"
    assert adapter.config_type is et.TransformersConfig and et.TransformersConfig in engines.config_types()
    assert log_adapter("transformers") is tlog.ENGINE
    assert adapter.metrics == {} and adapter.gauges() == []  # GET /metrics answers 404 (see the H200 log)
    caps = adapter.capabilities
    assert caps.fields == {"running_cap": "cb_max_batch_tokens", "token_budget": "cb_max_batch_tokens",
                           "kv_fraction": "cb_max_memory_percent"}
    assert not caps.reserves_future_tokens and not caps.logs_decode_lines and not caps.logs_prefill_lines
    assert caps.mixed_steps and caps.default_api == "completions" and not caps.token_id_prompts
    assert caps.cap_flag == "--cb-max-batch-tokens"
    assert adapter.to_dict()["config_type"] == "TransformersConfig"


def test_levers_have_safe_bounds_and_transformers_flags():
    found = {lv.field: lv for lv in et.ADAPTER.levers()}
    assert set(found) == {"cb_max_batch_tokens", "cb_max_memory_percent"}
    budget, memory = found["cb_max_batch_tokens"], found["cb_max_memory_percent"]
    assert budget.flag == "--cb-max-batch-tokens" and (budget.low, budget.high) == (16, 32768)
    assert budget.kind == "int" and budget.acts_on == "running" and budget.step == "x2"
    assert budget.check(64) == 64 and budget.clamp(1_000_000) == 32768
    for bad in (8, 65536, 64.5, True):
        with pytest.raises(ConfigError, match="cb_max_batch_tokens"):
            budget.check(bad)
    assert memory.flag == "--cb-max-memory-percent" and memory.acts_on == "memory"
    assert memory.check(0.8) == 0.8
    with pytest.raises(ConfigError, match="safe range"):
        memory.check(0.99)
    with pytest.raises(ConfigError, match="valid: cb_max_batch_tokens, cb_max_memory_percent"):
        et.ADAPTER.lever("max_num_seqs")


def test_limits_come_from_the_log_first_then_the_arguments_and_blocks_count_as_tokens():
    startup = parse_log(CB_INFO).startup
    limits = et.ADAPTER.limits({"cb_max_batch_tokens": 999}, startup)
    assert (limits.running_cap, limits.token_budget, limits.kv_tokens) == (64, 64, 8 * 16)
    assert limits.source("running_cap") == "start-up log line"
    given = et.ADAPTER.limits({"cb_max_batch_tokens": 32, "cb_max_memory_percent": 0.7}, {})
    assert (given.running_cap, given.kv_fraction, given.source("token_budget")) == (32, 0.7, "server arguments")
    changed, others = et.ADAPTER.limit_changes({"--cb-num-blocks": 8, "cb_block_size": 16, "--compile": True})
    assert changed == {"kv_tokens": 128} and others == {"cb_block_size": 16, "--compile": True}
    assert et.ADAPTER.limit_changes({"cb_num_blocks": 4})[0] == {"kv_tokens": 4 * et.DEFAULT_BLOCK_SIZE}


def test_the_values_it_chose_are_read_from_its_log_only_when_left_unset():
    startup = parse_log(CB_INFO).startup
    auto = et.ADAPTER.automatic("cb_num_blocks", {}, startup)
    assert auto.value == 8 and "paged cache" in auto.how
    assert et.ADAPTER.automatic("cb_num_blocks", {"cb_num_blocks": 8}, startup) is None
    assert et.ADAPTER.automatic("cb_max_batch_tokens", {}, {}) is None


def test_launch_refuses_what_it_cannot_take_before_anything_starts(monkeypatch, tmp_path):
    with pytest.raises(ConfigError, match="needs a transformers config") as err:
        et.ADAPTER.launch(engines.LaunchRequest(config={"force_model": "x"}))
    assert err.value.field == "CONFIG"
    with pytest.raises(ConfigError, match="no API key"):
        et.ADAPTER.launch(engines.LaunchRequest(config=et.TransformersConfig({"force_model": "org/m"}), api_key="k"))
    monkeypatch.setenv("GLM5_TRANSFORMERS_PYTHON", str(tmp_path / "no-python"))
    with pytest.raises(ServerLaunchError, match="GLM5_TRANSFORMERS_PYTHON") as err:
        et.transformers_python()
    assert err.value.cause == "not_found"


def test_knowledge_has_its_knobs_in_its_own_flags_and_its_remedies():
    flags, _ = et.transformers_flags()
    knobs = load_engine_knobs()["transformers"]
    assert {"cb_max_batch_tokens", "cb_max_memory_percent", "cb_num_blocks"} <= set(knobs)
    for field, knob in knobs.items():
        assert knob["flag"] == flags[field]["flags"][0], field
    assert all("transformers" in by_engine for by_engine in load_remedies().values())
    text = dg.remedy("raise_running_cap", "transformers", current=64, value=256)
    assert text.startswith("raise --cb-max-batch-tokens from 64 to 256")
    assert dg.remedy("lower_admission_reserve", "transformers") is None  # it reserves nothing ahead
    assert "--max-num-seqs" not in dg.remedy("reduce_retraction", "transformers", value=12)


# -- its log ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_its_logs_are_detected_and_read_as_its_own(path):
    head = path.read_bytes()
    assert resolve_engine("auto", head).name == "transformers"
    assert parse_log(path).startup["engine"] == "transformers"


@pytest.mark.parametrize("name", ["sglang-2026.log", "sglang-0.5.16-h200.log", "sglang-startup-0.5.log"])
def test_other_engines_logs_are_not_taken_for_its_own(name):
    assert not tlog.looks_like_transformers((LOGS / name).read_text(errors="replace"))


def test_other_engines_logs_are_not_taken_for_its_own_vllm():
    vllm_logs = sorted((FIXTURES / "vllm").glob("*.log"))
    assert vllm_logs
    for path in vllm_logs:
        assert resolve_engine("auto", path.read_bytes()).name != "transformers", path.name
        assert not tlog.looks_like_transformers(path.read_text(errors="replace")), path.name


def test_the_paged_cache_line_gives_the_kv_pool_the_budget_and_the_running_cap():
    slog = parse_log(CB_INFO)
    s = slog.startup
    assert (s["cb_max_batch_tokens"], s["cb_num_blocks"], s["cb_block_size"]) == (64, 8, 16)
    assert s["max_total_num_tokens"] == s["kv_cache_tokens"] == 128
    assert s["max_running_requests"] == 64  # min(1024, max_batch_tokens)
    assert s["kv_mem_available_gb"] == pytest.approx(21341 / 1024, abs=1e-3)
    assert (s["cuda_graph_varlen"], s["cuda_graph_decode"]) == (False, False)
    assert s["model"] == "/tmp/tfwork/tiny" and s["revision"] == "main" and s["continuous_batching"] is True
    assert s["requests_received"] == 8 and s["pid"] == 6103 and s["url"] == "http://127.0.0.1:18235"
    assert slog.became_ready and slog.decode.empty and slog.prefill.empty and slog.errors.empty
    assert slog.skipped == 0
    assert str(slog.first_time) == "2026-12-05 01:29:45.028000"  # the batching logger's lines are the timed ones


def test_519s_paged_cache_line_gives_the_blocks_and_the_pool_comes_from_their_configured_size():
    # 5.19 logs the cache in sectors (the configured blocks) and their MB, not the block's tokens
    slog = parse_log(OWN / "5.19-cpu-cb-info.log")
    s = slog.startup
    assert (s["cb_max_batch_tokens"], s["cb_num_blocks"], s["cb_mb_per_block"]) == (64, 64, 0)
    assert "cb_block_size" not in s and "max_total_num_tokens" not in s
    assert s["max_running_requests"] == 64 and slog.became_ready and slog.errors.empty and slog.skipped == 0
    assert et.ADAPTER.limits({"cb_block_size": 16}, s).kv_tokens == 64 * 16
    default = et.ADAPTER.limits({}, s)
    assert default.kv_tokens == 64 * 256 and "blocks" in default.source("kv_tokens")


def test_an_offload_is_a_row_of_retractions():
    r = parse_log(CB_INFO).retractions
    assert len(r) == 1
    row = r.iloc[0]
    assert str(row["time"]) == "2026-12-05 01:29:47.045000"
    assert (row["retracted_reqs"], row["offloaded_to_cpu"], row["soft_reset"], row["starved_reqs"],
            row["free_blocks"]) == (1, 0, 1, 0, 1)


def test_a_dead_worker_is_an_engine_dead_error_with_its_traceback_and_the_503s_follow():
    slog = parse_log(WORKER_DEAD)
    assert slog.crash_cause() == "engine_dead"
    dead, asgi = slog.errors.iloc[0], slog.errors.iloc[1]
    assert dead["kind"] == "engine_dead"
    assert dead["message"] == "RuntimeError: No requests can be scheduled and no requests can be offloaded."
    assert "Error in generation loop" in dead["text"] and "prepare_next_batch" in dead["text"]
    assert str(dead["time"]) == "2026-12-05 01:28:28.063000"
    assert asgi["kind"] == "other" and asgi["message"].startswith("RuntimeError: CB generation failed for ")
    assert "Exception in ASGI application" in asgi["text"]
    statuses = slog.http.groupby("path")["status"].apply(list).to_dict()
    assert statuses["/health"] == [200, 503] and statuses["/v1/completions"] == [500, 503, 503]
    assert slog.skipped == 0


def test_a_model_that_cannot_load_is_an_error_and_no_start():
    slog = parse_log(MISSING)
    assert not slog.became_ready and len(slog.errors) == 1
    err = slog.errors.iloc[0]
    assert err["kind"] == "other" and err["message"].startswith("OSError: Repo id must be in the form")
    assert "HFValidationError" in err["text"] and "The above exception was the direct cause" in err["text"]
    assert slog.startup["model"] == "/tmp/tfwork/missing-model"


def test_log_level_info_gives_the_models_context_length_and_its_dumps_are_not_skipped():
    slog = parse_log(LEVEL_INFO)
    s = slog.startup
    assert (s["context_len"], s["model_type"], s["architectures"]) == (2048, "qwen3", ["Qwen3ForCausalLM"])
    assert s["model_class"] == "Qwen3Config" and slog.skipped == 0
    assert (slog.http["status"] == 422).sum() == 1  # the request with ignore_eos


def test_the_h200_run_shows_requests_and_no_metrics_endpoint():
    slog = parse_log(H200)
    assert slog.startup["model"] == "/tmp/tinymoe" and slog.startup["requests_received"] == 33
    metrics = slog.http[slog.http["path"] == "/metrics"]
    assert list(metrics["status"]) == [404]
    assert slog.skipped == 1 and slog.skipped_examples == ["[transfor"]  # the excerpt's cut-off last line


def test_read_in_pieces_it_gives_the_same_rows_and_an_open_traceback_waits():
    lines = WORKER_DEAD.read_text().splitlines(keepends=True)
    parser = tlog.TransformersParser()
    cut = next(i for i, line in enumerate(lines) if "prepare_next_batch" in line)
    parser.feed(lines[:cut], final=False)
    first = parser.drain()
    assert first.errors.empty  # the worker's traceback is still being read
    parser.feed(lines[cut:])
    parser.finish()
    second = parser.drain()
    whole = parse_log(WORKER_DEAD)
    assert list(second.errors["message"]) == list(whole.errors["message"])
    assert second.errors.iloc[0]["text"] == whole.errors.iloc[0]["text"]
    assert len(first.http) + len(second.http) == len(whole.http)
