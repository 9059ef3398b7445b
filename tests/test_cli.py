from __future__ import annotations

import subprocess
import sys

import pytest

import glm5lib
from glm5lib.cli import main


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert glm5lib.__version__ in capsys.readouterr().out


def test_help_lists_the_registered_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "usage: glm5" in out
    assert "workbook" in out


def test_unknown_command_is_rejected():
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2


def test_console_script_runs_as_a_module():
    out = subprocess.run(
        [sys.executable, "-m", "glm5lib", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"glm5lib {glm5lib.__version__}"


def test_output_cut_short_by_the_reader_is_not_an_error(monkeypatch, capfd):
    # `glm5 env --json | head -1`: the reader closes the pipe before glm5 has written everything
    import argparse

    import glm5lib.cli as cli

    def handler(args):
        raise BrokenPipeError(32, "Broken pipe")

    parser = argparse.ArgumentParser(prog="glm5")
    parser.set_defaults(func=handler, verbose=False)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    assert cli.main([]) == 0
    assert "Traceback" not in capfd.readouterr().err
