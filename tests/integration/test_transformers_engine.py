"""Real `transformers serve` (continuous batching) on CPU, launched by glm5lib's transformers adapter.

Needs an interpreter with ``transformers[serving]`` 5.x and torch (``GLM5_TRANSFORMERS_PYTHON``,
``$ENGINES/transformers``, or this one); skipped with that reason otherwise. A random-weight
two-layer Qwen3 model is built in a temporary folder (seconds), served on 127.0.0.1, loaded at
one short level through glm5lib's load generator, and its log read back; the server is stopped
when the module's tests end.
"""

from __future__ import annotations

import subprocess

import pytest

from glm5lib import engines, logs
from glm5lib.engines import transformers as et
from glm5lib.errors import ServerLaunchError

pytestmark = [pytest.mark.slow, pytest.mark.solo]

TINY_MODEL = r'''
import random, sys
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config

out = sys.argv[1]
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
words = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "server", "token", "batch", "queue"]
random.seed(0)
text = [" ".join(random.choice(words) for _ in range(30)) for _ in range(300)]
tok.train_from_iterator(text, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_end|>"],
                                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
fast.save_pretrained(out)
torch.manual_seed(0)
cfg = Qwen3Config(vocab_size=len(fast), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
                  eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
model.generation_config.eos_token_id = None  # never stops early: every request reaches max_tokens
model.save_pretrained(out)
'''


@pytest.fixture(scope="module")
def transformers_python() -> str:
    """The interpreter that has transformers' server, or a skip saying why not."""
    try:
        python = et.transformers_python()
    except ServerLaunchError as exc:
        pytest.skip(f"transformers is not installed here ({exc})")
    probe = subprocess.run([python, "-c", "import transformers, torch, fastapi, uvicorn, tokenizers"],
                           capture_output=True, text=True, timeout=300, check=False)
    if probe.returncode != 0:
        pytest.skip(f"{python} cannot run transformers serve: {probe.stderr.strip().splitlines()[-1:]}")
    return python


@pytest.fixture(scope="module")
def served(tmp_path_factory, transformers_python):
    base = tmp_path_factory.mktemp("transformers")
    model = base / "tiny-qwen3"
    subprocess.run([transformers_python, "-c", TINY_MODEL, str(model)], check=True, capture_output=True,
                   timeout=600)
    # GET /v1/models scans the Hugging Face cache and answers 500 where its folder does not exist;
    # uvicorn then drops the connection, and the client's next request on it is reset: give it one
    cache = base / "hf-cache"
    cache.mkdir()
    config = et.TransformersConfig({"force_model": str(model), "device": "cpu", "cb_max_batch_tokens": 64,
                                    "cb_num_blocks": 64, "cb_block_size": 16}, env={"HF_HUB_CACHE": str(cache)})
    log = base / "server.log"
    srv = et.ADAPTER.launch(engines.LaunchRequest(config=config, log_path=log, ready_timeout=300.0))
    try:
        yield srv, base
    finally:
        srv.stop()
    assert not srv.alive()


@pytest.mark.timeout(600)
def test_one_level_through_glm5lib_and_its_log_read_back(served):
    from glm5lib.loadgen import run_sweep

    srv, base = served
    assert srv.alive() and srv.log_engine == "transformers"
    assert srv.argv[1:3] == ["-c", et.config.BOOTSTRAP] and "--continuous-batching" in srv.argv
    # its API: OpenAI's own fields only (no ignore_eos, no token ids, no stream_options)
    rows = run_sweep(srv.base_url, [2], run_dir=base / "sweep", api="completions", model=srv.model,
                     token_ids=False, ignore_eos=False, extra_body={"stream_options": None},
                     input_len=16, output_len=8, requests_per_level=4, warmup=1, progress=False)
    row = rows.iloc[0]
    assert row["concurrency"] == 2 and row["completed"] == 4 and row["failed"] == 0
    assert row["output_throughput"] > 0
    slog = logs.parse_log(srv.log_path)
    assert slog.startup["engine"] == "transformers" and slog.became_ready and slog.errors.empty
    # the paged cache as configured, read from the batching logger's INFO line
    assert (slog.startup["cb_max_batch_tokens"], slog.startup["cb_num_blocks"]) == (64, 64)
    assert slog.startup["max_running_requests"] == 64
    # up to 5.17 the line gives the block size and so the pool in tokens; 5.19 logs sectors (the
    # configured blocks) and their MB, and the pool is those blocks times the configured block size
    if "cb_block_size" in slog.startup:
        assert slog.startup["max_total_num_tokens"] == 64 * 16
    assert slog.startup["requests_received"] >= 5  # the warm-up and the level's requests
    completions = slog.http[slog.http["path"] == "/v1/completions"]
    assert len(completions) >= 5 and set(completions["status"]) == {200}
    limits = et.ADAPTER.limits({"cb_block_size": 16}, slog.startup)
    assert (limits.running_cap, limits.kv_tokens) == (64, 1024)
