"""Levels that take long to reach a steady state: the test, the extension, the whole-level fallback.

Unit tests on synthetic samples and records (nothing launched), then the stand-in with a small
per-step prefill budget, whose long prompts are admitted slowly.
"""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from glm5lib.loadgen.client import RequestRecord
from glm5lib.loadgen.constraints import LevelBounds, LevelSamples, steady_state
from glm5lib.loadgen.metrics import level_stats
from glm5lib.loadgen.settings import SweepSettings
from glm5lib.loadgen.strategy import ClosedLoop, LevelClock


def _samples(rows) -> LevelSamples:
    samples = LevelSamples()
    for t, tokens, streaming in rows:
        samples.add(t, tokens, streaming)
    return samples


def test_a_flat_level_is_steady_and_a_ramping_one_is_not_with_the_reason():
    flat = _samples((0.25 * i, 100.0 * 0.25 * i, 8 if i else 0) for i in range(40))  # 10 s, 100 tok/s
    steady, why = steady_state(flat, duration=10.0)
    assert steady and why.startswith("steady") and "100 and 100 tok/s" in why
    # the running batch still growing at the end (long prompts admitted a few at a time)
    ramp = _samples((0.25 * i, 5.0 * i * i, min(64, i)) for i in range(40))
    steady, why = steady_state(ramp, duration=10.0)
    assert not steady and "still growing" in why
    # the batch flat but throughput climbing (prefill chunks stalling the decodes less and less)
    rising = _samples((0.25 * i, 2.0 * i * i, 8) for i in range(40))
    steady, why = steady_state(rising, duration=10.0)
    assert not steady and "throughput still rising" in why
    # streaming but no token after the ramp-up
    stuck = _samples((0.25 * i, 50.0, 4) for i in range(40))
    steady, why = steady_state(stuck, duration=10.0)
    assert not steady and "no tokens" in why
    assert steady_state(_samples([(0.0, 0.0, 1)]), 10.0) == (False, "only 1 samples of the level")


def _cycling(until: float, prefill: float = 1.5, decode: float = 1.0, clients: int = 8, rate: float = 80.0,
             slower_after: float | None = None):
    """Samples of a closed loop of like requests: ``clients`` wait ``prefill`` s for their first token,
    stream ``rate`` tok/s together for ``decode`` s, finish, and their successors start over (at half
    the rate from ``slower_after`` s on)."""
    rows, tokens, i = [], 0.0, 0
    while 0.25 * i <= until:
        t = 0.25 * i
        streaming = clients if (t % (prefill + decode)) >= prefill else 0
        rows.append((t, tokens, streaming))
        slow = slower_after is not None and t >= slower_after
        tokens += (rate / (2 if slow else 1)) * 0.25 if streaming else 0.0
        i += 1
    return _samples(rows)


def test_a_loop_that_moves_in_cycles_is_steady_wherever_its_deadline_falls():
    # 1.5 s of prefill, 1 s of decode: halves cut at the window's middle read 40-100% apart depending
    # on which spells they hold; halves cut where the streaming count climbs back read one rate
    for k in range(8):
        until = 9.0 + 0.25 * k
        steady, why = steady_state(_cycling(until), duration=8.0)
        assert steady, (until, why)
        assert "32 and 32 tok/s" in why, why  # 80 tok/s x 1 s of every 2.5 s
    # a loop whose rate does fall from one cycle to the next is still not steady
    steady, why = steady_state(_cycling(14.0, slower_after=7.5), duration=8.0)
    assert not steady and "throughput still falling" in why, why
    # one cycle since the ramp-up: its halves hold different spells, and the verdict says so
    steady, why = steady_state(_cycling(4.5), duration=4.0)
    assert not steady and why.startswith("one cycle of the loop since the ramp-up"), why


def test_bounds_extend_an_unsteady_level_in_steps_up_to_the_bound():
    bounds = LevelBounds.for_level(SweepSettings(duration=8.0, steady_extend=1.0), 16)
    assert bounds.duration == 8.0 and bounds.longest == 16.0 and bounds.step() == 2.0
    ramp = _samples((0.25 * i, 5.0 * i * i, min(64, i)) for i in range(32))
    later, why = bounds.next_deadline(100.0, 108.0, ramp)
    assert later == 110.0 and "still growing" in why
    assert bounds.next_deadline(100.0, 115.0, ramp)[0] == 116.0  # never past the bound
    assert bounds.next_deadline(100.0, 116.0, ramp)[0] is None  # at the bound: ends, not steady
    flat = _samples((0.25 * i, 25.0 * i, 8) for i in range(32))
    assert bounds.next_deadline(100.0, 108.0, flat) == (None, steady_state(flat, 8.0)[1])
    # no extension asked for, or no duration: the level ends at its deadline
    assert LevelBounds.for_level(SweepSettings(duration=8.0, steady_extend=0), 16).next_deadline(
        100.0, 108.0, ramp)[0] is None
    count_only = LevelBounds.for_level(SweepSettings(requests_per_level=10), 16)
    assert count_only.requests == 10 and count_only.duration is None and count_only.longest is None
    with pytest.raises(Exception, match="steady_extend"):
        SweepSettings(steady_extend=-1)


def test_a_closed_loop_waits_at_a_deadline_that_may_move_and_goes_on_when_it_does():
    async def scenario() -> tuple[int, int]:
        clock = LevelClock(time.time() + 0.2, may_extend=True)
        sent: list[float] = []

        async def send(_spec) -> None:
            sent.append(time.time())
            await asyncio.sleep(0.05)

        task = asyncio.create_task(ClosedLoop(2).issue(list(range(1000)), send, clock))
        await asyncio.sleep(0.35)  # past the deadline: both loops wait for the decision
        waiting = len(sent)
        await asyncio.sleep(0.1)
        assert len(sent) == waiting and not task.done()
        clock.extend_to(time.time() + 0.2)  # extended: both go on
        await asyncio.sleep(0.1)
        assert len(sent) > waiting
        await asyncio.sleep(0.2)
        clock.end()
        await asyncio.wait_for(task, 2.0)
        return waiting, len(sent)

    waiting, total = asyncio.run(scenario())
    assert 4 <= waiting < total


def _cut(index: int, first: float, times: list[float], counts: list[int], end: float) -> RequestRecord:
    return RequestRecord(level=64, index=index, start=0.001 * index, first_token=first, end=end, status="cancelled",
                         chunk_times=times, chunk_tokens=counts, output_tokens=counts[-1] if counts else None,
                         prompt_tokens=2100, token_source="chunk")


def test_a_level_whose_steady_window_is_a_sliver_reads_its_whole_throughput_not_zero():
    # issue 25's 7 s level: 64 long prompts admitted slowly; the last of the first 64 streams
    # 0.12 s before the deadline, with no token after it: the steady window holds nothing
    recs = []
    for i in range(64):
        first = 1.0 + i * (5.88 / 63)
        times = [first + 0.5 * k for k in range(max(1, int((6.9 - first) / 0.5)))]
        recs.append(_cut(i, first, times, list(range(1, len(times) + 1)), 7.0))
    row = level_stats(recs, concurrency=64, last_issue=0.063, deadline=7.0)
    streamed = sum(len(r.chunk_times) for r in recs)
    assert streamed > 0 and row["output_throughput"] > 0
    assert row["output_throughput"] == pytest.approx(streamed / (7.0 - 0.0), rel=0.01)
    assert row["steady"] is False and row["window_note"].startswith("whole level (not steady:")
    assert "holds 0 of the" in row["steady_note"]
    assert not math.isnan(row["median_tpot_ms"]) and row["median_tpot_ms"] > 0
    # the sweep's own verdict (not steady after its extensions) is reported the same way
    row = level_stats(recs[:8], concurrency=8, last_issue=0.007, deadline=7.0, unsteady="running batch still growing")
    assert row["steady"] is False and row["steady_note"] == "not steady: running batch still growing"
    assert row["output_throughput"] > 0


def test_a_slowly_admitted_level_on_the_stand_in_is_extended_and_never_reads_zero(tmp_path):
    from glm5lib.engines.sim import run_standin
    from glm5lib.loadgen import run_sweep

    # 256 prompt tokens a step against 2,048-token prompts: 24 requests take many steps to admit
    with run_standin("--max-running-requests", "64", "--chunked-prefill-size", "256", "--max-prefill-tokens", "256",
                     log_path=tmp_path / "server.log") as srv:
        df = run_sweep(srv.base_url, [24], input_len=2048, output_len=2000, duration=2.0, steady_extend=2.0,
                       warmup=0, run_dir=tmp_path, progress=False)
    row = df.iloc[0]
    assert row["extended_s"] > 0, row["steady_note"]
    assert row["duration"] > 2.5
    assert row["output_throughput"] > 0 and row["total_output_tokens"] == 0  # nothing finished, tokens streamed
    assert row["median_tpot_ms"] > 0 and row["tpot_requests"] > 0
    assert isinstance(row["steady_note"], str) and row["steady_note"]
    assert row["prompt_length_ratio"] == pytest.approx(1.0, abs=0.01) and row["prompt_source"].startswith("token_ids 1000-29999 (assumed")
    for column in ("host_cpus", "host_cpu_pct", "others_cpu_pct", "loop_lag_p50_ms", "loop_lag_max_ms"):
        assert row[column] >= 0, column
    # the stand-in is another process that held CPU during the level: it is named with its share
    assert "python" in str(row["other_processes"]).lower() or row["others_cpu_pct"] > 0


def test_the_self_check_names_the_processes_that_held_the_cores(tmp_path):
    import subprocess
    import sys

    from glm5lib.loadgen.selfcheck import SELFCHECK_COLUMNS, LevelSelfCheck

    check = LevelSelfCheck()
    busy = subprocess.Popen([sys.executable, "-m", "timeit", "-n", "100000000", "pass"])
    try:
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:  # until the busy process has used a measurable share
            try:
                import psutil

                if sum(psutil.Process(busy.pid).cpu_times()[:2]) >= 0.5:
                    break
            except Exception:
                break
            time.sleep(0.05)
        figures = check.finish()
    finally:
        busy.kill()
        busy.wait()
    assert set(SELFCHECK_COLUMNS) <= set(figures)
    assert f"[{busy.pid}] -m timeit" in figures["other_processes"]
    assert figures["others_cpu_pct"] >= 20 and figures["host_cpus"] >= 1
    assert 0 <= figures["host_cpu_pct"] <= 100 and figures["client_cpu_pct"] < 50


def test_prompt_scales_fit_the_served_counts_and_size_word_prompts():
    from glm5lib.loadgen import make_workload
    from glm5lib.loadgen.prompts import PromptScale, fit_scale, local_tokenizer

    # 4.1 tokens a word plus a chat template of 12: the totals' ratio, the template spread over the words
    scale = fit_scale([(512, 12 + 4.1 * 512), (256, 12 + 4.1 * 256)], "usage")
    assert scale.tokens_per_word == pytest.approx(4.1 + 24 / 768) and scale.overhead == 0
    assert scale.words(512) == round(512 / scale.tokens_per_word) and scale.source == "usage"
    assert fit_scale([(100, 400)], "usage").tokens_per_word == 4.0
    assert fit_scale([(100, None), (0, 5)], "usage") is None
    assert PromptScale(4.0, 12.0).words(512) == 125  # an overhead known otherwise comes off first
    specs = make_workload(3, level=1, input_len=512, token_ids=False, words_for=scale.words)
    assert all(len(s.prompt.split()) == scale.words(512) and s.input_len == 512 for s in specs)
    assert all(len(s.prompt.split()) == 512 for s in make_workload(2, level=1, input_len=512, token_ids=False))
    assert PromptScale().words(300) == 300
    assert local_tokenizer(None) is None and local_tokenizer("org/remote-model") is None


def test_prompt_scale_from_a_local_tokenizer_json(tmp_path):
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers package is not installed here")
    from glm5lib.loadgen.prompts import local_tokenizer

    # a word-level tokenizer split on whitespace: one token a word (unknown words included)
    model = tokenizers.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    count = local_tokenizer(tmp_path)
    assert count is not None and count("the of and") == 3


def test_the_measurement_quality_section_marks_prompts_off_length_and_levels_not_steady(tmp_path):
    import pandas as pd

    from glm5lib import rundir
    from glm5lib.report.quality import section_markdown

    assert section_markdown(tmp_path) is None  # no phase
    phase = tmp_path / "fix"
    phase.mkdir()
    pd.DataFrame({"concurrency": [16], "input_len": [512]}).to_csv(phase / rundir.SWEEP, index=False)
    assert section_markdown(tmp_path) is None  # an older sweep.csv: nothing to say
    pd.DataFrame({
        "concurrency": [16, 64], "input_len": [512, 512], "mean_prompt_tokens": [2110.0, 515.0],
        "prompt_length_ratio": [4.12, 1.006], "prompt_source": ["words", "usage"],
        "steady": [True, False], "steady_note": ["steady 9.0 s of 15.0", "not steady: running batch still growing"],
        "extended_s": [0.0, 15.0], "tpot_requests": [40, 64], "client_cpu_pct": [7.0, 6.0],
        "loop_lag_p99_ms": [340.0, 852.0], "host_cpu_pct": [99.0, 100.0],
        "other_processes": ["python[9] -m vllm.entrypoints.openai.api_server 183%", ""],
    }).to_csv(phase / rundir.SWEEP, index=False)
    text = section_markdown(tmp_path)
    assert text.startswith("## Measurement quality") and "### Phase `fix`" in text
    rows = [line for line in text.splitlines() if line.startswith("| 16 ") or line.startswith("| 64 ")]
    assert "**512 -> 2,110 (4.12x, words)**" in rows[0] and "| steady |" in rows[0]
    assert "vllm.entrypoints.openai.api_server 183%" in rows[0] and "lag p99 340.0 ms" in rows[0]
    assert "512 -> 515 (1.01x, usage)" in rows[1] and "**" not in rows[1].split("|")[2]
    assert "**not steady**: running batch still growing (extended 15 s)" in rows[1]
