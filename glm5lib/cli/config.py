"""``glm5 config``: list, show and turn into argv SGLang server configs.

``glm5 config diff`` is the older spelling of ``glm5 diff --raw`` (one diff verb): it still works
and says so on stderr. :func:`raw_diff` prints the field-by-field difference for both.
"""

from __future__ import annotations

import argparse
import json
import sys

from glm5lib.cli.options import add_command, settings_given
from glm5lib.engines.sglang.config import (
    DEFAULT_RELEASE,
    ServerConfig,
    catalogue,
    parse_assignment,
    shipped_configs,
    type_name,
)
from glm5lib.errors import ConfigError
from glm5lib.masking import mask_value

__all__ = ["raw_diff", "register_cli"]


def _resolve_config(text: str, release: str | None = None) -> ServerConfig:
    return ServerConfig.load(text, release=release)


def _cmd_config(args: argparse.Namespace) -> int:
    """Work with SGLang server configs: shipped ones by name (see 'glm5 config list') or JSON files."""
    action = args.config_command
    if action == "list":
        for name, path in shipped_configs().items():
            config = ServerConfig.load(path)
            print(f"{name:28s} {config.meta.get('description', '')}")
        return 0
    if action == "flags":
        pattern = (args.pattern or "").lower().replace("-", "_")
        cat = catalogue(args.release)  # None: the installed SGLang, else the default release
        source = cat.source
        print(f"# SGLang {cat.release} ({source.get('origin') or source.get('commit')})")
        for spec in cat.specs.values():
            if pattern and pattern not in spec.field and pattern not in " ".join(spec.flags).replace("-", "_"):
                continue
            choices = f" choices={list(spec.choices)}" if spec.choices else ""
            default = spec.default if spec.default_expr is None else spec.default_expr
            print(f"{spec.field:40s} {' '.join(spec.flags):45s} {type_name(spec):14s} default={default!r}{choices}")
        return 0
    if action == "check":
        argv = list(args.argv)
        if argv[:1] == ["--"]:
            argv = argv[1:]
        config = ServerConfig.from_argv(argv, release=args.release)
        config.validate(require_model=False)
        print(json.dumps(config.to_dict(mask=True), indent=2))
        return 0
    items = settings_given(args.set)
    config = _resolve_config(args.config, args.release)
    changes = dict(parse_assignment(item, config.release) for item in items)
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
            masked = ServerConfig._make({k: mask_value(k, v) for k, v in config.explicit.items()}, cat=config.catalogue)
            print(json.dumps(masked.to_argv()))
        else:
            print(config.to_shell(module=args.module))
        return 0
    if action == "diff":
        print("glm5: 'glm5 config diff' is deprecated: use 'glm5 diff --raw CURRENT REFERENCE'", file=sys.stderr)
        return raw_diff(config, args.other, other_release=args.other_release, as_json=args.json,
                        exit_code=args.exit_code, left_name=args.config)
    raise ConfigError(f"unknown config action {action!r}", valid=["list", "flags", "check", "show", "argv", "diff"])


def raw_diff(config: ServerConfig | str, other: ServerConfig | str, *, release: str | None = None,
             other_release: str | None = None, as_json: bool = False, exit_code: bool = False,
             left_name: str | None = None) -> int:
    """Print the fields that differ between two SGLang configs (secrets masked); returns the exit
    code (1 with ``exit_code`` when they differ)."""
    if not isinstance(config, ServerConfig):
        left_name = left_name or config
        config = _resolve_config(config, release)
    right_name = other if isinstance(other, str) else None
    other = other if isinstance(other, ServerConfig) else _resolve_config(other, other_release)
    differences = config.diff(other)
    if as_json:
        print(json.dumps({k: [mask_value(k, a), mask_value(k, b)] for k, (a, b) in differences.items()}, indent=2))
        return 1 if exit_code and differences else 0
    if not differences:
        print("no differences")
        return 0
    left, right = config.name or left_name or "current", other.name or right_name or "reference"
    print(f"{'field':40s} {left:>24s} {right:>24s}")
    for name, (mine, theirs) in differences.items():
        print(f"{name:40s} {mask_value(name, mine)!r:>24} {mask_value(name, theirs)!r:>24}")
    return 1 if exit_code else 0


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``glm5 config`` (list/show/argv/diff/flags/check)."""
    parser = add_command(subparsers, "config", _cmd_config, help="show, diff and turn into argv SGLang server configs")
    sub = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    sub.add_parser("list", help="list the shipped configs")
    flags = sub.add_parser("flags", help="search the catalogue of SGLang flags")
    flags.add_argument("pattern", nargs="?", help="substring of a field or flag name")
    _add_release(flags)
    check = sub.add_parser(
        "check", help="validate sglang.launch_server arguments (after '--')",
        description="Validate launch_server arguments: glm5 config check -- --model-path M --tp 8",
    )
    _add_release(check)
    check.add_argument("argv", nargs=argparse.REMAINDER, help="the launch_server arguments")
    for name, text in (
        ("show", "show a config's fields (secrets masked)"),
        ("argv", "print the launch command for a config"),
        ("diff", "deprecated: use 'glm5 diff --raw' (fields that differ between two configs)"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("config", help="shipped config name or JSON file")
        if name == "diff":
            p.add_argument("other", help="shipped config name or JSON file to compare with")
            p.add_argument("--exit-code", action="store_true", help="exit 1 when the configs differ")
            p.add_argument("--other-release", help="SGLang release of the second config")
        if name == "show":
            p.add_argument("--all", action="store_true", help="include every field with its default")
        if name == "argv":
            p.add_argument("--module", default="sglang.launch_server", help="module to run (e.g. glm5lib.sim)")
        p.add_argument("--set", action="append", metavar="FIELD=VALUE", help="change a field first (repeatable)")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        _add_release(p)


def _add_release(parser: argparse.ArgumentParser) -> None:
    """``--release``: the SGLang release whose flags an action reads."""
    parser.add_argument("--release", help=f"SGLang release (default: the installed SGLang, else the config's or {DEFAULT_RELEASE})")
