"""A server-args dict read as SGLang reads it: values normalised ('64', 64 and 64.0 alike), a
field's release default where it is unset, renamed fields followed, CUDA graphs off in any
release's spelling, and the flag that sets a field."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from glm5lib.engines.sglang.config._graphs import cuda_graphs_off
from glm5lib.engines.sglang.config._releases import (
    FALLBACK_DEFAULTS,
    RENAMED,
    config_defaults,
    default_release,
    nearest_bundled,
    release_of,
)
from glm5lib.engines.sglang.config._sglang import intent_flags
from glm5lib.errors import ConfigError

__all__ = ["arg", "flag_of", "norm", "shown_as"]


def flag_of(field: str, release: str | None = None) -> str:
    """The command-line flag of a field in ``release`` (default: the default release), renamed
    fields followed; "CUDA graphs off" on a release that switches graphs per phase is its two
    flags; ``--`` + the field name for fields the release does not know."""
    try:
        return intent_flags(field, nearest_bundled(release or default_release()))
    except ConfigError:
        return "--" + field.replace("_", "-")


_NUM_RE = re.compile(r"^[+-]?\d+(\.\d+)?([eE][+-]?\d+)?$")


def norm(value: Any) -> Any:
    """Normalise a server-arg value so that '64', 64 and 64.0 compare equal."""
    if isinstance(value, str):
        s = value.strip()
        if s in ("True", "true"):
            return True
        if s in ("False", "false"):
            return False
        if s in ("None", "null", ""):
            return None
        if _NUM_RE.match(s):
            f = float(s)
            return int(f) if f.is_integer() else f
        return s
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, tuple):
        return [norm(v) for v in value]
    if isinstance(value, list):
        return [norm(v) for v in value]
    return value


_GRAPH_BACKENDS = ("cuda_graph_backend_decode", "cuda_graph_backend_prefill")


def shown_as(field: str, *sides: Mapping[str, Any]) -> str:
    """The field a diff of ``sides`` shows ``field`` under: the older name of a renamed field
    when a side uses it (``cuda_graph_max_bs_decode`` -> ``cuda_graph_max_bs``), and
    ``disable_cuda_graph`` for 0.5.23's per-phase graph backends when they only say on
    (unset) or off (``'disabled'``)."""
    older = next((old for old, new in RENAMED.items() if new == field), None)
    if older is not None and any(older in side for side in sides):
        return older
    if field in _GRAPH_BACKENDS and all(arg(side, field) in (None, "disabled") for side in sides):
        return "disable_cuda_graph"
    return field


def arg(args: Mapping[str, Any], field: str) -> Any:
    """A field of ``args``, normalised, with its release's default where it is unset (a field
    renamed across releases reads its other name; ``disable_cuda_graph`` reads any spelling of
    "CUDA graphs off")."""
    if field == "disable_cuda_graph" and cuda_graphs_off(args):
        return True
    if field in _GRAPH_BACKENDS and field not in args and cuda_graphs_off(args):
        return "disabled"
    if field in args:
        return norm(args[field])
    for other in (RENAMED.get(field), *(old for old, new in RENAMED.items() if new == field)):
        if other is not None and other in args:
            return norm(args[other])
    return norm(config_defaults(release_of(args)).get(field, FALLBACK_DEFAULTS.get(field)))
