"""Take the engine's offline step benchmark for a phase: one launch, no HTTP server.

``glm5 profile RUN --phase baseline --batch-size 256 1024`` (or :func:`take_step_profile`) runs
the phase's engine's own benchmark of one decode step (SGLang's ``bench_one_batch``, vLLM's offline
engine, the stand-in's imitation; :class:`glm5lib.engines.StepBenchmark`) with the phase's own
configuration, at the phase's own batch sizes (so the served steps can scale it) and the ones asked,
and writes ``step-profile.log`` (its output, as it arrives) and ``step-profile.csv`` (``batch``,
``step_ms``, ``prefill_ms``, ``graphs``...) into the phase folder, where the performance model reads
it as evidence beside the phase (:mod:`glm5lib.diagnose.model.profile`). It is what a forecast that
is not given names: the step at a batch the phase never ran, or what an eager step costs.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import math
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import cpus, engines, rundir
from glm5lib.diagnose.evidence import load_evidence
from glm5lib.diagnose.model import PerfModel
from glm5lib.errors import ConfigError, DiagnosisError, ServerLaunchError
from glm5lib.logs.fatal import ERROR_KINDS, classify_fatal

__all__ = ["PROFILE_COLUMNS", "Settled", "profile_batches", "profile_wants", "settle_forecast", "take_step_profile"]

log = logging.getLogger(__name__)

PROFILE_COLUMNS = ["batch", "step_ms", "prefill_ms", "total_ms", "graphs", "input_len", "output_len", "engine",
                   "source", "command", "taken_at"]
_TAIL = 30


def profile_batches(ev: Any, extra: Sequence[int] = ()) -> list[int]:
    """The phase's own running batches (so its served steps scale the profile) and ``extra``."""
    own: set[int] = set()
    try:
        model = PerfModel.from_evidence(ev)
        own = {max(1, round(p.running)) for p in model.levels}
    except (DiagnosisError, ConfigError) as exc:  # a phase the model cannot read still takes the batches asked
        log.info("no levels to scale the profile to: %s", exc)
    return sorted(own | {int(b) for b in extra if int(b) >= 1})


def take_step_profile(run_dir: str | Path, phase: str, batches: Sequence[int] = (), *, graphs_off: bool | None = None,
                      input_len: int | None = None, output_len: int | None = None, timeout: float = 900.0,
                      python: str | None = None, changes: Mapping[str, Any] | None = None) -> Path:
    """Run the phase's engine's step benchmark; returns ``step-profile.csv``'s path.

    ``batches`` are added to the phase's own; ``graphs_off`` True/False switches CUDA graphs off/on
    for the benchmark (None: as the phase ran); the workload defaults to the phase's own. Everything
    is checked before anything starts; a benchmark that fails raises ServerLaunchError with the
    last lines of its output (kept in ``step-profile.log``). Of ``changes`` (a change being
    forecast), those that set which steps replay a graph apply (:func:`glm5lib.engines.step_kind_changes`):
    the steps the forecast lacks are the changed deployment's."""
    folder = Path(run_dir) / phase
    if not (folder / rundir.SWEEP).is_file() and not (folder / rundir.CONFIG).is_file():
        raise ConfigError(f"{folder} is not a measured phase (no {rundir.SWEEP} or {rundir.CONFIG})", field="phase")
    ev = load_evidence(run_dir, phase=phase)
    # the stand-in writes its engine's log: its own benchmark times its steps
    adapter = engines.get(engines.STANDIN) if ev.standin else engines.get(ev.engine, default=engines.COMMAND)
    bench = adapter.step_benchmark
    if bench is None:
        have = [a.name for a in engines.adapters() if a.step_benchmark is not None]
        raise ConfigError(f"{adapter.title} has no offline step benchmark glm5lib can run; engines that have one: "
                          f"{', '.join(have)}", field="engine", valid=have)
    bad = [b for b in batches if not isinstance(b, (int,)) or isinstance(b, bool) or b < 1]
    if bad:
        raise ConfigError(f"batch sizes must be whole numbers of at least 1, got {bad}", field="batch_size")
    want = profile_batches(ev, batches)
    if not want:
        raise ConfigError("no batch size to benchmark: give --batch-size, or a phase with sweep levels",
                          field="batch_size")
    s = ev.sweep_sorted()
    i = input_len or _median(s, "input_len") or 256
    o = output_len or _median(s, "output_len") or 32
    config: Any = ev.config if ev.config is not None else dict(ev.server_args or {})
    env = {str(k): str(v) for k, v in (getattr(ev.config, "env", None) or {}).items()}
    if bench.env is not None:
        env = {**bench.env(config), **env}
    interpreter = python or (bench.python() if bench.python else sys.executable)
    argv = bench.command(config, want, int(i), int(o), graphs_off=graphs_off, python=interpreter,
                         changes=engines.step_kind_changes(changes, adapter, ev.server_args or {}))
    logfile = folder / rundir.STEP_PROFILE_LOG
    text = _run(argv, {**os.environ, **env}, logfile, timeout, bench)
    rows = bench.parse(text, graphs_off=graphs_off)
    if not rows:
        tail = "\n".join(text.splitlines()[-_TAIL:])
        raise ServerLaunchError(f"{bench.title} printed no step (kept in {logfile}); its last lines:\n{tail}",
                                cause="no_output")
    frame = pd.DataFrame(rows)
    now = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    for col, value in (("input_len", int(i)), ("output_len", int(o)), ("engine", adapter.name),
                       ("source", bench.title), ("command", shlex.join(argv)), ("taken_at", now)):
        if col not in frame:
            frame[col] = value
    for col in PROFILE_COLUMNS:
        if col not in frame:
            frame[col] = None
    out = folder / rundir.STEP_PROFILE
    frame = _merged(out, frame[PROFILE_COLUMNS])
    frame.to_csv(out, index=False)
    return out


def _merged(path: Path, new: pd.DataFrame) -> pd.DataFrame:
    """``new`` with the rows of an earlier profile at ``path`` it did not measure again (same batch,
    same kind of step), where that profile timed the same workload: a profile taken for batch 1,024
    keeps the 256 taken before it."""
    if not path.is_file():
        return new
    try:
        old = pd.read_csv(path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        log.warning("an earlier step profile at %s could not be read (%s): replaced", path, exc)
        return new
    if not {"batch", "graphs"} <= set(old.columns):
        return new
    old = old[pd.to_numeric(old["batch"], errors="coerce").notna()]
    for col in ("input_len", "output_len"):
        if col in old.columns and col in new.columns:
            old = old[pd.to_numeric(old[col], errors="coerce") == pd.to_numeric(new[col], errors="coerce").iloc[0]]
    kept = old[~_step_keys(old).isin(set(_step_keys(new)))]
    if kept.empty:
        return new
    both = pd.concat([kept.reindex(columns=PROFILE_COLUMNS), new], ignore_index=True)
    return both.sort_values("batch", kind="stable").reset_index(drop=True)


def _step_keys(frame: pd.DataFrame) -> pd.Series:
    """``batch/kind`` of each row: graph, eager, or unknown (no graphs figure)."""

    def kind(g: Any) -> str:
        if g is None or (isinstance(g, float) and math.isnan(g)) or str(g).strip() == "":
            return "unknown"
        return "graph" if str(g).strip().lower() in ("true", "1") else "eager"

    batch = pd.to_numeric(frame["batch"], errors="coerce").round().astype("Int64").astype(str)
    return batch + "/" + frame["graphs"].map(kind)


def _median(s: pd.DataFrame, col: str) -> int | None:
    if s.empty or col not in s:
        return None
    v = pd.to_numeric(s[col], errors="coerce").dropna()
    return int(v.median()) if len(v) else None


def _run(argv: list[str], env: dict[str, str], logfile: Path, timeout: float, bench: Any) -> str:
    """Run ``argv`` with its output written to ``logfile`` as it arrives; its whole output."""
    started = time.monotonic()
    try:
        # an earlier profile's output stays: each benchmark appends its own, headed by its command
        offset = logfile.stat().st_size if logfile.exists() else 0
        with logfile.open("a") as sink:
            sink.write(f"# {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')} {shlex.join(argv)}\n")
            sink.flush()
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, text=True)
            layout = cpus.current()
            if layout is not None:  # the server's cores, as the server it stands for ran on
                cpus.pin_process(proc.pid, layout.server)
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise ServerLaunchError(
                    f"{bench.title} did not finish within {timeout:.0f} s (its output so far is in {logfile}); "
                    f"last lines:\n{_tail(logfile)}", cause="timeout") from None
    except FileNotFoundError as exc:
        raise ServerLaunchError(f"cannot start {bench.title}: {exc}; {bench.hint}", cause="not_found") from exc
    text = logfile.read_bytes()[offset:].decode(errors="replace")
    if code != 0:
        kind, line = failure_cause(text)
        why = _CAUSES.get(kind) or (bench.hint if kind in (None, "not_installed") else "its last lines below say why")
        said = f": {line}" if line else ""
        raise ServerLaunchError(f"{bench.title} exited with code {code} after {time.monotonic() - started:.0f} s "
                                f"({logfile}){said}; {why}; its last lines:\n{_tail(logfile)}",
                                cause=kind or "exit")
    return text


#: what a benchmark that failed of each cause needs (an install hint only where nothing ran)
_CAUSES = {
    "oom": ("it ran out of GPU memory: the benchmark prefills each batch in one pass, which the server chunks; "
            "fewer or smaller batch sizes (--batch-size) leave room, or a smaller share of the GPU's memory kept "
            "for the engine's KV pool"),
    "nccl": "a collective failed between the GPUs: the server's own launch would fail the same way",
    "nan": "the model produced NaN: its weights or its quantization, not the benchmark",
}
_NOT_INSTALLED = ("No module named", "ModuleNotFoundError")


def failure_cause(text: str) -> tuple[str | None, str]:
    """The most specific fatal kind a failed benchmark's output names (the server's own signatures,
    :data:`glm5lib.logs.fatal.ERROR_KINDS` order; ``not_installed`` where its module is missing) and
    the line that names it; (None, "") where no line does."""
    found: dict[str, str] = {}
    lines = text.splitlines()
    # a missing module is the cause where the run ended on it (its last error line), not where a
    # warning mentions one in passing
    errors = [x for x in lines if "error" in x.lower()]
    last_error = errors[-1] if errors else None
    for line in lines:
        kind = classify_fatal(line)
        if kind is None and line is last_error and any(m in line for m in _NOT_INSTALLED):
            kind = "not_installed"
        if kind is not None:
            found.setdefault(kind, line.strip()[:300])
    for kind in (*ERROR_KINDS, "not_installed"):
        if kind in found:
            return kind, found[kind]
    return None, ""


def _tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-_TAIL:])
    except OSError:
        return ""


@dataclasses.dataclass
class Settled:
    """A forecast of a change and how it was settled: the model (with the profile taken, if one was),
    its forecasts, the profile's path (None: none taken) and what happened (``note``)."""

    model: PerfModel
    forecasts: list[Any]
    profile: Path | None
    note: str

    def __iter__(self):  # (model, forecasts, profile), as a tuple unpacks
        return iter((self.model, self.forecasts, self.profile))


def profile_wants(model: PerfModel, forecasts: Sequence[Any], changes: Mapping[str, Any] | None = None,
                  ) -> list[dict[str, Any]]:
    """The step profiles that would settle ``forecasts`` of ``changes``: each level not forecast for
    want of a step the engine's offline benchmark times, and each level forecast with its step read
    off the phase's curve beyond the batches the phase ran (given, but a real H100's step at 4x its
    largest batch read 28% slow there: ``data/examples/h100-sglang-cap-chunk``), where the engine has
    a benchmark to time it; [] where none would. The read-off steps are left out where another level
    asks for eager steps: the one launch times every batch one way, and theirs are the deployment's own."""
    wants = [f.measurement for f in forecasts if not f.given and f.measurement.get("kind") == "step_profile"]
    read_off = sorted({max(1, round(f.running)) for f in forecasts if f.given and f.extrapolated})
    eager = any(w.get("graphs_off") is True for w in wants)
    if read_off and not eager and model.benchmark_text(read_off, changes=changes):
        wants.append({"kind": "step_profile", "batches": read_off, "graphs_off": None})
    return wants


def settle_forecast(run_dir: str | Path, phase: str, changes: Mapping[str, Any] | None, concurrency: Sequence[int], *,
                    take: bool = True, **options: Any) -> Settled:
    """The model of ``phase`` and its forecast of ``changes``; where levels are not forecast for want
    of a step the engine's offline benchmark can time (a batch beyond the phase's, an eager step), or
    are forecast from a step read off the curve beyond the phase's batches (:func:`profile_wants`),
    and ``take``, one benchmark launch covering all of them is taken on ``phase`` and the forecast is
    made again with it. A benchmark that cannot run here leaves the forecast as it was and says why
    (``note``). ``options`` go to :func:`take_step_profile` (``timeout``, ``python``)."""
    path = Path(run_dir) / phase
    model = PerfModel.fit_phase(path)
    forecasts = model.forecast(changes, list(concurrency))
    wants = profile_wants(model, forecasts, changes)
    if not wants:
        return Settled(model, forecasts, None, "every level is forecast from steps the evidence holds, or none "
                                               "would be settled by a step profile")
    if not take:
        return Settled(model, forecasts, None, "a step profile would settle some levels; not taken (STEP_PROFILE)")
    batches = sorted({int(b) for w in wants for b in w.get("batches", [])})
    offs = {w.get("graphs_off") for w in wants}
    graphs_off = True if True in offs else (False if False in offs else None)
    try:
        profile = take_step_profile(run_dir, phase, batches, graphs_off=graphs_off, changes=changes, **options)
    except (ServerLaunchError, ConfigError) as exc:
        return Settled(model, forecasts, None, f"the step profile could not be taken here, so what it would settle "
                                               f"stays not forecast: {exc}")
    model = PerfModel.fit_phase(path)
    return Settled(model, model.forecast(changes, list(concurrency)), profile,
                   f"step profile taken ({len(batches)} batch size(s) asked, graphs "
                   f"{'off' if graphs_off else 'as run'}): {profile}")
