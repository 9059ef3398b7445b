"""The SGLang flag catalogues as JSON package data: their content and lazy loading."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from glm5lib.engines.sglang.config import _releases as releases
from glm5lib.errors import ConfigError

REPO = Path(__file__).resolve().parents[5]
RELEASES = sorted(releases.BUNDLED_RELEASES, key=releases.version_key)

#: sha256 of each catalogue's content (source, flags, fields_without_flag; canonical JSON) as the
#: generated Python modules ``glm5lib/_sglang_flags*.py`` held it when the catalogues became JSON:
#: the JSON was checked there, entry by entry and type by type, against those modules (and the
#: FlagSpecs built from both compared field by field). A regenerated catalogue that changes any
#: flag, default or type changes its digest. 0.5.16's was never a module: it was generated as JSON
#: from its own parser (tests/integration/test_catalogues_regenerate.py reproduces it there).
_DIGEST_OF_THE_FORMER_MODULES = {
    "0.5.8": "ba14481e63828385ad2ae620f509c12814d7613a6523d571448f57b77dd3f6a2",
    "0.5.9": "9bfe26a98589cd6bf02c64dd7b18a1626b507e4e675d53f6b4d0dfd9f2a23a34",
    "0.5.16": "8129f320974c003b091d82504d885053b78bd2f829aee417c920e0bd7c537d88",
    "0.5.23": "2dd1dbd0ed587ea9709317db76fe0652a3aba141bd45edf0056987ffdb5a94a9",
}


def _canonical_digest(data) -> str:
    text = json.dumps({key: data[key] for key in ("source", "flags", "fields_without_flag")},
                      sort_keys=True, ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _catalogue_path(release: str) -> Path:
    return REPO.joinpath("glm5lib", *releases.CATALOGUE_DIR, releases.BUNDLED_RELEASES[release])


@pytest.mark.parametrize("release", RELEASES)
def test_json_catalogue_holds_what_the_python_module_held(release):
    data = releases.read_catalogue_file(release)
    assert data["format"] == releases.CATALOGUE_FORMAT
    assert data["source"]["version"] == release
    assert _canonical_digest(data) == _DIGEST_OF_THE_FORMER_MODULES[release]
    catalogue = releases.bundled_catalogue(release)
    assert list(catalogue.specs) == [entry["field"] for entry in data["flags"]]
    assert catalogue.specs["model_path"].flags[:2] == ("--model-path", "--model")


def test_every_catalogue_file_is_listed_and_packaged():
    on_disk = {p.name for p in _catalogue_path(RELEASES[0]).parent.glob("*.json")}
    assert on_disk == set(releases.BUNDLED_RELEASES.values())
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"glm5lib" = ["engines/*/flags/*.json"]' in pyproject


def test_a_catalogue_loads_once_and_is_cached():
    releases._bundled.cache_clear()
    first = releases.bundled_catalogue("0.5.9")
    assert releases._bundled.cache_info().currsize == 1
    assert releases.bundled_catalogue("0.5.9.post1") is first
    assert releases._bundled.cache_info().currsize == 1


def test_an_unknown_release_has_no_catalogue_file():
    with pytest.raises(ConfigError, match=r"no bundled catalogue for SGLang '0\.4\.0'; bundled: 0\.5\.8, 0\.5\.9, 0\.5\.16, 0\.5\.23"):
        releases.read_catalogue_file("0.4.0")
