"""Real SGLang 0.5.16 on one H100 with a 512-token prefill chunk under 2,048-token prompts
(data/examples/h100-sglang-chunk-long): the chunk case again, at another prompt length and chunk, and
the same server read two ways. The sweep's baseline and ``glm5 watch`` of a live server that an
independent client loaded at 256 concurrent requests must name the same limit: the prefill budget.
The watch once led with the running cap instead, because requests waiting for the prefill budget
beside a full batch of the client's 256 looked like requests queued at the cap."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from recorded import CHUNK_LEVELS, EXAMPLES, measured

from glm5lib import diagnose as dg
from glm5lib.diagnose.model import PerfModel

EXAMPLE = EXAMPLES / "h100-sglang-chunk-long"


@pytest.fixture(scope="module")
def swept() -> pd.DataFrame:
    return dg.diagnose(EXAMPLE, reference="k2-thinking", phase="baseline", write=False)


@pytest.fixture(scope="module")
def watched() -> pd.DataFrame:
    return dg.diagnose(EXAMPLE / "live", phase="watch", write=False)


def test_the_sweep_leads_with_the_prefill_budget_and_raises_the_chunk_alone(swept):
    first = swept.iloc[0]
    assert first["rule"] == "prefill_budget", swept[["rule", "score"]].to_string()
    assert "took the whole budget of 512 tokens" in first["evidence"]
    assert json.loads(first["remedy"]) == {"chunked_prefill_size": 8192}
    # --max-prefill-tokens is 16,384 here: it admits 8,192 already, so it is named as no obstacle,
    # not as a second flag to raise
    assert "--chunked-prefill-size 8192" in first["suggestion"]
    assert "--max-prefill-tokens at 16384 admits that already" in first["suggestion"]
    assert "at least" not in first["suggestion"]


def test_the_watch_names_the_limit_the_sweep_names_and_not_the_cap(watched, swept):
    assert watched.iloc[0]["rule"] == swept.iloc[0]["rule"] == "prefill_budget", watched[["rule", "score"]].to_string()
    assert "concurrency_cap" not in set(watched["rule"])
    assert json.loads(watched.iloc[0]["remedy"]) == {"chunked_prefill_size": 8192}


def test_the_watch_as_recorded_led_with_the_cap_on_a_full_batch_with_a_few_requests_waiting():
    # what glm5 diagnose wrote on the GPU host before the cap rule asked for a queue beyond the cap's free slots
    recorded = pd.read_csv(EXAMPLE / "live" / "watch" / "findings.csv")
    assert recorded.iloc[0]["rule"] == "concurrency_cap"
    assert "queued requests averaged 1.62 (max 6)" in recorded.iloc[0]["evidence"]


def test_the_cap_does_not_bind_where_running_plus_queued_fit_under_it():
    ev = dg.load_evidence(EXAMPLE / "live", phase="watch")
    d = ev.active_decode()
    cap, _ = ev.cap()
    near = d[d["running_req"] >= cap - 7]
    assert len(near) >= 3 and (near["queue_req"] > 0).any()  # the samples the rule once took as pinned
    assert (near["running_req"] + near["queue_req"] <= cap).all()


@pytest.mark.parametrize("phase,chunk", [("chunk-2k", 2048), ("chunk-8k", 8192)])
def test_the_chunk_change_is_forecast_from_the_baseline_and_its_prefill_benchmark(phase, chunk):
    model = PerfModel.fit_phase(EXAMPLE / "baseline")
    # the benchmark's two prefill forwards (2,048 and 8,192 tokens: 21.5 and 68.9 ms) price a token
    assert model.prefill is not None and model.prefill.chunk == 512
    assert "prefill: forwards of up to 512 tokens, 7.7 us a token" in model.describe()
    assert model.prefill.per_token_ms == pytest.approx((68.89 - 21.53) / 6144, rel=1e-3)
    # what each level's prefill leaves for a forward's fixed part falls as the load rises (overlapped)
    fixed = [a for _, a in model.prefill.fixed]
    assert fixed == sorted(fixed, reverse=True) and fixed[0] > 1.8 * fixed[-1], model.prefill.fixed
    out = model.forecast({"chunked_prefill_size": chunk}, CHUNK_LEVELS)
    tok_s = measured(EXAMPLE, phase)
    base = model.forecast({}, CHUNK_LEVELS)
    for f, same in zip(out, base, strict=True):
        assert not f.unseen_changes and any(f"prefill chunk 512 -> {chunk:,}" in s for s in f.sources), f.sources
        assert f.predicted_tok_s > same.predicted_tok_s  # fewer forwards a request: a gain at every level
        if f.given:
            assert f.low_tok_s <= tok_s[f.concurrency] <= f.high_tok_s, (f.concurrency, f, tok_s[f.concurrency])
    # a chunk of the prompt's length is one forward a request, alone or not: no packing to guess
    if chunk == 2048:
        assert all(f.given for f in out)
    else:  # above the prompt, how many prompts a forward carries is not in the evidence: the band spans it
        for f in out:
            if not f.given:  # and a level withheld for it names that, not the step the phase already ran
                assert "how many prompts of 2,048 tokens one prefill forward carries under a chunk of 8,192 " \
                       "(1 to 4" in f.needs, f.needs
                assert f.measurement["kind"] == "level" and "bench_one_batch" not in f.needs
        assert out[0].given and all(f.high_tok_s - f.low_tok_s > o.high_tok_s - o.low_tok_s
                                    for f, o in zip(out[1:], model.forecast({"chunked_prefill_size": 2048},
                                                                             CHUNK_LEVELS)[1:], strict=True))


def test_the_wait_for_a_first_token_falls_with_the_forwards_a_prompt_takes():
    model = PerfModel.fit_phase(EXAMPLE / "baseline")
    ttft = pd.read_csv(EXAMPLE / "chunk-2k" / "sweep.csv").set_index("concurrency")["mean_ttft_ms"]
    for f, same in zip(model.forecast({"chunked_prefill_size": 2048}, CHUNK_LEVELS), model.forecast({}, CHUNK_LEVELS),
                       strict=True):
        assert f.ttft_ms < 0.7 * same.ttft_ms  # four forwards a prompt become one
        if f.concurrency >= 16:  # where others' prefills are the wait (measured 0.52-0.55 of the baseline's)
            assert f.ttft_ms == pytest.approx(ttft[f.concurrency], rel=0.25), (f.concurrency, f.ttft_ms)


def test_without_the_benchmark_the_chunk_change_is_withheld_naming_it(tmp_path):
    shutil.copytree(EXAMPLE / "baseline", tmp_path / "baseline")
    (tmp_path / "baseline" / "step-profile.csv").unlink()
    model = PerfModel.fit_phase(tmp_path / "baseline")
    assert model.prefill is None
    for f in model.forecast({"chunked_prefill_size": 2048}, CHUNK_LEVELS):
        assert not f.given and "prefills in forwards of their own" in f.unseen_changes[0]
        assert f.measurement == {"kind": "step_profile", "batches": [1, 4], "graphs_off": None}, f.needs
    tok_s = measured(EXAMPLE, "chunk-2k")
    # the point the model computes without it is the phase's own step, which the launch beat at 64 and 256
    assert all(tok_s[f.concurrency] > 1.1 * f.predicted_tok_s for f in model.forecast(
        {"chunked_prefill_size": 2048}, CHUNK_LEVELS) if f.concurrency >= 64)


def test_the_recorded_run_measured_what_the_readme_says():
    base, two, eight = measured(EXAMPLE, "baseline"), measured(EXAMPLE, "chunk-2k"), measured(EXAMPLE, "chunk-8k")
    assert 1.0 < (two / base)[1] < 1.1 and (two / base)[256] > 1.3
    # at 256 a chunk of four whole prompts did not beat a chunk of one in this launch each
    assert eight[256] < two[256] and eight[64] > two[64]
