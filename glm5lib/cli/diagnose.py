"""``glm5 ...``: the command line of :mod:`glm5lib.diagnose`."""

from __future__ import annotations

from glm5lib.diagnose import register_cli

__all__ = ["register_cli"]
