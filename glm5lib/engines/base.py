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

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from glm5lib.errors import ConfigError

__all__ = ["ACTS_ON", "LIMITS", "AutomaticValue", "Capabilities", "EngineAdapter", "EngineConfig", "LaunchRequest", "Lever",
           "Limits", "Program", "ServingRole", "StepBenchmark"]

#: what a lever may act on
ACTS_ON = ("running", "prefill", "memory")

#: The engine-neutral limits: the one vocabulary diagnosis, diff, forecast, report, tuner and
#: widgets speak. Each adapter maps its own fields (``Capabilities.fields``), the facts its log
#: writes at start-up (``Capabilities.startup_keys``) and its /metrics names onto these; an
#: engine's own spelling appears outside its folder only in text its adapter renders.
LIMITS: dict[str, str] = {
    "running_cap": "the cap on requests running at once",
    "token_budget": "the tokens one scheduler step may compute",
    "prefill_chunk": "the largest piece of one prompt prefilled in one step",
    "kv_tokens": "the tokens the KV pool holds",
    "kv_fraction": "the GPU-memory fraction for weights and the KV pool",
    "graph_max_batch": "the largest batch captured as a CUDA graph",
    "graphs_off": "CUDA graphs switched off",
    "frontend_workers": "the serving processes that receive requests and stream tokens back (one core each)",
    "stream_interval": "the tokens a streamed chunk carries",
    "admission_reserve": "the scale of the future tokens the admission keeps free for each running request "
                         "(1: the engine's default)",
}


def whole_size(value: Any) -> int | None:
    """A count of tokens or requests as an engine takes it: a number, or text with a ``k``/``m``/``g``
    suffix (``64k``, as SGLang 0.5.23 reads sizes); None where it is none or unreadable."""
    if value is None or isinstance(value, bool):
        return None
    text = str(value).strip().lower()
    scale = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}.get(text[-1:], 1)
    try:
        return int(float(text[:-1] if scale > 1 else text) * scale)
    except ValueError:
        return None


#: the limits that are whole numbers of requests or tokens (the others: a fraction, a switch)
_COUNT_LIMITS = ("running_cap", "token_budget", "prefill_chunk", "kv_tokens", "graph_max_batch", "frontend_workers",
                 "stream_interval")


@dataclass(frozen=True)
class ServingRole:
    """One kind of serving process of an engine's front end (HTTP, tokenizer, detokenizer): the
    work it does grows with the tokens it streams, and it runs on one core per process, so it sets
    a ceiling on the tokens the clients receive however fast the engine steps.

    ``patterns`` pick its processes out of a level's per-process CPU (``name[pid] 99%``);
    ``workers_field`` is the engine's field that sets how many processes share its work;
    ``per_chunk`` says its work is per streamed chunk (a larger stream interval divides it);
    ``stream_growth`` is how much its work per token grows per doubling of the live streams beyond
    those a phase ran (0: none known), with ``growth_source`` saying where that figure comes from."""

    name: str
    patterns: tuple[str, ...]
    workers_field: str | None = None
    per_chunk: bool = True
    description: str = ""
    stream_growth: float = 0.0
    growth_source: str = ""

    def matches(self, process: str) -> bool:
        return any(p in process for p in self.patterns)


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
    #: one scheduler step carries prefill chunks and decode tokens together under one token
    #: budget (vLLM); False: prefill runs in batches of its own (SGLang)
    mixed_steps: bool = False
    #: its decode lines come every so many scheduler steps (SGLang's ``decode_log_interval``), not every
    #: so many seconds, so a small batch writes more lines per second: a level's batch is read
    #: weighted by the time each line stands for (:mod:`glm5lib.diagnose.linetime`)
    decode_lines_per_steps: bool = False
    #: its decode lines say whether each step replayed a CUDA graph (SGLang's ``cuda graph:``)
    logs_graph_use: bool = False
    #: its word for sending running requests back to the queue when KV runs out
    requeue_word: str = "retraction"
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

    #: the configuration fields a report states for a phase, in order
    report_fields: tuple[str, ...] = ()
    #: fields known to leave a random-prompt workload's step time alone -> why (prefix caching)
    neutral_fields: Mapping[str, str] = field(default_factory=dict)
    #: the configuration fields of limits the ``*_field`` facts above do not name
    #: (limit -> the engine's field: ``{"kv_tokens": "max_total_tokens"}``)
    more_fields: Mapping[str, str] = field(default_factory=dict)
    #: other spellings of a limit's field, in some release (field -> limit)
    field_aliases: Mapping[str, str] = field(default_factory=dict)
    #: limit -> the start-up fact its log adapter writes for the value in force
    startup_keys: Mapping[str, str] = field(default_factory=dict)
    #: the start-up fact its log adapter writes with the prefill token counts captured as CUDA graphs
    #: (a list); "" where its log says none
    prefill_capture_key: str = ""
    #: the field that sets the largest prefill step captured as a CUDA graph; "" where it has none
    prefill_graph_max_field: str = ""
    #: field -> the start-up fact its log writes with the value the engine resolved for it
    #: (a diff compares that where the field was left unset)
    resolved_facts: Mapping[str, str] = field(default_factory=dict)
    #: the processes of its serving front end, by role (the first is the one ``frontend_workers``
    #: counts); () where the front end cannot be told apart from the engine
    serving_roles: tuple[ServingRole, ...] = ()
    #: the flag that turns its ``/metrics`` on (SGLang's ``--enable-metrics``); None: always served
    metrics_flag: str | None = None

    @property
    def fields(self) -> dict[str, str]:
        """limit -> the engine's own configuration field (only the limits it has)."""
        out = {
            "running_cap": self.running_cap_field, "token_budget": self.token_budget_field,
            "kv_fraction": self.kv_fraction_field, "graph_max_batch": self.cuda_graph_bs_field,
            "graphs_off": self.cuda_graph_off_field, **self.more_fields,
        }
        return {k: v for k, v in out.items() if v}

    def field(self, limit: str) -> str | None:
        """The engine's own field for a neutral ``limit`` (:data:`LIMITS`); None where it has none."""
        _check_limit(limit)
        return self.fields.get(limit)

    def flag(self, limit: str) -> str | None:
        """A neutral ``limit`` as the engine's command-line flag (``"--max-num-seqs"``)."""
        name = self.field(limit)
        return "--" + name.replace("_", "-") if name else None

    def limits_set_by(self, name: str) -> list[str]:
        """Every neutral limit an engine field or flag sets (one field may set two: transformers
        serve's ``cb_max_batch_tokens`` is its token budget and bounds its running batch)."""
        key = str(name).lstrip("-").replace("-", "_")
        if key in LIMITS:
            return [key]
        found = [limit for limit, own in self.fields.items() if own == key]
        alias = self.field_aliases.get(key)
        return found or ([alias] if alias else [])

    def limit_of(self, name: str) -> str | None:
        """The neutral limit an engine field or flag sets (``"--max-num-seqs"`` -> ``"running_cap"``);
        a neutral name is returned as it is; None for a field outside the vocabulary; the first
        of :meth:`limits_set_by` for a field that sets two."""
        found = self.limits_set_by(name)
        return found[0] if found else None

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("neutral_fields", "more_fields", "field_aliases", "startup_keys", "resolved_facts"):
            out[k] = dict(out[k])
        out["serving_roles"] = [dict(r.__dict__) for r in self.serving_roles]
        out["cap_flag"] = self.cap_flag
        out["fields"] = self.fields
        return out


def _thousands(value: Any) -> str:
    return f"{value:,}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _check_limit(limit: str) -> None:
    if limit not in LIMITS:
        raise ConfigError(f"{limit!r} is not a limit; valid: {', '.join(LIMITS)}", field="limit", valid=list(LIMITS))


@dataclass(frozen=True)
class AutomaticValue:
    """What an engine chose at start-up for a field left unset: ``value`` when the rule's inputs
    are known, else None with every value it can give in ``candidates``; ``how`` names the rule
    and its inputs; ``text``, where given, is the whole statement (value included) a diff shows."""

    field: str
    value: Any
    candidates: tuple[Any, ...] = ()
    how: str = ""
    text: str | None = None

    def statement(self) -> str:
        """``"2,048 by SGLang's rule ..."``: the value (or the least it can be) and how it is known."""
        if self.text:
            return self.text
        if self.value is not None:
            return f"{_thousands(self.value)} by {self.how}"
        return f"at least {_thousands(self.candidates[0])} by {self.how}" if self.candidates else self.how


@dataclass(frozen=True)
class Limits:
    """The limits in force on one server, by their neutral names, each with where it came from.

    Built by :meth:`EngineAdapter.limits` from a server's arguments and the facts its log wrote
    at start-up; a limit the evidence does not give is None (source ``"unset"``)."""

    values: Mapping[str, Any] = field(default_factory=dict)
    sources: Mapping[str, str] = field(default_factory=dict)
    #: limit -> the engine's name for the value read (its field, or its start-up fact)
    names: Mapping[str, str] = field(default_factory=dict)
    #: limit -> how the engine's own rule chose it, for a limit left unset that it chooses
    automatic: Mapping[str, str] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        if name in LIMITS:
            return self.values.get(name)
        raise AttributeError(name)

    def get(self, limit: str, default: Any = None) -> Any:
        _check_limit(limit)
        value = self.values.get(limit)
        return default if value is None else value

    def source(self, limit: str) -> str:
        _check_limit(limit)
        return self.sources.get(limit, "unset")

    def name(self, limit: str) -> str | None:
        """The engine's own name of the field or fact ``limit``'s value was read from."""
        _check_limit(limit)
        return self.names.get(limit)

    def to_dict(self) -> dict[str, Any]:
        return {k: {"value": self.values.get(k), "source": self.source(k)} for k in LIMITS}


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
    #: the values the engine runs at full speed, where it has such (SGLang's prefill chunk: the
    #: token counts it captures as prefill CUDA graphs; a chunk between two runs every full chunk
    #: eager); () where every value in bounds is alike. A search measures only these.
    grid: tuple[float, ...] = ()

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

    def on_grid(self) -> list[float]:
        """The values of :attr:`grid` within ``[low, high]``, in order; [] where the lever has no grid."""
        return sorted({float(v) for v in self.grid if self.low <= v <= self.high})

    def snap(self, value: float) -> float | int:
        """``value`` clamped, then moved to the nearest value of the grid in bounds (in ratio; the
        larger of two as near), where the lever has one."""
        v = self.clamp(value)
        values = self.on_grid()
        if not values or v <= 0:
            return v
        best = min(values, key=lambda g: (abs(math.log(g / float(v))), -g))
        return self.clamp(best)

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
                "description": self.description, "flag": self.flag, "step": self.step, "acts_on": self.acts_on,
                "grid": list(self.on_grid())}


@dataclass(frozen=True)
class Program:
    """The server an engine runs as ``python -m <module>`` from a configuration, and what it
    needs before it starts (:func:`glm5lib.engines.sglang.launch` reads it)."""

    module: str
    #: the configuration must name a model (the stand-in models none)
    requires_model: bool = True
    #: the package the interpreter must have (None: glm5lib's own)
    requires_package: str | None = None
    #: what to do when it is missing
    install_hint: str = ""
    #: it parses the flags of the configuration's release when told which (``--sim-release``)
    emulates_release: bool = False


@dataclass(frozen=True)
class StepBenchmark:
    """The engine's own offline benchmark of one decode step at chosen batch sizes, in one process
    launch without its HTTP server (SGLang's ``bench_one_batch``, vLLM's offline engine).

    ``command(args, batches, input_len, output_len, graphs_off=None, python=None, changes=None)`` is
    its argv for a phase's server arguments (graphs as they are, or switched off/on; ``changes``: the
    fields of a change being forecast that decide which steps replay a graph); ``parse(text)`` reads its
    output into rows of ``batch``, ``step_ms`` (one decode step), ``prefill_ms``, ``graphs`` (the step
    replayed a CUDA graph: True/False, None for an engine without graphs); ``parse(text,
    graphs_off=True)`` marks every step eager."""

    title: str
    command: Callable[..., list[str]]
    parse: Callable[..., list[dict[str, Any]]]
    #: what to install or where it runs, for an error when the command cannot start
    hint: str = ""
    #: () -> the interpreter that runs it (None: this one)
    python: Callable[[], str] | None = None
    #: (config) -> environment variables it needs beside the configuration's own (vLLM's thread
    #: binding under a CPU layout)
    env: Callable[[Any], Mapping[str, str]] | None = None


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
    #: name or path -> configuration; None: the configuration class's own ``load`` (where it
    #: has one), else the engine takes no configuration
    config_loader: Callable[[Any], Any] | None = None
    #: (request) -> the started server object
    launcher: Callable[[LaunchRequest], Any] | None = None
    #: the server :func:`glm5lib.engines.sglang.launch` runs from this engine's configuration
    program: Program | None = None
    #: (release) -> levers
    lever_maker: Callable[[str | None], list[Lever]] | None = None
    #: (field, args, startup, environment) -> an AutomaticValue-like object or None
    automatic_resolver: Callable[..., Any] | None = None
    #: (server args) -> the release of the engine they fit (its catalogue's), None: not known
    release_reader: Callable[[Mapping[str, Any]], str | None] | None = None
    #: (server args) -> the defaults of the release they fit, for fields left unset
    defaults_reader: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    #: (values, sources, names, args, startup) -> None: limits the generic reading cannot work out
    #: (SGLang: graphs off per phase, the graph ceiling inside its cuda_graph_config)
    limits_hook: Callable[..., None] | None = None
    #: (field, value, changes, args) -> (limit, value) for a change the field map cannot translate
    #: (vLLM's pool in blocks), None where the engine has no such field
    change_hook: Callable[..., tuple[str, Any] | None] | None = None
    #: (largest captured batch) -> the decode batch sizes the engine captures as CUDA graphs up to
    #: it (a batch between two runs padded to the next); None: every batch size, no padding
    graph_schedule: Callable[[int], list[int]] | None = None
    #: the engine's offline step benchmark; None where it has none
    step_benchmark: StepBenchmark | None = None
    #: (url, api_key, timeout) -> what the server at ``url`` says of itself when this engine
    #: serves there (read from its own endpoints, secrets masked where they are not arguments),
    #: None when it is not this engine; None: the engine cannot be told from outside
    identify: Callable[[str, str | None, float], Mapping[str, Any] | None] | None = None
    #: (what ``identify`` returned) -> the engine's configuration, where it holds the server's
    #: arguments (SGLang's server info); None where it does not
    config_from_info: Callable[[Mapping[str, Any]], Any] | None = None
    #: the log adapter (a ``glm5lib.logs.engine.LogEngine``) of an engine defined outside glm5lib,
    #: registered with it (:func:`glm5lib.engines.register`); the bundled engines' are found by name
    log_reader: Any = None

    def __post_init__(self) -> None:
        if self.config_loader is None and callable(getattr(self.config_type, "load", None)):
            object.__setattr__(self, "config_loader", self.config_type.load)

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

    def limits(self, args: Mapping[str, Any] | None = None, startup: Mapping[str, Any] | None = None,
               environment: Mapping[str, Any] | None = None) -> Limits:
        """The :class:`Limits` in force: the value the log wrote at start-up, else the argument
        given, else (an engine that chooses values at start-up) what it chose, else the engine's
        default running cap; each with its source."""
        caps, startup = self.capabilities, startup or {}
        # arguments under their field names or as flags (an argv read back: "--max-num-seqs")
        args = {**{str(k).lstrip("-").replace("-", "_"): v for k, v in (args or {}).items()}, **(args or {})}
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        names: dict[str, str] = {}
        chosen: dict[str, str] = {}
        defaults: Mapping[str, Any] | None = None
        for limit in LIMITS:
            value, where = _startup_value(caps, limit, startup)
            named = caps.startup_keys.get(limit)
            own = caps.fields.get(limit)
            if value is None and own:
                for name in [own, *(a for a, lim in caps.field_aliases.items() if lim == limit)]:
                    value = _as_limit(limit, args.get(name))
                    if value is None and name not in args and self.defaults_reader is not None:
                        defaults = self.defaults_reader(args) if defaults is None else defaults
                        value = _as_limit(limit, defaults.get(name))
                    if value is not None:
                        where, named = "server arguments", name
                        break
            if value is None and limit == "running_cap" and caps.resolves_automatic_values and caps.running_cap_field:
                auto = self.automatic(caps.running_cap_field, args, startup, environment)
                if auto is not None and auto.value is not None:
                    value = int(auto.value)
                    where = f"value {self.title} chose, {caps.running_cap_field} being unset: {auto.how}"
                    named = caps.running_cap_field
                    chosen[limit] = auto.how
            if value is not None:
                values[limit], sources[limit], names[limit] = value, where, named or own or limit
        if self.limits_hook is not None:
            self.limits_hook(values, sources, names, args, startup)
        return Limits(values, sources, names, chosen)

    def release_of(self, args: Mapping[str, Any]) -> str | None:
        """The engine release whose catalogue fits ``args``; None where the adapter cannot tell."""
        return self.release_reader(args) if self.release_reader is not None else None

    def limit_changes(self, changes: Mapping[str, Any],
                      args: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
        """``changes`` under the engine's own field or flag names as (limit -> value, the fields
        outside the vocabulary -> value); a value of None unsets the limit."""
        limits: dict[str, Any] = {}
        others: dict[str, Any] = {}
        for name, value in changes.items():
            found = self.capabilities.limits_set_by(name)
            if not found and self.change_hook is not None:
                hooked = self.change_hook(str(name).lstrip("-").replace("-", "_"), value, changes, args or {})
                if hooked is not None:
                    found, value = [hooked[0]], hooked[1]
            if not found:
                others[name] = value
            for limit in found:
                limits[limit] = None if value is None else (_as_limit(limit, value) if limit != "graphs_off"
                                                            else _as_limit(limit, value) is True)
        return limits, others

    def prefill_grid(self, release: str | None = None) -> list[float]:
        """The prefill chunk sizes ``release`` captures as CUDA graphs (its prefill lever's grid);
        [] where the engine runs every chunk alike."""
        return next((lev.on_grid() for lev in self.levers(release) if lev.acts_on == "prefill" and lev.grid), [])

    def captured_prefill(self, startup: Mapping[str, Any] | None) -> list[int]:
        """The prefill token counts a phase's start-up log says were captured as CUDA graphs, in
        order; [] where the log has no such list."""
        key = self.capabilities.prefill_capture_key
        listed = (startup or {}).get(key) if key else None
        if not isinstance(listed, (list, tuple)):
            return []
        return sorted({int(t) for t in listed if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0})

    def graph_sizes(self, largest: int | None, running_cap: int | None = None) -> tuple[int, ...]:
        """The decode batch sizes captured as CUDA graphs when ``largest`` is the ceiling and at
        most ``running_cap`` requests run (the engine trims capture to its request pool and
        captures the pool's size itself); () where the engine's schedule is not known."""
        if not largest or self.graph_schedule is None:
            return ()
        sizes = [int(b) for b in self.graph_schedule(int(largest)) if b <= largest]
        if running_cap and sizes and max(sizes) > running_cap:
            sizes = [b for b in sizes if b <= running_cap] + [int(running_cap)]
        return tuple(sorted(set(sizes)))

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


def _as_limit(limit: str, value: Any) -> Any:
    """``value`` as a limit's kind (a positive whole number, a fraction, a switch); None otherwise."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        return None
    if limit == "graphs_off":
        if isinstance(value, str):
            return value.strip().lower() in ("true", "1", "yes")
        return bool(value)
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not number > 0:
        return None
    return int(number) if limit in _COUNT_LIMITS else number


def _startup_value(caps: Capabilities, limit: str, startup: Mapping[str, Any]) -> tuple[Any, str]:
    key = caps.startup_keys.get(limit)
    if not key or key not in startup:
        return None, "unset"
    value = startup[key]
    if isinstance(value, (list, tuple)):  # captured batch sizes: the largest
        numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        value = max(numbers) if numbers else None
    value = _as_limit(limit, value)
    return value, "start-up log line" if value is not None else "unset"
