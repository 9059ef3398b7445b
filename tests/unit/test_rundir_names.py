"""Every run-folder file's name is written once, in glm5lib/rundir.py: the rest of the package
names it through rundir's constants, never as a literal of its own (docstrings may mention it)."""

from __future__ import annotations

import ast
from pathlib import Path

from glm5lib import rundir

PACKAGE = Path(rundir.__file__).resolve().parent

#: (module, literal) pairs that equal a run-folder name but name something else.
ALLOWED = {
    # a model folder's own config.json (Hugging Face's), not a phase's configuration
    ("loadgen/prompts.py", rundir.CONFIG),
    # the key of summary.json that lists the report's figures, not the figures folder
    ("report/write.py", rundir.FIGURES),
}


def _names() -> dict[str, str]:
    """rundir's file and folder names: {value: constant}."""
    return {value: name for name, value in vars(rundir).items() if name.isupper() and isinstance(value, str)}


def _docstrings(tree: ast.Module) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, kinds) and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def literal_names(source: str) -> list[tuple[int, str]]:
    """(line, literal) of each string constant in ``source``, docstrings aside, that is a
    run-folder name of rundir's."""
    tree = ast.parse(source)
    names, docs = _names(), _docstrings(tree)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
            and id(node) not in docs]


def test_rundir_names_its_files():
    names = _names()
    assert {"server.log", "sweep.csv", "step-profile.csv", "figures", "watched-standin.log"} <= set(names)
    assert all(name not in names for name in ("", "baseline")), "a name that is not a file's"


def test_a_planted_literal_is_found_and_a_docstring_is_not():
    source = '"""Reads sweep.csv."""\n\ndef f(run):\n    """The server.log."""\n    return run / "server.log"\n'
    assert literal_names(source) == [(5, "server.log")]
    assert literal_names("def f(run):\n    return run / rundir.SERVER_LOG\n") == []


def test_no_module_but_rundir_writes_a_run_folder_name():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative == "rundir.py":
            continue
        found += [f"glm5lib/{relative}:{line}: {value!r} (rundir.{_names()[value]})"
                  for line, value in literal_names(path.read_text()) if (relative, value) not in ALLOWED]
    assert found == [], "use rundir's constants:\n" + "\n".join(found)


def test_every_allowed_literal_is_still_there():
    # an allowance whose literal went away is dropped, so that it excuses nothing later
    for relative, value in ALLOWED:
        assert value in [v for _, v in literal_names((PACKAGE / relative).read_text())], (relative, value)
