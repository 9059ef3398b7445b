"""``glm5 ...``: the command line of :mod:`glm5lib.telemetry`."""

from __future__ import annotations

from glm5lib.telemetry import register_cli

__all__ = ["register_cli"]
