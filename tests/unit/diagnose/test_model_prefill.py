"""The prefill chunk's term (glm5lib.diagnose.model.prefill): forwards a request takes, the benchmark's
price of a token, and a chunk change forecast from a phase's own prefill time per request."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest
from recorded import CHUNK_LEVELS, EXAMPLES

from glm5lib.diagnose.model import PerfModel
from glm5lib.diagnose.model.prefill import forwards, read_prefill

LONG = EXAMPLES / "h100-sglang-chunk-long"


@pytest.mark.parametrize("input_len,chunk,alone,expected", [
    (2048, 512, True, (4, 4, 4)),  # a longer prompt: one forward per chunk
    (2048, 512, False, (4, 4, 4)),
    (1000, 512, True, (2, 2, 2)),  # its remainder a forward of its own when alone
    (1000, 512, False, (1000 / 512, 1000 / 512, 2)),  # or shared with the next prompt's first chunk
    (2048, 2048, False, (1, 1, 1)),
    (2048, 8192, True, (1, 1, 1)),  # a prompt alone: one forward, however wide the chunk
    (2048, 8192, False, (0.25, 0.5, 1)),  # four may share one: the middle, the band spans both
])
def test_forwards_a_request_takes(input_len, chunk, alone, expected):
    assert forwards(input_len, chunk, alone=alone) == pytest.approx(expected)


def _profile(rows):
    return pd.DataFrame([{"batch": b, "input_len": i, "prefill_ms": ms, "step_ms": 3.0, "source": "bench"}
                         for b, i, ms in rows])


def test_the_benchmark_prices_a_token_only_from_forwards_of_two_sizes():
    per_token, fixed, spread, source = read_prefill(_profile([(1, 1000, 12.0), (4, 1000, 36.0)]))
    assert per_token == pytest.approx(0.008) and fixed == pytest.approx(4.0) and source == "bench"
    assert spread == pytest.approx(0.05)  # two points fit exactly: the least spread
    # one size of forward (whatever the batch it came from) cannot split a forward's cost
    assert read_prefill(_profile([(1, 1000, 12.0), (2, 500, 12.5)])) is None
    assert read_prefill(_profile([(1, 1000, 12.0)])) is None
    assert read_prefill(None) is None
    assert read_prefill(pd.DataFrame({"batch": [1, 4], "step_ms": [3.0, 4.0]})) is None  # no prefill timed
    # a price per token that falls as forwards grow is no price
    assert read_prefill(_profile([(1, 1000, 30.0), (4, 1000, 20.0)])) is None


def test_the_chunk_the_phase_ran_is_no_change_and_a_narrower_one_is_a_loss():
    model = PerfModel.fit_phase(LONG / "baseline")
    same = model.forecast({"chunked_prefill_size": 512}, CHUNK_LEVELS)
    base = model.forecast({}, CHUNK_LEVELS)
    assert [f.predicted_tok_s for f in same] == pytest.approx([f.predicted_tok_s for f in base])
    assert not any("prefill chunk" in s for f in same for s in f.sources)
    narrower = model.forecast({"chunked_prefill_size": 256}, CHUNK_LEVELS)
    assert all(n.predicted_tok_s < b.predicted_tok_s for n, b in zip(narrower, base, strict=True))


def test_a_chunk_change_beside_a_cap_change_carries_both_terms():
    model = PerfModel.fit_phase(LONG / "baseline")
    [both] = model.forecast({"chunked_prefill_size": 2048, "max_running_requests": 64}, [256])
    [cap] = model.forecast({"max_running_requests": 64}, [256])
    assert both.running == cap.running == 64 and both.binding_limit == "running_cap"
    assert both.predicted_tok_s > cap.predicted_tok_s
    assert any("prefill chunk 512 -> 2,048" in s for s in both.sources), both.sources


def test_a_benchmark_taken_settles_the_withheld_levels(tmp_path):
    # the recorded baseline without its benchmark, then with it back: what settle_forecast's one launch adds
    shutil.copytree(LONG / "baseline", tmp_path / "baseline")
    profile = tmp_path / "baseline" / "step-profile.csv"
    kept = profile.read_text()
    profile.unlink()
    withheld = PerfModel.fit_phase(tmp_path / "baseline").forecast({"chunked_prefill_size": 2048}, CHUNK_LEVELS)
    assert not any(f.given for f in withheld)
    assert {tuple(f.measurement["batches"]) for f in withheld} == {(1, 4)}
    profile.write_text(kept)
    given = PerfModel.fit_phase(tmp_path / "baseline").forecast({"chunked_prefill_size": 2048}, CHUNK_LEVELS)
    assert all(f.given and f.needs == "" for f in given)


def test_a_decode_line_slowed_by_prefills_gives_way_to_the_offline_step():
    from types import SimpleNamespace

    from glm5lib.diagnose.model.prefill import PrefillForwards

    # one request alone, 32 output tokens, four 256-token forwards of 12 ms + 10.24 ms: the served time per
    # token is (89 + 31 x 51.5) / 32; the decode lines, each spanning a prefill, read 53.9 ms a step
    u = (4 * (12.0 + 256 * 0.04) + 31 * 51.5) / 32
    level = SimpleNamespace(running=1.0, u_ms=u, line_step_ms=53.9, input_len=1024.0, output_len=32.0,
                            concurrency=1, eager=False)
    price = (0.04, 12.0, 0.05, "bench")
    offline = SimpleNamespace(raw=lambda batch, eager: 51.5)
    assert PrefillForwards.fit([level], 256, price, offline).fixed_at(1) == pytest.approx(12.0, rel=1e-6)
    # read off the lines alone the forwards look nearly free
    assert PrefillForwards.fit([level], 256, price).fixed_at(1) < 2.0
    # a profile that does not cover the batch leaves the lines' step
    blind = SimpleNamespace(raw=lambda batch, eager: None)
    assert PrefillForwards.fit([level], 256, price, blind).fixed_at(1) < 2.0
