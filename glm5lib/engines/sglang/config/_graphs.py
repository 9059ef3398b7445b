"""Whether CUDA graphs are off, read from a server-args dict of any SGLang release."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["cuda_graphs_off", "graphs_off_for"]


def cuda_graphs_off(server_args: Mapping[str, Any]) -> bool:
    """Whether a server-args dict (any release: a config, a logged ServerArgs, /get_server_info)
    turns CUDA graphs off for both phases: ``disable_cuda_graph`` up to 0.5.9; in 0.5.23 (which
    logs the deprecated switch as False) each phase as :func:`graphs_off_for` resolves it."""
    return graphs_off_for(server_args, "decode") and graphs_off_for(server_args, "prefill")


def graphs_off_for(server_args: Mapping[str, Any], phase: str) -> bool:
    """Whether CUDA graphs end up off for ``phase`` (``'decode'`` or ``'prefill'``).

    SGLang 0.5.23's precedence (``arg_groups/cuda_graph_hook.py``): an explicit
    ``cuda_graph_backend_<phase>`` wins over ``disable_<phase>_cuda_graph``, which wins over the
    legacy ``disable_cuda_graph`` (the only switch up to 0.5.9). Booleans logged as text
    (``'False'``) read as what they say.
    """
    if phase not in ("decode", "prefill"):
        raise ValueError(f"phase {phase!r}: expected 'decode' or 'prefill'")
    backend = server_args.get(f"cuda_graph_backend_{phase}")
    if backend is not None and str(backend) not in ("", "None"):
        return str(backend).lower() == "disabled"
    return _true(server_args.get(f"disable_{phase}_cuda_graph")) or _true(server_args.get("disable_cuda_graph"))


def _true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"
