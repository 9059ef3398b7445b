"""``glm5 ...``: the command line of :mod:`glm5lib.loadgen`."""

from __future__ import annotations

from glm5lib.loadgen import register_cli

__all__ = ["register_cli"]
