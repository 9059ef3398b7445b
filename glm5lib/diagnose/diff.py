"""Config diff: every server argument that differs from a reference, ranked by what it can do.

Only settings a user can change are ranked. Identity and plumbing (the model, paths, ports,
seeds, logging: ``is_context_field``) are context: listed after the ranked rows with
``kind="context"``, or only in ``frame.attrs["context"]`` when irrelevant fields are hidden.
Across releases, a field only one side's release has (renamed fields followed) ranks only where
that side set it away from its release's default ("new in SGLang 0.5.23, the reference cannot
have set it"); left at its default it is ``kind="release"`` ("not in SGLang 0.5.9"), listed
last, or only in ``frame.attrs["release_only"]`` when irrelevant fields are hidden. Likewise a
field whose default SGLang changed between the two sides' releases, where each side left it at
its own release's default, is ``kind="default"`` ("default changed: 0.5.9 'layer_first', 0.5.23
'page_first'"), listed before the release rows or only in ``frame.attrs["default_changed"]``;
set away from its default on either side, it stays ranked and the rationale names both defaults.

"None" means SGLang chooses the value at start. Before comparing, such a value is resolved from
that server's own start-up lines (``max_running_requests=..., max_total_num_tokens=...``) or,
failing that, from the release's rule (the running-request cap of 0.5.x is
``min(max(KV tokens / context length x 512, 2048), 4096)``, at most half the KV pool; vLLM's
``max_num_seqs`` and ``max_num_batched_tokens`` by the device's table in
:func:`glm5lib.engines.vllm.vllm_automatic`). An
explicit capacity setting far below the other side's (resolved) value is the signature of a cap
and ranks first in its class.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from glm5lib import engines
from glm5lib.diagnose.knowledge import IMPACT_ORDER, is_context_field, load_impact
from glm5lib.diagnose.references import (
    arg,
    config_defaults,
    flag_of,
    norm,
    release_of,
    resolve_config,
    shown_as,
)
from glm5lib.engines.sglang.config import bundled_catalogue, version_key
from glm5lib.masking import mask_value

__all__ = ["CAPACITY_LIMITS", "DIFF_COLUMNS", "diff_configs", "resolve_automatic"]

DIFF_COLUMNS = [
    "field",
    "current",
    "reference",
    "impact",
    "rank",
    "rationale",
    "flag",
    "automatic",
    "kind",
    "resolved",
    "cost",
]

# Limits that bound how much work runs at once; a field setting one far below the other side's is a cap.
CAPACITY_LIMITS = ("running_cap", "token_budget", "prefill_chunk", "kv_tokens", "graph_max_batch")
# Ranked settings first, then identity and plumbing, then fields whose default changed between the
# releases and fields of one release, each left at its release's default.
_KIND_ORDER = {"setting": 0, "context": 1, "default": 2, "release": 3}
# An explicit capacity setting at or below this share of the other side's value is a cap.
_CAP_SIGNATURE_RATIO = 0.25

def _positive(value: Any) -> float | None:
    v = norm(value)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        return None
    return v


def resolve_automatic(
    field: str,
    args: Mapping[str, Any],
    startup: Mapping[str, Any] | None = None,
    environment: Mapping[str, Any] | None = None,
) -> tuple[Any, str] | None:
    """The value the engine chose at start for a field left ``None``, and how it is known.

    From the server's start-up lines where they hold it, else from the release's rule where
    there is one (for SGLang's ``max_running_requests`` without the pool size: its lower bound,
    2,048; for vLLM's ``max_num_seqs`` and ``max_num_batched_tokens`` on an unknown device: the
    smallest value its table gives, the others named). ``environment``: the run's snapshot, for
    the GPU's memory vLLM's table depends on. None when neither says.
    """
    startup = startup or {}
    adapters = engines.adapters()
    for adapter in adapters:
        key = adapter.capabilities.resolved_facts.get(field)
        if key and _positive(startup.get(key)) is not None:
            v = int(_positive(startup.get(key)))
            return v, f"{v:,} resolved at start (its log's {key}= line)"
    resolvers = {id(a.automatic_resolver): a for a in adapters if a.automatic_resolver is not None}
    for adapter in resolvers.values():  # the stand-in shares SGLang's rule: asked once
        auto = adapter.automatic(field, args, startup, environment)
        if auto is not None:
            value = auto.value if auto.value is not None else (auto.candidates[0] if auto.candidates else None)
            return (value, auto.statement()) if value is not None else None
    return None


def _side(
    field: str, args: Mapping[str, Any], startup: Mapping[str, Any]
) -> tuple[Any, str | None, bool]:
    """(value to compare, how it was resolved, explicit) for one side of the diff."""
    value = arg(args, field)
    if value is not None:
        return value, None, True
    auto = resolve_automatic(field, args, startup)
    if auto is None:
        return None, None, False
    return auto[0], auto[1], False


def _is_set(spec: Any, value: Any) -> bool:
    """Whether ``value`` is a choice away from ``spec``'s default: a switch left off reads None or
    False, and a field SGLang resolves at start-up (0.5.23 on) logs its declared fallback."""
    default = norm(spec.default)
    if value == default:
        return False
    if spec.value_type == "bool" and not value and not default:
        return False
    return not (spec.resolvable and default is None and value == norm(spec.fallback))


def _default_changed(
    field: str, cur: Mapping[str, Any], ref: Mapping[str, Any], releases: Mapping[str, str]
) -> tuple[str, dict[str, bool]] | None:
    """For a field both sides' releases know (renamed fields followed) whose default differs
    between them: ("default changed: 0.5.9 X, 0.5.23 Y", side -> set away from its own release's
    default); None when the releases agree on the default or one lacks the field."""
    if releases["current"] == releases["reference"]:
        return None
    specs = {}
    for side, release in releases.items():
        cat = bundled_catalogue(release)
        name = cat.field_name(field)
        if name is None:
            return None
        specs[side] = cat.specs[name]
    defaults = {side: norm(spec.default) for side, spec in specs.items()}
    if defaults["current"] == defaults["reference"]:
        return None
    is_set = {
        side: _is_set(specs[side], arg(args, field))
        for side, args in (("current", cur), ("reference", ref))
    }
    order = sorted(releases, key=lambda side: version_key(releases[side]))
    reason = "default changed: " + ", ".join(
        f"SGLang {releases[side]} {defaults[side]!r}" for side in order
    )
    return reason, is_set


def _release_only(
    field: str, cur: Mapping[str, Any], ref: Mapping[str, Any], releases: Mapping[str, str]
) -> tuple[str, str, str, bool] | None:
    """For a field one side's release has and the other side's does not (renamed fields
    followed): (side that has it, its release, the other release, set away from its default);
    None when both releases know the field, or neither does. ``releases``: side -> release."""
    if releases["current"] == releases["reference"]:
        return None
    cats = {side: bundled_catalogue(rel) for side, rel in releases.items()}
    known = {side: cat.field_name(field) for side, cat in cats.items()}
    if (known["current"] is None) == (known["reference"] is None):
        return None
    side = "current" if known["current"] is not None else "reference"
    other = "reference" if side == "current" else "current"
    args = cur if side == "current" else ref
    spec = cats[side].specs[known[side]]
    return side, releases[side], releases[other], _is_set(spec, arg(args, field))


def diff_configs(
    current: Any,
    reference: Any,
    hide_irrelevant: bool = False,
    *,
    current_startup: Mapping[str, Any] | None = None,
    reference_startup: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Every server argument that differs between ``current`` and ``reference``, ranked by impact.

    Returns a DataFrame with columns :data:`DIFF_COLUMNS` (rank 1 = most able to move
    throughput). ``kind`` is ``"setting"`` for ranked rows and ``"context"`` for identity and
    plumbing (model, paths, ports, seeds, logging), which come after every setting with impact
    ``none``, then ``"default"`` rows (a field whose default changed between the two sides'
    releases, each side at its own release's default; impact ``none``), then ``"release"`` rows
    (a field of one side's release only, left at its default; impact ``none``); ``resolved`` says how a ``None`` (automatic) value was resolved, and ``automatic``
    is true where it could not be. ``hide_irrelevant`` drops context and fields that never
    matter for throughput from the frame; the context rows are always in
    ``frame.attrs["context"]``, the default rows in ``frame.attrs["default_changed"]`` and the
    release rows in ``frame.attrs["release_only"]`` (lists of row dicts). Secrets are shown as ``***``. Start-up facts (``*_startup``)
    resolve automatic values when a source is not a log that holds them itself.
    """
    cur = resolve_config(current)
    ref = resolve_config(reference)
    cur_side = (cur.args, {**cur.startup, **(current_startup or {})})
    ref_side = (ref.args, {**ref.startup, **(reference_startup or {})})
    impact = load_impact()
    # renamed fields and "CUDA graphs off" spelt per phase line up across releases
    fields = {shown_as(f, cur.args, ref.args) for f in set(cur.args) | set(ref.args)}
    releases = {"current": release_of(cur.args), "reference": release_of(ref.args)}
    rows = []
    for field in sorted(fields):
        row = _diff_row(field, cur_side, ref_side, impact.get(field, {}), releases)
        if row is not None:
            rows.append(row)
    return _ranked_frame(rows, hide_irrelevant, cur.label, ref.label)


def _diff_row(
    field: str,
    cur_side: tuple[Mapping[str, Any], Mapping[str, Any]],
    ref_side: tuple[Mapping[str, Any], Mapping[str, Any]],
    entry: Mapping[str, Any],
    releases: Mapping[str, str],
) -> dict[str, Any] | None:
    """One field's row of the diff (with its sort key, ``_order``), or None where both sides run
    the same value. ``*_side``: (server arguments, start-up facts); ``entry``: its impact-table row."""
    cur_args, ref_args = cur_side[0], ref_side[0]
    a, a_how, a_explicit = _side(field, *cur_side)
    b, b_how, b_explicit = _side(field, *ref_side)
    if a == b:
        return None
    context = is_context_field(field)
    resolved = "; ".join(
        f"{side}: None, {how}" for side, how in (("current", a_how), ("reference", b_how)) if how
    )
    # A field only one side's release has: a difference only where that side set it.
    only = _release_only(field, cur_args, ref_args, releases)
    changed = _default_changed(field, cur_args, ref_args, releases) if only is None else None
    kind, cls, rationale = _judged(entry, context, only, changed)
    # None where SGLang's default is None means "chosen at start": the values may not differ.
    auto_side = _automatic_side(field, a, b, only, kind)
    automatic = auto_side is not None
    if automatic:
        rationale += (
            f" ({auto_side}: None = chosen automatically at start, so the running values may agree;"
            " compare the resolved value in that server's log)"
        )
    signature = _cap_signature(field, a, b, a_explicit)
    if signature:
        rationale += (
            f" (an explicit {a:,} against {b:,}"
            + (" chosen automatically" if not b_explicit else "")
            + ": the signature of a cap)"
        )
    return {
        "field": field,
        "current": mask_value(field, a),
        "reference": mask_value(field, b),
        "impact": cls,
        "rationale": rationale,
        "flag": flag_of(field, releases["current"]),
        "automatic": automatic,
        "kind": kind,
        "resolved": resolved,
        # what adopting the other side's value is known to cost (the impact table's word)
        "cost": entry.get("cost", "") if not context else "",
        "_order": (
            _KIND_ORDER[kind],
            IMPACT_ORDER[cls],
            not signature,
            automatic,
            -float(entry.get("weight", 0)),
            field,
        ),
    }


def _judged(
    entry: Mapping[str, Any],
    context: bool,
    only: tuple[str, str, str, bool] | None,
    changed: tuple[str, dict[str, bool]] | None,
) -> tuple[str, str, str]:
    """(kind, impact class, rationale) of a differing field: the impact table's word, unless the
    field is context, of one side's release only (``only``) or its default changed (``changed``)."""
    cls = "none" if context else entry.get("impact", "unknown")
    rationale = entry.get("rationale", "not in the impact table: check SGLang's documentation")
    if context:
        rationale = f"context, not a setting to change: {rationale}"
    kind = "context" if context else "setting"
    if only is not None:
        return _judged_release_only(only, kind, cls, rationale)
    if changed is not None and not context:
        return _judged_default_changed(changed, kind, cls, rationale)
    return kind, cls, rationale


def _judged_release_only(
    only: tuple[str, str, str, bool], kind: str, cls: str, rationale: str
) -> tuple[str, str, str]:
    """(kind, impact class, rationale) of a field one side's release has: a ``release`` row left at
    its default, else ranked, saying which side's release could set it."""
    side, release, other, is_set = only
    if not is_set:
        return "release", "none", f"not in SGLang {other}: the {side} side has SGLang {release}'s default"
    return kind, cls, (
        f"new in SGLang {release}, the reference (SGLang {other}) cannot have set it: "
        if side == "current"
        else f"not in SGLang {other}, set by the reference (SGLang {release}): "
    ) + rationale


def _judged_default_changed(
    changed: tuple[str, dict[str, bool]], kind: str, cls: str, rationale: str
) -> tuple[str, str, str]:
    """(kind, impact class, rationale) of a setting whose default differs between the releases: a
    ``default`` row where neither side chose it and it does not matter, else ranked, saying why."""
    reason, is_set = changed
    if not any(is_set.values()) and cls in ("unknown", "none"):
        return "default", "none", f"{reason}; each side has its own release's default"
    if not any(is_set.values()):
        # neither side chose it, but the servers do run with different values of a
        # setting that matters: ranked, saying where the difference comes from
        return kind, cls, f"{reason}; each side has its own release's default, and it matters: {rationale}"
    who = " and ".join(side for side, s in is_set.items() if s)
    return kind, cls, f"{reason}; set by the {who} side: {rationale}"


def _automatic_side(
    field: str, a: Any, b: Any, only: tuple[str, str, str, bool] | None, kind: str
) -> str | None:
    """The first side whose value the engine chooses at start (None unresolved, where SGLang's
    default is None too), so that the running values may agree; None where neither is."""
    auto = [side for side, v in (("current", a), ("reference", b)) if v is None]
    if only is None and kind != "default" and bool(auto) and config_defaults().get(field, None) is None:
        return auto[0]
    return None


def _cap_signature(field: str, a: Any, b: Any, a_explicit: bool) -> bool:
    """Whether the current side sets a capacity limit explicitly far below the reference's value."""
    return (
        engines.limit_of(field) in CAPACITY_LIMITS
        and a_explicit
        and isinstance(a, (int, float))
        and isinstance(b, (int, float))
        and a <= _CAP_SIGNATURE_RATIO * b
    )


def _ranked_frame(rows: list[dict[str, Any]], hide_irrelevant: bool, cur_label: Any, ref_label: Any) -> pd.DataFrame:
    """The rows sorted and ranked as a frame of :data:`DIFF_COLUMNS`, the context, release and
    default rows kept in its ``attrs`` (and only there when ``hide_irrelevant``)."""
    rows.sort(key=lambda r: r["_order"])
    frame = pd.DataFrame(rows, columns=[*DIFF_COLUMNS, "_order"]).drop(columns="_order")
    frame["rank"] = range(1, len(frame) + 1)
    frame = frame[DIFF_COLUMNS].reset_index(drop=True)
    # Records, not a frame: pandas compares attrs when it combines frames.
    context_rows = frame[frame["kind"] == "context"].to_dict(orient="records")
    release_rows = frame[frame["kind"] == "release"].to_dict(orient="records")
    default_rows = frame[frame["kind"] == "default"].to_dict(orient="records")
    if hide_irrelevant:
        frame = frame[(frame["kind"] == "setting") & (frame["impact"] != "none")]
        frame = frame.reset_index(drop=True)
        frame["rank"] = range(1, len(frame) + 1)
    frame.attrs["context"] = context_rows
    frame.attrs["release_only"] = release_rows
    frame.attrs["default_changed"] = default_rows
    frame.attrs["current"] = cur_label
    frame.attrs["reference"] = ref_label
    return frame
