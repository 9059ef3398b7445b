"""What a server configuration says of itself beside its values (its name and description), kept
true as copies of it change: one rule for every engine's config class."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from glm5lib.masking import mask_value

__all__ = ["described_changes"]


def described_changes(meta: Mapping[str, Any], before: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """A config's ``meta`` once ``changes`` are applied to the values ``before``: its description was
    written for the values it came with, so a copy with other values says which it changed (a
    description of "running cap 64" is false once the cap is 1,024)."""
    changed = {k: v for k, v in changes.items() if before.get(k) != v}
    if not changed or not meta.get("description"):
        return dict(meta)
    # the description is written wherever the config is (config.json of every phase): secrets masked
    said = ", ".join(f"{k}={'unset' if v is None else mask_value(k, v)}" for k, v in changed.items())
    return {**meta, "description": f"{meta['description']} (then changed: {said})"}
