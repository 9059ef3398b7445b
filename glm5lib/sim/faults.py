"""Faults the stand-in can inject, each reproducing what the real server printed and did.

``--sim-fault SPEC`` (repeatable):

- ``nan-after=N``: after N requests have finished, the next decode step logs SGLang's NaN
  signature on every TP rank, the scheduler's traceback, the parent's sigquit line, and the
  process dies (killed, as SGLang's ``kill_process_tree`` does).
- ``nan-after-steps=N`` / ``nan-after-s=SECONDS``: the same crash after N decode steps, or
  SECONDS after the server became ready (at the next decode step): these fire in levels bound
  by a duration too, where requests are cancelled at the deadline and none may ever finish.
- ``oom-at-start``: start-up fails while allocating the KV pool with SGLang's "Not enough
  memory" error, then the same exit.
- ``nccl-at-start``: start-up fails while initialising the TP group with an NCCL error.
- ``slow-start=SECONDS``: loading takes SECONDS longer (the port opens only when ready).
- ``hang-after=N``: after N finished requests the server stops answering: no more steps, every
  HTTP request (``/health`` included) waits forever, the process stays alive.
- ``hang-after-steps=N`` / ``hang-after-s=SECONDS``: the same hang after N decode steps, or
  SECONDS after the server became ready (at the next decode step).

- ``reset-after=N``: once N requests have finished, every streaming connection open at that
  moment is reset (TCP RST, as a crashed proxy or a dropped NAT entry does); the server itself
  keeps running and answers new requests.
- ``health-delay=SECONDS``: while requests run, ``/health`` answers SECONDS late (as SGLang's does
  behind a long prefill step); the server streams normally all the while.

Whatever triggers are given, a fault fires at the first that is reached.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from glm5lib.errors import ConfigError

__all__ = ["FAULT_KINDS", "Faults", "parse_faults"]

FAULT_KINDS = {
    "nan-after": "N (requests finished before the NaN crash)",
    "oom-at-start": None,
    "nccl-at-start": None,
    "slow-start": "SECONDS (extra start-up time)",
    "hang-after": "N (requests finished before the server stops answering)",
    "nan-after-steps": "N (decode steps before the NaN crash)",
    "nan-after-s": "SECONDS (after ready, before the NaN crash)",
    "hang-after-steps": "N (decode steps before the server stops answering)",
    "hang-after-s": "SECONDS (after ready, before the server stops answering)",
    "reset-after": "N (requests finished before the open connections are reset)",
    "health-delay": "SECONDS (extra time /health takes while requests run)",
}


@dataclass
class Faults:
    """The parsed fault specs; all off by default."""

    nan_after: int | None = None
    oom_at_start: bool = False
    nccl_at_start: bool = False
    slow_start: float = 0.0
    hang_after: int | None = None
    nan_after_steps: int | None = None
    nan_after_s: float | None = None
    hang_after_steps: int | None = None
    hang_after_s: float | None = None
    reset_after: int | None = None
    health_delay: float = 0.0

    def nan_due(self, finished: int, steps: int, seconds: float) -> bool:
        """Whether the NaN crash is due after ``finished`` requests, ``steps`` decode steps and
        ``seconds`` since the server became ready."""
        return _due(finished, steps, seconds, self.nan_after, self.nan_after_steps, self.nan_after_s)

    def hang_due(self, finished: int, steps: int, seconds: float) -> bool:
        """Whether the hang is due (same counts as :meth:`nan_due`)."""
        return _due(finished, steps, seconds, self.hang_after, self.hang_after_steps, self.hang_after_s)

    def specs(self) -> list[str]:
        """The specs that give these faults (each kind on, its field away from its default)."""
        defaults = Faults()
        out = []
        for kind in _SPEC_ORDER:
            name = kind.replace("-", "_")
            value = getattr(self, name)
            if value == getattr(defaults, name):
                continue
            what = FAULT_KINDS[kind]
            if what is None:
                out.append(kind)
            else:
                out.append(f"{kind}={value:g}" if what.startswith("SECONDS") else f"{kind}={value}")
        return out


#: the order :meth:`Faults.specs` names the kinds in
_SPEC_ORDER = ("nan-after", "nan-after-steps", "nan-after-s", "oom-at-start", "nccl-at-start", "slow-start",
               "hang-after", "hang-after-steps", "hang-after-s", "reset-after", "health-delay")


def _due(finished: int, steps: int, seconds: float, after: int | None, after_steps: int | None,
         after_s: float | None) -> bool:
    return (
        (after is not None and finished >= after)
        or (after_steps is not None and steps >= after_steps)
        or (after_s is not None and seconds >= after_s)
    )


def _valid() -> list[str]:
    return [k if v is None else f"{k}={v.split()[0]}" for k, v in FAULT_KINDS.items()]


def parse_faults(specs: Iterable[str]) -> Faults:
    """Parse ``--sim-fault`` values; raises ConfigError naming the bad spec and the valid ones."""
    faults = Faults()
    for raw in specs:
        for spec in str(raw).split(","):
            spec = spec.strip()
            if not spec:
                continue
            kind, _, value = spec.partition("=")
            kind = kind.strip().lower().replace("_", "-")
            if kind not in FAULT_KINDS:
                close = difflib.get_close_matches(kind, list(FAULT_KINDS), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigError(
                    f"--sim-fault {spec!r}: unknown fault{hint}; valid: {', '.join(_valid())}",
                    field="sim_fault",
                    valid=_valid(),
                )
            needs_value = FAULT_KINDS[kind] is not None
            if needs_value and not value:
                raise ConfigError(
                    f"--sim-fault {spec!r}: {kind} needs a value, e.g. {kind}=5",
                    field="sim_fault",
                    valid=_valid(),
                )
            if not needs_value and value:
                raise ConfigError(
                    f"--sim-fault {spec!r}: {kind} takes no value", field="sim_fault", valid=_valid()
                )
            try:
                # each kind sets the field of its name (nan-after: nan_after)
                setattr(faults, kind.replace("-", "_"), _PARSERS[kind](value))
            except ValueError as exc:
                raise ConfigError(
                    f"--sim-fault {spec!r}: {value!r} is not a valid {FAULT_KINDS[kind]}",
                    field="sim_fault",
                    valid=_valid(),
                ) from exc
    return faults


def _not_below_zero(convert: Callable[[str], Any], finite: bool = False) -> Callable[[str], Any]:
    """A reader of a value not below zero (and, where ``finite``, neither NaN nor infinite)."""

    def read(value: str) -> Any:
        x = convert(value)
        if x < 0 or (finite and not math.isfinite(x)):
            raise ValueError(value)
        return x

    return read


def _switch_on(value: str) -> bool:
    return True


_COUNT = _not_below_zero(int)
_SECONDS = _not_below_zero(float, finite=True)


#: how each kind's value is read (ValueError: not a valid value of that kind)
_PARSERS: dict[str, Callable[[str], Any]] = {
    "nan-after": _COUNT,
    "oom-at-start": _switch_on,
    "nccl-at-start": _switch_on,
    "slow-start": _not_below_zero(float),
    "hang-after": _COUNT,
    "nan-after-steps": _COUNT,
    "nan-after-s": _SECONDS,
    "hang-after-steps": _COUNT,
    "hang-after-s": _SECONDS,
    "reset-after": _COUNT,
    "health-delay": _SECONDS,
}
