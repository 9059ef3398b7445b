"""Scenarios: the stand-in started with flags that build one bottleneck, a short sweep, and the
finding the diagnosis must lead with.

Each scenario is real end to end: the stand-in's scheduler (its admission reserve, chunked
prefill and retraction follow SGLang's) writes SGLang's log lines, the load generator drives it
over HTTP, and :func:`glm5lib.diagnose.diagnose` reads the run folder. Levels are short (3-4 s,
duration-bound, so most requests never complete) and the decode log interval small, so each
scenario costs a few seconds.

The load generator shares the test machine with the stand-in: on a loaded machine it can fall
behind in any scenario (its own client-bound flag, or a server fed less than the offered load).
Outside the client scenario those two findings are set aside when the leading finding about the
server is checked.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from glm5lib import diagnose as dg
from glm5lib.engines.sim import run_standin
from glm5lib.errors import ServerLaunchError, SweepAbortedError
from glm5lib.loadgen import run_sweep
from glm5lib.telemetry import MetricsScraper

PROFILE = ("--sim-profile", "glm5-nvfp4-8x-rtxpro6000", "--decode-log-interval", "2")

# Findings that name a bottleneck of the server: a healthy server shows none of them.
BOTTLENECK_RULES = {
    "concurrency_cap",
    "kv_capacity",
    "admission_reserve",
    "prefill_budget",
    "retraction_churn",
    "cuda_graph",
    "underfed",
    "dp_imbalance",
    "saturation",
    "token_budget",
}


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    flags: tuple[str, ...]
    workload: dict[str, Any]
    expect: tuple[str, ...]  # acceptable leading rules; () = no bottleneck finding at all
    why: str
    aborts: bool = False  # the server dies mid-sweep and the sweep stops


SCENARIOS = [
    Scenario(
        "cap", ("--max-running-requests", "8"),
        dict(levels=[32], input_len=64, output_len=256),
        ("concurrency_cap",), "32 clients against a cap of 8: the batch pins at 8 and the rest queue",
    ),
    Scenario(
        "kv-bound", ("--max-total-tokens", "8000", "--max-running-requests", "256"),
        dict(levels=[32], input_len=1024, output_len=16),
        ("kv_capacity",), "1,040-token requests in an 8,000-token pool: about 7 fit, usage at 0.9",
    ),
    Scenario(
        "admission-bound", ("--max-total-tokens", "60000", "--max-running-requests", "256"),
        dict(levels=[64], input_len=64, output_len=4096, ignore_eos=False),
        ("admission_reserve",),
        "max_tokens 4096 x ratio 0.7 reserved per request in a 60,000-token pool: ~20 run, usage 0.03",
    ),
    Scenario(
        "prefill-bound",
        ("--chunked-prefill-size", "256", "--max-prefill-tokens", "256", "--max-running-requests", "256"),
        dict(levels=[32], input_len=2048, output_len=8),
        ("prefill_budget",), "2,048-token prompts through a 256-token prefill budget, 8-token answers",
    ),
    Scenario(
        "cuda-graph", ("--cuda-graph-max-bs-decode", "8", "--max-running-requests", "64"),
        dict(levels=[32], input_len=64, output_len=256),
        ("cuda_graph",), "a running batch of 32 with graphs captured up to 8",
    ),
    Scenario(
        "retraction-churn",
        ("--max-total-tokens", "4000", "--max-running-requests", "64", "--schedule-conservativeness", "0.01"),
        dict(levels=[32], input_len=100, output_len=4096, duration=4),
        ("retraction_churn",), "admission reserves almost nothing, so the pool overflows again and again",
    ),
    Scenario(
        "client-bound", ("--sim-zero-delay", "--max-running-requests", "512"),
        dict(levels=[256], input_len=16, output_len=256),
        ("client_bound", "underfed"), "steps take no time: the client cannot keep 256 streams fed",
    ),
    Scenario(
        "nan-crash", ("--sim-fault", "nan-after=2", "--max-running-requests", "64"),
        dict(levels=[8], input_len=64, output_len=16),
        ("crash:nan",), "NaN in the logits after two requests; the server dies mid-sweep", aborts=True,
    ),
    Scenario(
        "load-bound", ("--max-running-requests", "512"),
        dict(levels=[16], input_len=64, output_len=256),
        ("load_bound",), "16 clients, cap 512: every request runs, none queues; the question is how far it scales",
    ),
    Scenario(
        "healthy", ("--max-running-requests", "256"),
        dict(levels=[8], input_len=64, output_len=64),
        (), "8 clients, cap 256, a pool of a million tokens: nothing to fix",
    ),
]

START_FAULTS = [
    ("oom-at-start", ("crash:oom_pool", "crash:oom")),
    ("nccl-at-start", ("crash:nccl",)),
]


def measure(phase: Path, sc: Scenario) -> Path:
    phase.mkdir(parents=True)
    wl = dict(sc.workload)
    levels = wl.pop("levels")
    duration = wl.pop("duration", 3)
    with run_standin(*sc.flags, *PROFILE, log_path=phase / "server.log") as srv:
        if sc.aborts:
            with pytest.raises(SweepAbortedError):
                run_sweep(srv.base_url, levels, duration=duration, warmup=0, progress=False, run_dir=phase, **wl)
        else:
            run_sweep(srv.base_url, levels, duration=duration, warmup=0, progress=False, run_dir=phase, **wl)
    return phase


# Findings about the load generator rather than the server (see the module docstring).
CLIENT_RULES = {"client_bound", "underfed"}


def server_rules(frame: pd.DataFrame, sc: Scenario) -> list[str]:
    rules = list(frame["rule"])
    if not CLIENT_RULES & set(sc.expect):
        rules = [r for r in rules if r not in CLIENT_RULES]
    return rules


def _client_below_half_a_core(phase: Path) -> bool:
    sweep = pd.read_csv(phase / "sweep.csv")
    return bool((pd.to_numeric(sweep["client_cpu_pct"], errors="coerce") < 50).all())


def leading(frame: pd.DataFrame, sc: Scenario) -> str | None:
    rules = server_rules(frame, sc)
    return rules[0] if rules else None


@pytest.mark.slow
@pytest.mark.parametrize("sc", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_scenario_leads_with_its_finding(tmp_path, sc):
    phase = measure(tmp_path / "run" / sc.name, sc)
    frame = dg.diagnose(phase, write=False)
    table = frame[["rule", "score", "finding", "evidence"]].to_string()
    if not sc.expect:
        assert not set(server_rules(frame, sc)) & BOTTLENECK_RULES, f"{sc.why}\n{table}"
        return
    top = leading(frame, sc)
    if sc.name == "client-bound" and _client_below_half_a_core(phase):
        # a client held below half a core by the machine's other processes is starved, not the limit:
        # the finding is a caveat on latency, and the load generator must not lead (issue 25)
        assert "client_starved" in set(frame["rule"]) and top != "client_bound", table
        return
    assert top in sc.expect, f"{sc.name}: {sc.why}; leading {top!r}\n{table}"
    row = frame[frame["rule"] == top].iloc[0]
    # every finding rests on numbers and names a remedy
    assert any(ch.isdigit() for ch in row["evidence"]), row["evidence"]
    assert row["suggestion"]
    # duration-bound levels: no rule was skipped for want of completed requests
    assert not any("completed" in s for s in frame.attrs["skipped"]), frame.attrs["skipped"]


@pytest.mark.slow
@pytest.mark.parametrize("fault,expect", START_FAULTS, ids=[f for f, _ in START_FAULTS])
def test_start_up_crash_scenarios_lead_with_the_crash(tmp_path, fault, expect):
    phase = tmp_path / "run" / fault
    phase.mkdir(parents=True)
    with pytest.raises(ServerLaunchError), run_standin("--sim-fault", fault, *PROFILE, log_path=phase / "server.log"):
        pass
    frame = dg.diagnose(phase, write=False)
    assert frame.iloc[0]["rule"] in expect, frame[["rule", "finding"]].to_string()


def test_there_are_at_least_ten_scenarios_each_with_its_own_leading_finding():
    assert len(SCENARIOS) + len(START_FAULTS) >= 10
    expected = [s.expect for s in SCENARIOS if s.expect] + [e for _, e in START_FAULTS]
    assert len({e[0] for e in expected}) == len(expected)


def test_real_vllm_run_capped_by_max_num_seqs_leads_with_the_cap_in_vllms_flag(tmp_path):
    # vLLM 0.32.0 on CPU with --max-num-seqs 4 under a closed loop up to 64 (tests/fixtures/vllm):
    # the same rules, fed by the vLLM log adapter, name vLLM's own flag.
    phase = tmp_path / "run"
    phase.mkdir()
    log = Path(__file__).parents[1] / "fixtures" / "vllm" / "cpu-capped.log"
    (phase / "server.log").write_text(log.read_text())
    frame = dg.diagnose(phase, write=False)
    top = frame.iloc[0]
    assert top["rule"] == "concurrency_cap", frame[["rule", "finding"]].to_string()
    assert "at most 4 requests" in top["finding"] and "queued requests averaged" in top["evidence"]
    assert "--max-num-seqs" in top["suggestion"] and "--max-running-requests" not in top["suggestion"]


@pytest.mark.slow
def test_a_cap_the_sparse_decode_log_misses_is_named_from_the_metrics_gauges(tmp_path):
    # issue 25 item 7: SGLang writes a decode line every 40 steps; at large batches a level can pass
    # with none. Here the stand-in logs one every 100,000 steps (none in the level) while /metrics is
    # scraped twice a second: the cap of 16 with 48 queued is read from the gauges.
    phase = tmp_path / "run" / "sparse-log"
    phase.mkdir(parents=True)
    flags = ("--max-running-requests", "16", "--sim-profile", "glm5-nvfp4-8x-rtxpro6000",
             "--decode-log-interval", "100000", "--enable-metrics")
    with run_standin(*flags, log_path=phase / "server.log") as srv, MetricsScraper(
            srv.base_url, interval=0.5, out=phase / "metrics.csv"):
        run_sweep(srv.base_url, [64], duration=3, warmup=0, progress=False, run_dir=phase,
                  input_len=64, output_len=256)
    ev = dg.load_evidence(phase)
    assert ev.log_decode().empty  # the log had no decode line with requests running
    levels = ev.level_table()
    assert levels.iloc[0]["source"] == "metrics" and levels.iloc[0]["running_max"] == 16, levels
    assert levels.iloc[0]["queued_max"] >= 40, levels
    frame = dg.diagnose(phase, write=False)
    sc = Scenario("sparse-log", flags, {}, ("concurrency_cap",), "")
    assert leading(frame, sc) == "concurrency_cap", frame[["rule", "finding", "evidence"]].to_string()
    row = frame[frame["rule"] == "concurrency_cap"].iloc[0]
    assert "at most 16 requests" in row["finding"] and "/metrics scrapes" in row["evidence"]
