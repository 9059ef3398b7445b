"""What the engines' configuration tests ask of a refused configuration, shared by their modules."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from glm5lib.errors import ConfigError


def refused(make: Callable[[Mapping[str, Any]], object], server_args: Mapping[str, Any],
            match: str) -> ConfigError:
    """The ConfigError that building ``make(server_args)`` raises, its message matching ``match``
    (a regular expression); the test fails where it builds or raises anything else."""
    with pytest.raises(ConfigError, match=match) as err:
        make(server_args)
    return err.value
