"""The stand-in SGLang server: same flags, endpoints and log format, timings from a model.

``python -m glm5lib.sim <sglang.launch_server flags> [--sim-profile NAME|PATH] [--sim-fault SPEC]``
(or ``glm5 sim ...``) serves SGLang's HTTP API on 127.0.0.1 with a continuous-batching
scheduler whose step times come from a calibrated profile (``data/profiles/``). It says it is
a stand-in in its first log line, in ``/get_server_info``, ``/get_model_info`` and ``/v1/models``.
Simulated GPU telemetry is served at ``/sim/gpus`` and ``/sim/environment``.

The library reaches it only over HTTP, as it reaches a real server: for tests and notebooks,
:func:`glm5lib.engines.sim.run_standin` starts one on a free port and stops it after use.
:func:`fit_profile` builds a profile from a real server's log so the stand-in can rehearse it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from glm5lib.errors import ConfigError
from glm5lib.sim.args import SIM_FLAGS, SimArgs, parse_sim_argv, sim_usage
from glm5lib.sim.faults import Faults, parse_faults
from glm5lib.sim.profile import DEFAULT_PROFILE, Profile, StepContext, list_profiles, load_profile

__all__ = [
    "DEFAULT_PROFILE",
    "SIM_FLAGS",
    "Faults",
    "Profile",
    "SimArgs",
    "StepContext",
    "fit_profile",
    "list_profiles",
    "load_profile",
    "main",
    "parse_faults",
    "parse_sim_argv",
    "register_cli",
]


def fit_profile(log, base=DEFAULT_PROFILE, name=None, out=None) -> Profile:
    """A profile whose decode timings and KV capacity come from a real server log.

    See :func:`glm5lib.sim.fit.fit_profile` (imported on first use: it needs numpy and pandas,
    which the server itself does not).
    """
    from glm5lib.sim.fit import fit_profile as _fit

    return _fit(log, base=base, name=name, out=out)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m glm5lib.sim``; returns the process exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "fit":
        return _fit_main(argv[1:])
    if argv and argv[0] in ("-h", "--help"):
        print(
            "usage: python -m glm5lib.sim [sglang.launch_server flags] [--sim-profile NAME|PATH] "
            "[--sim-fault SPEC ...]\n       python -m glm5lib.sim fit SERVER_LOG [--base PROFILE] "
            "[--name NAME] [--out PATH]\n\nA stand-in for SGLang's server (not SGLang): timings come "
            f"from a profile, not from GPUs.\nShipped profiles: {', '.join(list_profiles())}\n\n"
            + sim_usage()
        )
        return 0
    try:
        args = parse_sim_argv(argv)
    except ConfigError as exc:
        print(f"glm5lib.sim: error: {exc}", file=sys.stderr)
        return 2
    from glm5lib.sim.app import serve

    try:
        return asyncio.run(serve(args))
    except KeyboardInterrupt:
        return 0


def _fit_main(argv: list[str]) -> int:
    """``fit SERVER_LOG``: fit a profile from a real server log and save it."""
    p = argparse.ArgumentParser(
        prog="python -m glm5lib.sim fit",
        description="Fit a stand-in profile's decode timings and KV capacity from an SGLang server log.",
    )
    p.add_argument("log", help="an SGLang server log with decode lines")
    p.add_argument("--base", default=DEFAULT_PROFILE, help="profile to copy the rest from (name or path)")
    p.add_argument("--name", default=None, help="name of the new profile (default: <base>-fitted)")
    p.add_argument("--out", default=None, help="where to write it (default: ./<name>.json)")
    ns = p.parse_args(argv)
    try:
        prof = fit_profile(ns.log, base=ns.base, name=ns.name)
    except (ConfigError, OSError) as exc:
        print(f"glm5lib.sim fit: error: {exc}", file=sys.stderr)
        return 2
    out = prof.save(ns.out or f"{prof.name}.json")
    fit = prof.data["fit"]
    d = prof["decode"]
    print(
        f"wrote {out}: step_ms = {d['base_ms']:.2f} + {d['per_req_ms']:.4f} * B^{d['batch_exponent']:.2f} "
        f"+ {d['per_kv_token_us']:.4f} us/KV token (graph saving {d['cuda_graph_saving_ms']:.1f} ms); "
        f"{fit['points']} decode lines, RMSE {fit['rmse_ms']:.2f} ms, "
        f"batches {fit['batch_range'][0]}-{fit['batch_range'][1]}; method: {fit['method']}\n"
        f"use it with: python -m glm5lib.sim --sim-profile {out} <your server flags>"
    )
    return 0


def _cli(ns: argparse.Namespace) -> int:
    return main(list(ns.sim_args))


def register_cli(subparsers) -> None:
    """``glm5 sim <flags>``: the same as ``python -m glm5lib.sim <flags>``."""
    p = subparsers.add_parser(
        "sim",
        help="run the stand-in SGLang server (same flags as sglang.launch_server, plus --sim-*)",
        description="Run the stand-in SGLang server. " + sim_usage(),
        prefix_chars="\x00",  # pass every flag through untouched
        add_help=False,
    )
    p.add_argument("sim_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cli)
