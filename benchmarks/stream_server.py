"""A minimal HTTP/1.1 streaming server that sends SGLang-format chunks as fast as it can.

Used by bench_loadgen.py to measure load-generator clients, not servers: a raw asyncio protocol
(no framework) so the server spends far less CPU per chunk than a client does. Serves
``POST /generate`` (each chunk carries the whole text and output ids so far plus ``meta_info``
with cumulative ``completion_tokens``, as SGLang does without --stream-output), ``POST
/v1/completions`` (per-chunk ``usage`` when asked for continuous usage stats, final usage chunk
when asked for include_usage), ``GET /health``, ``GET /v1/models``, ``GET /get_model_info`` and
``GET /stats`` (per request: when it was received and when its first and last chunks were
written, epoch s; ``GET /stats/reset`` clears them).

    python benchmarks/stream_server.py --port 31000 [--token-delay 0.01 --first-delay 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import time

_IDS = itertools.count()
_WORD = "tok"
_HIGH_WATER = 256 * 1024


def _frame(payload: bytes) -> bytes:
    body = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(body), body)


class _Stream:
    __slots__ = ("api", "first", "k", "n", "next_at", "prompt", "rid", "transport", "usage_each", "usage_final")

    def __init__(self, transport, api, n, prompt, rid, usage_each, usage_final, first_delay):
        self.transport = transport
        self.api = api
        self.n = n
        self.k = 0
        self.prompt = prompt
        self.rid = rid
        self.usage_each = usage_each
        self.usage_final = usage_final
        self.first = True
        self.next_at = time.time() + first_delay


class Server:
    def __init__(self, token_delay: float, first_delay: float) -> None:
        self.token_delay = token_delay
        self.first_delay = first_delay
        self.active: list[_Stream] = []
        self.wake = asyncio.Event()
        self.stats: dict[str, dict[str, float]] = {}
        self.text_cache: list[bytes] = [b""]
        self.ids_cache: list[bytes] = [b""]

    def _text(self, k: int) -> tuple[bytes, bytes]:
        while len(self.text_cache) <= k:
            n = len(self.text_cache)
            self.text_cache.append(self.text_cache[-1] + (b" " if n > 1 else b"") + _WORD.encode())
            self.ids_cache.append(self.ids_cache[-1] + (b"," if n > 1 else b"") + str(1000 + n).encode())
        return self.text_cache[k], self.ids_cache[k]

    def chunk(self, st: _Stream) -> bytes:
        k = st.k
        last = k == st.n
        if st.api == "generate":
            text, ids = self._text(k)
            finish = b'{"type":"length","length":%d}' % st.n if last else b"null"
            payload = (
                b'{"text":"%s","output_ids":[%s],"meta_info":{"id":"%s","finish_reason":%s,'
                b'"prompt_tokens":%d,"weight_version":"default","completion_tokens":%d,'
                b'"cached_tokens":0,"e2e_latency":0.0},"index":0}'
                % (text, ids, st.rid, finish, st.prompt, k)
            )
        else:
            usage = (
                b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (st.prompt, st.prompt + k, k)
                if st.usage_each
                else b"null"
            )
            finish = b'"length"' if last else b"null"
            payload = (
                b'{"id":"%s","object":"text_completion","created":0,"model":"bench","choices":'
                b'[{"index":0,"text":" %s","logprobs":null,"finish_reason":%s,"matched_stop":null}],'
                b'"usage":%s}' % (st.rid, _WORD.encode(), finish, usage)
            )
        out = _frame(payload)
        if last:
            if st.api != "generate" and st.usage_final:
                out += _frame(
                    b'{"id":"%s","object":"text_completion","created":0,"model":"bench","choices":[],'
                    b'"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}}'
                    % (st.rid, st.prompt, st.prompt + st.n, st.n)
                )
            out += _frame(b"[DONE]") + b"0\r\n\r\n"
        return out

    async def pump(self) -> None:
        while True:
            if not self.active:
                self.wake.clear()
                await self.wake.wait()
            now = time.time()
            soonest = None
            keep = []
            for st in self.active:
                tr = st.transport
                if tr.is_closing():
                    continue
                if st.next_at > now:
                    soonest = st.next_at if soonest is None else min(soonest, st.next_at)
                    keep.append(st)
                    continue
                if tr.get_write_buffer_size() > _HIGH_WATER:
                    keep.append(st)
                    continue
                st.k += 1
                tr.write(self.chunk(st))
                if st.first:
                    st.first = False
                    self.stats[st.rid.decode()]["first_sent"] = time.time()
                if st.k == st.n:
                    self.stats[st.rid.decode()]["last_sent"] = time.time()
                else:
                    if self.token_delay:
                        st.next_at = now + self.token_delay
                    keep.append(st)
            self.active = keep
            if self.token_delay or self.first_delay:
                wait = max(0.0, (soonest - time.time())) if soonest and len(keep) else 0.0
                await asyncio.sleep(min(wait, 0.001) if wait else 0)
            else:
                await asyncio.sleep(0)

    def start_stream(self, transport, api: str, body: dict, received: float) -> None:
        rid = f"bench-{next(_IDS)}"
        if api == "generate":
            n = int(body.get("sampling_params", {}).get("max_new_tokens", 16))
            prompt = body.get("input_ids") or body.get("text") or ""
        else:
            n = int(body.get("max_tokens", 16))
            prompt = body.get("prompt") or ""
        opts = body.get("stream_options") or {}
        prompt_tokens = len(prompt) if isinstance(prompt, list) else max(1, len(str(prompt).split()))
        self.stats[rid] = {"received": received}
        transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        self.active.append(
            _Stream(transport, api, max(1, n), prompt_tokens, rid.encode(),
                    bool(opts.get("continuous_usage_stats")), bool(opts.get("include_usage")),
                    self.first_delay)
        )
        self.wake.set()


class _Protocol(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.buf = b""
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            head_end = self.buf.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buf[:head_end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            if len(self.buf) < head_end + 4 + length:
                return
            body = self.buf[head_end + 4 : head_end + 4 + length]
            self.buf = self.buf[head_end + 4 + length :]
            method, path, _ = head[0].split(" ", 2)
            self.handle(method, path.split("?")[0], body)

    def _json(self, status: str, obj) -> None:
        data = json.dumps(obj).encode()
        self.transport.write(
            b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (status.encode(), len(data), data)
        )

    def handle(self, method: str, path: str, body: bytes) -> None:
        received = time.time()
        if method == "POST" and path in ("/generate", "/v1/completions"):
            try:
                req = json.loads(body)
            except ValueError:
                self._json("400 Bad Request", {"error": {"message": "body is not JSON"}})
                return
            self.server.start_stream(self.transport, "generate" if path == "/generate" else "completions", req, received)
        elif path == "/health":
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        elif path == "/v1/models":
            self._json("200 OK", {"object": "list", "data": [{"id": "bench", "object": "model"}]})
        elif path in ("/get_model_info", "/model_info"):
            self._json("200 OK", {"model_path": "bench", "tokenizer_path": "bench", "is_generation": True})
        elif path == "/stats":
            self._json("200 OK", self.server.stats)
        elif path == "/stats/reset":
            self.server.stats.clear()
            self._json("200 OK", {})
        else:
            self._json("404 Not Found", {"error": {"message": f"no route {path}"}})


async def serve(host: str, port: int, token_delay: float, first_delay: float) -> None:
    server = Server(token_delay, first_delay)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: _Protocol(server), host, port, backlog=4096)
    pump = asyncio.create_task(server.pump())
    print(f"stream server on http://{host}:{port}", flush=True)
    async with srv:
        await srv.serve_forever()
    pump.cancel()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=31000)
    ap.add_argument("--token-delay", type=float, default=0.0, help="seconds between chunks of one stream")
    ap.add_argument("--first-delay", type=float, default=0.0, help="seconds before a stream's first chunk")
    args = ap.parse_args()
    try:
        asyncio.run(serve(args.host, args.port, args.token_delay, args.first_delay))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
