"""An API key no HTTP request can carry is refused before anything starts, naming where it came from
and never the key: it travels in an ``Authorization: Bearer`` header (printable ASCII, no spaces), so a
key with an accented letter is answered 401 by every server, the one launched with it included."""

from __future__ import annotations

import argparse

import pytest

from glm5lib import http
from glm5lib.cli.options import read_api_key
from glm5lib.errors import ConfigError


@pytest.mark.parametrize("key", ["s3cret", 'k-#:"x', "sk-proj_AZaz09-._~+/=", "a!$%&'()*,;<>?@[]^`{|}"])
def test_printable_ascii_keys_pass(key):
    http.check_api_key(key)


@pytest.mark.parametrize("key,what", [
    ("k-é-1", "the non-ASCII character U+00E9 at position 3"),
    ("two words", "a space at position 4"),
    ("tab\tkey", "a control character at position 4"),
    ("clé", "the non-ASCII character U+00E9 at position 3"),
])
def test_a_key_a_header_cannot_carry_is_refused_with_where_and_what_but_not_the_key(key, what):
    with pytest.raises(ConfigError) as err:
        http.check_api_key(key, "GLM5_API_KEY")
    text = str(err.value)
    assert text.startswith(f"GLM5_API_KEY holds {what}") and key not in text
    assert err.value.field == "api_key"


def test_no_key_is_no_error():
    http.check_api_key(None)
    http.check_api_key("")


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(api_key_argv=None, api_key_file=kw.get("file"))


def test_the_cli_checks_the_key_from_the_environment_and_from_a_file(tmp_path, monkeypatch):
    monkeypatch.setenv("GLM5_API_KEY", "ok-key")
    assert read_api_key(_args()) == "ok-key"
    monkeypatch.setenv("GLM5_API_KEY", "clé")
    with pytest.raises(ConfigError, match=r"^GLM5_API_KEY holds the non-ASCII character"):
        read_api_key(_args())
    monkeypatch.delenv("GLM5_API_KEY")
    bad = tmp_path / "key.txt"
    bad.write_text("with space\n")
    with pytest.raises(ConfigError, match=r"key\.txt' holds a space at position 5"):
        read_api_key(_args(file=str(bad)))
