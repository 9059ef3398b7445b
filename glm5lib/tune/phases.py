"""The candidates' evidence, each phase read once per measurement.

The tuner reads a candidate's level row, scheduler figures, start-up facts and goodput, and the
performance model fits on every candidate measured so far: all of them read the phase's
:class:`~glm5lib.diagnose.evidence.Evidence` (:func:`~glm5lib.diagnose.evidence.load_evidence`)
through one :class:`EvidenceCache` (the evidence's own, which the report shares too), so a phase is
read from disk once, and again only after it was measured anew.
"""

from __future__ import annotations

from glm5lib.diagnose.evidence import EvidenceCache

__all__ = ["EvidenceCache"]
