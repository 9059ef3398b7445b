"""``glm5 watch URL``: read a live server's own evidence window by window, sending it no request.

The command line of :class:`glm5lib.watch.Watch`: one line per window naming the limit that binds,
the phase folder ``glm5 diagnose`` / ``predict`` / ``report`` / ``compare`` read as any other.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from glm5lib.cli.options import add_command
from glm5lib.errors import UsageError


def _cli_watch(args: argparse.Namespace) -> int:
    """Scrape a running engine's /metrics once a second (and follow its log, sample local GPUs and
    its serving processes' CPU), cut time into windows, and write each as a level of a phase folder:
    offered load, running, queued, KV use, output tok/s from its counters, latencies from its
    histograms. Only /metrics, its server-info endpoint and /health are requested; its API key
    comes from GLM5_API_KEY."""
    from glm5lib.watch import Watch, WatchSettings, api_key_from_env

    if args.duration is not None and args.duration <= 0:
        raise UsageError(f"--duration {args.duration:g} must be positive (or left out: until Ctrl-C)", field="--duration")
    settings = WatchSettings(url=args.url, log_path=Path(args.log) if args.log else None, duration=args.duration,
                             window=args.window, interval=args.interval,
                             run_dir=Path(args.run_dir) if args.run_dir else None, phase=args.phase,
                             gpu=not args.no_gpu, api_key=api_key_from_env())
    watch = Watch(settings)
    cost = None

    def line(row: dict[str, Any]) -> None:
        print(f"window {row['window']}: {row['binding_text']}", flush=True)

    print(f"watching {watch.adapter.title} at {watch.url} ({'local' if watch.local else 'remote'}; windows of "
          f"{settings.window:g} s; {'until Ctrl-C' if settings.duration is None else f'{settings.duration:g} s'}); "
          "no inference request is sent", flush=True)
    result = watch.run(on_window=line)
    cost = result.scrape_cost
    spent = (f", about {cost['cpu_ms']:.1f} ms of the serving process's CPU each "
             f"({cost['share_of_core_at_interval']:.1%} of a core at one a second)" if "cpu_ms" in cost else "")
    print(f"{len(result.windows)} window(s) in {result.folder} ({result.stopped}); a scrape took "
          f"{cost['wall_ms']:.1f} ms and {cost['bytes'] / 1024:.0f} kB{spent}")
    for note in result.notes:
        print(f"note: {note}")
    if len(result.windows):
        print(f"next: glm5 diagnose {result.folder.parent} --phase {result.folder.name}")
    return 0


def register_cli(subparsers: Any) -> None:
    """Add ``glm5 watch``."""
    p = add_command(subparsers, "watch", _cli_watch,
                    help="diagnose a live server from its own /metrics and log, window by window, without sending it load")
    p.add_argument("url", metavar="URL", help="the server, http://HOST:PORT")
    p.add_argument("--log", help="the engine's log file, when readable from here (its lines join the evidence)")
    p.add_argument("--duration", type=float, help="seconds to watch (default: until Ctrl-C)")
    p.add_argument("--window", type=float, default=30.0, help="seconds per window (default 30)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes (default 1)")
    p.add_argument("--run-dir", help="the run folder (default: a new one under data/runs/)")
    p.add_argument("--phase", default="watch", help="the phase folder's name (default 'watch')")
    p.add_argument("--no-gpu", action="store_true", help="do not sample the GPUs even when they are local")
