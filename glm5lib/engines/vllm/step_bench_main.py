"""vLLM's offline engine timing one decode step at several batch sizes, in one process.

Run by vLLM's own interpreter (it imports vLLM and the standard library only, never glm5lib)::

    python step_bench_main.py --batch-size 1 4 16 64 --input-len 32 --output-len 64 -- <engine flags>

The engine flags are the server's (``--model ... --max-num-seqs ...``), read by vLLM's own
``EngineArgs`` parser; flags only its HTTP server takes are ignored. For each batch size it builds
``LLM`` once, warms up, then times ``generate`` of that many random token-id prompts twice per
repeat: with one output token (the prefill and the first step) and with ``--output-len`` tokens
(EOS ignored); one decode step is the difference over the tokens between. It prints one JSON
object per batch size (``{"batch": 64, "step_ms": ..., "prefill_ms": ..., "total_ms": ...}``) after
a first line naming vLLM's version, so the output is its own record.
"""

import argparse
import json
import random
import statistics
import sys
import time


def _say(record):
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def main(argv):
    if "--" in argv:
        cut = argv.index("--")
        own, engine_argv = argv[:cut], argv[cut + 1:]
    else:
        own, engine_argv = argv, []
    p = argparse.ArgumentParser(prog="step_bench_main.py")
    p.add_argument("--batch-size", type=int, nargs="+", required=True)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    ns = p.parse_args(own)

    import vllm
    from vllm import LLM, SamplingParams
    from vllm.engine.arg_utils import EngineArgs

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # older releases
        from vllm.utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    known, ignored = parser.parse_known_args(engine_argv)
    engine_args = EngineArgs.from_cli_args(known)
    if max(ns.batch_size) > (engine_args.max_num_seqs or 0):
        engine_args.max_num_seqs = max(ns.batch_size)  # the batch asked must be able to run at once
    _say({"engine": "vllm", "version": vllm.__version__, "ignored_flags": ignored,
          "max_num_seqs": engine_args.max_num_seqs})
    llm = LLM.from_engine_args(engine_args)
    vocab = llm.llm_engine.model_config.get_vocab_size()
    rng = random.Random(ns.seed)

    def prompts(n):
        return [{"prompt_token_ids": [rng.randrange(1, max(vocab - 1, 2)) for _ in range(ns.input_len)]}
                for _ in range(n)]

    def timed(n, tokens):
        params = SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True, temperature=1.0)
        batch = prompts(n)
        t = time.perf_counter()
        llm.generate(batch, params, use_tqdm=False)
        return (time.perf_counter() - t) * 1000.0

    out_len = max(ns.output_len, 2)
    for b in ns.batch_size:
        timed(b, 2)  # warm-up: shapes of this batch
        first, whole = [], []
        for _ in range(max(ns.repeats, 1)):
            first.append(timed(b, 1))
            whole.append(timed(b, out_len))
        f, w = statistics.median(first), statistics.median(whole)
        step = max(w - f, 0.0) / (out_len - 1)
        _say({"batch": b, "input_len": ns.input_len, "output_len": out_len, "prefill_ms": f,
              "total_ms": w, "step_ms": step, "repeats": len(whole)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
