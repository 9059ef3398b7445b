"""``python -m glm5lib.sim.bench``: the stand-in's ``bench_one_batch`` (not SGLang's).

It takes SGLang's server flags and ``bench_one_batch``'s own (``--batch-size`` one or more,
``--input-len``, ``--output-len``), resolves them as the stand-in server does, and prints what
SGLang's benchmark prints, in its format, with step times from the stand-in's profile: a capture
line naming the decode graph sizes, a warm-up point, ``Benchmark ...``, then per batch size a
``Prefill.`` line, the first decode steps, ``Decode.  median latency`` and ``Total.``. Its first
line says it is the stand-in. It takes no time of its own: the times are the model's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence

from glm5lib.errors import ConfigError
from glm5lib.sim.args import parse_sim_argv
from glm5lib.sim.lines import capture_lines

__all__ = ["main"]

_GB = 1024**3


def _point(args, batch: int, input_len: int, output_len: int) -> list[str]:
    prof, ctx = args.profile, args.step
    prefill = prof.prefill_ms(batch * input_len, 0, ctx)
    steps = [prof.decode_ms(batch, batch * (input_len + i), ctx) for i in range(max(output_len - 1, 1))]
    lines = [f"Prefill. latency: {prefill / 1000:6.5f} s, throughput: {batch * input_len / (prefill / 1000):9.2f} token/s"]
    for i, ms in enumerate(steps[:5]):
        lines.append(f"Decode {i}. Batch size: {batch}, latency: {ms / 1000:6.5f} s, "
                     f"throughput: {batch / (ms / 1000):9.2f} token/s")
    med = statistics.median(steps)
    lines.append(f"Decode.  median latency: {med / 1000:6.5f} s, median throughput: {batch / (med / 1000):9.2f} token/s")
    total = (prefill + sum(steps)) / 1000
    lines.append(f"Total. latency: {total:6.3f} s, throughput: {(input_len + output_len) * batch / total:9.2f} token/s")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python -m glm5lib.sim.bench", add_help=True,
                                description="The stand-in's bench_one_batch (not SGLang): step times from its profile.")
    p.add_argument("--batch-size", type=int, nargs="+", default=[1])
    p.add_argument("--input-len", type=int, nargs="+", default=[1024])
    p.add_argument("--output-len", type=int, nargs="+", default=[16])
    p.add_argument("--run-name", default="default")
    p.add_argument("--result-filename", default=None)
    ns, rest = p.parse_known_args(argv)
    try:
        args = parse_sim_argv(rest)
    except ConfigError as exc:
        print(f"glm5lib.sim.bench: error: {exc}", file=sys.stderr)
        return 2
    out = [f"glm5lib stand-in bench_one_batch (not SGLang): step times from profile {args.profile.name!r}"]
    if args.step.cuda_graph:
        before, done = capture_lines(args.release, sizes=list(args.step.graph_sizes), avail_before=0.0, elapsed=0.0,
                                     mem_usage=0.0, avail_after=0.0)
        out += [*before, *done]
    out.append(f"max_total_num_tokens={args.max_total_num_tokens}")
    out.append("Warmup ...")
    out += _point(args, ns.batch_size[0], ns.input_len[0], min(32, ns.output_len[0]))
    out.append("Benchmark ...")
    for b in ns.batch_size:
        for i in ns.input_len:
            for o in ns.output_len:
                if b > args.max_total_num_tokens // max(i + o, 1):
                    out.append(f"skipping ({b}, {i}, {o}) due to max batch size limit")
                    continue
                out += _point(args, b, i, o)
    print("\n".join(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
