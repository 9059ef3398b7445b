"""The candidates' evidence, each phase read once per measurement.

The tuner reads a candidate's level row, scheduler figures, start-up facts and goodput, and the
performance model fits on every candidate measured so far: all of them read the phase's
:class:`~glm5lib.diagnose.evidence.Evidence` (:func:`~glm5lib.diagnose.evidence.load_evidence`)
through one :class:`EvidenceCache`, so a phase is read from disk once, and again only after it was
measured anew.
"""

from __future__ import annotations

from pathlib import Path

from glm5lib import rundir
from glm5lib.diagnose.evidence import BEFORE_PHASE, Evidence, load_evidence

__all__ = ["EvidenceCache"]


def _stamp(folder: Path) -> tuple:
    """What load_evidence of ``folder`` would read, as (file, modification time, size): the phase's
    files, the run's environment snapshot and the baseline's sweep."""
    files = sorted(folder.iterdir()) if folder.is_dir() else []
    files += [folder.parent / rundir.ENVIRONMENT, folder.parent / BEFORE_PHASE / rundir.SWEEP]
    out = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        out.append((f.name, st.st_mtime_ns, st.st_size))
    return tuple(out)


class EvidenceCache:
    """:func:`load_evidence` once per phase folder: a phase read again gives the same
    :class:`Evidence` until a file of it changes (a candidate measured again). For readers that do
    not change what they read (the tuner and the performance model); the rules add to ``skipped``,
    so a diagnosis loads its own."""

    def __init__(self, partial: bool = False) -> None:
        self._held: dict[Path, tuple[tuple, Evidence]] = {}
        self.partial = partial  # passed to load_evidence: unreadable tables left out, not raised
        self.loads = 0  # how many times a phase was read from disk

    def load(self, folder: str | Path) -> Evidence:
        """The evidence of one phase folder (raises as :func:`load_evidence` does)."""
        folder = Path(folder)
        key, stamp = folder.resolve(), _stamp(folder)
        hit = self._held.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        ev = load_evidence(folder.parent, phase=folder.name, partial=self.partial)
        self.loads += 1
        self._held[key] = (stamp, ev)
        return ev
