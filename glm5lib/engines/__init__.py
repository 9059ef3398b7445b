"""The engine registry: one adapter per engine, each in its own folder.

``glm5lib.engines.<name>/`` holds everything one engine brings (see
:class:`~glm5lib.engines.base.EngineAdapter`): its config type, flag catalogues per release,
launch, log adapter name, its ``/metrics`` names, the values it chooses at start-up, the
capability facts rules read instead of its name, and its tuning levers. Registered engines:

* ``sglang``: SGLang from a :class:`~glm5lib.engines.sglang.config.ServerConfig`;
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

from glm5lib.engines.base import (
    LIMITS,
    Capabilities,
    EngineAdapter,
    EngineConfig,
    LaunchRequest,
    Lever,
    Limits,
    whole_size,
)
from glm5lib.errors import ConfigError
from glm5lib.lazy import module_getattr

if TYPE_CHECKING:
    from glm5lib.engines.attaching import attach
    from glm5lib.engines.presets import ENGINES, Engine, get_engine, sglang_knobs
    from glm5lib.engines.vllm import VllmConfig, launch_vllm, vllm_module, vllm_python

__all__ = [
    "ADAPTER_MODULES",
    "COMMAND",
    "DECODE_METRIC_COLUMNS",
    "DEFAULT_ENGINE",
    "ENGINES",
    "LIMITS",
    "STANDIN",
    "STEP_KIND_LIMITS",
    "Capabilities",
    "Engine",
    "EngineAdapter",
    "EngineConfig",
    "LaunchRequest",
    "Lever",
    "Limits",
    "VllmConfig",
    "adapters",
    "attach",
    "config_types",
    "get",
    "get_engine",
    "identify",
    "launch_vllm",
    "limit_changes",
    "limit_of",
    "limits_in",
    "limits_of",
    "load_config",
    "metric_aliases",
    "metric_names",
    "names",
    "neutral_field",
    "register",
    "sglang_knobs",
    "step_kind_changes",
    "topic",
    "unregister",
    "vllm_module",
    "vllm_python",
    "whole_size",
]

#: engine -> the module defining its ``ADAPTER``, in the order ``--backend`` and the notebooks list them
ADAPTER_MODULES: dict[str, str] = {
    "sim": "glm5lib.engines.sim",
    "sglang": "glm5lib.engines.sglang",
    "vllm": "glm5lib.engines.vllm",
    "transformers": "glm5lib.engines.transformers",
    "command": "glm5lib.engines.command",
}
#: the engine a log, a configuration or a run is read as when nothing names one
DEFAULT_ENGINE = "sglang"
#: the stand-in's engine name (a backend that needs no GPU)
STANDIN = "sim"
#: the engine launched from an argv template
COMMAND = "command"
#: adapters added by :func:`register` (engines defined outside glm5lib)
_REGISTERED: dict[str, EngineAdapter] = {}
#: names re-exported from the adapters' modules, imported on first use
_LAZY = {
    "ENGINES": "glm5lib.engines.presets", "Engine": "glm5lib.engines.presets",
    "get_engine": "glm5lib.engines.presets", "sglang_knobs": "glm5lib.engines.presets",
    "VllmConfig": "glm5lib.engines.vllm", "launch_vllm": "glm5lib.engines.vllm",
    "vllm_module": "glm5lib.engines.vllm", "vllm_python": "glm5lib.engines.vllm",
    "attach": "glm5lib.engines.attaching",
}


__getattr__ = module_getattr(__name__, _LAZY, globals())


def _adapters() -> dict[str, EngineAdapter]:
    out = {name: importlib.import_module(module).ADAPTER for name, module in ADAPTER_MODULES.items()}
    out.update(_REGISTERED)
    return out
#: the engine whose /metrics names are the telemetry tables' own (others are aliased to them)
CANONICAL_METRICS = "sglang"
#: evidence-schema decode columns read from /metrics when a log has no scheduler lines
DECODE_METRIC_COLUMNS = ("running_req", "queue_req", "token_usage", "num_token", "gen_throughput")


def adapters() -> list[EngineAdapter]:
    """Every registered engine's adapter, in the registry's order (imports them all)."""
    return list(_adapters().values())


def identify(url: str, api_key: str | None = None, timeout: float = 5.0) -> tuple[EngineAdapter, dict[str, Any]]:
    """The engine serving at ``url`` and what it says of itself, asking each adapter's
    ``identify`` in the registry's order, the command engine (any OpenAI-compatible server) last;
    ConfigError when none recognises it."""
    ordered = sorted(adapters(), key=lambda a: a.name == COMMAND)
    for adapter in ordered:
        if adapter.identify is None:
            continue
        info = adapter.identify(url, api_key, timeout)
        if info is not None:
            return adapter, dict(info)
    asked = ", ".join(a.title for a in ordered if a.identify is not None)
    raise ConfigError(f"{url} is not a serving engine glm5lib can read: none of {asked} answered there", field="url")


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
    """Add an engine's adapter (for an engine defined outside glm5lib), with its log adapter
    (``adapter.log_reader``) where it brings one: the one registration a new engine needs;
    ConfigError on a name already taken unless ``replace``."""
    if not isinstance(adapter, EngineAdapter):
        raise ConfigError(f"register() takes an EngineAdapter, not {type(adapter).__name__}", field="adapter")
    if adapter.name in names() and not replace:
        raise ConfigError(f"engine {adapter.name!r} is already registered (pass replace=True)", field="name")
    _REGISTERED[adapter.name] = adapter
    if adapter.log_reader is not None:
        # here: the registry stays importable without the log reader's pandas (glm5 --help)
        import glm5lib.logs.engine as log_engines

        log_engines.register(adapter.log_reader)
    return adapter


def unregister(name: str) -> None:
    """Forget an engine :func:`register` added, and its log adapter (nothing for a bundled one)."""
    adapter = _REGISTERED.pop(name, None)
    if adapter is not None and adapter.log_reader is not None:
        import glm5lib.logs.engine as log_engines

        log_engines.unregister(adapter.log_reader.name)


def config_types() -> tuple[type, ...]:
    """The configuration classes of the registered engines (SGLang's ServerConfig, VllmConfig)."""
    return tuple(dict.fromkeys(a.config_type for a in _adapters().values() if a.config_type is not None))


def load_config(name_or_path: Any, engine: str | None = None) -> Any:
    """A server configuration by name or path, for the engine it names.

    ``engine`` given: that engine's loader. Otherwise a configuration object is returned as is;
    a shipped ``vllm-*`` name or a JSON file whose ``"engine"`` is a registered engine goes to
    that engine's loader; anything else is SGLang's (:class:`~glm5lib.engines.sglang.config.ServerConfig`).
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


def limit_of(name: str, engine: str | EngineAdapter | None = None) -> str | None:
    """The neutral limit (:data:`~glm5lib.engines.base.LIMITS`) an engine field or flag sets:
    ``engine``'s own vocabulary first, then (an engine launched from a command, whose flags may be
    any engine's) every registered engine's; None outside the vocabulary."""
    order = [get(engine, default=COMMAND)] if engine is not None else []
    for adapter in [*order, *_adapters().values()]:
        limit = adapter.capabilities.limit_of(name)
        if limit is not None:
            return limit
    return None


def limits_of(engine: str | EngineAdapter, args: Mapping[str, Any] | None = None,
              startup: Mapping[str, Any] | None = None, environment: Mapping[str, Any] | None = None) -> Limits:
    """``engine``'s limits from its arguments and start-up facts; for an engine launched from a
    command (whose adapter names no fields), its flags read in any registered engine's vocabulary."""
    adapter = get(engine, default=COMMAND)
    lim = adapter.limits(args, startup, environment)
    if adapter.capabilities.fields or not args:
        return lim
    found, _ = limit_changes(dict(args), adapter)
    values = {k: v for k, v in found.items() if v is not None}
    values.update({k: v for k, v in lim.values.items() if v is not None})
    sources = {k: "server arguments" for k in found}
    sources.update(lim.sources)
    return Limits(values, sources, {**{k: k for k in found}, **lim.names})


def topic(name: str) -> str:
    """What a configuration field is about in the one vocabulary: its limit where it sets one
    (``"max_num_seqs"`` and ``"--max-running-requests"`` -> ``"running_cap"``), else the name."""
    return limit_of(name) or str(name)


def limits_in(args: Mapping[str, Any]) -> Limits:
    """The limits a set of arguments of any registered engine sets (a reference's configuration,
    whichever engine it is for): each field read in the vocabulary of the engine that has it."""
    return limits_of(COMMAND, args)


def neutral_field(name: str, engine: str | EngineAdapter | None = None) -> str | None:
    """Why an engine field leaves a random-prompt workload's step time alone (prefix caching),
    from ``engine``'s capabilities or any registered engine's; None for other fields."""
    key = str(name).lstrip("-").replace("-", "_")
    order = [get(engine, default=COMMAND)] if engine is not None else []
    for adapter in [*order, *_adapters().values()]:
        if key in adapter.capabilities.neutral_fields:
            return adapter.capabilities.neutral_fields[key]
    return None


def limit_changes(changes: Mapping[str, Any], engine: str | EngineAdapter | None = None,
                  args: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``changes`` as (limit -> value, the fields outside the vocabulary), translated by
    ``engine``'s adapter and, for a field it does not know, by any registered engine's."""
    adapter = get(engine, default=COMMAND) if engine is not None else get(COMMAND)
    limits, others = adapter.limit_changes(changes, args)
    rest: dict[str, Any] = {}
    for name, value in others.items():
        for other in _adapters().values():
            found, _ = other.limit_changes({name: value}, args)
            if found:
                limits.update(found)
                break
        else:
            rest[name] = value
    return limits, rest


#: the limits that decide which decode steps replay a graph: a step benchmark of a change runs with them
STEP_KIND_LIMITS = frozenset({"graph_max_batch", "graphs_off"})


def step_kind_changes(changes: Mapping[str, Any] | None, engine: str | EngineAdapter | None = None,
                      args: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The fields of ``changes`` that set which decode steps replay a graph (its ceiling, graphs
    off): what an offline step benchmark of the changed deployment must run with."""
    changes = dict(changes or {})
    context = {**dict(args or {}), **changes}
    caps = (get(engine, default=COMMAND) if engine is not None else get(COMMAND)).capabilities
    out: dict[str, Any] = {}
    for name, value in changes.items():
        found = limit_changes({name: value}, engine, context)[0]
        key = str(name).lstrip("-").replace("-", "_")  # a flag or a hyphenated name, as a field
        for limit in set(found) & STEP_KIND_LIMITS:
            if key in LIMITS:  # a neutral name: the engine's own field carries it
                field = caps.field(limit)
                if field:
                    out[field] = found[limit]
            else:
                out[key] = value
    return out


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
