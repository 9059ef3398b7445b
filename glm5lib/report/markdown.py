"""``report.md``: the run's story as Markdown, drawn from :func:`glm5lib.report.summarize`'s dict.

The page is a list of sections (:data:`SECTIONS`), each a function of the summary and the
figures returning its Markdown lines (or none); sections other modules contribute from the run
folder (:mod:`glm5lib.report.sections`) come after the run's own story and before the figures.
Nothing here reads the run folder or decides anything: the numbers and conclusions are the
summary's. The HTML report (:mod:`glm5lib.report.html`) is rendered from this text, so both
tell the same story with the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from glm5lib import rundir
from glm5lib.report._files import fmt
from glm5lib.report.conclude import AFTER, BEFORE, verdict
from glm5lib.report.figures import TITLES
from glm5lib.report.quality import SHORT_WINDOW

__all__ = ["SECTIONS", "level_table", "markdown_table", "render_markdown", "setting"]

Lines = list[str]


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str, int]]) -> Lines:
    """A Markdown table of ``rows``; ``columns`` are (key, header, digits), digits < 0 for text.

    A column no row has is left out; numbers are right-aligned and written as :func:`fmt` does.
    """
    present = [(k, h, d) for k, h, d in columns if any(k in r for r in rows)]
    out = ["| " + " | ".join(h for _, h, _ in present) + " |",
           "| " + " | ".join("---:" if d >= 0 else "---" for _, _, d in present) + " |"]
    for r in rows:
        out.append("| " + " | ".join(fmt(r.get(k), max(d, 0)) for k, _, d in present) + " |")
    return out


#: The per-level table of a phase: (sweep column, header, digits).
LEVEL_COLUMNS = (
    ("concurrency", "concurrency", 0), ("completed", "completed", 0),
    ("cancelled", "cut at deadline", 0), ("failed", "failed", 0),
    ("output_throughput", "output tok/s", 0), ("median_ttft_ms", "median TTFT ms", 0),
    ("p99_ttft_ms", "p99 TTFT ms", 0), ("median_tpot_ms", "median TPOT ms", 1),
    ("median_e2e_latency_ms", "median E2E ms", 0),
)


def level_table(levels: Sequence[Mapping[str, Any]]) -> Lines:
    """The per-level table of one phase (requests, throughput, latency)."""
    return markdown_table(levels, LEVEL_COLUMNS)


def setting(phase: Mapping[str, Any]) -> str:
    """How a phase's server was configured, for the summary: its cap, or the engine command."""
    if phase.get("running_cap") is None and phase.get("command"):
        return "command: `" + " ".join(str(a) for a in phase["command"]) + "`"
    automatic = " (automatic)" if phase.get("cap_automatic") else ""
    return f"{phase.get('cap_name') or 'running cap'} = {fmt(phase.get('running_cap'))}{automatic}"


def _roles(summary: Mapping[str, Any]) -> tuple[str | None, str | None]:
    roles = summary.get("roles") or {}
    phases = summary.get("phases", {})
    before = roles.get("before", BEFORE if BEFORE in phases else None)
    after = roles.get("after", AFTER if AFTER in phases else None)
    return before, after


# -- the sections, in page order -----------------------------------------------------------------
def _banner(summary: Mapping[str, Any], figures: Mapping[str, str]) -> Lines:
    lines = [f"# Throughput investigation: run {summary.get('run_id', '')}", ""]
    standin = summary.get("standin", {})
    if standin.get("used"):
        names = sorted(set(standin.get("profiles", {}).values())) or ["unknown profile"]
        lines += [
            "> **These measurements come from glm5lib's stand-in server, not from SGLang on GPUs.** "
            f"Its timings and GPU telemetry come from a model (profile {', '.join(repr(n) for n in names)}) "
            "calibrated to the published figures of the investigation; they show the method, "
            "not your hardware. Run the workbook with `BACKEND='sglang'` (or an http URL) on a GPU "
            "host for real measurements.",
            "",
        ]
        return lines
    if not summary.get("throughput"):
        return [*lines, "Nothing measured in this run folder yet: no phase finished a level.", ""]
    return [*lines, "Measured on a real server (no stand-in banner in the server logs).", ""]


def _short_window(peak: Mapping[str, Any]) -> str:
    """The caveat on a peak read over a short part of its level (the rest admitted the load), '' otherwise."""
    window, whole = peak.get("window_s"), peak.get("level_s")
    if not window or not whole:
        return ""
    parts = []
    if window < SHORT_WINDOW * whole:
        done = peak.get("completed")
        parts.append(f"read over {window:.1f} s of its {whole:.1f} s level, the first "
                     f"{peak.get('ramp_s', whole - window):.1f} s admitting the load"
                     + ("; no request finished in it" if done == 0 else ""))
    if peak.get("sub_cycle"):
        parts.append("its window held less than one cycle of the load (the decode of the requests streaming at "
                     "its start, not the prefill of the ones after them), so it reads above the rate the loop sustains")
    return "".join(f"; {p}" for p in parts) + ("; a longer level would read the steady rate more surely" if parts
                                                  else "")


def _summary(summary: Mapping[str, Any], figures: Mapping[str, str]) -> Lines:
    phases = summary.get("phases", {})
    before, after = _roles(summary)
    lines = ["## Summary", ""]
    base, fix = phases.get(before) if before else None, phases.get(after) if after else None
    if base and base.get("peak"):
        level = summary.get("story_level")
        value = (summary.get("throughput", {}).get(before) or {}).get(str(level)) if level else None
        extra = (f"; already {fmt(value)} tok/s at {fmt(level)} concurrent requests"
                 if value is not None and base["peak"]["concurrency"] != level else "")
        lines.append(
            f"- **{before.capitalize()}**: peak {fmt(base['peak']['output_throughput'])} tok/s at "
            f"{fmt(base['peak']['concurrency'])} concurrent requests{extra} ({setting(base)})"
            f"{_short_window(base['peak'])}."
        )
    cause = summary.get("leading_cause")
    if cause:
        lines.append(
            f"- **Leading cause**: `{cause.get('field')}` ({before or 'baseline'} {fmt(cause.get('current'))}, "
            f"reference {fmt(cause.get('reference'))})"
            + (f": {cause['rationale']}" if cause.get("rationale") else "") + "."
        )
    if fix and fix.get("peak"):
        lines.append(
            f"- **{after.capitalize()}**: peak {fmt(fix['peak']['output_throughput'])} tok/s at "
            f"{fmt(fix['peak']['concurrency'])} concurrent requests ({setting(fix)}){_short_window(fix['peak'])}."
        )
    comparison = summary.get("comparison") or []
    best = max((r for r in comparison if r.get("gain")), key=lambda r: r["gain"], default=None)
    if best:
        lines.append(f"- **Gain**: up to {best['gain']:.2f}x at {fmt(best['concurrency'])} concurrent requests.")
    nb = summary.get("next_bottleneck")
    if nb and nb.get("findings"):
        lines.append(f"- **Next**: {nb['findings'][0].get('finding')} ({nb['phase']} phase).")
    for n in summary.get("notebooks", []):
        if n.get("status") == "failed":
            lines.append(f"- **Incomplete run**: {n.get('name')} failed: {n.get('error', '')}")
    if lines[-1] == "":
        lines.append("- Nothing measured yet in this run folder.")
    return [*lines, ""]


def _environment(summary: Mapping[str, Any], figures: Mapping[str, str]) -> Lines:
    env = summary.get("environment")
    if not env:
        return []
    lines = ["## Environment", "",
             f"{fmt(env.get('gpu_count'))} GPU(s): {', '.join(env.get('gpu_names') or ['n/a'])}; "
             f"power limit {fmt(env.get('power_limit_w'))} W; driver {fmt(env.get('driver_version'))}; "
             f"source: {fmt(env.get('source'))}."]
    lines += [f"- Warning: {w}" for w in env.get("warnings") or []]
    return [*lines, ""]


def _decode_line(data: Mapping[str, Any]) -> Lines:
    dec = data.get("decode") or {}
    gauges = data.get("gauges") or {}
    cap = data.get("running_cap")
    lines: Lines = []
    # the gauges, sampled about once a second, see what a log of a line every N steps can miss: the
    # summary says whether they did (the evidence's precedence); a summary written before it said
    # so is read by its peaks
    denser = bool(gauges) and bool(gauges.get(
        "log_missed_peak", (gauges.get("max_running_req") or 0) > (dec.get("max_running_req") or 0)))
    if dec.get("decode_lines"):
        text = (f"Server log: {dec['decode_lines']:,} decode lines; running requests peaked at "
                f"{fmt(dec.get('max_running_req'))}, queued at {fmt(dec.get('max_queue_req'))} "
                f"(mean {fmt(dec.get('mean_queue_req'), 1)})")
        share = dec.get("pinned_at_cap_share")
        if share:
            text += f"; running pinned at the cap of {fmt(cap)} with a queue on {share:.0%} of decode lines"
        elif cap and (dec.get("max_running_req") or 0) < cap and not denser:
            text += f"; the cap of {fmt(cap)} running requests was never reached"
        elif cap and not denser:
            text += f"; running reached the cap of {fmt(cap)}, never with a queue"
        lines += [text + ".", ""]
    if denser or (gauges and not dec.get("decode_lines")):
        text = (f"Server gauges (/metrics, {fmt(gauges.get('samples'))} scrapes in the levels): running "
                f"requests peaked at {fmt(gauges.get('max_running_req'))}, queued at "
                f"{fmt(gauges.get('max_queue_req'))}")
        if cap:
            text += (f"; running reached the cap of {fmt(cap)}" if gauges.get("reached_cap")
                     else f"; the cap of {fmt(cap)} running requests was never reached")
        if dec.get("decode_lines"):
            text += " (the log's decode lines, written every few steps, missed the peak)"
        lines += [text + ".", ""]
    return lines


def _phase(phase: str, data: Mapping[str, Any]) -> Lines:
    lines = [f"## Phase `{phase}`", ""]
    if data.get("standin"):
        lines.append(f"Server: glm5lib stand-in, profile `{data['standin']}`.")
    if data.get("config"):
        lines.append("Configuration: " + ", ".join(f"`{k}={v!r}`" for k, v in data["config"].items()) + ".")
    lines.append("")
    if data.get("levels"):
        lines += [*level_table(data["levels"]), ""]
        if data.get("cut_at_deadline"):
            lines += [
                f"Requests cut at deadline: {data['cut_at_deadline']:,} (still streaming when their "
                "level's time was up). Their TTFT counts, and their TPOT up to the last token "
                "received; end-to-end latency needs a finished request.", ""]
    buckets = [(lv["concurrency"], lv.get("median_ttft_ms_bucket"), lv.get("median_e2e_latency_ms_bucket"))
               for lv in data.get("levels") or [] if lv.get("median_ttft_ms_bucket")]
    if buckets:
        lines += ["Latencies here are read off the server's /metrics histograms: a quantile is known only to the "
                  "bucket it falls in, and the figure above is interpolated inside it (median TTFT, E2E ms: "
                  + "; ".join(f"{fmt(c)} concurrent: {t}, {e or 'n/a'}" for c, t, e in buckets) + ").", ""]
    note = (data.get("metrics") or {}).get("note")
    if note:
        lines += [f"Note: {note}.", ""]
    lines += _decode_line(data)
    if data.get("power"):
        lines += [*markdown_table(data["power"], [
            ("concurrency", "concurrency", 0), ("mean_power_w", "mean W/GPU", 0),
            ("peak_power_w", "peak W/GPU", 0), ("power_limit_w", "limit W", 0),
            ("mean_gpu_util", "GPU util %", 0), ("joules_per_token", "J/token", 2),
        ]), ""]
    if data.get("patch"):
        p = data["patch"]
        verb = {"modelled": "modelled by the stand-in (not applied)", "reverted": "applied, then reverted",
                "applied": "applied (not yet reverted)"}.get(p.get("status"), p.get("status"))
        lines += [f"Source patch `{p.get('name')}` to {p.get('package')} "
                  f"{p.get('package_version') or ''}: {verb}; files: {', '.join(p.get('files', []))}.", ""]
    if data.get("errors"):
        lines += ["Server errors: " + ", ".join(f"{k} x{v}" for k, v in data["errors"].items()) + ".", ""]
    return lines


def _phases(summary: Mapping[str, Any], figures: Mapping[str, str]) -> Lines:
    return [line for phase, data in summary.get("phases", {}).items() for line in _phase(phase, data)]


def _diagnosis(summary: Mapping[str, Any], figures: Mapping[str, str]) -> Lines:
    cause = summary.get("leading_cause")
    if not cause:
        return []
    lines = ["## Diagnosis", "", f"Leading hypothesis: `{cause.get('field')}`."]
    lines += [f"- {key.capitalize()}: {cause[key]}" for key in ("evidence", "test") if cause.get(key)]
    return [*lines, ""]


def _prediction_lines(summary: Mapping[str, Any], changes: Mapping[str, Any]) -> Lines:
    prediction = summary.get("prediction")
    if not prediction:
        return []
    before, after = _roles(summary)
    c = prediction["concurrency"]
    band = f"{prediction['low']:,.0f}-{prediction['high']:,.0f}"
    if prediction.get("source") == "forecast":
        who = f"the forecast written before the {after}'s launch (the {before}'s performance model)"
    else:
        who = f"the {before}'s capacity model ({prediction.get('rule')})"
    given = prediction.get("given", True)
    if given:
        line = (f"Predicted beside measured: {who} gave {prediction['predicted']:,.0f} tok/s ({band}) at {c:,} "
                "concurrent requests")
    else:
        why = ("wider than +/-30%" if prediction.get("wide", True)
               else "but the model did not stand behind it (a change it has no term for, or a client starved of CPU)")
        line = (f"Predicted beside measured: {who} gave no forecast at {c:,} concurrent requests: the evidence "
                f"allowed {band} tok/s, {why}")
    measured = prediction.get("after")
    if measured is None:
        line += f"; the {after} phase did not measure {c:,} concurrent requests."
    elif not given:
        line += f"; the {after} measured {measured:,.0f} tok/s there."
    else:
        where = "within" if prediction.get("within") else ("above" if measured > prediction["high"] else "below")
        line += f"; the {after} measured {measured:,.0f} tok/s there, {where} the predicted band."
        if not prediction.get("within"):
            line += _unseen_sentence(prediction, changes, after)
            peak = (summary.get("phases", {}).get(after) or {}).get("peak") or {}
            if peak.get("concurrency") == c and peak.get("sub_cycle"):
                line += (" That level's window held less than one cycle of its load (decode without the prefill "
                         "that follows it), so its figure reads above the steady rate the forecast is of.")
            elif peak.get("concurrency") == c and _short_window(peak):
                line += (f" That level was read over {peak['window_s']:.1f} s of its {peak['level_s']:.1f} s, so its "
                         "figure is not surely the steady rate the forecast is of.")
    return [line, ""]


def _unseen_sentence(prediction: Mapping[str, Any], changes: Mapping[str, Any], after: str) -> str:
    """Where a forecast missed: the changes of *after* it was not made for, and those it was made for
    but has no term for (none: the miss is the model's own)."""
    if prediction.get("source") == "forecast":
        asked = set(prediction.get("changes") or changes)
        outside = [k for k in changes if k not in asked]
        unseen = list(prediction.get("unseen") or [])
    elif len(changes) > 1:  # the rule's forecast is of its remedy alone
        return (f" The {after} changed more than the remedy (" + ", ".join(f"`{k}`" for k in changes)
                + "), which the model does not see.")
    else:
        return ""
    parts = []
    if outside:
        parts.append(f"The {after} changed more than the forecast was made for ("
                     + ", ".join(f"`{k}`" for k in outside) + ").")
    if unseen:
        parts.append("The forecast has no term for " + ", ".join(f"`{k}`" for k in unseen) + ".")
    return "".join(" " + p for p in parts)


def _before_after(summary: Mapping[str, Any], figures: Mapping[str, str]) -> Lines:
    comparison = summary.get("comparison") or []
    if not comparison:
        return []
    before, after = _roles(summary)
    lines = ["## Before and after", "", verdict(summary), ""]
    changes = summary.get("fix_changes") or {}
    if changes:
        lines += ["Server arguments that differ, as each server resolved them: "
                  + ", ".join(f"`{k}` {v[0]!r} -> {v[1]!r}" for k, v in changes.items()) + ".", ""]
    lines += markdown_table(comparison, [("concurrency", "concurrency", 0), ("before", f"{before} tok/s", 0),
                                         ("after", f"{after} tok/s", 0), ("gain", "gain x", 2)])
    return [*lines, "", *_prediction_lines(summary, changes)]


def _next_bottleneck(summary: Mapping[str, Any], figures: Mapping[str, str]) -> Lines:
    nb = summary.get("next_bottleneck")
    if not nb or not nb.get("findings"):
        return []
    lines = ["## Next bottleneck", "", f"What the {nb['phase']} phase's own levels show once its change is in:", ""]
    for f in nb["findings"]:
        lines.append(f"- **{f.get('finding')}** ({f.get('confidence', 'n/a')}): {f.get('evidence', '')}"
                     + (f" Suggestion: {f['suggestion']}" if f.get("suggestion") else ""))
    return [*lines, ""]


def _figures(summary: Mapping[str, Any], figures: Mapping[str, str]) -> Lines:
    if not figures:
        return []
    lines = ["## Figures", ""]
    for name, rel in figures.items():
        lines += [f"![{TITLES.get(name, name)}]({rel})", ""]
    return lines


def _footer(summary: Mapping[str, Any], figures: Mapping[str, str]) -> Lines:
    return ["---", f"Numbers: `{rundir.SUMMARY}`. Generated {summary.get('generated_at', '')}.", ""]


Section = Callable[[Mapping[str, Any], Mapping[str, str]], Lines]

#: The run's own sections, in page order; contributed sections go in before the figures.
SECTIONS: list[Section] = [_banner, _summary, _environment, _phases, _diagnosis, _before_after, _next_bottleneck]
_CLOSING: list[Section] = [_figures, _footer]


def render_markdown(summary: Mapping[str, Any], figures: Mapping[str, str] | None = None,
                    extra: Sequence[str] = ()) -> str:
    """``report.md``'s text from a :func:`summarize` dict, the figures' relative paths and the
    Markdown of contributed sections (:func:`glm5lib.report.sections.extra_sections`)."""
    figures = dict(figures or {})
    lines: Lines = []
    for section in SECTIONS:
        lines += section(summary, figures)
    for text in extra:
        lines += [text.strip("\n"), ""]
    for section in _CLOSING:
        lines += section(summary, figures)
    return "\n".join(lines)
