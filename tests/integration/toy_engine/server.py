"""toyserve: a fifth inference engine, written for the test that glm5lib's core knows no engine.

Nothing of it is SGLang's or vLLM's: its flags (``--max-seqs``, ``--kv-slots``), its log lines
(``[toy] ...``), its ``/metrics`` names (``toy_*``) and its self-description (``GET /toy/about``)
are its own. It batches like a continuous-batching engine: a scheduler loop admits waiting
requests up to ``--max-seqs`` while their tokens fit ``--kv-slots``, then each step emits one
token for every running request and lasts ``--step-ms + --per-seq-ms x running`` (so a larger
batch is a longer step and more tokens a second, up to the step's own growth). It serves
OpenAI's streaming ``/v1/completions`` (a prompt's tokens are its words).

    python server.py --host 127.0.0.1 --port 8000 --max-seqs 4 [--kv-slots 65536]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import deque
from datetime import datetime

from aiohttp import web

VERSION = "0.3.1"


def say(text: str) -> None:
    print(f"[toy] {datetime.now().strftime('%Y-%m-%d %H:%M:%S.%f')[:-3]} {text}", flush=True)


class Request:
    def __init__(self, prompt_tokens: int, max_tokens: int):
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.sent = 0
        self.tokens: asyncio.Queue[int | None] = asyncio.Queue()

    @property
    def slots(self) -> int:
        return self.prompt_tokens + self.max_tokens


class Engine:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.used = 0
        self.generated = 0
        self.prompts = 0
        self.finished = 0
        self.steps = 0
        self.wake = asyncio.Event()

    def kv_ratio(self) -> float:
        return self.used / self.args.kv_slots

    async def loop(self) -> None:
        last_line = 0.0
        while True:
            while (self.waiting and len(self.running) < self.args.max_seqs
                   and self.used + self.waiting[0].slots <= self.args.kv_slots):
                req = self.waiting.popleft()
                self.used += req.slots
                self.prompts += req.prompt_tokens
                self.running.append(req)
            if not self.running:
                self.wake.clear()
                await self.wake.wait()
                continue
            step = (self.args.step_ms + self.args.per_seq_ms * len(self.running)) / 1000.0
            started = time.monotonic()
            await asyncio.sleep(step)
            self.steps += 1
            for req in self.running:
                req.sent += 1
                self.generated += 1
                req.tokens.put_nowait(req.sent)
            done = [r for r in self.running if r.sent >= r.max_tokens]
            for req in done:
                req.tokens.put_nowait(None)
                self.used -= req.slots
                self.finished += 1
            self.running = [r for r in self.running if r.sent < r.max_tokens]
            now = time.monotonic()
            if now - last_line >= 0.5:
                rate = (len(self.running) + len(done)) / max(now - started, 1e-9)
                say(f"sched step={self.steps} batch={len(self.running) + len(done)} queued={len(self.waiting)} "
                    f"kv_used={self.kv_ratio():.4f} out_tok_per_s={rate:.1f}")
                last_line = now


def make_app(args: argparse.Namespace) -> web.Application:
    engine = Engine(args)
    counter = iter(range(1 << 30))

    async def start(_app: web.Application) -> None:
        _app["loop"] = asyncio.get_running_loop().create_task(engine.loop())
        say(f"listening on http://{args.host}:{args.port}; ready")

    async def stop(_app: web.Application) -> None:
        _app["loop"].cancel()

    async def health(_r: web.Request) -> web.Response:
        return web.Response(text="alive")

    async def about(_r: web.Request) -> web.Response:
        return web.json_response({"engine": "toyserve", "version": VERSION, "max_seqs": args.max_seqs,
                                  "kv_slots": args.kv_slots})

    async def models(_r: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": args.model, "object": "model"}]})

    async def metrics(_r: web.Request) -> web.Response:
        lines = [
            "# TYPE toy_batch_running gauge", f"toy_batch_running {len(engine.running)}",
            "# TYPE toy_batch_queued gauge", f"toy_batch_queued {len(engine.waiting)}",
            "# TYPE toy_kv_fill gauge", f"toy_kv_fill {engine.kv_ratio():.6f}",
            "# TYPE toy_output_tokens counter", f"toy_output_tokens_total {engine.generated}",
            "# TYPE toy_input_tokens counter", f"toy_input_tokens_total {engine.prompts}",
            "# TYPE toy_requests_done counter", f"toy_requests_done_total {engine.finished}",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            return web.json_response({"error": "prompt must be a string"}, status=400)
        max_tokens = int(body.get("max_tokens") or 16)
        req = Request(max(1, len(prompt.split())), max_tokens)
        if req.slots > args.kv_slots:
            return web.json_response({"error": "request does not fit the KV slots"}, status=400)
        rid = f"toy-{next(counter)}"
        engine.waiting.append(req)
        engine.wake.set()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        while True:
            n = await req.tokens.get()
            last = n is None or n >= max_tokens
            choice = {"text": "" if n is None else " tok", "index": 0,
                      "finish_reason": "length" if last else None}
            chunk = {"id": rid, "object": "text_completion", "model": args.model, "choices": [choice]}
            if last:
                chunk["usage"] = {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.sent,
                                  "total_tokens": req.prompt_tokens + req.sent}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if last:
                break
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_get("/health", health)
    app.router.add_get("/toy/about", about)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    return app


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="toyserve")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="toy-model")
    p.add_argument("--max-seqs", type=int, default=4)
    p.add_argument("--kv-slots", type=int, default=65536)
    p.add_argument("--step-ms", type=float, default=8.0)
    p.add_argument("--per-seq-ms", type=float, default=0.25)
    args = p.parse_args(argv)
    say(f"toyserve {VERSION} starting")
    say("config: " + " ".join(f"{k}={v}" for k, v in sorted(vars(args).items())))
    say(f"kv cache: {args.kv_slots} slots; at most {args.max_seqs} sequences per batch")
    web.run_app(make_app(args), host=args.host, port=args.port, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
