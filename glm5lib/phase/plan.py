"""What one phase measures, as one plan: the engine, the load and the telemetry, checked once.

A :class:`PhasePlan` is made of frozen parts, each checked when it is made, so a bad value is
refused with a :class:`~glm5lib.errors.ConfigError` naming the field and what is valid before any
server is launched or request sent:

- :class:`EnginePlan`: the server: a registered engine launched from its configuration (or from a
  command template), or the http(s) URL of a running server to attach to;
- :class:`LoadPlan`: the sweep: its levels and one :class:`~glm5lib.loadgen.SweepSettings`
  (the one source of the sweep's defaults);
- :class:`TelemetryOptions`: the GPU sampler and the ``/metrics`` scraper, and how often each reads.

What a measurement reports to (the API key, progress bars, a callback, a stop event, a server
that is already running) is not part of the plan: :func:`glm5lib.phase.run_phase` takes those.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glm5lib import cpus as cpu_layout
from glm5lib import engines
from glm5lib.errors import ConfigError
from glm5lib.loadgen.settings import DEFAULT_CONCURRENCIES, SweepSettings, sweep_levels

__all__ = [
    "DEFAULT_CONCURRENCIES",
    "EnginePlan",
    "LoadPlan",
    "PhasePlan",
    "TelemetryOptions",
    "check_backend",
]


def check_backend(backend: str) -> str:
    """``backend`` when it is a registered engine or an http(s) URL; else a ConfigError naming both."""
    # the registry as it is now: an engine registered from outside glm5lib is a backend too
    if backend in engines.names() or str(backend).startswith(("http://", "https://")):
        return backend
    choices = ", ".join(f"{name!r} ({engines.get(name).description})" for name in engines.names())
    raise ConfigError(
        f"BACKEND {backend!r} is not valid: use {choices} or the http(s) URL of a running server to attach to",
        field="BACKEND",
        valid=[*engines.names(), "http://HOST:PORT"],
    )


def _positive_seconds(name: str, value: Any) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        raise ConfigError(f"{name}={value!r} must be a positive number of seconds", field=name)


def _argv(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"{name}={value!r} must be a list of command-line arguments", field=name,
                          valid=['["--flag", "value"]'])
    return tuple(str(v) for v in value)


@dataclass(frozen=True)
class EnginePlan:
    """The server of a phase.

    ``backend``: a registered engine (:func:`glm5lib.engines.names`: ``sim``, ``sglang``, ``vllm``,
    ``command``...) launched here from ``config`` (an engine configuration; None for ``command``,
    which runs the argv template ``command`` with flag ``command_changes``), or the http(s) URL of
    a running server to attach to (``attach_log``: its log file, if readable here). ``model``: the
    model a command template's ``{model}`` names; ``sim_profile``: the stand-in's profile;
    ``extra_args``: appended to the launched argv; ``ready_timeout``: seconds to wait for it.
    """

    backend: str = "sim"
    config: Any = None
    sim_profile: str | None = None
    ready_timeout: float = 600.0
    extra_args: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    command_changes: Mapping[str, Any] | None = None
    model: str | None = None
    attach_log: str | Path | None = None

    def __post_init__(self) -> None:
        if self.config is not None and not isinstance(self.config, types := engines.config_types()):
            names = [t.__name__ for t in types]
            raise ConfigError(
                f"server={self.config!r} is neither a ServerConfig to launch (any engine's: {', '.join(names)}) "
                "nor a running server",
                field="server", valid=[*names, "a glm5lib.server object", "None (command or URL backend)"])
        check_backend(self.backend)
        _positive_seconds("ready_timeout", self.ready_timeout)
        object.__setattr__(self, "extra_args", _argv("extra_args", self.extra_args))
        if self.command is not None:
            object.__setattr__(self, "command", _argv("command", self.command))
        if self.command_changes is not None and not isinstance(self.command_changes, Mapping):
            raise ConfigError(f"command_changes={self.command_changes!r} must be a mapping of flag -> value",
                              field="command_changes", valid=["{'--max-batch': 256}"])

    @property
    def attaches(self) -> bool:
        """Whether the phase attaches to a running server (``backend`` is a URL)."""
        return self.backend not in engines.names()


@dataclass(frozen=True)
class LoadPlan:
    """The sweep of a phase: its levels (``concurrencies``) and what each sends (``settings``)."""

    concurrencies: tuple[int, ...] | int = DEFAULT_CONCURRENCIES
    settings: SweepSettings = field(default_factory=SweepSettings)

    def __post_init__(self) -> None:
        if not isinstance(self.settings, SweepSettings):
            raise ConfigError(f"settings={self.settings!r} must be a SweepSettings", field="settings")
        if not isinstance(self.concurrencies, int) and isinstance(self.concurrencies, Sequence):
            object.__setattr__(self, "concurrencies", tuple(self.concurrencies))
        sweep_levels(self.concurrencies, self.settings)  # the levels checked against the settings

    @classmethod
    def of(cls, concurrencies: Sequence[int] | int = DEFAULT_CONCURRENCIES, **settings: Any) -> LoadPlan:
        """A plan from its levels and the :class:`~glm5lib.loadgen.SweepSettings` fields that
        differ from their defaults (``LoadPlan.of([1, 64], input_len=128, duration=30)``)."""
        return cls(concurrencies, SweepSettings(**settings))


@dataclass(frozen=True)
class TelemetryOptions:
    """The GPU sampler (every ``gpu_interval`` s) and the ``/metrics`` scraper (every
    ``metrics_interval`` s), each on or off; one with nothing to read is noted, not an error."""

    gpu: bool = True
    gpu_interval: float = 0.1
    metrics: bool = True
    metrics_interval: float = 1.0

    def __post_init__(self) -> None:
        for name in ("gpu", "metrics"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}={getattr(self, name)!r} must be True or False", field=name,
                                  valid=["True", "False"])
        _positive_seconds("gpu_interval", self.gpu_interval)
        _positive_seconds("metrics_interval", self.metrics_interval)


@dataclass(frozen=True)
class PhasePlan:
    """One phase: the server (``engine``; None when a running server is handed to the run), the
    sweep (``load``), the telemetry, the CPU layout (``cpus``: :mod:`glm5lib.cpus`, ``"split"``,
    ``"0-5/6,7"``; None: the ``GLM5_CPUS`` environment variable's, if any) and whether the server
    stays up afterwards (``keep_running``; None: a server launched for the phase is stopped, one
    handed in is left running)."""

    engine: EnginePlan | None = field(default_factory=EnginePlan)
    load: LoadPlan = field(default_factory=LoadPlan)
    telemetry: TelemetryOptions = field(default_factory=TelemetryOptions)
    cpus: str | None = None
    keep_running: bool | None = None

    def __post_init__(self) -> None:
        for name, kind in (("engine", EnginePlan), ("load", LoadPlan), ("telemetry", TelemetryOptions)):
            value = getattr(self, name)
            if not isinstance(value, kind) and not (name == "engine" and value is None):
                raise ConfigError(f"{name}={value!r} must be a {kind.__name__}", field=name, valid=[kind.__name__])
        cpu_layout.layout(self.cpus)  # a bad layout is refused here, before anything starts
        if self.keep_running is not None and not isinstance(self.keep_running, bool):
            raise ConfigError(f"keep_running={self.keep_running!r} must be True, False or None", field="keep_running",
                              valid=["True", "False", "None"])
