"""``glm5 env`` and ``glm5 telemetry``: the host snapshot and a GPU sampling run, on the terminal."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from typing import Any

from glm5lib.cli.options import add_command
from glm5lib.errors import ConfigError

__all__ = ["register_cli"]


def _cmd_env(args: argparse.Namespace) -> int:
    from glm5lib.telemetry import environment, format_environment, save_environment

    env = environment(source="sim" if args.sim else "auto", base_url=args.sim)
    if args.out:
        save_environment(args.out, env)
    if args.json:
        print(json.dumps(env, indent=2, default=str))
    else:
        print(format_environment(env))
    return 0


def _cmd_telemetry(args: argparse.Namespace) -> int:
    from glm5lib.telemetry import GpuSampler

    if not args.duration > 0:
        raise ConfigError(f"--duration {args.duration} must be a positive number of seconds", field="duration")
    gpus = None
    if args.gpus:
        try:
            gpus = [int(g) for g in args.gpus.split(",")]
        except ValueError:
            raise ConfigError(f"--gpus {args.gpus!r} must be comma-separated indices such as 0,1", field="gpus") from None
    sampler = GpuSampler(interval=args.interval, gpus=gpus, source="sim" if args.sim else "auto",
                         base_url=args.sim, out=args.out)
    if not sampler.available:
        print(f"glm5 telemetry: no GPU telemetry: {sampler.reason}", file=sys.stderr)
        return 1
    print(f"sampling {sampler.source} GPUs every {args.interval} s for {args.duration} s"
          + (f" into {args.out}" if args.out else ""), file=sys.stderr)
    with sampler, contextlib.suppress(KeyboardInterrupt):
        time.sleep(args.duration)
    frame = sampler.frame()
    if frame.empty:
        print("no samples were taken", file=sys.stderr)
        return 1
    summary = frame.groupby("gpu").agg(
        mean_power_w=("power_w", "mean"), peak_power_w=("power_w", "max"),
        power_limit_w=("power_limit_w", "mean"), mean_gpu_util=("gpu_util", "mean"),
        mean_sm_clock_mhz=("sm_clock_mhz", "mean"),
        pcie_tx_mb_s=("pcie_tx_bytes_s", lambda s: s.mean() / 1e6),
        pcie_rx_mb_s=("pcie_rx_bytes_s", lambda s: s.mean() / 1e6),
    )
    stats = sampler.stats().set_index("gpu")[["samples", "achieved_hz", "cost_mean_ms", "cost_p99_ms", "errors"]]
    print(summary.join(stats).round(2).to_string())
    return 0


def register_cli(subparsers: Any) -> None:
    """Add ``glm5 env`` and ``glm5 telemetry``."""
    env = add_command(subparsers, "env", _cmd_env, help="snapshot the host's GPUs, links and packages, with warnings")
    env.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    env.add_argument("--sim", metavar="URL", help="read the stand-in server's simulated environment at URL")
    env.add_argument("--out", metavar="PATH", help="also write the snapshot as JSON to PATH")
    tel = add_command(subparsers, "telemetry", _cmd_telemetry,
                      help="sample GPU power, utilisation, clocks and PCIe for a while")
    tel.add_argument("--duration", type=float, required=True, metavar="S", help="seconds to sample")
    tel.add_argument("--interval", type=float, default=0.1, metavar="S", help="seconds between samples (0.1)")
    tel.add_argument("--out", metavar="PATH", help="append samples to this CSV (e.g. gpu.csv)")
    tel.add_argument("--gpus", metavar="LIST", help="comma-separated GPU indices (default: all)")
    tel.add_argument("--sim", metavar="URL", help="sample the stand-in server's simulated GPUs at URL")
