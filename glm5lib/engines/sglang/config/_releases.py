"""SGLang releases and their flag catalogues.

Each supported release has a catalogue generated from its PyPI wheel by
``scripts/build_sglang_flags.py``: JSON package data, ``glm5lib/engines/sglang/flags/<release>.json``
(recorded with the wheel's sha256), read with :mod:`importlib.resources` the first time that
release is asked for and cached; importing :mod:`glm5lib.engines.sglang.config` reads none of them. When SGLang
is importable in this interpreter its own parser is the truth (:func:`installed_catalogue`); the
bundled catalogues are the fallback.

Releases rename flags: 0.5.23 split ``cuda_graph_max_bs`` into ``cuda_graph_max_bs_decode``
and ``..._prefill`` and deprecated ``--disable-cuda-graph`` for
``--cuda-graph-backend-{decode,prefill} disabled``. :data:`RENAMED` lines fields up across
releases; :class:`glm5lib.engines.sglang.config.SGLangConfig` keeps such settings as intent and writes the
flags the target release takes.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.resources
import importlib.util
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

import glm5lib.engines.sglang.config.sglang_parser as sglang_parser
from glm5lib.errors import ConfigError

__all__ = [
    "BUNDLED_RELEASES",
    "CATALOGUE_DIR",
    "CATALOGUE_FORMAT",
    "DEFAULT_RELEASE",
    "FALLBACK_DEFAULTS",
    "NEWEST_RELEASE",
    "RENAMED",
    "Catalogue",
    "FlagSpec",
    "bundled_catalogue",
    "catalogue",
    "config_defaults",
    "default_release",
    "guess_release",
    "installed_release",
    "nearest_bundled",
    "read_catalogue_file",
    "release_of",
    "resolved_fallback",
    "version_key",
]

logger = logging.getLogger(__name__)

#: Where the generated catalogues lie, as a resource path under the ``glm5lib`` package
#: (read through the top package so that finding a file imports nothing more).
CATALOGUE_DIR = ("engines", "sglang", "flags")
#: The ``format`` a catalogue file declares.
CATALOGUE_FORMAT = "glm5lib.flag_catalogue/1"

#: Release -> its catalogue's file name in :data:`CATALOGUE_DIR`.
BUNDLED_RELEASES: dict[str, str] = {
    "0.5.8": "0.5.8.json",
    "0.5.9": "0.5.9.json",
    "0.5.16": "0.5.16.json",
    "0.5.23": "0.5.23.json",
}


def version_key(release: str) -> tuple[int, ...]:
    """``"0.5.23"`` -> ``(0, 5, 23)``: releases sort by it."""
    return tuple(int(p) for p in re.findall(r"\d+", release)[:3])


#: The newest bundled release.
NEWEST_RELEASE = max(BUNDLED_RELEASES, key=version_key)
#: The release assumed when neither the config, the server nor the installation says: the
#: newest bundled one (what a user installing SGLang today gets). Everything that needs a
#: default release (SGLangConfig, the stand-in, the diagnosis) takes it from here.
DEFAULT_RELEASE = NEWEST_RELEASE

#: Older field -> the field that took over its role in later releases (same meaning, decode phase).
RENAMED: dict[str, str] = {
    "cuda_graph_max_bs": "cuda_graph_max_bs_decode",
    "cuda_graph_bs": "cuda_graph_bs_decode",
    "stream_output": "incremental_streaming_output",  # same switch: disjoint output segments
}


@dataclass(frozen=True)
class FlagSpec:
    """One ``sglang.launch_server`` flag of one release."""

    field: str
    flags: tuple[str, ...]
    value_type: str  # int | float | bool | str | list | json | none (deprecated, takes no value)
    default: Any
    annotation: str | None = None
    item_type: str | None = None
    default_expr: str | None = None
    required: bool = False
    action: str | None = None
    nargs: str | None = None
    choices: tuple[Any, ...] | None = None
    help: str = ""
    deprecated: bool = False
    in_server_args: bool = True
    #: SGLang (0.5.23 on) resolves the field at start-up when the input leaves it None, falling back
    #: to ``fallback``: the value it then logs is SGLang's, not a user choice (``Arg(resolvable=...)``)
    resolvable: bool = False
    fallback: Any = None
    #: alias switches that store one value of this field (0.5.16's deprecated
    #: ``--disable-piecewise-cuda-graph`` is ``--cuda-graph-backend-prefill disabled``)
    alias_consts: Mapping[str, Any] = dataclass_field(default_factory=dict, hash=False)

    @property
    def flag(self) -> str:
        """The canonical spelling (the first one SGLang registers); 0.5.23 has fields no flag sets."""
        return self.flags[0] if self.flags else "(no command-line flag)"

    @property
    def nullable(self) -> bool:
        """Whether ``None`` is a legal value (SGLang's 'unset, decide automatically')."""
        return self.default is None or bool(self.annotation and "Optional" in self.annotation)


_ARG_RESOLVABLE = re.compile(r"\bresolvable=True\b")
_ARG_FALLBACK = re.compile(r"\bfallback=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^,)\]]+)\)?\]?$")


def _resolution(annotation: str | None) -> tuple[bool, Any]:
    """(resolvable, fallback) from the ``Arg(...)`` metadata in a field's annotation (0.5.23 on)."""
    if not annotation or "Arg(" not in annotation:
        return False, None
    found = _ARG_FALLBACK.search(annotation)
    try:
        fallback = ast.literal_eval(found.group(1)) if found else None
    except (ValueError, SyntaxError):
        fallback = None
    return bool(_ARG_RESOLVABLE.search(annotation)), fallback


def _specs(raw_flags: Iterable[Mapping[str, Any]]) -> dict[str, FlagSpec]:
    out: dict[str, FlagSpec] = {}
    for raw in raw_flags:
        choices = raw.get("choices")
        resolvable, fallback = _resolution(raw.get("annotation"))
        out[raw["field"]] = FlagSpec(
            field=raw["field"],
            flags=tuple(raw["flags"]) + tuple(raw.get("alias_flags") or ()),
            value_type=raw["value_type"],
            default=raw["default"],
            annotation=raw.get("annotation"),
            item_type=raw.get("item_type"),
            default_expr=raw.get("default_expr"),
            required=bool(raw.get("required")),
            action=raw.get("action"),
            nargs=raw.get("nargs"),
            choices=tuple(choices) if choices is not None else None,
            help=raw.get("help") or "",
            deprecated=bool(raw.get("deprecated")),
            in_server_args=bool(raw.get("in_server_args", True)),
            resolvable=resolvable,
            fallback=fallback,
            alias_consts=dict(raw.get("alias_consts") or {}),
        )
    return out


class Catalogue:
    """Every flag of one SGLang release: field -> FlagSpec, flag spelling -> field."""

    def __init__(self, release: str, specs: Mapping[str, FlagSpec], source: Mapping[str, Any]):
        self.release = release
        self.specs: Mapping[str, FlagSpec] = dict(specs)
        # the wheel's sha256 under one key whichever name the generator of the time gave it
        sha = source.get("sha256") or source.get("wheel_sha256")
        self.source: Mapping[str, Any] = {**source, **({"sha256": sha, "wheel_sha256": sha} if sha else {})}
        self.flag_to_field: dict[str, str] = {
            flag: spec.field for spec in self.specs.values() for flag in spec.flags
        }
        self.long_flags = sorted(f for f in self.flag_to_field if f.startswith("--"))

    def __repr__(self) -> str:
        return f"Catalogue({self.release!r}, {len(self.specs)} fields, from {self.source.get('origin')!r})"

    def field_name(self, name: str) -> str | None:
        """``name`` or the field that plays its role in this release (see :data:`RENAMED`)."""
        if name in self.specs:
            return name
        newer = RENAMED.get(name)
        if newer in self.specs:
            return newer
        older = next((old for old, new in RENAMED.items() if new == name), None)
        if older in self.specs:
            return older
        return None

    @property
    def graphs_by_phase(self) -> bool:
        """Whether CUDA graphs are switched per phase (``--cuda-graph-backend-decode``)."""
        return "cuda_graph_backend_decode" in self.specs


def _base_release(version: str) -> str:
    """``0.5.8.post1`` -> ``0.5.8``; ``0.5.23rc0`` -> ``0.5.23``."""
    found = re.match(r"\d+\.\d+\.\d+", version)
    return found.group(0) if found else version


def read_catalogue_file(release: str) -> dict[str, Any]:
    """The raw content of ``release``'s bundled catalogue file: ``format``, ``about``, ``source``,
    ``fields_without_flag`` and ``flags`` (the entries as generated)."""
    if release not in BUNDLED_RELEASES:
        known = sorted(BUNDLED_RELEASES, key=version_key)
        raise ConfigError(f"no bundled catalogue for SGLang {release!r}; bundled: {', '.join(known)}",
                          field="release", valid=known)
    resource = importlib.resources.files("glm5lib")
    for part in (*CATALOGUE_DIR, BUNDLED_RELEASES[release]):
        resource = resource.joinpath(part)
    try:
        data = json.loads(resource.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"the bundled catalogue of SGLang {release} ({resource}) cannot be read: {exc}",
                          field="release") from None
    if not isinstance(data, dict) or data.get("format") != CATALOGUE_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise ConfigError(f"{resource} is not a flag catalogue (format {found!r}, expected {CATALOGUE_FORMAT!r})",
                          field="release", valid=[CATALOGUE_FORMAT])
    return data


@functools.cache
def _bundled(release: str) -> Catalogue:
    data = read_catalogue_file(release)
    logger.debug("loaded the bundled catalogue of SGLang %s (%d flags)", release, len(data["flags"]))
    return Catalogue(release, _specs(data["flags"]), data["source"])


def bundled_catalogue(release: str = DEFAULT_RELEASE) -> Catalogue:
    """The bundled catalogue of ``release`` (never imports SGLang); unknown releases raise ConfigError."""
    base = _base_release(str(release))
    if base not in BUNDLED_RELEASES:
        known = sorted(BUNDLED_RELEASES, key=version_key)
        raise ConfigError(f"no bundled catalogue for SGLang {release!r}; bundled: {', '.join(known)}",
                          field="release", valid=known)
    return _bundled(base)


def installed_release() -> str | None:
    """The version of the SGLang installed beside glm5lib (read without importing it), or None."""
    if importlib.util.find_spec("sglang") is None:
        return None
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def installed_catalogue() -> Catalogue | None:
    """The installed SGLang's own parser as a catalogue (imports sglang), or None when it does not import."""
    version = installed_release()
    if version is None:
        return None
    try:
        dump = sglang_parser.dump()
    except Exception as exc:  # any import-time failure of a third-party package: fall back
        logger.warning("SGLang %s is installed but its parser did not load (%s); using the bundled catalogue",
                       version, exc)
        return None
    source = {"version": dump["version"], "origin": f"installed package, its own parser ({dump['file']})"}
    return Catalogue(dump["version"], _specs(sglang_parser.from_parser_dump(dump)), source)


def default_release() -> str:
    """The installed SGLang's version if any, else :data:`DEFAULT_RELEASE`."""
    return installed_release() or DEFAULT_RELEASE


def catalogue(release: str | None = None) -> Catalogue:
    """The catalogue of ``release`` (default: :func:`default_release`).

    The installed SGLang's own parser when ``release`` is the installed version; else the
    bundled catalogue of that release, or of the nearest bundled release in the same line
    (``0.5.8.post1`` -> 0.5.8). An unknown release raises ConfigError naming the bundled ones.
    """
    release = release or default_release()
    if release == installed_release():
        live = installed_catalogue()
        if live is not None:
            return live
    nearest = nearest_bundled(release)
    if nearest != _base_release(str(release)):
        logger.info("no catalogue for SGLang %s; using %s's (nearest bundled)", release, nearest)
    return _bundled(nearest)


def nearest_bundled(release: str) -> str:
    """The bundled release that stands for ``release``: itself (``0.5.8.post1`` -> 0.5.8), else the
    newest bundled one before it (the oldest bundled for an older release). An unknown release
    raises ConfigError naming the bundled ones."""
    base = _base_release(str(release))
    if base in BUNDLED_RELEASES:
        return base
    known = sorted(BUNDLED_RELEASES, key=version_key)
    if re.match(r"\d+\.\d+\.\d+", base):
        older = [r for r in known if version_key(r) <= version_key(base)]
        return older[-1] if older else known[0]
    raise ConfigError(
        f"unknown SGLang release {release!r}; bundled catalogues: {', '.join(known)}",
        field="release", valid=known,
    )


def guess_release(server_args: Mapping[str, Any]) -> str:
    """The release a logged ServerArgs dict or ``/get_server_info`` payload comes from.

    Its ``version`` when it carries one; otherwise the bundled release whose fields match its
    keys best (fewest unknown keys, then fewest missing fields).
    """
    version = server_args.get("version")
    if isinstance(version, str) and re.match(r"\d+\.\d+\.\d+", version):
        return version
    keys = set(server_args)

    def score(release: str) -> tuple[int, int]:
        fields = {n for n, s in _bundled(release).specs.items() if s.in_server_args}
        return (len(keys - fields), len(fields - keys))

    return min(BUNDLED_RELEASES, key=score)


def release_of(args: Mapping[str, Any]) -> str:
    """The bundled SGLang release whose names and defaults fit ``args``: the ``version`` a server
    reported (``/get_server_info``), else, for a whole logged ServerArgs (100 fields or more), the
    release whose fields match its keys best, else, for a few fields, the default release (the
    installed SGLang's, else the newest bundled) unless some of their names exist only in older
    releases (``cuda_graph_max_bs``, 0.5.23's ``cuda_graph_max_bs_decode``): then the newest
    release that knows the most of them."""
    version = args.get("version")
    if isinstance(version, str) and re.match(r"\d+\.\d+\.\d+", version):
        return nearest_bundled(version)
    if len(args) >= 100:
        return nearest_bundled(guess_release(args))
    default = nearest_bundled(default_release())
    keys = set(args)
    unknown = {release: len(keys - _field_names(release)) for release in BUNDLED_RELEASES}
    if unknown[default] == min(unknown.values()):
        return default
    return min(BUNDLED_RELEASES, key=lambda release: (unknown[release], [-k for k in version_key(release)]))


@functools.cache
def _field_names(release: str) -> frozenset[str]:
    return frozenset(name for name, spec in bundled_catalogue(release).specs.items() if spec.in_server_args)


#: defaults of the fields the diagnosis reads, where a catalogue does not give one
FALLBACK_DEFAULTS: dict[str, Any] = {
    "max_running_requests": None,
    "max_total_tokens": None,
    "mem_fraction_static": None,
    "chunked_prefill_size": None,
    "schedule_policy": "fcfs",
    "page_size": None,
    "tp_size": 1,
    "dp_size": 1,
    "attention_backend": None,
    "moe_runner_backend": "auto",
    "fp4_gemm_runner_backend": "auto",
    "enable_flashinfer_allreduce_fusion": False,
    "disable_radix_cache": False,
    "cuda_graph_max_bs": None,
    "disable_cuda_graph": False,
    "disable_custom_all_reduce": False,
}


@functools.lru_cache(maxsize=8)
def config_defaults(release: str | None = None) -> dict[str, Any]:
    """Every field's default in ``release``'s bundled catalogue (default: the default release)."""
    defaults = dict(FALLBACK_DEFAULTS)
    cat = bundled_catalogue(nearest_bundled(release or default_release()))
    for name, spec in cat.specs.items():
        if getattr(spec, "in_server_args", True):
            defaults[name] = getattr(spec, "default", None)
    return defaults


def resolved_fallback(field: str, args: Mapping[str, Any]) -> tuple[Any, str] | None:
    """For a field ``args``'s release resolves at start-up when left None (``Arg(resolvable=True)``,
    0.5.23 on) and falls back to a declared value: that value and how it is known; else None."""
    release = release_of(args)
    spec = bundled_catalogue(release).specs.get(field)
    if spec is None or not spec.resolvable or spec.default is not None or spec.fallback is None:
        return None
    return spec.fallback, f"{spec.fallback!r}, resolved at start-up by SGLang {release} (its declared fallback)"
