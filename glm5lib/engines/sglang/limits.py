"""SGLang's limits in the engine-neutral vocabulary (:data:`glm5lib.engines.base.LIMITS`).

The field map is in the adapter's capabilities; this module holds what a field map cannot say:
CUDA graphs off per phase (0.5.23 switches decode and prefill graphs apart and logs the legacy
``disable_cuda_graph`` as False), and the largest decode batch that replays a graph once the
running cap no longer bounds capture (``cuda_graph_max_bs``, else the decode limit inside 0.5.16's
``cuda_graph_config``, else the largest batch captured at start-up when capture stopped below the
cap).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from glm5lib.engines.sglang.config import config_defaults, graphs_off_for, release_of

__all__ = ["change_hook", "defaults", "graph_ceiling", "limits_hook"]

# SGLang 0.5.16+ prints the decode graphs' batch limit inside cuda_graph_config
_GRAPH_CONFIG_MAX_BS = re.compile(r"decode=PhaseConfig\([^)]*?max_bs=(\d+)")
# the graph batch limit under each release's name (0.5.23 sizes decode and prefill graphs apart)
_GRAPH_BS_FIELDS = ("cuda_graph_max_bs", "cuda_graph_max_bs_decode")


def _int(v: Any) -> int | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return int(x) if math.isfinite(x) and x > 0 else None


def graph_ceiling(args: Mapping[str, Any], startup: Mapping[str, Any], cap: int | None) -> int | None:
    """The largest decode batch that replays a CUDA graph once the running cap no longer bounds
    capture; None where the evidence says only that the cap bounded it."""
    for name in _GRAPH_BS_FIELDS:
        value = _int(args.get(name))
        # 0.5.23 logs its ceiling clamped to a lower running cap when none was given: that is the
        # cap, not a ceiling of its own
        if value and not (cap and value == cap and _clamped_release(args)):
            return value
    m = _GRAPH_CONFIG_MAX_BS.search(str(args.get("cuda_graph_config") or ""))
    if m:
        return int(m.group(1))
    captured = startup.get("cuda_graph_batch_sizes")
    if isinstance(captured, (list, tuple)) and captured:
        top = max(int(b) for b in captured)
        if cap is None or top < cap:
            return top
    return None


def _clamped_release(args: Mapping[str, Any]) -> bool:
    """The release clamps the default decode graph ceiling to a lower running cap (0.5.23's
    memory hook; its server args name the per-phase fields)."""
    return "cuda_graph_max_bs_decode" in args


def defaults(args: Mapping[str, Any]) -> Mapping[str, Any]:
    """The defaults of the SGLang release ``args`` fit."""
    return config_defaults(release_of(args))


def limits_hook(values: dict[str, Any], sources: dict[str, str], names: dict[str, str],
                args: Mapping[str, Any], startup: Mapping[str, Any]) -> None:
    """Graphs off for decode steps in any release's spelling; the graph ceiling; the per-step
    prefill budget as the smaller of ``chunked_prefill_size`` and ``max_prefill_tokens``."""
    values["graphs_off"] = graphs_off_for(args, "decode")
    sources["graphs_off"], names["graphs_off"] = "server arguments", "disable_cuda_graph"
    for key in ("graph_max_batch",):
        values.pop(key, None), sources.pop(key, None), names.pop(key, None)
    if not values["graphs_off"]:
        top = graph_ceiling(args, startup, values.get("running_cap"))
        if top is not None:
            given = [n for n in _GRAPH_BS_FIELDS if _int(args.get(n))]
            values["graph_max_batch"] = top
            sources["graph_max_batch"] = "server arguments" if given else "start-up log line"
            names["graph_max_batch"] = given[0] if given else "cuda_graph_batch_sizes"
    prefill = _int(startup.get("max_prefill_tokens"))
    where = "start-up log line"
    if prefill is None:
        given = args.get("max_prefill_tokens") if "max_prefill_tokens" in args else defaults(args).get("max_prefill_tokens")
        prefill, where = _int(given), "server arguments"
    if prefill is not None and (values.get("token_budget") is None or prefill < values["token_budget"]):
        values["token_budget"], sources["token_budget"], names["token_budget"] = prefill, where, "max_prefill_tokens"


def change_hook(name: str, value: Any, changes: Mapping[str, Any], args: Mapping[str, Any]) -> tuple[str, Any] | None:
    """0.5.23's per-phase switches as the neutral ``graphs_off`` (decode steps are what the
    performance model times)."""
    if name.startswith("cuda_graph_backend"):
        return "graphs_off", str(value).lower() == "disabled"
    if name in ("disable_decode_cuda_graph", "disable_prefill_cuda_graph"):
        return "graphs_off", value
    return None
