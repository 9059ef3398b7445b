from __future__ import annotations

import nbformat
import pytest

from glm5lib import workbook
from glm5lib.errors import ConfigError, NotebookFailedError


def _notebook(path, *sources):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("RUN_DIR = 'unset'\nVALUE = 1")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params] + [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def test_parse_parameter_reads_literals_and_strings():
    assert workbook.parse_parameter("concurrencies=[1, 64]") == ("CONCURRENCIES", [1, 64])
    assert workbook.parse_parameter("BACKEND=sim") == ("BACKEND", "sim")
    with pytest.raises(ConfigError, match="NAME=VALUE"):
        workbook.parse_parameter("no-equals-sign")


def test_runs_notebooks_in_order_and_passes_parameters(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    write = "import pathlib\npathlib.Path(RUN_DIR, '{name}').write_text(str(VALUE))"
    _notebook(nbs / "02-second.ipynb", write.format(name="b.txt"))
    _notebook(nbs / "01-first.ipynb", write.format(name="a.txt"))
    (nbs / "scratch.ipynb").write_text("not part of the workbook")
    out = workbook.run_workbook({"VALUE": 7}, run_dir=tmp_path / "run", notebooks=nbs, progress=False)
    assert (out / "a.txt").read_text() == "7"
    assert (out / "b.txt").read_text() == "7"
    assert (out / "01-first.ipynb").exists() and (out / "02-second.ipynb").exists()


def test_failed_notebook_stops_the_run_and_names_notebook_and_cell(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _notebook(nbs / "01-ok.ipynb", "import pathlib\npathlib.Path(RUN_DIR, 'kept.txt').write_text('x')")
    _notebook(nbs / "02-broken.ipynb", "x = 1", "raise RuntimeError('boom')")
    _notebook(nbs / "03-never.ipynb", "import pathlib\npathlib.Path(RUN_DIR, 'never.txt').write_text('x')")
    with pytest.raises(NotebookFailedError) as exc:
        workbook.run_workbook({}, run_dir=tmp_path / "run", notebooks=nbs, progress=False)
    assert exc.value.notebook == "02-broken.ipynb"
    # execution count as shown in the executed copy, which holds papermill's injected cell
    assert exc.value.cell == 4
    assert "boom" in str(exc.value) and "raise RuntimeError" in str(exc.value)
    assert (tmp_path / "run" / "kept.txt").exists()
    assert not (tmp_path / "run" / "never.txt").exists()


def test_only_rejects_unknown_numbers(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _notebook(nbs / "01-first.ipynb", "pass")
    with pytest.raises(ConfigError, match="names no notebook"):
        workbook.run_workbook({}, run_dir=tmp_path / "run", notebooks=nbs, only=[9], progress=False)
