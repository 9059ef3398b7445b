"""A plain streaming client, independent of glm5lib's load generator: production-like traffic for
``glm5 watch``'s tests, run as its own process.

    python plain_client.py URL --api generate|completions --concurrency N --duration S --max-tokens M --out FILE

``N`` workers each send one streaming request after another (random prompts, EOS ignored) until the
duration is up, then let the last ones finish. Every token that arrives is counted in the second it
arrived (SGLang's ``/generate`` chunks carry ``meta_info.completion_tokens``; an OpenAI completions
chunk carries one token), and ``FILE`` gets ``{"completed", "tokens_by_second", "started", "ended"}``.
It imports aiohttp and the standard library only.
"""

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter

import aiohttp


async def one(session, url, api, max_tokens, model, seen, bins):
    if api == "generate":
        body = {"input_ids": [random.randrange(10, 1000) for _ in range(64)], "stream": True,
                "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True, "temperature": 1.0}}
        path = "/generate"
    else:
        body = {"model": model, "prompt": " ".join(random.choice("abcdefgh") for _ in range(32)), "stream": True,
                "max_tokens": max_tokens, "ignore_eos": True, "temperature": 1.0}
        path = "/v1/completions"
    got = 0
    async with session.post(url + path, json=body) as response:
        response.raise_for_status()
        async for raw in response.content:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:") or line.endswith("[DONE]"):
                continue
            chunk = json.loads(line[5:])
            if api == "generate":
                total = int(chunk.get("meta_info", {}).get("completion_tokens", got))
                new, got = max(total - got, 0), max(total, got)
            else:
                new = 1 if chunk.get("choices") and chunk["choices"][0].get("text") is not None else 0
                got += new
            if new:
                bins[int(time.time())] += new
    seen["completed"] += 1


async def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("--api", choices=("generate", "completions"), default="generate")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--model", default="")
    p.add_argument("--out", required=True)
    ns = p.parse_args(argv)
    seen, bins = Counter(), Counter()
    started = time.time()
    deadline = started + ns.duration

    async def worker(session):
        while time.time() < deadline:
            await one(session, ns.url.rstrip("/"), ns.api, ns.max_tokens, ns.model, seen, bins)

    timeout = aiohttp.ClientTimeout(total=None, sock_read=600)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(ns.concurrency)))
    with open(ns.out, "w") as fh:
        json.dump({"completed": seen["completed"], "tokens_by_second": {str(k): v for k, v in sorted(bins.items())},
                   "started": started, "ended": time.time()}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
