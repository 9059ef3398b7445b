"""``glm5 ...``: the command line of :mod:`glm5lib.logs`."""

from __future__ import annotations

from glm5lib.logs import register_cli

__all__ = ["register_cli"]
