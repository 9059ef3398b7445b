"""The settings of a sweep: one typed, validated object behind :func:`glm5lib.loadgen.run_sweep`.

:class:`SweepSettings` holds what a sweep sends and how it paces it (API, lengths, level bounds,
arrival mode, timeouts). It checks every field when it is made, so a bad value is refused with a
:class:`~glm5lib.errors.ConfigError` naming the field and its valid values before any request
goes out. What a sweep writes to and reports to (run folder, API key, server object, progress
bars, callback, stop event) are arguments of ``run_sweep`` itself, not settings.

It is the one carrier of these settings and of their defaults: :func:`~glm5lib.loadgen.run_sweep`
takes one (``settings=``), or its fields as keywords, which :func:`settings_keywords` lists in its
signature from the fields here and :func:`settings_from` turns into one; a phase holds one in its
:class:`glm5lib.phase.LoadPlan` (``glm5 sweep``'s options and the panel's fields default to it).
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from glm5lib.errors import ConfigError
from glm5lib.loadgen.client import API_PATHS

__all__ = ["DEFAULT_CONCURRENCIES", "MODES", "SweepSettings", "check_concurrencies", "settings_from", "settings_keywords", "sweep_levels"]

#: The levels of a sweep when none are given: the one default of ``glm5 sweep``, a phase and the panel.
DEFAULT_CONCURRENCIES: tuple[int, ...] = (1, 64, 256)

#: Arrival modes: ``closed`` keeps C requests in flight; ``poisson`` issues at a rate, capped at C.
MODES = ("closed", "poisson")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _positive_int(name: str, value: Any, *, minimum: int = 1, example: str = "") -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{name}={value!r} must be a whole number of at least {minimum}{example}", field=name)


def _positive_float(name: str, value: Any, *, unit: str, allow_zero: bool = False) -> None:
    ok = _is_number(value) and math.isfinite(float(value)) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = "0 or more" if allow_zero else "above 0"
        raise ConfigError(f"{name}={value!r} must be a number {bound} ({unit})", field=name)


@dataclass(frozen=True)
class SweepSettings:
    """What a sweep sends and how it paces it; validated when made.

    ``api``: "generate" (SGLang native), "completions" or "chat" (OpenAI-compatible); ``model``:
    the model name for OpenAI APIs (None: read from /v1/models); ``input_len``/``output_len``:
    tokens per request, lengths uniform in [len x ``range_ratio``, len]; ``dataset``: a prompt
    file instead of random prompts; ``requests_per_level`` and/or ``duration`` (seconds; requests
    in flight at the deadline are cancelled) bound each level; ``warmup``: requests before the
    first level, left out; ``mode``/``rate``: see :data:`MODES` (``rate`` in requests/s, one or a
    list, poisson only); ``seed``; ``token_ids``: random prompts as token ids (None: yes except
    for chat); ``ignore_eos``, ``temperature``, ``extra_body`` (fields merged into each request
    body, None removes one); ``read_timeout``: seconds without data before a request fails;
    ``health_interval``/``health_timeout``: seconds between /health checks and per check;
    ``resume``: skip levels already in the run folder's sweep.csv; ``steady_extend``: how far a
    duration-bound level that has not reached a steady state may run past its duration, as a
    multiple of it (0: never; see :mod:`glm5lib.loadgen.constraints`); ``exact_prompts``: size
    text prompts in the served model's tokens (its local tokenizer, else the server's counts
    during warm-up; see :mod:`glm5lib.loadgen.prompts`).
    """

    api: str = "generate"
    model: str | None = None
    input_len: int = 256
    output_len: int = 256
    range_ratio: float = 1.0
    dataset: str | Path | None = None
    requests_per_level: int | None = None
    duration: float | None = None
    warmup: int = 2
    mode: str = "closed"
    rate: float | Sequence[float] | None = None
    seed: int = 0
    token_ids: bool | None = None
    ignore_eos: bool = True
    temperature: float = 0.0
    extra_body: dict[str, Any] | None = None
    read_timeout: float = 300.0
    health_interval: float = 2.0
    health_timeout: float = 5.0
    resume: bool = True
    steady_extend: float = 1.0
    exact_prompts: bool = True

    def __post_init__(self) -> None:
        if self.api not in API_PATHS:
            raise ConfigError(f"api {self.api!r} is not valid", field="api", valid=list(API_PATHS))
        if self.mode not in MODES:
            raise ConfigError(f"mode {self.mode!r} is not valid", field="mode", valid=list(MODES))
        if self.model is not None and not isinstance(self.model, str):
            raise ConfigError(f"model={self.model!r} must be a model name (text) or None", field="model")
        _positive_int("input_len", self.input_len, example=", e.g. 256")
        _positive_int("output_len", self.output_len, example=", e.g. 256")
        if not (_is_number(self.range_ratio) and 0 <= self.range_ratio <= 1):
            raise ConfigError(f"range_ratio={self.range_ratio!r} must be between 0 and 1: lengths are uniform "
                              "in [len*ratio, len]", field="range_ratio")
        if self.requests_per_level is not None:
            _positive_int("requests_per_level", self.requests_per_level)
        if self.duration is not None and not (_is_number(self.duration) and self.duration > 0):
            raise ConfigError(f"duration={self.duration} must be above 0 seconds", field="duration")
        if not isinstance(self.warmup, (int, np.integer)) or isinstance(self.warmup, bool) or self.warmup < 0:
            raise ConfigError(f"warmup={self.warmup} must be 0 or more requests", field="warmup")
        if self.mode == "closed" and self.rate is not None:
            raise ConfigError("rate is only used with mode='poisson'", field="rate", valid=list(MODES))
        if self.mode == "poisson":
            if self.rate is None:
                raise ConfigError("mode='poisson' needs rate= (requests per second, or a list of them)", field="rate")
            rates = [self.rate] if _is_number(self.rate) else list(self.rate)  # type: ignore[arg-type]
            if not rates or any(not (_is_number(r) and r > 0) for r in rates):
                raise ConfigError(f"rate {self.rate!r} is not valid: use rates above 0 requests/s", field="rate")
        if not isinstance(self.seed, (int, np.integer)) or isinstance(self.seed, bool):
            raise ConfigError(f"seed={self.seed!r} must be a whole number", field="seed")
        if self.token_ids is None:
            object.__setattr__(self, "token_ids", self.api != "chat")
        if self.token_ids and self.api == "chat":
            raise ConfigError("api='chat' takes text prompts: leave token_ids unset or False", field="token_ids")
        for name in ("token_ids", "ignore_eos", "resume", "exact_prompts"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name}={getattr(self, name)!r} must be True or False", field=name,
                                  valid=["True", "False"])
        _positive_float("temperature", self.temperature, unit="sampling temperature", allow_zero=True)
        if self.extra_body is not None and not isinstance(self.extra_body, dict):
            raise ConfigError(f"extra_body={self.extra_body!r} must be a dict of request fields", field="extra_body")
        if self.read_timeout is not None:  # 0 or None: no read timeout
            _positive_float("read_timeout", self.read_timeout, unit="seconds without data; 0 for none",
                            allow_zero=True)
        _positive_float("steady_extend", self.steady_extend, unit="a multiple of duration; 0 never extends",
                        allow_zero=True)
        _positive_float("health_interval", self.health_interval, unit="seconds")
        _positive_float("health_timeout", self.health_timeout, unit="seconds")

    @classmethod
    def field_names(cls) -> list[str]:
        """The names of the settings, in order."""
        return [f.name for f in fields(cls)]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def settings_from(settings: SweepSettings | None, keywords: Mapping[str, Any]) -> SweepSettings:
    """The one :class:`SweepSettings` of a call: ``settings`` as given, or one made (and checked)
    from the setting ``keywords`` passed instead; both at once is a :class:`ConfigError` naming
    the keywords that differ from their defaults."""
    names = SweepSettings.field_names()
    unknown = sorted(set(keywords) - set(names))
    if unknown:
        raise ConfigError(f"{unknown} are not sweep settings", field=unknown[0], valid=names)
    if settings is None:
        return SweepSettings(**keywords)
    if not isinstance(settings, SweepSettings):
        raise ConfigError(f"settings={settings!r} must be a SweepSettings", field="settings")
    defaults = {f.name: f.default for f in fields(SweepSettings)}
    changed = sorted(k for k, v in keywords.items() if v is not defaults[k] and v != defaults[k])
    if changed:
        raise ConfigError(f"settings= and the keywords {changed} both set the sweep: use one or the other",
                          field="settings", valid=["settings", *changed])
    return settings


def settings_keywords(fn: Callable[..., Any] | None = None, *, after: str | None = None) -> Any:
    """Decorate ``fn(..., **options)`` so that its signature (help, completion) lists the
    settings' fields as keyword-only parameters with their defaults, after the parameter ``after``
    (else before the first keyword-only one), leaving out names ``fn`` has itself; a keyword that
    is neither is refused with Python's own TypeError. The fields are written once, here."""
    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        own = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
        added = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=f.type,
                                   default=None if f.default is MISSING else f.default)
                 for f in fields(SweepSettings) if f.name not in sig.parameters]
        names = [p.name for p in own]
        at = (names.index(after) + 1 if after is not None else
              next((i for i, p in enumerate(own) if p.kind is p.KEYWORD_ONLY), len(own)))
        shown = sig.replace(parameters=[*own[:at], *added, *own[at:]])

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            shown.bind(*args, **kwargs)  # TypeError for a keyword that is neither fn's nor a setting
            return fn(*args, **kwargs)

        call.__signature__ = shown  # type: ignore[attr-defined]
        return call
    return decorate if fn is None else decorate(fn)


def check_concurrencies(values: Sequence[Any], *, name: str = "concurrency", field: str = "concurrencies") -> None:
    """A :class:`ConfigError` naming ``name`` unless every value is a whole number of at least 1."""
    for c in values:
        if not isinstance(c, (int, np.integer)) or isinstance(c, bool) or c < 1:
            raise ConfigError(f"{name} {c!r} is not valid: use whole numbers of at least 1, e.g. [1, 64, 256]",
                              field=field)


def sweep_levels(concurrencies: Sequence[int] | int, settings: SweepSettings) -> list[tuple[int, float]]:
    """The sweep's levels as ``(concurrency, rate)`` pairs (rate ``inf`` for a closed loop).

    With poisson arrivals, one cap is used for every rate, one rate for every cap, or caps and
    rates pair up one to one.
    """
    conc = [concurrencies] if isinstance(concurrencies, (int, np.integer)) else list(concurrencies)
    if not conc:
        raise ConfigError("concurrencies is empty: give at least one level, e.g. [1, 64, 256]", field="concurrencies")
    check_concurrencies(conc)
    if settings.mode == "closed":
        return [(int(c), math.inf) for c in conc]
    rate = settings.rate
    rates = [float(rate)] if _is_number(rate) else [float(r) for r in rate]  # type: ignore[union-attr]
    if len(conc) == 1:
        conc = conc * len(rates)
    if len(rates) == 1:
        rates = rates * len(conc)
    if len(conc) != len(rates):
        raise ConfigError(
            f"{len(conc)} concurrency caps for {len(rates)} rates: give one cap, one rate, or as many of each",
            field="rate",
        )
    return [(int(c), r) for c, r in zip(conc, rates, strict=True)]
