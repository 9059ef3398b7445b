"""The test layout: unit tests launch nothing, and the tree mirrors the library."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
PACKAGE = TESTS.parent / "glm5lib"


def test_a_unit_test_cannot_start_a_process():
    with pytest.raises(AssertionError, match="belong in tests/integration/"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


def test_a_unit_test_cannot_start_a_server():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        with pytest.raises(AssertionError, match="listening socket"):
            sock.listen()


def test_unit_folders_are_library_packages():
    for folder in (TESTS / "unit").rglob("*"):
        if folder.is_dir() and folder.name != "__pycache__":
            package = PACKAGE / folder.relative_to(TESTS / "unit")
            assert (package / "__init__.py").is_file(), f"{folder} mirrors no package of glm5lib ({package})"


def test_every_test_file_is_in_one_of_the_two_trees():
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not loose, (f"{loose} at tests/: a test that starts no process or server goes in "
                       "tests/unit/<package>/ (mirroring glm5lib), any other in tests/integration/")


def test_every_test_file_has_a_basename_of_its_own():
    # the test folders are not packages: pytest refuses to collect two files of one name in one run
    names: dict[str, list[str]] = {}
    for path in TESTS.rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    assert not {n: p for n, p in names.items() if len(p) > 1}


def test_no_test_skips_for_want_of_glm5libs_own_modules():
    # importorskip of glm5lib itself turns a renamed module into silently skipped tests
    marker = "importorskip(" + '"glm5lib'
    found = [f"{p.relative_to(TESTS)}:{n}" for p in TESTS.rglob("*.py")
             for n, line in enumerate(p.read_text().splitlines(), 1) if marker in line]
    assert not found, found
