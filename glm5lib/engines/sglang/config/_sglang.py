"""SGLang's server configuration: the arguments of ``sglang.launch_server`` as a typed object.

:class:`SGLangConfig` (also importable under the name users already type, ``ServerConfig``)
reads and writes argv lists, logged ``ServerArgs`` dicts, ``/get_server_info`` payloads and
config files, checked against the flag catalogue of one SGLang release.
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from glm5lib.configmeta import described_changes
from glm5lib.engines.sglang.config._flags import _unknown_field_error, field_for
from glm5lib.engines.sglang.config._graphs import cuda_graphs_off
from glm5lib.engines.sglang.config._releases import (
    Catalogue,
    catalogue,
    default_release,
    guess_release,
)
from glm5lib.engines.sglang.config._values import (
    _closest,
    _convert_token,
    _same,
    check_value,
    type_name,
)
from glm5lib.errors import ConfigError
from glm5lib.masking import MASK, is_secret_name, mask_value
from glm5lib.paths import data_dir

__all__ = ["CONFIG_FORMAT", "SGLangConfig", "ServerConfig", "intent_flags", "parse_assignment", "shipped_configs"]

logger = logging.getLogger(__name__)

CONFIG_FORMAT = "glm5lib.server_config/1"


def shipped_configs() -> dict[str, Path]:
    """Name -> path of the SGLang configs shipped in ``data/configs/`` (``vllm-*.json`` are vLLM's:
    :mod:`glm5lib.engines.vllm`)."""
    folder = data_dir() / "configs"
    return {p.stem: p for p in sorted(folder.glob("*.json")) if not p.stem.startswith("vllm-")} if folder.is_dir() else {}


_LAUNCHER_TOKENS = ("sglang.launch_server", "glm5lib.sim", "launch_server")


class SGLangConfig:
    """Arguments of ``sglang.launch_server`` as ServerArgs fields; immutable, validated.

    ``SGLangConfig(model_path="zai-org/GLM-5", tp_size=8)``; every field SGLang knows reads as an
    attribute (its SGLang default when not set); :attr:`explicit` holds the fields that were set.
    Change with :meth:`with_changes`, compare with :meth:`diff`, launch with
    :func:`glm5lib.engines.sglang.launch`.
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
    ) -> SGLangConfig:
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

    def for_release(self, release: str) -> SGLangConfig:
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
        raise AttributeError(f"{type(self).__name__} has no field {name!r}{hint}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"{type(self).__name__} is immutable; use config.with_changes({name}=...) to get a changed copy"
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
        if not isinstance(other, SGLangConfig):
            return NotImplemented
        return not self.diff(other)

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(full=False), sort_keys=True, default=str))

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={mask_value(k, v)!r}" for k, v in self._values.items())
        pin = "" if self._cat.release == default_release() else f"release={self._cat.release!r}, "
        return f"{type(self).__name__}({pin}{inner})"

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

    def validate(self, *, require_model: bool = True) -> SGLangConfig:
        """Check the whole config (values and cross-field rules); returns self or raises ConfigError."""
        for name, value in self._values.items():
            check_value(self._cat.specs[name], value)
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
    def from_argv(cls, argv: Sequence[str] | str, *, release: str | None = None) -> SGLangConfig:
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
    ) -> tuple[SGLangConfig, list[str]]:
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
            if name in spec.alias_consts:  # a switch that stores one value of a valued field
                if has_inline:
                    raise ConfigError(f"{name} is a switch and takes no value (got {token!r})",
                                      field=field, valid=[name])
                values[field] = _convert_token(spec, str(spec.alias_consts[name]))
                continue
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
        checked = {name: check_value(cat.specs[name], value) for name, value in values.items()}
        return cls._make(checked, cat=cat), rest

    @classmethod
    def from_server_args(
        cls, server_args: Mapping[str, Any] | str, *, strict: bool = False, release: str | None = None
    ) -> SGLangConfig:
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
            if is_secret_name(field) and value == MASK:
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
                values[field] = check_value(spec, value)
            except ConfigError as exc:
                if strict:
                    raise
                logger.warning("keeping %s=%r as the server reported it: %s", field, value, exc)
                values[field] = value
        return cls._make(values, extras, cat=cat)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any], *, source: str | None = None, release: str | None = None
    ) -> SGLangConfig:
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
            config = cls(release, **{k: v for k, v in args.items() if not (is_secret_name(k) and v == MASK)})
        else:
            reserved = {"format", "name", "description", "source", "notes", "sglang_version"}
            config = cls(release, **{k: v for k, v in data.items() if k not in reserved and not (is_secret_name(k) and v == MASK)})
        return cls._make(config._values, config._extras, {**config._meta, **meta}, config._cat)

    @classmethod
    def load(cls, name_or_path: str | Path, *, release: str | None = None) -> SGLangConfig:
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
        masked = SGLangConfig._make({k: mask_value(k, v) for k, v in self._values.items()}, cat=self._cat)
        return shlex.join(masked.to_command(python, module))

    # -- comparing and changing --------------------------------------------------------------

    def diff(self, other: SGLangConfig) -> dict[str, tuple[Any, Any]]:
        """Fields whose effective values differ: ``{field: (mine, theirs)}`` in SGLang's order.

        Across releases, renamed fields line up (a 0.5.9 ``cuda_graph_max_bs`` with 0.5.23's
        ``cuda_graph_max_bs_decode``, keyed by this config's name) and "CUDA graphs off" is
        compared as intent, whichever flags spelled it.
        """
        if not isinstance(other, SGLangConfig):
            raise TypeError(f"diff needs an SGLangConfig, got {type(other).__name__}")
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

    def with_changes(self, **fields: Any) -> SGLangConfig:
        """A copy with ``fields`` set (validated); the original is unchanged."""
        checked = _checked(self._cat, fields)
        values = {**self._values, **checked}
        meta = described_changes({k: v for k, v in self._meta.items() if k not in ("path",)}, self._values, checked)
        return self._make(values, self._extras, meta, self._cat)

    def without(self, *fields: str) -> SGLangConfig:
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
        values[field] = check_value(cat.specs[field], value)
    return values


#: The name the SGLang configuration had before there were several engines; the same class.
ServerConfig = SGLangConfig


def intent_flags(field: str, release: str | None = None) -> str:
    """What sets ``field`` on ``release``'s command line, as :meth:`SGLangConfig.to_argv` writes
    it there: the flag of the field or of its successor (``cuda_graph_max_bs`` ->
    ``--cuda-graph-max-bs-decode`` on 0.5.23), and for a switch the tokens that turn it on
    (``disable_cuda_graph`` -> ``--cuda-graph-backend-decode disabled --cuda-graph-backend-prefill
    disabled`` where the old switch is deprecated). Remedies and advice name flags through this."""
    cat = catalogue(release)
    name = cat.field_name(field)
    if name is None:
        raise _unknown_field_error(field, cat=cat)
    spec = cat.specs[name]
    argv = SGLangConfig._make({name: True}, cat=cat).to_argv() if spec.value_type == "bool" else []
    return " ".join(argv) or spec.flag


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
