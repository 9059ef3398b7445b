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
import contextlib
import difflib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from glm5lib import rundir
from glm5lib.errors import ConfigError, NotebookFailedError
from glm5lib.loadgen.settings import check_concurrencies
from glm5lib.loadgen.sweep import HEADLESS_ENV
from glm5lib.phase import (
    BACKENDS,
    load_command,
    phase_log,
    save_server_info,
    start_server,
    stop_server,
)
from glm5lib.report import write_report
from glm5lib.rundir import NOTEBOOKS_STATUS

__all__ = [
    "BACKENDS",
    "check_parameters",
    "declared_parameters",
    "list_notebooks",
    "load_command",
    "notebooks_dir",
    "parse_parameter",
    "phase_log",
    "resolve_run_dir",
    "run_workbook",
    "save_server_info",
    "start_server",
    "stop_server",
]

log = logging.getLogger(__name__)

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


def declared_parameters(paths: Sequence[Path]) -> dict[str, dict[str, Any]]:
    """Every parameter the notebooks ``paths`` declare in their ``parameters`` cells: name ->
    ``defaults`` (each notebook's literal; one that is not a literal is left out), ``help`` (its
    comment) and ``notebooks``."""
    import papermill as pm

    out: dict[str, dict[str, Any]] = {}
    for path in paths:
        for name, spec in pm.inspect_notebook(str(path)).items():
            entry = out.setdefault(name, {"defaults": [], "help": spec.get("help") or "", "notebooks": []})
            try:
                entry["defaults"].append(ast.literal_eval(spec.get("default") or "None"))
            except (ValueError, SyntaxError):
                pass
            entry["notebooks"].append(path.name)
    return out


# a parameter's kind, read off its default: what a value must be to take its place
_KINDS: tuple[tuple[type | tuple[type, ...], tuple[type, ...], str], ...] = (
    (bool, (bool,), "True or False"),
    (int, (int,), "a whole number"),
    (float, (int, float), "a number"),
    (str, (str,), "a string"),
    ((list, tuple), (list, tuple), "a list"),
    (dict, (dict,), "a dict"),
)


def _kind(default: Any) -> tuple[tuple[type, ...], str] | None:
    """What a value must be to take ``default``'s place (None: anything, for a None default)."""
    for kind, accepted, words in _KINDS:
        if isinstance(default, kind):
            return accepted, words
    return None


def _fits(value: Any, default: Any) -> bool:
    kind = _kind(default)
    if kind is None:
        return True
    accepted, _words = kind
    return isinstance(value, accepted) and (bool in accepted or not isinstance(value, bool))


def check_parameters(params: Mapping[str, Any], paths: Sequence[Path]) -> None:
    """A :class:`ConfigError` before any notebook runs for a parameter no notebook declares (with
    the nearest names) or a value that cannot take its default's place (``CONCURRENCIES="abc"``:
    a list of whole numbers of at least 1)."""
    declared = declared_parameters(paths)
    for name, value in params.items():
        if name == "RUN_DIR":
            continue
        if name not in declared:
            near = difflib.get_close_matches(name, list(declared), n=3)
            raise ConfigError(
                f"parameter {name} is declared by none of the notebooks run"
                + (f"; did you mean {' or '.join(near)}?" if near else "")
                + f" (they take {', '.join(sorted(declared))})", field=name, valid=sorted(declared))
        spec = declared[name]
        where = f"parameter {name}={value!r} is not valid"
        hint = f" ({spec['help']})" if spec["help"] else ""
        defaults = spec["defaults"]
        if defaults and not any(_fits(value, d) for d in defaults):
            kind = _kind(defaults[0])
            raise ConfigError(f"{where}: it takes {kind[1] if kind else 'a Python literal'}, like its default "
                              f"{defaults[0]!r}{hint}", field=name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{where}: it takes a finite number{hint}", field=name)
        if name.endswith("CONCURRENCIES") and isinstance(value, (list, tuple)):
            if not value:
                raise ConfigError(f"{where}: give at least one level, e.g. [1, 64, 256]", field=name)
            check_concurrencies(value, name=f"{name} level", field=name)


@contextlib.contextmanager
def _headless_kernel() -> Iterator[None]:
    """The kernels started meanwhile know they run with no front end (they inherit the environment)."""
    before = os.environ.get(HEADLESS_ENV)
    os.environ[HEADLESS_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(HEADLESS_ENV, None)
        else:
            os.environ[HEADLESS_ENV] = before


def run_workbook(
    parameters: Mapping[str, Any] | None = None,
    *,
    run_dir: str | Path | None = None,
    only: Sequence[int] | None = None,
    notebooks: str | Path | None = None,
    kernel_name: str | None = None,
    progress: bool = True,
    report: bool = True,
    on_status: Callable[[list[dict]], None] | None = None,
) -> Path:
    """Execute the notebooks in order into a run folder and return that folder.

    ``only`` restricts the run to notebooks whose number ``NN`` is listed. The parameters are
    checked against what those notebooks declare before anything runs (:func:`check_parameters`).
    Raises
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
    check_parameters(dict(parameters or {}), paths)
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
        _save_status(out, status, on_status)
        try:
            with _headless_kernel():
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
            _save_status(out, status, on_status)
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
            _save_status(out, status, on_status)
            if report:
                _write_report(out)
            raise
        entry.update(status="ok", seconds=round(time.time() - started, 1))
        _save_status(out, status, on_status)
    if report:
        _write_report(out)
    return out


def _load_status(out: Path) -> list[dict]:
    try:
        data = json.loads((out / NOTEBOOKS_STATUS).read_text())
    except (OSError, ValueError):
        return []
    return data if isinstance(data, list) else []


def _save_status(out: Path, status: list[dict], on_status: Callable[[list[dict]], None] | None = None) -> None:
    (out / NOTEBOOKS_STATUS).write_text(json.dumps(status, indent=2) + "\n")
    if on_status is not None:
        try:
            on_status([dict(s) for s in status])
        except Exception:  # a watcher must never cost the run
            log.warning("the notebook status callback failed; the run goes on", exc_info=True)


def _write_report(out: Path) -> Path | None:
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


def _first_line(source: str) -> str:
    lines = [line for line in (source or "").splitlines() if line.strip()]
    return lines[0][:80] if lines else ""
