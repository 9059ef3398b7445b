"""glm5lib.diagnose end to end on the stand-in: a real server process, real HTTP load, real log
and telemetry (moved whole from tests/unit/diagnose/test_diagnose.py, whose tests launch nothing)."""

from __future__ import annotations

import json

import pytest

from glm5lib import diagnose as dg

# ------------------------------------------------------------------------------------------
# end to end on the stand-in: real server process, real HTTP load, real log and telemetry
# ------------------------------------------------------------------------------------------


def _sweep(base_url, levels, run_dir, **settings):
    """A short sweep of the stand-in: no warm-up, no progress lines."""
    from glm5lib.loadgen import run_sweep

    return run_sweep(base_url, levels, run_dir=run_dir, progress=False, warmup=0, **settings)


def measure_standin(phase_dir, config):
    """One short phase on the stand-in: server log, sweep, requests, GPU samples, environment."""
    from glm5lib import telemetry
    from glm5lib.engines.sim import run_standin

    phase_dir.mkdir(parents=True)
    argv = config.with_changes(decode_log_interval=4).to_argv()
    with run_standin(
        *argv, "--sim-profile", "glm5-nvfp4-8x-rtxpro6000", log_path=phase_dir / "server.log"
    ) as srv:
        env = telemetry.environment(source="sim", base_url=srv.base_url)
        (phase_dir.parent / "environment.json").write_text(json.dumps(env))
        with telemetry.GpuSampler(
            interval=0.2, source="sim", base_url=srv.base_url, out=phase_dir / "gpu.csv"
        ):
            # cap 8 against 32 clients shows the same signature as 64 against 256, in seconds
            _sweep(srv.base_url, [4, 32], phase_dir, input_len=64, output_len=32, duration=3)
    return phase_dir


@pytest.mark.slow
def test_standin_baseline_flags_top_finding_is_the_concurrency_cap(tmp_path):
    from glm5lib.engines.sglang.config import ServerConfig

    baseline = ServerConfig.load("glm5-baseline").with_changes(max_running_requests=8)
    phase = measure_standin(tmp_path / "run" / "baseline", baseline)
    frame = dg.diagnose(tmp_path / "run", reference="k2-thinking")
    top = frame.iloc[0]
    assert top["rule"] == "concurrency_cap", frame[["finding", "rule", "score"]].to_string()
    assert "stayed at 8 on" in top["evidence"] and "TTFT grew" in top["evidence"]
    assert "raise --max-running-requests from 8 to 32" in top["suggestion"]
    assert "2048" in top["suggestion"]  # the reference's value
    assert (phase / "findings.csv").is_file()
    # the stand-in reports SM120 GPUs, so the allreduce fusion flag is flagged too
    assert "incompatibility:flashinfer-allreduce-fusion-sm120" in set(frame["rule"])
    diff = dg.diff_configs(phase, "k2-thinking")
    assert diff.iloc[0]["field"] == "max_running_requests"
    assert (diff.iloc[0]["current"], diff.iloc[0]["reference"]) == (8, 2048)


@pytest.mark.slow
def test_standin_fix_flags_remove_the_cap_finding(tmp_path):
    from glm5lib.engines.sglang.config import ServerConfig

    phase = measure_standin(tmp_path / "fix", ServerConfig.load("glm5-fix"))
    frame = dg.diagnose(phase, reference="k2-thinking")
    assert "concurrency_cap" not in set(frame["rule"]), frame[["finding", "rule"]].to_string()
    ruled = frame[frame["rule"] == "reference_diff_ruled_out"]
    assert "max_running_requests (the cap was never reached" in ruled.iloc[0]["evidence"]
    model = dg.PerfModel.fit_phase(phase)
    assert model.seen["levels"] >= 2 and model.params.per_seq_ms >= 0


@pytest.mark.slow
def test_standin_nan_crash_is_the_top_finding(tmp_path):
    from glm5lib.engines.sim import run_standin
    from glm5lib.errors import SweepAbortedError

    flags = ["--model-path", "glm5", "--tp-size", "8", "--attention-backend", "flashinfer"]
    with (
        run_standin(
            *flags,
            "--sim-fault",
            "nan-after=4",
            "--sim-profile",
            "glm5-nvfp4-8x-rtxpro6000",
            log_path=tmp_path / "server.log",
        ) as srv,
        pytest.raises(SweepAbortedError),
    ):
        _sweep(srv.base_url, [8], tmp_path, input_len=32, output_len=64, duration=6)
    frame = dg.diagnose(tmp_path, write=False)
    top = frame.iloc[0]
    assert top["rule"] == "crash:nan"
    assert "NaN in the logits" in top["evidence"] and "on 8 rank(s)" in top["evidence"]
    assert "--attention-backend (now flashinfer" in top["suggestion"]
