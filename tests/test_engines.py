"""Tests for glm5lib.engines: presets, settings applied to command templates, the stand-in as a command engine."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from glm5lib import engines, server
from glm5lib.config import field_for
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
