"""SGLang server configurations as typed, validated objects.

:class:`ServerConfig` holds the arguments of ``python -m sglang.launch_server`` under the names
of SGLang's ``ServerArgs`` fields. It is built from an argv list, from a logged
``server_args=ServerArgs(...)`` dict or ``/get_server_info``, from a JSON file (the shipped ones
live in ``data/configs/``), or from keyword fields, and it is checked against a catalogue of
every flag SGLang knows before anything starts: an unknown flag comes back with the closest
valid one, a wrong type, a non-positive size or an unknown backend with the valid values.

The catalogue (:data:`SGLANG_FLAGS`) is generated from SGLang's ``server_args.py`` by
``scripts/build_sglang_flags.py``; :data:`SGLANG_SOURCE` says which SGLang it was read from.
Field and flag names usually correspond (``max_running_requests`` <-> ``--max-running-requests``)
but not always (``fp4_gemm_runner_backend`` <-> ``--fp4-gemm-backend``,
``tp_size`` <-> ``--tensor-parallel-size``/``--tp-size``): use :func:`flag_for` and
:func:`field_for`.

Secrets (``api_key``, ``admin_api_key``) are kept in memory so a server can be launched with
them, but are written as ``"***"`` by :meth:`ServerConfig.save`, ``repr`` and the CLI.
"""

from __future__ import annotations

import difflib
import json
import logging
import math
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from glm5lib.config.releases import (
    DEFAULT_RELEASE,
    NEWEST_RELEASE,
    RENAMED,
    Catalogue,
    FlagSpec,
    bundled_catalogue,
    catalogue,
    default_release,
    guess_release,
)
from glm5lib.errors import ConfigError
from glm5lib.masking import MASK, is_secret_name
from glm5lib.paths import data_dir

__all__ = [
    "DEFAULT_RELEASE",
    "MASK",
    "NEWEST_RELEASE",
    "RENAMED",
    "SECRET_FIELDS",
    "SGLANG_FLAGS",
    "SGLANG_SOURCE",
    "FlagSpec",
    "ServerConfig",
    "catalogue",
    "cuda_graphs_off",
    "field_for",
    "flag_for",
    "graphs_off_for",
    "intent_flags",
    "mask_value",
    "parse_assignment",
    "shipped_configs",
    "type_name",
]

logger = logging.getLogger(__name__)

#: Fields whose values are credentials; never written or shown in clear.
SECRET_FIELDS = frozenset({"api_key", "admin_api_key"})

CONFIG_FORMAT = "glm5lib.server_config/1"


#: field name -> FlagSpec of the default release's bundled catalogue, in SGLang's field order
#: (per release: :func:`catalogue`; bundled, so importing glm5lib never imports SGLang).
SGLANG_FLAGS: Mapping[str, FlagSpec] = bundled_catalogue(DEFAULT_RELEASE).specs
#: Which SGLang that catalogue was generated from: version, commit, origin, file, sha256.
SGLANG_SOURCE: Mapping[str, Any] = bundled_catalogue(DEFAULT_RELEASE).source


# Bounds SGLang enforces late (or not at all) and that a config can be checked against early.
# (low, high, low_inclusive); chunked_prefill_size also takes -1 ("disable chunking").
_RANGES: dict[str, tuple[float | None, float | None, bool]] = {
    "port": (1, 65535, True),
    "mem_fraction_static": (0.0, 1.0, False),
    "schedule_conservativeness": (0.0, None, False),
}
_POSITIVE = frozenset({
    "tp_size", "pp_size", "dp_size", "ep_size", "attn_cp_size", "moe_dp_size", "nnodes",
    "max_running_requests", "max_queued_requests", "max_total_tokens", "max_prefill_tokens",
    "page_size", "cuda_graph_max_bs", "context_length", "stream_interval",
    "tokenizer_worker_num", "num_continuous_decode_steps", "watchdog_timeout",
    "cuda_graph_bs", "dist_timeout", "max_lora_rank", "max_loras_per_batch",
    # 0.5.23's per-phase successors of cuda_graph_max_bs / cuda_graph_bs
    "cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill", "cuda_graph_bs_decode", "cuda_graph_bs_prefill",
})
_MINUS_ONE_ALLOWED = frozenset({"chunked_prefill_size"})


def _closest(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    return difflib.get_close_matches(word, list(candidates), n=n, cutoff=0.6)


def _unknown_field_error(
    name: str, what: str = "SGLang server argument", cat: Catalogue | None = None
) -> ConfigError:
    cat = cat or catalogue()
    close = _closest(name, cat.specs)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(
        f"unknown {what} {name!r}{hint} (SGLang {cat.release} knows "
        f"{len(cat.specs)} fields; see glm5lib.config.catalogue({cat.release!r}))",
        field=name,
        valid=close or sorted(cat.specs),
    )


def flag_for(field: str, release: str | None = None) -> str:
    """The canonical command-line flag of a ServerArgs field (``fp4_gemm_runner_backend`` -> ``--fp4-gemm-backend``)."""
    cat = catalogue(release)
    name = cat.field_name(field)
    if name is None:
        raise _unknown_field_error(field, cat=cat)
    return cat.specs[name].flag


def intent_flags(field: str, release: str | None = None) -> str:
    """What sets ``field`` on ``release``'s command line, as :meth:`ServerConfig.to_argv` writes
    it there: the flag of the field or of its successor (``cuda_graph_max_bs`` ->
    ``--cuda-graph-max-bs-decode`` on 0.5.23), and for a switch the tokens that turn it on
    (``disable_cuda_graph`` -> ``--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill
    disabled`` where the old switch is deprecated). Remedies and advice name flags through this."""
    cat = catalogue(release)
    name = cat.field_name(field)
    if name is None:
        raise _unknown_field_error(field, cat=cat)
    spec = cat.specs[name]
    argv = ServerConfig._make({name: True}, cat=cat).to_argv() if spec.value_type == "bool" else []
    return " ".join(argv) or spec.flag


def field_for(flag: str, release: str | None = None) -> str:
    """The ServerArgs field a flag sets (``--fp4-gemm-backend`` or ``--tp-size`` -> field name).

    Accepts every spelling SGLang registers and, like argparse, an unambiguous prefix.
    """
    cat = catalogue(release)
    _FLAG_TO_FIELD, _LONG_FLAGS = cat.flag_to_field, cat.long_flags
    name = flag.split("=", 1)[0]
    if not name.startswith("-"):
        name = "--" + name
    if name in _FLAG_TO_FIELD:
        return _FLAG_TO_FIELD[name]
    prefixed = [f for f in _LONG_FLAGS if f.startswith(name)] if name.startswith("--") else []
    fields = sorted({_FLAG_TO_FIELD[f] for f in prefixed})
    if len(fields) == 1:
        return fields[0]
    if len(fields) > 1:
        older = name[2:].replace("-", "_")
        successor = cat.field_name(older) if older in RENAMED else None
        hint = (f" ({name} of earlier releases is {cat.specs[successor].flag} in SGLang {cat.release})"
                if successor in cat.specs else "")
        raise ConfigError(
            f"ambiguous SGLang flag {name!r}: it could be {', '.join(sorted(prefixed)[:8])}{hint}",
            field=name,
            valid=sorted(prefixed),
        )
    close = _closest(name, _LONG_FLAGS)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(
        f"unknown SGLang flag {name!r}{hint}", field=name, valid=close or _LONG_FLAGS
    )


def is_secret(field: str) -> bool:
    return field in SECRET_FIELDS or is_secret_name(field)


def mask_value(field: str, value: Any) -> Any:
    """``"***"`` for a set secret field, the value otherwise."""
    if value is not None and value != "" and is_secret(field):
        return MASK
    return value


# --------------------------------------------------------------------------- value checking


def type_name(spec: FlagSpec) -> str:
    """What a flag takes, in words (``int``, ``list of str``, ``JSON value``, ``no value``)."""
    if spec.value_type == "list":
        return f"list of {spec.item_type or 'str'}"
    return {"json": "JSON value", "none": "no value"}.get(spec.value_type, spec.value_type)


def _convert_token(spec: FlagSpec, token: str, kind: str | None = None) -> Any:
    """A command-line token to the Python value SGLang's argparse would make of it."""
    kind = kind or spec.value_type
    try:
        if kind == "int":
            return int(token)
        if kind == "float":
            return float(token)
        if kind == "json":
            return json.loads(token)
    except ValueError:
        raise ConfigError(
            f"{spec.flag} expects {'an integer' if kind == 'int' else 'a number' if kind == 'float' else 'JSON'}"
            f", got {token!r}",
            field=spec.field,
            valid=[kind],
        ) from None
    return token


def _check_scalar(spec: FlagSpec, value: Any, kind: str) -> Any:
    field = spec.field
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(
                f"{field} is a switch ({spec.flag}); expected True or False, got {value!r}",
                field=field, valid=["True", "False"],
            )
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ConfigError(
                    f"{field} ({spec.flag}) expects an integer, got {value!r} ({type(value).__name__})",
                    field=field, valid=["int"],
                )
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(
                f"{field} ({spec.flag}) expects a finite number, got {value!r}",
                field=field, valid=["float"],
            )
        value = float(value)
    elif kind == "str" and not isinstance(value, str):
        raise ConfigError(
            f"{field} ({spec.flag}) expects a string, got {value!r} ({type(value).__name__})",
            field=field, valid=["str"],
        )
    if spec.choices is not None and value not in spec.choices:
        close = _closest(str(value), [str(c) for c in spec.choices])
        hint = f" (closest: {close[0]!r})" if close else ""
        raise ConfigError(
            f"{field}={value!r} is not a valid choice for {spec.flag}{hint}; valid: "
            + ", ".join(repr(c) for c in spec.choices),
            field=field,
            valid=[str(c) for c in spec.choices],
        )
    if field in _POSITIVE or field in _MINUS_ONE_ALLOWED:
        if field in _MINUS_ONE_ALLOWED and value == -1:
            return value
        if value <= 0:
            extra = " or -1 (disable)" if field in _MINUS_ONE_ALLOWED else ""
            raise ConfigError(
                f"{field} ({spec.flag}) must be a positive {'integer' if kind == 'int' else 'number'}{extra}, got {value!r}",
                field=field, valid=["> 0"] + (["-1"] if extra else []),
            )
    if field in _RANGES:
        low, high, low_inclusive = _RANGES[field]
        too_low = low is not None and (value < low if low_inclusive else value <= low)
        too_high = high is not None and value > high
        if too_low or too_high:
            bracket = "[" if low_inclusive else "("
            raise ConfigError(
                f"{field} ({spec.flag}) must be in {bracket}{low}, {high if high is not None else 'inf'}], got {value!r}",
                field=field, valid=[f"{bracket}{low}, {high}]"],
            )
    return value


def _check_value(spec: FlagSpec, value: Any) -> Any:
    """Validated (and normalised) value for ``spec``; raises ConfigError naming the field."""
    if value is None:
        if spec.nullable:
            return None
        raise ConfigError(
            f"{spec.field} ({spec.flag}) cannot be None; its default is {spec.default!r}",
            field=spec.field, valid=[type_name(spec)],
        )
    kind = spec.value_type
    if kind == "none":
        return value
    if kind == "list":
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(
                f"{spec.field} ({spec.flag}) expects a {type_name(spec)}, got {value!r}",
                field=spec.field, valid=[type_name(spec)],
            )
        return [_check_scalar(spec, item, spec.item_type or "str") for item in value]
    if kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ConfigError(
                    f"{spec.field} ({spec.flag}) expects JSON, got {value!r}",
                    field=spec.field, valid=["JSON"],
                ) from None
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{spec.field} ({spec.flag}) expects a JSON-serialisable value, got {value!r}",
                field=spec.field, valid=["JSON"],
            ) from None
        return value
    return _check_scalar(spec, value, kind)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        a = list(a)
    if isinstance(b, tuple):
        b = list(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    return a == b


# --------------------------------------------------------------------------- ServerConfig


def shipped_configs() -> dict[str, Path]:
    """Name -> path of the SGLang configs shipped in ``data/configs/`` (``vllm-*.json`` are vLLM's:
    :mod:`glm5lib.engines.vllm`)."""
    folder = data_dir() / "configs"
    return {p.stem: p for p in sorted(folder.glob("*.json")) if not p.stem.startswith("vllm-")} if folder.is_dir() else {}


_LAUNCHER_TOKENS = ("sglang.launch_server", "glm5lib.sim", "launch_server")


class ServerConfig:
    """Arguments of ``sglang.launch_server`` as ServerArgs fields; immutable, validated.

    ``ServerConfig(model_path="zai-org/GLM-5", tp_size=8)``; every field SGLang knows reads as an
    attribute (its SGLang default when not set); :attr:`explicit` holds the fields that were set.
    Change with :meth:`with_changes`, compare with :meth:`diff`, launch with
    :func:`glm5lib.server.launch`.
    """

    __slots__ = ("_cat", "_extras", "_meta", "_values")

    def __init__(self, release: str | None = None, **fields: Any):
        cat = catalogue(release)
        values = _checked(cat, fields)
        object.__setattr__(self, "_cat", cat)
        object.__setattr__(self, "_values", self._ordered(values, cat))
        object.__setattr__(self, "_extras", {})
        object.__setattr__(self, "_meta", {})

    @staticmethod
    def _ordered(values: Mapping[str, Any], cat: Catalogue) -> dict[str, Any]:
        return {name: values[name] for name in cat.specs if name in values}

    @classmethod
    def _make(
        cls,
        values: Mapping[str, Any],
        extras: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
        cat: Catalogue | None = None,
    ) -> ServerConfig:
        cat = cat or catalogue()
        config = cls.__new__(cls)
        object.__setattr__(config, "_cat", cat)
        object.__setattr__(config, "_values", cls._ordered(values, cat))
        object.__setattr__(config, "_extras", dict(extras or {}))
        object.__setattr__(config, "_meta", dict(meta or {}))
        return config

    @property
    def release(self) -> str:
        """The SGLang release this config is checked against and rendered for."""
        return self._cat.release

    @property
    def catalogue(self) -> Catalogue:
        """The flag catalogue of :attr:`release`."""
        return self._cat

    def for_release(self, release: str) -> ServerConfig:
        """The same settings for another release: renamed fields follow (``cuda_graph_max_bs``
        <-> ``cuda_graph_max_bs_decode``); a field the target lacks raises ConfigError."""
        cat = catalogue(release)
        values = _checked(cat, self._values)
        return self._make(values, self._extras, self._meta, cat)

    # -- reading ---------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        values = object.__getattribute__(self, "_values")
        cat = object.__getattribute__(self, "_cat")
        field = cat.field_name(name)
        if name == "disable_cuda_graph" and (field not in values or cat.graphs_by_phase):
            return cuda_graphs_off(values)
        if (field in ("cuda_graph_backend_decode", "cuda_graph_backend_prefill") and field not in values
                and values.get("disable_cuda_graph")):
            return "disabled"  # what to_argv writes for "CUDA graphs off" on this release
        if field in values:
            return values[field]
        if field is not None:
            return cat.specs[field].default
        close = _closest(name, cat.specs)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise AttributeError(f"ServerConfig has no field {name!r}{hint}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"ServerConfig is immutable; use config.with_changes({name}=...) to get a changed copy"
        )

    def get(self, field: str) -> Any:
        """The value of ``field`` (its SGLang default when not set); unknown fields raise ConfigError."""
        if self._cat.field_name(field) is None:
            raise _unknown_field_error(field, cat=self._cat)
        return getattr(self, field)

    @property
    def explicit(self) -> dict[str, Any]:
        """The fields that were set, in SGLang's field order (a copy)."""
        return dict(self._values)

    @property
    def extras(self) -> dict[str, Any]:
        """Keys of a server-args dict that the catalogue does not know (other SGLang versions, server info)."""
        return dict(self._extras)

    @property
    def meta(self) -> dict[str, Any]:
        """Descriptive data from a config file (name, description, source); not server arguments."""
        return dict(self._meta)

    @property
    def name(self) -> str | None:
        """The config's name when it came from a file, else None."""
        return self._meta.get("name")

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __contains__(self, field: object) -> bool:
        return field in self._values

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ServerConfig):
            return NotImplemented
        return not self.diff(other)

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(full=False), sort_keys=True, default=str))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={mask_value(k, v)!r}" for k, v in self._values.items())
        pin = "" if self._cat.release == default_release() else f"release={self._cat.release!r}, "
        return f"ServerConfig({pin}{inner})"

    def to_dict(self, *, full: bool = False, mask: bool = False) -> dict[str, Any]:
        """Explicit fields (``full=True``: every field, defaults included) as a plain dict."""
        if full:
            data = {name: getattr(self, name) for name, spec in self._cat.specs.items()
                    if spec.in_server_args and not name.startswith("_")}
            data.update({k: v for k, v in self._values.items() if k not in data})
        else:
            data = dict(self._values)
        if mask:
            data = {k: mask_value(k, v) for k, v in data.items()}
        return json.loads(json.dumps(data))

    def to_frame(self, *, full: bool = False):
        """A pandas DataFrame (field, flag, value, default, explicit) for display in a notebook."""
        import pandas as pd

        specs = self._cat.specs
        names = [n for n in specs if full or n in self._values]
        rows = [
            {
                "field": n,
                "flag": specs[n].flag,
                "value": mask_value(n, getattr(self, n)),
                "default": specs[n].default,
                "explicit": n in self._values,
            }
            for n in names
        ]
        return pd.DataFrame(rows, columns=["field", "flag", "value", "default", "explicit"])

    # -- validation ------------------------------------------------------------------------

    def validate(self, *, require_model: bool = True) -> ServerConfig:
        """Check the whole config (values and cross-field rules); returns self or raises ConfigError."""
        for name, value in self._values.items():
            _check_value(self._cat.specs[name], value)
        if require_model and not self._values.get("model_path"):
            raise ConfigError(
                "model_path (--model-path) is required to launch SGLang",
                field="model_path", valid=["a local folder or a Hugging Face repo id"],
            )
        max_bs = self._cat.field_name("cuda_graph_max_bs")
        if self.disable_cuda_graph and max_bs in self._values:
            logger.warning("%s is set but CUDA graphs are off: it has no effect", max_bs)
        return self

    # -- building --------------------------------------------------------------------------

    @classmethod
    def from_argv(cls, argv: Sequence[str] | str, *, release: str | None = None) -> ServerConfig:
        """Parse ``sglang.launch_server`` arguments (a list, or a command-line string).

        A leading ``python -m sglang.launch_server`` (or ``glm5lib.sim``) is skipped. Every
        spelling and unambiguous prefix SGLang's argparse accepts is accepted; an unknown flag
        raises ConfigError naming the closest valid one.
        """
        config, rest = cls.parse_known_argv(argv, release=release)
        if rest:
            first = rest[0]
            if first.startswith("-"):
                field_for(first, config.release)  # raises with the closest valid flag
            raise ConfigError(
                f"unexpected argument {first!r} in the SGLang command line (values follow their flag)",
                field=first, valid=config.catalogue.long_flags,
            )
        return config

    @classmethod
    def parse_known_argv(
        cls, argv: Sequence[str] | str, *, release: str | None = None
    ) -> tuple[ServerConfig, list[str]]:
        """Like :meth:`from_argv` but returns the tokens it does not know instead of raising.

        For programs that take SGLang's flags plus their own (the stand-in's ``--sim-*``):
        an unknown ``--flag`` is returned with the tokens after it up to the next flag.
        Known flags with bad values still raise ConfigError.
        """
        tokens = shlex.split(argv) if isinstance(argv, str) else [str(t) for t in argv]
        tokens = _strip_launcher(tokens)
        cat = catalogue(release)
        values: dict[str, Any] = {}
        rest: list[str] = []
        i = 0
        while i < len(tokens):
            token = tokens[i]
            i += 1
            if not token.startswith("-") or _is_number(token):
                rest.append(token)
                continue
            name, has_inline, inline = token.partition("=")
            try:
                field = field_for(name, cat.release)
            except ConfigError as exc:
                if "ambiguous" in str(exc):
                    raise
                rest.append(token)
                while i < len(tokens) and not _looks_like_flag(tokens[i]):
                    rest.append(tokens[i])
                    i += 1
                continue
            spec = cat.specs[field]
            if spec.value_type in ("bool", "none"):
                if has_inline:
                    raise ConfigError(
                        f"{spec.flag} is a switch and takes no value (got {token!r})",
                        field=field, valid=[spec.flag],
                    )
                if spec.value_type == "none":
                    logger.warning("%s is deprecated in SGLang and ignored", spec.flag)
                    continue
                values[field] = spec.action != "store_false" and not (
                    spec.action == "boolean_optional" and name.startswith("--no-")
                )
                continue
            if spec.value_type == "list":
                items = [inline] if has_inline else []
                while not has_inline and i < len(tokens) and not _looks_like_flag(tokens[i]):
                    items.append(tokens[i])
                    i += 1
                if not items and spec.nargs == "+":
                    raise ConfigError(
                        f"{spec.flag} expects one or more values", field=field, valid=[type_name(spec)]
                    )
                values[field] = [_convert_token(spec, t, spec.item_type or "str") for t in items]
                continue
            if has_inline:
                raw = inline
            elif i < len(tokens) and (not _looks_like_flag(tokens[i])):
                raw = tokens[i]
                i += 1
            elif spec.nargs == "?":
                values[field] = None
                continue
            else:
                raise ConfigError(
                    f"{spec.flag} expects a value ({type_name(spec)})",
                    field=field, valid=[str(c) for c in spec.choices] if spec.choices else [type_name(spec)],
                )
            values[field] = _convert_token(spec, raw)
        checked = {name: _check_value(cat.specs[name], value) for name, value in values.items()}
        return cls._make(checked, cat=cat), rest

    @classmethod
    def from_server_args(
        cls, server_args: Mapping[str, Any] | str, *, strict: bool = False, release: str | None = None
    ) -> ServerConfig:
        """From a logged ``server_args=ServerArgs(...)`` dict (or line) or ``/get_server_info``.

        Only values that differ from the catalogue's defaults (and, for fields SGLang resolves at
        start-up, from its declared fallback) become explicit, so the result reads like the
        command line that produced them. Keys the catalogue does not know go to
        :attr:`extras` (``strict=True``: ConfigError). Values SGLang accepted but this catalogue
        rejects (a newer backend name, say) are kept with a warning unless ``strict``.
        A masked secret (``"***"``) is dropped. The release is ``release``, else the payload's
        ``version`` (``/get_server_info``), else the bundled release whose fields fit best.
        """
        if isinstance(server_args, str):
            # imported here: the stand-in imports config and must start without pandas
            from glm5lib.logs import parse_server_args

            server_args = parse_server_args(server_args)
        values: dict[str, Any] = {}
        extras: dict[str, Any] = {}
        cat = catalogue(release or guess_release(server_args))
        for name, value in server_args.items():
            field = name if name in cat.specs else None
            if field is None:
                if strict:
                    raise _unknown_field_error(name, cat=cat)
                extras[name] = value
                continue
            spec = cat.specs[field]
            if is_secret(field) and value == MASK:
                continue
            if spec.value_type == "none":
                continue
            if _same(value, spec.default) and spec.default_expr is None:
                continue
            if spec.default_expr is not None and value is None:
                continue
            if spec.resolvable and spec.default is None and _same(value, spec.fallback):
                continue  # SGLang's own fallback, resolved at start-up: no user choice
            try:
                values[field] = _check_value(spec, value)
            except ConfigError as exc:
                if strict:
                    raise
                logger.warning("keeping %s=%r as the server reported it: %s", field, value, exc)
                values[field] = value
        return cls._make(values, extras, cat=cat)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, source: str | None = None, release: str | None = None
    ) -> ServerConfig:
        """From the content of a config file: ``{"server_args": {...}}``, ``{"argv": [...]}`` or flat fields.

        The release is ``release``, else the file's ``sglang_version`` (it pins the config),
        else the default (the installed SGLang, else :data:`DEFAULT_RELEASE`, the newest bundled).
        """
        where = f" in {source}" if source else ""
        if not isinstance(data, Mapping):
            raise ConfigError(f"a server config must be a JSON object{where}, got {type(data).__name__}")
        meta = {k: data[k] for k in ("name", "description", "source", "notes") if k in data}
        release = release or data.get("sglang_version")
        if "argv" in data:
            config = cls.from_argv(data["argv"], release=release)
            if "server_args" in data:
                config = config.with_changes(**data["server_args"])
        elif "server_args" in data:
            args = data["server_args"]
            if not isinstance(args, Mapping):
                raise ConfigError(f"'server_args'{where} must be an object of ServerArgs fields")
            config = cls(release, **{k: v for k, v in args.items() if not (is_secret(k) and v == MASK)})
        else:
            reserved = {"format", "name", "description", "source", "notes", "sglang_version"}
            config = cls(release, **{k: v for k, v in data.items() if k not in reserved and not (is_secret(k) and v == MASK)})
        return cls._make(config._values, config._extras, {**config._meta, **meta}, config._cat)

    @classmethod
    def load(cls, name_or_path: str | Path, *, release: str | None = None) -> ServerConfig:
        """A shipped config by name (``"glm5-baseline"``) or a JSON file by path (see :meth:`from_dict` for ``release``)."""
        shipped = shipped_configs()
        text_name = str(name_or_path)
        path = Path(name_or_path)
        if text_name in shipped:
            path = shipped[text_name]
        elif not path.is_file():
            close = _closest(text_name, shipped)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"no config file {text_name!r} and no shipped config of that name{hint}; "
                f"shipped: {', '.join(shipped) or '(none)'}",
                field="config", valid=list(shipped),
            )
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc}", field="config") from None
        config = cls.from_dict(data, source=str(path), release=release)
        meta = {"name": path.stem, **config._meta, "path": str(path)}
        return cls._make(config._values, config._extras, meta, config._cat)

    # -- writing ---------------------------------------------------------------------------

    def save(self, path: str | Path, *, name: str | None = None, description: str | None = None) -> Path:
        """Write the explicit fields as a config file (secrets masked); returns the path."""
        path = Path(path)
        meta = {k: v for k, v in self._meta.items() if k != "path"}
        if name is not None:
            meta["name"] = name
        if description is not None:
            meta["description"] = description
        data = {
            "format": CONFIG_FORMAT,
            **meta,
            "sglang_version": self.release,
            "server_args": self.to_dict(mask=True),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")
        return path

    def to_argv(self) -> list[str]:
        """The ``sglang.launch_server`` arguments (without the launcher), secrets in clear."""
        argv: list[str] = []
        specs = self._cat.specs
        for name, value in self._values.items():
            spec = specs[name]
            if spec.value_type == "none" or value is None:
                continue
            if not spec.flags:
                raise ConfigError(
                    f"{name} cannot be set on SGLang {self.release}'s command line (no flag sets it)",
                    field=name, valid=[],
                )
            if name == "disable_cuda_graph" and spec.deprecated and self._cat.graphs_by_phase:
                # the release's own spelling of "CUDA graphs off" (the old switch warns there)
                for phase in ("decode", "prefill"):
                    if value and f"cuda_graph_backend_{phase}" not in self._values:
                        argv.extend([specs[f"cuda_graph_backend_{phase}"].flag, "disabled"])
                continue
            if spec.action == "boolean_optional":
                if value != spec.default:
                    argv.append(spec.flag if value else f"--no-{spec.flag[2:]}")
                continue
            if spec.value_type == "bool":
                want_flag = value if spec.action != "store_false" else not value
                if want_flag:
                    argv.append(spec.flag)
                elif _same(value, spec.default) is False and spec.default is not None:
                    raise ConfigError(
                        f"{name}={value!r} cannot be expressed on SGLang's command line "
                        f"({spec.flag} only switches it {'on' if spec.action != 'store_false' else 'off'})",
                        field=name, valid=[repr(spec.default)],
                    )
                continue
            if spec.value_type == "list":
                if not value and spec.nargs == "+":
                    continue
                argv.append(spec.flag)
                argv.extend(_format_scalar(v) for v in value)
                continue
            if spec.value_type == "json":
                argv.extend([spec.flag, value if isinstance(value, str) else json.dumps(value)])
                continue
            argv.extend([spec.flag, _format_scalar(value)])
        return argv

    def to_command(self, python: str = "python", module: str = "sglang.launch_server") -> list[str]:
        """The whole command as an argv list: ``[python, "-m", module, *to_argv()]``."""
        return [python, "-m", module, *self.to_argv()]

    def to_shell(self, python: str = "python", module: str = "sglang.launch_server") -> str:
        """The command as one shell-quoted string for display, secrets masked."""
        masked = ServerConfig._make({k: mask_value(k, v) for k, v in self._values.items()}, cat=self._cat)
        return shlex.join(masked.to_command(python, module))

    # -- comparing and changing --------------------------------------------------------------

    def diff(self, other: ServerConfig) -> dict[str, tuple[Any, Any]]:
        """Fields whose effective values differ: ``{field: (mine, theirs)}`` in SGLang's order.

        Across releases, renamed fields line up (a 0.5.9 ``cuda_graph_max_bs`` with 0.5.23's
        ``cuda_graph_max_bs_decode``, keyed by this config's name) and "CUDA graphs off" is
        compared as intent, whichever flags spelled it.
        """
        if not isinstance(other, ServerConfig):
            raise TypeError(f"diff needs a ServerConfig, got {type(other).__name__}")
        names = set(self._values) | {self._cat.field_name(n) or n for n in other._values}
        if "cuda_graph_backend_decode" in names or "disable_cuda_graph" in names:
            names.add("disable_cuda_graph")
        out: dict[str, tuple[Any, Any]] = {}
        order = list(self._cat.specs) + [n for n in names if n not in self._cat.specs]
        for name in order:
            if name not in names:
                continue
            mine = getattr(self, name) if self._cat.field_name(name) else None
            theirs = getattr(other, name) if other._cat.field_name(name) else None
            if not _same(mine, theirs):
                out[name] = (mine, theirs)
        return out

    def with_changes(self, **fields: Any) -> ServerConfig:
        """A copy with ``fields`` set (validated); the original is unchanged."""
        values = {**self._values, **_checked(self._cat, fields)}
        meta = {k: v for k, v in self._meta.items() if k not in ("path",)}
        return self._make(values, self._extras, meta, self._cat)

    def without(self, *fields: str) -> ServerConfig:
        """A copy where ``fields`` are unset again (back to SGLang's defaults)."""
        names = set()
        for name in fields:
            field = self._cat.field_name(name)
            if field is None:
                raise _unknown_field_error(name, cat=self._cat)
            names.add(field)
        values = {k: v for k, v in self._values.items() if k not in names}
        return self._make(values, self._extras, {k: v for k, v in self._meta.items() if k != "path"}, self._cat)


def _checked(cat: Catalogue, fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` under ``cat``'s names (renamed ones follow), each value validated."""
    values: dict[str, Any] = {}
    for name, value in fields.items():
        field = cat.field_name(name)
        if field is None:
            raise _unknown_field_error(name, cat=cat)
        values[field] = _check_value(cat.specs[field], value)
    return values


def cuda_graphs_off(server_args: Mapping[str, Any]) -> bool:
    """Whether a server-args dict (any release: a config, a logged ServerArgs, /get_server_info)
    turns CUDA graphs off for both phases: ``disable_cuda_graph`` up to 0.5.9; in 0.5.23 (which
    logs the deprecated switch as False) each phase as :func:`graphs_off_for` resolves it."""
    return graphs_off_for(server_args, "decode") and graphs_off_for(server_args, "prefill")


def graphs_off_for(server_args: Mapping[str, Any], phase: str) -> bool:
    """Whether CUDA graphs end up off for ``phase`` (``'decode'`` or ``'prefill'``).

    SGLang 0.5.23's precedence (``arg_groups/cuda_graph_hook.py``): an explicit
    ``cuda_graph_backend_<phase>`` wins over ``disable_<phase>_cuda_graph``, which wins over the
    legacy ``disable_cuda_graph`` (the only switch up to 0.5.9). Booleans logged as text
    (``'False'``) read as what they say.
    """
    if phase not in ("decode", "prefill"):
        raise ValueError(f"phase {phase!r}: expected 'decode' or 'prefill'")
    backend = server_args.get(f"cuda_graph_backend_{phase}")
    if backend is not None and str(backend) not in ("", "None"):
        return str(backend).lower() == "disabled"
    return _true(server_args.get(f"disable_{phase}_cuda_graph")) or _true(server_args.get("disable_cuda_graph"))


def _true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _format_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return repr(value)
    return str(value)


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _looks_like_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _is_number(token)


def _strip_launcher(tokens: list[str]) -> list[str]:
    first_flag = next((i for i, t in enumerate(tokens) if t.startswith("--")), len(tokens))
    prefix = tokens[:first_flag]
    for i, token in enumerate(prefix):
        if token.endswith(_LAUNCHER_TOKENS) or (token == "serve" and i > 0):
            return tokens[i + 1 :]
    return tokens


def parse_assignment(text: str, release: str | None = None) -> tuple[str, Any]:
    """``FIELD=VALUE`` (as ``glm5 config --set`` takes it) as a field and a value of its type."""
    name, sep, raw = text.partition("=")
    if not sep:
        raise ConfigError(f"--set expects FIELD=VALUE, got {text!r}", field=text)
    cat = catalogue(release)
    name = name.strip().lstrip("-").replace("-", "_")
    field = cat.field_name(name)
    if field is None:
        raise _unknown_field_error(name, cat=cat)
    spec = cat.specs[field]
    if spec.value_type == "bool":
        lowered = raw.strip().lower()
        if lowered not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(f"{name} is a switch: use {name}=true or {name}=false", field=name, valid=["true", "false"])
        return name, lowered in ("true", "1", "yes")
    if raw.strip().lower() in ("none", "null") and spec.nullable:
        return name, None
    if spec.value_type == "list":
        return name, [_convert_token(spec, t, spec.item_type or "str") for t in raw.replace(",", " ").split()]
    return name, _convert_token(spec, raw)
