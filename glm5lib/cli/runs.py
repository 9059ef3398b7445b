"""``glm5 runs``: the run folders with their date, engine, headline figures and state."""

from __future__ import annotations

import json

from glm5lib.cli.options import add_command

__all__ = ["register_cli"]


def _cmd_runs(args) -> int:
    from glm5lib.report import fmt
    from glm5lib.report.runs import list_runs

    rows = list_runs(args.root)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("No run folders yet.")
        return 0
    peaks = sorted({k for r in rows for k in r if k.startswith("peak_")},
                   key=lambda k: (k != "peak_baseline", k != "peak_fix", k))
    head = ["run", "date (UTC)", "engine", *[f"{k[5:]} peak tok/s" for k in peaks], "gain", "state"]
    table = [[r["run"], r["date"], r["engine"] + (" (stand-in)" if r["standin"] and r["engine"] != "stand-in" else ""),
              *[fmt(r.get(k)) for k in peaks],
              "n/a" if r.get("gain") is None else f"{r['gain']:.2f}x", r["state"]] for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *table, strict=True)]
    for line in [head, *table]:
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    return 0


def register_cli(sub) -> None:
    p = add_command(sub, "runs", _cmd_runs, help="list the run folders: date, engine, headline figures, state")
    p.add_argument("--root", help="runs folder (default: data/runs/, or GLM5_RUNS_DIR)")
    p.add_argument("--json", action="store_true", help="print one JSON object per run")
