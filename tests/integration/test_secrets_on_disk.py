"""Secrets never reach the disk: a phase measured with an API key leaves it in no file.

The stand-in runs with ``--api-key``, the load generator sends the key, ``GLM5_API_KEY`` holds it
in the environment, and the report is written; then every file of the run folder (server log,
config, server info, sweep, request records, telemetry, report) is searched for the key's bytes.
The key looks like nothing in particular, so only masking by its value can hide it.
"""

from __future__ import annotations

import pytest

from glm5lib.engines.sglang.config import ServerConfig
from glm5lib.phase import measure_phase
from glm5lib.report import write_report

KEY = "open-sesame-4217-glm5"


@pytest.fixture(autouse=True)
def _no_leftovers(no_leftover_processes):
    yield


# An engine that prints its key, as vLLM prints its non-default args and many engines their
# environment, before it becomes the stand-in (so the phase has a real server to measure).
LOUD_ENGINE = (
    "import os, sys; "
    "print(\"non-default args: {'api_key': '%s'}\" % sys.argv[sys.argv.index('--api-key') + 1]); "
    "print('GLM5_API_KEY=' + os.environ['GLM5_API_KEY'], flush=True); "
    "os.execv(sys.executable, [sys.executable, '-m', 'glm5lib.sim', *sys.argv[1:]])"
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sim", "command"])
def test_a_phase_with_an_api_key_leaves_it_in_no_file(tmp_path, monkeypatch, backend):
    monkeypatch.setenv("GLM5_API_KEY", KEY)
    run_dir = tmp_path / "run"
    if backend == "sim":
        server = {"server": ServerConfig.load("glm5-baseline").with_changes(api_key=KEY)}
    else:
        server = {"server": None, "command": ["{python}", "-c", LOUD_ENGINE, "--host", "{host}", "--port", "{port}",
                                              "--api-key", KEY]}
    result = measure_phase(
        **server, run_dir=run_dir, phase="baseline", backend=backend, api_key=KEY, concurrencies=[2, 4],
        requests_per_level=4, input_len=16, output_len=8, warmup=1, progress=False,
        gpu_interval=0.2, metrics_interval=0.5,
    )
    assert list(result.sweep["completed"]) == [4, 4]  # the key was accepted: requests went through
    report = write_report(run_dir)
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"server.log", "sweep.csv", "requests.jsonl"} <= names and report in files
    log = (run_dir / "baseline" / "server.log").read_text()
    if backend == "command":
        assert "non-default args: {'api_key': '***'}" in log and "GLM5_API_KEY=***" in log
    leaked = [str(p.relative_to(run_dir)) for p in files if KEY.encode() in p.read_bytes()]
    assert not leaked, f"the API key is written in {leaked}"


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_vllm_is_handed_its_key_in_its_environment_not_on_any_command_line(tmp_path, vllm_installed):
    """Any user of a host reads every process's command line (``ps``, /proc/PID/cmdline): vLLM reads
    its key from VLLM_API_KEY, so the key given to glm5lib goes there, and the server still asks for it."""
    import psutil

    from glm5lib import http
    from glm5lib.engines import vllm as ev

    config = ev.VllmConfig.load("vllm-capped")
    config = config.with_changes(model=config.model_path())
    with ev.launch_vllm(config, log_path=tmp_path / "server.log", api_key=KEY) as srv:
        root = psutil.Process(srv.pid)
        lines = [" ".join(p.cmdline()) for p in [root, *root.children(recursive=True)]]
        assert lines and not [line for line in lines if KEY in line], lines
        assert all("--api-key" not in line for line in lines), lines
        assert http.get(srv.base_url, "/v1/models").status == 401  # the server asks for the key
        assert http.get(srv.base_url, "/v1/models", api_key=KEY).ok
    assert KEY not in (tmp_path / "server.log").read_text()


@pytest.mark.slow
def test_sglangs_key_is_on_no_command_line_and_its_file_goes_with_the_server(tmp_path):
    """SGLang has no variable for its key: glm5lib hands it over in a file only this user reads,
    named by SGLang's own --config, here to the stand-in, which merges it as SGLang does; the server
    still asks for the key, and the file is gone once the server is."""
    import stat

    import psutil

    from glm5lib import http
    from glm5lib.engines.sglang.launcher import launch

    config = ServerConfig.load("glm5-baseline").with_changes(api_key=KEY)
    with launch(config, backend="sim", log_path=tmp_path / "server.log", ready_timeout=120,
                extra_args=["--sim-zero-delay"]) as srv:
        root = psutil.Process(srv.pid)
        lines = [" ".join(p.cmdline()) for p in [root, *root.children(recursive=True)]]
        assert lines and not [line for line in lines if KEY in line], lines
        assert all("--api-key" not in line for line in lines), lines
        [key_file] = srv._private_files
        assert f"--config {key_file}" in lines[0] and stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert http.get(srv.base_url, "/v1/models").status == 401  # the server asks for the key
        assert http.get(srv.base_url, "/v1/models", api_key=KEY).ok
    assert not key_file.exists()
    assert KEY not in (tmp_path / "server.log").read_text()


@pytest.mark.slow
def test_a_server_that_fails_to_start_leaves_no_key_file(tmp_path):
    import tempfile
    from pathlib import Path

    from glm5lib.engines.sglang.launcher import launch
    from glm5lib.errors import ServerLaunchError

    def key_files() -> set[Path]:
        return set(Path(tempfile.gettempdir()).glob("glm5-sglang-keys-*.yaml"))

    before = key_files()
    config = ServerConfig.load("glm5-baseline").with_changes(api_key=KEY)
    with pytest.raises(ServerLaunchError) as failed:
        launch(config, backend="sim", log_path=tmp_path / "server.log", ready_timeout=120,
               extra_args=["--sim-zero-delay", "--sim-fault", "nccl-at-start"])
    assert failed.value.cause == "nccl"
    assert key_files() <= before


@pytest.mark.slow
def test_the_key_given_to_a_phase_is_the_one_the_launched_server_asks_for(tmp_path):
    """The workbook hands the key in ``GLM5_API_KEY`` to the phase, not to the configuration: the server
    it launches must ask for that key (it once launched without it, leaving the server open while the
    client sent a key nobody checked), and no process's command line may hold it."""
    import psutil

    from glm5lib import http
    from glm5lib.phase.plan import EnginePlan
    from glm5lib.phase.serving import launch_engine, stop_server

    config = ServerConfig.load("glm5-baseline")
    assert config.api_key is None
    srv = launch_engine(EnginePlan("sim", config), tmp_path / "baseline", api_key=KEY)
    try:
        assert http.get(srv.base_url, "/v1/models").status == 401
        assert http.get(srv.base_url, "/v1/models", api_key=KEY).status == 200
        root = psutil.Process(srv.pid)
        lines = [" ".join(p.cmdline()) for p in [root, *root.children(recursive=True)]]
        assert lines and not [line for line in lines if KEY in line], lines
    finally:
        stop_server(srv, tmp_path / "baseline")
    leaked = [p.name for p in (tmp_path / "baseline").rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    assert not leaked, f"the API key is written in {leaked}"


def test_a_configuration_key_other_than_the_phases_is_refused_before_launch(tmp_path):
    from glm5lib.errors import ConfigError
    from glm5lib.phase.plan import EnginePlan
    from glm5lib.phase.serving import launch_engine

    config = ServerConfig.load("glm5-baseline").with_changes(api_key="another-key")
    with pytest.raises(ConfigError, match="api_key differs from the key given to the launch"):
        launch_engine(EnginePlan("sim", config), tmp_path / "baseline", api_key=KEY)
    assert not (tmp_path / "baseline" / "server.log").exists()


def test_a_key_no_header_can_carry_is_refused_before_the_phase_launches(tmp_path):
    from glm5lib.errors import ConfigError

    with pytest.raises(ConfigError, match=r"non-ASCII character U\+00E9"):
        measure_phase(server=ServerConfig.load("glm5-baseline"), run_dir=tmp_path / "run", phase="baseline",
                      backend="sim", api_key="clé-4217", concurrencies=[2], requests_per_level=2, input_len=16,
                      output_len=8, warmup=0, progress=False)
    assert not (tmp_path / "run" / "baseline" / "server.log").exists()
