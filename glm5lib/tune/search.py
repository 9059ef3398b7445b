"""The tuning loop: launch a candidate, measure it, refit, choose the next, stop when nothing
left can beat the best by more than the noise or the launch budget is spent.

:func:`tune` runs it; :func:`grid` measures the exhaustive grid over the same lever, so the
tuner can be checked against brute force. Both write one row per candidate to ``tune.csv``
(:data:`glm5lib.rundir.TUNE_CSV`) as soon as it is measured, each candidate being a phase of
the run (``tune-1``, ``tune-2``..., ``grid-1``...) with all its evidence. A rerun of the same
command after an interruption reads the candidates already measured instead of launching them
again (the loop is deterministic given its measurements, so it takes the same path). The best
limit-meeting candidate is saved as a config file the workbook loads (``tune-best.json``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from glm5lib import cpus as cpu_layout
from glm5lib import engines, rundir
from glm5lib.diagnose.evidence import Evidence
from glm5lib.errors import ConfigError, DiagnosisError
from glm5lib.loadgen.settings import check_concurrencies
from glm5lib.phase import measure_phase
from glm5lib.tune.goal import Goal, goodput_of
from glm5lib.tune.levers import Lever, engine_levers, parse_lever, safe_bounds
from glm5lib.tune.model import Landscape, Point, perfmodel_forecaster
from glm5lib.tune.phases import EvidenceCache
from glm5lib.tune.propose import Proposal, binding_ratio, choose_lever, limit_room, propose

__all__ = ["TUNE_COLUMNS", "Measure", "SearchOptions", "TuneResult", "Workload", "config_of", "default_measure", "grid",
           "grid_values", "load_tune", "recheck", "save_best", "tune"]

log = logging.getLogger(__name__)

TUNE_COLUMNS = [
    "kind", "step", "phase", "lever", "value", "changes", "objective", "output_throughput", "goodput",
    "slo_met", "binding_limit", "binding_ratio", "running", "predicted_objective", "predicted_binding",
    "prediction_source", "reason",
]


@dataclass
class Workload:
    """The target load every candidate is measured under (one closed-loop level)."""

    concurrency: int
    input_len: int = 256
    output_len: int = 256
    duration: float = 20.0
    api: str = "generate"
    warmup: int = 2
    sweep_options: dict[str, Any] = field(default_factory=dict)

    def check(self) -> None:
        for name in ("concurrency", "input_len", "output_len"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ConfigError(f"--{name.replace('_', '-')} {value!r} must be a whole number of at least 1",
                                  field=name)
        if not (isinstance(self.duration, (int, float)) and math.isfinite(self.duration) and self.duration > 0):
            raise ConfigError(f"--duration {self.duration!r} must be a positive number of seconds", field="duration")


@dataclass
class SearchOptions:
    """How :func:`tune` and :func:`grid` choose and judge candidates (each field may also be given
    to them as a keyword of its own)."""

    #: the lever to search, as ``--lever`` takes it (``FIELD`` or ``FIELD=LOW:HIGH``; the first
    #: counts here, :func:`~glm5lib.tune.turns.tune_in_turn` takes several); None: the lever the goal's
    #: limits point at
    levers: Sequence[str] | None = None
    #: the engine release whose levers apply (None: the configuration's)
    release: str | None = None
    #: how much one configuration's measurements differ between launches (a fraction)
    noise: float = 0.03
    #: the room under each limit a winner must leave (a fraction)
    margin: float = 0.03
    #: forecast unmeasured values with the performance model (else measured points only)
    use_model: bool = True

    def check(self) -> None:
        if not (0 <= self.noise < 1 and 0 <= self.margin < 1):
            raise ConfigError("noise and margin are fractions between 0 and 1", field="noise")


_OPTION_FIELDS = frozenset(f.name for f in dataclasses.fields(SearchOptions))


@dataclass
class TuneResult:
    """What a tuning run (or a grid) measured and picked."""

    kind: str
    goal: Goal
    lever: Lever
    candidates: pd.DataFrame
    best: dict[str, Any] | None
    launches: int
    stopped: str
    config_path: Path | None = None

    def to_dict(self) -> dict[str, Any]:
        rows = json.loads(self.candidates.to_json(orient="records")) if not self.candidates.empty else []
        return {"kind": self.kind, "goal": self.goal.to_dict(), "lever": self.lever.to_dict(), "best": self.best,
                "launches": self.launches, "stopped": self.stopped,
                "config": str(self.config_path) if self.config_path else None, "candidates": rows}

    def __repr__(self) -> str:
        best = (f"best {self.lever.field}={self.best['changes'].get(self.lever.field)} at "
                f"{self.best['objective']:,.0f}") if self.best else "no candidate met the limits"
        return f"TuneResult({self.kind}, {self.launches} launches, {best}; {self.stopped})"


# --------------------------------------------------------------------------------------------
# tune.csv
# --------------------------------------------------------------------------------------------
def load_tune(run_dir: str | Path) -> pd.DataFrame:
    """The ``tune.csv`` of a run (an empty frame with :data:`TUNE_COLUMNS` when there is none)."""
    path = Path(run_dir) / rundir.TUNE_CSV
    if not path.exists():
        return pd.DataFrame(columns=TUNE_COLUMNS)
    frame = pd.read_csv(path)
    return frame


def _append(run_dir: Path, row: Mapping[str, Any]) -> None:
    path = run_dir / rundir.TUNE_CSV
    frame = pd.DataFrame([{c: row.get(c) for c in TUNE_COLUMNS} | {k: v for k, v in row.items()
                                                                 if k not in TUNE_COLUMNS}])
    if path.exists():
        old = pd.read_csv(path)
        old = old[~((old["kind"] == row["kind"]) & (old["phase"] == row["phase"]))]
        frame = pd.concat([old, frame], ignore_index=True)
    frame.to_csv(path, index=False)


# --------------------------------------------------------------------------------------------
# measuring a candidate
# --------------------------------------------------------------------------------------------
#: measure(changes, phase, extra_levels) -> the phase folder, once its level at the target load
#: (and the lighter ``extra_levels`` the performance model fits on) are on disk
Measure = Callable[[Mapping[str, Any], str, Sequence[int]], Path]


def _engine_of(backend: str, config: Any) -> str:
    valid = engines.names()
    if str(backend).startswith(("http://", "https://")):
        raise ConfigError(f"--backend {backend!r}: tuning launches each candidate itself; a running server "
                          f"cannot be relaunched with other flags. Use {', '.join(valid)}",
                          field="backend", valid=valid)
    engines.get(backend)  # ConfigError naming the registered engines
    return backend


#: the errors reading a phase's evidence can raise: a folder that is not a phase, a configuration or
#: a table that cannot be read (pandas' parser errors are ValueErrors)
_UNREADABLE = (DiagnosisError, ConfigError, OSError, ValueError, KeyError)


def _reader() -> EvidenceCache:
    """Candidates' evidence, each phase read once per measurement; a table a candidate left
    half-written is left out rather than costing the search."""
    return EvidenceCache(partial=True)


def _evidence(folder: Path, phases: EvidenceCache | None = None) -> Evidence | None:
    """``folder``'s evidence, read once per measurement through ``phases`` (a one-off read without);
    None where the folder holds no phase or its evidence cannot be read."""
    if not folder.is_dir():
        return None
    try:
        return (phases or _reader()).load(folder)
    except _UNREADABLE as exc:  # evidence only: what cannot be read is left out
        log.debug("%s: evidence unreadable (%s: %s)", folder, type(exc).__name__, exc)
        return None


def _level_row(folder: Path, concurrency: int, phases: EvidenceCache | None = None) -> dict[str, Any] | None:
    """``folder``'s sweep row at ``concurrency`` (the last one measured there); None without one."""
    if not (folder / rundir.SWEEP).exists():
        return None
    ev = _evidence(folder, phases)
    sweep = ev.sweep if ev is not None else None
    if sweep is None or sweep.empty or "concurrency" not in sweep:
        return None
    rows = sweep[sweep["concurrency"] == concurrency]
    return rows.iloc[-1].to_dict() if not rows.empty else None


def _scheduler_row(folder: Path, concurrency: int, phases: EvidenceCache | None = None) -> dict[str, Any] | None:
    """``folder``'s level at ``concurrency`` as the evidence's level table has it (running, queued,
    whether the batch held, from the level's densest source); None where it cannot be read."""
    ev = _evidence(folder, phases)
    if ev is None:
        return None
    try:
        table = ev.level_table()
    except (KeyError, ValueError, TypeError) as exc:  # evidence only: what cannot be read is left out
        log.debug("%s: no level table (%s)", folder, exc)
        return None
    rows = table[table["concurrency"] == int(concurrency)]
    return rows.iloc[-1].to_dict() if not rows.empty else None


def _running(folder: Path, concurrency: int | None = None, row: Mapping[str, Any] | None = None,
             phases: EvidenceCache | None = None) -> float:
    """The median running batch of ``folder``'s level at ``concurrency`` (``row``: its level-table
    row, read here when not given); the whole log's where no level has one."""
    if concurrency is not None:
        row = row if row is not None else _scheduler_row(folder, concurrency, phases)
        value = float(row.get("running_median", math.nan)) if row else math.nan
        if math.isfinite(value) and value > 0:
            return value
    ev = _evidence(folder, phases)
    decode = ev.log_lines() if ev is not None else None
    if decode is None or decode.empty or "running_req" not in decode:
        return math.nan
    busy = pd.to_numeric(decode["running_req"], errors="coerce")
    busy = busy[busy > 0]
    return float(busy.median()) if not busy.empty else math.nan


def batch_held(folder: Path, concurrency: int, row: Mapping[str, Any] | None = None,
               phases: EvidenceCache | None = None) -> tuple[bool, str]:
    """Whether ``folder``'s level at ``concurrency`` held the batch its load and cap allow
    (the evidence's level table: ``batch_held``; ``row``: its level-table row, read here when
    not given), and why; True where the evidence has nothing to judge it by."""
    row = row if row is not None else _scheduler_row(folder, concurrency, phases)
    if not row or row.get("batch_held") is None or (isinstance(row.get("batch_held"), float)
                                                     and math.isnan(row["batch_held"])):
        return True, "no scheduler figures to judge the level by"
    return bool(row["batch_held"]), str(row.get("held_note") or "")


def _startup(folder: Path, phases: EvidenceCache | None = None) -> dict[str, Any]:
    """The start-up facts ``folder``'s server log states ({} without a readable log)."""
    ev = _evidence(folder, phases)
    return dict(ev.startup or {}) if ev is not None else {}


def default_measure(config: Any, *, backend: str, run_dir: Path, workload: Workload,
                    sim_profile: str | None = None, command: Sequence[str] | None = None,
                    model: str | None = None, ready_timeout: float = 600.0,
                    progress: bool = False, cpus: str | None = None) -> Measure:
    """Each candidate launched with :func:`glm5lib.phase.measure_phase` and swept at the target load."""
    cpu_layout.layout(cpus)  # a bad layout is an error before the first launch
    def measure(changes: Mapping[str, Any], phase: str, extra_levels: Sequence[int] = ()) -> Path:
        folder = run_dir / phase
        if folder.exists():  # an interrupted candidate: measured again from the start
            shutil.rmtree(folder)
        server = command_changes = None
        if not engines.get(backend).capabilities.launches_from_config:
            # an argv template: a lever max_batch is the template's flag --max-batch
            command_changes = {f"--{name.replace('_', '-')}": value for name, value in changes.items()}
        else:
            server = config.with_changes(**changes)
        measure_phase(server, run_dir, phase, backend=backend, sim_profile=sim_profile, command=command,
                      command_changes=command_changes, model=model, ready_timeout=ready_timeout,
                      concurrencies=sorted({*extra_levels, workload.concurrency}), api=workload.api, input_len=workload.input_len,
                      output_len=workload.output_len, duration=workload.duration, warmup=workload.warmup,
                      sweep_options=dict(workload.sweep_options), progress=progress, cpus=cpus)
        return folder

    return measure


def _evaluate(folder: Path, goal: Goal, workload: Workload, phases: EvidenceCache | None = None) -> dict[str, Any]:
    """What ``folder``'s level at the target load measured against the goal, from its evidence
    (read once for every figure here)."""
    phases = phases or _reader()
    row = _level_row(folder, workload.concurrency, phases)
    if row is None:
        raise ConfigError(f"phase {folder.name} has no level at concurrency {workload.concurrency}",
                          field="phase")
    out: dict[str, Any] = {"output_throughput": float(row.get("output_throughput", math.nan))}
    if goal.goodput:
        ev = phases.load(folder)
        out["goodput"] = goodput_of(ev.sweep, ev.requests, workload.concurrency, goal.goodput)
    for lim in goal.limits:
        out[lim.metric] = float(row.get(lim.metric, math.nan)) if row.get(lim.metric) is not None else math.nan
    out["objective"] = goal.score(out)
    out["slo_met"] = goal.slo_met(out)
    binding = goal.binding(out)
    out["binding_limit"] = str(binding) if binding else ""
    out["binding_ratio"] = binding.ratio(out) if binding else math.nan
    # the requests the level completed are the sweep's figure; the scheduler's come from the level table
    done = pd.to_numeric(pd.Series([row.get("completed")]), errors="coerce").iloc[0]
    out["completed"] = int(done) if pd.notna(done) else 0
    scheduler = _scheduler_row(folder, workload.concurrency, phases)
    out["running"] = _running(folder, workload.concurrency, scheduler, phases)
    out["batch_held"], out["held_note"] = batch_held(folder, workload.concurrency, scheduler, phases)
    return out


# --------------------------------------------------------------------------------------------
# the two searches
# --------------------------------------------------------------------------------------------
def _setup(config: Any, backend: str, goal: Goal, workload: Workload, options: SearchOptions,
           evidence: Path | None, phases: EvidenceCache) -> tuple[str, Lever, str]:
    engine = _engine_of(backend, config)
    workload.check()
    goal.check_workload(output_len=workload.output_len)
    from_config = engines.get(engine).capabilities.launches_from_config
    if from_config and config is None:
        raise ConfigError(f"--backend {backend}: a config to tune from is needed (--config or RUN_DIR --phase)",
                          field="config")
    known = engine_levers(engine, options.release or getattr(config, "release", None))
    chosen = [parse_lever(text, known) for text in (options.levers or [])]
    if not known and not chosen:
        raise ConfigError(f"a {engine} engine's levers are given as flags: --lever --max-batch=1:256",
                          field="lever")
    lever, why = (chosen[0], "the lever named on the command line") if chosen else choose_lever(engine, known, goal)
    if from_config:
        # a lever the config's engine or release lacks is refused here, before anything launches
        config.with_changes(**{lever.field: lever.clamp(lever.low)})
    startup = _startup(evidence, phases) if evidence is not None else {}
    others = {lev.field: config.get(lev.field) for lev in known} if from_config else {}
    lever, bounded = safe_bounds(lever, engine, concurrency=workload.concurrency, input_len=workload.input_len,
                                 output_len=workload.output_len, startup=startup, config=others)
    if bounded:
        why += f"; bounded to {lever.low:g}..{lever.high:g} ({bounded})"
    return engine, lever, why


def _model_levels(forecaster: Any, measured: Sequence[Any], start: float | None, workload: Workload) -> list[int]:
    """The first launch also measures a lighter level, so the performance model (which needs two
    batch sizes to split a step's fixed time from its per-request time) can be fitted on it."""
    if forecaster is None or measured:
        return []
    batch = min(float(start), workload.concurrency) if start else workload.concurrency
    light = max(1, int(batch // 4))
    return [light] if light < workload.concurrency else []


def _same_workload(folder: Path, workload: Workload, phases: EvidenceCache | None = None) -> bool:
    row = _level_row(folder, workload.concurrency, phases)
    if row is None:
        return False
    try:
        return int(row.get("input_len")) == workload.input_len and int(row.get("output_len")) == workload.output_len
    except (TypeError, ValueError):
        return False


def config_of(run_dir: str | Path, phase: str | None, fallback: str | None = None) -> Any:
    """The configuration a phase of ``run_dir`` ran (its evidence's: ``config.json`` read as its
    engine's, :attr:`~glm5lib.diagnose.evidence.Evidence.config`), else the ``fallback`` config (a
    shipped name or a file); None for a ``command`` phase without either. A phase whose
    configuration is recorded but cannot be read is a ConfigError, not the fallback."""
    folder = Path(run_dir) / phase if phase else None
    if folder is None or not (folder / rundir.CONFIG).exists():
        return engines.load_config(fallback) if fallback else None
    ev = _evidence(folder)
    if ev is None or ev.config is None:
        why = [s for s in (ev.skipped if ev is not None else []) if s.startswith(rundir.CONFIG)]
        raise ConfigError(f"{folder}: {why[0] if why else f'{rundir.CONFIG} unreadable'}", field="config")
    return ev.config


def _start_value(config: Any, lever: Lever, startup: Mapping[str, Any], engine: str) -> float | None:
    value = config.get(lever.field) if config is not None else None
    if value is None:
        value = startup.get(lever.field)
        limit = engines.get(engine, default=engines.COMMAND).capabilities.limit_of(lever.field)
        if value is None and limit is not None:  # the value in force, as the engine's log states it
            value = engines.limits_of(engine, {}, startup).get(limit)
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _record(run: Path, kind: str, step: int, phase: str, lever: Lever, changes: Mapping[str, Any],
            measured: Mapping[str, Any], proposal: Proposal | None, reason: str) -> dict[str, Any]:
    row = {
        "kind": kind, "step": step, "phase": phase, "lever": lever.field, "value": changes.get(lever.field),
        "changes": json.dumps(dict(changes), sort_keys=True), **{k: v for k, v in measured.items() if k != "x"},
        "predicted_objective": proposal.predicted_objective if proposal else math.nan,
        "predicted_binding": proposal.predicted_binding if proposal else math.nan,
        "prediction_source": proposal.source if proposal else "", "reason": reason,
    }
    _append(run, row)
    return row


def _reuse(previous: pd.DataFrame, kind: str, phase: str, changes: Mapping[str, Any]) -> bool:
    if previous.empty:
        return False
    key = json.dumps(dict(changes), sort_keys=True)
    rows = previous[(previous["kind"] == kind) & (previous["phase"] == phase)]
    return bool(not rows.empty and rows.iloc[-1]["changes"] == key)


def _held(row: Mapping[str, Any]) -> bool:
    value = row.get("batch_held", True)  # tune.csv written before the column: counted
    return not (value is False or (isinstance(value, str) and value.lower() == "false"))


def _pick(rows: Sequence[dict[str, Any]], noise: float, margin: float = 0.0) -> dict[str, Any] | None:
    """The winner: the most objective measured under every limit with the room the margin asks for
    (:func:`~glm5lib.tune.propose.limit_room`); where no candidate has that room, the most objective measured under the
    limits at all. A user who asks for a margin beyond the noise says one configuration's launches
    differ by that much on the host, so a candidate that met a limit with less room meets it again
    only by luck (real vLLM on two shared cores: 64 running met a 9 ms TPOT limit at 8.9 ms, then
    read 9.6 when launched again). With the defaults a candidate measured at 99% of its limit still
    wins over one with more room and less throughput (the stand-in: 511 running at 3,008 tok/s and
    99% of the limit against 455 at 2,857)."""
    feasible = [r for r in rows if r["slo_met"] and math.isfinite(float(r["objective"]))]
    if not feasible:
        return None
    # a level that never held the batch its load and cap allow is no winner while a steady one is
    feasible = [r for r in feasible if _held(r)] or feasible
    feasible = [r for r in feasible if binding_ratio(r) <= limit_room(margin, noise)] or feasible
    top = max(float(r["objective"]) for r in feasible)
    # within half the noise of the top, the one with the most room under its limits measures again
    near = [r for r in feasible if float(r["objective"]) >= top * (1.0 - noise / 2)]
    best = min(near, key=lambda r: (binding_ratio(r), -float(r["objective"])))
    out = {k: best.get(k) for k in ("phase", "objective", "output_throughput", "goodput", "slo_met",
                                    "binding_limit", "binding_ratio", "running", "batch_held", "held_note")}
    out["changes"] = json.loads(best["changes"])
    for key, value in best.items():
        if key.endswith("_ms"):
            out[key] = value
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in out.items()}


def save_best(config: Any, run: Path, best: Mapping[str, Any] | None, lever: Lever, goal: Goal) -> Path | None:
    """``best``'s changes to ``config`` saved as the run's ``tune-best.json`` (None: no winner)."""
    if best is None:
        return None
    path = run / rundir.TUNE_BEST
    changes = dict(best["changes"])
    if config is None:
        path.write_text(json.dumps({"format": "glm5lib.tune_best/1", "engine": "command", "changes": changes,
                                    "goal": goal.to_dict()}, indent=2) + "\n")
        return path
    tuned = config.with_changes(**changes)
    base = getattr(config, "name", None) or "config"
    # what the tuner started from, with whatever changes that configuration already carried (a fix
    # phase's config keeps the baseline's name): the saved file must not pass for the baseline tuned
    meta = getattr(config, "meta", None) or {}
    start = meta.get("description") if isinstance(meta, Mapping) else None
    description = (f"{base}" + (f" ({start})" if start else "") + f", tuned to {lever.field}="
                   f"{changes.get(lever.field)}: the most "
                   f"{goal.objective.replace('_', ' ')} measured under {', '.join(map(str, goal.limits)) or 'goodput'}"
                   f" (phase {best['phase']})")
    try:
        tuned.save(path, name=f"{base}-tuned", description=description)
    except TypeError:  # a vLLM config keeps its own name and description
        tuned.meta.update(name=f"{base}-tuned", description=description)
        tuned.save(path)
    return path


def _options(options: SearchOptions | None, launch: dict[str, Any]) -> SearchOptions:
    """``options`` with any of its fields given as keywords beside the launch's (``levers=...``,
    ``noise=...``: the spelling callers used before the options were grouped) taken out of
    ``launch`` and set on it."""
    given = {name: launch.pop(name) for name in list(launch) if name in _OPTION_FIELDS}
    return dataclasses.replace(options or SearchOptions(), **given)


def tune(config: Any, run_dir: str | Path, goal: Goal, workload: Workload, *, backend: str = "sim",
         max_launches: int = 4, evidence_phase: str | None = None, measure: Measure | None = None,
         options: SearchOptions | None = None, **launch: Any) -> TuneResult:
    """Search the lever for the most objective under the goal's limits, in at most ``max_launches``.

    ``evidence_phase`` is a phase of ``run_dir`` already measured at the target load: it is the
    first point, at no launch. ``options`` (:class:`SearchOptions`: the lever, the release, the
    noise and margin, the model) may also be given field by field as keywords (``levers=``,
    ``noise=``...). ``launch`` is passed to :func:`default_measure` (``sim_profile``, ``command``,
    ``model``, ``ready_timeout``, ``progress``, ``cpus``: see :mod:`glm5lib.cpus`). Raises
    ConfigError before any launch for a bad goal, workload, lever or budget.
    """
    run = Path(run_dir)
    opts = _options(options, launch)
    if not (isinstance(max_launches, int) and max_launches >= 1):
        raise ConfigError(f"--max-launches {max_launches!r} must be at least 1", field="max_launches")
    opts.check()
    evidence = run / evidence_phase if evidence_phase else None
    if evidence is not None and not (evidence / rundir.SWEEP).exists():
        raise ConfigError(f"phase {evidence_phase!r} of {run} has no {rundir.SWEEP}", field="phase")
    phases = _reader()
    engine, lever, why = _setup(config, backend, goal, workload, opts, evidence, phases)
    run.mkdir(parents=True, exist_ok=True)
    measure = measure or default_measure(config, backend=backend, run_dir=run, workload=workload, **launch)
    forecaster = perfmodel_forecaster(run, engine=engine, concurrency=workload.concurrency,
                                      input_len=workload.input_len, output_len=workload.output_len,
                                      objective=goal.objective, metrics=[lim.metric for lim in goal.limits],
                                      phases=phases) if opts.use_model else None
    search = _Search(run, goal, workload, lever, opts, phases,
                     Landscape(lever.field, lever.acts_on, [lim.metric for lim in goal.limits], forecaster=forecaster))
    previous = load_tune(run)
    start = _start_value(config, lever, _startup(evidence, phases) if evidence is not None else {}, engine)
    if evidence is not None and _same_workload(evidence, workload, phases):
        changes = {lever.field: lever.clamp(start)} if start is not None else {}
        search.take(evidence, changes, 0, "evidence", None, f"measured phase {evidence_phase}: the starting evidence; {why}")
    elif evidence is not None:
        log.info("phase %s was not measured at %d concurrent %d+%d-token requests: its config and start-up "
                 "facts are used, its levels are not a point of this landscape", evidence_phase,
                 workload.concurrency, workload.input_len, workload.output_len)
    launches, step = 0, 1
    while launches < max_launches:
        proposal = search.first(start, why) if not search.measured else search.propose()
        if proposal.value is None:
            proposal = search.again(opts.noise) or proposal
        if proposal.value is None:
            stopped = proposal.reason
            break
        changes = {lever.field: lever.clamp(proposal.value)}
        phase = f"tune-{step}"
        if _reuse(previous, "tune", phase, changes) and _level_row(run / phase, workload.concurrency, phases):
            log.info("%s already measured with %s: read again, not relaunched", phase, changes)
        else:
            log.info("%s: launching with %s: %s", phase, changes, proposal.reason)
            measure(changes, phase, _model_levels(forecaster, search.measured, start, workload))
        launches += 1
        search.take(run / phase, changes, step, "tune", proposal, proposal.reason)
        step += 1
    else:
        stopped = f"the budget of {max_launches} launches is spent"
    best = _pick(search.rows, opts.noise, opts.margin)
    path = save_best(config, run, best, lever, goal)
    return TuneResult("tune", goal, lever, pd.DataFrame(search.rows), best, launches, stopped, path)


@dataclass
class _Search:
    """One tuning run's state: the candidates measured, their ``tune.csv`` rows and the landscape
    the next proposal is read from."""

    run: Path
    goal: Goal
    workload: Workload
    lever: Lever
    options: SearchOptions
    phases: EvidenceCache
    land: Landscape
    measured: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)

    def take(self, folder: Path, changes: Mapping[str, Any], step: int, kind: str, proposal: Proposal | None,
             reason: str) -> None:
        """Read one measured candidate into the landscape and ``tune.csv``."""
        result = _evaluate(folder, self.goal, self.workload, self.phases)
        lever = self.lever
        x = lever.clamp(changes.get(lever.field)) if changes.get(lever.field) is not None else None
        result["x"] = x
        if not result["batch_held"]:
            log.info("%s: %s; no winner while a steady candidate meets the limits", folder.name, result["held_note"])
            reason = f"{reason}; not a winner: {result['held_note']}"
        if x is not None:
            self.land.add(Point(float(x), result["objective"], {k: result[k] for k in self.land.metrics}, folder.name,
                                held=bool(result["batch_held"])))
            self.measured.append(result)
        self.rows.append(_record(self.run, kind, step, folder.name, lever, changes, result, proposal, reason))

    def first(self, start: float | None, why: str) -> Proposal:
        """The first candidate: the configuration as given, else the middle of the safe range."""
        lever = self.lever
        if start is not None:
            return Proposal(start, f"the configuration as given, to read which limit binds ({why})")
        return Proposal(float(np.sqrt(float(lever.low) * float(lever.high))), f"the middle of the safe range ({why})")

    def again(self, noise: float) -> Proposal | None:
        """A candidate that met the limits with more objective than every steady one but whose batch
        swung, measured once more: one launch's swing is no verdict (the stand-in's 511 running
        swung 16-511 in one launch, held 512 in another)."""
        rows = [r for r in self.rows if r["slo_met"] and math.isfinite(float(r["objective"]))]
        steady = max((float(r["objective"]) for r in rows if _held(r)), default=0.0)
        tried: dict[str, int] = {}
        for r in self.rows:
            tried[r["changes"]] = tried.get(r["changes"], 0) + 1
        swung = [r for r in rows if not _held(r) and tried[r["changes"]] == 1
                 and float(r["objective"]) > steady * (1.0 + noise)]
        if not swung:
            return None
        best = max(swung, key=lambda r: float(r["objective"]))
        value = json.loads(best["changes"]).get(self.lever.field)
        if value is None:
            return None
        return Proposal(float(value), f"{best['phase']} met every limit with {float(best['objective']):,.0f} but its "
                                       f"batch swung: measured again, once, for its steady figures")

    def propose(self) -> Proposal:
        return propose(self.land, self.lever, self.goal, self.measured, noise=self.options.noise,
                        margin=self.options.margin)


def grid_values(lever: Lever, points: int = 8) -> list[float | int]:
    """``points`` values spread geometrically over the lever's safe range, ends included."""
    values = [lever.clamp(v) for v in np.geomspace(float(lever.low), float(lever.high), points)]
    return sorted(set(values))


def grid(config: Any, run_dir: str | Path, goal: Goal, workload: Workload, *, backend: str = "sim",
         values: Sequence[float] | None = None, points: int = 8, measure: Measure | None = None,
         options: SearchOptions | None = None, **launch: Any) -> TuneResult:
    """Measure every value of the grid over the tuner's lever (phases ``grid-1``...); ``options``
    and ``launch`` as for :func:`tune`. A grid judges a search: it writes no best configuration."""
    run = Path(run_dir)
    opts = _options(options, launch)
    phases = _reader()
    _engine, lever, why = _setup(config, backend, goal, workload, opts, None, phases)
    if values:
        bad = [v for v in values if not (float(lever.low) <= float(v) <= float(lever.high))]
        if bad:
            raise ConfigError(f"grid values {bad} are outside {lever.field}'s safe range "
                              f"{lever.low:g}..{lever.high:g}", field="grid")
        values = sorted({lever.clamp(v) for v in values})
    else:
        values = grid_values(lever, points)
    run.mkdir(parents=True, exist_ok=True)
    measure = measure or default_measure(config, backend=backend, run_dir=run, workload=workload, **launch)
    previous = load_tune(run)
    rows = []
    for i, value in enumerate(values, start=1):
        changes = {lever.field: value}
        phase = f"grid-{i}"
        if not (_reuse(previous, "grid", phase, changes) and _level_row(run / phase, workload.concurrency, phases)):
            measure(changes, phase, ())
        result = _evaluate(run / phase, goal, workload, phases)
        rows.append(_record(run, "grid", i, phase, lever, changes, result, None,
                            f"grid point {i} of {len(values)} ({why})"))
    best = _pick(rows, 0.0)
    return TuneResult("grid", goal, lever, pd.DataFrame(rows), best, len(values), "every grid point measured", None)


def recheck(config: Any, run_dir: str | Path, goal: Goal, workload: Workload, result: TuneResult, *,
            backend: str = "sim", measure: Measure | None = None, levels: Sequence[int] = (),
            **launch: Any) -> dict[str, Any]:
    """Launch the winner of ``result`` once more (phase ``<kind>-check``) and say whether it still
    meets the limits; recorded in ``tune.csv`` as kind ``check``. ``levels``: other concurrencies
    swept in the same launch (a load where every candidate runs the same batch reads the machine's
    speed against an earlier launch's)."""
    check_concurrencies(levels, name="recheck level", field="levels")
    if result.best is None:
        raise ConfigError("nothing to measure again: no candidate met the limits", field="recheck")
    run = Path(run_dir)
    measure = measure or default_measure(config, backend=backend, run_dir=run, workload=workload, **launch)
    changes = dict(result.best["changes"])
    phase = f"{result.kind}-check"
    previous = load_tune(run)
    phases = _reader()
    if not (_reuse(previous, "check", phase, changes)
            and all(_level_row(run / phase, c, phases) for c in {workload.concurrency, *levels})):
        measure(changes, phase, tuple(levels))
    measured = _evaluate(run / phase, goal, workload, phases)
    _record(run, "check", 0, phase, result.lever, changes, measured, None,
            f"the winner ({result.best['phase']}) measured again")
    return {"phase": phase, "changes": changes, **{k: v for k, v in measured.items() if k != "x"}}
