"""Tests for glm5lib.server: launch, readiness, failure causes, stop, restart, attach.

Two kinds of real child processes: the stand-in (``python -m glm5lib.sim``) for the behaviour
the workbook relies on, and small scripts standing in for the interpreter (``python=``) for
process-handling edge cases the stand-in does not produce (a server that ignores SIGTERM, one
whose child leaves the process group). Every test checks that no process outlives it.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import sys
import textwrap
import threading
import time

import psutil
import pytest

from glm5lib import engines, http
from glm5lib import server as srv
from glm5lib.engines import sglang
from glm5lib.engines.sglang.config import ServerConfig
from glm5lib.errors import ConfigError, ServerLaunchError
from glm5lib.server.ports import port_in_use

SIM_PROFILE = "glm5-nvfp4-8x-rtxpro6000"


def _descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(autouse=True)
def _no_leftovers(no_leftover_processes):
    """Every test checks that no process it started outlives it (see conftest)."""
    yield


def _fake_launch(fake_python, tmp_path, mode, **kw):
    kw.setdefault("ready_timeout", 20)
    env = {"FAKE_MODE": mode, **kw.pop("env", {})}
    return sglang.launch(
        ServerConfig(model_path="m"), backend="sim", python=fake_python,
        log_path=tmp_path / "server.log", env=env, **kw,
    )


def test_ready_server_stops_cleanly(fake_python, tmp_path):
    server = _fake_launch(fake_python, tmp_path, "ready")
    assert server.alive() and server.healthy()
    assert server.base_url == f"http://127.0.0.1:{server.port}"
    assert srv.live_servers() == [server]
    assert server.ready_at >= server.started_at
    assert "The server is fired up" in server.log_path.read_text()
    code = server.stop(grace=5)
    assert code == -signal.SIGTERM
    assert not server.alive() and server.crash_cause() is None
    assert server.stop() == code  # idempotent


def test_exit_before_ready_is_reported_at_once(fake_python, tmp_path):
    started = time.monotonic()
    with pytest.raises(ServerLaunchError) as info:
        _fake_launch(fake_python, tmp_path, "exit3", ready_timeout=60)
    assert time.monotonic() - started < 30  # not the 60 s timeout, on a busy machine too
    err = info.value
    assert err.cause == "exited" and err.exit_code == 3
    assert "something went wrong" in err.log_lines
    assert err.log_path == str(tmp_path / "server.log")


def test_fatal_line_while_alive_fails_fast(fake_python, tmp_path):
    started = time.monotonic()
    with pytest.raises(ServerLaunchError) as info:
        _fake_launch(fake_python, tmp_path, "oom-alive", ready_timeout=60)
    assert time.monotonic() - started < 30  # not the 60 s timeout
    assert info.value.cause == "oom"  # the specific cause, not the scheduler exception
    assert any("Not enough memory" in line for line in info.value.log_lines)


@pytest.mark.parametrize(
    ("mode", "cause"),
    [("port-log", "port_in_use"), ("import-error", "import_error"), ("no-gpu", "no_gpu")],
)
def test_exit_cause_read_from_last_lines(fake_python, tmp_path, mode, cause):
    with pytest.raises(ServerLaunchError) as info:
        _fake_launch(fake_python, tmp_path, mode)
    assert info.value.cause == cause
    assert info.value.exit_code == 1


def test_timeout_stops_the_server(fake_python, tmp_path):
    with pytest.raises(ServerLaunchError) as info:
        _fake_launch(fake_python, tmp_path, "never-ready", ready_timeout=1.5)
    assert info.value.cause == "timeout"
    assert "not ready after" in str(info.value)


def test_sigterm_ignored_escalates_to_sigkill(fake_python, tmp_path):
    server = _fake_launch(fake_python, tmp_path, "ignore-term")
    started = time.monotonic()
    assert server.stop(grace=0.5) == -signal.SIGKILL
    assert time.monotonic() - started < 10  # the 0.5 s grace, not stop()'s default of 15 s


def test_child_that_left_the_group_is_killed_too(fake_python, tmp_path):
    server = _fake_launch(fake_python, tmp_path, "escape")
    line = next(t for t in server.tail() if t.startswith("escaped child"))
    escaped = psutil.Process(int(line.split()[-1]))
    assert escaped.is_running()
    server.stop(grace=5)
    assert not escaped.is_running() or escaped.status() == psutil.STATUS_ZOMBIE


def test_secrets_never_reach_the_log(fake_python, tmp_path):
    config = ServerConfig(model_path="m", api_key="sk-launch-secret-123")
    server = sglang.launch(
        config, backend="sim", python=fake_python, log_path=tmp_path / "server.log",
        env={"FAKE_MODE": "secret", "HF_TOKEN": "hf_abcdefghijklmnop"}, ready_timeout=20,
    )
    with server:
        text = server.log_path.read_text()
        assert "api_key='***'" in text and "hf=***" in text
        assert "sk-launch-secret-123" not in text and "hf_abcdefghijklmnop" not in text
        info = server.info()
        assert "sk-launch-secret-123" not in repr(info) and "hf_abcdefghijklmnop" not in repr(info)
        assert info["env"]["HF_TOKEN"] == "***"
        # the process itself reads it, from a file only this user reads, not from its command line
        assert "sk-launch-secret-123" not in " ".join(server.argv)
        [key_file] = server._private_files
        assert server.argv[server.argv.index("--config") + 1] == str(key_file)
        assert "sk-launch-secret-123" in key_file.read_text()
    assert not key_file.exists()


def test_port_already_taken_is_refused_before_spawning(fake_python, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        before = _descendants()
        with pytest.raises(ServerLaunchError) as info:
            _fake_launch(fake_python, tmp_path, "ready", port=port)
        assert _descendants() == before
    assert info.value.cause == "port_in_use"
    assert str(port) in str(info.value)


def test_a_port_whose_last_server_just_closed_its_connections_is_free(fake_python, tmp_path):
    """The side that closes first keeps the connection in TIME_WAIT for a minute; a server
    relaunched on its explicit port right after a stop must not be refused for that."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = listener.accept()
        assert port_in_use("127.0.0.1", port)  # listening
        conn.close()  # the server closes first, as a stopped server does
    assert client.recv(1) == b""
    client.close()
    assert not port_in_use("127.0.0.1", port)
    with _fake_launch(fake_python, tmp_path, "ready", port=port) as server:
        assert server.port == port and server.healthy()


@pytest.fixture
def python_without_sglang(tmp_path):
    """This interpreter when it lacks SGLang, else the same one with site-packages switched off."""
    if importlib.util.find_spec("sglang") is None:
        return None
    wrapper = tmp_path / "python-no-site"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def test_missing_sglang_is_detected_before_spawning(tmp_path, python_without_sglang):
    before = _descendants()
    with pytest.raises(ServerLaunchError) as info:
        sglang.launch("glm5-baseline", backend="sglang", log_path=tmp_path / "server.log", python=python_without_sglang)
    assert info.value.cause == "sglang_not_installed"
    assert "backend='sim'" in str(info.value)
    assert _descendants() == before
    assert not (tmp_path / "server.log").exists()


def test_bad_backend_and_config_raise_config_error(tmp_path):
    with pytest.raises(ConfigError, match="sim"):
        sglang.launch(ServerConfig(model_path="m"), backend="vllm")
    with pytest.raises(ConfigError) as info:
        sglang.launch(["--model-path", "m", "--tp-size", "0"], backend="sim")
    assert info.value.field == "tp_size"
    with pytest.raises(ConfigError) as info:
        sglang.launch(ServerConfig(tp_size=8), backend="sglang")
    assert info.value.field == "model_path"


def test_keyboard_interrupt_while_launching_leaves_nothing(fake_python, tmp_path, sigint_raises):
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            _fake_launch(fake_python, tmp_path, "never-ready", ready_timeout=30)
    finally:
        timer.cancel()
    assert not srv.live_servers()


def test_attach_without_server_info(fake_python, tmp_path):
    with _fake_launch(fake_python, tmp_path, "ready") as server:
        attached = engines.attach(server.base_url + "/")
        assert attached.base_url == server.base_url
        assert attached.config is None and attached.engine is None  # no /get_server_info on this server
        assert attached.alive() and attached.crash_cause() is None
        attached.stop()
        assert server.alive()  # attach never stops what it did not start
        assert attached.fatal_lines() == [] and attached.logs() is None
    assert not attached.alive()
    assert attached.crash_cause() == "unreachable"
    with pytest.raises(ConfigError):
        engines.attach("localhost:30000")


def test_atexit_stops_servers_at_interpreter_exit(fake_python, tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(f"""
        from glm5lib.engines import sglang
        from glm5lib.engines.sglang import config
        s = sglang.launch(config.ServerConfig(model_path="m"), backend="sim", python={fake_python!r},
                          env={{"FAKE_MODE": "ready"}}, ready_timeout=20)
        print(s.pid, flush=True)
    """))
    done = psutil.subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[-1])
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


CLI_SCRIPT = """
import argparse, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if this process inherited it ignored
from glm5lib.cli import server
parser = argparse.ArgumentParser(prog="glm5")
server.register_cli(parser.add_subparsers())
args = parser.parse_args(sys.argv[1:])
try:
    sys.exit(args.func(args))
except Exception as exc:  # as glm5lib.cli.main reports a Glm5Error
    print(f"glm5: error: {exc}", file=sys.stderr)
    sys.exit(2)
"""


def _cli(*argv, env=None):
    return psutil.Popen(
        [sys.executable, "-c", CLI_SCRIPT, *argv], stdout=psutil.subprocess.PIPE,
        stderr=psutil.subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
    )


def test_cli_launch_prints_url_and_stops_on_ctrl_c(fake_python, tmp_path):
    log = tmp_path / "cli.log"
    proc = _cli("launch", "glm5-baseline", "--backend", "sim", "--python", fake_python,
                "--log", str(log), "--set", "max_running_requests=128", "--", "--mem-fraction-static", "0.8",
                "--sim-profile", "p", env={"FAKE_MODE": "ready"})
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        children = proc.children(recursive=True)
        launched = [c for c in children if "--max-running-requests" in c.cmdline()]  # not its guard
        assert len(launched) == 1
        cmdline = launched[0].cmdline()
        assert cmdline[cmdline.index("--max-running-requests") + 1] == "128"
        assert cmdline[cmdline.index("--mem-fraction-static") + 1] == "0.8"
        assert cmdline[-2:] == ["--sim-profile", "p"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
        assert all(not c.is_running() or c.status() == psutil.STATUS_ZOMBIE for c in children)
        assert "fired up" in log.read_text()
    finally:
        if proc.is_running():
            proc.kill()
            proc.wait()


def test_cli_launch_reports_failure(fake_python, tmp_path):
    proc = _cli("launch", "--backend", "sim", "--python", fake_python, "--log", str(tmp_path / "x.log"),
                "--", "--model-path", "m", env={"FAKE_MODE": "import-error"})
    try:
        proc.wait(timeout=30)
        err = proc.stderr.read()
    finally:
        if proc.is_running():
            proc.kill()
    assert proc.returncode != 0
    assert "import_error" in err and "sgl_kernel" in err


# --------------------------------------------------------------------------- the stand-in


def _sim(tmp_path, *faults, name="server.log", **kw):
    extra = ["--sim-profile", SIM_PROFILE]
    for fault in faults:
        extra += ["--sim-fault", fault]
    kw.setdefault("ready_timeout", 30)
    return sglang.launch("glm5-baseline", backend="sim", log_path=tmp_path / name, extra_args=extra, **kw)


def test_sim_launch_logs_restart_attach(tmp_path):
    server = _sim(tmp_path)
    try:
        assert server.healthy()
        log = server.logs()
        assert log.ready and log.standin == SIM_PROFILE
        assert log.server_args["max_running_requests"] == 64
        attached = engines.attach(server.base_url)
        assert attached.standin is not None and attached.engine == "sim"
        assert attached.config.max_running_requests == 64
        # the engine-blind attach knows no engine and reads no configuration
        blind = srv.attach(server.base_url)
        assert blind.engine is None and blind.config is None and blind.server_info_at_attach["max_running_requests"] == 64
        assert attached.config.attention_backend == "flashinfer"
        old_pid, old_log = server.pid, server.log_path
        server = server.restart(max_running_requests=1024, disable_cuda_graph=True)
        assert not psutil.pid_exists(old_pid) or psutil.Process(old_pid).status() == psutil.STATUS_ZOMBIE
        assert server.log_path != old_log and server.log_path.name == "server-restart1.log"
        assert server.logs().server_args["max_running_requests"] == 1024
        assert engines.attach(server.base_url).config.max_running_requests == 1024
        # the logged ServerArgs (every field) reads back as the launched config, and relaunches
        logged = ServerConfig.from_server_args(server.logs().server_args)
        for field, value in server.config.explicit.items():
            assert logged.get(field) == value, field
        assert ServerConfig.from_argv(logged.to_argv()) == logged
    finally:
        server.stop()


def test_sim_with_api_key_attach(tmp_path):
    config = ServerConfig.load("glm5-baseline").with_changes(api_key="sk-test-key-0001")
    extra = ["--sim-profile", SIM_PROFILE]
    with sglang.launch(config, backend="sim", log_path=tmp_path / "server.log", extra_args=extra, ready_timeout=30) as server:
        assert "sk-test-key-0001" not in server.log_path.read_text()
        with_key = engines.attach(server.base_url, api_key="sk-test-key-0001")
        assert with_key.config is not None and with_key.config.max_running_requests == 64
        assert with_key.config.api_key in (None, "***") and "sk-test-key-0001" not in repr(with_key)
        without_key = engines.attach(server.base_url)
        assert without_key.config is None


@pytest.mark.parametrize(("fault", "cause"), [("oom-at-start", "oom"), ("nccl-at-start", "nccl")])
def test_sim_start_faults(tmp_path, fault, cause):
    started = time.monotonic()
    with pytest.raises(ServerLaunchError) as info:
        _sim(tmp_path, fault, ready_timeout=60)
    assert time.monotonic() - started < 40  # not the 60 s timeout
    assert info.value.cause == cause
    assert info.value.log_lines


def test_sim_slow_start_and_timeout(tmp_path):
    with pytest.raises(ServerLaunchError) as info:
        _sim(tmp_path, "slow-start=30", ready_timeout=1)
    assert info.value.cause == "timeout"
    started = time.monotonic()
    with _sim(tmp_path, "slow-start=1", name="slow.log") as server:
        assert time.monotonic() - started >= 1
        assert server.healthy()


def test_sim_kill_while_launching(tmp_path):
    def kill_soon():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for s in srv.live_servers():
                os.kill(s.pid, signal.SIGKILL)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_soon)
    killer.start()
    with pytest.raises(ServerLaunchError) as info:
        _sim(tmp_path, "slow-start=20", ready_timeout=30)
    killer.join()
    assert info.value.cause == "exited"
    assert info.value.exit_code == -signal.SIGKILL


def _generate(server, timeout):
    """One 4-token /generate; True when it was answered, False when it failed or timed out."""
    import json
    import urllib.request

    body = json.dumps({"text": "hi", "sampling_params": {"max_new_tokens": 4}}).encode()
    request = urllib.request.Request(server.base_url + "/generate", data=body, headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(request, timeout=timeout).read()
    except OSError:
        return False
    return True


def test_sim_nan_after_ready_is_seen_by_the_user(tmp_path):
    with _sim(tmp_path, "nan-after=1") as server:
        # the first request must finish (however long a busy machine takes) to arm the fault
        assert _generate(server, timeout=60)
        assert not _generate(server, timeout=60)  # its first decode step logs the NaN and dies
        assert server.wait(timeout=60) is not None
        assert not server.alive()
        assert server.crash_cause() == "nan"
        assert any("NaN" in line for line in server.fatal_lines())


def test_sim_hang_after_keeps_process_alive_but_unhealthy(tmp_path):
    with _sim(tmp_path, "hang-after=1") as server:
        assert _generate(server, timeout=60)  # arms the fault
        assert not _generate(server, timeout=1)  # no step runs any more: it is never answered
        assert server.alive()
        assert not server.healthy(timeout=1.0)
        assert server.crash_cause() is None


def test_server_launched_from_a_worker_thread_outlives_that_thread(fake_python, tmp_path):
    holder = {}
    worker = threading.Thread(target=lambda: holder.setdefault("s", _fake_launch(fake_python, tmp_path, "ready")))
    worker.start()
    worker.join(timeout=30)
    server = holder["s"]
    try:
        time.sleep(0.5)  # what stops a server when its launcher dies must not fire when a thread ends
        assert server.alive() and server.healthy()
    finally:
        server.stop()


# --------------------------------------------------------------------------- any engine from a command

TEMPLATE = ["transformers", "serve", "{model}", "--continuous-batching", "--host", "{host}", "--port", "{port}"]


@pytest.mark.parametrize(
    ("changes", "expected_tail"),
    [
        ({"cb_max_batch_tokens": 64}, ["--port", "{port}", "--cb-max-batch-tokens", "64"]),
        ({"--port": 8000}, ["--host", "{host}", "--port", "8000"]),
        ({"continuous_batching": None}, ["{model}", "--host", "{host}", "--port", "{port}"]),
        ({"continuous-batching": False}, ["{model}", "--host", "{host}", "--port", "{port}"]),
        ({"cb_use_cuda_graph": True}, ["--port", "{port}", "--cb-use-cuda-graph"]),
        ({"cuda_graph_bs": [1, 2, 4]}, ["--port", "{port}", "--cuda-graph-bs", "1", "2", "4"]),
    ],
)
def test_apply_flag_changes(changes, expected_tail):
    out = srv.apply_flag_changes(TEMPLATE, changes)
    assert out[-len(expected_tail):] == expected_tail
    assert out[:2] == ["transformers", "serve"]
    assert TEMPLATE[-1] == "{port}"  # the template itself is left alone


def test_apply_flag_changes_replaces_every_form_and_negation():
    argv = ["serve", "--max-tokens=8", "--x", "1", "--no-graph", "--max-tokens", "9", "--level", "-1"]
    out = srv.apply_flag_changes(argv, {"max_tokens": 4096, "graph": True})
    assert out == ["serve", "--max-tokens", "4096", "--x", "1", "--graph", "--level", "-1"]  # in place
    assert srv.flag_value(out, "--level") == "-1"  # a negative number is a value, not an option
    assert srv.flag_value(out, "graph") is True
    assert srv.flag_value(out, "missing") is None
    assert srv.apply_flag_changes(["a", "--b", "1", "--b", "2"], {"b": None}) == ["a"]


def test_apply_flag_changes_rejects_bad_values():
    with pytest.raises(ConfigError, match="--n"):
        srv.apply_flag_changes(TEMPLATE, {"n": {"a": 1}})
    with pytest.raises(ConfigError, match="mapping"):
        srv.apply_flag_changes(TEMPLATE, [("n", 1)])
    with pytest.raises(ConfigError, match="empty flag"):
        srv.apply_flag_changes(TEMPLATE, {"--": 1})


def test_fill_template_placeholders_and_errors():
    out = srv.fill_template([*TEMPLATE, "--kw", '{"enable_thinking": false}'], port=1234, model="/m")
    assert out[2] == "/m" and out[out.index("--port") + 1] == "1234" and out[out.index("--host") + 1] == "127.0.0.1"
    assert out[-1] == '{"enable_thinking": false}'  # JSON braces are not placeholders
    assert srv.fill_template(["{python}", "-V"])[0] == sys.executable
    with pytest.raises(ConfigError, match="no model"):
        srv.fill_template(TEMPLATE, port=1)
    with pytest.raises(ConfigError, match=r"unknown placeholder \{gpu\}") as err:
        srv.fill_template(["x", "{gpu}"], port=1)
    assert "{port}" in err.value.valid
    with pytest.raises(ConfigError, match="argv list"):
        srv.fill_template("transformers serve", port=1)


SIM_TEMPLATE = ["{python}", "-m", "glm5lib.sim", "--host", "{host}", "--port", "{port}", "--sim-profile", SIM_PROFILE]


def test_launch_command_stand_in_restart_with_flag_changes(tmp_path):
    with srv.launch_command(SIM_TEMPLATE, log_path=tmp_path / "a.log",
                            changes={"max_running_requests": 8}, ready_timeout=60) as server:
        assert isinstance(server, srv.CommandServer) and server.alive()
        assert server.healthy() and server.config is None
        assert server.flag("--max-running-requests") == "8"
        assert server.logs().startup.get("max_running_requests") == 8
        assert server.info()["engine"].endswith(" -m glm5lib.sim")
        again = server.restart(max_running_requests=32)
        assert not server.alive()
        try:
            assert again.alive() and again.flag("max_running_requests") == "32"
            assert again.log_path.name == "a-restart1.log"
            assert again.logs().startup.get("max_running_requests") == 32
        finally:
            again.stop()
    assert not again.alive()


def test_launch_command_any_http_server_ready_path(tmp_path):
    # python's own http.server: no /health (404) but "/" answers 200
    template = ["{python}", "-m", "http.server", "{port}", "--bind", "{host}"]
    with srv.launch_command(template, ready_path="/", log_path=tmp_path / "h.log", ready_timeout=30) as server:
        assert server.alive() and server.crash_cause() is None
        assert server.flag("--bind") == "127.0.0.1"
    with pytest.raises(ServerLaunchError, match=r"/health not answering 200") as err:
        srv.launch_command(template, log_path=tmp_path / "t.log", ready_timeout=2)
    assert err.value.cause == "timeout"


def test_launch_command_failures_are_named(tmp_path):
    with pytest.raises(ServerLaunchError) as err:
        srv.launch_command(["no-such-engine-xyz", "--port", "{port}"], log_path=tmp_path / "n.log")
    assert err.value.cause == "not_found" and "no-such-engine-xyz" in str(err.value)
    died = ["{python}", "-c", "import sys; print('ImportError: no module named engine'); sys.exit(3)", "{port}"]
    with pytest.raises(ServerLaunchError) as err:
        srv.launch_command(died, log_path=tmp_path / "d.log", ready_timeout=30)
    assert err.value.cause == "import_error" and err.value.exit_code == 3
    oom = ["{python}", "-c", "import time; print('torch.OutOfMemoryError: CUDA out of memory.', flush=True); time.sleep(60)", "{port}"]
    started = time.monotonic()
    with pytest.raises(ServerLaunchError) as err:
        srv.launch_command(oom, log_path=tmp_path / "o.log", ready_timeout=60)
    assert err.value.cause == "oom" and time.monotonic() - started < 30
    with pytest.raises(ConfigError, match=r"\{port\}"):
        srv.launch_command(["engine", "serve"], log_path=tmp_path / "x.log")
    with pytest.raises(ConfigError, match="ready_path"):
        srv.launch_command(SIM_TEMPLATE, ready_path="health")


@pytest.mark.parametrize("setting, served", [(None, True), (False, False)])
def test_metrics_are_on_unless_the_config_says_otherwise(tmp_path, setting, served):
    """A launch from a config that does not mention enable_metrics serves /metrics (the running and
    queued gauges the diagnosis reads); enable_metrics: false keeps it off."""
    config = ServerConfig.load("glm5-baseline").without("enable_metrics")
    if setting is not None:
        config = config.with_changes(enable_metrics=setting)
    server = sglang.launch(config, backend="sim", log_path=tmp_path / "server.log",
                        extra_args=["--sim-profile", SIM_PROFILE], ready_timeout=30)
    try:
        assert ("--enable-metrics" in server.argv) is served
        assert http.get(server.base_url, "/metrics", timeout=10).ok is served
    finally:
        server.stop()
