"""Resolving server configurations from many kinds of input, and reading their values.

:func:`resolve_server_args` turns a ServerConfig, a ServerLog, a dict, a config JSON, a server
log, a run/phase/reference folder or a shipped name into one ``server_args`` dict; :func:`arg`
reads a field of it with SGLang's default filled in and values normalised so that ``'64'``,
``64`` and ``64.0`` compare equal.

Names and defaults are those of the release the arguments come from (:func:`release_of`: the
``version`` a server reported, else the bundled release whose fields fit the keys, else the
default release), and fields renamed across releases read each other: a rule asking for
``cuda_graph_max_bs`` gets 0.5.23's ``cuda_graph_max_bs_decode``, and ``disable_cuda_graph``
is "CUDA graphs off" whichever flags said it.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import engines, rundir
from glm5lib.engines.sglang.config import (
    ServerConfig,
    arg,
    config_defaults,
    flag_of,
    norm,
    release_of,
    resolved_fallback,
    shown_as,
)
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.logs import parse_log
from glm5lib.paths import data_dir

__all__ = [
    "ResolvedConfig",
    "arg",
    "config_defaults",
    "find_phase",
    "flag_of",
    "list_references",
    "norm",
    "reference_dir",
    "release_of",
    "resolve_config",
    "resolve_server_args",
    "resolved_fallback",
    "shown_as",
]

logger = logging.getLogger(__name__)

# SGLang 0.5.x defaults of the fields the rules read, for configs that leave them unset.

_PHASE_FILES = (rundir.SERVER_LOG, rundir.SWEEP, rundir.CONFIG, rundir.REQUESTS, rundir.GPU)


def _is_phase(path: Path) -> bool:
    return any((path / f).is_file() for f in _PHASE_FILES)


def find_phase(run_dir: Path, phase: str | None) -> Path:
    """The phase folder of a run folder: ``run_dir/phase``, ``run_dir`` itself, or its only phase."""
    if not run_dir.exists():
        raise DiagnosisError(f"run folder {run_dir} does not exist")
    if phase is not None:
        p = run_dir / phase
        if not _is_phase(p):
            phases = sorted(q.name for q in run_dir.iterdir() if q.is_dir() and _is_phase(q)) if run_dir.is_dir() else []
            close = difflib.get_close_matches(phase, phases, n=1)
            raise DiagnosisError(f"{p} holds none of {', '.join(_PHASE_FILES)}; "
                                 + (f"did you mean {close[0]!r}? " if close else "")
                                 + f"phases in {run_dir}: {', '.join(phases) or 'none'}")
        return p
    if _is_phase(run_dir):
        return run_dir
    phases = sorted(p.name for p in run_dir.iterdir() if p.is_dir() and _is_phase(p))
    if len(phases) == 1:
        return run_dir / phases[0]
    if not phases:
        raise DiagnosisError(
            f"{run_dir} is not a run folder: it holds none of {', '.join(_PHASE_FILES)} and no phase folder with them"
        )
    raise DiagnosisError(
        f"{run_dir} has several phases ({', '.join(phases)}): name one (phase=... or --phase)"
    )



def list_references() -> list[str]:
    """Names of the reference runs shipped (or dropped) under ``data/reference/``."""
    root = data_dir() / "reference"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / rundir.SERVER_LOG).is_file())


def reference_dir(name: str) -> Path:
    """The folder of a reference run by name, e.g. ``reference_dir("k2-thinking")``."""
    path = data_dir() / "reference" / name
    if not (path / rundir.SERVER_LOG).is_file():
        raise ConfigError(
            f"no reference run named {name!r} (looked for {path / rundir.SERVER_LOG}; "
            f"references: {', '.join(list_references()) or 'none'})",
            field="reference",
            valid=list_references(),
        )
    return path


def _config_names() -> list[str]:
    root = data_dir() / "configs"
    return sorted(p.stem for p in root.glob("*.json")) if root.is_dir() else []


def _args_from_json_file(path: Path) -> dict[str, Any]:
    try:
        if not _another_engines(path):
            return dict(ServerConfig.load(path).to_dict())
    except (ConfigError, ValueError, TypeError) as exc:
        # Fields of another SGLang release, say: a diff should still show them.
        logger.warning("reading %s as plain JSON: %s", path, exc)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}", field="config") from None
    if isinstance(data, dict) and isinstance(data.get("server_args"), dict):
        return dict(data["server_args"])
    if isinstance(data, dict):
        return {k: v for k, v in data.items() if not k.startswith("_")}
    raise ConfigError(f"{path} does not hold a JSON object of server arguments", field="config")


def _another_engines(path: Path) -> bool:
    """Whether a configuration file names an engine whose configuration is not the default
    engine's (its fields are then its own names, read as plain JSON)."""
    try:
        named = json.loads(path.read_text()).get("engine")
    except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
        return False
    if not named:
        return False
    own = engines.get(engines.DEFAULT_ENGINE).config_type
    return engines.get(str(named), default=engines.COMMAND).config_type is not own


def _args_from_folder(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    log = path / rundir.SERVER_LOG
    args: dict[str, Any] = {}
    startup: dict[str, Any] = {}
    if (path / rundir.CONFIG).is_file():
        args.update(_args_from_json_file(path / rundir.CONFIG))
    if log.is_file():
        parsed = parse_log(log)
        args.update(parsed.server_args or {})
        startup = dict(parsed.startup or {})
    if not args:
        raise ConfigError(
            f"{path} holds neither {rundir.CONFIG} nor a {rundir.SERVER_LOG} with a server_args line",
            field="config",
        )
    return args, startup


@dataclasses.dataclass
class ResolvedConfig:
    """A configuration read from some source: its server arguments, a label, and the facts its
    server logged at start (resolved automatic values: ``max_running_requests``,
    ``max_total_num_tokens``...; empty when the source is not a log)."""

    args: dict[str, Any]
    label: str
    startup: dict[str, Any] = dataclasses.field(default_factory=dict)


def resolve_config(source: Any) -> ResolvedConfig:
    """Read any configuration source; see :func:`resolve_server_args` for what is accepted."""
    if isinstance(source, ResolvedConfig):
        return source
    if isinstance(source, Mapping):
        return ResolvedConfig(dict(source), "dict")
    if (
        hasattr(source, "to_dict")
        and callable(source.to_dict)
        and not isinstance(source, pd.DataFrame)
    ):
        return ResolvedConfig(dict(source.to_dict()), type(source).__name__)
    if hasattr(source, "server_args") and isinstance(source.server_args, Mapping):
        startup = getattr(source, "startup", None)
        return ResolvedConfig(
            dict(source.server_args),
            "server log",
            dict(startup) if isinstance(startup, Mapping) else {},
        )
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            try:
                folder = find_phase(path, None)
            except DiagnosisError as exc:
                raise ConfigError(str(exc), field="config") from None
            return ResolvedConfig(*_with_label(_args_from_folder(folder), str(folder)))
        if path.is_file():
            if path.suffix == ".json":
                return ResolvedConfig(_args_from_json_file(path), str(path))
            parsed = parse_log(path)
            if not parsed.server_args:
                raise ConfigError(
                    f"{path} has no server_args=ServerArgs(...) line: give a log from the server's start, "
                    "a config .json, or a run folder",
                    field="config",
                )
            return ResolvedConfig(dict(parsed.server_args), str(path), dict(parsed.startup or {}))
        name = str(source)
        if name in list_references():
            return ResolvedConfig(
                *_with_label(_args_from_folder(reference_dir(name)), f"reference {name}")
            )
        if name in _config_names():
            return ResolvedConfig(
                _args_from_json_file(data_dir() / "configs" / f"{name}.json"), f"config {name}"
            )
        raise ConfigError(
            f"configuration source {name!r} is not a file, a folder, a reference name or a shipped config "
            f"name (names: {', '.join(list_references() + _config_names()) or 'none shipped'})",
            field="config",
            valid=list_references() + _config_names(),
        )
    raise ConfigError(
        f"cannot read a configuration from a {type(source).__name__}: give a ServerConfig, a dict, "
        "a path or a reference name",
        field="config",
    )


def _with_label(
    pair: tuple[dict[str, Any], dict[str, Any]], label: str
) -> tuple[dict[str, Any], str, dict[str, Any]]:
    return pair[0], label, pair[1]


def resolve_server_args(source: Any) -> tuple[dict[str, Any], str]:
    """Turn any configuration source into ``(server_args dict, label)``.

    Accepted: a ServerConfig (anything with ``to_dict()``), a ServerLog (``.server_args``), a
    dict, a path to a config JSON, a server log, a run/phase/reference folder, a shipped
    reference name (``"k2-thinking"``) or a shipped config name (``"glm5-baseline"``).
    """
    resolved = resolve_config(source)
    return resolved.args, resolved.label


