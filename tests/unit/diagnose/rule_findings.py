"""What the rules' tests ask of a rule's findings, shared by the diagnosis test modules."""

from __future__ import annotations

from collections.abc import Callable

from glm5lib import diagnose as dg


def only_finding(rule: Callable[[dg.Evidence], list[dg.Finding]], ev: dg.Evidence) -> dg.Finding:
    """The one finding ``rule`` makes on ``ev``; the test fails where it makes none or several."""
    out = rule(ev)
    assert len(out) == 1, out
    return out[0]
