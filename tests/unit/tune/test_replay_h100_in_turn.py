"""The levers searched in turn on real SGLang 0.5.16 on one H100 (``data/examples/h100-sglang-tune-in-turn/``):
a running cap of 32 and a 512-token prefill chunk, 128 concurrent requests of 1,024-2,048 prompt and
64-128 output tokens, limit ``median_tpot_ms<=20``. The live search (``tune/``: the chunk, then the cap)
kept the configuration as given at 1,566 tok/s; the chunks measured after it (``chunk-grid/``) and the caps
at a 4,096 chunk (``cap-grid/``) reached 3,140 tok/s within the limit. The chunks it tried, 530 and 1,060,
were not sizes SGLang captures as prefill CUDA graphs: every full chunk ran eager.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from grid_replay import GridReplay

from glm5lib import rundir, tune
from glm5lib.engines.sglang import levers
from glm5lib.engines.sglang.config import ServerConfig, prefill_graph_sizes

EXAMPLE = Path(__file__).resolve().parents[3] / "data" / "examples" / "h100-sglang-tune-in-turn"
CHUNK, CAP = "chunked_prefill_size", "max_running_requests"
FIRST = "tune/lever-1-chunked_prefill_size"
WORKLOAD = tune.Workload(128, 2048, 128, 20.0, warmup=4, sweep_options={"range_ratio": 0.5})
GOAL = tune.Goal.parse(["median_tpot_ms<=20"])
CAPTURED = re.compile(r"Capture target prefill CUDA graph begin\. backend=\w+, num_tokens=\[([\d, ]+)\]")
PREFILL = re.compile(r"Prefill batch, #new-seq: \d+, #new-token: (\d+),.*cuda graph: (True|False)")


def _phases() -> list[Path]:
    return sorted(p.parent for p in EXAMPLE.rglob(rundir.SERVER_LOG))


def _last(phase: str) -> pd.Series:
    return pd.read_csv(EXAMPLE / phase / rundir.SWEEP).iloc[-1]


def _chunk_steps(phase: str) -> dict[bool, int]:
    """How many prefill steps of a whole chunk ran under a CUDA graph (True) and eager (False)."""
    chunk = json.loads((EXAMPLE / phase / rundir.CONFIG).read_text())["server_args"][CHUNK]
    out = {True: 0, False: 0}
    for m in PREFILL.finditer((EXAMPLE / phase / rundir.SERVER_LOG).read_text()):
        if int(m[1]) == chunk:
            out[m[2] == "True"] += 1
    return out


def test_the_prefill_token_counts_sglang_captured_are_the_grid_the_tuner_knows():
    checked = 0
    for folder in _phases():
        chunk = json.loads((folder / rundir.CONFIG).read_text())["server_args"][CHUNK]
        (listed,) = CAPTURED.findall((folder / rundir.SERVER_LOG).read_text())
        assert [int(v) for v in listed.split(",")] == prefill_graph_sizes(chunk), folder
        checked += 1
    assert checked >= 8


def test_a_chunk_between_two_captured_sizes_runs_every_full_chunk_eager_and_breaks_the_limit():
    """512 and 2,048 are captured sizes, 530 and 1,060 are not: each of their full chunks ran eager,
    and the same load lost 40-60% of its throughput and broke the limit it met at 512."""
    on, off = ["tune/lever-1-chunked_prefill_size/tune-1", "chunk-grid/grid-1"], [f"{FIRST}/tune-2", f"{FIRST}/tune-3"]
    for phase in on:
        steps = _chunk_steps(phase)
        assert steps[True] > 0 and steps[False] == 0, phase
    for phase in off:
        steps = _chunk_steps(phase)
        assert steps[False] > 0 and steps[True] == 0, phase
    at512 = _last(on[0])
    for phase in off:
        row = _last(phase)
        assert row["output_throughput"] < 0.65 * at512["output_throughput"]
        assert row["median_tpot_ms"] > 20 >= at512["median_tpot_ms"]
    assert _last(on[1])["output_throughput"] > 1.4 * at512["output_throughput"]


def test_the_chunk_lever_of_a_release_that_captures_prefill_graphs_takes_only_captured_sizes():
    (chunk,) = [lev for lev in levers("0.5.16") if lev.field == CHUNK]
    assert chunk.on_grid()[0] == 256 and 512 in chunk.on_grid() and 530 not in chunk.on_grid()
    assert (chunk.snap(530), chunk.snap(1060), chunk.snap(2120)) == (512, 1024, 2048)
    assert set(chunk.on_grid()) <= set(prefill_graph_sizes(int(chunk.high)))
    (older,) = [lev for lev in levers("0.5.9") if lev.field == CHUNK]
    assert older.on_grid() == [] and older.snap(530) == 530  # piecewise prefill graphs were off by default


class _Stop(Exception):
    pass


def test_from_the_recorded_first_launch_the_search_doubles_the_chunk_to_a_captured_size(tmp_path):
    """The live search went 512 -> 530 (the value nearest the evidence) -> 1,060: both eager. From the
    same first launch it now measures 1,024: twice the chunk, a size SGLang captures."""
    asked: list[dict] = []

    def measure(changes, phase, extra_levels=()):
        asked.append(dict(changes))
        if changes != {CHUNK: 512}:
            raise _Stop
        shutil.copytree(EXAMPLE / FIRST / "tune-1", tmp_path / phase)
        return tmp_path / phase

    base = ServerConfig.load(EXAMPLE / "capped-config.json")
    with pytest.raises(_Stop):
        tune.tune(base, tmp_path, GOAL, WORKLOAD, backend="sglang", max_launches=3,
                  levers=[f"{CHUNK}=256:8192"], measure=measure)
    assert asked == [{CHUNK: 512}, {CHUNK: 1024}]


def test_replayed_on_the_captured_sizes_the_chunk_search_reaches_the_best_chunk_in_four_launches(tmp_path):
    points = pd.DataFrame([{"value": 512, "phase": f"{FIRST}/tune-1"}] + [
        {"value": v, "phase": f"chunk-grid/grid-{i}"} for i, v in enumerate((2048, 4096, 8192), 1)])
    points = points.join(pd.DataFrame([_last(p)[["output_throughput", "median_tpot_ms"]] for p in points["phase"]]))
    replay = GridReplay(EXAMPLE, points, CHUNK)
    launches: list[float] = []
    base = ServerConfig.load(EXAMPLE / "capped-config.json")
    result = tune.tune(base, tmp_path, GOAL, WORKLOAD, backend="sglang", max_launches=4,
                       levers=[f"{CHUNK}=512:8192"], measure=replay.measure(tmp_path, launches))
    assert launches[:3] == [512, 1024, 2048] and all(v in prefill_graph_sizes(8192) for v in launches)
    picked = float(result.best["changes"][CHUNK])
    assert replay.figure(picked) >= 0.95 * points["output_throughput"].max()
    assert replay.figure(picked, "median_tpot_ms") <= 20


def test_replayed_at_the_chunk_found_the_cap_search_doubles_throughput_over_the_cap_alone(tmp_path):
    """At a 4,096 chunk the cap has room: 48 and 64 meet 20 ms (16.7 and 19.9 ms). Searched from 32,
    the cap reaches at least 90% of the best measured, about twice the 1,566 tok/s the cap alone kept
    at a 512 chunk (data/examples/h100-sglang-tune-cap-chunk: every cap of 48-128 broke 20 ms there)."""
    points = pd.DataFrame([{"value": 32, "phase": "chunk-grid/grid-2"}, {"value": 48, "phase": "cap-grid/grid-1"},
                           {"value": 64, "phase": "cap-grid/grid-2"}])
    points = points.join(pd.DataFrame([_last(p)[["output_throughput", "median_tpot_ms"]] for p in points["phase"]]))
    replay = GridReplay(EXAMPLE, points, CAP)
    launches: list[float] = []
    base = ServerConfig.load(EXAMPLE / "capped-config.json").with_changes(**{CHUNK: 4096})
    result = tune.tune(base, tmp_path, GOAL, WORKLOAD, backend="sglang", max_launches=4,
                       levers=[f"{CAP}=32:64"], measure=replay.measure(tmp_path, launches))
    picked = float(result.best["changes"][CAP])
    assert launches[0] == 32 and len(launches) <= 4
    assert replay.figure(picked, "median_tpot_ms") <= 20
    assert replay.figure(picked) >= 0.9 * points["output_throughput"].max()
    assert replay.figure(picked) > 1.7 * _last(f"{FIRST}/tune-1")["output_throughput"]
