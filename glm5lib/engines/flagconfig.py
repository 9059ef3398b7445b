"""A server configuration checked against an engine's flag catalogue (JSON per release): what
``VllmConfig`` and ``TransformersConfig`` share.

Fields are the engine's own names (its argument parser's dests), checked and normalised on the
way in; the object is immutable (``with_changes`` copies); it renders as the engine's flags and is
written as ``{"format", "engine", "env", "server_args"}`` with secrets masked. Also here: the
interpreter an engine runs with and a configured model resolved to a local folder.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from glm5lib import server as server_mod
from glm5lib.configmeta import described_changes
from glm5lib.engines.base import Lever
from glm5lib.errors import ConfigError, ServerLaunchError
from glm5lib.logs import parse_log
from glm5lib.masking import mask_mapping

__all__ = ["FlagConfig", "blocks_as_kv_tokens", "catalogue_levers", "engine_python", "local_model"]

_REPO = Path(__file__).resolve().parents[2]


class FlagConfig:
    """The shared part of an engine configuration checked against its flag catalogue."""

    #: the engine's registry name, and the format its files declare
    engine = ""
    config_format = ""
    #: what one of its fields is, for messages ("a vLLM server argument")
    noun = "an argument"
    #: how its names are spelt, for messages ("names are vLLM's own (--max-num-seqs is max_num_seqs)")
    naming = ""
    #: other names accepted for a field (the notebooks' MODEL_PATH, TP_SIZE)
    aliases: Mapping[str, str] = {}
    #: fields the launcher sets itself (the address)
    launch_fields: frozenset[str] = frozenset()

    def __init__(self, args: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None,
                 meta: Mapping[str, Any] | None = None):
        self.meta = dict(meta or {})
        flags, source = self._flags()
        checked: dict[str, Any] = {}
        for key, value in dict(args or {}).items():
            field = self.aliases.get(key, key)
            spec = flags.get(field)
            if spec is None:
                close = difflib.get_close_matches(field, list(flags), n=3)
                hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
                raise ConfigError(f"{key!r} is not {self.noun}{hint}; {self.naming}, checked against "
                                  f"{self._catalogue_text(source)}", field=key, valid=close or sorted(flags))
            if field in self.launch_fields:
                continue  # the launcher picks the address
            checked[field] = self._check_value(field, spec, value)
        self._args = checked
        self.env = {str(k): str(v) for k, v in (env or {}).items()}

    # -- what each engine says ------------------------------------------------------------------

    def _flags(self) -> tuple[dict[str, dict[str, Any]], str]:
        """(field -> its catalogue entry, where the catalogue came from) of this config's release."""
        raise NotImplementedError

    def _catalogue_text(self, source: str) -> str:
        return f"the {source}"

    @staticmethod
    def _check_value(field: str, spec: Mapping[str, Any], value: Any) -> Any:
        return value

    @classmethod
    def _field(cls, key: str) -> str:
        """The field a name given to ``with_changes`` sets."""
        return cls.aliases.get(key, key)

    # -- reading --------------------------------------------------------------------------------

    @property
    def name(self) -> str | None:
        return self.meta.get("name")

    @property
    def args(self) -> dict[str, Any]:
        return dict(self._args)

    def get(self, field: str, default: Any = None) -> Any:
        return self._args.get(self.aliases.get(field, field), default)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._args == other._args and self.env == other.env

    def __hash__(self) -> int:
        return hash(json.dumps(self._args, sort_keys=True, default=str))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({mask_mapping(self._args)!r})"

    def to_dict(self, *, mask: bool = False) -> dict[str, Any]:
        return mask_mapping(self._args) if mask else dict(self._args)

    def diff(self, other: FlagConfig) -> dict[str, tuple[Any, Any]]:
        """Fields whose values differ: ``{field: (self's, other's)}`` (unset reads as the default)."""
        flags, _ = self._flags()
        out = {}
        for key in sorted(set(self._args) | set(other._args)):
            default = flags.get(key, {}).get("default")
            a, b = self._args.get(key, default), other._args.get(key, default)
            if a != b:
                out[key] = (a, b)
        return out

    # -- changing -------------------------------------------------------------------------------

    def with_changes(self, **fields: Any) -> Any:
        """A copy with ``fields`` set (the engine's names, or the aliases); ``None`` removes a field
        (back to the engine's default)."""
        args = dict(self._args)
        named: dict[str, Any] = {}
        for key, value in fields.items():
            field = self._field(key)
            named[field] = value
            if value is None:
                args.pop(field, None)
            else:
                args[field] = value
        return type(self)(args, env=self.env, meta=described_changes(self.meta, self._args, named))

    def without(self, *fields: str) -> Any:
        return self.with_changes(**{f: None for f in fields})

    # -- writing --------------------------------------------------------------------------------

    def _flag_argv(self, skip: tuple[str, ...] = ()) -> list[str]:
        """The fields as flags (``--max-num-seqs 4``; a switch off as ``--no-...`` where negatable)."""
        flags, _ = self._flags()
        argv: list[str] = []
        for key, value in self._args.items():
            if value is None or key in skip:
                continue
            spec = flags[key]
            flag = spec["flags"][0]
            if spec.get("kind") == "bool":
                if value:
                    argv.append(flag)
                elif spec.get("negatable"):
                    argv.append("--no-" + flag[2:])
            elif isinstance(value, list):
                argv += [flag, *map(str, value)]
            elif isinstance(value, Mapping):
                argv += [flag, json.dumps(value)]
            else:
                argv += [flag, str(value)]
        return argv

    def to_argv(self) -> list[str]:
        return self._flag_argv()

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write this config as a file of its format (secrets masked)."""
        path = Path(path)
        meta = {k: v for k, v in self.meta.items() if k not in ("path", "format", "engine")}
        data = {"format": self.config_format, "engine": self.engine, **meta, "env": self.env,
                "server_args": self.to_dict(mask=True)}
        path.write_text(json.dumps(data, indent=2, default=str) + "\n")
        return path


#: a lever as an engine lists it: (field, kind, low, high, step, what it is, what it acts on)
LeverSpec = tuple[str, str, float, float, str, str, str]


def catalogue_levers(specs: Sequence[LeverSpec], flags: Mapping[str, Mapping[str, Any]]) -> list[Lever]:
    """The levers of ``specs`` that a release's flag catalogue (``flags``: field -> its entry) has,
    each under the first of its flags."""
    return [Lever(name, kind, low, high, what, flag=flags[name]["flags"][0], step=step, acts_on=acts_on)
            for name, kind, low, high, step, what, acts_on in specs if name in flags]


def blocks_as_kv_tokens(blocks_field: str, size_keys: Sequence[str], size_field: str,
                        default_size: int) -> Callable[[str, Any, Any, Any], tuple[str, Any] | None]:
    """An adapter's ``change_hook`` for a KV pool set in blocks: a change of ``blocks_field`` as
    the neutral ``kv_tokens``, times the block size the change sets (under any of ``size_keys``),
    else the arguments' ``size_field``, else ``default_size``."""

    def hook(name: str, value: Any, changes: Any, args: Any) -> tuple[str, Any] | None:
        if name != blocks_field:
            return None
        size = next((changes.get(k) for k in size_keys if changes.get(k)), None) or args.get(size_field) or default_size
        try:
            return "kv_tokens", int(value) * int(size) if value is not None else None
        except (TypeError, ValueError):
            return None

    return hook


def local_model(model: str, field: str, local: bool, hint: str = "") -> str:
    """A configured model: an existing folder (absolute, or relative to here or to the repository)
    as its absolute path; a model id as it is; ConfigError for a ``local``-looking path that is
    not there (``hint`` appended)."""
    for candidate in (Path(model).expanduser(), _REPO / model):
        if candidate.exists():
            return str(candidate.resolve())
    if local:
        raise ConfigError(f"model path {model!r} does not exist{hint}", field=field)
    return model  # a model id the engine fetches itself


def engine_python(package: str, override: str, missing: str) -> str:
    """The interpreter that runs an engine: ``$<override>``, else ``$ENGINES/<package>``
    (``.engines/<package>`` by default) where the package is installed in it (a half-finished
    install has the interpreter but not the package), else this one when it imports the package;
    ServerLaunchError saying ``missing`` otherwise."""
    given = os.environ.get(override)
    if given:
        if not Path(given).exists():
            raise ServerLaunchError(f"{override}={given!r} does not exist", cause="not_found")
        return given
    engines = Path(os.environ.get("ENGINES") or _REPO / ".engines")
    if not engines.is_absolute():
        engines = _REPO / engines
    venv = engines / package
    if (venv / "bin" / "python").exists() and any(venv.glob(f"lib/python3*/site-packages/{package}/__init__.py")):
        return str(venv / "bin" / "python")
    if importlib.util.find_spec(package) is not None:
        return sys.executable
    raise ServerLaunchError(missing, cause="not_found")


def launch_engine(template: list[str], *, log_engine: str, title: str, **options: Any) -> Any:
    """Start an engine's argv ``template`` (:func:`glm5lib.server.launch_command` with
    ``options``); a start that fails quotes what the engine's own log says (read by its
    ``log_engine`` adapter), and the server's log is read by that adapter."""
    try:
        srv = server_mod.launch_command(template, ready_path="/health", **options)
    except ServerLaunchError as exc:
        raise _explained(exc, log_engine, title) from None
    srv.log_engine = log_engine
    return srv


def _explained(exc: ServerLaunchError, log_engine: str, title: str) -> ServerLaunchError:
    """``exc`` quoting what the engine's own log says about the failed start."""
    if exc.cause in ("port_in_use", "not_found") or not exc.log_path or not Path(exc.log_path).exists():
        return exc
    slog = parse_log(exc.log_path, engine=log_engine)
    if slog.errors.empty:
        return exc
    first = slog.errors.iloc[0]
    kind = slog.crash_cause() or first["kind"]
    lines = [line for text in slog.errors["text"] for line in str(text).splitlines()][:20]
    return ServerLaunchError(
        f"{title} died while starting ({kind}): {first['message']}; log: {exc.log_path}",
        cause=kind, exit_code=exc.exit_code, log_lines=lines + [ln for ln in exc.log_lines[-8:] if ln not in lines],
        log_path=exc.log_path,
    )
