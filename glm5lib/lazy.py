"""Names a package re-exports from its modules, imported on first use.

A package keeps ``import`` cheap (``glm5 --help`` and the stand-in start without pandas) by
resolving its re-exports from a table of name -> defining module when they are first asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def module_getattr(package: str, table: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: a name in ``table`` is imported from its module and kept in
    ``namespace`` (the package's globals), so later lookups do not come back here."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
