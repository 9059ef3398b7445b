"""Does a level's steady window read the rate a closed loop sustains, wherever its deadline falls?

    python benchmarks/bench_window.py                       # the stand-in and real vLLM on CPU
    python benchmarks/bench_window.py --engine sim --durations 8,9,10,11,12

A closed loop of like requests moves in cycles: the requests streaming at a window's start finish
together, their successors wait for their prefill, then stream in turn. A window from one point of
that cycle to another counts the decode of every cycle but not every prefill, so its rate depends on
where the level's deadline fell. The sweep's window ends where the count of requests streaming
climbs back to its level at the start (``glm5lib.loadgen.metrics``), so it spans whole cycles. This
runs one level at one concurrency several times on one server, each with another duration (the
deadline falls at another point of the cycle), and reads every level three ways from its own
``requests.jsonl``: the window as the sweep now ends it, the window ended where it ended before
(at the deadline or the last issue), and Little's law over the level's finished requests (clients x
mean output tokens / mean end-to-end latency: no window at all). Printed: each level's three figures,
and for each way the spread over the durations (largest over smallest, less one).

Engines: the stand-in (``--engine sim``: SGLang's API and log, the seed's GLM-5 profile at cap 64 with
graphs on, 512-token prompts and 64-token outputs: cycles of a few seconds) and real vLLM on CPU
(``--engine vllm``, needs ``make vllm``: the capped preset, 256-token prompts, 32-token outputs). Random
lengths (``--range-ratio 0.5``) are the production-shaped case: there the loop does not cycle in step
and the two windows should agree.

One run on the 2-core test machine (levels of 8-12 s, each after a warm-up level):

- the stand-in, like requests: window 685-689 tok/s (spread 0.5%, window / Little 1.000); as before
  709-759 (spread 7.0%, 1.065);
- the stand-in, lengths in [0.5, 1] x: window 676-690 (2.1%), as before 673-695 (3.2%): no cycle in step,
  the same figures;
- real vLLM 0.32 on CPU, like requests (a cap of 4 under 8 clients; its cycles are not in step):
  2,111-2,485 (17.7%), as before 2,111-2,487 (17.9%), Little 2,077-2,466 (18.8%): the same figures; the
  spread is the host's (``bench_vllm_repeat.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from glm5lib.engines import sim  # noqa: E402
from glm5lib.engines import vllm as ev  # noqa: E402
from glm5lib.loadgen import (  # noqa: E402
    RequestRecord,
    level_stats,
    load_sweep,
    metrics,
    run_sweep,
)

ENGINES: dict[str, dict[str, Any]] = {
    "sim": {"concurrency": 64, "input_len": 512, "output_len": 64, "api": "generate"},
    "vllm": {"concurrency": 8, "input_len": 256, "output_len": 32, "api": "completions"},
}


@contextlib.contextmanager
def _server(engine: str, log: Path) -> Iterator[Any]:
    if engine == "sim":
        with sim.run_standin("--max-running-requests", "64", log_path=log) as srv:
            yield srv
    else:
        with ev.launch_vllm("vllm-capped", log_path=log, ready_timeout=600.0) as srv:
            yield srv


def _records(folder: Path) -> dict[str, list[RequestRecord]]:
    by: dict[str, list[RequestRecord]] = defaultdict(list)
    with (folder / "requests.jsonl").open() as lines:
        for line in lines:
            if not json.loads(line).get("warmup"):
                rec = RequestRecord.from_json(line)
                by[rec.level_id].append(rec)
    return by


def _read(recs: list[RequestRecord], concurrency: int, output_len: int) -> tuple[float, float, float, str]:
    """(window as now, window as before, Little's law, the window's note) of one level."""
    cancelled = [r.end for r in recs if r.status == "cancelled" and r.end]
    kw = {"concurrency": concurrency, "last_issue": max(r.start for r in recs),
          "deadline": min(cancelled) if cancelled else None}
    now = level_stats(recs, **kw)
    with mock.patch.object(metrics, "_phase_end", lambda *a: (None, 0)):
        before = level_stats(recs, **kw)
    ok = [r for r in recs if r.status == "ok"]
    little = (concurrency * float(np.mean([r.output_tokens or output_len for r in ok]))
              / float(np.mean([r.end - r.start for r in ok]))) if ok else float("nan")
    return now["output_throughput"], before["output_throughput"], little, now["window_note"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engine", choices=["sim", "vllm", "both"], default="both")
    ap.add_argument("--durations", default="8,9,10,11,12", help="seconds, one level each (default 8-12)")
    ap.add_argument("--range-ratio", type=float, default=1.0, help="lengths in [len x RATIO, len] (default 1: like)")
    args = ap.parse_args(argv)
    durations = [float(d) for d in args.durations.split(",") if d]
    for engine in (["sim", "vllm"] if args.engine == "both" else [args.engine]):
        shape = ENGINES[engine]
        with tempfile.TemporaryDirectory(prefix="bench-window-") as tmp, _server(engine, Path(tmp) / "server.log") as srv:
            rows = []
            for k, d in enumerate([durations[0], *durations]):  # the first, a warm-up level, is not read
                folder = Path(tmp) / f"d{k}"
                run_sweep(srv.base_url, [shape["concurrency"]], run_dir=folder, duration=d, steady_extend=0,
                          input_len=shape["input_len"], output_len=shape["output_len"], api=shape["api"],
                          range_ratio=args.range_ratio, warmup=2, progress=False, seed=k,
                          model=getattr(srv, "model", None))
                if k == 0:
                    continue
                level = load_sweep(folder).iloc[0]
                now, before, little, note = _read(_records(folder)[level["level_id"]], shape["concurrency"],
                                                  shape["output_len"])
                rows.append((d, now, before, little))
                print(f"{engine} {shape['concurrency']} clients, {d:.0f} s: window {now:,.0f} tok/s (before: "
                      f"{before:,.0f}), Little {little:,.0f} | {note}", flush=True)
        arr = np.array([r[1:] for r in rows])
        spread = arr.max(axis=0) / arr.min(axis=0) - 1
        print(f"{engine}: spread over {len(rows)} durations: window {spread[0]:.1%}, window as before "
              f"{spread[1]:.1%}, Little {spread[2]:.1%}; median window / Little {np.median(arr[:, 0] / arr[:, 2]):.3f} "
              f"(before: {np.median(arr[:, 1] / arr[:, 2]):.3f})\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
