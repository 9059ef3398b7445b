"""``glm5 ...``: the command line of :mod:`glm5lib.server`."""

from __future__ import annotations

from glm5lib.server import register_cli

__all__ = ["register_cli"]
