"""Which CPU cores the server and the load generator run on, when they share a small host.

On a host with few cores, an engine that runs its model on the CPU (vLLM's CPU backend), or
whose scheduler busy-polls, takes the cores the load generator needs: the client is then
starved, its event loop lags, and what it measures is the host's scheduling, not the engine
(on two cores, three launches of one vLLM configuration measured 1.4-2.3k tok/s). Benchmarks keep the two apart by pinning each to its own cores, and so does this
module:

- ``"split"``: the load generator gets the last core this process may use, the server the
  others (at least two cores are needed);
- ``"SERVER/CLIENT"`` with core lists as ``taskset -c`` writes them: ``"0-5/6,7"``;
- None or ``""``: no pinning (the default), unless the environment variable ``GLM5_CPUS``
  holds one of the above.

:func:`layout` checks a spec before anything is launched; :func:`pin_process` puts a started
server (and whatever it has spawned) on its cores; :func:`pinned_here` runs a block (a sweep)
with every thread of this process on the client's cores, and puts them back afterwards. Engines
that size their own thread pools read :attr:`CpuLayout.server` through :func:`current` (vLLM's
CPU backend binds its OpenMP threads to it).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import psutil

from glm5lib.errors import ConfigError

__all__ = ["ENV_VAR", "CpuLayout", "current", "format_cpus", "layout", "parse_cpus", "pin_process", "pinned_here",
           "using"]

#: The environment variable read when no spec is given.
ENV_VAR = "GLM5_CPUS"
_VALID = "'split', 'SERVER/CLIENT' core lists such as '0-5/6,7', or '' for no pinning"


@dataclass(frozen=True)
class CpuLayout:
    """The cores the server and the load generator are pinned to (disjoint, both non-empty)."""

    server: tuple[int, ...]
    client: tuple[int, ...]
    spec: str

    def describe(self) -> str:
        return f"server on CPU {format_cpus(self.server)}, load generator on CPU {format_cpus(self.client)}"

    def to_dict(self) -> dict[str, object]:
        return {"spec": self.spec, "server": list(self.server), "client": list(self.client)}


def _available() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def parse_cpus(text: str, *, field: str = "cpus") -> tuple[int, ...]:
    """``"0-2,5"`` -> ``(0, 1, 2, 5)``; a ConfigError naming ``field`` for anything else."""
    cores: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if lo > hi:
                    raise ValueError(part)
                cores.update(range(lo, hi + 1))
            else:
                cores.add(int(part))
        except ValueError:
            raise ConfigError(f"{field}={text!r}: {part!r} is not a core number or range (e.g. '0-3,6')",
                              field=field, valid=[_VALID]) from None
    return tuple(sorted(cores))


def format_cpus(cores: Sequence[int]) -> str:
    """``(0, 1, 2, 5)`` -> ``"0-2,5"``, the form ``taskset -c`` and vLLM's bind list take."""
    out: list[str] = []
    cores = sorted(set(cores))
    i = 0
    while i < len(cores):
        j = i
        while j + 1 < len(cores) and cores[j + 1] == cores[j] + 1:
            j += 1
        out.append(str(cores[i]) if i == j else f"{cores[i]}-{cores[j]}")
        i = j + 1
    return ",".join(out)


def layout(spec: str | CpuLayout | None = None, *, field: str = "cpus") -> CpuLayout | None:
    """The layout ``spec`` asks for (``GLM5_CPUS`` when ``spec`` is None), checked against the
    cores this process may use; None for no pinning. Raises ConfigError for a bad spec."""
    if isinstance(spec, CpuLayout):
        return spec
    if spec is None:
        spec = os.environ.get(ENV_VAR, "")
        field = ENV_VAR if spec else field
    spec = str(spec).strip()
    if spec in ("", "none", "off"):
        return None
    here = _available()
    if spec == "split":
        if len(here) < 2:
            raise ConfigError(f"{field}='split' needs at least two cores; this process may use {format_cpus(here)}",
                              field=field, valid=[_VALID])
        return CpuLayout(tuple(here[:-1]), (here[-1],), spec)
    if spec.count("/") != 1:
        raise ConfigError(f"{field}={spec!r} is not a CPU layout", field=field, valid=[_VALID])
    server_text, client_text = spec.split("/")
    server, client = parse_cpus(server_text, field=field), parse_cpus(client_text, field=field)
    missing = sorted((set(server) | set(client)) - set(here))
    if missing:
        raise ConfigError(f"{field}={spec!r} names CPU {format_cpus(missing)}, which this process may not use "
                          f"(it may use {format_cpus(here)})", field=field, valid=[_VALID])
    if set(server) & set(client):
        raise ConfigError(f"{field}={spec!r}: the server and the load generator share CPU "
                          f"{format_cpus(set(server) & set(client))}; give each its own", field=field, valid=[_VALID])
    return CpuLayout(server, client, spec)


_CURRENT: contextvars.ContextVar[CpuLayout | None] = contextvars.ContextVar("glm5_cpu_layout", default=None)


def current() -> CpuLayout | None:
    """The layout in force: the one :func:`using` set, else ``GLM5_CPUS``'s, else None."""
    return _CURRENT.get() or layout(None)


@contextlib.contextmanager
def using(spec: str | CpuLayout | None) -> Iterator[CpuLayout | None]:
    """Within the block, servers started here and :func:`current` use ``spec``'s layout (None:
    the environment's)."""
    chosen = layout(spec)
    token = _CURRENT.set(chosen)
    try:
        yield chosen
    finally:
        _CURRENT.reset(token)


def pin_process(pid: int, cores: Sequence[int]) -> None:
    """Put process ``pid`` and its descendants on ``cores``; children it starts later inherit them.
    A process that is already gone is skipped."""
    try:
        proc = psutil.Process(pid)
        family = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return
    for member in family:
        with contextlib.suppress(psutil.Error):
            member.cpu_affinity(list(cores))


def _threads() -> list[int]:
    try:
        return [t.id for t in psutil.Process().threads()]
    except psutil.Error:
        return [0]


@contextlib.contextmanager
def pinned_here(cores: Sequence[int] | None) -> Iterator[None]:
    """Run the block with every thread of this process on ``cores`` (None: as it is), then give
    each thread its former cores back. Threads started inside inherit the pinning."""
    if not cores:
        yield
        return
    before: dict[int, set[int]] = {}
    for tid in _threads():
        with contextlib.suppress(OSError):
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, set(cores))
    try:
        yield
    finally:
        for tid, mask in before.items():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(tid, mask)
        # threads started inside the block and still running get this process's former cores
        if before:
            widest = set().union(*before.values())
            for tid in set(_threads()) - set(before):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(tid, widest)
