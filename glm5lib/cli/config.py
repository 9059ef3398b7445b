"""``glm5 ...``: the command line of :mod:`glm5lib.config`."""

from __future__ import annotations

from glm5lib.config import register_cli

__all__ = ["register_cli"]
