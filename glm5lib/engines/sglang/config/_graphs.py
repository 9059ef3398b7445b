"""CUDA graphs in SGLang's configuration: whether they are off, read from a server-args dict of any
release, and the decode batch sizes and prefill token counts it captures up to a ceiling."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["cuda_graphs_off", "decode_graph_sizes", "graphs_off_for", "prefill_graph_sizes"]


def decode_graph_sizes(max_bs: int) -> list[int]:
    """The decode batch sizes SGLang captures up to ``max_bs``: 1, 2, 4, 8, 12, then every 8 to 256,
    every 16 to 496 and every 32 from 512 (``_generate_cuda_graph_batch_sizes``), the ceiling itself
    included (0.5.12 on); a batch between two pads to the next."""
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, int(max_bs) + 1, 32)]
    out = [b for b in sizes if b <= max_bs]
    if max_bs not in out:
        out.append(int(max_bs))
    return sorted(set(out))


def prefill_graph_sizes(max_tokens: int) -> list[int]:
    """The prefill token counts SGLang captures as CUDA graphs up to ``max_tokens`` (its prefill
    graph ceiling, the chunked-prefill size by default): every 4 to 32, 16 to 256, 32 to 512, 64 to
    1,024, 256 to 4,096 and 512 beyond (``_generate_prefill_cuda_graph_batch_sizes``, 0.5.16's
    breakable prefill graphs; the piecewise graphs' ``--piecewise-cuda-graph-tokens`` before them).
    The ceiling itself is not added: a prefill step of more tokens than the largest runs eager (on
    one H100, a 530-token chunk took 5x a 512-token one's time per prompt token:
    data/examples/h100-sglang-tune-in-turn)."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, int(max_tokens) + 1, 512)]
    return [s for s in sizes if s <= max_tokens]


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
