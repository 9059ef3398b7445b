"""One SweepSettings carries a sweep's settings through run_sweep and measure_phase; their keyword
lists are the settings' fields, written once."""

from __future__ import annotations

import inspect

import pytest

from glm5lib.engines.sglang.config import ServerConfig
from glm5lib.errors import ConfigError
from glm5lib.loadgen import run_sweep, run_sweep_async
from glm5lib.loadgen.settings import SweepSettings, settings_from
from glm5lib.phase import measure_phase

FIELDS = SweepSettings.field_names()


def test_settings_from_keywords_or_an_object_but_not_both():
    made = settings_from(None, {"input_len": 32, "api": "chat"})
    assert made == SweepSettings(input_len=32, api="chat") and made.token_ids is False
    given = SweepSettings(output_len=4)
    assert settings_from(given, {}) is given
    assert settings_from(given, {"api": "generate"}) is given  # a default repeated sets nothing
    with pytest.raises(ConfigError, match=r"\['input_len', 'warmup'\] both set") as e:
        settings_from(given, {"input_len": 8, "warmup": 0, "seed": 0})
    assert e.value.field == "settings" and e.value.valid == ["settings", "input_len", "warmup"]
    with pytest.raises(ConfigError, match="must be a SweepSettings") as e:
        settings_from({"input_len": 8}, {})
    assert e.value.field == "settings"
    with pytest.raises(ConfigError, match="not sweep settings") as e:
        settings_from(None, {"durations": 5})
    assert e.value.field == "durations" and e.value.valid == FIELDS
    with pytest.raises(ConfigError) as e:  # a bad value names its field
        settings_from(None, {"mode": "burst"})
    assert e.value.field == "mode" and e.value.valid == ["closed", "poisson"]


def test_the_sweep_and_its_coroutine_show_one_signature_made_from_the_fields():
    assert inspect.signature(run_sweep).parameters == inspect.signature(run_sweep_async).parameters
    assert inspect.iscoroutinefunction(run_sweep_async)
    with pytest.raises(ConfigError) as e:  # checked before anything is sent
        run_sweep("http://127.0.0.1:1", [1], settings=SweepSettings(), output_len=8)
    assert e.value.field == "settings"


def test_measure_phase_takes_every_setting_by_keyword_with_the_settings_defaults():
    # the keyword form has no rewritten signature: its keywords are the plan's fields, listed once
    from glm5lib.phase.measure import KEYWORDS

    params = inspect.signature(measure_phase).parameters
    assert len(params) <= 10 and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    assert [f for f in FIELDS if f != "model"] == [f for f in KEYWORDS if f in FIELDS and f != "model"]
    assert "model" in KEYWORDS  # the model a server is launched with, once
    assert "settings" in KEYWORDS and "sweep_options" in KEYWORDS
    for name in FIELDS:
        if name not in ("model", "token_ids"):
            assert KEYWORDS[name] == getattr(SweepSettings(), name), name


def test_measure_phase_checks_its_settings_before_it_launches_anything(tmp_path):
    config = ServerConfig.load("glm5-baseline")
    with pytest.raises(ConfigError, match="did you mean duration") as e:
        measure_phase(config, tmp_path, "x", durations=5)
    assert e.value.field == "durations"
    with pytest.raises(ConfigError) as e:
        measure_phase(config, tmp_path, "x", settings=SweepSettings(), input_len=32)
    assert e.value.field == "settings"
    with pytest.raises(ConfigError) as e:
        measure_phase(config, tmp_path, "x", settings=SweepSettings(), sweep_options={"resume": False})
    assert e.value.field == "settings"
    with pytest.raises(ConfigError, match="own arguments") as e:  # one field two ways
        measure_phase(config, tmp_path, "x", resume=False, sweep_options={"resume": True})
    assert e.value.field == "sweep_options"
    with pytest.raises(ConfigError) as e:  # any field by keyword, checked like the rest
        measure_phase(config, tmp_path, "x", token_ids=True, api="chat")
    assert e.value.field == "token_ids"
    assert not (tmp_path / "x").exists()
