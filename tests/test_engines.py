"""Tests for glm5lib.engines: presets, settings applied to command templates, the stand-in as a command engine."""

from __future__ import annotations

import pytest

from glm5lib import engines, server
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
