#!/usr/bin/env python
"""Regenerate a release's catalogue of ``sglang.launch_server`` flags (JSON package data).

The catalogues live in ``glm5lib/engines/sglang/flags/<release>.json`` and are read lazily by
:func:`glm5lib.engines.sglang.config.catalogue` (one file per release, loaded on first use).

The catalogue is read statically (with :mod:`ast`, nothing of SGLang is imported or run) from
SGLang's ``python/sglang/srt/server_args.py``: the fields of the ``ServerArgs`` dataclass with
their annotations and defaults, and the ``parser.add_argument`` calls of
``ServerArgs.add_cli_args`` with their flag names, ``dest``, ``type``, ``action``, ``nargs`` and
``choices`` (module-level choice lists are resolved).

Usage::

    python scripts/build_sglang_flags.py PATH [--version V] [--commit C] [--origin O] [-o OUT]
    python scripts/build_sglang_flags.py --python .engines/sglang-0.5.23/bin/python \
        --wheel-sha256 SHA --origin O

Without ``-o`` the file is ``glm5lib/engines/sglang/flags/<version>.json``.

The second form is the truth where SGLang imports: it runs ``scripts/sglang_env/dump_parser.py``
with that interpreter (an environment built by ``scripts/sglang_envs.py``), which calls
``ServerArgs.add_cli_args`` on a fresh argparse parser and reads ``ServerArgs``' own fields
(a dataclass, or a msgspec Struct from the 0.5.1x releases on); no source reading involved.

PATH is a SGLang git checkout, an unpacked sglang wheel or sdist (the folder holding
``sglang/``), or ``server_args.py`` itself. The SGLang version and commit are taken from the
checkout (``git describe``/``git rev-parse``) or from ``sglang/_version.py`` when present;
``--version``/``--commit`` override them. This layout (one dataclass plus explicit
``add_argument`` calls) is the one of the SGLang 0.4/0.5 releases up to 0.5.9; later releases
build the parser from field metadata and need a new reader.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from glm5lib.engines.sglang.config.sglang_parser import from_parser_dump

FLAGS_DIR = Path(__file__).resolve().parent.parent / "glm5lib" / "engines" / "sglang" / "flags"
_UNRESOLVED = object()


def find_server_args(path: Path) -> Path:
    candidates = [
        path,
        path / "python" / "sglang" / "srt" / "server_args.py",
        path / "sglang" / "srt" / "server_args.py",
        path / "srt" / "server_args.py",
    ]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    sys.exit(f"no server_args.py under {path} (looked at {[str(c) for c in candidates]})")


def _git(repo: Path, *args: str) -> str | None:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def source_identity(server_args: Path) -> dict[str, str | None]:
    version = commit = None
    for parent in server_args.parents:
        if (parent / ".git").exists():
            commit = _git(parent, "rev-parse", "HEAD")
            version = _git(parent, "describe", "--tags", "--always")
            break
    version_file = server_args.parent.parent / "_version.py"
    if version_file.is_file():
        text = version_file.read_text()
        found = re.search(r"__version__\s*=\s*version\s*=\s*'([^']+)'", text)
        if found and version is None:
            version = found.group(1)
        found = re.search(r"__commit_id__\s*=\s*commit_id\s*=\s*'([^']+)'", text)
        if found and commit is None:
            commit = found.group(1)
    return {"version": version, "commit": commit}


class Evaluator:
    """Evaluates the literal parts of server_args.py: constants, choice lists, field defaults."""

    def __init__(self, tree: ast.Module):
        self.module_values: dict[str, Any] = {}
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = self.eval(node.value)
                if value is not _UNRESOLVED:
                    self.module_values[node.targets[0].id] = value
        self.field_defaults: dict[str, Any] = {}

    def eval(self, node: ast.AST | None) -> Any:
        if node is None:
            return _UNRESOLVED
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            out: list[Any] = []
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    inner = self.eval(element.value)
                    if inner is _UNRESOLVED:
                        return _UNRESOLVED
                    out.extend(inner)
                else:
                    value = self.eval(element)
                    if value is _UNRESOLVED:
                        return _UNRESOLVED
                    out.append(value)
            if isinstance(node, ast.Set):
                return sorted(set(out), key=str)
            return out
        if isinstance(node, ast.Dict):
            keys = [self.eval(k) for k in node.keys]
            values = [self.eval(v) for v in node.values]
            if _UNRESOLVED in keys or _UNRESOLVED in values:
                return _UNRESOLVED
            return dict(zip(keys, values, strict=True))
        if isinstance(node, ast.Name):
            return self.module_values.get(node.id, _UNRESOLVED)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ServerArgs":
            return self.field_defaults.get(node.attr, _UNRESOLVED)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
            left, right = self.eval(node.left), self.eval(node.right)
            if _UNRESOLVED in (left, right):
                return _UNRESOLVED
            try:
                return left + right if isinstance(node.op, ast.Add) else left * right
            except TypeError:
                return _UNRESOLVED
        if isinstance(node, ast.Subscript):
            container, index = self.eval(node.value), self.eval(node.slice)
            try:
                return container[index]
            except (TypeError, KeyError, IndexError):
                return _UNRESOLVED
        if isinstance(node, ast.Lambda):
            return self.eval(node.body)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            value = self.eval(node.operand)
            return -value if isinstance(value, (int, float)) else _UNRESOLVED
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("list", "set", "sorted", "tuple")
            and len(node.args) == 1
        ):
            value = self.eval(node.args[0])
            if value is not _UNRESOLVED:
                return sorted(value, key=str) if node.func.id in ("set", "sorted") else list(value)
        return _UNRESOLVED


def first_sentence(text: str | None) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", text)
    sentence = match.group(1) if match else text
    return sentence if len(sentence) <= 200 else sentence[:197] + "..."


def jsonable(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(jsonable(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and jsonable(v) for k, v in value.items())
    return False


def value_type_of(annotation: str) -> str:
    inner = annotation
    found = re.fullmatch(r"Optional\[(.*)\]", inner)
    if found:
        inner = found.group(1)
    if inner.startswith(("List[", "list[", "Tuple[", "tuple[")):
        return "list"
    if inner.startswith(("Dict[", "dict[", "Union[")) or "Dict" in inner:
        return "json"
    return {"int": "int", "float": "float", "bool": "bool", "str": "str"}.get(inner, "str")


def settle_value_type(entry: dict[str, Any]) -> None:
    """How a value is written on the command line, which is what to_argv/from_argv need.

    The command line decides (action, nargs, type=); the annotation only fills gaps.
    """
    cli_type = entry.get("cli_type")
    scalar = {"int": "int", "float": "float", "str": "str", "nullable_str": "str"}
    item = scalar.get(cli_type or "")
    if entry["action"] and "Deprecated" in entry["action"]:
        entry["value_type"] = "none"  # accepted and ignored by SGLang, takes no value
    elif entry["action"] in ("store_true", "store_false"):
        entry["value_type"] = "bool"
    elif cli_type in ("json.loads", "json_list_type"):
        entry["value_type"] = "json"
    elif entry["nargs"] in ("+", "*"):
        entry["value_type"] = "list"
        entry["item_type"] = item or "str"
    elif item is not None:
        entry["value_type"] = item
    elif entry["value_type"] is None:
        entry["value_type"] = "str"


def build(server_args: Path) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
    tree = ast.parse(server_args.read_text())
    evaluator = Evaluator(tree)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ServerArgs")

    fields: dict[str, dict[str, Any]] = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
            annotation = ast.unparse(node.annotation)
            if annotation.startswith("ClassVar"):
                continue
            default: Any
            if node.value is None:
                default, default_repr, required = None, None, True
            else:
                value_node = node.value
                # dataclasses.field(default_factory=list) and friends
                if isinstance(value_node, ast.Call) and ast.unparse(value_node.func).endswith("field"):
                    factory = next((k.value for k in value_node.keywords if k.arg == "default_factory"), None)
                    plain = next((k.value for k in value_node.keywords if k.arg == "default"), None)
                    if plain is not None:
                        value_node = plain
                    elif isinstance(factory, ast.Lambda):
                        value_node = factory.body
                    elif isinstance(factory, ast.Name) and factory.id in ("list", "dict"):
                        value_node = ast.List(elts=[]) if factory.id == "list" else ast.Dict(keys=[], values=[])
                default = evaluator.eval(value_node)
                default_repr = None
                if default is _UNRESOLVED or not jsonable(default):
                    default_repr = ast.unparse(value_node)
                    default = None
                required = False
            evaluator.field_defaults[name] = default
            fields[name] = {
                "field": name,
                "annotation": annotation,
                "value_type": value_type_of(annotation),
                "default": default,
                "default_expr": default_repr,
                "required": required,
                "flags": [],
                "action": None,
                "nargs": None,
                "choices": None,
                "help": "",
                "deprecated": False,
                "in_server_args": True,
            }

    add_cli = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    flag_only: dict[str, dict[str, Any]] = {}
    for node in ast.walk(add_cli):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not flags or not flags[0].startswith("-"):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        dest = evaluator.eval(kw.get("dest")) if "dest" in kw else None
        if not isinstance(dest, str):
            long_flags = [f for f in flags if f.startswith("--")]
            dest = (long_flags or flags)[0].lstrip("-").replace("-", "_")
        action_node = kw.get("action")
        action = None
        if action_node is not None:
            action = action_node.value if isinstance(action_node, ast.Constant) else ast.unparse(action_node)
        type_node = kw.get("type")
        type_name = ast.unparse(type_node) if type_node is not None else None
        nargs = evaluator.eval(kw.get("nargs")) if "nargs" in kw else None
        if nargs is _UNRESOLVED:
            nargs = ast.unparse(kw["nargs"])
        choices = evaluator.eval(kw.get("choices")) if "choices" in kw else None
        choices_expr = None
        if choices is _UNRESOLVED:
            choices, choices_expr = None, ast.unparse(kw["choices"])
        help_value = evaluator.eval(kw.get("help")) if "help" in kw else ""
        if help_value is _UNRESOLVED:
            help_value = ast.unparse(kw["help"]) if isinstance(kw["help"], ast.JoinedStr) else ""
        entry = fields.get(dest)
        if entry is None:
            entry = flag_only.setdefault(dest, {
                "field": dest, "annotation": None, "value_type": None, "default": None,
                "default_expr": None, "required": False, "flags": [], "action": None, "nargs": None,
                "choices": None, "help": "", "deprecated": False, "in_server_args": False,
            })
        if entry["flags"]:
            # a second add_argument for the same dest (an alias such as a deprecated spelling)
            entry.setdefault("alias_flags", []).extend(flags)
            continue
        entry["flags"] = flags
        entry["action"] = action
        entry["nargs"] = nargs
        entry["choices"] = list(choices) if choices is not None else None
        if choices_expr:
            entry["choices_expr"] = choices_expr
        entry["help"] = first_sentence(help_value if isinstance(help_value, str) else "")
        entry["deprecated"] = bool(action and "Deprecated" in action) or "deprecated" in entry["help"].lower()[:40]
        if kw.get("required") is not None and evaluator.eval(kw["required"]) is True:
            entry["required"] = True
        if type_name is not None:
            entry["cli_type"] = type_name
        if entry["value_type"] is None:
            entry["value_type"] = {"int": "int", "float": "float"}.get(type_name or "", "bool" if action in ("store_true", "store_false") else "str")
        if "default" in kw and not entry["in_server_args"]:
            value = evaluator.eval(kw["default"])
            entry["default"] = value if value is not _UNRESOLVED and jsonable(value) else None

    # from_cli_args copies some argparse dests onto differently named fields
    # (args.tp_size = args.tensor_parallel_size): those flags set that field.
    from_cli = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "from_cli_args"), None)
    for node in ast.walk(from_cli) if from_cli is not None else ():
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Attribute)
            and isinstance(node.value, ast.Attribute)
        ):
            target, source = node.targets[0].attr, node.value.attr
            if target in fields and source in flag_only and not fields[target]["flags"]:
                moved = flag_only.pop(source)
                for key in ("flags", "action", "nargs", "choices", "help", "deprecated", "cli_type"):
                    if key in moved:
                        fields[target][key] = moved[key]
                fields[target]["cli_dest"] = source

    for entry in [*fields.values(), *flag_only.values()]:
        settle_value_type(entry)
    catalogue = list(fields.values()) + sorted(flag_only.values(), key=lambda e: e["field"])
    problems = {
        "fields_without_flag": [e["field"] for e in fields.values() if not e["flags"]],
        "flags_without_field": [e["field"] for e in flag_only.values()],
    }
    return catalogue, problems


CATALOGUE_FORMAT = "glm5lib.flag_catalogue/1"

ABOUT = (
    "Catalogue of SGLang launch_server flags (generated by scripts/build_sglang_flags.py; do not "
    "edit). One entry per ServerArgs field, in field-definition order, then flags that set no "
    "ServerArgs field. Keys: field, annotation, value_type (int|float|bool|str|list|json|none), "
    "default (JSON value; null with default_expr when the default is computed), required, flags "
    "(first = canonical), action, nargs, choices (null = free), help (first sentence), "
    "deprecated, in_server_args (false for CLI-only flags)."
)


def render_catalogue(source: dict[str, Any], flags: list[dict[str, Any]], no_flag: list[str]) -> str:
    """The catalogue file's text: JSON, one flag entry per line (so a new release diffs by flag)."""
    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)

    head = {"format": CATALOGUE_FORMAT, "about": ABOUT, "source": source, "fields_without_flag": no_flag}
    lines = ["{"]
    lines.extend(f"  {dump(key)}: {dump(value)}," for key, value in head.items())
    lines.append('  "flags": [')
    lines.extend(f"    {dump(entry)}{',' if i < len(flags) - 1 else ''}" for i, entry in enumerate(flags))
    lines.extend(["  ]", "}"])
    return "\n".join(lines) + "\n"


def write_catalogue(out: Path | None, source: dict[str, Any], flags: list[dict[str, Any]],
                    no_flag: list[str]) -> Path:
    out = out or FLAGS_DIR / f"{source['version']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_catalogue(source, flags, no_flag))
    return out


def main_from_parser(args: argparse.Namespace) -> int:
    dumper = Path(__file__).resolve().parent.parent / "glm5lib" / "engines" / "sglang" / "config" / "sglang_parser.py"
    done = subprocess.run([args.python, str(dumper)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{args.python} {dumper} failed:\n{done.stderr[-3000:]}")
    dump = json.loads(done.stdout)
    catalogue = from_parser_dump(dump)  # the same conversion glm5lib uses at run time
    version = args.version or dump["version"]
    source = {
        "version": version,
        "commit": args.commit,
        "origin": args.origin or f"PyPI wheel sglang-{version}, read from its own parser (ServerArgs.add_cli_args)",
        "file": "python/sglang/srt/server_args.py",
        "wheel_sha256": args.wheel_sha256,
    }
    no_flag = [e["field"] for e in catalogue if e["in_server_args"] and not e["flags"]]
    out = write_catalogue(args.out, source, catalogue, no_flag)
    print(f"wrote {out}: {len(catalogue)} entries, {len(no_flag)} fields without a flag")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, nargs="?", help="SGLang checkout, unpacked wheel, or server_args.py")
    parser.add_argument("--python", help="interpreter of an environment with SGLang installed: read its parser")
    parser.add_argument("--wheel-sha256", help="sha256 of the sglang wheel installed there, recorded")
    parser.add_argument("--version", help="SGLang version to record (default: from the checkout)")
    parser.add_argument("--commit", help="SGLang commit to record (default: from the checkout)")
    parser.add_argument("--origin", default=None, help="where the source came from, recorded verbatim")
    parser.add_argument("-o", "--out", type=Path, default=None,
                        help="output file (default: glm5lib/engines/sglang/flags/<version>.json)")
    args = parser.parse_args(argv)
    if args.python:
        return main_from_parser(args)
    if args.path is None:
        parser.error("give PATH or --python")
    server_args = find_server_args(args.path)
    identity = source_identity(server_args)
    if args.version:
        identity["version"] = args.version
    if args.commit:
        identity["commit"] = args.commit
    catalogue, problems = build(server_args)
    source = {
        "version": identity["version"],
        "commit": identity["commit"],
        "origin": args.origin,
        "file": "python/sglang/srt/server_args.py",
        "sha256": hashlib.sha256(server_args.read_bytes()).hexdigest(),
    }
    out = write_catalogue(args.out, source, catalogue, problems["fields_without_flag"])
    print(
        f"wrote {out}: {len(catalogue)} entries "
        f"({sum(e['in_server_args'] for e in catalogue)} ServerArgs fields, "
        f"{len(problems['fields_without_flag'])} without a flag, "
        f"{len(problems['flags_without_field'])} CLI-only flags)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
