"""An OpenAI-compatible streaming server as strict as ``transformers serve`` (5.x), for CPU tests.

What it reproduces, each seen in transformers' ``serving/completion.py`` and on a real run:
``/v1/completions`` answers 422 to fields outside OpenAI's schema (``ignore_eos``,
``min_tokens``) and to ``stream_options``, 400 to a prompt that is not a string; ``/v1/models``
lists nothing (transformers lists the Hugging Face cache, not a local model it serves); the
stream has no per-chunk usage, several events can arrive in one write, the last chunk carries
``finish_reason`` and ``usage``, and no ``data: [DONE]`` follows. ``--max-batch N`` lets at most N
requests generate at once (the rest wait), like a capped continuous-batching engine.

    python tests/strict_openai_server.py --host 127.0.0.1 --port 8000 [--max-batch 8] [--step 0.01]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from aiohttp import web

OPENAI_FIELDS = {
    "model", "prompt", "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
    "presence_penalty", "seed", "stop", "stream", "stream_options", "suffix", "temperature", "top_p", "user",
    "generation_config",
}
UNUSED_FIELDS = {"best_of", "echo", "logprobs", "n", "presence_penalty", "stream_options", "user"}


def _chunk(rid: str, model: str, text: str = "", finish: str | None = None, usage: dict | None = None) -> bytes:
    body = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}], "usage": usage}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def make_app(max_batch: int, step: float, model_name: str) -> web.Application:
    slots = asyncio.Semaphore(max_batch)
    counter = iter(range(1 << 30))

    async def health(_request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": []})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        unexpected = set(body) - OPENAI_FIELDS
        if unexpected:
            print(f"ERROR Unexpected keys in the request: {unexpected}", flush=True)
            raise web.HTTPUnprocessableEntity(text=json.dumps({"detail": f"Unexpected keys in the request: {unexpected}"}))
        unused = set(body) & UNUSED_FIELDS
        if unused:
            raise web.HTTPUnprocessableEntity(text=json.dumps({"detail": f"Unsupported fields in the request: {unused}"}))
        prompt = body.get("prompt", "")
        if not isinstance(prompt, str):
            raise web.HTTPBadRequest(text=json.dumps({"detail": "prompt must be a string."}))
        if not body.get("model"):
            raise web.HTTPBadRequest(text=json.dumps({"detail": "model is required"}))
        n = int(body.get("max_tokens") or 16)
        rid = f"req_{next(counter)}"
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        async with slots:
            print(f"[Request received] Model: {body['model']}, CB: True", flush=True)
            pending = []
            for i in range(n):
                await asyncio.sleep(step)
                pending.append(_chunk(rid, body["model"], text=f" w{i}"))
                if len(pending) == 2 or i == n - 1:  # two events in one write, as a batched queue gives
                    await response.write(b"".join(pending))
                    pending = []
            prompt_tokens = len(prompt.split())
            usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}
            await response.write(_chunk(rid, body["model"], finish="length", usage=usage))
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    return app


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default="/tmp/tinymoe")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--max-batch", type=int, default=1 << 20)
    ap.add_argument("--step", type=float, default=0.01, help="seconds per generated token")
    args = ap.parse_args(argv)
    print(f"INFO:     strict OpenAI test server for {args.model} on http://{args.host}:{args.port}", flush=True)
    web.run_app(make_app(args.max_batch, args.step, args.model), host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main(sys.argv[1:])
