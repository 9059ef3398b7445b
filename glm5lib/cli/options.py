"""What the ``glm5`` commands declare alike: the sub-command and its handler, and the options
several commands take with one meaning (``-q``/``--quiet``; the API key from ``GLM5_API_KEY`` or
``--api-key-file``, never from the command line, and so no secret in ``--set FIELD=VALUE`` either)."""

from __future__ import annotations

import argparse
import inspect
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from glm5lib import http
from glm5lib.errors import ConfigError, UsageError
from glm5lib.masking import is_secret_name

__all__ = ["REQUEST_APIS", "add_api_key_options", "add_command", "add_quiet", "no_secret_flags", "read_api_key",
           "settings_given"]

#: The request APIs the load generator speaks (``--api``).
REQUEST_APIS = ("generate", "completions", "chat")


def add_command(subparsers: Any, name: str, handler: Callable[[argparse.Namespace], int], *,
                help: str, description: str | None = None) -> argparse.ArgumentParser:
    """Add the sub-command ``name`` (``help``: its line in the list of commands), answered by
    ``handler``. Its ``--help`` describes it with ``description``, else with the handler's
    docstring (a handler without one: no description)."""
    parser = subparsers.add_parser(name, help=help, description=description or inspect.getdoc(handler))
    parser.set_defaults(func=handler)
    return parser


def add_quiet(parser: argparse.ArgumentParser, *older: str) -> None:
    """``-q``/``--quiet`` (``args.quiet``): no progress lines, for a command that draws them;
    ``older`` are earlier spellings that still work."""
    spelled = f" ({', '.join(older)} is the older spelling)" if older else ""
    parser.add_argument("-q", "--quiet", *older, dest="quiet", action="store_true", help=f"no progress lines{spelled}")


def add_api_key_options(parser: argparse.ArgumentParser, help: str) -> None:
    """``--api-key-file PATH`` (``help`` says what the key is for), and ``--api-key``, hidden,
    which :func:`read_api_key` refuses with the way to give the key."""
    parser.add_argument("--api-key-file", metavar="PATH", default=None, help=help)
    # a secret on the command line shows in the process list: refused with the way to give it
    parser.add_argument("--api-key", dest="api_key_argv", default=None, help=argparse.SUPPRESS)


def _secret_refused(option: str, field: str) -> UsageError:
    """A secret given on the command line as ``option`` (exit 2): the message gives the ways that
    keep it out of the process list, and not the secret."""
    return UsageError(f"{option} would put the secret in the process list: set GLM5_API_KEY or "
                      "pass --api-key-file PATH (a file holding the token)", field=field,
                      valid=["GLM5_API_KEY", "--api-key-file"])


def read_api_key(args: argparse.Namespace) -> str | None:
    """The API key from ``--api-key-file`` or ``$GLM5_API_KEY`` (:func:`add_api_key_options`),
    never from the command line."""
    if args.api_key_argv is not None:
        raise _secret_refused("--api-key", "api_key")
    if args.api_key_file:
        path = Path(args.api_key_file)
        if not path.is_file():
            raise ConfigError(f"--api-key-file {args.api_key_file!r} does not exist", field="api_key_file")
        key = path.read_text().strip()
        if not key:
            raise ConfigError(f"--api-key-file {args.api_key_file!r} is empty", field="api_key_file")
        http.check_api_key(key, f"--api-key-file {args.api_key_file!r}")
        return key
    key = os.environ.get("GLM5_API_KEY") or None
    http.check_api_key(key, "GLM5_API_KEY")
    return key


def settings_given(items: Iterable[str] | None) -> list[str]:
    """The ``--set FIELD=VALUE`` items, none naming a secret (:func:`glm5lib.masking.is_secret_name`:
    ``api_key``, ``hf_token``...), which is refused as a usage error naming the field."""
    given = list(items or [])
    for item in given:
        name = item.partition("=")[0].strip()
        if is_secret_name(name):
            raise _secret_refused(f"--set {name}", name)
    return given


def no_secret_flags(argv: Iterable[str]) -> list[str]:
    """``argv`` (flags passed on to an engine), none of its flags naming a secret (``--api-key X``,
    ``--api-key=X``), which is refused as a usage error naming the flag."""
    given = [str(token) for token in argv]
    for token in given:
        flag = token.partition("=")[0]
        if flag.startswith("--") and is_secret_name(flag):
            raise _secret_refused(flag, flag.lstrip("-").replace("-", "_"))
    return given
