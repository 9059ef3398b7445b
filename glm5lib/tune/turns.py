"""Several levers in turn: each searched from the best the ones before it found.

Where two limits hold at once, one lever alone stops at the other: on one H100, a cap of 32 beside a
512-token prefill chunk under 2,048-token prompts was the best cap under ``median_tpot_ms<=20``
(every cap of 48-128 broke it, data/examples/h100-sglang-tune-cap-chunk), while the chunk's forwards
were what lengthened each token (a chunk of 4,096 took the same load's median TPOT from 33.6 to 22.5
ms at a cap of 256: data/examples/h100-sglang-cap-chunk). :func:`tune_in_turn` runs :func:`~glm5lib.
tune.search.tune` on each lever in the order given, in a folder of its own (``lever-1-FIELD``...):
the first from the configuration as given, each next one from the best the ones before found, that
best's phase its first point at no launch (copied in as ``start``). The launches are shared: each
lever may spend its share of what is left (the rest divided by the levers still to search), and a
lever whose search stops early leaves the rest to the next.

It is a search one lever at a time: each lever is chosen at the values the levers after it had as
given, and the best of the first need not stay best once a later one moves. On the stand-in (GLM-5's
profile, a cap of 32 and a chunk of 512, 128 requests of 2,048+128 tokens, ``median_tpot_ms<=120``,
6 launches) the chunk went to 2,048 (time per token 97.9 -> 83.5 ms at the cap of 32), then the cap to
46 (664 tok/s), where the cap alone reached 53 (739 tok/s) in 4: a larger chunk cost the stand-in time
per token at caps above 50. On one H100 under SGLang the order paid: the chunk first (2,048-4,096 at
the cap of 32 took median TPOT from 19.5 to 13.3 ms), then the cap to 64 within 20 ms, 3,140 tok/s
where the cap alone kept 1,566 (data/examples/h100-sglang-tune-in-turn, the chunk's search replayed on
the sizes SGLang captures as prefill graphs). Name the lever whose limit binds first (the diagnosis's
leading finding), and compare with the other lever alone where launches allow.

The result is one :class:`~glm5lib.tune.search.TuneResult` whose candidates are every lever's, each
with the changes it was measured with in full, and whose best is the last lever's with the changes
the earlier levers found; ``tune.csv`` and ``tune-best.json`` in the run folder hold them.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import engines, rundir
from glm5lib.errors import ConfigError
from glm5lib.tune.goal import Goal
from glm5lib.tune.search import (
    Measure,
    SearchOptions,
    TuneResult,
    Workload,
    default_measure,
    save_best,
    tune,
)

__all__ = ["tune_in_turn"]

#: the folder a lever's search keeps its candidates in, under the run folder
STAGE = "lever-{n}-{field}"
#: the phase a lever's search starts from: the best the levers before it found
START = "start"


def tune_in_turn(config: Any, run_dir: str | Path, goal: Goal, workload: Workload, *, levers: Sequence[str],
                 backend: str = "sim", max_launches: int = 6, evidence_phase: str | None = None,
                 measure: Measure | None = None, options: SearchOptions | None = None, **launch: Any) -> TuneResult:
    """Search ``levers`` (as ``--lever`` takes each: ``FIELD`` or ``FIELD=LOW:HIGH``) one after the
    other, in at most ``max_launches`` in all. ``measure`` measures a candidate's changes to ``config``
    as the phase at the path it is given under ``run_dir`` (``lever-1-FIELD/tune-2``; default:
    :func:`~glm5lib.tune.search.default_measure` in each lever's folder); ``options`` and
    ``launch`` as :func:`~glm5lib.tune.search.tune` takes them; ``evidence_phase``, a phase of ``run_dir``
    measured at the target load, is the first lever's first point."""
    if not levers or isinstance(levers, str):
        raise ConfigError("levers: name them in the order to search them (--lever A --lever B)",
                          field="lever")
    if not (isinstance(max_launches, int) and max_launches >= len(levers)):
        raise ConfigError(f"--max-launches {max_launches!r} must be at least one per lever ({len(levers)})",
                          field="max_launches")
    run = Path(run_dir)
    run.mkdir(parents=True, exist_ok=True)
    opts = options or SearchOptions()
    found: dict[str, Any] = {}
    start = run / evidence_phase if evidence_phase else None
    if start is not None and not (start / rundir.SWEEP).is_file():
        raise ConfigError(f"phase {evidence_phase!r} of {run} has no {rundir.SWEEP}", field="phase")
    spent = 0
    results: list[tuple[TuneResult, dict[str, Any], str]] = []
    for n, text in enumerate(levers, 1):
        field = text.split("=", 1)[0].lstrip("-").replace("-", "_")
        stage = STAGE.format(n=n, field=field)
        share = math.ceil((max_launches - spent) / (len(levers) - n + 1))
        before = dict(found)
        evidence = _carry(start, run / stage) if start is not None else None
        result = tune(_with(config, before, backend), run / stage, goal, workload, backend=backend, max_launches=share,
                      evidence_phase=evidence, measure=_stage_measure(measure, config, run / stage, before,
                                                                       backend=backend, workload=workload, **launch),
                      options=dataclasses.replace(opts, levers=[text]))
        spent += result.launches
        results.append((result, before, stage))
        if result.best is None:
            break
        found = {**before, **result.best["changes"]}
        start = run / stage / result.best["phase"]
    return _combined(config, run, goal, results, spent)


def _with(config: Any, changes: Mapping[str, Any], backend: str) -> Any:
    """The configuration a lever's search starts from: ``config`` with the earlier levers' changes."""
    if not changes or config is None or not engines.get(backend).capabilities.launches_from_config:
        return config
    return config.with_changes(**changes)


def _stage_measure(measure: Measure | None, config: Any, stage_dir: Path, before: Mapping[str, Any], *,
                   backend: str, workload: Workload, **launch: Any) -> Measure:
    """How one lever's search measures a candidate: a phase of its own folder, launched with the
    earlier levers' changes beside its own. A given ``measure`` is asked for the phase by its path
    under the run folder (``lever-2-FIELD/tune-1``)."""
    if measure is None:
        own = default_measure(config, backend=backend, run_dir=stage_dir, workload=workload, **launch)

        def inner(changes: Mapping[str, Any], phase: str, extra_levels: Sequence[int] = ()) -> Path:
            return own({**before, **changes}, phase, extra_levels)
    else:
        def inner(changes: Mapping[str, Any], phase: str, extra_levels: Sequence[int] = ()) -> Path:
            return measure({**before, **changes}, f"{stage_dir.name}/{phase}", extra_levels)

    return inner


def _carry(best: Path, stage_dir: Path) -> str:
    """The earlier best's phase copied into the next lever's folder as its first point."""
    target = stage_dir / START
    if not target.exists():
        shutil.copytree(best, target)
    return START


def _combined(config: Any, run: Path, goal: Goal, results: Sequence[tuple[TuneResult, dict[str, Any], str]],
              launches: int) -> TuneResult:
    """Every lever's candidates with their changes in full, and the last winner with the earlier levers' changes."""
    frames, best = [], None
    for result, before, stage in results:
        frame = result.candidates.copy()
        if not frame.empty:
            frame["changes"] = [json.dumps({**before, **json.loads(c)}) for c in frame["changes"]]
            frame["phase"] = [f"{stage}/{p}" for p in frame["phase"]]
        frames.append(frame)
        if result.best is not None:
            best = {**result.best, "changes": {**before, **result.best["changes"]},
                    "phase": f"{stage}/{result.best['phase']}"}
    candidates = pd.concat(frames, ignore_index=True)
    candidates.to_csv(run / rundir.TUNE_CSV, index=False)
    stopped = "; ".join(f"{r.lever.field}: {r.stopped}" for r, _, _ in results)
    last = results[-1][0]
    return TuneResult("tune", goal, last.lever, candidates, best, launches, stopped,
                      save_best(config, run, best, last.lever, goal))
