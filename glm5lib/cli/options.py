"""What the ``glm5`` commands declare alike: the sub-command and its handler, and the options
several commands take with one meaning."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["REQUEST_APIS", "add_command"]

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
