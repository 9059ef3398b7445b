"""``glm5 launch``: start a server of any registered engine, print its URL, stop it on Ctrl-C.

``--backend`` is a registered engine (:func:`glm5lib.engines.names`): ``sglang`` and the
stand-in ``sim`` from a ServerConfig (a shipped name, a JSON file, or launch_server flags after
``--``), ``vllm`` from a vLLM config (``vllm-capped``...), ``command`` from the argv template
after ``--``. ``--set FIELD=VALUE`` changes a field of the config, typed by the engine's own
flags (the config's SGLang release for SGLang and the stand-in). The server's API key comes from
``GLM5_API_KEY`` or ``--api-key-file``: ``--set`` and the SGLang, stand-in or vLLM flags after ``--``
refuse a secret.
"""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from glm5lib import engines
from glm5lib.cli.options import (
    add_api_key_options,
    add_command,
    no_secret_flags,
    read_api_key,
    settings_given,
)
from glm5lib.engines.sglang.config import ServerConfig, parse_assignment
from glm5lib.errors import ConfigError, UsageError

__all__ = ["register_cli"]


def _plain_value(raw: str) -> Any:
    """A ``--set`` value for an engine whose config checks types itself (vLLM)."""
    text = raw.strip()
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _changes(config: Any, items: list[str] | None) -> dict[str, Any]:
    """The ``--set FIELD=VALUE`` changes to ``config`` (none of them a secret)."""
    out: dict[str, Any] = {}
    for item in settings_given(items):
        if isinstance(config, ServerConfig):
            name, value = parse_assignment(item, config.release)
        else:
            name, sep, raw = item.partition("=")
            if not sep:
                raise ConfigError(f"--set expects FIELD=VALUE, got {item!r}", field=item)
            name, value = name.strip().lstrip("-").replace("-", "_"), _plain_value(raw)
        out[name] = value
    return out


def _with_set(config: Any, items: list[str] | None, **more: Any) -> Any:
    """``config`` with the ``--set`` changes ``items`` made, and ``more``."""
    changes = {**_changes(config, items), **more}
    return config.with_changes(**changes) if changes else config


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _cmd_launch(args: argparse.Namespace) -> int:
    """Start a server from a shipped config name, a JSON config file, or sglang.launch_server flags
    after '--' (which also override the config's fields; with --backend sim the stand-in's own
    --sim-* flags may follow too); with --backend vllm from a vLLM config; with --backend command
    from the argv template after '--'. The server's API key comes from GLM5_API_KEY or
    --api-key-file, never from the command line. Prints the base URL, then waits; Ctrl-C stops it."""
    from glm5lib.engines.sglang import launch

    # SIGTERM (kill, a service manager, a closing terminal's SIGHUP) stops the server as Ctrl-C does;
    # SIGINT too, also when it was inherited ignored (started with '&' from a non-interactive shell,
    # where Python would otherwise never raise KeyboardInterrupt and the server would outlive a kill -INT)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
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
    valid = engines.names()
    if args.backend not in valid:
        raise UsageError(f"--backend {args.backend!r}: valid values are {', '.join(valid)}",
                         field="backend", valid=valid)
    adapter = engines.get(args.backend)
    key = read_api_key(args)
    if adapter.config_type is ServerConfig:
        config, foreign = _server_config(args, no_secret_flags(extra), key)
        server = launch(config, backend=args.backend, log_path=args.log, ready_timeout=args.ready_timeout,
                        port=args.port, extra_args=foreign, python=args.python)
    elif adapter.capabilities.launches_from_config:
        if not args.config:
            raise UsageError(f"--backend {args.backend} needs a config name or file", field="config")
        config = _with_set(adapter.load_config(args.config), args.set)
        server = adapter.launch(engines.LaunchRequest(config=config, log_path=args.log, port=args.port,
                                                      ready_timeout=args.ready_timeout, api_key=key,
                                                      extra_args=no_secret_flags(extra)))
    else:
        # the engine's own argv template: the key reaches the engine as its command says (its
        # environment, say); glm5 sends it to the ready path
        if not extra:
            raise UsageError(f"--backend {args.backend} needs the engine's argv template after '--'", field="command")
        server = adapter.launch(engines.LaunchRequest(command=extra, log_path=args.log, port=args.port,
                                                      ready_timeout=args.ready_timeout, api_key=key))
    try:
        print(server.base_url, flush=True)
        print(f"# pid {server.pid}, log {server.log_path}; Ctrl-C stops it", file=sys.stderr, flush=True)
        if key:
            print("# it asks every request for the API key from GLM5_API_KEY or --api-key-file", file=sys.stderr,
                  flush=True)
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


def _server_config(args: argparse.Namespace, extra: list[str], key: str | None) -> tuple[ServerConfig, list[str]]:
    """(the ServerConfig to launch, the flags after '--' that are not SGLang's): CONFIG, changed by
    the SGLang flags after '--', by ``--set`` and by the API key ``key`` where one is given."""
    if args.config:
        config = ServerConfig.load(args.config)
        sglang_args, foreign = ServerConfig.parse_known_argv(extra) if extra else (ServerConfig(), [])
        if sglang_args.explicit:
            config = config.with_changes(**sglang_args.explicit)
    else:
        if not extra:
            raise UsageError("give a config name/file or sglang.launch_server flags after '--'", field="config")
        config, foreign = ServerConfig.parse_known_argv(extra)
    config = _with_set(config, args.set, **({"api_key": key} if key else {}))
    if foreign and not engines.get(args.backend).capabilities.accepts_foreign_flags:
        raise ConfigError(f"unknown SGLang arguments: {' '.join(foreign)}", field=foreign[0])
    return config, foreign


def register_cli(subparsers: argparse._SubParsersAction) -> None:
    """Add ``glm5 launch``."""
    parser = add_command(subparsers, "launch", _cmd_launch,
                         help="start a server of any engine (SGLang, vLLM, the stand-in, a command), print its URL, stop it on Ctrl-C")
    _add_launch_options(parser)
    parser.add_argument(
        "rest", nargs=argparse.REMAINDER, metavar="[CONFIG] [-- FLAGS]",
        help="shipped config name or JSON file; then '--' and launch_server (and --sim-*) flags",
    )
    parser.set_defaults(config=None)


def _add_launch_options(parser: argparse.ArgumentParser) -> None:
    # the registry's names need no adapter imported; checked by the handler (exit 2 when unknown)
    parser.add_argument("--backend", default=engines.DEFAULT_ENGINE, metavar="ENGINE",
                        help=f"engine: {', '.join(engines.names())} (default {engines.DEFAULT_ENGINE})")
    parser.add_argument("--port", type=int, default=None, help="port (default: a free one)")
    parser.add_argument("--log", default=None, help="log file (default: a new temporary folder)")
    parser.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for readiness")
    parser.add_argument("--set", action="append", metavar="FIELD=VALUE",
                        help="change a config field (repeatable; never a secret: see --api-key-file)")
    add_api_key_options(parser, "file holding the server's API key (default: $GLM5_API_KEY; none when unset)")
    parser.add_argument("--python", default=None, help="interpreter that has SGLang installed (default: this one)")
