"""The exit codes docs/architecture.md states for every sub-command beyond 0, 1 and 2."""

from __future__ import annotations

from glm5lib import cli
from glm5lib.cli import telemetry


def test_an_interrupted_command_exits_130_and_says_so(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(telemetry, "_cmd_env", interrupted)
    assert cli.main(["env"]) == 130
    assert "glm5: interrupted" in capsys.readouterr().err


def test_a_misspelt_option_exits_2_naming_the_option_meant(capsys):
    import pytest

    with pytest.raises(SystemExit) as exited:
        cli.main(["workbook", "run", "--run-dri", "/tmp/nowhere"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --run-dri /tmp/nowhere; --run-dri: did you mean --run-dir?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["diagnose", "run", "--bogus"])
    err = capsys.readouterr().err
    assert "unrecognized arguments: --bogus" in err and "did you mean" not in err
