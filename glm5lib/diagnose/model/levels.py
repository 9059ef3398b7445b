"""A phase's sweep levels as the performance model reads them.

Each level becomes a :class:`LevelPoint`: the batch the engine held, the tokens the client
received, the workload's mix, the latencies, whether its decode steps replayed CUDA graphs or ran
eagerly (the engine's own decode lines say so where they can, else the limits do), whether its
batch held, and how busy each serving process of the front end was (% of one core, from the
sweep's per-process CPU), so the step curve, the graph ceiling and the front end are each fitted
on the levels that show them.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

__all__ = ["LevelPoint", "as_float", "level_points", "role_cpu"]

# A client below this share of one core (%) with its self-check's client_bound set was starved of
# CPU (glm5lib.loadgen.selfcheck.client_bound_text says so in the level's warning).
STARVED_CPU_PCT = 50.0
# A level whose host had every core this busy (%) shared them among the engine, its front end and
# the client: no serving process had a core of its own.
HOST_BUSY_PCT = 95.0
# A level's server processes, summed, used this much of each core they may run on: they took turns
SHARED_CORES_PCT = 90.0
_PROCESS = re.compile(r"^(?P<who>.+?) (?P<pct>\d+(?:\.\d+)?)%$")


@dataclasses.dataclass
class LevelPoint:
    """One sweep level as the fit reads it."""

    concurrency: int
    running: float
    throughput: float
    input_len: float
    output_len: float
    ttft_ms: float | None
    tpot_ms: float | None
    # its decode steps ran eagerly (no CUDA graph replayed): graphs off, or above the ceiling
    eager: bool = False
    # the client's self-check found it starved of CPU (under half a core, lagging all the same):
    # the host, not the engine alone, paced this level
    starved: bool = False
    # the batch held what the load and the cap allow, or a smaller one steadily (None: unknown)
    held: bool | None = None
    # serving role -> % of one core its processes used during the level
    frontend: dict[str, float] = dataclasses.field(default_factory=dict)
    # every core of the host was busy: processes shared cores
    host_busy: bool = False
    # the server's processes used every core they may run on (``server_cpus``, at least 90% each):
    # the front end's work and the engine's step took turns on the same cores
    cores_shared: bool = False
    # the engine's own pace at the level's fullest batch, from decode lines an engine writes every so
    # many steps (SGLang): that batch and its step (ms); None where its lines do not say
    line_batch: float | None = None
    line_step_ms: float | None = None
    # the largest share of the KV pool in use during the level, where the engine's lines say it
    peak_token_usage: float | None = None

    @property
    def u_ms(self) -> float:
        """Wall time per engine step (ms): the batch over the tokens per second it gave."""
        return 1000.0 * self.running / self.throughput


def as_float(v: Any) -> float | None:
    """``v`` as a finite float, or None (missing, not a number, infinite)."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) else False


def processes(text: Any) -> list[tuple[str, float]]:
    """``"name[pid] 99%; name[pid] 12%"`` (a level's ``other_processes``) as ``[(process, % of one core)]``."""
    if not isinstance(text, str):
        return []
    found = (_PROCESS.match(part.strip()) for part in text.split(";"))
    return [(m.group("who"), float(m.group("pct"))) for m in found if m is not None]


def role_cpu(text: Any, roles: Sequence[Any]) -> dict[str, float]:
    """A level's ``other_processes`` as role -> % of one core summed over its processes (each
    role's ``matches(process)`` picks them)."""
    out: dict[str, float] = {}
    for who, pct in processes(text) if roles else []:
        for role in roles:
            if role.matches(who):
                out[role.name] = out.get(role.name, 0.0) + pct
                break
    return out


def _eager_share(lines: pd.DataFrame) -> float | None:
    """Share of a level's decode lines that ran eagerly; None where its lines do not say."""
    if lines is None or lines.empty or "cuda_graph" not in lines:
        return None
    flags = lines["cuda_graph"].dropna()
    if flags.empty:
        return None
    eager = flags.astype(str).str.strip().str.lower().isin(("false", "0", "no"))
    return float(eager.mean())


# a level's fullest batch: its decode lines at this share of their largest running count or more
FULL_BATCH = 0.9


def full_batch(lines: pd.DataFrame) -> pd.DataFrame:
    """A level's decode lines while its batch was full: at :data:`FULL_BATCH` of their largest
    running count or more (all of them where the count is unknown)."""
    if "running_req" not in lines:
        return lines
    running = pd.to_numeric(lines["running_req"], errors="coerce")
    return lines[running >= FULL_BATCH * float(running.max())] if running.notna().any() else lines


def line_pace(lines: pd.DataFrame | None) -> tuple[float, float] | None:
    """``(batch, step ms)`` the engine kept while the level's batch was full, from decode lines
    written every so many steps with the engine's own generation rate: the median running count
    and rate of the lines at :data:`FULL_BATCH` of the largest count or more (at least two)."""
    if lines is None or len(lines) < 2 or not {"running_req", "gen_throughput"} <= set(lines.columns):
        return None
    running = pd.to_numeric(lines["running_req"], errors="coerce")
    if not running.notna().any() or float(running.max()) < 1:
        return None
    full = full_batch(lines)
    made = pd.to_numeric(full["gen_throughput"], errors="coerce").dropna()
    if len(made) < 2 or float(made.median()) <= 0:
        return None
    batch = float(pd.to_numeric(full["running_req"], errors="coerce").median())
    return batch, 1000.0 * batch / float(made.median())


def level_points(ev: Any, *, cap: int | None, budget: int | None, graphs: bool, graph_max: int | None,
                 roles: Sequence[Any] = (), held: Mapping[int, bool | None] | None = None,
                 step_paced: bool = False) -> list[LevelPoint]:
    """The phase's sweep levels with a measured output throughput, as :class:`LevelPoint`.

    The batch is the requests the engine may hold (the offered load, up to its cap), as the forecast
    reads it at the target; the log's running count replaces it only where the engine itself kept
    requests waiting (a limit the cap does not show: the KV pool, the budget). A log that reads fewer
    running with nothing waiting is counting snapshots of a batch whose requests spend part of their
    life outside the engine (the HTTP server's tokenizing and streaming, the client): that time is
    part of each request's service time, and the forecast's batch counts those requests too."""
    s = ev.sweep_sorted()
    if s.empty or "output_throughput" not in s:
        return []
    points = []
    for _, row in s.iterrows():
        thr = as_float(row.get("output_throughput"))
        c = as_float(row.get("concurrency"))
        if not thr or thr <= 0 or not c:
            continue
        completed = as_float(row.get("completed")) or 0.0
        i = as_float(row.get("total_input_tokens"))
        o = as_float(row.get("total_output_tokens"))
        inp = i / completed if i and completed else as_float(row.get("input_len")) or 1.0
        out = o / completed if o and completed else as_float(row.get("output_len")) or 1.0
        running = min(c, float(cap)) if cap else c
        lines = ev.decode_in_level(row)
        if len(lines) >= 2 and "running_req" in lines:
            r = pd.to_numeric(lines["running_req"], errors="coerce").dropna()
            q = pd.to_numeric(lines["queue_req"], errors="coerce").dropna() if "queue_req" in lines else r.iloc[0:0]
            if len(r) and len(q) and float(q.median()) > 0:
                running = float(min(max(ev.running(lines), 1.0), c))
        if budget and inp + out > 0:
            # no more requests decode per step than the token budget feeds with prompts (the log
            # counts those still waiting for their prompt's chunks as running too)
            running = min(running, max(1.0, budget * out / (inp + out)))
        mean_conc = as_float(row.get("mean_concurrency"))
        if mean_conc and mean_conc < running:
            running = max(1.0, mean_conc)
        pace = line_pace(lines) if step_paced else None
        share = _eager_share(lines)
        if share is not None and graphs:
            eager = share >= 0.5
        else:
            eager = (not graphs) if graph_max is None else (not graphs or running > graph_max)
        points.append(
            LevelPoint(
                concurrency=int(c),
                running=running,
                throughput=thr,
                input_len=inp,
                output_len=out,
                ttft_ms=as_float(row.get("mean_ttft_ms")),
                tpot_ms=as_float(row.get("mean_tpot_ms")),
                eager=bool(eager),
                starved=_truthy(row.get("client_bound"))
                and (as_float(row.get("client_cpu_pct")) or 100.0) < STARVED_CPU_PCT,
                held=(held or {}).get(int(c)),
                frontend=role_cpu(row.get("other_processes"), roles),
                host_busy=(as_float(row.get("host_cpu_pct")) or 0.0) >= HOST_BUSY_PCT,
                cores_shared=_cores_shared(row),
                line_batch=pace[0] if pace else None,
                line_step_ms=pace[1] if pace else None,
                peak_token_usage=_peak_of(lines, "token_usage"),
            )
        )
    return points


def _peak_of(lines: pd.DataFrame, column: str) -> float | None:
    if column not in lines:
        return None
    values = pd.to_numeric(lines[column], errors="coerce").dropna()
    return float(values.max()) if len(values) else None


def _cores_shared(row: Mapping[str, Any]) -> bool:
    """The server's processes used at least :data:`SHARED_CORES_PCT` of every core they may run on."""
    cores = as_float(row.get("server_cpus")) or 0.0
    used = as_float(row.get("others_cpu_pct")) or 0.0
    return cores >= 1 and used >= SHARED_CORES_PCT * cores
