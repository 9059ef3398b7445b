"""Build a tiny random-weight Qwen3-MoE model and a byte-level BPE tokenizer in a folder.

Usage: python make_tiny_model.py OUT_DIR [--size tiny|small]

Everything is made locally (the tokenizer is trained on generated text, the weights are random):
nothing is fetched from a model hub. About 0.3 M parameters (hidden 128, 2 layers, 8 experts, 2
active per token; the BPE trainer asks for 2,000 tokens and stops at about 330, all merges of its
16 words), small enough for vLLM to serve on two CPU cores. Prompts must be text: random token ids
fall outside the vocabulary. The model
never emits its end-of-sequence token, so every request runs to its max_tokens.

``--size small`` builds the same tokenizer with a model of about 16 M parameters (hidden 512, 4
layers, 8 heads of 64, 8 experts of 256, 2 active): its decode step grows with the batch (3.6 ms
at 2 running to 23 ms at 64 on two CPU cores) where the tiny model's stays near 2 ms until vLLM's
HTTP server, not the step, sets the pace. ``data/examples/predict-pairs`` has runs of both.
"""

import argparse
import random
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3MoeConfig

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "server", "token",
         "batch", "queue", "decode", "prefill", "gpu", "power"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{m['role']}}\n{{m['content']}}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


SIZES = {
    "tiny": dict(hidden_size=128, intermediate_size=256, moe_intermediate_size=16, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32),
    "small": dict(hidden_size=512, intermediate_size=1024, moe_intermediate_size=256, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=64),
}


def build(out: Path, size: str = "tiny") -> int:
    torch.manual_seed(0)
    rng = random.Random(0)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = [" ".join(rng.choice(WORDS) for _ in range(50)) for _ in range(2000)]
    tok.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=2000, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", bos_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    cfg = Qwen3MoeConfig(
        vocab_size=len(fast), **SIZES[size],
        num_experts=8, num_experts_per_tok=2, max_position_embeddings=4096,
        eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id, bos_token_id=None)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.generation_config.eos_token_id = None
    model.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description="Build a random-weight Qwen3-MoE test model and its tokenizer.")
    parser.add_argument("out", nargs="?", help="folder to write (default: SIZE-qwen3-moe)")
    parser.add_argument("--size", choices=sorted(SIZES), default="tiny")
    args = parser.parse_args()
    out = Path(args.out or f"{args.size}-qwen3-moe")
    out.mkdir(parents=True, exist_ok=True)
    n = build(out, args.size)
    print(f"saved {out} ({n / 1e6:.2f} M parameters)")


if __name__ == "__main__":
    main()
