"""Tests for glm5lib.engines.vllm: vLLM configs in vLLM's own flags, and launch errors that say what to do.

These need no vLLM: names and values are checked against the catalogue generated from vLLM's
parser, and the launch errors are raised before (or instead of) a real engine starting. The
real engine, end to end, is tests/test_vllm_workbook.py.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import sys
from pathlib import Path

import pytest
from config_errors import refused

from glm5lib import engines, server
from glm5lib.engines import vllm as ev
from glm5lib.engines.sglang.config import ServerConfig, shipped_configs
from glm5lib.errors import ConfigError, ServerLaunchError

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vllm"


def test_shipped_configs_capped_and_raised_differ_in_max_num_seqs_only():
    capped, raised = ev.VllmConfig.load("vllm-capped"), ev.VllmConfig.load("vllm-raised")
    assert capped.max_num_seqs == 4 and raised.max_num_seqs == 256
    assert capped.diff(raised) == {"max_num_seqs": (4, 256)}
    assert capped.env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert capped.to_argv() == ["--model", ".engines/models/tiny-qwen3-moe", "--max-num-seqs", "4"]
    assert capped.max_running_requests == 4  # SGLang's name for the same cap, as the plots ask


def test_fix_changes_in_vllm_terms_become_vllm_flags():
    config = engines.load_config("vllm-capped").with_changes(max_num_seqs=256, enable_prefix_caching=False,
                                                        enforce_eager=True, max_num_batched_tokens=2048)
    argv = config.to_argv()
    assert server.flag_value(argv, "--max-num-seqs") == "256"
    assert "--no-enable-prefix-caching" in argv and "--enforce-eager" in argv
    assert server.flag_value(argv, "--max-num-batched-tokens") == "2048"
    assert "--max-num-seqs" not in config.without("max_num_seqs").to_argv()
    # the notebooks' MODEL_PATH and TP_SIZE, in SGLang's names, land on vLLM's
    moved = config.with_changes(model_path="/models/x", tp_size=2)
    assert moved.get("model") == "/models/x" and moved.tensor_parallel_size == 2


def test_bad_names_and_values_name_the_valid_ones_before_anything_starts():
    with pytest.raises(ConfigError, match="did you mean 'max_num_seqs'") as err:
        engines.load_config("vllm-capped").with_changes(max_num_seq=256)
    assert "max_num_seqs" in err.value.valid
    refused(ev.VllmConfig, {"max_running_requests": 64}, "not a vLLM server argument")
    refused(ev.VllmConfig, {"max_num_seqs": "many"}, "whole number")
    refused(ev.VllmConfig, {"enforce_eager": "yes"}, "switch")
    assert "fp8" in refused(ev.VllmConfig, {"kv_cache_dtype": "fp3"}, "choices").valid
    with pytest.raises(ConfigError, match="vllm-capped"):
        ev.VllmConfig.load("vllm-caped")


def test_save_and_load_round_trip_and_load_config_tells_the_engines_apart(tmp_path):
    config = ev.VllmConfig.load("vllm-capped").with_changes(max_num_seqs=8, api_key="sk-secret-value")
    path = config.save(tmp_path / "config.json")
    data = json.loads(path.read_text())
    assert data["engine"] == "vllm" and data["server_args"]["max_num_seqs"] == 8
    assert "sk-secret-value" not in path.read_text()
    again = engines.load_config(path)
    assert isinstance(again, ev.VllmConfig) and again.max_num_seqs == 8 and again.env == config.env
    assert isinstance(engines.load_config("glm5-baseline"), ServerConfig)
    assert not any(name.startswith("vllm-") for name in shipped_configs())  # SGLang's list stays SGLang's


def test_config_table_shows_vllms_flags():
    frame = engines.load_config("vllm-capped").to_frame()
    assert frame.set_index("field").loc["max_num_seqs", "flag"] == "--max-num-seqs"


def test_catalogue_knows_the_knobs_the_diagnosis_names():
    flags, source = ev.vllm_flags()
    for knob in ("max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization", "enforce_eager",
                 "enable_prefix_caching", "block_size", "kv_cache_dtype", "tensor_parallel_size",
                 "pipeline_parallel_size", "async_scheduling", "enable_chunked_prefill"):
        assert knob in flags, knob
    assert "vLLM" in source


def test_preset_runs_the_module_not_the_console_script():
    engine = engines.get_engine("vllm")
    assert engine.command[:3] == ("{python}", "-m", "vllm.entrypoints.openai.api_server")
    assert engine.sweep_options == {"token_ids": False}


def test_the_server_module_is_the_one_the_installed_vllm_has(monkeypatch, tmp_path):
    """0.32 moved the OpenAI server and warns on the old path; older releases have only the old one."""
    def fake_vllm(root, *modules):
        for name in ("vllm", *modules):
            path = root.joinpath(*name.split("."))
            if name == "vllm":
                path.mkdir(parents=True)
                (path / "__init__.py").write_text("raise SystemExit('the probe must not import vllm')\n")
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.with_suffix(".py").write_text("")
        return root

    old = fake_vllm(tmp_path / "old", "vllm.entrypoints.openai.api_server")
    new = fake_vllm(tmp_path / "new", *ev.VLLM_MODULES)
    for root, want in ((old, "vllm.entrypoints.openai.api_server"),
                       (new, "vllm.entrypoints.launchers.api_server.entry"),
                       (tmp_path / "none", ev.VLLM_MODULE)):
        monkeypatch.setenv("PYTHONPATH", str(root))
        ev.vllm_module.cache_clear()
        assert ev.vllm_module(sys.executable) == want, root
    ev.vllm_module.cache_clear()


# --------------------------------------------------------------------------- launch errors


def test_not_installed_says_make_vllm(monkeypatch, tmp_path):
    monkeypatch.delenv("GLM5_VLLM_PYTHON", raising=False)
    monkeypatch.setenv("ENGINES", str(tmp_path / "no-engines"))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ServerLaunchError, match="make vllm") as err:
        ev.vllm_python()
    assert err.value.cause == "not_found"


def test_model_path_missing_is_refused_before_launch(monkeypatch, tmp_path):
    monkeypatch.setenv("GLM5_VLLM_PYTHON", sys.executable)
    config = ev.VllmConfig({"model": str(tmp_path / "no-such-model")})
    with pytest.raises(ConfigError, match="does not exist"):
        ev.launch_vllm(config, log_path=tmp_path / "server.log")
    assert not (tmp_path / "server.log").exists()
    with pytest.raises(ConfigError, match="make vllm"):
        ev.VllmConfig({"model": ".engines/models/tiny-qwen3-moe-missing/tiny-qwen3-moe"}).model_path()
    assert ev.VllmConfig({"model": "Qwen/Qwen3-0.6B"}).model_path() == "Qwen/Qwen3-0.6B"  # an id vLLM fetches


def test_port_taken_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("GLM5_VLLM_PYTHON", sys.executable)
    (tmp_path / "model").mkdir()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        with pytest.raises(ServerLaunchError) as err:
            ev.launch_vllm(ev.VllmConfig({"model": str(tmp_path / "model")}), port=port, log_path=tmp_path / "s.log")
    assert err.value.cause == "port_in_use"


def test_engine_dying_while_starting_quotes_its_lines(monkeypatch, tmp_path):
    """A stand-in for the interpreter replays what vLLM 0.x printed when its engine core failed to
    start (tests/fixtures/vllm), then exits 1 as vLLM does."""
    replay = tmp_path / "python"
    lines = (FIXTURES / "v1-error-cuda-oom.log").read_text()
    replay.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write({lines!r})\nsys.stdout.flush()\nsys.exit(1)\n")
    replay.chmod(0o755)
    monkeypatch.setenv("GLM5_VLLM_PYTHON", str(replay))
    (tmp_path / "model").mkdir()
    with pytest.raises(ServerLaunchError) as err:
        ev.launch_vllm(ev.VllmConfig({"model": str(tmp_path / "model")}), log_path=tmp_path / "server.log",
                       ready_timeout=60)
    assert err.value.cause == "oom"
    assert "vLLM died while starting (oom)" in str(err.value)
    assert any("CUDA out of memory" in line for line in err.value.log_lines)


def test_workbook_backend_vllm_needs_a_vllm_config(tmp_path):
    from glm5lib import workbook

    assert "vllm" in workbook.BACKENDS
    with pytest.raises(ConfigError, match="vllm-capped"):
        workbook.start_server("vllm", ServerConfig.load("glm5-baseline"), tmp_path)
