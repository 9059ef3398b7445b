"""``glm5 ...``: the command line of :mod:`glm5lib.workbook`."""

from __future__ import annotations

from glm5lib.workbook import register_cli

__all__ = ["register_cli"]
