"""Prompts exact in tokens on real vLLM (CPU, the tiny test model): text prompts of the asked length.

The tiny model's vocabulary splits the load generator's words into several tokens each (512 words
were about 2,100 tokens); sized from the server's counts during warm-up, prompts come within 10%.
"""

from __future__ import annotations

import pytest

from glm5lib.engines import vllm as ev

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory, vllm_installed):
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with ev.launch_vllm("vllm-capped", log_path=log, ready_timeout=600.0) as srv:
        yield srv


@pytest.mark.timeout(900)
def test_text_prompts_are_the_asked_length_in_the_served_models_tokens(vllm_server, tmp_path):
    from glm5lib.loadgen import load_requests, run_sweep

    options = {"api": "completions", "token_ids": False, "input_len": 512, "output_len": 4,
               "requests_per_level": 4, "warmup": 2, "progress": False, "model": vllm_server.model}
    exact = run_sweep(vllm_server.base_url, [2], run_dir=tmp_path / "exact", **options).iloc[0]
    assert exact["prompt_source"] in ("usage", "tokenizer")
    assert exact["prompt_length_ratio"] == pytest.approx(1.0, abs=0.10), exact["mean_prompt_tokens"]
    recs = load_requests(tmp_path / "exact")
    level = recs[~recs["warmup"].astype(bool)]
    assert len(level) == 4 and level["prompt_tokens"].between(0.9 * 512, 1.1 * 512).all()
    assert (level["asked_input_tokens"] == 512).all()
    # one word a token, as before: the same words are several times the asked length on this model
    words = run_sweep(vllm_server.base_url, [2], run_dir=tmp_path / "words", exact_prompts=False,
                      **options).iloc[0]
    assert words["prompt_source"] == "words" and words["prompt_length_ratio"] > 1.5
