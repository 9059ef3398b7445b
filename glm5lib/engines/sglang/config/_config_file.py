"""SGLang's ``--config FILE``: launch arguments in a YAML file, merged into the command line.

Every bundled release (0.5.8 to 0.5.23) reads it the same way, in ``prepare_server_args``
(``ConfigArgumentMerger`` in ``server_args_config_parser.py``): one ``--config`` token followed by
a ``.yaml``/``.yml`` file holding one mapping; each key becomes ``--key``, a switch (store_true)
given only when true, another boolean as ``--key true|false``, a list as ``--key a b``, a mapping
as JSON; those arguments go before the rest of the command line, which wins where both give one.

glm5lib writes the server's API keys in such a file (:func:`write_key_file`) so that they are on
no command line (any user of a host reads those: ``ps``, /proc/PID/cmdline); the stand-in merges
the file as SGLang does (:func:`merge_config_file`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from glm5lib.engines.sglang.config._releases import Catalogue
from glm5lib.errors import ConfigError

__all__ = ["CONFIG_FLAG", "merge_config_file", "write_key_file"]

CONFIG_FLAG = "--config"
_SUFFIXES = (".yaml", ".yml")


def merge_config_file(argv: Sequence[str], catalogue: Catalogue) -> list[str]:
    """``argv`` with its ``--config FILE`` replaced by the file's arguments, put first as SGLang
    puts them; ``argv`` as it is without one. Raises ConfigError naming the file for what SGLang
    refuses (two ``--config``, no file, not YAML, not a mapping, an option it cannot take there)."""
    tokens = [str(t) for t in argv]
    at = [i for i, t in enumerate(tokens) if t == CONFIG_FLAG]
    if not at:
        return tokens
    if len(at) > 1:
        raise ConfigError("--config is given twice: SGLang takes one config file", field="config")
    i = at[0]
    if i == len(tokens) - 1:
        raise ConfigError("--config names no file: give a .yaml or .yml file of launch arguments", field="config")
    path = Path(tokens[i + 1])
    if path.suffix.lower() not in _SUFFIXES or not path.is_file():
        raise ConfigError(f"--config {path}: SGLang reads an existing .yaml or .yml file", field="config",
                          valid=list(_SUFFIXES))
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--config {path} cannot be read as YAML: {exc}", field="config") from exc
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path} must hold one mapping of launch arguments, not "
                          f"{type(data).__name__}", field="config")
    return _as_args(data, catalogue, path) + tokens[:i] + tokens[i + 2:]


def _as_args(data: Mapping[str, Any], catalogue: Catalogue, path: Path) -> list[str]:
    out: list[str] = []
    for key, value in data.items():
        flag = f"--{key}"
        spec = catalogue.specs.get(catalogue.flag_to_field.get(flag, str(key).replace("-", "_")))
        action = spec.action if spec is not None else None
        if action not in (None, "store_true"):
            raise ConfigError(f"--config {path}: SGLang cannot take {key!r} ({action}) from a config file; "
                              "give it on the command line", field=str(key))
        if isinstance(value, bool):
            if action == "store_true":
                out += [flag] if value else []
            else:
                out += [flag, str(value).lower()]
        elif isinstance(value, list):
            out += [flag, *(str(v) for v in value)] if value else []
        elif isinstance(value, dict):
            out += [flag, json.dumps(value)]
        else:
            out += [flag, str(value)]
    return out


def write_key_file(keys: Mapping[str, str]) -> Path:
    """A new file only this user may read, holding ``keys`` (``{"api-key": ...}``) as SGLang's
    ``--config`` takes them; the caller removes it once the server is gone."""
    handle, name = tempfile.mkstemp(prefix="glm5-sglang-keys-", suffix=".yaml")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(dict(keys), out)  # JSON is YAML: quoted, escaped strings whatever the key holds
            out.write("\n")
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)
