"""Print, as JSON, every flag of the installed SGLang's own launch_server parser.

Run with the Python of an environment where SGLang is installed (``scripts/sglang_envs.py``
builds them); scripts/build_sglang_flags.py turns the output into a catalogue. The truth is
``ServerArgs.add_cli_args`` on a fresh argparse parser; field annotations and defaults come
from ``ServerArgs`` itself (a dataclass up to 0.5.9-era releases, a msgspec Struct later).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings


def _jsonable(value):
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _fields(cls) -> dict[str, dict]:
    out: dict[str, dict] = {}
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                default, expr = f.default, None
            elif f.default_factory is not dataclasses.MISSING:
                default, expr = f.default_factory(), None
            else:
                default, expr = None, "required"
            out[f.name] = {"annotation": f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type)),
                           "default": default, "default_expr": expr}
        return out
    import msgspec

    for f in msgspec.structs.fields(cls):
        if f.default is not msgspec.NODEFAULT:
            default, expr = f.default, None
        elif f.default_factory is not msgspec.NODEFAULT:
            default, expr = f.default_factory(), None
        else:
            default, expr = None, "required"
        annotation = str(f.type).replace("typing.", "")
        out[f.name] = {"annotation": annotation, "default": default, "default_expr": expr}
    return out


def main() -> int:
    warnings.simplefilter("ignore")
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
        choices = list(action.choices) if action.choices is not None else None
        if choices is not None and not _jsonable(choices):
            choices = [str(c) for c in choices]
        default = action.default
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
        })
    for name, info in fields.items():
        if not _jsonable(info["default"]):
            info["default_expr"] = info["default_expr"] or repr(info["default"])
            info["default"] = None
    json.dump({"version": __version__, "file": sa.__file__, "fields": fields, "actions": actions},
              sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
