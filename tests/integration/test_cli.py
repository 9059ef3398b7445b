from __future__ import annotations

import json
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


# Runs `glm5 --help` and `glm5 COMMAND --help` for every registered command in a fresh
# interpreter, and reports which heavy modules each one had loaded by then.
_HELP_PROBE = """
import contextlib, io, json, sys
from glm5lib.cli import build_parser, main
HEAVY = ("pandas", "aiohttp", "matplotlib", "numpy")
commands = sorted(build_parser()._subparsers._group_actions[0].choices)
loaded = {}
for argv in [["--help"], *([c, "--help"] for c in commands)]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main(argv)
    loaded[" ".join(argv)] = [m for m in HEAVY if m in sys.modules]
print(json.dumps({"commands": commands, "loaded": loaded}))
"""


def test_help_loads_no_heavy_library_module():
    import json

    out = subprocess.run([sys.executable, "-c", _HELP_PROBE], capture_output=True, text=True, check=True)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"workbook", "diagnose", "logs", "sweep", "launch"} <= set(probe["commands"])
    assert {argv: mods for argv, mods in probe["loaded"].items() if mods} == {}


def test_engine_and_backend_names_are_checked_by_the_handlers(tmp_path, capsys):
    log = tmp_path / "server.log"
    log.write_text("[2025-01-01 00:00:00] x\n")
    assert main(["logs", str(log), "--engine", "tgi"]) == 2
    assert "--engine 'tgi': valid values are auto, " in capsys.readouterr().err
    assert main(["launch", "--backend", "tgi", "glm5-baseline"]) == 2
    assert "--backend 'tgi': valid values are sim, sglang, vllm, transformers, command" in capsys.readouterr().err


# --------------------------------------------------------------------------- conventions every command keeps


def test_verbose_works_before_and_after_the_sub_command():
    from glm5lib.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["-v", "logs", "x.log"]).verbose is True
    assert parser.parse_args(["logs", "x.log", "-v"]).verbose is True
    assert parser.parse_args(["config", "show", "glm5-baseline", "--verbose"]).verbose is True
    assert parser.parse_args(["logs", "x.log"]).verbose is False


def test_launch_help_lists_every_registered_engine(capsys):
    from glm5lib import engines

    with pytest.raises(SystemExit):
        main(["launch", "--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in engines.names())


def test_failures_exit_1_naming_the_input_and_usage_errors_exit_2(tmp_path, capsys):
    assert main(["logs", str(tmp_path / "nope.log")]) == 1
    assert "nope.log" in capsys.readouterr().err
    assert main(["launch", "--backend", "vllm"]) == 2
    assert "--backend vllm needs a config" in capsys.readouterr().err
    assert main(["launch", "--backend", "command"]) == 2
    assert "argv template after '--'" in capsys.readouterr().err
    assert main(["launch", "--backend", "vllm", "no-such-vllm-config"]) == 1
    assert "no-such-vllm-config" in capsys.readouterr().err


def test_sweep_takes_no_secret_from_the_command_line(tmp_path, capsys):
    url = "http://127.0.0.1:9"
    assert main(["sweep", url, "--api-key", "s3cret", "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "GLM5_API_KEY" in err and "--api-key-file" in err and "s3cret" not in err
    assert main(["sweep", url, "--api-key-file", str(tmp_path / "missing"), "--run-dir", str(tmp_path / "r")]) == 1
    assert "--api-key-file" in capsys.readouterr().err and not (tmp_path / "r").exists()
    from glm5lib.cli import build_parser

    args = build_parser().parse_args(["sweep", url, "-q"])
    assert args.quiet is True and build_parser().parse_args(["sweep", url, "--no-progress"]).quiet is True


def _sub_parsers(parser, path=()):
    """(the words of a sub-command, its parser) for every sub-command, at every level."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield (*path, name), child
                yield from _sub_parsers(child, (*path, name))


def _draws_progress(handler) -> tuple[bool, bool]:
    """(whether ``handler``, or a function of its module it calls, draws progress lines: passes
    ``progress=`` on, names ``"progress"`` in the keywords it passes, or uses glm5lib.progress;
    whether it reads ``args.quiet``)."""
    import ast
    import inspect

    module = ast.parse(inspect.getsource(inspect.getmodule(handler)))
    functions = {n.name: n for n in module.body if isinstance(n, ast.FunctionDef)}
    seen, todo, draws, quiet = set(), [handler.__name__], False, False
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        for node in ast.walk(functions[name]):
            draws |= isinstance(node, ast.keyword) and node.arg == "progress"
            draws |= isinstance(node, ast.Dict) and any(
                isinstance(k, ast.Constant) and k.value == "progress" for k in node.keys)
            draws |= isinstance(node, ast.ImportFrom) and node.module == "glm5lib.progress"
            quiet |= isinstance(node, ast.Attribute) and node.attr == "quiet"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                todo.append(node.func.id)
    return draws, quiet


def test_every_command_that_draws_progress_lines_takes_quiet():
    from glm5lib.cli import build_parser

    drawing = {}
    for words, parser in _sub_parsers(build_parser()):
        handler = parser._defaults.get("func")
        if handler is not None and _draws_progress(handler)[0]:
            drawing[" ".join(words)] = (parser, _draws_progress(handler)[1])
    assert {"sweep", "workbook run", "tune", "logs"} <= set(drawing)
    for command, (parser, reads_quiet) in drawing.items():
        options = {s: a for a in parser._actions for s in a.option_strings}
        assert "-q" in options and "--quiet" in options, f"glm5 {command} draws progress lines but has no -q/--quiet"
        assert options["-q"].dest == "quiet" and reads_quiet, f"glm5 {command}'s handler does not read args.quiet"


#: A command line of each command that takes ``--set FIELD=VALUE``, less the ``--set``.
_SET_COMMANDS = {
    "launch": ["launch", "glm5-baseline", "--backend", "sim"],
    "config show": ["config", "show", "glm5-baseline"],
    "config argv": ["config", "argv", "glm5-baseline", "--json"],
    "config diff": ["config", "diff", "glm5-baseline", "glm5-fix"],
    "predict": ["predict", "RUN", "--phase", "baseline", "--concurrency", "64"],
}


def test_the_commands_with_set_are_those_checked_for_secrets():
    from glm5lib.cli import build_parser

    with_set = {" ".join(words) for words, parser in _sub_parsers(build_parser())
                if any("--set" in a.option_strings for a in parser._actions)}
    assert with_set == set(_SET_COMMANDS)


@pytest.fixture
def no_launch(monkeypatch):
    """A refused command line launches nothing: a launch fails the test at once instead."""
    from glm5lib.engines.sglang import launcher

    def spawn(*args, **kwargs):
        raise AssertionError("the command launched a server")

    monkeypatch.setattr(launcher, "spawn_ready", spawn)


@pytest.mark.parametrize("command", sorted(_SET_COMMANDS))
@pytest.mark.parametrize("assignment", ["api_key=s3cret", "--admin-api-key=s3cret", "hf_token=s3cret"])
def test_set_takes_no_secret_from_the_command_line(command, assignment, tmp_path, capsys, no_launch):
    argv = [str(tmp_path / "run") if word == "RUN" else word for word in _SET_COMMANDS[command]]
    assert main([*argv, f"--set={assignment}"]) == 2
    err = capsys.readouterr().err
    name = assignment.partition("=")[0]
    assert f"--set {name} would put the secret in the process list" in err
    assert "GLM5_API_KEY" in err and "--api-key-file" in err and "s3cret" not in err


def test_launch_takes_the_server_key_from_the_environment_or_a_file_only(tmp_path, capsys, no_launch):
    for argv in (["launch", "glm5-baseline", "--backend", "sim", "--", "--api-key", "s3cret"],
                 ["launch", "glm5-baseline", "--backend", "sim", "--", "--api-key=s3cret"],
                 ["launch", "--backend", "vllm", "vllm-capped", "--", "--api-key", "s3cret"],
                 ["launch", "glm5-baseline", "--backend", "sim", "--api-key", "s3cret"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "--api-key would put the secret in the process list" in err and "s3cret" not in err
    assert main(["launch", "glm5-baseline", "--api-key-file", str(tmp_path / "missing")]) == 1
    assert "--api-key-file" in capsys.readouterr().err
    assert main(["launch", "--backend", "vllm", "vllm-capped", "--set", "api-key=s3cret"]) == 2
    assert "--set api-key would put" in capsys.readouterr().err


def test_one_diff_verb_raw_and_the_deprecated_config_diff(capsys):
    assert main(["diff", "--raw", "glm5-baseline", "glm5-fix", "--exit-code"]) == 1
    raw = capsys.readouterr()
    assert "max_running_requests" in raw.out and "deprecated" not in raw.err
    assert main(["config", "diff", "glm5-baseline", "glm5-fix"]) == 0
    old = capsys.readouterr()
    assert old.out == raw.out and "'glm5 config diff' is deprecated: use 'glm5 diff --raw" in old.err


def test_diagnose_takes_the_run_folder_as_every_command_spells_it(tmp_path, capsys):
    assert main(["diagnose", "--run-dir", str(tmp_path / "missing")]) == 1
    assert "missing" in capsys.readouterr().err
    assert main(["diagnose"]) == 2
    assert "glm5 diagnose RUN_DIR" in capsys.readouterr().err
    assert main(["diagnose", str(tmp_path / "a"), "--run-dir", str(tmp_path / "b")]) == 2


@pytest.mark.slow
def test_sweep_with_server_log_gives_diagnose_the_same_evidence_as_the_workbook(tmp_path, capsys):
    """glm5 sweep URL --server-log LOG carries the log (and the host's environment) into the run
    folder, so glm5 diagnose reads the scheduler lines and leads with the cap, as the workbook does."""
    from glm5lib.engines.sim import run_standin

    log = tmp_path / "server.log"
    run = tmp_path / "run"
    with run_standin("--max-running-requests", "8", "--decode-log-interval", "4", "--enable-metrics",
                     "--sim-profile", "glm5-nvfp4-8x-rtxpro6000", log_path=log) as srv:
        assert main(["sweep", srv.base_url, "-c", "2,32", "-d", "3", "--input-len", "64", "--output-len", "32",
                     "--warmup", "0", "--server-log", str(log), "--run-dir", str(run), "--phase", "baseline",
                     "-q"]) == 0
    assert (run / "baseline" / "server.log").read_text().startswith(log.read_text()[:200])
    env = json.loads((run / "environment.json").read_text())
    assert env["source"] == "sim" and len(env["gpus"]) == 8
    capsys.readouterr()
    assert main(["diagnose", str(run), "--phase", "baseline", "--json", "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "server.log missing" not in out
    findings = json.loads(out)["findings"] if isinstance(json.loads(out), dict) else json.loads(out)
    assert findings[0]["rule"] == "concurrency_cap", findings[0]


def test_sweep_refuses_a_server_log_that_does_not_exist(tmp_path, capsys):
    assert main(["sweep", "http://127.0.0.1:9", "--server-log", str(tmp_path / "nope.log"),
                 "--run-dir", str(tmp_path / "r")]) == 1
    assert "--server-log" in capsys.readouterr().err


class _Launched(Exception):
    """Raised in place of a launch: the config a command would have launched."""


def test_launch_hands_the_server_the_key_from_the_environment_or_a_file(tmp_path, monkeypatch):
    from glm5lib.engines import sglang

    def launch(config, **kwargs):
        raise _Launched(config)

    monkeypatch.setattr(sglang, "launch", launch, raising=False)
    monkeypatch.setenv("GLM5_API_KEY", "from-env")
    with pytest.raises(_Launched) as launched:
        main(["launch", "glm5-baseline", "--backend", "sim"])
    assert launched.value.args[0].get("api_key") == "from-env"
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    with pytest.raises(_Launched) as launched:
        main(["launch", "glm5-baseline", "--backend", "sim", "--api-key-file", str(key_file)])
    assert launched.value.args[0].get("api_key") == "from-file"
    monkeypatch.delenv("GLM5_API_KEY")
    with pytest.raises(_Launched) as launched:
        main(["launch", "glm5-baseline", "--backend", "sim"])
    assert not launched.value.args[0].get("api_key")
