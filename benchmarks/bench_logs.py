"""Parse rate and peak memory of glm5lib.logs on realistic logs of 100 MB and more.

Each mix is written to a file of at least ``--size-mb`` MB, then parsed by ``parse_log`` in a
fresh Python process (the first parse, as a user's would be: no warm caches), which reports
wall and CPU time, MB/s, rows per table and its peak resident memory (``ru_maxrss``). Targets
(issue "logs at production scale"): 50 MB/s or more (aim 100) on one core, peak memory under
three times the file, the same scheduler rows as the line-by-line reader.

The mixes, with the share of each line kind printed as measured:

* ``standin``: a stand-in run's log: the stand-in (``python -m glm5lib.sim``, steps without
  modelled delay) is started and driven for a few seconds by closed-loop ``/generate`` clients;
  its steady part (after "ready to roll") is repeated. About four lines in five are uvicorn
  access lines, as on a busy server, the rest ``Prefill batch`` and ``Decode batch`` lines.
* ``excerpts``: real SGLang excerpts of every generation (tests/fixtures/logs, 2024 to 2026:
  decode, prefill, start-up, uvicorn, NCCL, progress bars; and a real 0.5.x run's log from
  data/reference), whole files in random order, with stand-in-format access and scheduler
  lines between them so that access lines make about 78% of the lines.
* ``tracebacks``: ``excerpts`` with the crash excerpts (OOM, NCCL, scheduler exceptions, NaN)
  making one block in ten.
* ``vllm``: a busy vLLM server: real vLLM excerpts (tests/fixtures/vllm: start-up, V0 and
  V1 stats lines, errors) whole in random order, between them uvicorn access lines (about 90%
  of the lines) and a V1 ``Engine 000: Avg prompt throughput...`` stats line every 10 to 30.
* ``decode``: the synthetic decode-heavy log this benchmark used to measure (every line kind
  and generation, decode lines the bulk), kept so that nothing regresses.

Then, unless ``--stream-mb 0``: the ``excerpts`` mix repeated to ``--stream-mb`` MB (1000 by
default) read by ``iter_log`` (pieces of 64 MB, their rows counted and let go of) in a fresh
process, its peak memory printed: it does not grow with the file. And ``follow``: a follower
reading the ``standin`` mix as a server would write it, 4 MB at a time, an ``update()`` after
each (the MB/s a server may write and still be kept up with).
Then the time of one small update (256 KB
appended) at 10, 50, 100 and 200 MB of log written (``--follow-mb``): flat, as an update costs
what its new lines cost.

With ``--repeat N`` each mix is parsed N times (a fresh process each) and the medians are
printed: on a shared machine single figures move by 10% or more.

    python benchmarks/bench_logs.py [--size-mb 100] [--mix standin,excerpts,tracebacks,vllm,decode]
                                    [--repeat 1] [--keep DIR] [--standin-log PATH] [--stream-mb 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "logs"
REFERENCE_LOG = ROOT / "data" / "reference" / "k2-thinking" / "server.log"
VLLM_FIXTURES = ROOT / "tests" / "fixtures" / "vllm"
MIXES = ("standin", "excerpts", "tracebacks", "vllm", "decode")

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


# ---- realistic mixes

ACCESS = 'INFO:     127.0.0.1:{port} - "POST /generate HTTP/1.1" 200 OK'
PREFILL = ("[{d} {t} TP0] Prefill batch, #new-seq: {n}, #new-token: {n}, #cached-token: {c}, token usage: 0.{u:02d}, "
           "#running-req: {r}, #queue-req: {q}, ")
DECODE = ("[{d} {t} TP0] Decode batch, #running-req: {r}, #token: {c}, token usage: 0.{u:02d}, cuda graph: True, "
          "gen throughput (token/s): {g}.{u:02d}, #queue-req: {q}, ")


def standin_log(path: Path, seconds: float, clients: int = 48) -> Path:
    """Run the stand-in for ``seconds`` under closed-loop /generate clients; its log at ``path``."""
    from glm5lib.engines.sglang import launch

    srv = launch(
        ["--model-path", "zai-org/GLM-5", "--tp-size", "8", "--max-running-requests", "64"],
        backend="sim", log_path=path, ready_timeout=120,
        extra_args=["--sim-profile", "glm5-nvfp4-8x-rtxpro6000", "--sim-zero-delay"],
    )
    stop = time.monotonic() + seconds
    body = json.dumps({"text": "hello " * 64, "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}}).encode()

    def client() -> None:
        while time.monotonic() < stop:
            req = urllib.request.Request(srv.base_url + "/generate", data=body, headers={"Content-Type": "application/json"})
            try:
                urllib.request.urlopen(req, timeout=60).read()
            except OSError:
                pass

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    srv.stop()
    return path


def repeat_to(path: Path, head: bytes, body: bytes, size: int) -> int:
    with path.open("wb") as fh:
        fh.write(head)
        written = len(head)
        while written < size:
            fh.write(body)
            written += len(body)
    return written


def write_standin(path: Path, size: int, source: Path) -> int:
    raw = source.read_bytes()
    ready = raw.find(b"\n", raw.find(b"ready to roll")) + 1
    body = raw[ready:]
    body = body[: body.rfind(b"\n") + 1]  # the server was stopped mid-line at worst
    return repeat_to(path, raw[:ready], body, size)


def _blocks(crashes: bool) -> tuple[list[list[str]], list[list[str]]]:
    normal, crash = [], []
    for p in sorted(FIXTURES.glob("*.log")):
        lines = p.read_text().rstrip("\n").splitlines()
        (crash if p.name.startswith("crash-") or "nan" in p.name else normal).append(lines)
    if REFERENCE_LOG.is_file():
        normal.append(REFERENCE_LOG.read_text().rstrip("\n").splitlines())
    return normal, crash


def _write_batches(path: Path, size: int, batches: Iterator[list[str]]) -> int:
    """Write batches of lines to ``path`` until at least ``size`` bytes; returns the bytes written."""
    written = 0
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        while written < size:
            text = "\n".join(next(batches)) + "\n"
            fh.write(text)
            written += len(text.encode())
    return written


def write_excerpts(path: Path, size: int, crashes: bool, seed: int = 0) -> int:
    """Real excerpts, whole, in random order, with a busy server's access and scheduler lines
    between them (access lines about 78% of all lines)."""
    rng = random.Random(seed)
    normal, crash = _blocks(crashes)

    def batches() -> Iterator[list[str]]:
        sec = 0
        while True:
            out: list[str] = []
            for _ in range(200):
                if crashes and rng.random() < 0.1:
                    out.extend(rng.choice(crash))
                elif rng.random() < 0.05:
                    out.extend(rng.choice(normal))
                else:
                    sec += 1
                    d, t = "2025-11-30", f"{(sec // 3600) % 24:02d}:{(sec // 60) % 60:02d}:{sec % 60:02d}"
                    for _k in range(rng.randint(2, 8)):
                        out.append(PREFILL.format(d=d, t=t, n=rng.randint(1, 40), c=rng.randint(0, 9999),
                                                  u=rng.randint(0, 99), r=rng.randint(0, 64), q=rng.randint(0, 9)))
                        out.extend(ACCESS.format(port=rng.randint(1024, 65535)) for _ in range(rng.randint(2, 7)))
                    if rng.random() < 0.5:
                        out.append(DECODE.format(d=d, t=t, r=rng.randint(0, 64), c=rng.randint(0, 99999),
                                                 u=rng.randint(0, 99), g=rng.randint(0, 4000), q=rng.randint(0, 9)))
            yield out

    return _write_batches(path, size, batches())


VLLM_ACCESS = 'INFO:     127.0.0.1:{port} - "POST /v1/completions HTTP/1.1" 200 OK'
VLLM_STATS = ("(APIServer pid=4242) INFO 12-01 {t} [loggers.py:335] Engine 000: Avg prompt throughput: {p}.{u} tokens/s, "
              "Avg generation throughput: {g}.{u} tokens/s, Running: {r} reqs, Waiting: {q} reqs, "
              "GPU KV cache usage: {k}.{u}%, Prefix cache hit rate: {h}.{u}%")


def write_vllm(path: Path, size: int, seed: int = 0) -> int:
    """Real vLLM excerpts, whole, in random order, between a busy server's access lines and
    its stats lines (one every 10 to 30 lines)."""
    rng = random.Random(seed)
    blocks = [p.read_text().rstrip("\n").splitlines() for p in sorted(VLLM_FIXTURES.glob("*.log"))]

    def batches() -> Iterator[list[str]]:
        sec = 0
        while True:
            out: list[str] = []
            for _ in range(200):
                if rng.random() < 0.02:
                    out.extend(rng.choice(blocks))
                    continue
                sec += 10
                t = f"{(sec // 3600) % 24:02d}:{(sec // 60) % 60:02d}:{sec % 60:02d}"
                out.extend(VLLM_ACCESS.format(port=rng.randint(1024, 65535)) for _ in range(rng.randint(10, 30)))
                out.append(VLLM_STATS.format(t=t, p=rng.randint(0, 30000), g=rng.randint(0, 4000), u=rng.randint(0, 9),
                                             r=rng.randint(0, 256), q=rng.randint(0, 99), k=rng.randint(0, 99),
                                             h=rng.randint(0, 99)))
            yield out

    return _write_batches(path, size, batches())


def shares(path: Path) -> str:
    """The share of each line kind in the file, as a short string."""
    counts = {"access": 0, "prefill": 0, "decode": 0, "other": 0}
    total = 0
    with path.open("rb") as fh:
        for line in fh:
            total += 1
            if line.startswith(b"INFO:     ") and b' - "' in line:
                counts["access"] += 1
            elif b"] Prefill batch" in line:
                counts["prefill"] += 1
            elif b"] Decode batch" in line or b"Avg prompt throughput" in line:
                counts["decode"] += 1
            else:
                counts["other"] += 1
    return ", ".join(f"{k} {100 * v / max(total, 1):.1f}%" for k, v in counts.items()) + f" of {total} lines"


# ---- the measurement, in a fresh process

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from glm5lib.logs import parse_log
rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
w, c = time.perf_counter(), time.process_time()
slog = parse_log(sys.argv[1], progress=False)
wall, cpu = time.perf_counter() - w, time.process_time() - c
print(json.dumps({"wall": wall, "cpu": cpu, "import": w - t0, "rss0_kb": rss0,
                  "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "rows": {k: len(getattr(slog, k)) for k in ("decode", "prefill", "retractions", "errors", "http")},
                  "skipped": slog.skipped, "lines": slog.lines}))
"""


STREAM_CHILD = r"""
import json, resource, sys, time
from glm5lib.logs import iter_log
w, c = time.perf_counter(), time.process_time()
rows = dict.fromkeys(("decode", "prefill", "retractions", "errors", "http"), 0)
pieces = 0
for piece in iter_log(sys.argv[1], progress=False):
    pieces += 1
    for k in rows:
        rows[k] += len(getattr(piece, k))
print(json.dumps({"wall": time.perf_counter() - w, "cpu": time.process_time() - c, "pieces": pieces, "rows": rows,
                  "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "lines": piece.lines}))
"""

FOLLOW_CHILD = r"""
import json, os, resource, sys, tempfile, time
from glm5lib.logs import follow_log
src = sys.argv[1]
step = 4 << 20
with tempfile.TemporaryDirectory() as tmp, open(src, "rb") as fin:
    path = os.path.join(tmp, "server.log")
    follower = follow_log(path)
    cpu = 0.0
    updates = 0
    with open(path, "wb") as out:
        while True:
            data = fin.read(step)
            if not data:
                break
            out.write(data)
            out.flush()
            c = time.process_time()
            slog = follower.update()
            cpu += time.process_time() - c
            updates += 1
    c = time.process_time()
    slog = follower.finish()
    cpu += time.process_time() - c
print(json.dumps({"cpu": cpu, "updates": updates, "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "rows": {k: len(getattr(slog, k)) for k in ("decode", "prefill", "http")}}))
"""

# A follower's cost per update as the log grows: the mix written 8 MB at a time (an update
# after each) up to argv[2] MB; at each mark a small update (the mix's first 256 KB of whole
# lines appended) is timed (CPU time), the median of 5.
FOLLOW_FLAT_CHILD = r"""
import json, os, statistics, sys, tempfile, time
from glm5lib.logs import follow_log
src, total = sys.argv[1], int(float(sys.argv[2]) * 1e6)
body = open(src, "rb").read()
small = body[: body.rfind(b"\n", 0, 256 << 10) + 1]
marks = [m for m in (10e6, 50e6, 100e6, 200e6, 500e6) if m <= total] or [total]
out_marks = []
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "server.log")
    follower = follow_log(path)
    written, at = 0, 0
    with open(path, "wb") as out:
        for mark in marks:
            while written < mark:
                step = min(8 << 20, int(mark - written) + 4096)  # up to the mark, whole lines
                end = body.rfind(b"\n", at, min(at + step, len(body))) + 1
                if end <= at:
                    at, end = 0, body.rfind(b"\n", 0, 8 << 20) + 1
                out.write(body[at:end]); out.flush()
                written += end - at
                at = end if end < len(body) else 0
                follower.update()
            times = []
            for _ in range(5):
                out.write(small); out.flush()
                c = time.process_time()  # CPU time: what the update costs, whatever else runs
                slog = follower.update()
                times.append(time.process_time() - c)
                written += len(small)
            out_marks.append({"mb": written / 1e6, "update_ms": statistics.median(times) * 1e3,
                              "rows": {k: len(getattr(slog, k)) for k in ("decode", "prefill", "http")}})
print(json.dumps({"small_kb": len(small) / 1024, "marks": out_marks}))
"""


def measure(path: Path, child: str = CHILD, *extra: str) -> dict:
    out = subprocess.run([sys.executable, "-c", child, str(path), *extra], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, default=100.0, help="size of each mix (MB, default 100)")
    ap.add_argument("--mix", default=",".join(MIXES), help=f"mixes to measure, comma-separated ({', '.join(MIXES)})")
    ap.add_argument("--repeat", type=int, default=1, help="fresh-process parses per mix (default 1)")
    ap.add_argument("--keep", help="write the mixes into this folder and keep them")
    ap.add_argument("--standin-log", help="a stand-in log to repeat (default: run the stand-in for a few seconds)")
    ap.add_argument("--standin-seconds", type=float, default=8.0, help="how long to drive the stand-in (s)")
    ap.add_argument("--follow-mb", type=float, default=200.0,
                    help="log size up to which follow_log's cost per update is measured (MB, default 200)")
    ap.add_argument("--stream-mb", type=float, default=1000.0,
                    help="size of the log iter_log reads in pieces (MB, default 1000; 0: skip, and skip follow)")
    args = ap.parse_args(argv)
    mixes = [m.strip() for m in args.mix.split(",") if m.strip()]
    bad = [m for m in mixes if m not in MIXES]
    if bad:
        ap.error(f"unknown mix {bad[0]!r}: valid values are {', '.join(MIXES)}")
    size = int(args.size_mb * 1e6)
    summary: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep) if args.keep else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for mix in mixes:
            path = folder / f"{mix}.log"
            t0 = time.perf_counter()
            if mix == "standin":
                source = Path(args.standin_log) if args.standin_log else standin_log(folder / "standin-run.log", args.standin_seconds)
                nbytes = write_standin(path, size, source)
            elif mix in ("excerpts", "tracebacks"):
                nbytes = write_excerpts(path, size, crashes=mix == "tracebacks")
            elif mix == "vllm":
                nbytes = write_vllm(path, size)
            else:
                nbytes = generate(path, size / 2**20)
            print(f"{mix}: {nbytes / 1e6:.1f} MB written in {time.perf_counter() - t0:.1f} s; {shares(path)}")
            mb = nbytes / 1e6
            rates, peaks = [], []
            for _ in range(args.repeat):
                r = measure(path)
                rates.append(mb / r["cpu"])
                peaks.append(r["peak_kb"] * 1024 / nbytes)
                print(
                    f"  parse_log: {mb / r['wall']:.1f} MB/s wall ({r['wall']:.2f} s), {mb / r['cpu']:.1f} MB/s CPU; "
                    f"peak RSS {r['peak_kb'] / 1024:.0f} MB ({r['peak_kb'] * 1024 / nbytes:.2f}x the file; "
                    f"{r['rss0_kb'] / 1024:.0f} MB after import); rows {r['rows']}, skipped {r['skipped']}, "
                    f"lines {r['lines']}"
                )
            if args.repeat > 1:
                summary.append((mix, statistics.median(rates), statistics.median(peaks)))
                print(f"  median of {args.repeat}: {summary[-1][1]:.1f} MB/s CPU, peak {summary[-1][2]:.2f}x the file")
            if mix == "standin" and args.stream_mb > 0:
                r = measure(path, FOLLOW_CHILD)
                print(f"  follow_log: {mb / r['cpu']:.1f} MB/s CPU over {r['updates']} updates of 4 MB; "
                      f"peak RSS {r['peak_kb'] / 1024:.0f} MB; rows {r['rows']}")
                r = measure(path, FOLLOW_FLAT_CHILD, str(args.follow_mb))
                print(f"  follow_log per update ({r['small_kb']:.0f} KB appended, CPU time, median of 5) as the log grows: "
                      + "; ".join(f"{m['mb']:.0f} MB written: {m['update_ms']:.1f} ms" for m in r["marks"]))
            if not args.keep:
                path.unlink()
        if args.stream_mb > 0:
            path = folder / "stream.log"
            piece = path.with_suffix(".piece")
            write_excerpts(piece, size, crashes=True, seed=1)
            body = piece.read_bytes()
            piece.unlink()
            nbytes = repeat_to(path, b"", body, int(args.stream_mb * 1e6))
            r = measure(path, STREAM_CHILD)
            mb = nbytes / 1e6
            print(f"stream: {mb:.0f} MB (tracebacks mix repeated) read by iter_log in {r['pieces']} pieces: "
                  f"{mb / r['cpu']:.1f} MB/s CPU; peak RSS {r['peak_kb'] / 1024:.0f} MB "
                  f"({r['peak_kb'] * 1024 / nbytes:.2f}x the file); rows {r['rows']}, lines {r['lines']}")
            if not args.keep:
                path.unlink()
    if summary:
        print("medians (MB/s CPU, peak/file): " + "; ".join(f"{m} {r:.1f}, {p:.2f}x" for m, r, p in summary))
    print(f"load average {os.getloadavg()[0]:.1f} (wall figures are worth little above 1 per core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
