"""Rebuild the reconstructed K2-Thinking reference run in this folder (deterministic).

    python data/reference/k2-thinking/reconstruct.py

Writes server.log, bench_results.jsonl, bench_results.txt and sweep.csv next to this file from
the published facts listed in README.md and the assumptions stated there. Nothing here was
measured: it is a model of the run, consistent with its published figures.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent

# ---- published facts (README.md, "What was published") ----
MODEL = "nvidia/Kimi-K2-Thinking-NVFP4"
TP = 8
MAX_RUNNING = 2048
PEAK_GEN_THROUGHPUT = 5816.3  # the log's highest "gen throughput (token/s)"

# ---- assumptions (README.md, "What is assumed") ----
INPUT_LEN, OUTPUT_LEN = 256, 256
LEVELS = [64, 128, 256, 512, 1024]
PROMPTS_PER_LEVEL = {c: 8 * c for c in LEVELS}
KV_TOKENS = 198_734  # 8x 96 GB, ~72 GB of NVFP4 weights per GPU, MLA KV ~68.6 KB/token (bf16)
CONTEXT_LEN = 262_144
STEP_MS_BASE, STEP_MS_PER_REQ, STEP_MS_PER_KTOK = 40.0, 0.080, 0.020  # decode step model
DECODE_LOG_INTERVAL = 40
START = dt.datetime(2025, 11, 24, 14, 2, 11)


SCALE = [1.0]  # set by main() so that the busiest decode line shows the published peak


def step_ms(batch: int, tokens: int) -> float:
    return SCALE[0] * (STEP_MS_BASE + STEP_MS_PER_REQ * batch + STEP_MS_PER_KTOK * tokens / 1000)


def server_args_repr() -> str:
    """The ServerArgs repr: every field of the catalogue, in field order, values as resolved."""
    from glm5lib.engines.sglang.config import read_catalogue_file

    FLAGS = read_catalogue_file("0.5.9")["flags"]

    resolved = {
        "model_path": MODEL,
        "tokenizer_path": MODEL,
        "trust_remote_code": True,
        "host": "0.0.0.0",
        "quantization": "modelopt_fp4",
        "mem_fraction_static": 0.88,
        "max_running_requests": MAX_RUNNING,
        "chunked_prefill_size": 8192,
        "page_size": 1,
        "device": "cuda",
        "tp_size": TP,
        "random_seed": 716394052,
        "served_model_name": MODEL,
        "reasoning_parser": "kimi_k2",
        "tool_call_parser": "kimi_k2",
        "attention_backend": "triton",
        "sampling_backend": "flashinfer",
        "grammar_backend": "xgrammar",
        "fp4_gemm_runner_backend": "auto",
        "moe_runner_backend": "auto",
        "enable_flashinfer_allreduce_fusion": False,
        "disable_cuda_graph": True,
        "cuda_graph_max_bs": 256,
    }
    parts = []
    for spec in FLAGS:
        if not spec["in_server_args"]:
            continue
        name = spec["field"]
        parts.append(f"{name}={resolved.get(name, spec['default'])!r}")
    return "server_args=ServerArgs(" + ", ".join(parts) + ")"


class Log:
    def __init__(self) -> None:
        self.t = START
        self.lines: list[str] = []

    def at(self, seconds: float) -> None:
        self.t += dt.timedelta(seconds=seconds)

    def put(self, msg: str, rank: str | None = None) -> None:
        stamp = self.t.strftime("%Y-%m-%d %H:%M:%S")
        self.lines.append(f"[{stamp}{' ' + rank if rank else ''}] {msg}")

    def raw(self, msg: str) -> None:
        self.lines.append(msg)


def startup(log: Log) -> None:
    log.put(server_args_repr())
    log.at(9)
    for r in range(TP):
        log.put("Init torch distributed begin.", f"TP{r}")
    log.at(4)
    for r in range(TP):
        log.put("Init torch distributed ends. mem usage=0.79 GB", f"TP{r}")
    for r in range(TP):
        log.put("Load weight begin. avail mem=93.85 GB", f"TP{r}")
    log.at(412)
    for r in range(TP):
        log.put(
            "Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=21.63 GB, mem usage=72.22 GB.",
            f"TP{r}",
        )
    log.at(2)
    for r in range(TP):
        log.put(f"KV Cache is allocated. #tokens: {KV_TOKENS}, KV size: 12.99 GB", f"TP{r}")
        log.put("Memory pool end. avail mem=8.21 GB", f"TP{r}")
    log.at(1)
    log.put(
        f"max_total_num_tokens={KV_TOKENS}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        f"max_running_requests={MAX_RUNNING}, context_len={CONTEXT_LEN}, available_gpu_mem=8.21 GB",
        "TP0",
    )
    log.at(3)
    log.raw("INFO:     Started server process [2318]")
    log.raw("INFO:     Waiting for application startup.")
    log.raw("INFO:     Application startup complete.")
    log.raw("INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)")
    log.at(1)
    log.raw('INFO:     127.0.0.1:40262 - "GET /get_model_info HTTP/1.1" 200 OK')
    log.put(
        "Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, #queue-req: 0, ",
        "TP0",
    )
    log.at(2)
    log.raw('INFO:     127.0.0.1:40270 - "POST /generate HTTP/1.1" 200 OK')
    log.put("The server is fired up and ready to roll!")


def run_level(log: Log, conc: int, rng: random.Random) -> dict[str, float]:
    """Decode/prefill lines of one closed-loop level; returns its bench_serving figures.

    Request-level model at log-line granularity: each running request holds its prompt plus
    the tokens generated so far; finished requests are replaced at once while prompts remain;
    when the pool would overflow, the scheduler retracts requests back to the queue.
    """
    pending = PROMPTS_PER_LEVEL[conc]
    kv_cap = int(KV_TOKENS / (INPUT_LEN + OUTPUT_LEN * 0.5))  # average tokens per running request
    steady = min(conc, int(0.93 * kv_cap))  # the scheduler keeps KV headroom for growing requests
    active: list[int] = []  # tokens still to generate, per running request
    t0 = log.t
    peak = 0.0
    step_times = []
    retracted_total = 0
    ratio = 0.35
    log.at(1)
    while pending or active:
        # one prefill batch per logged interval, bounded by max_prefill_tokens=16384
        admit = min(steady - len(active), pending, 16384 // INPUT_LEN)
        if admit > 0:
            usage = sum(INPUT_LEN + OUTPUT_LEN - r for r in active) / KV_TOKENS
            waiting = max(0, min(conc, pending + len(active)) - len(active) - admit)
            log.put(
                f"Prefill batch, #new-seq: {admit}, #new-token: {admit * INPUT_LEN}, #cached-token: 0, "
                f"token usage: {usage:.2f}, #running-req: {len(active)}, #queue-req: {waiting}, ",
                "TP0",
            )
            prefill_s = admit * INPUT_LEN / 40_000 * SCALE[0]  # prefill at ~40k tok/s
            log.at(prefill_s)
            active += [OUTPUT_LEN] * admit
            pending -= admit
        else:
            prefill_s = 0.0
        # tokens held at the middle of the next 40 steps
        tokens = sum(INPUT_LEN + OUTPUT_LEN - r + DECODE_LOG_INTERVAL // 2 for r in active)
        if tokens > 0.985 * KV_TOKENS:
            k = 0
            while tokens > 0.95 * KV_TOKENS and active:
                r = active.pop()  # the newest request goes back to the queue and starts over
                tokens -= INPUT_LEN + OUTPUT_LEN - r + DECODE_LOG_INTERVAL // 2
                pending += 1
                k += 1
            new_ratio = min(1.0, ratio + 0.1 + rng.uniform(0, 0.05))
            log.put(
                f"KV cache pool is full. Retract requests. #retracted_reqs: {k}, #new_token_ratio: {ratio:.4f} -> {new_ratio:.4f}",
                "TP0",
            )
            ratio = new_ratio
            retracted_total += k
        ratio = max(0.35, ratio - 0.02)
        batch = len(active)
        s = step_ms(batch, tokens) * rng.uniform(0.985, 1.015)
        step_times.append(s)
        # SGLang's gen throughput divides by the time since the last decode line: prefill included
        thr = batch * DECODE_LOG_INTERVAL / (DECODE_LOG_INTERVAL * s / 1000 + prefill_s)
        waiting = max(0, min(conc, pending + batch) - batch)
        log.at(DECODE_LOG_INTERVAL * s / 1000)
        peak = max(peak, thr)
        log.put(
            f"Decode batch, #running-req: {batch}, #token: {tokens}, token usage: {tokens / KV_TOKENS:.2f}, "
            f"cuda graph: False, gen throughput (token/s): {thr:.2f}, #queue-req: {waiting}, ",
            "TP0",
        )
        active = [r - DECODE_LOG_INTERVAL for r in active if r > DECODE_LOG_INTERVAL]
    duration = (log.t - t0).total_seconds()
    mean_step = sum(step_times) / len(step_times)
    return {"duration": duration, "peak": peak, "mean_step": mean_step, "steady": steady, "retractions": retracted_total}


def bench_row(conc: int, sim: dict[str, float], rng: random.Random) -> dict:
    n = PROMPTS_PER_LEVEL[conc]
    duration = sim["duration"]
    tpot = sim["mean_step"]
    steady = sim["steady"]
    prefill_ms = 120 + 0.9 * min(conc, steady)
    wait_ms = 0.0 if conc <= steady else (conc - steady) / steady * OUTPUT_LEN * tpot
    ttft_med = prefill_ms + wait_ms
    e2e_med = ttft_med + (OUTPUT_LEN - 1) * tpot
    tin, tout = n * INPUT_LEN, n * OUTPUT_LEN
    row = {
        "backend": "sglang",
        "dataset_name": "random",
        "request_rate": float("inf"),
        "max_concurrency": conc,
        "sharegpt_output_len": None,
        "random_input_len": INPUT_LEN,
        "random_output_len": OUTPUT_LEN,
        "random_range_ratio": 1.0,
        "duration": round(duration, 2),
        "completed": n,
        "total_input_tokens": tin,
        "total_input_text_tokens": tin,
        "total_input_vision_tokens": 0,
        "total_output_tokens": tout,
        "total_output_tokens_retokenized": tout - rng.randint(0, n // 8),
        "request_throughput": round(n / duration, 3),
        "input_throughput": round(tin / duration, 2),
        "output_throughput": round(tout / duration, 2),
        "total_throughput": round((tin + tout) / duration, 2),
        "max_output_tokens_per_s": round(sim["peak"], 2),
        "max_concurrent_requests": conc,
        "concurrency": round(min(conc, n) * 0.985, 2),
        "accept_length": None,
    }
    stats = {
        "ttft": (ttft_med * 1.04, ttft_med, ttft_med * 0.35, ttft_med * 1.9, ttft_med * 2.4),
        "tpot": (tpot * 1.01, tpot, tpot * 0.03, tpot * 1.05, tpot * 1.08),
        "itl": (tpot * 1.01, tpot * 0.99, tpot * 0.2, tpot * 1.3, tpot * 2.6),
        "e2e_latency": (e2e_med * 1.02, e2e_med, e2e_med * 0.12, e2e_med * 1.25, e2e_med * 1.45),
    }
    for name, (mean, med, std, p95, p99) in stats.items():
        for key, v in (("mean", mean), ("median", med), ("std", std), ("p90", p95 * 0.97), ("p95", p95), ("p99", p99)):
            row[f"{key}_{name}_ms"] = round(v, 2)
    return row


def printed_block(row: dict) -> str:
    def line(label: str, value) -> str:
        return f"{label:<40} {value:<10}"

    out = ["", "{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")]
    out += [
        line("Backend:", row["backend"]),
        line("Traffic request rate:", "inf"),
        line("Max request concurrency:", row["max_concurrency"]),
        line("Successful requests:", row["completed"]),
        line("Benchmark duration (s):", f"{row['duration']:.2f}"),
        line("Total input tokens:", row["total_input_tokens"]),
        line("Total input text tokens:", row["total_input_text_tokens"]),
        line("Total input vision tokens:", row["total_input_vision_tokens"]),
        line("Total generated tokens:", row["total_output_tokens"]),
        line("Total generated tokens (retokenized):", row["total_output_tokens_retokenized"]),
        line("Request throughput (req/s):", f"{row['request_throughput']:.2f}"),
        line("Input token throughput (tok/s):", f"{row['input_throughput']:.2f}"),
        line("Output token throughput (tok/s):", f"{row['output_throughput']:.2f}"),
        line("Peak output token throughput (tok/s):", f"{row['max_output_tokens_per_s']:.2f}"),
        line("Peak concurrent requests:", row["max_concurrent_requests"]),
        line("Total token throughput (tok/s):", f"{row['total_throughput']:.2f}"),
        line("Concurrency:", f"{row['concurrency']:.2f}"),
    ]
    sections = [
        ("End-to-End Latency", "E2E Latency", "e2e_latency", ("mean", "median", "p90", "p99")),
        ("Time to First Token", "TTFT", "ttft", ("mean", "median", "p99")),
        ("Time per Output Token (excl. 1st token)", "TPOT", "tpot", ("mean", "median", "p99")),
        ("Inter-Token Latency", "ITL", "itl", ("mean", "median", "p95", "p99")),
    ]
    for title, label, key, stats in sections:
        out.append("{s:{c}^{n}}".format(s=title, n=50, c="-"))
        for s in stats:
            out.append(line(f"{s.capitalize() if s in ('mean', 'median') else s.upper()} {label} (ms):", f"{row[f'{s}_{key}_ms']:.2f}"))
    out.append("=" * 50)
    return "\n".join(out)


def sweep_row(row: dict, start: float, end: float) -> dict:
    keep = [
        "completed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
        "input_throughput", "output_throughput", "total_throughput",
    ]
    out = {"concurrency": row["max_concurrency"], "max_concurrency": row["max_concurrency"]}
    out.update({k: row[k] for k in keep})
    out["failed"] = 0
    for name in ("ttft", "itl", "tpot", "e2e_latency"):
        for s in ("mean", "median", "p90", "p99"):
            out[f"{s}_{name}_ms"] = row[f"{s}_{name}_ms"]
    out.update(
        start_time=start, end_time=end, window_start=start + 0.1 * (end - start), window_end=end - 0.1 * (end - start),
        client_cpu_pct=None, loop_lag_p99_ms=None, client_bound=False, error_summary="", api="generate",
        input_len=INPUT_LEN, output_len=OUTPUT_LEN,
    )
    return out


def build() -> tuple[Log, list[dict], list[dict], float]:
    rng = random.Random(20251124)
    log = Log()
    startup(log)
    log.at(95)
    rows, sweep = [], []
    best = 0.0
    for conc in LEVELS:
        start = log.t
        sim = run_level(log, conc, rng)
        best = max(best, sim["peak"])
        row = bench_row(conc, sim, rng)
        rows.append(row)
        epoch = lambda t: (t - dt.datetime(1970, 1, 1)).total_seconds()  # noqa: E731 - log clock read as UTC
        sweep.append(sweep_row(row, epoch(start), epoch(log.t)))
        log.at(20)
    return log, rows, sweep, best


def main() -> None:
    # The random draws do not depend on step time, so throughput scales exactly with 1/SCALE.
    _, _, _, best = build()
    SCALE[0] = best / PEAK_GEN_THROUGHPUT
    log, rows, sweep, best = build()
    (HERE / "server.log").write_text("\n".join(log.lines) + "\n")
    with open(HERE / "bench_results.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    (HERE / "bench_results.txt").write_text("\n".join(printed_block(r) for r in rows) + "\n")
    with open(HERE / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(sweep[0]))
        w.writeheader()
        w.writerows(sweep)
    print(f"model peak {best:.1f} tok/s, pinned {PEAK_GEN_THROUGHPUT}; levels {[r['output_throughput'] for r in rows]}")


if __name__ == "__main__":
    main()
