"""SGLang's own launch_server parser as catalogue entries (the truth where SGLang imports).

:func:`dump` reads the installed SGLang; :func:`from_parser_dump` turns that into catalogue
entries. This file imports nothing of glm5lib, so it also runs as a script with the Python of
another environment (``python sglang_parser.py`` prints the dump as JSON): that is how
scripts/build_sglang_flags.py generates the bundled catalogues from each release's wheel. The truth is
``ServerArgs.add_cli_args`` on a fresh argparse parser; field annotations and defaults come
from ``ServerArgs`` itself (a dataclass up to 0.5.9-era releases, a msgspec Struct later).
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import re
import sys
import warnings
from typing import Any

_KIND_ACTION = {
    "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
    "BooleanOptionalAction": "boolean_optional", "DeprecatedStoreTrueAction": "store_true",
    "DeprecatedAction": "DeprecatedAction", "DeprecatedStoreConstAction": "store_const",
    "LoRAPathAction": "LoRAPathAction", "_StoreAction": None,
}
_TYPE_VALUE = {"int": "int", "float": "float", "loads": "json", "json_list_type": "json",
               "parse_cuda_graph_config_arg": "json", "human_readable_int": "int"}


def from_parser_dump(dump: dict[str, Any]) -> list[dict[str, Any]]:
    """Catalogue entries from :func:`dump`'s output (SGLang's own parser and ServerArgs)."""
    fields = dump["fields"]
    entries: dict[str, dict[str, Any]] = {}
    for name, info in fields.items():
        entries[name] = {
            "field": name, "annotation": info["annotation"], "value_type": None,
            "default": info["default"], "default_expr": info["default_expr"], "required": False,
            "flags": [], "action": None, "nargs": None, "choices": None, "help": "",
            "deprecated": False, "in_server_args": True,
        }
    flag_only: dict[str, dict[str, Any]] = {}
    for action in dump["actions"]:
        dest = action["dest"]
        entry = entries.get(dest)
        if entry is None:
            entry = flag_only.setdefault(dest, {
                "field": dest, "annotation": None, "value_type": None, "default": action["default"],
                "default_expr": action["default_repr"], "required": False, "flags": [],
                "action": None, "nargs": None, "choices": None, "help": "", "deprecated": False,
                "in_server_args": False,
            })
        if entry["flags"]:
            entry.setdefault("alias_flags", []).extend(action["flags"])
            const = action.get("const")
            if action["nargs"] in ("0", 0) and const is not None and not isinstance(const, bool):
                # a switch that stores one value of a valued field (0.5.16's --disable-piecewise-cuda-graph
                # stores "disabled" into cuda_graph_backend_prefill)
                entry.setdefault("alias_consts", {}).update(dict.fromkeys(action["flags"], const))
            continue
        kind = action["kind"]
        act = _KIND_ACTION.get(kind, kind)
        nargs = action["nargs"] if action["nargs"] not in ("0", 0) else None
        if act in ("store_true", "store_false", "boolean_optional", "store_const"):
            value_type = "bool"
        elif act == "DeprecatedAction":
            value_type = "none"
        elif nargs in ("+", "*"):
            value_type = "list"
            entry["item_type"] = _TYPE_VALUE.get(action["type"] or "", "str")
        else:
            value_type = _TYPE_VALUE.get(action["type"] or "", "str")
        help_text = _first_sentence(action["help"])
        entry.update(
            flags=action["flags"], action=act, nargs=nargs, choices=action["choices"],
            help=help_text, value_type=value_type,
            deprecated=kind.startswith("Deprecated") or help_text.lower().startswith("deprecated"),
            required=action["required"],
        )
        if action["type"]:
            entry["cli_type"] = action["type"]
    # from_cli_args copies some dests onto differently named fields (args.tp_size =
    # args.tensor_parallel_size); such a flag also spells the field (--tp-size).
    for dest, moved in list(flag_only.items()):
        for flag in moved["flags"]:
            target = entries.get(flag.lstrip("-").replace("-", "_"))
            if target is not None and not target["flags"]:
                for key in ("flags", "action", "nargs", "choices", "help", "deprecated", "cli_type",
                            "value_type", "item_type", "required"):
                    if key in moved:
                        target[key] = moved[key]
                target["cli_dest"] = dest
                del flag_only[dest]
                break
    for entry in entries.values():
        if entry["value_type"] is None:  # a field no flag sets: judge by its default
            default = entry["default"]
            entry["value_type"] = (
                "bool" if isinstance(default, bool) else "int" if isinstance(default, int)
                else "float" if isinstance(default, float) else "list" if isinstance(default, list)
                else "json" if isinstance(default, dict) else "str"
            )
    return list(entries.values()) + sorted(flag_only.values(), key=lambda e: e["field"])



def _first_sentence(text: str | None) -> str:
    text = " ".join((text or "").split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    return match.group(1) if match else text


def _jsonable(value):
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _default_of(f: Any, missing: Any) -> tuple[Any, str | None]:
    """A dataclass or msgspec field's default and, where it has none, ``"required"``; ``missing``
    is the library's marker of an unset default."""
    if f.default is not missing:
        return f.default, None
    if f.default_factory is not missing:
        return f.default_factory(), None
    return None, "required"


def _fields(cls) -> dict[str, dict]:
    out: dict[str, dict] = {}
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            default, expr = _default_of(f, dataclasses.MISSING)
            out[f.name] = {"annotation": f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type)),
                           "default": default, "default_expr": expr}
        return out
    import msgspec

    for f in msgspec.structs.fields(cls):
        default, expr = _default_of(f, msgspec.NODEFAULT)
        # Annotated[...] metadata reprs carry memory addresses: drop them so output is stable
        annotation = re.sub(r" at 0x[0-9a-f]+", "", str(f.type).replace("typing.", ""))
        out[f.name] = {"annotation": annotation, "default": default, "default_expr": expr}
    return out


def dump() -> dict[str, Any]:
    """The installed SGLang's parser and ServerArgs fields as plain data (imports sglang)."""
    import sglang.srt.server_args as sa
    from sglang.version import __version__

    parser = argparse.ArgumentParser()
    sa.ServerArgs.add_cli_args(parser)
    fields = _fields(sa.ServerArgs)
    actions = []
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        kind = type(action).__name__
        type_name = getattr(action.type, "__name__", None) if action.type is not None else None
        choices = action.choices
        if isinstance(choices, (set, frozenset)):  # unordered in the source: sort for stable output
            choices = sorted(choices, key=str)
        choices = list(choices) if choices is not None else None
        if choices is not None and not _jsonable(choices):
            choices = [str(c) for c in choices]
        default = action.default
        # what a switch stores (argparse's const; SGLang's deprecated switches keep it as const_value)
        const = getattr(action, "const_value", action.const)
        const = const.value if isinstance(const, enum.Enum) else const
        actions.append({
            "dest": action.dest,
            "flags": list(action.option_strings),
            "kind": kind,
            "type": type_name,
            "nargs": action.nargs if isinstance(action.nargs, (str, type(None))) else str(action.nargs),
            "choices": choices,
            "default": default if _jsonable(default) else None,
            "default_repr": None if _jsonable(default) else repr(default),
            "required": bool(action.required),
            "help": action.help if isinstance(action.help, str) else "",
            "const": const if _jsonable(const) else None,
        })
    for info in fields.values():
        if not _jsonable(info["default"]):
            info["default_expr"] = info["default_expr"] or repr(info["default"])
            info["default"] = None
    return {"version": __version__, "file": sa.__file__, "fields": fields, "actions": actions}


def main() -> int:
    warnings.simplefilter("ignore")
    json.dump(dump(), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
