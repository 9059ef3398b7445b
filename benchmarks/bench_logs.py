"""Parse rate of glm5lib.logs on a large synthetic SGLang log.

Generates a log of at least ``--size-mb`` MB (default 100) that mixes every line kind the
parser reads, in every generation it supports (2024 to 2026 decode and prefill lines, hybrid
and disaggregated variants, retractions, startup lines, uvicorn access lines, NCCL and glog
lines, tqdm redraws with glued log lines, ANSI colours, tracebacks, garbage), then times
``parse_log`` from file to DataFrames and prints MB/s. Target: at least 50 MB/s on one core.

    python benchmarks/bench_logs.py [--size-mb 100] [--repeat 3] [--keep PATH]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from glm5lib.logs import parse_log

HEADER = [
    "[{d} 09:59:58] server_args=ServerArgs(model_path='zai-org/GLM-5-NVFP4', tokenizer_path='zai-org/GLM-5-NVFP4', "
    "tp_size=8, max_running_requests=64, mem_fraction_static=0.9, chunked_prefill_size=8192, "
    "attention_backend='flashinfer', moe_runner_backend='flashinfer_cutlass', fp4_gemm_runner_backend='auto', "
    "enable_flashinfer_allreduce_fusion=True, disable_radix_cache=False, disable_cuda_graph=False, "
    "cuda_graph_bs=[1, 2, 4, 8, 16, 32, 64], api_key='sk-not-a-real-key-0123456789', json_model_override_args='{{}}')",
    "[{d} 10:00:05 TP0] Load weight begin. avail mem=93.12 GB",
    "[{d} 10:01:05 TP0] Load weight end. elapsed=60.12 s, type=GlmMoeDsaForCausalLM, dtype=torch.bfloat16, avail mem=40.00 GB, mem usage=53.12 GB.",
    "[{d} 10:01:06 TP0] KV Cache is allocated. #tokens: 500000, K size: 10.00 GB, V size: 10.00 GB",
    "[{d} 10:01:07 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=18.50 GB",
    "Capturing batches (bs=64 avail_mem=18.40 GB):  12%|█▎        | 1/8 [00:01<00:09,  1.31s/it]\r"
    "Capturing batches (bs=1 avail_mem=17.40 GB): 100%|██████████| 8/8 [00:05<00:00,  1.52it/s]"
    "[{d} 10:01:27 TP0] Capture cuda graph end. Time elapsed: 20.01 s. mem usage=1.20 GB. avail mem=17.30 GB.",
    "[{d} 10:01:28 TP0] max_total_num_tokens=500000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=64, context_len=202752, available_gpu_mem=17.30 GB",
    "[{d} 10:01:31] The server is fired up and ready to roll!",
]

# One template per line kind and generation; {t} is the time, the rest random numbers.
TEMPLATES = [
    # decode, 0.5.x (the bulk of a real log)
    (40, "[{d} {t} TP0] Decode batch, #running-req: {r}, #token: {n}, token usage: {u:.2f}, cuda graph: True, gen throughput (token/s): {g:.2f}, #queue-req: {q}, "),
    # decode, 2026
    (6, "[{d} {t} TP0] Decode batch, #running-req: {r}, #token: {n}, token usage: {u:.2f}, cuda graph: True, gen throughput (token/s): {g:.2f}, #queue-req: {q}, est. decode TFLOPS/s (per GPU): 12.3, est. read BW (GB/s per GPU): 456.7, fwd occupancy: 91.2%"),
    # decode, 2024 and early 2025
    (6, "[{d} {t} TP0] Decode batch. #running-req: {r}, #token: {n}, token usage: {u:.2f}, gen throughput (token/s): {g:.2f}, #queue-req: {q}"),
    (4, "[{d} {t} TP0] Decode batch. #running-req: {r}, #token: {n}, token usage: {u:.2f}, gen throughput (token/s): {g:.2f}, largest-len: 0, #queue-req: {q}, "),
    # decode with speculative decoding, hybrid pools, disaggregation, iteration numbers, DP ranks
    (3, "[{d} {t} TP0] Decode batch, #running-req: {r}, #token: {n}, token usage: {u:.2f}, accept len: 2.71, accept rate: 0.68, cuda graph: True, gen throughput (token/s): {g:.2f}, #queue-req: {q}, "),
    (2, "[{d} {t} TP0] Decode batch, #running-req: {r}, #full token: {n}, full token usage: {u:.2f}, #swa token: 1024, swa token usage: 0.01, cuda graph: False, gen throughput (token/s): {g:.2f}, #queue-req: {q}, "),
    (2, "[{d} {t} DP1 TP1] Decode batch [123], #running-req: {r}, #token: {n}, token usage: {u:.2f}, pre-allocated usage: 0.00, #prealloc-req: 0, #transfer-req: 0, #retracted-req: 0, cuda graph: True, gen throughput (token/s): {g:.2f}, #queue-req: {q}, "),
    # prefill, all generations
    (6, "[{d} {t} TP0] Prefill batch, #new-seq: 4, #new-token: {n}, #cached-token: 128, token usage: {u:.2f}, #running-req: {r}, #queue-req: {q}, "),
    (3, "[{d} {t} TP0] Prefill batch. #new-seq: 4, #new-token: {n}, #cached-token: 0, cache hit rate: 12.50%, token usage: {u:.2f}, #running-req: {r}, #queue-req: {q}"),
    (1, "[{d} {t} TP0] Prefill batch(mixed #running-req: {r}). #new-seq: 1, #new-token: {n}, #cached-token: 0, cache hit rate: 0.00%, token usage: {u:.2f}, #running-req: {r}, #queue-req: {q}"),
    (2, "[{d} {t} TP0] Prefill batch, #new-seq: 4, #new-token: {n}, #cached-token: 0, token usage: {u:.2f}, #running-req: {r}, #queue-req: {q}, #pending-token: 0, cuda graph: False, input throughput (token/s): 9876.54, est. prefill TFLOPS/s (per GPU): 120.5"),
    # retraction
    (1, "[{d} {t} TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4000 -> 0.9000"),
    # foreign lines
    (4, 'INFO:     127.0.0.1:{p} - "POST /generate HTTP/1.1" 200 OK'),
    (2, '\x1b[32mINFO\x1b[0m:     127.0.0.1:{p} - "\x1b[1mPOST /v1/chat/completions HTTP/1.1\x1b[0m" \x1b[32m200 OK\x1b[0m'),
    (1, "node-1:1234:1234 [0] NCCL INFO Channel 00/02 : 0 1 2 3 4 5 6 7"),
    (1, "W1130 {t}.123456 1234 socket.cpp:464] [c10d] The server socket has failed to bind."),
    (1, "[{d} {t} TP0] Using FP8 KV cache but no scaling factors provided. Defaulting to scaling factors of 1.0."),
    (1, "some garbage line that no parser understands 0x{p:x}"),
]

TRACEBACK = [
    "[{d} {t} TP3] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2570, in run_scheduler_process',
    "    scheduler.event_loop_overlap()",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total capacity of 94.97 GiB",
    "",
    "[{d} {t}] Received sigquit from a child process. It usually means the child failed.",
]


def generate(path: Path, size_mb: float, seed: int = 0) -> int:
    rng = random.Random(seed)
    weights = [w for w, _ in TEMPLATES]
    templates = [t for _, t in TEMPLATES]
    target = int(size_mb * 1024 * 1024)
    written = 0
    day = "2025-11-30"
    sec = 36000
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for line in HEADER:
            s = line.format(d=day) + "\n"
            fh.write(s)
            written += len(s.encode())
        chunk: list[str] = []
        while written < target:
            for tpl in rng.choices(templates, weights=weights, k=2000):
                sec += 1
                t = f"{(sec // 3600) % 24:02d}:{(sec // 60) % 60:02d}:{sec % 60:02d}"
                chunk.append(
                    tpl.format(
                        d=day, t=t, r=rng.randint(0, 1024), n=rng.randint(0, 500000), u=rng.random(),
                        g=rng.uniform(0, 4000), q=rng.randint(0, 1024), p=rng.randint(1024, 65535),
                    )
                )
            if rng.random() < 0.05:
                chunk.extend(line.format(d=day, t="23:59:59") for line in TRACEBACK)
            text = "\n".join(chunk) + "\n"
            chunk.clear()
            fh.write(text)
            written += len(text.encode())
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=100.0, help="log size to generate (MB, default 100)")
    ap.add_argument("--repeat", type=int, default=3, help="timed parses; the best is reported")
    ap.add_argument("--keep", help="write the generated log here and keep it")
    args = ap.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the target says
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.keep) if args.keep else Path(tmp) / "server.log"
        t0 = time.perf_counter()
        nbytes = generate(path, args.size_mb)
        print(f"generated {nbytes / 1e6:.1f} MB ({nbytes / 2**20:.1f} MiB) in {time.perf_counter() - t0:.1f} s: {path}")
        best = best_cpu = None
        for i in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            slog = parse_log(path)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            best = dt if best is None else min(best, dt)
            best_cpu = cpu if best_cpu is None else min(best_cpu, cpu)
            print(
                f"run {i + 1}: {dt:.2f} s wall = {nbytes / 1e6 / dt:.1f} MB/s; {cpu:.2f} s CPU = "
                f"{nbytes / 1e6 / cpu:.1f} MB/s  "
                f"(decode {len(slog.decode)}, prefill {len(slog.prefill)}, retractions {len(slog.retractions)}, "
                f"errors {len(slog.errors)}, http {len(slog.http)}, skipped {slog.skipped}, lines {slog.lines})"
            )
        rate = nbytes / 1e6 / best
        print(
            f"parse rate: {rate:.1f} MB/s wall, {nbytes / 1e6 / best_cpu:.1f} MB/s by CPU time "
            f"(best of {args.repeat}; load average {os.getloadavg()[0]:.1f}; target >= 50 MB/s on one core)"
        )
    return 0 if rate >= 50 else 1


if __name__ == "__main__":
    sys.exit(main())
