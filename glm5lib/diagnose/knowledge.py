"""Knowledge files: the impact of each server argument, known flag/hardware incompatibilities.

Both live under ``data/knowledge/`` as JSON a user can extend; they are read once and cached.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from glm5lib import engines as engines_pkg
from glm5lib.engines.sglang.config import intent_flags
from glm5lib.errors import DiagnosisError
from glm5lib.paths import data_dir

__all__ = [
    "IMPACT_ORDER",
    "fill_remedy",
    "is_context_field",
    "load_engine_knobs",
    "load_impact",
    "load_incompatibilities",
    "load_remedies",
    "remedy",
]

# Impact classes, most able to move throughput first.
IMPACT_ORDER = {"high": 0, "medium": 1, "low": 2, "unknown": 3, "none": 4}



def _knowledge_path(name: str) -> Path:
    return data_dir() / "knowledge" / name


@functools.lru_cache(maxsize=8)
def _load_json(path: str) -> Any:
    p = Path(path)
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise DiagnosisError(
            f"knowledge file {p} is missing (expected in data/knowledge/)"
        ) from None
    except json.JSONDecodeError as exc:
        raise DiagnosisError(f"knowledge file {p} is not valid JSON: {exc}") from None


def load_impact(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The impact table: server-arg field -> {"impact", "weight", "rationale"}."""
    data = _load_json(str(path or _knowledge_path("impact.json")))
    fields = data.get("fields")
    if not isinstance(fields, dict):
        raise DiagnosisError(f"impact table {path or 'impact.json'} has no 'fields' object")
    if path is None:
        # Other engines' knobs rank like the SGLang fields they play the part of (engines.json).
        extra = {f: {k: v for k, v in knob.items() if k in ("impact", "weight", "rationale")}
                 for knobs in load_engine_knobs().values() for f, knob in knobs.items() if f not in fields}
        fields = {**fields, **extra}
    for name, entry in fields.items():
        if entry.get("impact") not in IMPACT_ORDER:
            raise DiagnosisError(
                f"impact table entry {name!r} has impact {entry.get('impact')!r}; "
                f"valid: {', '.join(IMPACT_ORDER)}"
            )
    return fields


def load_incompatibilities(path: str | Path | None = None) -> list[dict[str, Any]]:
    """Known flag/hardware incompatibilities (entries of ``incompatibilities.json``)."""
    data = _load_json(str(path or _knowledge_path("incompatibilities.json")))
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise DiagnosisError(
            f"incompatibility file {path or 'incompatibilities.json'} has no 'entries' list"
        )
    for e in entries:
        missing = [
            k
            for k in ("id", "title", "severity", "suggestion", "source", "rationale")
            if k not in e
        ]
        if missing:
            raise DiagnosisError(
                f"incompatibility entry {e.get('id', '?')!r} lacks {', '.join(missing)}"
            )
    return entries



@functools.lru_cache(maxsize=8)
def _context_rules(path: str) -> tuple[frozenset[str], tuple[re.Pattern[str], ...], frozenset[str]]:
    data = _load_json(path)
    names = data.get("context") or []
    patterns = data.get("context_patterns") or []
    try:
        compiled = tuple(re.compile(p) for p in patterns)
    except re.error as exc:
        raise DiagnosisError(f"impact table {path}: bad context pattern ({exc})") from None
    fields = data.get("fields") or {}
    settings = frozenset(f for f, e in fields.items() if isinstance(e, dict) and e.get("impact") != "none")
    return frozenset(names), compiled, settings


def is_context_field(field: str, path: str | Path | None = None) -> bool:
    """True for identity and plumbing fields (model, paths, ports, seeds, logging): context in a
    diff, not a setting to change (``context`` and ``context_patterns`` of ``impact.json``).

    A name in ``context`` is context; a field the impact table rates above ``none`` is a
    setting even where a pattern matches its name (``speculative_draft_model_path`` chooses the
    draft model, a throughput lever; ``mamba_max_states_per_path`` is a count).
    """
    names, patterns, settings = _context_rules(str(path or _knowledge_path("impact.json")))
    if path is None and field in _engine_context():
        return True
    if field in names:
        return True
    return field not in settings and any(p.search(field) for p in patterns)


def _engines() -> dict[str, Any]:
    data = _load_json(str(_knowledge_path("engines.json")))
    engines = data.get("engines")
    if not isinstance(engines, dict):
        raise DiagnosisError("engines.json has no 'engines' object")
    return engines


def load_engine_knobs() -> dict[str, dict[str, dict[str, Any]]]:
    """Other engines' knobs (``engines.json``): engine -> {its field -> {"sglang" (the SGLang field it
    plays the part of), "flag", "impact", "weight", "rationale"}}; ranks a diff of that engine's configs."""
    return {name: dict(entry.get("knobs") or {}) for name, entry in _engines().items()}


@functools.lru_cache(maxsize=1)
def _engine_context() -> frozenset[str]:
    return frozenset(f for entry in _engines().values() for f in entry.get("context") or ())


def load_remedies(path: str | Path | None = None) -> dict[str, dict[str, str | None]]:
    """Remedies per intent and engine (``remedies.json``): ``{"raise_running_cap": {"sglang": ...}}``."""
    data = _load_json(str(path or _knowledge_path("remedies.json")))
    intents = data.get("intents")
    if not isinstance(intents, dict):
        raise DiagnosisError(f"remedy file {path or 'remedies.json'} has no 'intents' object")
    return intents


class _Blank(dict):
    """Placeholders: the values given, else ``lookup(name)`` (the evidence's server argument of
    that name, for a remedy that states the value now), else "default"."""

    def __init__(self, values: Mapping[str, Any], lookup: Callable[[str], Any] | None = None):
        super().__init__(values)
        self.lookup = lookup

    def __missing__(self, key: str) -> Any:
        value = self.lookup(key) if self.lookup is not None else None
        return "default" if value is None else value


class _Flags:
    """``{flag:field}`` in a remedy: what sets ``field`` on the release's command line."""

    def __init__(self, release: str | None):
        self.release = release

    def __format__(self, field: str) -> str:
        return intent_flags(field, self.release)


class _LimitFlags:
    """``{limit:NAME}`` in a remedy: the engine's flag for the neutral limit NAME, or words naming
    the limit where its adapter has no field for it."""

    def __init__(self, engine: str | None):
        self.engine = engine

    def __format__(self, limit: str) -> str:
        adapter = engines_pkg.get(self.engine, default=engines_pkg.COMMAND) if self.engine else None
        flag = adapter.capabilities.flag(limit) if adapter is not None else None
        return flag or f"the engine's {limit.replace('_', ' ')} setting"


def fill_remedy(text: str, release: str | None = None, *, lookup: Callable[[str], Any] | None = None,
                engine: str | None = None, **values: Any) -> str:
    """A remedy text with its placeholders filled: ``{flag:field}`` by the flags ``release``
    (default: the default release) takes for that field (:func:`glm5lib.engines.sglang.config.intent_flags`),
    ``{limit:NAME}`` by ``engine``'s flag for a neutral limit, the others from ``values``, else
    ``lookup(name)`` (unknown ones and None read "default")."""
    filled = {k: ("default" if v is None else v) for k, v in values.items()}
    return text.format_map(_Blank({**filled, "flag": _Flags(release), "limit": _LimitFlags(engine)}, lookup))


def remedy(intent: str, engine: str | None = None, *, release: str | None = None,
           lookup: Callable[[str], Any] | None = None, **values: Any) -> str | None:
    """The remedy for ``intent`` in ``engine``'s own flags, SGLang's spelt as ``release`` (the
    SGLang release of the evidence; default: the default release) takes them, its
    ``{placeholders}`` filled from ``values`` (see :func:`fill_remedy`); None where that engine
    has no such mechanism.

    An engine the file does not name (one registered from outside glm5lib, or whatever a command
    ran) gets the neutral wording (``"*"``), in its own flags where its adapter maps the limit;
    ``lookup`` fills the placeholders ``values`` leaves (the evidence's ``arg``: the value a
    field has now)."""
    intents = load_remedies()
    if intent not in intents:
        raise DiagnosisError(f"no remedy for intent {intent!r}; known: {', '.join(sorted(intents))}")
    by_engine = intents[intent]
    engine = engine or engines_pkg.DEFAULT_ENGINE
    text = by_engine[engine] if engine in by_engine else by_engine.get("*", by_engine.get(engines_pkg.DEFAULT_ENGINE))
    if text is None:
        return None
    return fill_remedy(text, release, lookup=lookup, engine=engine, **values)
