"""Two runs side by side: what changed between yesterday's run and today's, this release and the next.

:func:`compare_runs` reads both run folders as the report does (:mod:`glm5lib.report.conclude`)
and sets, for every phase the two share (or the one asked for), each concurrency level's output
throughput, TTFT and TPOT percentiles, end-to-end latency, GPU power and finished requests beside
each other with their ratio (second run over first); the resolved server arguments that differ;
the findings present in one run and not the other. :meth:`RunComparison.figure` draws the
throughput of both; :meth:`RunComparison.to_markdown` writes it all as Markdown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from glm5lib import engines, plots, rundir
from glm5lib.diagnose.knowledge import is_context_field
from glm5lib.errors import ConfigError
from glm5lib.report._files import clean, fmt, read_csv
from glm5lib.report.conclude import frames_and_summary
from glm5lib.report.hypothesis import RULED_OUT

__all__ = ["METRICS", "RunComparison", "compare_runs"]

#: Per-level figures compared: (key in a level row, header, digits).
METRICS = (
    ("output_throughput", "output tok/s", 0),
    ("median_ttft_ms", "median TTFT ms", 0),
    ("p99_ttft_ms", "p99 TTFT ms", 0),
    ("median_tpot_ms", "median TPOT ms", 1),
    ("p99_tpot_ms", "p99 TPOT ms", 1),
    ("median_e2e_latency_ms", "median E2E ms", 0),
    ("mean_power_w", "mean W/GPU", 0),
    ("completed", "finished", 0),
)


@dataclasses.dataclass
class RunComparison:
    """Two runs compared (``a`` first, ``b`` second; ratios are ``b / a``)."""

    a: str
    b: str
    phases: list[str]
    #: one row per (phase, concurrency): ``<metric>_a``, ``<metric>_b``, ``<metric>_ratio``
    rows: list[dict[str, Any]]
    #: per phase, the resolved server arguments that differ: ``{"field", "a", "b", "context"}``
    arguments: dict[str, list[dict[str, Any]]]
    #: per phase, findings of one run that the other lacks: ``{"only_a": [...], "only_b": [...]}``
    findings: dict[str, dict[str, list[str]]]
    sweeps: dict[str, pd.DataFrame] = dataclasses.field(default_factory=dict, repr=False)

    def frame(self) -> pd.DataFrame:
        """The per-level rows as a table."""
        return pd.DataFrame(self.rows)

    def figure(self):
        """Output throughput vs concurrency of both runs' compared phases on one axes."""
        if not self.sweeps:
            raise ConfigError(f"neither {self.a} nor {self.b} has a sweep of the compared phases",
                              field="phases", valid=self.phases)
        return plots.throughput_vs_concurrency(self.sweeps, title=f"{self.b} compared with {self.a}", legend=True)

    def _repr_markdown_(self) -> str:  # a notebook shows the comparison as its Markdown
        return self.to_markdown()

    def to_markdown(self) -> str:
        """The comparison as Markdown: a table per phase, the differing arguments and findings."""
        lines = [f"# {self.b} compared with {self.a}", "",
                 f"Ratios are {self.b} / {self.a}.", ""]
        for phase in self.phases:
            rows = [r for r in self.rows if r["phase"] == phase]
            lines += [f"## Phase `{phase}`", ""]
            if rows:
                lines += _table(rows, self.a, self.b)
            else:
                lines.append("No concurrency level measured in both runs.")
            lines.append("")
            args = [d for d in self.arguments.get(phase) or [] if not d.get("context")]
            context = [d["field"] for d in self.arguments.get(phase) or [] if d.get("context")]
            if args:
                lines += ["Server arguments that differ, as each server resolved them:", ""]
                lines += [f"- `{d['field']}`: {d['a']!r} -> {d['b']!r}" for d in args]
            else:
                lines.append("The resolved server arguments (settings) are the same.")
            if context:
                lines += ["", "Context that differs (identity and plumbing, not settings): "
                          + ", ".join(f"`{f}`" for f in context) + "."]
            lines.append("")
            found = self.findings.get(phase) or {}
            for key, run in (("only_a", self.a), ("only_b", self.b)):
                for text in found.get(key) or []:
                    lines.append(f"- Finding only in {run}: {text}")
            if any(found.values()):
                lines.append("")
        return "\n".join(lines)


def _table(rows: list[dict], a: str, b: str) -> list[str]:
    """One row per level and metric (A, B, B/A): narrow enough for a terminal and a phone."""
    out = [f"| concurrency | metric | {a} | {b} | ratio |", "| ---: | --- | ---: | ---: | ---: |"]
    for r in rows:
        for key, header, digits in METRICS:
            va, vb, ratio = r.get(f"{key}_a"), r.get(f"{key}_b"), r.get(f"{key}_ratio")
            if va is None and vb is None:
                continue
            out.append(f"| {fmt(r['concurrency'])} | {header} | {fmt(va, digits)} | {fmt(vb, digits)} | "
                       + ("n/a" if ratio is None else f"{ratio:.2f}x") + " |")
    return out


def _levels(phase: Mapping[str, Any]) -> dict[int, dict]:
    levels = {int(r["concurrency"]): dict(r) for r in phase.get("levels") or [] if r.get("concurrency") is not None}
    for p in phase.get("power") or []:
        if p.get("concurrency") is not None and int(p["concurrency"]) in levels:
            levels[int(p["concurrency"])]["mean_power_w"] = p.get("mean_power_w")
    return levels


def _ratio(a: Any, b: Any) -> float | None:
    if a is None or b is None or not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or a == 0:
        return None
    return b / a


def _differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Arguments whose values differ; ``context`` marks identity and plumbing (model, ports...)."""
    out = []
    for field in sorted(set(a) | set(b)):
        va, vb = a.get(field), b.get(field)
        if str(va) != str(vb):
            out.append({"field": field, "a": va, "b": vb, "context": is_context_field(field)})
    return clean(out)


def _finding_keys(run: Path, phase: str) -> dict[str, str]:
    """A phase's findings by what they are about (rule and covered fields), with their text."""
    frame = read_csv(run / phase / rundir.FINDINGS)
    if frame is None or frame.empty or "finding" not in frame.columns:
        return {}
    out = {}
    for _, f in frame.iterrows():
        covers = f.get("covers") if "covers" in frame.columns and pd.notna(f.get("covers")) else ""
        # the differences ruled out are one finding whichever fields it names (older folders name none)
        about = "" if f.get("rule") == RULED_OUT else " ".join(
            engines.topic(c) for c in str(covers).split()) or (
            str(f["finding"]) if f.get("rule") == "reference_diff" else "")
        out[f"{f.get('rule')}|{about}"] = str(f["finding"])
    return out


def compare_runs(run_a: str | Path, run_b: str | Path, *, phase: str | None = None) -> RunComparison:
    """Compare two run folders, per phase and concurrency level (ratios are ``b / a``).

    ``phase`` limits it to one phase both runs have; by default every phase they share.
    """
    folders = [Path(run_a), Path(run_b)]
    for folder in folders:
        if not folder.is_dir():
            raise ConfigError(f"run folder {folder} does not exist", field="run_dir")
    (sa, fa), (sb, fb) = (frames_and_summary(f) for f in folders)
    shared = [p for p in sa["phases"] if p in sb["phases"]]
    if phase is not None:
        if phase not in shared:
            raise ConfigError(f"phase {phase!r} is not in both runs; phases in both: {shared or 'none'}",
                              field="phase", valid=shared)
        shared = [phase]
    if not shared:
        raise ConfigError(f"{folders[0]} ({list(sa['phases']) or 'no phases'}) and {folders[1]} "
                          f"({list(sb['phases']) or 'no phases'}) have no phase in common",
                          field="phase")
    a_name, b_name = folders[0].name, folders[1].name
    if a_name == b_name:
        a_name, b_name = str(folders[0]), str(folders[1])
    rows, arguments, findings, sweeps = [], {}, {}, {}
    for p in shared:
        la, lb = _levels(sa["phases"][p]), _levels(sb["phases"][p])
        for c in sorted(set(la) & set(lb)):
            row: dict[str, Any] = {"phase": p, "concurrency": c}
            for key, _, _ in METRICS:
                va, vb = la[c].get(key), lb[c].get(key)
                row[f"{key}_a"], row[f"{key}_b"], row[f"{key}_ratio"] = va, vb, _ratio(va, vb)
            rows.append(row)
        arguments[p] = _differing(fa[p].get("arguments") or {}, fb[p].get("arguments") or {})
        ka, kb = _finding_keys(folders[0], p), _finding_keys(folders[1], p)
        findings[p] = {"only_a": [ka[k] for k in ka if k not in kb], "only_b": [kb[k] for k in kb if k not in ka]}
        for name, frames in ((a_name, fa), (b_name, fb)):
            sweep = frames[p].get("sweep")
            if sweep is not None and "output_throughput" in sweep.columns:
                sweeps[f"{name} {p}" if len(shared) > 1 else name] = sweep
    return RunComparison(a=a_name, b=b_name, phases=shared, rows=clean(rows), arguments=arguments,
                         findings=findings, sweeps=sweeps)
