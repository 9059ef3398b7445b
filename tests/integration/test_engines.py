"""Tests for glm5lib.engines: presets, settings applied to command templates, the stand-in as a command engine."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from glm5lib import engines, server
from glm5lib.engines.sglang.config import field_for
from glm5lib.errors import ConfigError


def test_transformers_serve_capped_and_uncapped_commands():
    engine = engines.get_engine("transformers-serve")
    assert engine.api == "completions" and engine.knob == "--cb-max-batch-tokens" and engine.needs_model
    capped = engine.command_for("capped")
    uncapped = engine.command_for("uncapped")
    assert server.flag_value(capped, engine.knob) == str(engine.settings["capped"]["--cb-max-batch-tokens"])
    assert server.flag_value(uncapped, engine.knob) is None
    assert server.flag_value(capped, "--continuous-batching") is True
    filled = server.fill_template(capped, port=30000, model="/tmp/tinymoe")
    assert filled[:3] == ["transformers", "serve", "/tmp/tinymoe"]
    more = engine.command_for("capped", {"cb_num_blocks": 128})
    assert server.flag_value(more, "--cb-num-blocks") == "128"


def test_every_preset_has_capped_and_uncapped_on_its_knob():
    for name, engine in engines.ENGINES.items():
        assert {"capped", "uncapped"} <= set(engine.settings), name
        assert any("{port}" in t for t in engine.command), name
        assert engine.knob in engine.knobs, name
        assert engine.api in ("generate", "completions", "chat"), name
        assert engine.to_dict()["command"] == list(engine.command)


def test_unknown_engine_and_setting_name_the_valid_ones():
    with pytest.raises(ConfigError, match="did you mean 'vllm'") as err:
        engines.get_engine("vllmm")
    assert "transformers-serve" in err.value.valid
    with pytest.raises(ConfigError, match="capped"):
        engines.get_engine("vllm").setting("fast")


@pytest.mark.slow
def test_stand_in_preset_launches_capped(tmp_path):
    engine = engines.get_engine("glm5-sim")
    with server.launch_command(engine.command_for("capped"), log_path=tmp_path / "server.log",
                               ready_path=engine.ready_path, ready_timeout=60) as srv:
        assert srv.logs().startup.get("max_running_requests") == engine.settings["capped"]["--max-running-requests"]


# --------------------------------------------------------------------------- a server as strict as transformers serve

STRICT_SERVER = str(Path(__file__).with_name("strict_openai_server.py"))


@pytest.fixture
def strict_server(tmp_path):
    template = ["{python}", STRICT_SERVER, "{model}", "--host", "{host}", "--port", "{port}", "--step", "0.005"]
    with server.launch_command(template, model="/models/tiny", log_path=tmp_path / "server.log", ready_timeout=60) as srv:
        yield srv


def _post(url: str, body: dict) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.slow
def test_default_loadgen_body_is_rejected_like_transformers_serve(strict_server):
    """What the stand-in hid: SGLang/vLLM request extensions are refused by a strict OpenAI server."""
    from glm5lib.loadgen.client import build_body

    url = strict_server.base_url + "/v1/completions"
    default = json.loads(build_body("completions", [1, 2, 3], 4, model="/models/tiny"))
    status, detail = _post(url, default)
    assert status == 422 and b"Unexpected keys" in detail and b"ignore_eos" in detail
    plain = json.loads(build_body("completions", [1, 2, 3], 4, model="/models/tiny", ignore_eos=False))
    plain.pop("stream_options")
    assert _post(url, plain)[0] == 400  # token-id prompt
    plain["prompt"] = "the of and"
    status, body = _post(url, plain)
    assert status == 200 and body.count(b"data: ") == 5 and b"[DONE]" not in body
    assert b'"completion_tokens": 4' in body.split(b"data: ")[-1]  # usage only in the last chunk


@pytest.mark.slow
def test_transformers_preset_sweep_options_work_against_a_strict_server(strict_server, tmp_path):
    from glm5lib import loadgen

    engine = engines.get_engine("transformers-serve")
    sweep = loadgen.run_sweep(
        strict_server.base_url, [2], api=engine.api, input_len=8, output_len=6, requests_per_level=4,
        warmup=0, run_dir=tmp_path / "phase", server=strict_server, model=strict_server.model,
        progress=False, **engine.sweep_options,
    )
    row = sweep.iloc[0]
    assert row["completed"] == 4 and row["failed"] == 0
    assert row["total_output_tokens"] == 4 * 6  # counted from the final usage chunk
    assert row["total_input_tokens"] == 4 * 8  # the server's prompt_tokens (words here)
    # the stream's text-less closing chunk carries the usage: it is the count, not a token arrival
    records = loadgen.load_requests(tmp_path / "phase")
    assert len(records) == 4
    assert all(len(times) == 6 for times in records["chunk_times"])


# --------------------------------------------------------------------------- the workbook's command backend


@pytest.mark.slow
def test_workbook_command_backend_records_the_command(tmp_path):
    from glm5lib import workbook

    engine = engines.get_engine("glm5-sim")
    folder = tmp_path / "baseline"
    srv = workbook.start_server("command", None, folder, command=engine.command_for("capped"), ready_timeout=60)
    try:
        assert isinstance(srv, server.CommandServer) and srv.log_path == folder / "server.log"
        recorded = workbook.load_command(folder)
        assert recorded["argv_template"] == engine.command_for("capped")
        assert recorded["backend"] == "command" and recorded["argv"][-1] == "64"
        fix = server.apply_flag_changes(recorded["argv_template"], engine.setting("uncapped"))
        assert server.flag_value(fix, engine.knob) == "1024"
    finally:
        server_log = workbook.stop_server(srv, folder)
    assert not srv.alive() and server_log.startup.get("max_running_requests") == 64


def test_workbook_command_backend_needs_a_command(tmp_path):
    from glm5lib import workbook

    with pytest.raises(ConfigError, match="ENGINE_COMMAND"):
        workbook.start_server("command", None, tmp_path, command=[])
    with pytest.raises(ConfigError, match="'command'"):
        workbook.start_server("commands", None, tmp_path)
    with pytest.raises(ConfigError, match="not launched with BACKEND 'command'"):
        workbook.load_command(tmp_path)


def test_none_in_extra_body_removes_a_field_the_server_would_refuse():
    from glm5lib.loadgen.client import build_body

    body = json.loads(build_body("completions", "hi", 4, model="m", extra_body={"stream_options": None, "seed": 3}))
    assert "stream_options" not in body and body["seed"] == 3


def test_sglang_preset_knobs_are_the_release_own_flags():
    assert "--cuda-graph-max-bs-decode" in engines.sglang_knobs("0.5.23")
    assert "--cuda-graph-max-bs" not in engines.sglang_knobs("0.5.23")  # ambiguous there
    assert "--cuda-graph-max-bs" in engines.sglang_knobs("0.5.9")
    for release in ("0.5.8", "0.5.9", "0.5.23"):
        for flag in engines.sglang_knobs(release):
            field_for(flag, release)  # each release's parser takes its own spelling
    assert dict(engines.ENGINES["sglang"].knobs) == engines.sglang_knobs()


# --------------------------------------------------------------------------- the registry: one adapter per engine


def test_registry_names_every_engine_and_gets_its_adapter():
    assert engines.names() == ["sim", "sglang", "vllm", "transformers", "command"]
    for name in engines.names():
        adapter = engines.get(name)
        assert isinstance(adapter, engines.EngineAdapter) and adapter.name == name
        assert engines.get(adapter) is adapter
        assert adapter.to_dict()["name"] == name
    from glm5lib import workbook

    assert tuple(engines.names()) == workbook.BACKENDS


def test_unknown_engine_names_the_registered_ones():
    with pytest.raises(ConfigError, match="did you mean 'vllm'") as err:
        engines.get("vlm")
    assert err.value.valid == engines.names()
    assert engines.get("tgi", default="sglang").name == "sglang"


def test_capability_facts_say_what_the_rules_used_to_read_off_engine_names():
    sglang, vllm, sim, command = (engines.get(n).capabilities for n in ("sglang", "vllm", "sim", "command"))
    assert sglang.reserves_future_tokens and not vllm.reserves_future_tokens
    assert sglang.logs_prefill_lines and not vllm.logs_prefill_lines
    assert (sglang.token_budget_field, vllm.token_budget_field) == ("chunked_prefill_size", "max_num_batched_tokens")
    assert (sglang.running_cap_field, vllm.running_cap_field) == ("max_running_requests", "max_num_seqs")
    assert (sglang.kv_fraction_field, vllm.kv_fraction_field) == ("mem_fraction_static", "gpu_memory_utilization")
    assert (sglang.cuda_graph_bs_field, vllm.cuda_graph_bs_field) == ("cuda_graph_max_bs", "max_cudagraph_capture_size")
    assert (sglang.cap_flag, vllm.cap_flag) == ("--max-running-requests", "--max-num-seqs")
    assert (sglang.requeue_word, vllm.requeue_word) == ("retraction", "preemption")
    assert vllm.resolves_automatic_values and not sglang.resolves_automatic_values
    # the stand-in is SGLang as far as the rules go, and takes its own --sim-* flags
    assert sim.running_cap_field == sglang.running_cap_field and sim.is_standin and sim.accepts_foreign_flags
    assert not sglang.accepts_foreign_flags
    # an engine behind an arbitrary command: facts unknown, not guessed
    assert command.running_cap_field is None and not command.launches_from_config


def test_each_engine_names_its_config_type_and_log_adapter():
    from glm5lib.engines.sglang.config import ServerConfig
    from glm5lib.logs import available_engines

    assert engines.get("sglang").config_type is ServerConfig and engines.get("sim").config_type is ServerConfig
    assert engines.get("vllm").config_type is engines.VllmConfig
    assert engines.get("command").config_type is None
    from glm5lib.engines.transformers import TransformersConfig

    assert engines.get("transformers").config_type is TransformersConfig
    assert set(engines.config_types()) == {ServerConfig, engines.VllmConfig, TransformersConfig}
    for name in ("sglang", "vllm", "sim", "transformers"):
        assert engines.get(name).log_engine in available_engines()


@pytest.mark.parametrize("name", ["sglang", "vllm", "sim"])
def test_levers_cover_cap_budget_graphs_and_kv_with_safe_bounds(name):
    adapter = engines.get(name)
    caps = adapter.capabilities
    levers = {lv.field: lv for lv in adapter.levers()}
    assert len(levers) == 4
    assert caps.running_cap_field in levers and caps.token_budget_field in levers
    assert caps.kv_fraction_field in levers
    cap = levers[caps.running_cap_field]
    assert cap.kind == "int" and cap.low == 1 and cap.high >= 1024 and cap.flag.startswith("--")
    kv = levers[caps.kv_fraction_field]
    assert kv.kind == "float" and 0 < kv.low < kv.high < 1
    assert cap.check(256) == 256 and kv.check(0.9) == 0.9
    with pytest.raises(ConfigError, match=f"{cap.field}=0 is outside its safe range"):
        cap.check(0)
    with pytest.raises(ConfigError, match="outside its safe range"):
        cap.check(2.5)
    with pytest.raises(ConfigError, match="outside its safe range"):
        kv.check(1.0)
    assert adapter.lever(cap.field) == cap
    with pytest.raises(ConfigError, match="has no lever 'tp_size'"):
        adapter.lever("tp_size")


def test_sglang_levers_use_the_release_own_field_names():
    old = {lv.field for lv in engines.get("sglang").levers("0.5.9")}
    new = {lv.field: lv for lv in engines.get("sglang").levers("0.5.23")}
    assert "cuda_graph_max_bs" in old and "cuda_graph_max_bs_decode" in new
    assert new["cuda_graph_max_bs_decode"].flag == "--cuda-graph-max-bs-decode"
    assert engines.get("command").levers() == []


def test_one_metrics_map_gives_the_telemetry_aliases_and_the_evidence_gauges():
    from glm5lib import levels
    from glm5lib.diagnose import scrapes

    # the maps that used to be written out by hand in two modules, now both read off the adapters
    assert levels.METRIC_ALIASES == {
        "vllm:num_requests_running": "sglang:num_running_reqs",
        "vllm:num_requests_waiting": "sglang:num_queue_reqs",
        "vllm:kv_cache_usage_perc": "sglang:token_usage",
        "vllm:gpu_cache_usage_perc": "sglang:token_usage",
        "vllm:num_preemptions_total": "sglang:num_retracted_reqs",
        "vllm:generation_tokens_total": "sglang:generation_tokens_total",
        # the serving figures glm5 watch reads off a live server
        "vllm:prompt_tokens_total": "sglang:prompt_tokens_total",
        "vllm:request_success_total": "sglang:num_requests_total",
        "vllm:time_to_first_token_seconds": "sglang:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds": "sglang:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds": "sglang:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds": "sglang:e2e_request_latency_seconds",
    }
    assert scrapes._GAUGES == {
        "running_req": ("sglang:num_running_reqs", "vllm:num_requests_running"),
        "queue_req": ("sglang:num_queue_reqs", "vllm:num_requests_waiting"),
        "token_usage": ("sglang:token_usage", "vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"),
        "num_token": ("sglang:num_used_tokens",),
        "gen_throughput": ("sglang:gen_throughput",),
    }
    assert engines.metric_names("running_req")[0] == "sglang:num_running_reqs"
    assert "vllm:num_requests_running" in engines.get("vllm").gauges()


def test_load_config_goes_to_the_engine_the_config_names(tmp_path):
    from glm5lib.engines.sglang.config import ServerConfig

    assert isinstance(engines.load_config("vllm-capped"), engines.VllmConfig)
    assert isinstance(engines.load_config("glm5-baseline"), ServerConfig)
    saved = engines.load_config("vllm-capped").save(tmp_path / "config.json")
    assert isinstance(engines.load_config(saved), engines.VllmConfig)
    config = engines.load_config("glm5-baseline")
    assert engines.load_config(config) is config
    assert isinstance(engines.load_config("glm5-baseline", engine="sim"), ServerConfig)
    with pytest.raises(ConfigError, match="takes no configuration file"):
        engines.load_config("glm5-baseline", engine="command")


def test_register_adds_an_engine_and_refuses_a_taken_name():
    import dataclasses

    extra = dataclasses.replace(engines.get("command"), name="my-engine", title="mine")
    try:
        assert engines.register(extra) is extra
        assert engines.names()[-1] == "my-engine" and engines.get("my-engine") is extra
        with pytest.raises(ConfigError, match="already registered"):
            engines.register(extra)
        with pytest.raises(ConfigError, match="already registered"):
            engines.register(dataclasses.replace(extra, name="vllm"))
    finally:
        engines._REGISTERED.pop("my-engine", None)
    assert "my-engine" not in engines.names()


def test_importing_the_registry_loads_no_adapter():
    import subprocess
    import sys

    probe = ("import sys; from glm5lib import engines; names = engines.names(); "
             "print(names, 'pandas' in sys.modules, 'glm5lib.engines.vllm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['sim', 'sglang', 'vllm', 'transformers', 'command'] False False"


def test_vllm_catalogue_is_package_data_per_release():
    from glm5lib.engines.vllm import releases

    assert "0.32.0" in releases.BUNDLED_RELEASES
    flags, version = releases.bundled_flags("0.32.0+cpu")
    assert version == "0.32.0" and flags["max_num_seqs"]["flags"] == ["--max-num-seqs"]
    assert releases.bundled_release("0.40.1") == releases.BUNDLED_RELEASES[-1]
    assert releases.bundled_release("0.1.0") == releases.BUNDLED_RELEASES[0]
    with pytest.raises(ConfigError, match="not a version"):
        releases.release_key("latest")


def test_vllm_gpu_release_catalogue_sits_beside_the_cpu_build_one():
    from glm5lib.engines.vllm import releases

    assert {"0.32.0", "0.33.0"} <= set(releases.BUNDLED_RELEASES) and releases.DEFAULT_RELEASE == "0.32.0"
    assert releases.bundled_release("0.33.1") == "0.33.0" and releases.bundled_release("0.32.0+cpu") == "0.32.0"
    new, version = releases.bundled_flags("0.33.0")
    old, _ = releases.bundled_flags("0.32.0")
    assert version == "0.33.0" and "sleep_mode_backend" in new and "sleep_mode_backend" not in old
    # the levers' fields are in both releases, under the same names
    assert {lv.field for lv in engines.get("vllm").levers("0.33.0")} == {lv.field for lv in engines.get("vllm").levers("0.32.0")}


def test_the_stand_in_reads_sglangs_configuration_without_the_launcher():
    """The stand-in imports SGLang's configuration at start: it must not pull in the launcher,
    the process layer or pandas (its start-up time is every test's and every notebook's)."""
    import subprocess
    import sys

    probe = ("import sys, glm5lib.engines.sglang.config; "
             "print(sorted(m for m in ('pandas', 'glm5lib.server', 'glm5lib.engines.sglang.launcher') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
