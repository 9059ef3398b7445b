"""Strip volatile output from the workbook's notebooks before they are committed.

Removes outputs and execution counts from every code cell except those whose first line is
``# NBVAL_CHECK_OUTPUT`` (deterministic cells whose output nbval compares; their outputs are
kept, with the cell's position as a stable execution count), the cells papermill injects (tag ``injected-parameters``), papermill's and Jupyter's
per-run metadata, and widget state. Cell tags (``parameters``) are kept. The notebook metadata is
set to what JupyterLab writes when it opens a notebook with ipykernel's ``python3`` kernel (its
kernelspec and the kernel's language_info), so opening a committed notebook and letting it
autosave leaves the file as it was.

    python scripts/strip_notebooks.py                 # strip notebooks/*.ipynb in place
    python scripts/strip_notebooks.py --check         # exit 1 and list notebooks that need it (CI)
    python scripts/strip_notebooks.py --from RUN_DIR  # refresh the checked cells' outputs from
                                                      # the executed copies in a run folder
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3},
    "file_extension": ".py",
    "mimetype": "text/x-python",
    "name": "python",
    "nbconvert_exporter": "python",
    "pygments_lexer": "ipython3",
}
_CELL_META_DROP = ("execution", "papermill", "collapsed", "scrolled", "ExecuteTime")


def checked(cell) -> bool:
    return cell.cell_type == "code" and cell.source.lstrip().startswith(CHECK_MARK)


def strip(nb):
    """Return ``nb`` without volatile content (modifies it in place)."""
    nb.cells = [c for c in nb.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    code_index = 0
    for cell in nb.cells:
        code_index += cell.cell_type == "code"
        for key in _CELL_META_DROP:
            cell.metadata.pop(key, None)
        if not cell.metadata.get("tags", True):
            cell.metadata.pop("tags")
        if not cell.get("id"):
            # A stable id, kept once given: JupyterLab adds one to any cell without, which would
            # mark a freshly opened notebook as modified.
            cell["id"] = _new_id(nb, cell)
        if cell.cell_type != "code":
            continue
        cell.execution_count = None
        if checked(cell):
            # nbval skips comparing cells it considers unrun (no count): give a stable one
            cell.execution_count = code_index
            for out in cell.outputs:
                if "execution_count" in out:
                    out["execution_count"] = None
                out.pop("metadata", None) if out.get("output_type") == "stream" else None
        else:
            cell.outputs = []
    version = (nb.metadata.get("language_info") or {}).get("version") or platform.python_version()
    # Exactly what JupyterLab writes on opening the notebook with ipykernel's "python3" kernel,
    # so opening one and letting it autosave changes nothing. The Python version is kept as
    # committed (on another Python, JupyterLab rewrites that one line).
    nb.metadata = {"kernelspec": dict(KERNELSPEC), "language_info": {**LANGUAGE_INFO, "version": version}}
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nb


def _new_id(nb, cell) -> str:
    taken = {c.get("id") for c in nb.cells}
    digest = hashlib.sha1(cell.source.encode()).hexdigest()
    for width in range(8, 41):
        if digest[:width] not in taken:
            return digest[:width]
    return f"{digest}-{len(taken)}"


def _text(nb) -> str:
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: notebooks/*.ipynb)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any notebook needs stripping")
    parser.add_argument("--from", dest="source", type=Path, metavar="RUN_DIR",
                        help="read executed copies of the notebooks from this run folder")
    args = parser.parse_args(argv)
    targets = args.paths or sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
    dirty = []
    for target in targets:
        if not target.exists():
            print(f"{target}: missing", file=sys.stderr)
            return 2
        original = target.read_text()
        nb = nbformat.read(target, as_version=4)
        if args.source:
            executed = args.source / target.name
            if not executed.exists():
                print(f"{executed}: missing", file=sys.stderr)
                return 2
            outputs = {c.source: c.outputs for c in nbformat.read(executed, as_version=4).cells
                       if c.cell_type == "code"}
            for cell in nb.cells:
                if checked(cell) and cell.source in outputs:
                    cell.outputs = outputs[cell.source]
        text = _text(strip(nb))
        if text == original:
            continue
        dirty.append(target)
        if not args.check:
            target.write_text(text)
    for target in dirty:
        print(f"{'needs stripping' if args.check else 'stripped'}: {target}")
    return 1 if (args.check and dirty) else 0


if __name__ == "__main__":
    sys.exit(main())
