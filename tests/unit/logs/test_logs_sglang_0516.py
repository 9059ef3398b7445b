"""Real SGLang 0.5.16 lines recorded on an H200 (tests/fixtures/logs/SOURCES.md): start-up, the
scheduler lines with their CUDA-graph flag, and the shutdown that was asked for."""

from __future__ import annotations

from pathlib import Path

from glm5lib import logs
from glm5lib.diagnose.rules.crashes import rule_crashes

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
REAL = FIXTURES / "sglang-0.5.16-h200.log"
EAGER = FIXTURES / "sglang-0.5.16-h200-eager.log"


def test_0516_start_up_is_read_whole():
    slog = logs.parse_log(REAL)
    assert len(slog.server_args) == 445 and not slog.server_args_incomplete
    assert slog.server_args["max_running_requests"] == 64
    assert slog.server_args["attention_backend"] == "triton"
    assert slog.ready
    facts = slog.startup
    assert facts["max_running_requests"] == 64 and facts["max_total_num_tokens"] == 2111732
    assert facts["model_class"] == "Qwen3MoeForCausalLM"
    assert facts["kv_cache_size_gb"] == 96.66
    assert max(facts["cuda_graph_batch_sizes"]) == 64
    assert len(slog.decode) == 2 and slog.decode["cuda_graph"].tolist() == [True, True]
    assert len(slog.prefill) == 7


def test_the_stop_that_was_asked_for_is_not_a_crash():
    """0.5.16 answers SIGTERM with a drain, then its parent reports the scheduler "crashed with exit
    code -15", SIGQUIT and kill_process_tree: a run's last lines, never its next bottleneck."""
    slog = logs.parse_log(REAL)
    assert slog.errors.empty and slog.crash_cause() is None
    assert slog.startup["shutdown_requested_at"] == "2026-12-04 17:48:50"
    assert slog.startup["errors_during_shutdown"] == 1
    # without the SIGTERM line the same kill_process_tree line is a fault
    text = "\n".join(line for line in REAL.read_text().splitlines() if "SIGTERM received" not in line)
    assert logs.parse_log(text).crash_cause() == "sigquit"


def test_a_crash_before_the_stop_still_counts(tmp_path):
    tail = [line for line in REAL.read_text().splitlines()[-6:]]
    crash = (FIXTURES / "crash-scheduler-tp2.log").read_text().splitlines()
    path = tmp_path / "server.log"
    path.write_text("\n".join(crash + tail) + "\n")
    slog = logs.parse_log(path)
    assert slog.crash_cause() == "scheduler_exception"
    assert slog.startup["errors_during_shutdown"] == 1


def test_decode_steps_above_the_largest_captured_batch_run_eagerly():
    slog = logs.parse_log(EAGER)
    assert max(slog.startup["cuda_graph_batch_sizes"]) == 256
    assert slog.startup["max_running_requests"] == 1024
    d = slog.decode
    assert set(d.loc[d["running_req"] > 256, "cuda_graph"]) == {False}
    assert set(d.loc[d["running_req"] <= 256, "cuda_graph"]) == {True}


def test_crash_rule_ignores_the_shutdown(tmp_path):
    from glm5lib.diagnose.evidence import load_evidence

    phase = tmp_path / "baseline"
    phase.mkdir()
    (phase / "server.log").write_text(REAL.read_text())
    ev = load_evidence(phase)
    assert [f for f in rule_crashes(ev) if f.rule.startswith("crash:")] == []


GRAPH_1024 = FIXTURES / "sglang-0.5.16-h100-graph1024.log"


def test_a_graph_ceiling_raised_to_the_cap_is_read_and_every_step_replays_a_graph():
    """0.5.16 on an H100 with --cuda-graph-max-bs 1024: 68 decode sizes captured (every 32 above 512),
    the level's batch of 1,023 replayed graphs; the straggler's lines come every 0.1 s, the full
    batch's every second (the log is paced by steps, not by time)."""
    from glm5lib.diagnose.linetime import running_quantile

    slog = logs.parse_log(GRAPH_1024)
    sizes = slog.startup["cuda_graph_batch_sizes"]
    assert len(sizes) == 68 and max(sizes) == 1024 and sizes[-3:] == [960, 992, 1024]
    assert slog.startup["max_running_requests"] == 1024
    d = slog.decode
    assert set(d["cuda_graph"]) == {True} and int(d["running_req"].max()) == 1023
    assert float(d["running_req"].median()) < 1000  # half the lines are the straggler's
    assert running_quantile(d, 0.5, per_steps=True) == 1023


WORKERS = FIXTURES / "sglang-0.5.16-h100-tokenizer-workers.log"


def test_the_stop_of_several_tokenizer_workers_is_not_a_crash():
    """With ``--tokenizer-worker-num 4`` each process prints its ``SIGTERM received`` undated and the
    first dated line of the stop is uvicorn's ``INFO:     Received SIGTERM, exiting.``; the parent's
    ``kill_process_tree`` that follows is the stop glm5lib asked for (the H100 run's notebook 05 led
    with "a server child process died" before this was read)."""
    slog = logs.parse_log(WORKERS)
    assert slog.errors.empty and slog.crash_cause() is None, slog.errors
    assert slog.startup["shutdown_requested_at"] == "2026-12-05 18:54:24"
    assert slog.startup["errors_during_shutdown"] == 1
    assert slog.server_args["tokenizer_worker_num"] == 4
    assert slog.decode["running_req"].tolist()[:3] == [1023, 1023, 1023]
    # each spelling of the marker alone still marks the stop
    for marker in ("SIGTERM received. signum=None frame=None.", "[2026-12-05 18:54:26] INFO:     Received SIGTERM, exiting."):
        keep = [line for line in WORKERS.read_text().splitlines()
                if not ("SIGTERM" in line and marker not in line)]
        assert logs.parse_log("\n".join(keep)).crash_cause() is None, marker
    # with neither, the same kill_process_tree line is a fault
    text = "\n".join(line for line in WORKERS.read_text().splitlines() if "SIGTERM" not in line)
    assert logs.parse_log(text).crash_cause() == "sigquit"


def test_the_stop_ends_a_traceback_printed_before_it():
    text = ("[2026-12-05 18:54:20] Decode batch, #running-req: 1, #token: 9, token usage: 0.00, cuda graph: True, "
            "gen throughput (token/s): 4.00, #queue-req: 0\n"
            "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nValueError: warm-up\n"
            "INFO:     Received SIGTERM, exiting.\n"
            "[2026-12-05 18:54:30] kill_process_tree called: parent_pid=1257, include_parent=False, pid=1257\n")
    slog = logs.parse_log(text)
    assert slog.startup.get("shutdown_requested_at") == "2026-12-05 18:54:20"
    assert "sigquit" not in set(slog.errors["kind"]) if len(slog.errors) else True
