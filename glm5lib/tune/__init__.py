"""``glm5 tune``: the best launch configuration under latency limits, in a few launches.

From a measured phase or a config, a goal (:class:`Goal`: limits such as
``median_tpot_ms<=250``, output throughput or goodput to maximise) and a budget of launches,
:func:`tune` measures a candidate (phase ``tune-N``), refits what it expects of the lever from
the evidence (:mod:`glm5lib.tune.model`), and launches the value forecast to meet the limits
with the most throughput, until nothing left can beat the best by more than the noise.
:func:`tune_in_turn` searches several levers one after the other, each from the best the ones before
found (:mod:`glm5lib.tune.turns`); :func:`grid` measures the exhaustive grid over the same lever; :class:`SearchOptions` holds how
both choose and judge candidates. ``tune.csv`` holds every
candidate and why it was chosen; :func:`section_markdown` is the report's section and
:func:`plot_tune` its throughput-against-latency figure.
"""

from __future__ import annotations

from glm5lib.tune.goal import LIMIT_METRICS, OBJECTIVES, Goal, Limit, parse_limit, request_goodput
from glm5lib.tune.levers import Lever, engine_levers, parse_lever, safe_bounds
from glm5lib.tune.model import Landscape, Point
from glm5lib.tune.report import plot_tune, section_markdown
from glm5lib.tune.search import (
    TUNE_COLUMNS,
    SearchOptions,
    TuneResult,
    Workload,
    config_of,
    grid,
    grid_values,
    load_tune,
    recheck,
    tune,
)
from glm5lib.tune.turns import tune_in_turn

__all__ = [
    "LIMIT_METRICS",
    "OBJECTIVES",
    "TUNE_COLUMNS",
    "Goal",
    "Landscape",
    "Lever",
    "Limit",
    "Point",
    "SearchOptions",
    "TuneResult",
    "Workload",
    "config_of",
    "engine_levers",
    "grid",
    "grid_values",
    "load_tune",
    "parse_lever",
    "parse_limit",
    "plot_tune",
    "recheck",
    "request_goodput",
    "safe_bounds",
    "section_markdown",
    "tune",
    "tune_in_turn",
]
