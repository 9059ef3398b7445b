"""Calibration of the stand-in server against the published figures, and its CPU cost.

For each scenario this starts ``python -m glm5lib.sim`` with the scenario's flags, drives it
with C closed-loop streaming ``/generate`` clients (256-word prompts = 256 tokens to the
stand-in, outputs with ``ignore_eos``), waits until the running batch stops growing, then
measures over a steady window: aggregate generated tokens per second (from the chunks' own
``completion_tokens``), the stand-in process's CPU use (psutil), the simulated per-GPU power
(``/sim/gpus``) and the highest ``gen throughput`` the stand-in logged in the window. It prints
published vs measured. The GLM-5 figures are compared with the client's steady throughput
(long outputs); the K2-Thinking figure, published as the highest logged gen throughput of a
256-in/256-out benchmark, with the same thing.

    .venv/bin/python benchmarks/bench_standin.py            # all scenarios, 15 s windows
    .venv/bin/python benchmarks/bench_standin.py --window 8 --only fix-1024
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import aiohttp
import pandas as pd
import psutil

from glm5lib.engines.sim import run_standin
from glm5lib.logs import parse_log

GLM5 = ["--sim-profile", "glm5-nvfp4-8x-rtxpro6000", "--attention-backend", "flashinfer",
        "--enable-flashinfer-allreduce-fusion"]
BASELINE = [*GLM5, "--max-running-requests", "64"]
FIX = [*GLM5, "--max-running-requests", "1024", "--disable-cuda-graph", "--disable-radix-cache"]
K2 = ["--sim-profile", "k2-thinking-nvfp4-8x-rtxpro6000", "--max-running-requests", "2048",
      "--attention-backend", "triton", "--disable-cuda-graph", "--page-size", "1"]

# name, label, flags, concurrency, output tokens (None = --output-len), published tok/s,
# published W per GPU (or None), compared figure ("client" steady tok/s or "log peak")
SCENARIOS = [
    ("baseline-256", "GLM-5 baseline (cap 64, CUDA graphs), C=256", BASELINE, 256, None, 880, 83, "client"),
    ("fix-256", "GLM-5 fix (cap 1024, no graphs), C=256", FIX, 256, None, 1950, None, "client"),
    ("fix-512", "GLM-5 fix, C=512", FIX, 512, None, 2800, None, "client"),
    ("fix-1024", "GLM-5 fix, C=1,024", FIX, 1024, None, 3740, 250, "client"),
    ("k2-512", "K2-Thinking reference (cap 2048, triton), C=512, peak", K2, 512, 256, 5816, None, "log peak"),
]

PROMPT = " ".join(["word"] * 256)


class Client:
    """C closed-loop streaming clients; tracks each stream's latest completion_tokens."""

    def __init__(self, base_url: str, concurrency: int, output_len: int):
        self.url = base_url + "/generate"
        self.c = concurrency
        self.output_len = output_len
        self.done_tokens = 0  # tokens of finished requests
        self.live = [0] * concurrency  # tokens so far of each worker's current request
        self.started = 0  # streams that have received their first chunk
        self.errors = 0
        self.stop = False

    def tokens(self) -> int:
        return self.done_tokens + sum(self.live)

    async def worker(self, session: aiohttp.ClientSession, i: int) -> None:
        body = {"text": PROMPT, "stream": True,
                "sampling_params": {"max_new_tokens": self.output_len, "ignore_eos": True}}
        key = b'"completion_tokens": '
        first = True
        while not self.stop:
            try:
                async with session.post(self.url, json=body) as resp:
                    async for line in resp.content:
                        if not line.startswith(b"data: {"):
                            continue
                        k = line.rfind(key) + len(key)
                        end = line.find(b",", k)
                        self.live[i] = int(line[k:end])
                        if first:
                            first = False
                            self.started += 1
                        if self.stop:
                            return
                self.done_tokens += self.live[i]
                self.live[i] = 0
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
                self.errors += 1
                await asyncio.sleep(0.1)


async def measure(base_url: str, pid: int, concurrency: int, window: float, output_len: int) -> dict:
    client = Client(base_url, concurrency, output_len)
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=300)
    proc = psutil.Process(pid)
    me = psutil.Process()
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as session:
        tasks = [asyncio.create_task(client.worker(session, i)) for i in range(concurrency)]
        # Warm-up: until every stream has its first token or the count stops growing for 2 s
        # (the running cap or the KV pool holds the rest back), then one more second.
        t0 = last_change = time.monotonic()
        seen = 0
        while client.started < concurrency and time.monotonic() - last_change < 2.0 \
                and time.monotonic() - t0 < 180:
            await asyncio.sleep(0.2)
            if client.started != seen:
                seen, last_change = client.started, time.monotonic()
        await asyncio.sleep(1.0)
        tok0, cpu0, my0, w0 = client.tokens(), proc.cpu_times(), me.cpu_times(), time.monotonic()
        powers = []
        while time.monotonic() - w0 < window:
            await asyncio.sleep(1.0)
            async with session.get(base_url + "/sim/gpus") as r:
                snap = await r.json()
            powers.append(statistics.mean(g["power_w"] for g in snap["gpus"]))
        tok1, cpu1, my1, w1 = client.tokens(), proc.cpu_times(), me.cpu_times(), time.monotonic()
        client.stop = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    dt = w1 - w0
    return {
        "tok_s": (tok1 - tok0) / dt,
        "server_cpu_pct": 100.0 * ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / dt,
        "client_cpu_pct": 100.0 * ((my1.user + my1.system) - (my0.user + my0.system)) / dt,
        "power_w": statistics.mean(powers) if powers else float("nan"),
        "errors": client.errors,
        "warmup_s": w0 - t0,
        "window": (time.time() - (time.monotonic() - w0), time.time() - (time.monotonic() - w1)),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--window", type=float, default=15.0, help="measurement window per scenario, s")
    ap.add_argument("--output-len", type=int, default=512, help="max_new_tokens per request (ignore_eos)")
    ap.add_argument("--only", nargs="*", default=None, help=f"scenario names: {[s[0] for s in SCENARIOS]}")
    args = ap.parse_args()
    rows = []
    for name, label, flags, conc, out_len, pub, pub_w, metric in SCENARIOS:
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            log_path = Path(tmp) / "server.log"
            with run_standin(*flags, "--sim-no-access-log", "--decode-log-interval", "20",
                             ready_timeout=60, log_path=log_path) as srv:
                m = asyncio.run(measure(srv.base_url, srv.pid, conc, args.window, out_len or args.output_len))
            decode = parse_log(log_path).decode
        t_lo, t_hi = (pd.Timestamp(datetime.fromtimestamp(t)) for t in m["window"])
        in_window = decode[(decode["time"] >= t_lo.floor("s")) & (decode["time"] <= t_hi.ceil("s"))]
        m["log_peak"] = float(in_window["gen_throughput"].max()) if len(in_window) else float("nan")
        m["running"] = int(in_window["running_req"].median()) if len(in_window) else 0
        m["figure"] = m["log_peak"] if metric == "log peak" else m["tok_s"]
        m["metric"] = metric
        rows.append((label, pub, pub_w, m))
        err = m["figure"] / pub - 1
        print(f"  {label}: {m['figure']:.0f} tok/s {metric} ({err:+.1%} vs {pub}); client {m['tok_s']:.0f} tok/s, "
              f"log peak {m['log_peak']:.0f}, running {m['running']}, {m['power_w']:.0f} W/GPU, "
              f"stand-in CPU {m['server_cpu_pct']:.0f}%, client CPU {m['client_cpu_pct']:.0f}%, "
              f"errors {m['errors']}", file=sys.stderr, flush=True)

    print()
    print(f"{'scenario':56} {'published':>9} {'measured':>9} {'diff':>7} {'figure':>9}  "
          f"{'W/GPU pub':>9} {'W/GPU':>6} {'running':>7}  {'stand-in CPU':>12} {'client CPU':>10}")
    ok = True
    for label, pub, pub_w, m in rows:
        err = m["figure"] / pub - 1
        ok &= abs(err) <= 0.10
        pw = f"{pub_w:>9}" if pub_w else f"{'-':>9}"
        if pub_w:
            ok &= abs(m["power_w"] / pub_w - 1) <= 0.10
        print(f"{label:56} {pub:>9,} {m['figure']:>9,.0f} {err:>+7.1%} {m['metric']:>9}  {pw} "
              f"{m['power_w']:>6.0f} {m['running']:>7}  {m['server_cpu_pct']:>11.0f}% {m['client_cpu_pct']:>9.0f}%")
    print()
    print(f"all figures within 10%: {'yes' if ok else 'NO'}  (window {args.window:.0f} s, prompts 256 tokens, "
          f"outputs {args.output_len} tokens unless the scenario says otherwise, /generate streaming; "
          "'client' = steady aggregate tok/s the clients received, 'log peak' = highest gen throughput logged)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
