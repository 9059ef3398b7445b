"""Sections other modules add to the report, each from the run folder.

A provider is a function ``section_markdown(run_dir) -> str | None`` in its own module, returning
Markdown that opens with a ``## Title`` (tables as Markdown tables, figures as relative image
links to files in the run folder), or ``None`` when the run has nothing for it. A provider that
reads a phase's measurements takes them from the report's reading of the phases: it declares a
keyword parameter ``phases`` and is given the report's
:class:`~glm5lib.diagnose.evidence.EvidenceCache` (``phases.load(folder)``: the phase's
:class:`~glm5lib.diagnose.evidence.Evidence` as the report read it), so writing the report reads
each phase once. A module adds its provider with one line in :data:`PROVIDERS`
(``"package.module:function"``, imported when the report is written, so this module imports none
of them) or at run time with :func:`register`.
Its sections appear in the Markdown and the HTML report after the run's own story, before the
figures, in the order listed. A provider that fails costs only its own section: in its place the
report says which section is missing and why (and the log says so too), so a reader never takes
an absent section for an absent finding.
"""

from __future__ import annotations

import importlib
import inspect
import logging
from collections.abc import Callable
from pathlib import Path

from glm5lib.diagnose.evidence import EvidenceCache
from glm5lib.errors import ConfigError

__all__ = ["PROVIDERS", "Provider", "extra_sections", "register"]

log = logging.getLogger(__name__)

Provider = Callable[..., "str | None"]

#: Contributed sections, one line each: "package.module:function".
PROVIDERS: list[str | Provider] = [
    "glm5lib.report.quality:section_markdown",  # measurement quality per level
    "glm5lib.diagnose.prediction:section_markdown",  # the performance model's forecast beside the measurement
    "glm5lib.tune.report:section_markdown",  # the tuner's candidates, the winner and its figure
    "glm5lib.diagnose.section:section_markdown",  # each level's scheduler figures, the leading limit
]


def register(provider: str | Provider) -> None:
    """Add a section provider (a callable or ``"package.module:function"``) once."""
    if not callable(provider) and (not isinstance(provider, str) or ":" not in provider):
        raise ConfigError(
            f"section provider {provider!r} is neither a function nor 'package.module:function'",
            field="provider")
    if provider not in PROVIDERS:
        PROVIDERS.append(provider)


def _resolve(provider: str | Provider) -> Provider:
    if callable(provider):
        return provider
    module, _, name = provider.partition(":")
    return getattr(importlib.import_module(module), name)


def _takes_phases(provider: Provider) -> bool:
    try:
        return "phases" in inspect.signature(provider).parameters
    except (TypeError, ValueError):  # a callable whose signature cannot be read
        return False


def extra_sections(run_dir: str | Path, phases: EvidenceCache | None = None) -> list[str]:
    """The Markdown of every provider's section for ``run_dir`` (providers with nothing left out);
    ``phases``, the report's reading of the phases, is given to each provider that takes it."""
    out = []
    for provider in PROVIDERS:
        name = provider if isinstance(provider, str) else f"{provider.__module__}:{provider.__qualname__}"
        try:
            section = _resolve(provider)
            given = {"phases": phases} if phases is not None and _takes_phases(section) else {}
            text = section(Path(run_dir), **given)
        except Exception as exc:  # any failure of one section must not cost the whole report
            log.warning("report section %s not written: %s: %s", name, type(exc).__name__, exc)
            out.append(_missing(name, f"{type(exc).__name__}: {exc}"))
            continue
        if text is not None and not isinstance(text, str):
            log.warning("report section %s returned %s, not Markdown: left out", name, type(text).__name__)
            out.append(_missing(name, f"it returned {type(text).__name__}, not Markdown"))
            continue
        if text and text.strip():
            out.append(text)
    return out


def _missing(name: str, why: str) -> str:
    return (f"## A section not written\n\nThe section from `{name}` could not be written ({why}); "
            "the rest of the report stands, and its evidence is still in the run folder.\n")
