"""What a server process is started from: CommandLaunch checked when made, ProcessSpec keeping
secrets out of its repr, neither starting anything."""

from __future__ import annotations

import dataclasses

import pytest

from glm5lib.errors import ConfigError
from glm5lib.server.command import CommandLaunch
from glm5lib.server.process import READY_LINE, ProcessSpec

SIM = ["{python}", "-m", "glm5lib.sim", "--port", "{port}"]


def test_a_command_launch_is_checked_when_made_naming_the_field():
    cases = [
        (lambda: CommandLaunch("engine serve"), "argv_template"),
        (lambda: CommandLaunch([]), "argv_template"),
        (lambda: CommandLaunch(["engine", "{where}"]), "argv_template"),
        (lambda: CommandLaunch(SIM, ready_path="health"), "ready_path"),
        (lambda: CommandLaunch(SIM, changes=["--x"]), "changes"),
    ]
    for make, field in cases:
        with pytest.raises(ConfigError) as info:
            make()
        assert info.value.field == field, (field, info.value)
    with pytest.raises(TypeError, match="readypath"):
        CommandLaunch(SIM, readypath="/health")  # type: ignore[call-arg]


def test_the_template_takes_its_changes_and_its_port_is_known_or_refused():
    launch = CommandLaunch(SIM, changes={"max_running_requests": 8})
    assert launch.argv_template == tuple(SIM) and launch.template() == [*SIM, "--max-running-requests", "8"]
    assert launch.fixed_port(launch.template()) is None  # {port}: a free one, or the one given
    fixed = CommandLaunch(["engine", "--port", "8001"])
    assert fixed.fixed_port(fixed.template()) == 8001
    with pytest.raises(ConfigError) as info:
        CommandLaunch(["engine", "--port", "8001"], port=9000)
    assert info.value.field == "port"
    with pytest.raises(ConfigError) as info:
        CommandLaunch(["engine", "serve"])
    assert info.value.field == "argv_template"
    assert CommandLaunch(["engine", "serve"], port=8002).fixed_port(["engine", "serve"]) is None


def test_secrets_stay_out_of_the_specs_reprs():
    launch = CommandLaunch(SIM, api_key="sk-secret-123456", env={"HF_TOKEN": "hf-secret-abcdef"})
    spec = ProcessSpec(argv=["x"], env={"HF_TOKEN": "hf-secret-abcdef"}, config=None, backend="command",
                       base_url="http://127.0.0.1:1", log_path="l", secrets=["sk-secret-123456"])
    for shown in (repr(launch), repr(spec)):
        assert "secret" not in shown
    assert spec.ready_line == READY_LINE and dataclasses.replace(spec, ready_line=None).ready_line is None
