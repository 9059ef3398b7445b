"""What every engine adapter offers: capability facts, tuning levers, launching, its /metrics names.

An :class:`EngineAdapter` is one engine as the rest of the library sees it. Code outside
``glm5lib.engines`` reads an engine's facts here instead of comparing its name:

* :class:`Capabilities`: how the engine behaves where the diagnosis must know it (does it
  reserve KV for future tokens when it admits a request, does its log show prefill batches) and
  what it calls the knobs the rules and the tuner reason about (its running cap, its per-step
  token budget, its KV memory fraction, its largest CUDA-graph batch);
* :meth:`EngineAdapter.levers`: those knobs as :class:`Lever` objects with safe bounds, for a tuner;
* :attr:`EngineAdapter.metrics`: the one map from the evidence schema's columns to the engine's
  ``/metrics`` gauge names;
* :meth:`EngineAdapter.launch`: start its server for one phase (argv, environment, readiness);
* :meth:`EngineAdapter.load_config` and :attr:`EngineAdapter.config_type`: its configuration;
* :meth:`EngineAdapter.automatic`: a value the engine chooses at start-up for a field left unset.

The registry in :mod:`glm5lib.engines` holds one adapter per engine folder.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from glm5lib.errors import ConfigError

__all__ = ["ACTS_ON", "Capabilities", "EngineAdapter", "EngineConfig", "LaunchRequest", "Lever"]

#: what a lever may act on
ACTS_ON = ("running", "prefill", "memory")


@runtime_checkable
class EngineConfig(Protocol):
    """What a server configuration of any engine offers (SGLang's ``ServerConfig``, ``VllmConfig``)."""

    def get(self, field: str, default: Any = None) -> Any:
        """A field's value under the engine's own name."""

    def with_changes(self, **changes: Any) -> EngineConfig:
        """A copy with ``changes`` applied (validated against the engine's flags)."""

    def to_argv(self) -> list[str]:
        """The engine's command-line arguments for this configuration."""

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the configuration as JSON."""


@dataclass(frozen=True)
class Capabilities:
    """Facts about an engine that rules, the report and the tuner read instead of its name.

    A field name is the engine's own (its argument parser's dest); None where the engine has no
    such knob or the fact is not known (an engine launched from an arbitrary command)."""

    #: reserves KV room for the tokens a request will generate when it admits it (SGLang's
    #: new_token_ratio), so requests can wait while the pool looks half empty
    reserves_future_tokens: bool = False
    #: its log has one line per prefill batch (new sequences, new and cached tokens)
    logs_prefill_lines: bool = False
    #: its log has one line per decode interval (running and queued requests, KV usage)
    logs_decode_lines: bool = False
    #: the field that bounds the tokens one scheduler step may compute
    token_budget_field: str | None = None
    #: the field that caps the requests running at once
    running_cap_field: str | None = None
    #: the field that sets the GPU-memory fraction for weights and KV cache
    kv_fraction_field: str | None = None
    #: the field that sets the largest batch captured as a CUDA graph
    cuda_graph_bs_field: str | None = None
    #: the field (a switch) that turns CUDA graphs off
    cuda_graph_off_field: str | None = None
    #: its word for sending running requests back to the queue when KV runs out
    requeue_word: str = "retraction"
    #: its configuration is checked against a catalogue per release of the engine
    has_releases: bool = False
    #: it logs only the arguments given and chooses some values itself at start-up
    #: (:meth:`EngineAdapter.automatic` works them out)
    resolves_automatic_values: bool = False
    #: it accepts flags outside its catalogue (the stand-in's own ``--sim-*`` options)
    accepts_foreign_flags: bool = False
    #: it is launched from a configuration file (CONFIG) rather than an argv template
    launches_from_config: bool = True
    #: it is the stand-in: timings from a model, not from GPUs
    is_standin: bool = False
    #: refuses a per-step token budget below its running cap (vLLM: max_num_batched_tokens >=
    #: max_num_seqs), so a tuner bounds each by the other
    budget_at_least_cap: bool = False
    #: its running cap where the configuration leaves it unset (the bound the rule above uses)
    default_running_cap: int | None = None
    #: the backend that runs this engine's configurations where none is named: the stand-in for an
    #: engine that needs GPUs; None: the engine itself
    standin_backend: str | None = None
    #: the request API a load test uses where none is named
    default_api: str = "generate"
    #: a load test sends prompts as token ids (exact lengths); False: as text
    token_id_prompts: bool = True

    @property
    def cap_flag(self) -> str | None:
        """The running cap as a command-line flag (``--max-num-seqs``)."""
        return "--" + self.running_cap_field.replace("_", "-") if self.running_cap_field else None

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["cap_flag"] = self.cap_flag
        return out


@dataclass(frozen=True)
class Lever:
    """One knob a tuner may turn, with bounds the engine accepts without harm.

    ``field`` is the engine's own field name, ``kind`` ``"int"`` or ``"float"``; ``low``/``high``
    are inclusive; ``step`` is the natural increment (powers of two for batch sizes: ``"x2"``)."""

    field: str
    kind: str = "int"
    low: float = 1
    high: float = 1024
    description: str = ""
    flag: str | None = None
    step: str = "x2"
    #: what the lever mostly acts on: "running" (the batch), "prefill" (the per-step token
    #: budget) or "memory" (the KV pool)
    acts_on: str = "running"

    def __post_init__(self) -> None:
        if self.kind not in ("int", "float"):
            raise ConfigError(f"Lever {self.field!r}: kind {self.kind!r} is not 'int' or 'float'",
                              field="kind", valid=["int", "float"])
        if not self.low <= self.high:
            raise ConfigError(f"Lever {self.field!r}: low {self.low} is above high {self.high}", field="low")
        if self.acts_on not in ACTS_ON:
            raise ConfigError(f"Lever {self.field!r}: acts_on {self.acts_on!r} is not one of {', '.join(ACTS_ON)}",
                              field="acts_on", valid=list(ACTS_ON))

    def clamp(self, value: float) -> float | int:
        """``value`` moved into ``[low, high]``, as this lever's kind (floats to 3 places)."""
        v = min(max(float(value), float(self.low)), float(self.high))
        return round(v) if self.kind == "int" else round(v, 3)

    def check(self, value: Any) -> int | float:
        """``value`` as this lever's kind, or ConfigError naming the lever and its bounds."""
        bad = isinstance(value, bool) or not isinstance(value, (int, float))
        if not bad and self.kind == "int" and value != int(value):
            bad = True
        if bad or not self.low <= value <= self.high:
            raise ConfigError(
                f"{self.field}={value!r} is outside its safe range: a {'whole number' if self.kind == 'int' else 'number'} "
                f"from {self.low:g} to {self.high:g}", field=self.field)
        return int(value) if self.kind == "int" else float(value)

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "kind": self.kind, "low": self.low, "high": self.high,
                "description": self.description, "flag": self.flag, "step": self.step, "acts_on": self.acts_on}


@dataclass
class LaunchRequest:
    """Everything one phase's launch may pass an adapter (each adapter uses what it needs)."""

    config: Any = None
    log_path: Path | None = None
    ready_timeout: float = 600.0
    api_key: str | None = None
    extra_args: Sequence[str] = ()
    command: Sequence[str] | None = None
    command_changes: Mapping[str, Any] | None = None
    model: str | None = None
    sim_profile: str | None = None
    #: the port to serve on (None: a free one); engines launched from a ServerConfig take its port
    port: int | None = None


@dataclass(frozen=True)
class EngineAdapter:
    """One engine: its name, facts, config, launch, /metrics names and levers."""

    name: str
    title: str
    description: str
    capabilities: Capabilities
    #: evidence-schema column -> this engine's /metrics gauge names for it (first found wins)
    metrics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: the engine whose log adapter reads this engine's log (``glm5lib.logs.engine``), None: detect
    log_engine: str | None = None
    #: the configuration class (None: the engine takes an argv template)
    config_type: type | None = None
    #: name or path -> configuration; None where the engine takes no configuration
    config_loader: Callable[[Any], Any] | None = None
    #: (request) -> the started server object
    launcher: Callable[[LaunchRequest], Any] | None = None
    #: (release) -> levers
    lever_maker: Callable[[str | None], list[Lever]] | None = None
    #: (field, args, startup, environment) -> an AutomaticValue-like object or None
    automatic_resolver: Callable[..., Any] | None = None
    #: release -> human description of its flag catalogue (releases it knows)
    releases: Callable[[], list[str]] | None = None

    def launch(self, request: LaunchRequest) -> Any:
        """Start this engine's server for ``request``; ConfigError when it cannot be launched."""
        if self.launcher is None:
            raise ConfigError(f"engine {self.name!r} cannot be launched from glm5lib", field="backend")
        return self.launcher(request)

    def load_config(self, name_or_path: Any) -> Any:
        """The engine's configuration named by ``name_or_path`` (a shipped name or a JSON file)."""
        if self.config_loader is None:
            raise ConfigError(f"engine {self.name!r} takes no configuration file (it is launched "
                              "from a command template)", field="config")
        return self.config_loader(name_or_path)

    def levers(self, release: str | None = None) -> list[Lever]:
        """The knobs a tuner may turn on this engine (running cap, per-step token budget,
        CUDA-graph batch size, KV memory fraction), with safe bounds; [] where none are known."""
        return list(self.lever_maker(release)) if self.lever_maker else []

    def lever(self, field_name: str, release: str | None = None) -> Lever:
        """One lever by field name; ConfigError naming the valid ones."""
        found = {lv.field: lv for lv in self.levers(release)}
        if field_name not in found:
            raise ConfigError(f"engine {self.name!r} has no lever {field_name!r}; valid: {', '.join(found) or 'none'}",
                              field=field_name, valid=list(found))
        return found[field_name]

    def automatic(self, field_name: str, args: Mapping[str, Any], startup: Mapping[str, Any] | None = None,
                  environment: Mapping[str, Any] | None = None) -> Any:
        """The value the engine chose at start-up for ``field_name`` left unset in ``args``, as
        an object with ``value``, ``candidates`` and ``how``; None where the engine logs it or
        does not choose it."""
        if self.automatic_resolver is None:
            return None
        return self.automatic_resolver(field_name, args, startup, environment)

    def gauges(self) -> list[str]:
        """Every /metrics gauge name this engine's map knows."""
        return [n for names in self.metrics.values() for n in names]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "title": self.title, "description": self.description,
            "capabilities": self.capabilities.to_dict(),
            "metrics": {k: list(v) for k, v in self.metrics.items()},
            "log_engine": self.log_engine,
            "config_type": self.config_type.__name__ if self.config_type else None,
            "levers": [lv.to_dict() for lv in self.levers()],
        }
