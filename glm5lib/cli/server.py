"""``glm5 launch``: start an SGLang server or the stand-in, print its URL, stop it on Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from glm5lib.config import SGLANG_FLAGS, ServerConfig, flag_for
from glm5lib.errors import ConfigError

__all__ = ["parse_set", "register_cli"]

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def parse_set(text: str) -> tuple[str, Any]:
    """``FIELD=VALUE`` from ``--set`` -> (field, typed value), checked against SGLang's flags."""
    name, sep, raw = text.partition("=")
    if not sep:
        raise ConfigError(f"--set expects FIELD=VALUE, got {text!r}", field=text)
    name = name.strip().lstrip("-").replace("-", "_")
    flag = flag_for(name)  # raises naming the closest field for an unknown one
    spec = SGLANG_FLAGS[name]
    value = raw.strip()
    if spec.value_type == "bool":
        if value.lower() not in _TRUE + _FALSE:
            raise ConfigError(f"{name} is a switch: use {name}=true or {name}=false", field=name, valid=["true", "false"])
        return name, value.lower() in _TRUE
    if value.lower() in ("none", "null") and spec.nullable:
        return name, None
    tokens = value.replace(",", " ").split() if spec.value_type == "list" else [raw]
    # the value as sglang.launch_server's own argument parser would read it
    return name, ServerConfig.from_argv([flag, *tokens]).get(name)


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _cmd_launch(args: argparse.Namespace) -> int:
    from glm5lib.server import BACKENDS, launch

    # SIGTERM (kill, a service manager, a closing terminal's SIGHUP) stops the server as Ctrl-C does
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)
    # argparse's REMAINDER swallows options written after CONFIG: split at '--' and parse the
    # head again, so `glm5 launch NAME --backend sim -- FLAGS` and `glm5 launch --backend sim NAME` both work
    rest = list(args.rest or [])
    cut = rest.index("--") if "--" in rest else len(rest)
    head, extra = rest[:cut], rest[cut + 1 :]
    if head:
        again = argparse.ArgumentParser(prog="glm5 launch", add_help=False)
        _add_launch_options(again)
        again.add_argument("config", nargs="?")
        args = again.parse_args(head, namespace=args)
    if args.backend not in BACKENDS:
        raise ConfigError(f"--backend {args.backend!r}: valid values are {', '.join(sorted(BACKENDS))}",
                          field="backend", valid=sorted(BACKENDS))
    if args.config:
        config = ServerConfig.load(args.config)
        sglang_args, foreign = ServerConfig.parse_known_argv(extra) if extra else (ServerConfig(), [])
        if sglang_args.explicit:
            config = config.with_changes(**sglang_args.explicit)
    else:
        if not extra:
            raise ConfigError("give a config name/file or sglang.launch_server flags after '--'", field="config")
        config, foreign = ServerConfig.parse_known_argv(extra)
    changes = dict(parse_set(item) for item in (args.set or []))
    if changes:
        config = config.with_changes(**changes)
    if foreign and args.backend != "sim":
        raise ConfigError(f"unknown SGLang arguments: {' '.join(foreign)}", field=foreign[0])
    server = launch(
        config, backend=args.backend, log_path=args.log, ready_timeout=args.ready_timeout,
        port=args.port, extra_args=foreign, python=args.python,
    )
    try:
        print(server.base_url, flush=True)
        print(f"# pid {server.pid}, log {server.log_path}; Ctrl-C stops it", file=sys.stderr, flush=True)
        code = server.wait()
    except KeyboardInterrupt:
        print("# stopping", file=sys.stderr, flush=True)
        server.stop()
        return 0
    finally:
        if server.alive():
            server.stop()
    cause = server.crash_cause()
    print(f"# server exited with status {code}" + (f" ({cause})" if cause else ""), file=sys.stderr)
    for line in server.fatal_lines()[:10]:
        print(f"    | {line}", file=sys.stderr)
    return 1


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``glm5 launch``."""
    parser = subparsers.add_parser(
        "launch",
        help="start an SGLang server or the stand-in, print its URL, stop it on Ctrl-C",
        description=(
            "Start a server from a shipped config name, a JSON config file, or sglang.launch_server "
            "flags after '--' (which also override the config's fields; with --backend sim the "
            "stand-in's own --sim-* flags may follow too). Prints the base URL, then waits; Ctrl-C stops it."
        ),
    )
    _add_launch_options(parser)
    parser.add_argument(
        "rest", nargs=argparse.REMAINDER, metavar="[CONFIG] [-- FLAGS]",
        help="shipped config name or JSON file; then '--' and launch_server (and --sim-*) flags",
    )
    parser.set_defaults(func=_cmd_launch, config=None)


def _add_launch_options(parser: argparse.ArgumentParser) -> None:
    # not argparse choices: the launcher's list of backends imports the server package (pandas)
    parser.add_argument("--backend", default="sglang", help="sglang (default) or sim (the stand-in)")
    parser.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    parser.add_argument("--log", default=None, help="log file (default: a new temporary folder)")
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for readiness")
    parser.add_argument("--set", action="append", metavar="FIELD=VALUE", help="change a config field (repeatable)")
    parser.add_argument("--python", default=None, help="interpreter that has SGLang installed (default: this one)")
