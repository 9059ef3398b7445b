"""Write a small random-weight Qwen3-MoE model and a byte-level BPE tokenizer to a folder.

    python3 scripts/gpu/make_tiny_model.py OUT_DIR

About 0.42 B parameters in bfloat16 (8 layers, 32 experts, 4 active per token), a byte-level BPE
vocabulary trained on random words (it stops at 330 tokens: the corpus has 16 distinct words, so
English prompts take about four tokens a word), and no end-of-sequence token in its generation config, so
a request always runs to ``max_tokens``. Its outputs are meaningless; its cost per token is that
of a real MoE forward pass, which is what a serving benchmark needs. Needs torch, tokenizers and
transformers (5.x).
"""

from __future__ import annotations

import random
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3MoeConfig

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "server", "token", "batch", "queue", "decode", "prefill", "gpu", "power"]


def main(out: str) -> None:
    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(50)) for _ in range(2000)]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=2000, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    ))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None)
    fast.chat_template = (
        "{% for m in messages %}<|im_start|>{{m['role']}}\n{{m['content']}}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    fast.save_pretrained(out)
    config = Qwen3MoeConfig(
        vocab_size=len(fast), hidden_size=1024, intermediate_size=2048, moe_intermediate_size=512,
        num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=4, head_dim=64,
        num_experts=32, num_experts_per_tok=4, max_position_embeddings=4096,
        eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, bos_token_id=None,
    )
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = None
    model.save_pretrained(out)
    print(f"saved {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters to {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tinymoe")
