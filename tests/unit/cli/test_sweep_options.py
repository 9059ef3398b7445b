"""glm5 sweep passes on only the settings given on its command line; the rest are SweepSettings'
defaults, which its help shows."""

from __future__ import annotations

import dataclasses

import pytest

from glm5lib.cli import build_parser
from glm5lib.cli.loadgen import _settings_given, settings_defaults
from glm5lib.errors import ConfigError
from glm5lib.loadgen import SweepSettings
from glm5lib.loadgen.settings import DEFAULT_CONCURRENCIES


def _parse(*argv: str):
    return build_parser().parse_args(["sweep", "http://127.0.0.1:9", *argv])


def test_unset_options_are_left_to_the_settings_defaults():
    assert _settings_given(_parse()) == {}
    assert SweepSettings(**_settings_given(_parse())) == SweepSettings()
    given = _settings_given(_parse("--input-len", "32", "-n", "4", "--no-resume", "--no-exact-prompts", "--rate", "2"))
    assert given == {"input_len": 32, "requests_per_level": 4, "resume": False, "exact_prompts": False}
    assert _settings_given(_parse("--mode", "poisson", "--rate", "2,4"))["rate"] == [2.0, 4.0]
    with pytest.raises(ConfigError) as info:
        _settings_given(_parse("--mode", "poisson"))
    assert info.value.field == "rate"


def test_the_help_shows_the_settings_defaults(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = SweepSettings()
    assert "levels, comma-separated (default 1,64,256)" in text
    assert f"prompt tokens (default {defaults.input_len})" in text
    assert f"fails (default {defaults.read_timeout})" in text


def test_the_help_reads_the_defaults_where_the_settings_write_them():
    fields = {f.name: f.default for f in dataclasses.fields(SweepSettings)}
    assert settings_defaults() == {**fields, "concurrencies": DEFAULT_CONCURRENCIES}
