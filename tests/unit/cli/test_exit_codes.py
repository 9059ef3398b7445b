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
