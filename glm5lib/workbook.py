"""Run the workbook's notebooks in order, headless, with papermill.

``glm5 workbook run`` executes ``notebooks/NN-*.ipynb`` in order into a fresh run folder
(``data/runs/<run-id>/``). Every notebook receives the same parameters (those it does not
declare are ignored), plus ``RUN_DIR``. A notebook that raises stops the run; the error names
the notebook and the cell, and everything written so far stays in the run folder.

After the notebooks (also after a failed one), ``report.md`` and ``summary.json`` are written
from what the run folder holds (:func:`glm5lib.report.write_report`), and ``notebooks.json``
records which notebooks ran and how each ended.
"""

from __future__ import annotations

import ast
import json
import logging
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from glm5lib import rundir
from glm5lib.errors import ConfigError, NotebookFailedError
from glm5lib.report import NOTEBOOKS_STATUS, SERVER_INFO

__all__ = [
    "BACKENDS",
    "list_notebooks",
    "load_command",
    "notebooks_dir",
    "parse_parameter",
    "phase_log",
    "register_cli",
    "resolve_run_dir",
    "run_workbook",
    "save_server_info",
    "start_server",
    "stop_server",
]

#: Values of a notebook's ``BACKEND`` parameter, besides an http(s) URL to attach to.
BACKENDS = ("sim", "sglang", "command")

log = logging.getLogger(__name__)

#: File in a phase folder recording the command a ``command`` backend ran.
COMMAND = rundir.COMMAND

_NOTEBOOK_RE = re.compile(r"^(\d\d)-[\w-]+\.ipynb$")


def notebooks_dir() -> Path:
    """The workbook's notebooks folder (``notebooks/`` beside the package)."""
    return Path(__file__).resolve().parent.parent / "notebooks"


def list_notebooks(folder: str | Path | None = None) -> list[Path]:
    """The workbook's notebooks in run order (files named ``NN-verb-object.ipynb``)."""
    folder = Path(folder) if folder is not None else notebooks_dir()
    return sorted(p for p in folder.glob("*.ipynb") if _NOTEBOOK_RE.match(p.name))


def parse_parameter(text: str) -> tuple[str, Any]:
    """Parse one ``NAME=VALUE`` option; VALUE is a Python literal or, failing that, a string."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise ConfigError(
            f"parameter {text!r} is not NAME=VALUE (for example CONCURRENCIES=[1,64,256])",
            field="parameters",
        )
    try:
        value = ast.literal_eval(raw.strip())
    except (ValueError, SyntaxError):
        value = raw.strip()
    return name.upper(), value


def run_workbook(
    parameters: Mapping[str, Any] | None = None,
    *,
    run_dir: str | Path | None = None,
    only: Sequence[int] | None = None,
    notebooks: str | Path | None = None,
    kernel_name: str | None = None,
    progress: bool = True,
    report: bool = True,
) -> Path:
    """Execute the notebooks in order into a run folder and return that folder.

    ``only`` restricts the run to notebooks whose number ``NN`` is listed. Raises
    :class:`NotebookFailedError` naming the notebook and cell when one fails, after writing the
    report of what was done so far. ``report=False`` skips ``report.md``/``summary.json``.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    paths = list_notebooks(notebooks)
    if only:
        wanted = {int(n) for n in only}
        known = {int(_NOTEBOOK_RE.match(p.name).group(1)) for p in paths}
        missing = sorted(wanted - known)
        if missing:
            raise ConfigError(
                f"--only {missing} names no notebook; the workbook has {sorted(known)}",
                field="only",
                valid=[str(k) for k in sorted(known)],
            )
        paths = [p for p in paths if int(_NOTEBOOK_RE.match(p.name).group(1)) in wanted]
    out = Path(run_dir) if run_dir is not None else rundir.new_run_dir()
    out.mkdir(parents=True, exist_ok=True)
    params = dict(parameters or {})
    params["RUN_DIR"] = str(out.resolve())
    if not paths:
        log.warning("no notebooks found in %s; nothing to run", notebooks or notebooks_dir())
    status = _load_status(out)
    for path in paths:
        target = out / path.name
        log.info("running %s -> %s", path.name, target)
        started = time.time()
        entry = {"name": path.name, "status": "running", "started": started}
        status = [s for s in status if s.get("name") != path.name] + [entry]
        _save_status(out, status)
        try:
            pm.execute_notebook(
                str(path),
                str(target),
                parameters=params,
                kernel_name=kernel_name,
                cwd=str(path.parent),
                progress_bar=progress,
                report_mode=False,
            )
        except PapermillExecutionError as exc:
            entry.update(status="failed", seconds=round(time.time() - started, 1), cell=exc.exec_count,
                         error=f"{exc.ename}: {_first_line(exc.evalue)}")
            _save_status(out, status)
            if report:
                _write_report(out)
            raise NotebookFailedError(
                f"{path.name} failed in cell [{exc.exec_count}] ({_first_line(exc.source)!r}): "
                f"{exc.ename}: {exc.evalue} "
                f"(executed copy with the traceback: {target}; results so far are in {out})",
                notebook=path.name,
                cell=exc.exec_count,
                run_dir=str(out),
            ) from exc
        except BaseException as exc:
            # kernel died, KeyboardInterrupt...: keep the record of how far the run got
            entry.update(status="failed", seconds=round(time.time() - started, 1),
                         error=f"{type(exc).__name__}: {_first_line(str(exc))}")
            _save_status(out, status)
            if report:
                _write_report(out)
            raise
        entry.update(status="ok", seconds=round(time.time() - started, 1))
        _save_status(out, status)
    if report:
        _write_report(out)
    return out


def _load_status(out: Path) -> list[dict]:
    try:
        data = json.loads((out / NOTEBOOKS_STATUS).read_text())
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def _save_status(out: Path, status: list[dict]) -> None:
    (out / NOTEBOOKS_STATUS).write_text(json.dumps(status, indent=2) + "\n")


def _write_report(out: Path) -> Path | None:
    from glm5lib.report import write_report

    try:
        return write_report(out)
    except Exception:  # the run's own results matter more than its summary
        log.exception("report for %s could not be written", out)
        return None


def resolve_run_dir(value: str | Path | None) -> Path:
    """A notebook's ``RUN_DIR`` as a folder (created): a path, or a bare name under data/runs/.

    Notebooks run from ``notebooks/``, so a bare name like ``"interactive"`` means
    ``data/runs/interactive`` (or under ``GLM5_RUNS_DIR``), the same folder for every notebook.
    """
    if value is None or str(value).strip() == "":
        raise ConfigError("RUN_DIR is empty: give a folder path or a run name like 'interactive'",
                          field="RUN_DIR")
    path = Path(str(value)).expanduser()
    if not path.is_absolute() and len(path.parts) == 1 and path.name not in (".", ".."):
        path = rundir.new_run_dir(run_id=path.name)
    path.mkdir(parents=True, exist_ok=True)
    return path.resolve()


def _check_backend(backend: str) -> str:
    if backend in BACKENDS or str(backend).startswith(("http://", "https://")):
        return backend
    raise ConfigError(
        f"BACKEND {backend!r} is not valid: use 'sim' (the stand-in), 'sglang' (launch SGLang here), "
        f"'command' (launch any engine from ENGINE_COMMAND) or the http(s) URL of a running server to attach to",
        field="BACKEND",
        valid=[*BACKENDS, "http://HOST:PORT"],
    )


def start_server(
    backend: str,
    config,
    folder: str | Path,
    *,
    sim_profile: str | None = None,
    ready_timeout: float = 600.0,
    api_key: str | None = None,
    extra_args: Sequence[str] = (),
    command: Sequence[str] | None = None,
    command_changes: Mapping[str, Any] | None = None,
    model: str | None = None,
    attach_log: str | Path | None = None,
):
    """Launch (``sim``/``sglang``; ``command``: any engine from the argv template ``command``, see
    :func:`glm5lib.server.launch_command`) or attach to (a URL) the server of one phase.

    The server log goes to ``<folder>/server.log``; the configuration to ``config.json`` and
    the server's own ``/get_server_info`` to ``server_info.json`` (secrets masked). When
    attaching, ``attach_log`` is that server's log file if it is readable from here. Returns the
    :mod:`glm5lib.server` object (``Server`` or ``AttachedServer``); end the phase with
    :func:`stop_server`.
    """
    from glm5lib import server as server_mod

    backend = _check_backend(backend)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if backend == "command":
        if not command:
            raise ConfigError(
                "BACKEND 'command' needs ENGINE_COMMAND, an argv template such as "
                "['transformers', 'serve', '{model}', '--continuous-batching', '--port', '{port}']",
                field="ENGINE_COMMAND",
            )
        srv = server_mod.launch_command(
            [*command, *extra_args], model=model or None, log_path=folder / rundir.SERVER_LOG,
            ready_timeout=ready_timeout, api_key=api_key, changes=command_changes,
        )
        (folder / COMMAND).write_text(json.dumps(srv.info(), indent=2, default=str) + "\n")
    elif backend in BACKENDS:
        args = list(extra_args)
        if backend == "sim" and sim_profile:
            args = ["--sim-profile", sim_profile, *args]
        srv = server_mod.launch(config, backend=backend, log_path=folder / rundir.SERVER_LOG,
                                ready_timeout=ready_timeout, extra_args=args)
        config.save(folder / rundir.CONFIG)
    else:
        srv = server_mod.attach(backend, api_key=api_key, log_path=attach_log or None)
        cfg = getattr(srv, "config", None)
        if cfg is not None:
            cfg.save(folder / rundir.CONFIG)
    save_server_info(srv.base_url, folder, api_key=api_key)
    return srv


def stop_server(srv, folder: str | Path):
    """End a phase: stop a launched server (an attached one is left running) and return its
    parsed log (an empty ServerLog when the log is not readable here).

    An attached server's log is copied into ``<folder>/server.log`` so the run folder holds
    the evidence either way.
    """
    import shutil

    from glm5lib.logs import parse_log

    target = Path(folder) / rundir.SERVER_LOG
    server_log = srv.logs()
    srv.stop()
    source = getattr(srv, "log_path", None)
    if source is not None and Path(source).exists() and Path(source).resolve() != target.resolve():
        shutil.copyfile(source, target)
    if server_log is None:
        log.warning("no server log readable for %s: scheduler evidence is missing from this phase",
                    getattr(srv, "base_url", srv))
        return parse_log("")
    return server_log


def phase_log(folder: str | Path):
    """The parsed ``server.log`` of a phase folder; an empty ServerLog when there is none
    (an attached server whose log was not readable)."""
    from glm5lib.logs import parse_log

    path = Path(folder) / rundir.SERVER_LOG
    if not path.exists():
        log.warning("%s has no server log; scheduler evidence is missing", folder)
        return parse_log("")
    return parse_log(path)


def load_command(folder: str | Path) -> dict:
    """The ``command.json`` a ``command`` backend phase wrote (argv template, argv, model, engine)."""
    path = Path(folder) / COMMAND
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist: that phase was not launched with BACKEND 'command'",
                          field="BASELINE_PHASE") from None


def save_server_info(base_url: str, folder: str | Path, *, api_key: str | None = None) -> dict | None:
    """Write the server's ``/get_server_info`` (or ``/server_info``) to ``server_info.json``."""
    import urllib.error
    import urllib.request

    from glm5lib.logs import mask_secrets

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    for path in ("/get_server_info", "/server_info"):
        request = urllib.request.Request(base_url.rstrip("/") + path, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                info = json.loads(response.read())
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log.debug("%s%s: %s", base_url, path, exc)
            continue
        if isinstance(info, dict):
            info = mask_secrets(info)
            (Path(folder) / SERVER_INFO).write_text(json.dumps(info, indent=2, default=str) + "\n")
            return info
    log.warning("%s answers neither /get_server_info nor /server_info; no server_info.json", base_url)
    return None


def _first_line(source: str) -> str:
    lines = [line for line in (source or "").splitlines() if line.strip()]
    return lines[0][:80] if lines else ""


def _cmd_run(args) -> int:
    params = dict(parse_parameter(p) for p in args.parameter or [])
    try:
        only = [int(n) for n in args.only.split(",")] if args.only else None
    except ValueError:
        raise ConfigError(f"--only {args.only!r} is not a comma-separated list of notebook numbers, e.g. 2,4",
                          field="only") from None
    try:
        out = run_workbook(params, run_dir=args.run_dir, only=only, progress=not args.quiet,
                           report=not args.no_report, notebooks=args.notebooks)
    except NotebookFailedError as exc:
        if exc.run_dir:
            print(f"Workbook results so far are in {exc.run_dir}")
            report = Path(exc.run_dir) / rundir.REPORT
            if report.exists():
                print(f"Report (partial): {report}")
        raise
    print(f"Workbook results are in {out}")
    report = out / rundir.REPORT
    if report.exists():
        print(f"Report: {report}")
    return 0


def register_cli(sub) -> None:
    p = sub.add_parser("workbook", help="run the workbook's notebooks headless with papermill")
    wsub = p.add_subparsers(dest="workbook_command", metavar="ACTION", required=True)
    run = wsub.add_parser("run", help="execute the notebooks in order into a run folder")
    run.add_argument(
        "-p", "--parameter", action="append", metavar="NAME=VALUE",
        help="notebook parameter, a Python literal (repeatable), e.g. -p CONCURRENCIES=[1,64]",
    )
    run.add_argument("--run-dir", help="run folder (default: data/runs/<timestamp>)")
    run.add_argument("--only", help="comma-separated notebook numbers to run, e.g. 2,4")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    run.add_argument("--notebooks", help="folder of NN-*.ipynb notebooks (default: the workbook's)")
    run.add_argument("--no-report", action="store_true", help="do not write report.md/summary.json")
    run.set_defaults(func=_cmd_run)
