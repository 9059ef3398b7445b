"""Any inference engine from a command template, and editing flags in an argv list.

:func:`launch_command` starts any engine (``transformers serve``, vLLM, the stand-in...) from an
argv template with ``{host}``, ``{port}``, ``{model}`` and ``{python}`` placeholders and returns a
:class:`CommandServer` once its ready path answers; :func:`apply_flag_changes`,
:func:`flag_value`, :func:`flag_name` and :func:`fill_template` edit and read such command lines.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glm5lib.errors import ConfigError
from glm5lib.masking import mask_argv
from glm5lib.server.ports import LOOPBACK, connect_host, find_free_port, require_free_port
from glm5lib.server.process import (
    ProcessSpec,
    ServerProcess,
    child_env,
    next_restart_log,
    prepare_log_path,
)
from glm5lib.server.ready import spawn_ready

__all__ = [
    "PLACEHOLDERS",
    "CommandLaunch",
    "CommandServer",
    "apply_flag_changes",
    "fill_template",
    "flag_name",
    "flag_value",
    "launch_command",
    "start_command",
]

logger = logging.getLogger(__name__)

#: Placeholders a command template may use.
PLACEHOLDERS = ("host", "port", "model", "python")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


def flag_name(key: str) -> str:
    """``"max_batch"``, ``"max-batch"`` or ``"--max-batch"`` -> ``"--max-batch"``."""
    text = str(key).strip()
    if not text or text in ("-", "--"):
        raise ConfigError(f"empty flag name {key!r}; give e.g. 'max_batch' or '--max-batch'",
                          field="changes")
    if text.startswith("-"):
        return text if text.startswith("--") or len(text) == 2 else "-" + text
    return "--" + text.replace("_", "-")


def _is_option(token: str) -> bool:
    """Whether an argv token is an option (``-x``, ``--flag``), not a value (``-1`` is a value)."""
    if not token.startswith("-") or token == "-":
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def _option_spans(argv: Sequence[str]) -> list[tuple[str, int, int]]:
    """(flag, start, end) for each option: ``--flag`` plus the non-option tokens after it,
    or ``--flag=value`` alone."""
    spans = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if _is_option(token):
            name = token.split("=", 1)[0]
            j = i + 1
            if "=" not in token:
                while j < len(argv) and not _is_option(argv[j]):
                    j += 1
            spans.append((name, i, j))
            i = j
        else:
            i += 1
    return spans


def flag_value(argv: Sequence[str], flag: str) -> str | bool | list[str] | None:
    """The value of ``flag`` in an argv list: its token (a list when it has several), True for a
    bare switch, None when absent. The last occurrence wins, as with argparse."""
    flag = flag_name(flag)
    found: str | bool | list[str] | None = None
    for name, start, end in _option_spans(argv):
        if name != flag:
            continue
        token = argv[start]
        if "=" in token:
            found = token.split("=", 1)[1]
        elif end - start == 1:
            found = True
        elif end - start == 2:
            found = argv[start + 1]
        else:
            found = list(argv[start + 1 : end])
    return found


def apply_flag_changes(argv: Sequence[str], changes: Mapping[str, Any]) -> list[str]:
    """``argv`` with flag changes applied, for any engine's command line.

    Keys are flags (``"--cb-max-batch-tokens"``) or field names (``"cb_max_batch_tokens"``).
    A value replaces the flag's value where the flag is present (every occurrence, also the
    ``--flag=value`` form) and is appended otherwise; ``True`` makes it a bare switch (and drops
    a ``--no-flag``); ``None`` or ``False`` removes it; a list or tuple gives several values
    (``--cuda-graph-bs 1 2 4``). A flag's value is every token after it up to the next option,
    so positional arguments belong before the options (as in ``transformers serve MODEL --port N``).
    """
    if not isinstance(changes, Mapping):
        raise ConfigError(f"flag changes must be a mapping of flag -> value, got {type(changes).__name__}",
                          field="changes", valid=["{'--max-batch': 256}"])
    out = [str(a) for a in argv]
    for key, value in changes.items():
        flag = flag_name(key)
        negated = "--no-" + flag[2:] if flag.startswith("--") else None
        if isinstance(value, (list, tuple)):
            tokens = [flag, *(str(v) for v in value)]
        elif value is True:
            tokens = [flag]
        elif value is None or value is False:
            tokens = []
        elif isinstance(value, (str, int, float, os.PathLike)):
            tokens = [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
        else:
            raise ConfigError(
                f"value for {flag} must be a string, number, True/False/None or a list, got {type(value).__name__}",
                field=str(key), valid=["str", "int", "float", "bool", "None", "list"],
            )
        spans = [(s, e) for name, s, e in _option_spans(out) if name == flag or (value is True and name == negated)]
        if not spans:
            out.extend(tokens)
            continue
        first = spans[0][0]
        for start, end in reversed(spans):
            del out[start:end]
        out[first:first] = tokens
    return out


def fill_template(argv_template: Sequence[str], *, host: str = LOOPBACK, port: int | None = None,
                  model: str | None = None, python: str | None = None) -> list[str]:
    """The command template with ``{host}``, ``{port}``, ``{model}``, ``{python}`` filled in.

    Other braces (a JSON argument, say) are left alone; an unknown ``{name}`` is an error.
    """
    if isinstance(argv_template, (str, bytes)) or not isinstance(argv_template, Sequence) or not argv_template:
        raise ConfigError(
            f"the command template must be a non-empty argv list, got {argv_template!r}",
            field="argv_template",
            valid=['["transformers", "serve", "{model}", "--port", "{port}"]'],
        )
    values = {"host": host, "port": port, "model": model, "python": python or sys.executable}
    def fill(match: re.Match[str], token: str) -> str:
        name = match.group(1)
        if name not in values:
            raise ConfigError(
                f"unknown placeholder {{{name}}} in command token {token!r}",
                field="argv_template", valid=[f"{{{p}}}" for p in PLACEHOLDERS],
            )
        if values[name] is None:
            raise ConfigError(f"the command template uses {{{name}}} but no {name} was given", field=name)
        return str(values[name])

    out = []
    for item in argv_template:
        token = os.fspath(item) if isinstance(item, os.PathLike) else str(item)
        out.append(_PLACEHOLDER.sub(lambda m, t=token: fill(m, t), token))
    return out


@dataclass(frozen=True)
class CommandLaunch:
    """How to start an engine from a command template; checked when made.

    ``argv_template`` is a list such as ``["transformers", "serve", "{model}", "--continuous-batching",
    "--host", "{host}", "--port", "{port}"]``; ``{host}``, ``{port}``, ``{model}`` and ``{python}``
    (this interpreter) are filled in. ``port=None`` picks a free one (or uses the template's own
    ``--port N`` when it has no ``{port}``). ``changes`` are flag changes applied to the template
    first (:func:`apply_flag_changes`). Ready means ``ready_path`` answers 200 (and, when
    ``ready_line`` is given, that line was logged) within ``ready_timeout`` seconds, checked every
    ``poll_interval``. ``log_path``: where the output goes (default: a new temporary folder);
    ``env``: extra environment variables; ``api_key``: sent to the ready path and masked in the
    log; ``restarts``: how many restarts came before (names the log of the next).
    """

    argv_template: Sequence[str]
    port: int | None = None
    host: str = LOOPBACK
    model: str | None = None
    log_path: str | os.PathLike[str] | None = None
    env: Mapping[str, str] | None = field(default=None, repr=False)
    ready_timeout: float = 600.0
    ready_path: str = "/health"
    ready_line: str | None = None
    api_key: str | None = field(default=None, repr=False)
    changes: Mapping[str, Any] | None = None
    poll_interval: float = 0.1
    restarts: int = 0

    def __post_init__(self) -> None:
        # a non-empty argv list whose placeholders are known, checked before any change is applied
        fill_template(self.argv_template, host=self.host, port=0, model=self.model or "")
        object.__setattr__(self, "argv_template", tuple(self.argv_template))
        if not self.ready_path.startswith("/"):
            raise ConfigError(f"ready_path must start with '/', got {self.ready_path!r}", field="ready_path",
                              valid=["/health", "/v1/models"])
        self.fixed_port(self.template())  # the changes apply and the server's port can be known

    def template(self) -> list[str]:
        """The argv template with ``changes`` applied."""
        template = [str(t) for t in self.argv_template]
        return apply_flag_changes(template, self.changes) if self.changes else template

    def fixed_port(self, template: list[str]) -> int | None:
        """The port the template fixes itself (``--port N`` and no ``{port}``); a ConfigError when
        that clashes with ``port`` or when the server's port cannot be known at all."""
        if any("{port}" in t for t in template):
            return None
        fixed = flag_value(template, "--port")
        if isinstance(fixed, str) and fixed.isdigit():
            if self.port is not None and int(self.port) != int(fixed):
                raise ConfigError(f"port={self.port} but the command template fixes --port {fixed}; use {{port}} "
                                  "in the template", field="port")
            return int(fixed)
        if self.port is None:
            raise ConfigError(
                "the command template has no {port} placeholder and no --port N: add '--port', '{port}' "
                "(or the engine's own port flag with {port}) so the server's address is known",
                field="argv_template",
            )
        return None


class CommandServer(ServerProcess):
    """A server :func:`launch_command` started from a command template (any engine).

    Same interface as every launched server (``base_url``, ``alive()``, ``stop()``, ``logs()``,
    ``fatal_lines()``, ``crash_cause()``, ``with``); ``config`` is None, ``argv_template`` and
    ``model`` say what ran, and :meth:`restart` applies flag changes to the template.
    """

    backend = "command"

    def __init__(self, launch: CommandLaunch, port: int, process: ProcessSpec):
        """The process ``process`` runs, started from ``launch`` (its template with the changes
        applied) on ``port``."""
        self.argv_template = [str(a) for a in launch.argv_template]
        self.host = launch.host
        self.model = launch.model
        self.ready_path = launch.ready_path
        self._api_key = launch.api_key
        self._port = int(port)
        super().__init__(process)

    @property
    def api_key(self) -> str | None:
        return self._api_key

    @property
    def port(self) -> int:
        return self._port

    @property
    def engine(self) -> str:
        """The program the command runs (``transformers``, ``vllm``, ``python -m glm5lib.sim``...)."""
        argv = self.argv
        if len(argv) >= 3 and argv[1] == "-m":
            return f"{Path(argv[0]).name} -m {argv[2]}"
        return Path(argv[0]).name if argv else ""

    def flag(self, flag: str) -> str | bool | list[str] | None:
        """The value of ``flag`` in the command that ran (see :func:`flag_value`)."""
        return flag_value(self.argv, flag)

    def info(self) -> dict[str, Any]:
        """The launch's record (:meth:`ServerProcess.info`) with the engine, the command's template
        and the model it names, and no engine config (a command has none)."""
        own = {k: v for k, v in super().info().items() if k != "config"}
        return {**own, "engine": self.engine, "argv_template": mask_argv(self.argv_template, self._secrets),
                "model": self.model}

    def restart(self, *, log_path: str | os.PathLike[str] | None = None, ready_timeout: float | None = None,
                **changes: Any) -> CommandServer:
        """Stop this server and start its command again with flag ``changes`` applied
        (``restart(cb_max_batch_tokens=4096)``); a new log file, the same port when it was explicit."""
        template = apply_flag_changes(self.argv_template, changes) if changes else self.argv_template
        self.stop()
        options = dict(self._launch_options)
        if log_path is None:
            log_path = next_restart_log(self.log_path, options)
        return start_command(CommandLaunch(
            template, port=self.port if options.get("port_explicit") else None, host=self.host,
            model=self.model, log_path=log_path, env=self._env_overrides,
            ready_timeout=ready_timeout if ready_timeout is not None else options.get("ready_timeout", 600.0),
            ready_path=self.ready_path, ready_line=self.ready_line, api_key=self._api_key,
            restarts=options.get("restarts", 0),
        ))

    def __enter__(self) -> CommandServer:
        return self

    def __repr__(self) -> str:
        state = "running" if self.alive() else f"exited {self.returncode}"
        return f"CommandServer({self.engine}, {self.base_url}, pid={self.pid}, {state}, log={str(self.log_path)!r})"


def start_command(launch: CommandLaunch) -> CommandServer:
    """Start the engine ``launch`` describes and return it once it is ready.

    The process runs in its own process group with its output in the log; fatal lines (CUDA OOM,
    NaN, NCCL...) while starting fail fast. Raises ConfigError for a bad template,
    ServerLaunchError (cause ``port_in_use``, ``timeout``, ``exited``, ``oom``, ``not_found``, ...)
    when the engine does not come up.
    """
    template = launch.template()
    fixed = launch.fixed_port(template)
    port_explicit = launch.port is not None or fixed is not None
    port = fixed if fixed is not None else launch.port
    if port is None:
        port = find_free_port(LOOPBACK)
    host = launch.host
    argv = fill_template(template, host=host, port=int(port), model=launch.model)
    require_free_port(host, int(port))
    log_path = prepare_log_path(launch.log_path)
    env_overrides, whole_env, secrets = child_env(launch.env, (launch.api_key,))
    base_url = f"http://{connect_host(host)}:{port}"
    logger.info("launching %s (log %s)", " ".join(mask_argv(argv, secrets)), log_path)
    process = ProcessSpec(
        argv=argv, env=whole_env, config=None, backend="command", base_url=base_url, log_path=log_path,
        env_overrides=env_overrides, secrets=secrets, ready_line=launch.ready_line,
        launch_options={"port_explicit": port_explicit, "ready_timeout": launch.ready_timeout,
                        "restarts": launch.restarts},
    )
    applied = dataclasses.replace(launch, argv_template=tuple(template), changes=None)
    server = spawn_ready(lambda: CommandServer(applied, int(port), process), launch.ready_timeout,
                         launch.poll_interval)
    logger.info("%s ready at %s after %.1f s", server.engine, base_url, server.ready_at - server.started_at)
    return server


def launch_command(argv_template: Sequence[str], **options: Any) -> CommandServer:
    """Start any inference engine from an argv template and return it once it is ready:
    :func:`start_command` for ``CommandLaunch(argv_template, **options)``, whose fields (``port``,
    ``host``, ``model``, ``log_path``, ``env``, ``ready_timeout``, ``ready_path``, ``ready_line``,
    ``api_key``, ``changes``, ``poll_interval``) are the keywords, each checked before anything starts.

    Raises ConfigError for a bad template, ServerLaunchError (cause ``port_in_use``, ``timeout``,
    ``exited``, ``oom``, ``not_found``, ...) when the engine does not come up.
    """
    return start_command(CommandLaunch(argv_template, **options))
