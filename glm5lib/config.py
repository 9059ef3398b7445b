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

import argparse
import difflib
import json
import logging
import math
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glm5lib._sglang_flags import FLAGS as _RAW_FLAGS
from glm5lib._sglang_flags import SOURCE as _RAW_SOURCE
from glm5lib.errors import ConfigError
from glm5lib.paths import data_dir

__all__ = [
    "MASK",
    "SECRET_FIELDS",
    "SGLANG_FLAGS",
    "SGLANG_SOURCE",
    "FlagSpec",
    "ServerConfig",
    "field_for",
    "flag_for",
    "mask_value",
    "register_cli",
    "shipped_configs",
]

logger = logging.getLogger(__name__)

MASK = "***"
#: Fields whose values are credentials; never written or shown in clear.
SECRET_FIELDS = frozenset({"api_key", "admin_api_key"})
_SECRET_NAME = re.compile(r"(api_key|secret|password|passwd|hf_token|auth_token|access_token)", re.I)

CONFIG_FORMAT = "glm5lib.server_config/1"


@dataclass(frozen=True)
class FlagSpec:
    """One ``sglang.launch_server`` flag, as read from SGLang's ``server_args.py``."""

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

    @property
    def flag(self) -> str:
        """The canonical spelling (the first one SGLang registers)."""
        return self.flags[0]

    @property
    def nullable(self) -> bool:
        """Whether ``None`` is a legal value (SGLang's 'unset, decide automatically')."""
        return self.default is None or bool(self.annotation and "Optional" in self.annotation)

    @property
    def takes_value(self) -> bool:
        return self.value_type not in ("bool", "none")


def _load_catalogue() -> dict[str, FlagSpec]:
    out: dict[str, FlagSpec] = {}
    for raw in _RAW_FLAGS:
        choices = raw.get("choices")
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
        )
    return out


#: field name -> FlagSpec, in SGLang's field-definition order.
SGLANG_FLAGS: Mapping[str, FlagSpec] = _load_catalogue()
#: Which SGLang the catalogue was generated from: version, commit, origin, file, sha256.
SGLANG_SOURCE: Mapping[str, Any] = dict(_RAW_SOURCE)

_FLAG_TO_FIELD: dict[str, str] = {
    flag: spec.field for spec in SGLANG_FLAGS.values() for flag in spec.flags
}
_LONG_FLAGS = sorted(f for f in _FLAG_TO_FIELD if f.startswith("--"))

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
})
_MINUS_ONE_ALLOWED = frozenset({"chunked_prefill_size"})


def _closest(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    return difflib.get_close_matches(word, list(candidates), n=n, cutoff=0.6)


def _unknown_field_error(name: str, what: str = "SGLang server argument") -> ConfigError:
    close = _closest(name, SGLANG_FLAGS)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(
        f"unknown {what} {name!r}{hint} (SGLang {SGLANG_SOURCE.get('version')} knows "
        f"{len(SGLANG_FLAGS)} fields; see glm5lib.config.SGLANG_FLAGS)",
        field=name,
        valid=close or sorted(SGLANG_FLAGS),
    )


def flag_for(field: str) -> str:
    """The canonical command-line flag of a ServerArgs field (``fp4_gemm_runner_backend`` -> ``--fp4-gemm-backend``)."""
    spec = SGLANG_FLAGS.get(field)
    if spec is None:
        raise _unknown_field_error(field)
    return spec.flag


def field_for(flag: str) -> str:
    """The ServerArgs field a flag sets (``--fp4-gemm-backend`` or ``--tp-size`` -> field name).

    Accepts every spelling SGLang registers and, like argparse, an unambiguous prefix.
    """
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
        raise ConfigError(
            f"ambiguous SGLang flag {name!r}: it could be {', '.join(sorted(prefixed)[:8])}",
            field=name,
            valid=sorted(prefixed),
        )
    close = _closest(name, _LONG_FLAGS)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(
        f"unknown SGLang flag {name!r}{hint}", field=name, valid=close or _LONG_FLAGS
    )


def is_secret(field: str) -> bool:
    return field in SECRET_FIELDS or bool(_SECRET_NAME.search(field))


def mask_value(field: str, value: Any) -> Any:
    """``"***"`` for a set secret field, the value otherwise."""
    if value is not None and value != "" and is_secret(field):
        return MASK
    return value


# --------------------------------------------------------------------------- value checking


def _type_name(spec: FlagSpec) -> str:
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
            field=spec.field, valid=[_type_name(spec)],
        )
    kind = spec.value_type
    if kind == "none":
        return value
    if kind == "list":
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(
                f"{spec.field} ({spec.flag}) expects a {_type_name(spec)}, got {value!r}",
                field=spec.field, valid=[_type_name(spec)],
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

    __slots__ = ("_extras", "_meta", "_values")

    def __init__(self, **fields: Any):
        values: dict[str, Any] = {}
        for name, value in fields.items():
            spec = SGLANG_FLAGS.get(name)
            if spec is None:
                raise _unknown_field_error(name)
            values[name] = _check_value(spec, value)
        object.__setattr__(self, "_values", self._ordered(values))
        object.__setattr__(self, "_extras", {})
        object.__setattr__(self, "_meta", {})

    @staticmethod
    def _ordered(values: Mapping[str, Any]) -> dict[str, Any]:
        return {name: values[name] for name in SGLANG_FLAGS if name in values}

    @classmethod
    def _make(
        cls,
        values: Mapping[str, Any],
        extras: Mapping[str, Any] | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> ServerConfig:
        config = cls.__new__(cls)
        object.__setattr__(config, "_values", cls._ordered(values))
        object.__setattr__(config, "_extras", dict(extras or {}))
        object.__setattr__(config, "_meta", dict(meta or {}))
        return config

    # -- reading ---------------------------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        spec = SGLANG_FLAGS.get(name)
        if spec is not None:
            return spec.default
        close = _closest(name, SGLANG_FLAGS)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise AttributeError(f"ServerConfig has no field {name!r}{hint}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"ServerConfig is immutable; use config.with_changes({name}=...) to get a changed copy"
        )

    def get(self, field: str) -> Any:
        """The value of ``field`` (its SGLang default when not set); unknown fields raise ConfigError."""
        if field not in SGLANG_FLAGS:
            raise _unknown_field_error(field)
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
        return f"ServerConfig({inner})"

    def to_dict(self, *, full: bool = False, mask: bool = False) -> dict[str, Any]:
        """Explicit fields (``full=True``: every field, defaults included) as a plain dict."""
        if full:
            data = {name: getattr(self, name) for name, spec in SGLANG_FLAGS.items() if spec.in_server_args}
            data.update({k: v for k, v in self._values.items() if k not in data})
        else:
            data = dict(self._values)
        if mask:
            data = {k: mask_value(k, v) for k, v in data.items()}
        return json.loads(json.dumps(data))

    def to_frame(self, *, full: bool = False):
        """A pandas DataFrame (field, flag, value, default, explicit) for display in a notebook."""
        import pandas as pd

        names = [n for n in SGLANG_FLAGS if full or n in self._values]
        rows = [
            {
                "field": n,
                "flag": SGLANG_FLAGS[n].flag,
                "value": mask_value(n, getattr(self, n)),
                "default": SGLANG_FLAGS[n].default,
                "explicit": n in self._values,
            }
            for n in names
        ]
        return pd.DataFrame(rows, columns=["field", "flag", "value", "default", "explicit"])

    # -- validation ------------------------------------------------------------------------

    def validate(self, *, require_model: bool = True) -> ServerConfig:
        """Check the whole config (values and cross-field rules); returns self or raises ConfigError."""
        for name, value in self._values.items():
            _check_value(SGLANG_FLAGS[name], value)
        if require_model and not self._values.get("model_path"):
            raise ConfigError(
                "model_path (--model-path) is required to launch SGLang",
                field="model_path", valid=["a local folder or a Hugging Face repo id"],
            )
        if self.disable_cuda_graph and "cuda_graph_max_bs" in self._values:
            logger.warning("cuda_graph_max_bs is set but disable_cuda_graph=True: it has no effect")
        return self

    # -- building --------------------------------------------------------------------------

    @classmethod
    def from_argv(cls, argv: Sequence[str] | str) -> ServerConfig:
        """Parse ``sglang.launch_server`` arguments (a list, or a command-line string).

        A leading ``python -m sglang.launch_server`` (or ``glm5lib.sim``) is skipped. Every
        spelling and unambiguous prefix SGLang's argparse accepts is accepted; an unknown flag
        raises ConfigError naming the closest valid one.
        """
        config, rest = cls.parse_known_argv(argv)
        if rest:
            first = rest[0]
            if first.startswith("-"):
                field_for(first)  # raises with the closest valid flag
            raise ConfigError(
                f"unexpected argument {first!r} in the SGLang command line (values follow their flag)",
                field=first, valid=_LONG_FLAGS,
            )
        return config

    @classmethod
    def parse_known_argv(cls, argv: Sequence[str] | str) -> tuple[ServerConfig, list[str]]:
        """Like :meth:`from_argv` but returns the tokens it does not know instead of raising.

        For programs that take SGLang's flags plus their own (the stand-in's ``--sim-*``):
        an unknown ``--flag`` is returned with the tokens after it up to the next flag.
        Known flags with bad values still raise ConfigError.
        """
        tokens = shlex.split(argv) if isinstance(argv, str) else [str(t) for t in argv]
        tokens = _strip_launcher(tokens)
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
                field = field_for(name)
            except ConfigError as exc:
                if "ambiguous" in str(exc):
                    raise
                rest.append(token)
                while i < len(tokens) and not _looks_like_flag(tokens[i]):
                    rest.append(tokens[i])
                    i += 1
                continue
            spec = SGLANG_FLAGS[field]
            if spec.value_type in ("bool", "none"):
                if has_inline:
                    raise ConfigError(
                        f"{spec.flag} is a switch and takes no value (got {token!r})",
                        field=field, valid=[spec.flag],
                    )
                if spec.value_type == "none":
                    logger.warning("%s is deprecated in SGLang and ignored", spec.flag)
                    continue
                values[field] = spec.action != "store_false"
                continue
            if spec.value_type == "list":
                items = [inline] if has_inline else []
                while not has_inline and i < len(tokens) and not _looks_like_flag(tokens[i]):
                    items.append(tokens[i])
                    i += 1
                if not items and spec.nargs == "+":
                    raise ConfigError(
                        f"{spec.flag} expects one or more values", field=field, valid=[_type_name(spec)]
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
                    f"{spec.flag} expects a value ({_type_name(spec)})",
                    field=field, valid=[str(c) for c in spec.choices] if spec.choices else [_type_name(spec)],
                )
            values[field] = _convert_token(spec, raw)
        checked = {name: _check_value(SGLANG_FLAGS[name], value) for name, value in values.items()}
        return cls._make(checked), rest

    @classmethod
    def from_server_args(
        cls, server_args: Mapping[str, Any] | str, *, strict: bool = False
    ) -> ServerConfig:
        """From a logged ``server_args=ServerArgs(...)`` dict (or line) or ``/get_server_info``.

        Only values that differ from the catalogue's defaults become explicit, so the result
        reads like the command line that produced them. Keys the catalogue does not know go to
        :attr:`extras` (``strict=True``: ConfigError). Values SGLang accepted but this catalogue
        rejects (a newer backend name, say) are kept with a warning unless ``strict``.
        A masked secret (``"***"``) is dropped.
        """
        if isinstance(server_args, str):
            from glm5lib import logs  # the log parser reads the ServerArgs repr

            server_args = logs.parse_server_args(server_args)
        values: dict[str, Any] = {}
        extras: dict[str, Any] = {}
        aliases = {spec.field: spec.field for spec in SGLANG_FLAGS.values()}
        for name, value in server_args.items():
            field = aliases.get(name)
            if field is None:
                if strict:
                    raise _unknown_field_error(name)
                extras[name] = value
                continue
            spec = SGLANG_FLAGS[field]
            if is_secret(field) and value == MASK:
                continue
            if spec.value_type == "none":
                continue
            if _same(value, spec.default) and spec.default_expr is None:
                continue
            if spec.default_expr is not None and value is None:
                continue
            try:
                values[field] = _check_value(spec, value)
            except ConfigError as exc:
                if strict:
                    raise
                logger.warning("keeping %s=%r as the server reported it: %s", field, value, exc)
                values[field] = value
        return cls._make(values, extras)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> ServerConfig:
        """From the content of a config file: ``{"server_args": {...}}``, ``{"argv": [...]}`` or flat fields."""
        where = f" in {source}" if source else ""
        if not isinstance(data, Mapping):
            raise ConfigError(f"a server config must be a JSON object{where}, got {type(data).__name__}")
        meta = {k: data[k] for k in ("name", "description", "source", "notes") if k in data}
        if "argv" in data:
            config = cls.from_argv(data["argv"])
            if "server_args" in data:
                config = config.with_changes(**data["server_args"])
        elif "server_args" in data:
            args = data["server_args"]
            if not isinstance(args, Mapping):
                raise ConfigError(f"'server_args'{where} must be an object of ServerArgs fields")
            config = cls(**{k: v for k, v in args.items() if not (is_secret(k) and v == MASK)})
        else:
            reserved = {"format", "name", "description", "source", "notes", "sglang_version"}
            config = cls(**{k: v for k, v in data.items() if k not in reserved and not (is_secret(k) and v == MASK)})
        return cls._make(config._values, config._extras, {**config._meta, **meta})

    @classmethod
    def load(cls, name_or_path: str | Path) -> ServerConfig:
        """A shipped config by name (``"glm5-baseline"``) or a JSON file by path."""
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
        config = cls.from_dict(data, source=str(path))
        meta = {"name": path.stem, **config._meta, "path": str(path)}
        return cls._make(config._values, config._extras, meta)

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
            "sglang_version": SGLANG_SOURCE.get("version"),
            "server_args": self.to_dict(mask=True),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2) + "\n")
        return path

    def to_argv(self) -> list[str]:
        """The ``sglang.launch_server`` arguments (without the launcher), secrets in clear."""
        argv: list[str] = []
        for name, value in self._values.items():
            spec = SGLANG_FLAGS[name]
            if spec.value_type == "none" or value is None:
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
        masked = ServerConfig._make({k: mask_value(k, v) for k, v in self._values.items()})
        return shlex.join(masked.to_command(python, module))

    # -- comparing and changing --------------------------------------------------------------

    def diff(self, other: ServerConfig) -> dict[str, tuple[Any, Any]]:
        """Fields whose effective values differ: ``{field: (mine, theirs)}`` in SGLang's order."""
        if not isinstance(other, ServerConfig):
            raise TypeError(f"diff needs a ServerConfig, got {type(other).__name__}")
        names = set(self._values) | set(other._values)
        out: dict[str, tuple[Any, Any]] = {}
        for name in SGLANG_FLAGS:
            if name not in names:
                continue
            mine, theirs = getattr(self, name), getattr(other, name)
            if not _same(mine, theirs):
                out[name] = (mine, theirs)
        return out

    def with_changes(self, **fields: Any) -> ServerConfig:
        """A copy with ``fields`` set (validated); the original is unchanged."""
        values = dict(self._values)
        for name, value in fields.items():
            spec = SGLANG_FLAGS.get(name)
            if spec is None:
                raise _unknown_field_error(name)
            values[name] = _check_value(spec, value)
        meta = {k: v for k, v in self._meta.items() if k not in ("path",)}
        return self._make(values, self._extras, meta)

    def without(self, *fields: str) -> ServerConfig:
        """A copy where ``fields`` are unset again (back to SGLang's defaults)."""
        for name in fields:
            if name not in SGLANG_FLAGS:
                raise _unknown_field_error(name)
        values = {k: v for k, v in self._values.items() if k not in fields}
        return self._make(values, self._extras, {k: v for k, v in self._meta.items() if k != "path"})


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


# --------------------------------------------------------------------------- CLI


def _resolve_config(text: str) -> ServerConfig:
    return ServerConfig.load(text)


def _parse_assignment(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep:
        raise ConfigError(f"--set expects FIELD=VALUE, got {text!r}", field=text)
    name = name.strip().lstrip("-").replace("-", "_")
    spec = SGLANG_FLAGS.get(name)
    if spec is None:
        raise _unknown_field_error(name)
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


def _cmd_config(args: argparse.Namespace) -> int:
    action = args.config_command
    if action == "list":
        for name, path in shipped_configs().items():
            config = ServerConfig.load(path)
            print(f"{name:28s} {config.meta.get('description', '')}")
        return 0
    if action == "flags":
        pattern = (args.pattern or "").lower().replace("-", "_")
        print(f"# SGLang {SGLANG_SOURCE.get('version')} ({SGLANG_SOURCE.get('origin') or SGLANG_SOURCE.get('commit')})")
        for spec in SGLANG_FLAGS.values():
            if pattern and pattern not in spec.field and pattern not in " ".join(spec.flags).replace("-", "_"):
                continue
            choices = f" choices={list(spec.choices)}" if spec.choices else ""
            default = spec.default if spec.default_expr is None else spec.default_expr
            print(f"{spec.field:40s} {' '.join(spec.flags):45s} {_type_name(spec):14s} default={default!r}{choices}")
        return 0
    if action == "check":
        argv = list(args.argv)
        if argv[:1] == ["--"]:
            argv = argv[1:]
        config = ServerConfig.from_argv(argv)
        config.validate(require_model=False)
        print(json.dumps(config.to_dict(mask=True), indent=2))
        return 0
    config = _resolve_config(args.config)
    changes = dict(_parse_assignment(item) for item in (args.set or []))
    if changes:
        config = config.with_changes(**changes)
    if action == "show":
        data = config.to_dict(full=args.all, mask=True)
        if args.json:
            print(json.dumps(data, indent=2))
        else:
            if config.meta.get("description"):
                print(f"# {config.meta['description']}")
            for name, value in data.items():
                marker = "" if name in config.explicit else "  (default)"
                print(f"{name:40s} {value!r}{marker}")
        return 0
    if action == "argv":
        if args.json:
            masked = ServerConfig._make({k: mask_value(k, v) for k, v in config.explicit.items()})
            print(json.dumps(masked.to_argv()))
        else:
            print(config.to_shell(module=args.module))
        return 0
    if action == "diff":
        other = _resolve_config(args.other)
        differences = config.diff(other)
        if args.json:
            print(json.dumps({k: [mask_value(k, a), mask_value(k, b)] for k, (a, b) in differences.items()}, indent=2))
            return 0
        if not differences:
            print("no differences")
            return 0
        left, right = config.name or args.config, other.name or args.other
        print(f"{'field':40s} {left:>24s} {right:>24s}")
        for name, (mine, theirs) in differences.items():
            print(f"{name:40s} {mask_value(name, mine)!r:>24} {mask_value(name, theirs)!r:>24}")
        return 1 if args.exit_code else 0
    raise ConfigError(f"unknown config action {action!r}", valid=["list", "flags", "check", "show", "argv", "diff"])


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``glm5 config`` (list/show/argv/diff/flags/check)."""
    parser = subparsers.add_parser(
        "config",
        help="show, diff and turn into argv SGLang server configs",
        description="Work with SGLang server configs: shipped ones by name (see 'glm5 config list') or JSON files.",
    )
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    sub.add_parser("list", help="list the shipped configs")
    flags = sub.add_parser("flags", help="search the catalogue of SGLang flags")
    flags.add_argument("pattern", nargs="?", help="substring of a field or flag name")
    check = sub.add_parser(
        "check", help="validate sglang.launch_server arguments (after '--')",
        description="Validate launch_server arguments: glm5 config check -- --model-path M --tp 8",
    )
    check.add_argument("argv", nargs=argparse.REMAINDER, help="the launch_server arguments")
    for name, text in (
        ("show", "show a config's fields (secrets masked)"),
        ("argv", "print the launch command for a config"),
        ("diff", "fields that differ between two configs"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("config", help="shipped config name or JSON file")
        if name == "diff":
            p.add_argument("other", help="shipped config name or JSON file to compare with")
            p.add_argument("--exit-code", action="store_true", help="exit 1 when the configs differ")
        if name == "show":
            p.add_argument("--all", action="store_true", help="include every field with its default")
        if name == "argv":
            p.add_argument("--module", default="sglang.launch_server", help="module to run (e.g. glm5lib.sim)")
        p.add_argument("--set", action="append", metavar="FIELD=VALUE", help="change a field first (repeatable)")
        p.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=_cmd_config)
