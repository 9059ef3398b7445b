"""Tests for glm5lib.engines.vllm.defaults: the batch sizes vLLM chooses when they are not given.

The truth is vLLM's own: ``tests/fixtures/vllm/cpu-automatic.log`` is vLLM 0.32.0 on CPU started
without ``--max-num-seqs`` at DEBUG level, so it prints the values it defaulted to.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from glm5lib import report, rundir
from glm5lib.diagnose import diff_configs, load_evidence, resolve_automatic
from glm5lib.engines.vllm import vllm_automatic, vllm_python
from glm5lib.errors import ServerLaunchError
from glm5lib.logs import parse_log

FIX = Path(__file__).parents[1] / "fixtures" / "vllm"
AUTOMATIC_LOG = FIX / "cpu-automatic.log"


def _vllm_defaulted() -> dict[str, int]:
    """The values vLLM says it chose, from its own DEBUG lines in the fixture."""
    found = re.findall(r"Defaulting (max_num_\w+) to (\d+) for", AUTOMATIC_LOG.read_text())
    return {field: int(value) for field, value in found}


def test_the_automatic_values_are_the_ones_vllm_chose_on_cpu():
    truth = _vllm_defaulted()
    assert truth == {"max_num_batched_tokens": 2048, "max_num_seqs": 128}
    log = parse_log(AUTOMATIC_LOG)
    assert "max_num_seqs" not in log.server_args and "max_running_requests" not in log.startup
    assert log.startup["device"] == "cpu"
    for field, value in truth.items():
        resolved, how = resolve_automatic(field, log.server_args, log.startup)
        assert resolved == value, field
        assert "vLLM 0.32.0's rule for its OpenAI server on CPU" in how


def test_the_diagnosis_reads_the_cap_vllm_chose(tmp_path):
    phase = rundir.phase_dir(tmp_path / "run", "baseline")
    shutil.copy(AUTOMATIC_LOG, phase / rundir.SERVER_LOG)
    cap, source = load_evidence(phase).cap()
    assert cap == _vllm_defaulted()["max_num_seqs"]
    assert "max_num_seqs being unset" in source and "on CPU" in source
    summary = report.summarize(tmp_path / "run")["phases"]["baseline"]
    assert summary["running_cap"] == 128 and "on CPU" in summary["cap_automatic"]


def test_an_explicit_cap_against_an_automatic_one_is_a_cap_signature():
    frame = diff_configs(FIX / "cpu-capped.log", AUTOMATIC_LOG)
    top = frame.iloc[0]
    assert (top["field"], top["current"], top["reference"]) == ("max_num_seqs", 4, 128)
    assert not top["automatic"]
    assert "reference: None, 128 by vLLM 0.32.0's rule" in top["resolved"]
    assert "an explicit 4 against 128 chosen automatically: the signature of a cap" in top["rationale"]


H200 = {"gpus": [{"name": "NVIDIA H200", "memory_total_bytes": 150_754_820_096}]}
B200 = {"gpus": [{"name": "NVIDIA B200", "memory_total_bytes": 191_514_247_168}]}
A100 = {"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "memory_total_bytes": 85_899_345_920}]}
L4 = {"gpus": [{"name": "NVIDIA L4", "memory_total_bytes": 24_152_899_584}]}


@pytest.mark.parametrize(
    ("args", "startup", "environment", "seqs", "tokens"),
    [
        ({}, {"device": "cpu"}, None, 128, 2048),
        ({"tensor_parallel_size": 2, "pipeline_parallel_size": 2}, {"device": "cpu"}, None, 512, 8192),
        ({}, {"device": "gpu"}, H200, 1024, 8192),
        ({}, {}, H200, 1024, 8192),  # a GPU in the snapshot and no device in the log
        ({}, {"device": "gpu"}, B200, 1024, 16384),
        ({}, {"device": "gpu"}, A100, 256, 2048),  # 80 GB, but an A100
        ({}, {"device": "gpu"}, L4, 256, 2048),
        ({"performance_mode": "throughput"}, {"device": "gpu"}, H200, 2048, 16384),
        ({"max_num_batched_tokens": 64}, {"device": "cpu"}, None, 64, None),  # seqs at most the tokens
        ({"max_model_len": 8}, {"device": "cpu"}, None, 128, 1024),  # tokens at most seqs x context
        ({"enable_chunked_prefill": False}, {"device": "cpu", "context_len": 32768}, None, 128, 32768),
        ({"all2all_backend": "deepep_low_latency", "enable_expert_parallel": True, "data_parallel_size": 8},
         {"device": "gpu"}, H200, 256, 256),
    ],
)
def test_vllm_rule_by_device_and_arguments(args, startup, environment, seqs, tokens):
    for field, expected in (("max_num_seqs", seqs), ("max_num_batched_tokens", tokens)):
        auto = vllm_automatic(field, args, startup, environment)
        if expected is None:
            assert auto is None, field  # given, not automatic
        else:
            assert auto is not None and auto.value == expected, (field, auto)


def test_an_unknown_device_gives_every_value_and_says_why():
    auto = vllm_automatic("max_num_seqs", {}, {})
    assert auto.value is None and auto.candidates == (128, 256, 1024)
    assert "the device is not in the log or the environment" in auto.how
    value, how = resolve_automatic("max_num_seqs", {}, {})
    assert value == 128 and how.startswith("at least 128 by vLLM 0.32.0's rule")
    gpu = vllm_automatic("max_num_seqs", {}, {"device": "gpu"})
    assert gpu.candidates == (256, 1024) and "the GPU's memory is not known" in gpu.how
    # a stand-in's simulated GPUs say nothing about where vLLM ran
    assert vllm_automatic("max_num_seqs", {}, {}, {**H200, "standin": True}).value is None


def test_a_log_of_another_release_says_the_rule_may_differ():
    auto = vllm_automatic("max_num_seqs", {}, {"device": "cpu", "engine_version": "0.8.3"})
    assert auto.value == 128 and "this log is from vLLM 0.8.3, whose rule may differ" in auto.how


def test_given_values_and_other_fields_are_not_resolved():
    assert vllm_automatic("max_num_seqs", {"max_num_seqs": 4}, {"device": "cpu"}) is None
    assert vllm_automatic("gpu_memory_utilization", {}, {"device": "cpu"}) is None


# vLLM's own get_batch_defaults on every device the rule distinguishes: the platform's answers
# (CPU or TPU, device name, total memory) are replaced, the function itself is vLLM's.
_VLLM_PROBE = """
import json, sys
from unittest import mock
from vllm.engine.arg_utils import EngineArgs
from vllm.platforms import current_platform
from vllm.usage.usage_lib import UsageContext
out = []
for kind, name, memory, world in json.loads(sys.argv[1]):
    with mock.patch.object(current_platform, "is_cpu", lambda: kind == "cpu"), \\
         mock.patch.object(current_platform, "is_tpu", lambda: kind == "tpu"), \\
         mock.patch.object(current_platform, "get_device_name", lambda *a, **k: name), \\
         mock.patch.object(current_platform, "get_device_total_memory", lambda *a, **k: memory):
        tokens, seqs = EngineArgs.get_batch_defaults(world)
    out.append([seqs[UsageContext.OPENAI_API_SERVER], tokens[UsageContext.OPENAI_API_SERVER]])
print(json.dumps(out))
"""
_GPUS = [
    ("NVIDIA H200", 150_754_820_096), ("NVIDIA B200", 191_514_247_168),
    ("NVIDIA A100-SXM4-80GB", 85_899_345_920), ("NVIDIA L4", 24_152_899_584),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 102_005_473_280),
]


@pytest.mark.vllm
def test_the_rule_is_the_installed_vllms_own():
    try:
        python = vllm_python()
    except ServerLaunchError as exc:
        pytest.skip(f"vLLM for CPU is not installed here ({exc}); run `make vllm`")
    cases = [("cpu", "cpu", 0, 1), ("cpu", "cpu", 0, 4)]
    cases += [("gpu", name, memory, 8) for name, memory in _GPUS]
    cases += [("tpu", chip, 32 << 30, 1) for chip in ("V6E", "V5E", "V5P")]
    out = subprocess.run([python, "-c", _VLLM_PROBE, json.dumps(cases)], capture_output=True, text=True,
                         check=True, timeout=120)
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    ours = []
    for kind, name, memory, world in cases:
        args = {"tensor_parallel_size": world}
        startup = {"device": kind, "device_name": name}
        env = {"gpus": [{"name": name, "memory_total_bytes": memory}]} if kind == "gpu" else None
        ours.append([vllm_automatic(f, args, startup, env).value for f in ("max_num_seqs", "max_num_batched_tokens")])
    assert ours == theirs, list(zip(cases, ours, theirs, strict=True))
