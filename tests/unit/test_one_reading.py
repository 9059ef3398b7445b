"""One reading of a phase folder: :func:`glm5lib.diagnose.evidence.load_evidence`.

The rules, the performance model, the report and the tuner receive a phase's ``Evidence`` (through
one ``EvidenceCache`` where they read a phase for several figures) and open none of the phase's
measurement files again (docs/architecture.md, "The evidence schema"). These read their source with
:mod:`ast`: no call that reads a file (``read_csv``, ``read_json``, ``parse_log``, ``load_config``,
``open``, ``read_text``...) is given the name of a phase's measurement file from
:mod:`glm5lib.rundir`, directly or through a name assigned from one (in the same function, or at
the module's top).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from glm5lib import rundir

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "glm5lib"

#: the files of a phase folder a measurement wrote (what load_evidence reads, and the phase's other
#: records of its server and load), by their names in glm5lib.rundir
PHASE_FILES = frozenset({"CONFIG", "COMMAND", "SERVER_INFO", "SERVER_LOG", "SWEEP", "REQUESTS", "GPU", "METRICS",
                         "POWER", "STEP_PROFILE", "STEP_PROFILE_LOG", "WATCH"})
#: calls that read a file given as an argument, or (a method) the path they are called on
READERS = frozenset({"read_csv", "read_json", "read_table", "read_text", "read_bytes", "open", "parse_log",
                     "load_config", "load_sweep", "load_requests", "_read_json", "_args_from_json_file"})
#: the readers of a phase: every module of these packages, and these modules
CHECKED = ("diagnose", "report", "tune")
#: the one reading itself
READING = "glm5lib.diagnose.evidence"
#: functions that read a phase's file themselves, each with why
ALLOWED: dict[tuple[str, str], str] = {
    ("glm5lib.diagnose.references", "_args_from_folder"):
        "the configuration of a reference (a shipped reference run, or another run's folder the user compares "
        "with) read under the reference's own name: what the phase is compared with, not the phase's evidence",
}


def _checked_modules() -> dict[str, Path]:
    out = {}
    for part in CHECKED:
        target = PACKAGE / part
        for path in sorted(target.rglob("*.py")) if target.is_dir() else [target]:
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _rundir_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names the module binds to glm5lib.rundir, names it binds to one of its phase-file constants)."""
    modules, constants = {"glm5lib.rundir"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "glm5lib":
            modules |= {a.asname or a.name for a in node.names if a.name == "rundir"}
        elif isinstance(node, ast.ImportFrom) and node.module == "glm5lib.rundir":
            constants |= {a.asname or a.name for a in node.names if a.name in PHASE_FILES}
        elif isinstance(node, ast.Import):
            modules |= {a.asname for a in node.names if a.name == "glm5lib.rundir" and a.asname}
    return modules, constants


def _names_a_phase_file(node: ast.AST, modules: set[str], names: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in PHASE_FILES and ast.unparse(sub.value) in modules:
            return True
        if isinstance(sub, ast.Name) and sub.id in names:
            return True
    return False


def _bindings(scope: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(target, value) of every name binding in ``scope``: assignments, loops, comprehensions, ``with``."""
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign):
            yield from ((t, node.value) for t in node.targets)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            yield node.target, node.value
        elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            yield node.target, node.iter
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            yield node.optional_vars, node.context_expr


def _tainted(scope: ast.AST, modules: set[str], names: set[str]) -> set[str]:
    """``names`` and every name ``scope`` binds to a value naming a phase file (or such a name)."""
    names = set(names)
    changed = True
    while changed:
        changed = False
        for target, value in list(_bindings(scope)):
            if _names_a_phase_file(value, modules, names):
                new = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} - names
                names |= new
                changed = changed or bool(new)
    return names


def _reads(call: ast.Call) -> list[ast.AST]:
    """What a reading call reads from: its arguments, and the path a method is called on."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in READERS:
        return []
    return [*call.args, *(k.value for k in call.keywords), *([func.value] if isinstance(func, ast.Attribute) else [])]


def phase_file_reads(source: str) -> list[tuple[int, str]]:
    """(line, enclosing function) of every call in ``source`` that reads a phase's measurement file."""
    tree = ast.parse(source)
    modules, constants = _rundir_names(tree)
    top = ast.Module(body=[n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                      ast.ClassDef))], type_ignores=[])
    module_names = _tainted(top, modules, constants)
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, function: str, names: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child.name, _tainted(child, modules, names))
                continue
            if isinstance(child, ast.Call) and any(_names_a_phase_file(a, modules, names) for a in _reads(child)):
                found.append((child.lineno, function))
            visit(child, function, names)

    visit(tree, "<module>", module_names)
    return sorted(set(found))


def test_no_reader_of_a_phase_opens_its_measurement_files_beside_the_evidence():
    found = []
    for name, path in _checked_modules().items():
        if name == READING:
            continue
        for line, function in phase_file_reads(path.read_text()):
            if (name, function) not in ALLOWED:
                found.append(f"{path.relative_to(ROOT)}:{line} ({function})")
    assert not found, ("phase files read outside glm5lib.diagnose.evidence (take the phase's Evidence, or the "
                       "report's / tuner's EvidenceCache, instead):\n" + "\n".join(found))


def test_each_allowed_reading_is_still_there_and_the_checked_names_are_rundirs():
    modules = _checked_modules()
    for module, function in ALLOWED:
        assert module in modules, module
        assert function in {f for _, f in phase_file_reads(modules[module].read_text())}, (module, function)
    assert READING in modules
    assert set(rundir.__all__) >= PHASE_FILES


def test_the_check_can_fail():
    source = '''
import json
import pandas as pd
from glm5lib import rundir
from glm5lib import rundir as rd
from glm5lib.rundir import SERVER_LOG as LOG
from glm5lib.logs import parse_log

LATER = rundir.GPU

def direct(folder):
    return pd.read_csv(folder / rundir.SWEEP)

def through_a_name(folder):
    path = folder / rundir.REQUESTS
    again = path
    return pd.read_json(again, lines=True)

def on_the_path(folder):
    return json.loads((folder / rd.CONFIG).read_text())

def imported(folder):
    return parse_log(folder / LOG)

def at_the_top(folder):
    return pd.read_csv(folder / LATER)

def in_a_loop(folder):
    for name in (rundir.METRICS,):
        with open(folder / name) as f:
            return f.read()

def fine(folder, path):
    exists = (folder / rundir.SWEEP).is_file()
    findings = pd.read_csv(folder / rundir.FINDINGS)
    return exists, findings, pd.read_csv(path)
'''
    assert phase_file_reads(source) == [(12, "direct"), (17, "through_a_name"), (20, "on_the_path"),
                                        (23, "imported"), (26, "at_the_top"), (30, "in_a_loop")]
