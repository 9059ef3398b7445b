"""The performance model judged on recorded real runs: each forecast made from the baseline phase
alone (and the engine's offline step benchmark of it, where the pair recorded one), set beside what
the change measured, at every level.

For every level the test asserts what the model must do there: give a forecast whose point is within
a stated error and whose band (at most +/-30%) holds the measurement, or withhold it (band wider than
that) and name the measurement that would settle it. Where the model falls short of the project's
goal (within 15% at every level that held its batch; 25% with graphs switched off), the level is an
expected failure (strict: it fails the run once it passes, so the figure here is updated) whose
reason gives the figure. ``benchmarks/bench_predict.py`` prints the same table.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from glm5lib.diagnose import prediction
from glm5lib.diagnose.model import MAX_BAND

EXAMPLES = Path(__file__).resolve().parents[3] / "data" / "examples"
H200 = EXAMPLES / "h200-sglang"
H100 = EXAMPLES / "h100-sglang-next"
PINNED = EXAMPLES / "predict-pairs" / "vllm-cpu-pinned-max-num-seqs-4-256-profile"
CAP16 = EXAMPLES / "h100-sglang-cap16"
KV = EXAMPLES / "h200-sglang-kv"
POOL = {"max_total_tokens": 262144}
POOL64K = {"max_total_tokens": 65536}

KEPT = {"max_running_requests": 1024}
OFF = {"max_running_requests": 1024, "disable_cuda_graph": True, "disable_radix_cache": True}
EAGER_1024 = ("not forecast from the capped baseline: at 1,024 every step runs eagerly above the graph ceiling "
              "(256), the GPU's part of it 16x beyond the batches the baseline ran, and the tokenizer front end binds "
              "at 16x the streams it ran (band {band}); the point is {err} off; one level at 1,024 would settle it")
GLM5_FIX = {"max_running_requests": 1024, "cuda_graph_max_bs": 1024}
REMEDY = {**GLM5_FIX, "tokenizer_worker_num": 4, "stream_interval": 4}
RAISED16 = {"max_running_requests": 256}
OFF16 = {"max_running_requests": 256, "disable_cuda_graph": True, "disable_radix_cache": True}
FRONT = ("not forecast from the capped baseline (band {band}), point {err}: the tokenizer front end binds at {x}x the "
         "streams the baseline ran; its per-token cost is read with SGLang's stated growth per doubling, but one "
         "launch's reading of it moves by a fifth, so the band passes +/-30%")

# (run, change, phase, level, expectation): ("given", max |error|) or ("withheld", None)
CASES = [
    (H200, KEPT, "fix", 1, ("given", 0.15), None),
    (H200, KEPT, "fix", 64, ("given", 0.15), None),
    # its batch swung (199 of 256 running, the serving process at 99% of its core): no steady level
    (H200, KEPT, "fix", 256, ("withheld", None), None),
    (H200, KEPT, "fix", 1024, ("given", 0.15), EAGER_1024.format(band="+/-51%", err="+9%")),
    (H200, OFF, "fix-graphs-off", 1, ("given", 0.25), None),
    (H200, OFF, "fix-graphs-off", 64, ("given", 0.25), None),
    (H200, OFF, "fix-graphs-off", 256, ("given", 0.25), None),
    (H200, OFF, "fix-graphs-off", 1024, ("given", 0.25), EAGER_1024.format(band="+/-51%", err="+4%")),
    (H200, {"max_running_requests": 96}, "grid/grid-2", 256, ("given", 0.15), None),
    (H200, {"max_running_requests": 128}, "grid/grid-3", 256, ("given", 0.15), None),
    (H200, {"max_running_requests": 160}, "grid/grid-4", 256, ("given", 0.15), None),
    (H200, {"max_running_requests": 192}, "grid/grid-5", 256, ("given", 0.15),
     "not forecast (band +/-33%), point +10%: a batch of 192 is 3x the baseline's, and the level's batch swung "
     "(mean 128 running) with the serving process at 101% of its core"),
    # SGLang 0.5.16 on an H100: glm5lib's fix (cap and graph ceiling 1,024) from the capped baseline and
    # the engine's step benchmark of it at 1, 64 and 256
    (H100, GLM5_FIX, "glm5-fix", 1, ("given", 0.15), None),
    (H100, GLM5_FIX, "glm5-fix", 64, ("given", 0.15), None),
    (H100, GLM5_FIX, "glm5-fix", 256, ("given", 0.15), FRONT.format(band="+/-37%", err="+5%", x=4)),
    (H100, GLM5_FIX, "glm5-fix", 1024, ("given", 0.15), FRONT.format(band="+/-56%", err="+3%", x=16)),
    # the front-end remedy on top of it (4 tokenizer workers, stream interval 4), from the same baseline,
    # measured in a second sitting
    (H100, REMEDY, "frontend", 1, ("given", 0.15), None),
    (H100, REMEDY, "frontend", 64, ("given", 0.15), None),
    (H100, REMEDY, "frontend", 256, ("given", 0.15), None),
    (H100, REMEDY, "frontend", 1024, ("given", 0.15),
     "not forecast from the capped baseline (band +/-77%), point -39%: its step profile times batches 1-256, and "
     "at 1,024 the step's curve is extrapolated 4x; the benchmark that would settle it ran out of memory there"),
    # SGLang 0.5.16 on an H100, cap 16 -> 256 under 1,024-token prompts, with the graph and eager steps its
    # notebooks benchmarked; graphs off at 16 is left out: its batch swung between 9 and 16 (cohorts)
    *[(CAP16, RAISED16, "fix", c, ("given", 0.15), None) for c in (1, 16, 64, 256)],
    *[(CAP16, OFF16, "fix-graphs-off", c, ("given", 0.25), None) for c in (1, 64, 256)],
    # SGLang 0.5.16 on an H200 whose KV pool (16,384 tokens, --max-total-tokens) held 21 requests: the pool
    # raised to 262,144 and to 65,536 (where it binds again, at about 85 requests of 768 tokens)
    *[(KV, POOL, "fix", c, ("given", 0.15), None) for c in (1, 16, 64)],
    (KV, POOL, "fix", 256, ("withheld", None), None),
    *[(KV, POOL64K, "pool-64k", c, ("given", 0.15), None) for c in (1, 16, 64, 256)],
    # and the admission reserve lowered (--schedule-conservativeness 0.3): the pool still binds
    *[(KV, {"schedule_conservativeness": 0.3}, "glm5-fix", c, ("given", 0.15), None) for c in (1, 16, 64, 256)],
    # vLLM on CPU, pinned, with the engine's offline step benchmark of the capped baseline
    (PINNED, {"max_num_seqs": 256}, "fix", 16, ("given", 0.15), None),
    (PINNED, {"max_num_seqs": 256}, "fix", 64, ("given", 0.15), None),
]


def _frames():
    out = {}
    for run, changes, phase, *_ in CASES:
        key = (run, tuple(sorted(changes.items())), phase)
        if key not in out:
            out[key] = prediction.record_prediction(run, changes, phase=phase, write=False).set_index("concurrency")
    return out


FRAMES = _frames()


def _params():
    for run, changes, phase, level, want, shortfall in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=shortfall)] if shortfall else []
        yield pytest.param(run, changes, phase, level, want, marks=marks, id=f"{run.name}-{phase}-{level}")


@pytest.mark.parametrize("run, changes, phase, level, want", list(_params()))
def test_each_recorded_level_is_forecast_within_its_goal_or_withheld(run, changes, phase, level, want):
    row = FRAMES[(run, tuple(sorted(changes.items())), phase)].loc[level]
    kind, limit = want
    band = max(row["high"] / row["predicted"] - 1.0, 1.0 - row["low"] / row["predicted"])
    shown = (f"predicted {row['predicted']:,.0f} ({row['low']:,.0f}-{row['high']:,.0f}), measured {row['measured']:,.0f}, "
             f"error {row['error']:+.0%}, given {row['given']}")
    if kind == "withheld":
        assert not row["given"] and band > MAX_BAND and row["needs"], shown
        return
    assert bool(row["given"]), shown
    assert band <= MAX_BAND + 1e-9, shown
    assert abs(row["error"]) <= limit, shown
    assert row["low"] <= row["measured"] <= row["high"], shown


def test_a_forecast_withheld_names_the_engines_benchmark_at_the_batch():
    row = FRAMES[(H200, tuple(sorted(KEPT.items())), "fix")].loc[1024]
    assert not row["given"]
    assert "python -m sglang.bench_one_batch" in row["needs"] and "--batch-size 1024" in row["needs"]
    assert "--max-running-requests 1024" in row["needs"]


def test_the_levels_the_change_leaves_alone_match_net_of_the_launchs_drift():
    """The pinned pair's second launch ran 0.81x the first at the batches the cap does not touch (1
    and 4): the forecast there is the baseline's own measurement, off by that drift and no more."""
    frame = FRAMES[(PINNED, (("max_num_seqs", 256),), "fix")]
    assert frame["drift"].iloc[0] == pytest.approx(0.81, abs=0.02)
    for level in (1, 4):
        assert abs(frame.loc[level, "error_net_of_drift"]) <= 0.15, frame.loc[level]
