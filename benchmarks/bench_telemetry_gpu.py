"""Validate glm5lib.telemetry on real NVIDIA GPUs and print the figures.

What it does, on every GPU NVML sees:
1. times each NVML read the sampler uses (the batched field-value query and the individual calls),
   and runs EMULATE sampler threads on GPU 0 at once (as many GPUs' threads would) to see whether
   NVML serialises them;
2. takes an environment() snapshot and, with two GPUs or more, checks the P2P matrix against
   PyTorch's own peer-access answer and that every GPU has its row;
3. samples with GpuSampler (10 Hz by default) through IDLE seconds of idle, LOAD seconds of bf16
   matrix products on every GPU, and a short tail, then checks that
   - power rises under load,
   - the energy counter agrees with the integral of the sampled power within 10 %,
   - each GPU kept its sampling rate (within 10 % of the target),
   and prints the achieved rate and the per-sample cost.

Without a GPU (or without torch) it prints SKIP and the reason and exits 0.

    python benchmarks/bench_telemetry_gpu.py [--emulate 8] [--idle 5] [--load 30] [--interval 0.1] [--out DIR]

Results: DIR/results.json, DIR/gpu.csv, DIR/environment.json (DIR defaults to $OUT, else a
temporary folder). Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from glm5lib import levels, telemetry
from glm5lib.telemetry import gpu as telemetry_gpu


def skip(reason: str) -> int:
    print(f"SKIP: {reason}")
    return 0


def time_nvml_calls(nvml, index: int, reps: int = 20) -> dict[str, dict[str, float]]:
    """Median and p90 cost in ms of each NVML read the sampler may use, on one GPU."""
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    batch = [f for _, f in telemetry_gpu._NvmlGpu._BATCH]
    calls = {
        "field_values_x5 (batched)": lambda: nvml.nvmlDeviceGetFieldValues(h, batch),
        "power_usage": lambda: nvml.nvmlDeviceGetPowerUsage(h),
        "total_energy": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(h),
        "utilization": lambda: nvml.nvmlDeviceGetUtilizationRates(h),
        "sm_clock": lambda: nvml.nvmlDeviceGetClockInfo(h, 1),
        "memory_info": lambda: nvml.nvmlDeviceGetMemoryInfo(h),
        "temperature": lambda: nvml.nvmlDeviceGetTemperature(h, 0),
        "clock_event_reasons": lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(h),
        "pcie_throughput_tx": lambda: nvml.nvmlDeviceGetPcieThroughput(h, 0),
    }
    out = {}
    for name, fn in calls.items():
        costs = []
        error = None
        for _ in range(reps if "pcie" not in name else 5):
            t0 = time.perf_counter()
            try:
                fn()
            except Exception as exc:
                error = str(exc)
                break
            costs.append((time.perf_counter() - t0) * 1e3)
        if costs:
            out[name] = {"median_ms": statistics.median(costs), "p90_ms": float(np.percentile(costs, 90))}
        else:
            out[name] = {"error": error}
    values = nvml.nvmlDeviceGetFieldValues(h, batch)
    out["field_support"] = {name: int(v.nvmlReturn) for (name, _), v in zip(telemetry_gpu._NvmlGpu._BATCH, values, strict=False)}
    return out


def emulate_many_gpus(nvml, n: int, seconds: float, interval: float) -> dict:
    """n sampler threads reading GPU 0 at once, as n GPUs' threads would: does NVML serialise them?"""
    readers = []
    for i in range(n):
        stats = telemetry_gpu._Stats(i)
        readers.append((telemetry_gpu._NvmlGpu(nvml, 0, interval, stats), stats))
    stop = threading.Event()

    def loop(reader, stats):
        start = time.monotonic()
        k = 0
        while not stop.is_set():
            row = reader.sample()
            stats.record(row["time"], row["_cost"])
            k = max(k + 1, int((time.monotonic() - start) / interval) + 1)
            stop.wait(max(0.0, start + k * interval - time.monotonic()))

    threads = [threading.Thread(target=loop, args=r, daemon=True) for r in readers]
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join(5)
    rows = [s.row(interval) for _, s in readers]
    return {"threads": n, "interval_s": interval,
            "achieved_hz": [round(r["achieved_hz"], 3) for r in rows],
            "cost_mean_ms": [round(r["cost_mean_ms"], 2) for r in rows],
            "cost_p99_ms": [round(r["cost_p99_ms"], 2) for r in rows],
            "rotating": [bool(r["rotating"]) for r in rows]}


def load_gpus(torch, devices: list[int], seconds: float, size: int = 8192) -> dict[str, float]:
    """bf16 matrix products on every device for `seconds`; returns the achieved TFLOP/s."""
    mats = {}
    for d in devices:
        a = torch.randn(size, size, device=f"cuda:{d}", dtype=torch.bfloat16)
        b = torch.randn(size, size, device=f"cuda:{d}", dtype=torch.bfloat16)
        mats[d] = (a, b)
    for d in devices:
        torch.cuda.synchronize(d)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(20):
            for d in devices:
                a, b = mats[d]
                torch.matmul(a, b)
        n += 20
        for d in devices:
            torch.cuda.synchronize(d)
    elapsed = time.perf_counter() - t0
    del mats
    torch.cuda.empty_cache()
    return {"seconds": elapsed, "matmuls_per_gpu": n, "tflops_per_gpu": 2 * size**3 * n / elapsed / 1e12}


def nvidia_smi_topology(count: int) -> list[list[str]] | None:
    """The GPU-to-GPU block of `nvidia-smi topo -m`, or None where nvidia-smi is absent."""
    import re
    import shutil
    import subprocess

    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        text = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if line.startswith("GPU") and re.fullmatch(r"GPU\d+", parts[0]) and len(parts) > count:
            rows.append(parts[1:count + 1])
    return rows if len(rows) == count else None


def energy_vs_integral(frame, t_start: float, t_end: float) -> list[dict[str, float]]:
    rows = []
    for gpu, g in frame[(frame["time"] >= t_start) & (frame["time"] <= t_end)].groupby("gpu"):
        g = g.dropna(subset=["power_w", "energy_j"]).sort_values("time")
        t, p, e = g["time"].to_numpy(), g["power_w"].to_numpy(), g["energy_j"].to_numpy()
        if len(t) < 3:
            rows.append({"gpu": int(gpu), "error": "fewer than 3 samples with power and energy"})
            continue
        integral = float(np.sum((p[1:] + p[:-1]) / 2 * np.diff(t)))
        counter = float(e[-1] - e[0])
        rows.append({"gpu": int(gpu), "seconds": float(t[-1] - t[0]), "counter_j": counter,
                     "integral_j": integral, "ratio": counter / integral if integral else float("nan")})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle before the load")
    parser.add_argument("--load", type=float, default=30.0, help="seconds of bf16 matrix products")
    parser.add_argument("--tail", type=float, default=2.0, help="seconds sampled after the load")
    parser.add_argument("--interval", type=float, default=0.1, help="sampling interval, seconds")
    parser.add_argument("--emulate", type=int, default=8,
                        help="sampler threads reading GPU 0 at once, standing for that many GPUs (0: skip)")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder for results (default $OUT)")
    args = parser.parse_args()

    nvml, reason = telemetry_gpu._load_nvml()
    if nvml is None:
        return skip(reason)
    try:
        import torch
    except ImportError:
        nvml.nvmlShutdown()
        return skip("torch is not installed; it provides the load")
    if not torch.cuda.is_available():
        nvml.nvmlShutdown()
        return skip("torch sees no CUDA device")

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench-telemetry-"))
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"checks": {}}
    checks = results["checks"]
    count = nvml.nvmlDeviceGetCount()
    results["nvml_call_costs_gpu0"] = time_nvml_calls(nvml, 0)
    if args.emulate > 0:
        results["emulated_gpus"] = emulate_many_gpus(nvml, args.emulate, 4.0, args.interval)
        e = results["emulated_gpus"]
        checks["emulated_rate_held"] = {"passed": min(e["achieved_hz"]) >= 0.9 / args.interval, **e}
    nvml.nvmlShutdown()

    # -- environment -----------------------------------------------------------------------
    t0 = time.perf_counter()
    env = telemetry.environment(source="nvml")
    results["environment_seconds"] = time.perf_counter() - t0
    telemetry.save_environment(out / "environment.json", env)
    print(telemetry.format_environment(env))
    results["gpus"] = [{k: g[k] for k in ("index", "name", "compute_capability", "power_limit_w",
                                          "pcie_gen_current", "pcie_gen_max", "pcie_width_current",
                                          "pcie_width_max")} for g in env["gpus"]]
    results["p2p"], results["topology"], results["warnings"] = env["p2p"], env["topology"], env["warnings"]
    checks["one_row_per_gpu"] = {"passed": len(env["gpus"]) == count == torch.cuda.device_count(),
                                 "nvml": count, "torch": torch.cuda.device_count(), "rows": len(env["gpus"])}
    if count >= 2:
        shape_ok = len(env["p2p"]) == count and all(len(r) == count for r in env["p2p"])
        diag_ok = all(env["p2p"][i][i] == "OK" for i in range(count))
        torch_p2p = [[i == j or torch.cuda.can_device_access_peer(i, j) for j in range(count)]
                     for i in range(count)]
        agree = shape_ok and all((env["p2p"][i][j] == "OK") == torch_p2p[i][j]
                                 for i in range(count) for j in range(count))
        results["torch_p2p"] = torch_p2p
        checks["p2p_matrix"] = {"passed": shape_ok and diag_ok and agree, "square": shape_ok,
                                "diagonal_ok": diag_ok, "agrees_with_torch": agree}
        smi = nvidia_smi_topology(count)
        if smi is not None:
            results["nvidia_smi_topology"] = smi
            checks["topology_matches_nvidia_smi"] = {"passed": smi == env["topology"], "nvidia_smi": smi,
                                                     "glm5lib": env["topology"]}
        uuids = {g["uuid"] for g in env["gpus"]}
        checks["distinct_gpus"] = {"passed": len(uuids) == count, "uuids": len(uuids)}

    # -- sampling under load ---------------------------------------------------------------
    csv_path = out / "gpu.csv"
    if csv_path.exists():
        csv_path.unlink()
    devices = list(range(torch.cuda.device_count()))
    for d in devices:  # create the CUDA contexts before the idle phase so it stays idle
        torch.zeros(1, device=f"cuda:{d}")
        torch.cuda.synchronize(d)
    sampler = telemetry.GpuSampler(interval=args.interval, source="nvml", out=csv_path)
    with sampler:
        t_idle = time.time()
        time.sleep(args.idle)
        t_load = time.time()
        load_info = load_gpus(torch, devices, args.load)
        t_load_end = time.time()
        time.sleep(args.tail)
    t_end = time.time()
    frame = sampler.frame()
    stats = sampler.stats()
    results["load"] = load_info
    results["sampler_stats"] = json.loads(stats.to_json(orient="records"))
    results["samples"] = len(frame)
    print("\nsampler stats:")
    print(stats.drop(columns=["last_error"]).to_string(index=False))

    ramp = 3.0  # seconds for power to settle after the load starts
    per_gpu = []
    for gpu, g in frame.groupby("gpu"):
        idle = g[(g["time"] >= t_idle) & (g["time"] < t_load)]
        busy = g[(g["time"] >= t_load + ramp) & (g["time"] < t_load_end)]
        per_gpu.append({
            "gpu": int(gpu), "idle_mean_w": idle["power_w"].mean(), "load_mean_w": busy["power_w"].mean(),
            "load_peak_w": busy["power_w"].max(), "power_limit_w": g["power_limit_w"].median(),
            "idle_gpu_util": idle["gpu_util"].mean(), "load_gpu_util": busy["gpu_util"].mean(),
            "idle_sm_clock_mhz": idle["sm_clock_mhz"].mean(), "load_sm_clock_mhz": busy["sm_clock_mhz"].mean(),
            "load_temperature_c": busy["temperature_c"].max(),
            "load_pcie_tx_mb_s": busy["pcie_tx_bytes_s"].mean() / 1e6,
            "load_pcie_rx_mb_s": busy["pcie_rx_bytes_s"].mean() / 1e6,
            "throttle_reasons_seen": sorted({int(x) for x in busy["throttle_reasons"].dropna()}),
        })
    results["power"] = per_gpu
    print("\npower per GPU:")
    for row in per_gpu:
        print("  " + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    checks["power_rises"] = {
        "passed": bool(per_gpu) and all(r["load_mean_w"] > max(1.5 * r["idle_mean_w"], r["idle_mean_w"] + 100)
                                        for r in per_gpu),
        "rule": "load mean > max(1.5 x idle mean, idle mean + 100 W) on every GPU",
    }
    energy_all = energy_vs_integral(frame, t_idle, t_end)
    energy_load = energy_vs_integral(frame, t_load, t_load_end)
    results["energy_whole_run"], results["energy_under_load"] = energy_all, energy_load
    print("\nenergy counter vs integral of sampled power:")
    for label, rows in (("whole run", energy_all), ("under load", energy_load)):
        for r in rows:
            print(f"  {label} GPU {r['gpu']}: " + ", ".join(f"{k}={v:.3f}" for k, v in r.items() if k != "gpu"
                                                            and isinstance(v, float)))
    ratios = [r.get("ratio", float("nan")) for r in energy_all + energy_load]
    checks["energy_within_10pct"] = {"passed": bool(ratios) and all(abs(x - 1) <= 0.10 for x in ratios),
                                     "ratios": ratios}
    target = 1.0 / args.interval
    checks["rate_held"] = {"passed": bool((stats["achieved_hz"] >= 0.9 * target).all()),
                           "achieved_hz": stats["achieved_hz"].round(3).tolist(), "target_hz": target}
    results["cost_ms"] = {"mean": stats["cost_mean_ms"].tolist(), "p50": stats["cost_p50_ms"].tolist(),
                          "p99": stats["cost_p99_ms"].tolist(), "max": stats["cost_max_ms"].tolist()}
    on_disk = telemetry.load_gpu_csv(csv_path)
    checks["csv_complete"] = {"passed": len(on_disk) == len(frame), "rows_csv": len(on_disk), "rows": len(frame)}
    checks["no_read_errors"] = {"passed": bool((stats["errors"] == 0).all()), "errors": stats["errors"].tolist()}

    # per-level join on a made-up two-level sweep (idle, load) as a smoke test on real samples
    sweep = {"concurrency": [0, 1], "window_start": [t_idle, t_load + ramp],
             "window_end": [t_load, t_load_end], "output_throughput": [1.0, 1.0]}
    import pandas as pd

    results["per_level"] = json.loads(levels.per_level(frame, pd.DataFrame(sweep)).to_json(orient="records"))

    passed = all(c["passed"] for c in checks.values())
    results["passed"] = passed
    results["threads_alive_after_stop"] = [t.name for t in threading.enumerate() if t.name.startswith("glm5-")]
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    print("\nNVML call costs on GPU 0 (ms):")
    for name, v in results["nvml_call_costs_gpu0"].items():
        print(f"  {name}: {v}")
    print("\nchecks:")
    for name, c in checks.items():
        print(f"  {'PASS' if c['passed'] else 'FAIL'} {name}: " + json.dumps({k: v for k, v in c.items() if k != 'passed'}))
    print(f"\n{'ALL PASSED' if passed else 'SOME CHECKS FAILED'}; results in {out}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
