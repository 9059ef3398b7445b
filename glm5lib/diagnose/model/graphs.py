"""CUDA graphs in the performance model: the captured sizes, padding, and what an eager step costs.

An engine that captures decode steps as CUDA graphs replays one for a batch up to the largest size
it captured, padded to the next captured size (SGLang: 1, 2, 4, 8, 12, then every 8 to 256, every
16 to 512, every 32 above; the batch is padded to the next, ``_pad_to_bucket``); above the largest,
each step runs eagerly and pays every layer's kernel launches from the CPU (SGLang issue 33483:
"an absorbing state"). Which sizes a server captured is in its start-up log (and, 0.5.16 on, in its
``cuda_graph_config``); the engine adapter knows its schedule for a ceiling it has not run.

An eager step issues every kernel from the CPU: it takes at least the CPU's launch time ``L`` (however
small the batch: on one H200 with SGLang 0.5.16 a 24-layer MoE's eager step took 50-53 ms at batch 1,
64 and 256 alike, against 2.2-9.9 ms as a graph) and at least the GPU's own work ``G`` (the graph
step at that batch); launched asynchronously, the two overlap. :class:`Eager` holds ``L``, with where
it came from; an eager step is read as ``sqrt(L**2 + G**2)``, the band spanning ``max(L, G)`` to
``(L**1.5 + G**1.5) ** (2/3)``. ``L`` comes, in order of preference, from:

1. the phase's own eager steps (levels whose decode lines ran without a graph, beside graph levels);
2. the engine's offline step benchmark of this configuration with graphs off (``step-profile.csv``,
   :mod:`glm5lib.stepbench`);
3. a recorded launch time of the same deployment (engine, GPU, model class and size, tensor
   parallelism, attention backend) in ``data/knowledge/step_priors.json``, each with its source;
4. none: a forecast that needs it is not given, and names the benchmark that would measure it.

A phase whose every step ran eagerly (graphs off) forecasts graphs on from the same sources.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from glm5lib.paths import data_dir

__all__ = ["Eager", "pad", "recorded_prior"]

PRIORS_FILE = "step_priors.json"
# A recorded launch time carries at least this relative spread: two launches of one configuration on
# two H200s differed by 8-21% (data/examples/h200-sglang).
PRIOR_SPREAD = 0.1
# The model's weights may differ by this share from the recorded deployment's and still match.
WEIGHTS_MATCH = 0.1
# An eager step's CPU launches L and GPU work G overlap (kernels are launched asynchronously): the step
# is the OVERLAP-norm (L^k + G^k)^(1/k), between max(L, G) (perfect overlap, k -> infinity) and the
# OVERLAP_LEAST-norm. On the H200 the graphs-off steps at batch 64 and 256 (50.7 and 51.7 ms, the GPU's
# own work 6.4 and about 12 ms) sat at max(L, G): the overlap was near perfect.
OVERLAP = 2.0
OVERLAP_LEAST = 1.5


def _norm(a: float, b: float, k: float) -> float:
    return (a**k + b**k) ** (1.0 / k)


@dataclasses.dataclass
class Eager:
    """The CPU's launch time of an eager decode step (ms), with its relative spread and source."""

    launch_ms: float
    spread: float  # relative
    source: str
    kind: str  # "phase", "profile", "prior"

    def step(self, graph_ms: float, graph_low: float | None = None, graph_high: float | None = None
             ) -> tuple[float, float, float]:
        """An eager step over a graph step of ``graph_ms`` (its range ``graph_low``-``graph_high``):
        (point, shortest, longest) in ms."""
        g_lo = graph_ms if graph_low is None else graph_low
        g_hi = graph_ms if graph_high is None else graph_high
        point = _norm(self.launch_ms, graph_ms, OVERLAP)
        shortest = max(self.launch_ms * (1.0 - self.spread), g_lo)
        longest = _norm(self.launch_ms * (1.0 + self.spread), g_hi, OVERLAP_LEAST)
        return point, min(shortest, point), max(longest, point)

    @staticmethod
    def launch_from(eager_ms: float, graph_ms: float) -> float | None:
        """``L`` from one eager step and the graph step at the same batch (None: the eager step was
        no longer than the graph one)."""
        if eager_ms <= graph_ms:
            return None
        return (eager_ms**OVERLAP - graph_ms**OVERLAP) ** (1.0 / OVERLAP)

    @staticmethod
    def graph_from(eager_ms: float, launch_ms: float) -> float:
        """The GPU's work left of an eager step of ``eager_ms`` once launches of ``launch_ms`` overlap."""
        return max(eager_ms**OVERLAP - launch_ms**OVERLAP, 0.0) ** (1.0 / OVERLAP)

    def describe(self) -> str:
        return (f"an eager step takes the CPU's {self.launch_ms:.1f} ms of kernel launches, overlapped with the GPU's "
                f"work ({self.source})")


def pad(batch: float, sizes: Sequence[int]) -> float:
    """The captured size a decode batch of ``batch`` runs as (itself above the largest, or with no
    sizes known)."""
    if not sizes:
        return batch
    i = bisect.bisect_left(sizes, math.ceil(batch - 1e-9))
    return float(sizes[i]) if i < len(sizes) else batch


def fingerprint(ev: Any) -> dict[str, Any]:
    """What identifies a deployment for a recorded step figure: engine, GPU, model class and
    weights' size, tensor parallelism, attention backend (each None where the evidence lacks it)."""
    env = ev.environment or {}
    gpus = env.get("gpus") or []
    startup = ev.startup or {}
    args = ev.server_args or {}
    return {
        "engine": ev.engine,
        "gpu": gpus[0].get("name") if gpus and isinstance(gpus[0], Mapping) else None,
        "model_class": startup.get("model_class"),
        "weights_gb": startup.get("weight_mem_usage_gb"),
        "tp_size": args.get("tp_size"),
        "attention_backend": args.get("attention_backend"),
    }


def _matches(entry: Mapping[str, Any], fp: Mapping[str, Any]) -> bool:
    for key in ("engine", "gpu", "model_class", "attention_backend"):
        if entry.get(key) is not None and entry.get(key) != fp.get(key):
            return False
    if entry.get("tp_size") is not None and int(entry["tp_size"]) != int(fp.get("tp_size") or 1):
        return False
    want, have = entry.get("weights_gb"), fp.get("weights_gb")
    return want is None or (have is not None and abs(float(have) - float(want)) <= WEIGHTS_MATCH * float(want))


def recorded_prior(ev: Any) -> Eager | None:
    """The recorded eager launch time of this phase's deployment, or None where none matches."""
    path = data_dir() / "knowledge" / PRIORS_FILE
    try:
        entries = json.loads(path.read_text()).get("eager_launch", [])
    except (OSError, json.JSONDecodeError):
        return None
    fp = fingerprint(ev)
    for entry in entries:
        if _matches(entry, fp):
            return Eager(float(entry["launch_ms"]), max(float(entry.get("spread", 0.0)), PRIOR_SPREAD),
                         f"recorded on the same deployment: {entry['source']}", "prior")
    return None
