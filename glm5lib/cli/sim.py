"""``glm5 ...``: the command line of :mod:`glm5lib.sim`."""

from __future__ import annotations

from glm5lib.sim import register_cli

__all__ = ["register_cli"]
