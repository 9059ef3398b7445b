"""How many streamed chunks per second glm5lib.loadgen consumes on one core, beside SGLang's own
bench_serving client, and how closely its TTFT matches the server's own send times.

The server is benchmarks/stream_server.py (streams as fast as it can, SGLang's chunk formats),
pinned to one core; each client is pinned to the other with taskset and measured over the same
window: from the first request the server received to the last chunk it wrote. For each client
the figures are chunks/s (wall) and chunks per client CPU-second (robust to a busy machine);
the best of --repeat runs is kept.

SGLang's client runs from a separate virtual environment kept out of this project, e.g.::

    python -m venv SGLVENV && SGLVENV/bin/pip install sglang --no-deps
    SGLVENV/bin/pip install torch==2.13.0     # the CPU build is enough for the client
    # then what `SGLVENV/bin/python -c "import sglang.benchmark.serving"` asks for, one by one

    python benchmarks/bench_loadgen.py --sglang-python SGLVENV/bin/python

Without --sglang-python (or GLM5_BENCH_SGLANG_PYTHON) only glm5lib's figures are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# bench_serving's figures on this machine quoted in the issue (C=256, 256-token outputs, one core).
QUOTED = {"generate": 87_000, "completions": 58_000}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read() or b"{}")


class StreamServer:
    def __init__(self, core: int, *extra: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(core), sys.executable, str(HERE / "stream_server.py"), "--port", str(self.port), *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        for _ in range(200):
            try:
                _get(self.url + "/health")
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("benchmark stream server did not start")

    def reset(self) -> None:
        _get(self.url + "/stats/reset")

    def window(self) -> tuple[float, float, int]:
        stats = _get(self.url + "/stats")
        done = [v for v in stats.values() if "last_sent" in v]
        return min(v["received"] for v in stats.values()), max(v["last_sent"] for v in done), len(done)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class CpuPoller:
    """Samples a process tree's CPU seconds every 10 ms, to read the CPU used within a window."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                t = self.proc.cpu_times()
                self.samples.append((time.time(), t.user + t.system))
            except psutil.Error:
                return
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_between(self, t0: float, t1: float) -> float:
        def at(t: float) -> float:
            prev = self.samples[0]
            for s in self.samples:
                if s[0] >= t:
                    if s[0] == prev[0]:
                        return s[1]
                    return prev[1] + (s[1] - prev[1]) * (t - prev[0]) / (s[0] - prev[0])
                prev = s
            return prev[1]

        return at(t1) - at(t0)


def _tokenizer_dir(root: Path) -> Path:
    """A word-level tokenizer folder that transformers loads offline (bench_serving needs one)."""
    path = root / "tokenizer"
    path.mkdir(exist_ok=True)
    vocab = {"[UNK]": 0, **{f"w{i}": i for i in range(1, 32000)}}
    (path / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    }))
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 10**6}))
    return path


def _measure(argv: list[str], server: StreamServer, core: int, env: dict | None = None) -> dict:
    server.reset()
    proc = subprocess.Popen(["taskset", "-c", str(core), *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    poller = CpuPoller(proc.pid)
    try:
        out, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        out += "\n(killed after 600 s)"
    poller.stop()
    if proc.returncode != 0:
        raise RuntimeError(f"client failed ({proc.returncode}): {' '.join(argv[:4])}...\n{out[-3000:]}")
    t0, t1, done = server.window()
    cpu = poller.cpu_between(t0, t1)
    return {"wall": t1 - t0, "requests": done, "cpu": cpu, "output": out}


def _ours(url: str, api: str, conc: int, n: int, out_len: int, run_dir: Path) -> list[str]:
    code = (
        "import sys,json; from glm5lib.loadgen import run_sweep, load_requests;"
        f"df=run_sweep({url!r},[{conc}],api={api!r},requests_per_level={n},input_len=256,"
        f"output_len={out_len},warmup=0,progress=False,resume=False,run_dir={str(run_dir)!r});"
        "r=df.iloc[0]; rq=load_requests(" + repr(str(run_dir)) + ");"
        "print('RESULT',json.dumps({'chunks':int(rq.chunk_times.map(len).sum()),'completed':int(r.completed),"
        "'cpu_pct':float(r.client_cpu_pct),'lag':float(r.loop_lag_p99_ms),'client_bound':bool(r.client_bound)}))"
    )
    return [sys.executable, "-c", code]


def _bench_serving(py: str, url: str, api: str, conc: int, n: int, out_len: int, tok: Path, out: Path) -> list[str]:
    return [py, "-m", "sglang.benchmark.serving", "--backend", "sglang" if api == "generate" else "sglang-oai",
            "--base-url", url, "--dataset-name", "random-ids", "--tokenizer", str(tok),
            "--random-input-len", "256", "--random-output-len", str(out_len), "--random-range-ratio", "1.0",
            "--num-prompts", str(n), "--max-concurrency", str(conc), "--request-rate", "inf",
            "--warmup-requests", "0", "--output-file", str(out), "--disable-tqdm"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sglang-python", default=os.environ.get("GLM5_BENCH_SGLANG_PYTHON"),
                    help="python of a venv with sglang installed (for bench_serving)")
    ap.add_argument("--concurrency", default="256,2048")
    ap.add_argument("--apis", default="generate,completions")
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--client-core", type=int, default=0)
    ap.add_argument("--server-core", type=int, default=1)
    ap.add_argument("--skip-ttft", action="store_true")
    args = ap.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    apis = args.apis.split(",")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    tmp = Path(tempfile.mkdtemp(prefix="bench-loadgen-"))
    tok = _tokenizer_dir(tmp) if args.sglang_python else None
    print(f"client pinned to core {args.client_core}, server to core {args.server_core}; "
          f"{args.output_len}-token outputs, 1 token per chunk; best of {args.repeat}")
    rows = []
    server = StreamServer(args.server_core)
    try:
        for api in apis:
            for conc in levels:
                n = conc * (4 if conc <= 256 else 2)
                best: dict[str, dict] = {}
                for rep in range(args.repeat):
                    clients = ["glm5lib"] + (["bench_serving"] if args.sglang_python else [])
                    if rep % 2:
                        clients.reverse()
                    for client in clients:
                        if client == "glm5lib":
                            argv = _ours(server.url, api, conc, n, args.output_len, tmp / f"run-{api}-{conc}-{rep}")
                            m = _measure(argv, server, args.client_core)
                            line = next(ln for ln in m["output"].splitlines() if ln.startswith("RESULT "))
                            m.update(json.loads(line[7:]))
                        else:
                            argv = _bench_serving(args.sglang_python, server.url, api, conc, n, args.output_len,
                                                  tok, tmp / f"bs-{api}-{conc}-{rep}.jsonl")
                            m = _measure(argv, server, args.client_core, env)
                            m["chunks"] = m["requests"] * args.output_len
                        m["chunks_s"] = m["chunks"] / m["wall"]
                        m["chunks_cpu_s"] = m["chunks"] / m["cpu"] if m["cpu"] > 0 else float("nan")
                        if client not in best or m["chunks_s"] > best[client]["chunks_s"]:
                            best[client] = m
                for client, m in best.items():
                    rows.append((api, conc, client, m))
                    extra = (f"  client CPU (own) {m['cpu_pct']:.0f}%, loop lag p99 {m['lag']:.0f} ms, "
                             f"client_bound={m['client_bound']}" if client == "glm5lib" else "")
                    print(f"{api:12s} C={conc:<5d} {client:14s} {m['chunks_s']:>9,.0f} chunks/s   "
                          f"{m['chunks_cpu_s']:>9,.0f} chunks/CPU-s   ({m['chunks']:,} chunks in {m['wall']:.2f} s, "
                          f"client CPU {100 * m['cpu'] / m['wall']:.0f}%){extra}", flush=True)
    finally:
        server.stop()

    print("\nside by side (chunks/s; ratio = glm5lib / bench_serving)")
    print(f"{'api':12s} {'C':>5s} {'glm5lib':>10s} {'bench_serving':>14s} {'ratio':>6s} "
          f"{'glm5lib/CPU-s':>14s} {'bs/CPU-s':>10s} {'ratio':>6s}  quoted bench_serving (C=256)")
    by = {(a, c, cl): m for a, c, cl, m in rows}
    for api in apis:
        for conc in levels:
            ours = by[(api, conc, "glm5lib")]
            theirs = by.get((api, conc, "bench_serving"))
            quoted = f"{QUOTED[api]:,}" if conc == 256 and api in QUOTED else ""
            if theirs:
                print(f"{api:12s} {conc:>5d} {ours['chunks_s']:>10,.0f} {theirs['chunks_s']:>14,.0f} "
                      f"{ours['chunks_s'] / theirs['chunks_s']:>6.2f} {ours['chunks_cpu_s']:>14,.0f} "
                      f"{theirs['chunks_cpu_s']:>10,.0f} {ours['chunks_cpu_s'] / theirs['chunks_cpu_s']:>6.2f}  {quoted}")
            else:
                print(f"{api:12s} {conc:>5d} {ours['chunks_s']:>10,.0f} {'-':>14s} {'-':>6s} "
                      f"{ours['chunks_cpu_s']:>14,.0f} {'-':>10s} {'-':>6s}  {quoted}")

    if not args.skip_ttft:
        _ttft_agreement(args, tmp)
    return 0


def _ttft_agreement(args: argparse.Namespace, tmp: Path) -> None:
    """Client first-token time minus the server's first-chunk write time, same clock."""
    server = StreamServer(args.server_core, "--token-delay", "0.01", "--first-delay", "0.02")
    try:
        run_dir = tmp / "ttft"
        argv = _ours(server.url, "generate", 64, 512, 32, run_dir)
        subprocess.run(["taskset", "-c", str(args.client_core), *argv], check=True, capture_output=True)
        stats = _get(server.url + "/stats")
    finally:
        server.stop()
    recs = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    gaps = sorted((r["first_token"] - stats[r["id"]]["first_sent"]) * 1000 for r in recs if r["id"] in stats)
    ttft_client = statistics.median((r["first_token"] - r["start"]) * 1000 for r in recs)
    ttft_server = statistics.median((v["first_sent"] - v["received"]) * 1000 for v in stats.values())

    def q(p: float) -> float:
        return gaps[min(len(gaps) - 1, int(p * len(gaps)))]

    print(f"\nTTFT agreement (generate, C=64, 512 requests, chunks every 10 ms, first after 20 ms): "
          f"client first token - server first-chunk write: median {q(0.5):.3f} ms, p90 {q(0.9):.3f} ms, "
          f"p99 {q(0.99):.3f} ms, min {gaps[0]:.3f} ms (target: median < 1 ms) "
          f"-> {'OK' if abs(q(0.5)) < 1.0 else 'MISSED'}")
    print(f"median TTFT: client {ttft_client:.2f} ms (request sent -> first token), "
          f"server {ttft_server:.2f} ms (request parsed -> first chunk written)")


if __name__ == "__main__":
    sys.exit(main())
