"""``transformers serve`` as a workbook backend: a configuration in its own flags, and launching it.

A :class:`TransformersConfig` holds ``transformers serve`` options under their own names (the
typer parameters of ``transformers.cli.serve.Serve``: ``force_model``, ``continuous_batching``,
``cb_max_batch_tokens``, ``cb_num_blocks``, ``cb_block_size``, ``cb_max_memory_percent``,
``cb_use_cuda_graph``...), checked against the catalogue of its release
(``flags/<release>.json``, read from that release's own signature). Configs are JSON files::

    {"format": "glm5lib.transformers_config/1", "engine": "transformers", "name": "...",
     "transformers_version": "5.17.0", "env": {},
     "server_args": {"force_model": "/models/tiny", "cb_max_batch_tokens": 64}}

``model`` and ``model_path`` are accepted for ``force_model`` (the positional model the server
preloads); ``continuous_batching`` is on unless the config turns it off: this engine is about
its continuous batching.

:func:`launch_transformers` starts ``transformers serve`` with the interpreter
:func:`transformers_python` finds, through :func:`glm5lib.server.launch_command` (readiness on
``/health``), so the server is a :class:`~glm5lib.server.CommandServer` like any other engine's.
Its continuous-batching logger (``ContinuousBatchingLogger``, a logger of its own that the
``--log-level`` flag does not reach) is raised to INFO, so that the log says what the paged
cache was sized to and when requests were offloaded; everything else is the engine's own CLI.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from glm5lib.engines.flagconfig import FlagConfig, engine_python, launch_engine, local_model
from glm5lib.errors import ConfigError

__all__ = [
    "BUNDLED_RELEASES",
    "CONFIG_FORMAT",
    "DEFAULT_RELEASE",
    "TransformersConfig",
    "launch_transformers",
    "serve_argv",
    "transformers_flags",
    "transformers_python",
]

CONFIG_FORMAT = "glm5lib.transformers_config/1"
_FLAGS_FORMAT = "glm5lib.transformers_flags/1"
#: other names for the positional model (the notebooks' MODEL_PATH, vLLM's --model)
ALIASES = {"model": "force_model", "model_path": "force_model"}
#: set by the launcher itself, never by a config
_LAUNCH_FIELDS = ("host", "port")
#: the field whose value is the positional argument
MODEL_FIELD = "force_model"
_REPO = Path(__file__).resolve().parents[3]

#: Run ``transformers serve`` (the CLI's own ``main``) with the continuous-batching logger at
#: INFO: its cache sizing ("Paged cache initialized: ...") and offloads are INFO lines, and
#: that logger takes no level from ``--log-level``.
BOOTSTRAP = (
    "import logging, sys; logging.getLogger('ContinuousBatchingLogger').setLevel(logging.INFO); "
    "from transformers.cli.transformers import main; sys.argv[0] = 'transformers'; sys.exit(main())"
)


def _release_key(version: str) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", str(version).split("+", 1)[0])[:3]
    if not numbers:
        raise ConfigError(f"transformers release {version!r} is not a version such as '5.17.0'",
                          field="transformers_version")
    return tuple(int(n) for n in numbers)


def _folder():
    return resources.files("glm5lib.engines.transformers").joinpath("flags")


#: releases whose catalogue ships with glm5lib, oldest first
BUNDLED_RELEASES: tuple[str, ...] = tuple(sorted(
    (p.name[: -len(".json")] for p in _folder().iterdir() if p.name.endswith(".json")), key=_release_key))
DEFAULT_RELEASE = BUNDLED_RELEASES[-1]


@functools.lru_cache(maxsize=4)
def transformers_flags(release: str | None = None) -> tuple[dict[str, dict[str, Any]], str]:
    """``(field -> spec, release)``: the bundled catalogue that describes transformers ``release``
    (the same release, else the newest bundled one not newer, else the oldest; None: the newest).
    A spec: ``flags``, ``kind`` (``"positional"``, ``"bool"``, ``"value"``), ``negatable``,
    ``type``, ``default``, ``choices``, ``help``."""
    chosen = DEFAULT_RELEASE
    if release:
        key = _release_key(release)
        older = [r for r in BUNDLED_RELEASES if _release_key(r) <= key]
        chosen = older[-1] if older else BUNDLED_RELEASES[0]
    data = json.loads(_folder().joinpath(f"{chosen}.json").read_text())
    if data.get("format") != _FLAGS_FORMAT:
        raise ConfigError(f"transformers catalogue {chosen}.json has format {data.get('format')!r}, "
                          f"not {_FLAGS_FORMAT!r}", field="format")
    return dict(data["flags"]), str(data["version"])


def _check_value(field: str, spec: Mapping[str, Any], value: Any) -> Any:
    if value is None:
        return None
    kind, vtype = spec.get("kind"), spec.get("type")
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"transformers serve's {field} is a switch: give true or false, not {value!r}",
                              field=field, valid=["true", "false"])
        return value
    if field == "chat_template_kwargs" and isinstance(value, Mapping):
        return dict(value)
    if vtype == "int":
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"transformers serve's {field} takes a whole number, not {value!r}", field=field)
    elif vtype == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"transformers serve's {field} takes a number, not {value!r}", field=field)
        if field == "cb_max_memory_percent" and not 0.0 < value <= 1.0:
            raise ConfigError(f"transformers serve's cb_max_memory_percent is a fraction of free memory, "
                              f"above 0 and at most 1.0, not {value!r}", field=field, valid=["0.0-1.0"])
    elif not isinstance(value, str):
        raise ConfigError(f"transformers serve's {field} takes text, not {value!r}", field=field)
    choices = spec.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"transformers serve's {field}={value!r} is not one of its choices: "
                          f"{', '.join(map(str, choices))}", field=field, valid=[str(c) for c in choices])
    return value


class TransformersConfig(FlagConfig):
    """``transformers serve`` options under their own names; immutable (``with_changes`` copies)."""

    engine = "transformers"
    config_format = CONFIG_FORMAT
    noun = "a `transformers serve` option"
    naming = "names are its own (--cb-max-batch-tokens is cb_max_batch_tokens)"
    aliases = ALIASES
    launch_fields = frozenset(_LAUNCH_FIELDS)
    _check_value = staticmethod(_check_value)

    def _flags(self) -> tuple[dict[str, dict[str, Any]], str]:
        return transformers_flags(self.__dict__.get("meta", {}).get("transformers_version"))

    def _catalogue_text(self, source: str) -> str:
        return f"the catalogue of transformers {source}"

    @classmethod
    def _field(cls, key: str) -> str:  # flags' spellings too: cb-max-batch-tokens
        return ALIASES.get(key, key.lstrip("-").replace("-", "_"))

    # -- reading ---------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> TransformersConfig:
        where = source or "config"
        if data.get("engine", "transformers") != "transformers":
            raise ConfigError(f"{where} is for engine {data.get('engine')!r}, not transformers", field="engine",
                              valid=["transformers"])
        args = data.get("server_args")
        if not isinstance(args, Mapping):
            raise ConfigError(f"{where} has no \"server_args\" object of `transformers serve` options",
                              field="server_args")
        meta = {k: v for k, v in data.items() if k not in ("server_args", "env")}
        if source:
            meta["path"] = source
        return cls(args, env=data.get("env") or {}, meta=meta)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | Mapping[str, Any]) -> TransformersConfig:
        """A config from a JSON file (or its parsed dict)."""
        if isinstance(path, TransformersConfig):
            return path
        if isinstance(path, Mapping):
            return cls.from_dict(path)
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"no transformers config file {str(path)!r}: give the path of a JSON file with "
                              f"\"engine\": \"transformers\" and \"server_args\"", field="config")
        try:
            data = json.loads(file.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{file} is not valid JSON: {exc}", field="config") from None
        if not isinstance(data, Mapping):
            raise ConfigError(f"{file} holds no JSON object", field="config")
        config = cls.from_dict(data, source=str(file))
        config.meta.setdefault("name", file.stem)
        return config

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        flags, _ = self._flags()
        field = ALIASES.get(name, name)
        if field in flags:
            return self._args.get(field, flags[field].get("default"))
        raise AttributeError(f"{name!r} is not a `transformers serve` option")

    def to_argv(self) -> list[str]:
        """The options as ``transformers serve`` arguments: the model first (positional), then
        ``--continuous-batching`` unless turned off, then the flags (``--no-cb-use-cuda-graph``)."""
        argv: list[str] = []
        model = self._args.get(MODEL_FIELD)
        if model:
            argv.append(str(model))
        if self._args.get("continuous_batching", True):
            argv.append("--continuous-batching")
        return argv + self._flag_argv(skip=(MODEL_FIELD, "continuous_batching"))

    def model_path(self) -> str:
        """The model to serve: a local folder (absolute, or relative to here or to the repository)
        must exist; anything else is a Hugging Face model id the engine fetches itself."""
        model = self._args.get(MODEL_FIELD)
        if not model:
            raise ConfigError("the transformers config names no model: set server_args.force_model "
                              "(or model / MODEL_PATH)", field="force_model")
        model = str(model)
        return local_model(model, "force_model", model.startswith(("/", ".", "~")))


def transformers_python() -> str:
    """The interpreter that runs ``transformers serve``: ``GLM5_TRANSFORMERS_PYTHON``, else
    ``$ENGINES/transformers`` (``.engines/transformers`` by default) where it has transformers, else
    this one when it imports transformers."""
    return engine_python("transformers", "GLM5_TRANSFORMERS_PYTHON", (
        "transformers is not installed: install `transformers[serving]` (5.x) and torch into this "
        "environment or into $ENGINES/transformers, or point GLM5_TRANSFORMERS_PYTHON at an interpreter that has them"))


def serve_argv(config: TransformersConfig, python: str, extra_args: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The argv template that runs ``config`` (``{host}``/``{port}`` left for the launcher)."""
    return [python, "-c", BOOTSTRAP, "serve", *config.to_argv(), *extra_args, "--host", "{host}", "--port", "{port}"]


def launch_transformers(
    config: TransformersConfig | str | os.PathLike[str],
    *,
    log_path: str | os.PathLike[str] | None = None,
    port: int | None = None,
    host: str = "127.0.0.1",
    ready_timeout: float = 600.0,
    env: Mapping[str, str] | None = None,
    extra_args: list[str] | tuple[str, ...] = (),
):
    """Start ``transformers serve`` from ``config`` and return the ready
    :class:`~glm5lib.server.CommandServer` (use it with ``with``, or ``stop()`` it).

    The config's names and values, the model path, the interpreter and the port are checked
    before anything starts. Requests name the model as the config does (``model`` of the server).
    An engine that dies while starting raises :class:`~glm5lib.errors.ServerLaunchError` quoting
    what its log says.
    """
    if not isinstance(config, TransformersConfig):
        config = TransformersConfig.load(config)
    model = config.model_path()
    python = transformers_python()
    template = serve_argv(config.with_changes(force_model=model), python, extra_args)
    # the engine checks PyPI for a newer release at start-up; a benchmark host may have no network
    base_env = {"HF_HUB_DISABLE_UPDATE_CHECK": "1", "NO_COLOR": "1"}
    return launch_engine(template, log_engine="transformers", title="transformers serve", port=port, host=host,
                         model=model, log_path=log_path, env={**base_env, **config.env, **(env or {})},
                         ready_timeout=ready_timeout)


