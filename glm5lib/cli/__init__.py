"""The ``glm5`` command.

Each sub-command lives in a module of this package (``glm5lib.cli.logs`` for ``glm5 logs``...)
that defines ``register_cli(subparsers)``, adding its sub-command and the handler that answers it
with :func:`glm5lib.cli.options.add_command` (the handler's docstring is the command's
description in ``--help``); the handler takes the parsed arguments, calls the library's public
API, prints, and returns an exit code. The library itself never prints. This module only
assembles them.

A command module imports at its top only what building its parser needs (argparse, the
foundation modules, the light ``glm5lib.engines.sglang.config``); its handlers import the library modules they
call (pandas, aiohttp, matplotlib behind them), so ``glm5 --help`` and ``glm5 <command> --help``
load none of them. ``tests/integration/test_cli.py`` checks it.

Conventions every command keeps: exit 0 on success, 1 on a failure (the message names the input
that failed: a file that does not exist, a config field that is not valid), 2 on a usage error
(argparse's own, and :class:`~glm5lib.errors.UsageError`: an option value that is not one of its
choices); ``-v``/``--verbose`` before or after the sub-command; ``-q``/``--quiet`` for no
progress lines; ``--run-dir`` for a run folder; secrets from the environment or a file, never
from the command line.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from glm5lib._version import __version__
from glm5lib.errors import Glm5Error, UsageError

__all__ = ["build_parser", "main"]

# Modules that contribute sub-commands, in the order they appear in --help.
COMMAND_MODULES = (
    "glm5lib.cli.workbook",
    "glm5lib.cli.server",
    "glm5lib.cli.sim",
    "glm5lib.cli.loadgen",
    "glm5lib.cli.telemetry",
    "glm5lib.cli.logs",
    "glm5lib.cli.config",
    "glm5lib.cli.diagnose",
    "glm5lib.cli.predict",
    "glm5lib.cli.watch",
    "glm5lib.cli.report",
    "glm5lib.cli.compare",
    "glm5lib.cli.runs",
    "glm5lib.cli.tune",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="glm5",
        description=(
            "Diagnose why an SGLang server delivers less throughput than its GPUs should: "
            "measure, diff against a reference run, test the fix, find the next bottleneck."
        ),
    )
    parser.add_argument("--version", action="version", version=f"glm5lib {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register_cli(sub)
    _add_verbose(parser)
    return parser


def _add_verbose(parser: argparse.ArgumentParser) -> None:
    """``-v`` after the sub-command too (``glm5 diagnose RUN -v``), on every level of sub-commands."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for child in dict.fromkeys(action.choices.values()):  # aliases share their parser
            # a parser that passes every token on (prefix_chars without "-") takes no options
            if "-" in child.prefix_chars and not any("--verbose" in a.option_strings for a in child._actions):
                # SUPPRESS: an absent -v leaves the top-level value alone
                child.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                                   help="log at DEBUG level")
            _add_verbose(child)


def _options_under(parser: argparse.ArgumentParser, command: str | None) -> list[str]:
    """Every option string of ``command``'s parser and the sub-commands below it (all, without one)."""
    found: list[str] = []
    todo = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            todo = [action.choices[command]]
    while todo:
        p = todo.pop()
        for action in p._actions:
            found += [o for o in action.option_strings if o.startswith("--")]
            if isinstance(action, argparse._SubParsersAction):
                todo += list(dict.fromkeys(action.choices.values()))
    return sorted(set(found))


def _refuse_unknown(parser: argparse.ArgumentParser, args: argparse.Namespace, extras: list[str]) -> None:
    """argparse's "unrecognized arguments", with the option meant where one is close (``--run-dri``)."""
    known = _options_under(parser, getattr(args, "command", None))
    hints = []
    for token in extras:
        name = token.split("=", 1)[0]
        if name.startswith("--"):
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            if close:
                hints.append(f"{name}: did you mean {close[0]}?")
    parser.error(f"unrecognized arguments: {' '.join(extras)}" + ("; " + "; ".join(hints) if hints else ""))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        _refuse_unknown(parser, args, extras)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        return int(func(args) or 0)
    except UsageError as exc:
        print(f"glm5: error: {exc}", file=sys.stderr)
        return 2
    except Glm5Error as exc:
        print(f"glm5: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("glm5: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (``glm5 env --json | head``): not an error of ours.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
