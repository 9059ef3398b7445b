"""The engine registry: one adapter per engine, each in its own folder.

``glm5lib.engines.<name>/`` holds everything one engine brings (see
:class:`~glm5lib.engines.base.EngineAdapter`): its config type, flag catalogues per release,
launch, log adapter name, its ``/metrics`` names, the values it chooses at start-up, the
capability facts rules read instead of its name, and its tuning levers. Registered engines:

* ``sglang``: SGLang from a :class:`~glm5lib.config.ServerConfig`;
* ``vllm``: vLLM from a :class:`~glm5lib.engines.vllm.VllmConfig`;
* ``sim``: the stand-in server, launched and read as SGLang is;
* ``command``: any engine from an argv template (:data:`ENGINES` has ready-made ones).

:func:`get` and :func:`names` are the registry; a phase's ``BACKEND``, config loading, the
telemetry's gauge names, the diagnosis and every command go through them. A new engine is one
folder here defining ``ADAPTER``, one line in :data:`ADAPTER_MODULES`, and its knobs in
``data/knowledge/engines.json``.

Importing this package is light (``glm5 --help`` lists the engines without loading pandas): an
adapter's module is imported the first time :func:`get` asks for it, and the names re-exported
here from the adapters' modules (:data:`ENGINES`, :class:`VllmConfig`...) on first use.
"""

from __future__ import annotations

import difflib
import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from glm5lib.engines.base import Capabilities, EngineAdapter, EngineConfig, LaunchRequest, Lever
from glm5lib.errors import ConfigError

if TYPE_CHECKING:
    from glm5lib.engines.presets import ENGINES, Engine, get_engine, sglang_knobs
    from glm5lib.engines.vllm import VllmConfig, launch_vllm, vllm_module, vllm_python

__all__ = [
    "ADAPTER_MODULES",
    "DECODE_METRIC_COLUMNS",
    "ENGINES",
    "Capabilities",
    "Engine",
    "EngineAdapter",
    "EngineConfig",
    "LaunchRequest",
    "Lever",
    "VllmConfig",
    "config_types",
    "get",
    "get_engine",
    "launch_vllm",
    "load_config",
    "metric_aliases",
    "metric_names",
    "names",
    "register",
    "sglang_knobs",
    "vllm_module",
    "vllm_python",
]

#: engine -> the module defining its ``ADAPTER``, in the order ``--backend`` and the notebooks list them
ADAPTER_MODULES: dict[str, str] = {
    "sim": "glm5lib.engines.sim",
    "sglang": "glm5lib.engines.sglang",
    "vllm": "glm5lib.engines.vllm",
    "command": "glm5lib.engines.command",
}
#: adapters added by :func:`register` (engines defined outside glm5lib)
_REGISTERED: dict[str, EngineAdapter] = {}
#: names re-exported from the adapters' modules, imported on first use
_LAZY = {
    "ENGINES": "glm5lib.engines.presets", "Engine": "glm5lib.engines.presets",
    "get_engine": "glm5lib.engines.presets", "sglang_knobs": "glm5lib.engines.presets",
    "VllmConfig": "glm5lib.engines.vllm", "launch_vllm": "glm5lib.engines.vllm",
    "vllm_module": "glm5lib.engines.vllm", "vllm_python": "glm5lib.engines.vllm",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'glm5lib.engines' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def _adapters() -> dict[str, EngineAdapter]:
    out = {name: importlib.import_module(module).ADAPTER for name, module in ADAPTER_MODULES.items()}
    out.update(_REGISTERED)
    return out
#: the engine whose /metrics names are the telemetry tables' own (others are aliased to them)
CANONICAL_METRICS = "sglang"
#: evidence-schema decode columns read from /metrics when a log has no scheduler lines
DECODE_METRIC_COLUMNS = ("running_req", "queue_req", "token_usage", "num_token", "gen_throughput")


def names() -> list[str]:
    """The registered engines' names (``["sim", "sglang", "vllm", "command"]``); imports no adapter."""
    return list(dict.fromkeys([*ADAPTER_MODULES, *_REGISTERED]))


def get(name: str | EngineAdapter, default: str | None = None) -> EngineAdapter:
    """The adapter of engine ``name``; with ``default``, that engine's adapter for a name that
    is not registered (an engine named by a log adapter the registry does not know), else a
    ConfigError naming the valid engines."""
    if isinstance(name, EngineAdapter):
        return name
    key = str(name)
    if key in _REGISTERED:
        return _REGISTERED[key]
    if key in ADAPTER_MODULES:
        return importlib.import_module(ADAPTER_MODULES[key]).ADAPTER
    if default is not None:
        return get(default)
    valid = names()
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown engine {name!r}{hint}; valid: {', '.join(valid)}", field="engine", valid=valid)


def register(adapter: EngineAdapter, *, replace: bool = False) -> EngineAdapter:
    """Add an engine's adapter (for an engine defined outside glm5lib); ConfigError on a name
    already taken unless ``replace``."""
    if not isinstance(adapter, EngineAdapter):
        raise ConfigError(f"register() takes an EngineAdapter, not {type(adapter).__name__}", field="adapter")
    if adapter.name in names() and not replace:
        raise ConfigError(f"engine {adapter.name!r} is already registered (pass replace=True)", field="name")
    _REGISTERED[adapter.name] = adapter
    return adapter


def config_types() -> tuple[type, ...]:
    """The configuration classes of the registered engines (SGLang's ServerConfig, VllmConfig)."""
    return tuple(dict.fromkeys(a.config_type for a in _adapters().values() if a.config_type is not None))


def load_config(name_or_path: Any, engine: str | None = None) -> Any:
    """A server configuration by name or path, for the engine it names.

    ``engine`` given: that engine's loader. Otherwise a configuration object is returned as is;
    a shipped ``vllm-*`` name or a JSON file whose ``"engine"`` is a registered engine goes to
    that engine's loader; anything else is SGLang's (:class:`~glm5lib.config.ServerConfig`).
    """
    if engine is not None:
        return get(engine).load_config(name_or_path)
    if isinstance(name_or_path, config_types()):
        return name_or_path
    vllm = importlib.import_module(ADAPTER_MODULES["vllm"])
    text = str(name_or_path)
    if text in vllm.shipped_vllm_configs():
        return vllm.ADAPTER.load_config(text)
    path = Path(text)
    if path.is_file() and path.suffix == ".json":
        try:
            named = json.loads(path.read_text()).get("engine")
        except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
            named = None
        adapter = _adapters().get(str(named)) if named else None
        if adapter is not None and adapter.config_loader is not None:
            return adapter.load_config(path)
    return get("sglang").load_config(name_or_path)


def metric_names(column: str) -> tuple[str, ...]:
    """Every registered engine's /metrics gauge names for an evidence-schema ``column``
    (``"running_req"`` -> ``("sglang:num_running_reqs", "vllm:num_requests_running")``), the
    canonical engine's first."""
    order = [get(CANONICAL_METRICS), *(a for a in _adapters().values() if a.name != CANONICAL_METRICS)]
    return tuple(dict.fromkeys(n for a in order for n in a.metrics.get(column, ())))


def metric_aliases() -> dict[str, str]:
    """Other engines' /metrics names -> the canonical engine's, so every engine's gauges land in
    the same telemetry columns (``"vllm:num_requests_running"`` -> ``"sglang:num_running_reqs"``)."""
    canonical: Mapping[str, tuple[str, ...]] = get(CANONICAL_METRICS).metrics
    out: dict[str, str] = {}
    for adapter in _adapters().values():
        for column, gauges in adapter.metrics.items():
            target = canonical.get(column)
            if not target:
                continue
            for gauge in gauges:
                if gauge not in canonical[column]:
                    out.setdefault(gauge, target[0])
    return out
