"""One streamed request against SGLang's ``/generate`` or an OpenAI-compatible endpoint.

The hot path reads whatever bytes have arrived, splits server-sent events on the blank line and,
per event, only looks up the cumulative ``completion_tokens`` the server reports (``meta_info``
for ``/generate``, per-chunk ``usage`` for OpenAI endpoints asked for continuous usage stats).
It never decodes a whole ``/generate`` chunk (each carries all the text so far): only the last
event of a stream is parsed as JSON, once, for prompt tokens and the request id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

__all__ = ["API_PATHS", "RequestRecord", "build_body", "stream_request"]

API_PATHS = {
    "generate": "/generate",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}

_COMPLETION_KEY = b'"completion_tokens":'
_INT_AFTER = re.compile(rb"\s*(\d+)")
_EMPTY_CONTENT = (b'"content":""', b'"content": ""', b'"content":null', b'"content": null')
_EMPTY_CHOICES = (b'"choices":[]', b'"choices": []')
# A final chunk with no text but the usage (transformers serve ends streams so, without [DONE]).
_EMPTY_TEXT = (b'"text":""', b'"text": ""')
_ERROR_KEY = b'"error"'


@dataclass
class RequestRecord:
    """What happened to one request; ``to_json()`` gives the requests.jsonl line."""

    level: int
    index: int
    warmup: bool = False
    level_id: str = ""
    start: float | None = None
    first_token: float | None = None
    end: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    # Cumulative completion tokens the server reported with each chunk (None where it did not).
    chunk_tokens: list[int | None] = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    status: str = "error"
    http_status: int | None = None
    error: str | None = None
    id: str | None = None
    token_source: str = "none"  # chunk | final_usage | none
    connection_lost: bool = False  # the error was a refused or dropped connection
    stalled: float = 0.0  # set (to the stall limit, s) by the sweep before it cancels a stalled request
    asked_input_tokens: int | None = None  # the prompt length the workload asked for, in tokens

    @property
    def cut_at_deadline(self) -> bool:
        """The request was still in flight when its duration-bound level ended, and was cancelled."""
        return self.status == "cancelled"

    @property
    def ttft(self) -> float | None:
        """Seconds from sending to the first token, for any request that streamed one."""
        if self.first_token is None or self.start is None:
            return None
        return self.first_token - self.start

    @property
    def tpot(self) -> float | None:
        """Seconds per output token after the first chunk (bench_serving's TPOT); so far, for a cut request.

        Where chunks carry the server's cumulative count: the time from the first token to the
        chunk that brought the last token, over the tokens that came after the first chunk (a
        finished request whose final count exceeds its chunks' is measured to its end). Where
        they carry none, a finished request's time after the first token over its output tokens
        less one (bench_serving's figure). None where that cannot be measured: a cut request on a
        server that reports usage only at the end, every token in the first chunk (a burst: there
        is no interval to measure, which is not an interval of 0), or no time passed.
        """
        if self.first_token is None or self.status not in ("ok", "cancelled"):
            return None
        counts, times = self.chunk_tokens, self.chunk_times
        known = bool(counts) and len(counts) == len(times) and all(c is not None for c in counts)
        if known:
            final = counts[-1]
            last = times[next(i for i, c in enumerate(counts) if c == final)]
            tokens = final - counts[0]  # type: ignore[operator]
            if self.status == "ok" and self.output_tokens and self.output_tokens > final and self.end is not None:
                last, tokens = self.end, self.output_tokens - counts[0]  # type: ignore[operator]
        elif self.status == "ok" and len(times) != 1:
            last, tokens = self.end, (self.output_tokens or 0) - 1
        else:
            return None  # a cut request without counts, or one burst with nothing after it
        if tokens < 1 or last is None or last <= self.first_token:
            return None
        return (last - self.first_token) / tokens

    @classmethod
    def from_json(cls, line: str | bytes) -> RequestRecord:
        """The record a ``to_json()`` line was made from (its derived fields are left out)."""
        data = json.loads(line)
        return cls(**{k: data[k] for k in _JSON_FIELDS if k in data})

    def to_json(self) -> str:
        return json.dumps(
            {
                "level": self.level,
                "index": self.index,
                "warmup": self.warmup,
                "level_id": self.level_id,
                "start": self.start,
                "first_token": self.first_token,
                "end": self.end,
                "chunk_times": self.chunk_times,
                "chunk_tokens": self.chunk_tokens,
                "prompt_tokens": self.prompt_tokens,
                "output_tokens": self.output_tokens,
                "status": self.status,
                "http_status": self.http_status,
                "error": self.error,
                "id": self.id,
                "token_source": self.token_source,
                "asked_input_tokens": self.asked_input_tokens,
                "cut_at_deadline": self.cut_at_deadline,
                "ttft": self.ttft,
                "tpot": self.tpot,
            },
            separators=(",", ":"),
        )


# The fields of a requests.jsonl line that are the record's own (the rest are derived from them).
_JSON_FIELDS = (
    "level", "index", "warmup", "level_id", "start", "first_token", "end", "chunk_times", "chunk_tokens",
    "prompt_tokens", "output_tokens", "status", "http_status", "error", "id", "token_source",
    "asked_input_tokens",
)


def build_body(
    api: str,
    prompt: str | list[int],
    output_len: int,
    *,
    model: str | None,
    ignore_eos: bool = True,
    temperature: float = 0.0,
    extra_body: dict[str, Any] | None = None,
) -> bytes:
    """The JSON body for one streamed request of ``api`` (generate | completions | chat)."""
    if api == "generate":
        sampling: dict[str, Any] = {
            "max_new_tokens": output_len,
            "temperature": temperature,
            "ignore_eos": ignore_eos,
        }
        body: dict[str, Any] = {
            "input_ids" if isinstance(prompt, list) else "text": prompt,
            "sampling_params": sampling,
            "stream": True,
        }
        if extra_body:
            extra = dict(extra_body)
            sampling.update(extra.pop("sampling_params", {}))
            body.update(extra)
    else:
        body = {
            "model": model,
            "max_tokens": output_len,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if ignore_eos:
            body["ignore_eos"] = True
            body["min_tokens"] = output_len
        if api == "chat":
            text = prompt if isinstance(prompt, str) else " ".join(map(str, prompt))
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = prompt
        for key, value in (extra_body or {}).items():
            # None removes a field: strict OpenAI servers (transformers serve) answer 422 to
            # extensions such as stream_options or ignore_eos.
            if value is None:
                body.pop(key, None)
            else:
                body[key] = value
    return json.dumps(body, separators=(",", ":")).encode()


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_message(obj: Any) -> str:
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err if err is not None else obj)


def _finish_from_last(rec: RequestRecord, payload: bytes, api: str) -> None:
    """Fill prompt tokens and id from the last event, parsed once."""
    try:
        obj = json.loads(payload)
    except ValueError:
        return
    if not isinstance(obj, dict):
        return
    if api == "generate":
        meta = obj.get("meta_info") or {}
        rec.prompt_tokens = meta.get("prompt_tokens", rec.prompt_tokens)
        rec.id = meta.get("id", rec.id)
    else:
        usage = obj.get("usage") or {}
        rec.prompt_tokens = usage.get("prompt_tokens", rec.prompt_tokens)
        rec.id = obj.get("id", rec.id)


async def _drain(content: aiohttp.StreamReader) -> None:
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
        while await content.readany():
            pass


def _completion_tokens(ev: bytes, s: int) -> int | None:
    """The cumulative ``completion_tokens`` an event's payload (from offset ``s``) reports, None
    when it reports none; read from the bytes, never by decoding the event."""
    i = ev.rfind(_COMPLETION_KEY, s)
    if i < 0:
        return None
    i += len(_COMPLETION_KEY)
    k = ev.find(b",", i)
    try:
        return int(ev[i : k if k >= 0 else ev.find(b"}", i)])
    except ValueError:
        m = _INT_AFTER.match(ev, i)
        return int(m.group(1)) if m else None


class _EventStream:
    """One response's server-sent events as they arrive: the chunks and token counts go to the
    record; ``done`` once ``[DONE]`` came, ``failed`` once an error event did (the record says it)."""

    __slots__ = ("api", "buf", "chat", "crlf", "done", "failed", "final", "last", "openai", "prev", "rec")

    def __init__(self, rec: RequestRecord, api: str):
        self.rec = rec
        self.api = api
        self.chat = api == "chat"
        self.openai = api != "generate"
        self.prev = 0
        self.final: int | None = None  # the last count the server reported
        self.last: tuple[bytes, int] | None = None  # (event, payload offset) of the last event with usage
        self.done = False
        self.failed = False
        self.crlf: bool | None = None
        self.buf = b""

    def feed(self, data: bytes, now: float) -> bool:
        """Read the bytes that arrived at ``now``; True once the stream is over ([DONE] or an error)."""
        if self.crlf is None:
            self.crlf = b"\r\n" in data
        if self.crlf:
            data = data.replace(b"\r\n", b"\n")
        if self.buf:
            data = self.buf + data
            self.buf = b""
        # JSON never holds a raw newline, so a newline can only end a line of the
        # event stream; a single-byte find runs at memchr speed over the long
        # whole-text chunks, several times faster than splitting on the blank line.
        start = search = 0
        end = len(data)
        while True:
            j = data.find(b"\n", search)
            if j < 0 or j + 1 >= end:
                if start < end:
                    self.buf = data[start:]
                return False
            if data[j + 1] != 10:  # a line break inside a multi-line event
                search = j + 1
                continue
            ev = data[start:j]
            start = search = j + 2
            if ev and self._event(ev, now):
                return True

    def _event(self, ev: bytes, now: float) -> bool:
        """One event; True when it ends the stream."""
        if not ev.startswith(b"data:"):
            k = ev.find(b"data:")
            if k < 0:
                return False  # comment or keep-alive
            ev = ev[k:]
        s = 6 if ev[5:6] == b" " else 5
        if len(ev) - s == 6 and ev.endswith(b"[DONE]"):
            self.done = True
            return True
        tok = _completion_tokens(ev, s)
        if tok is None:
            return self._uncounted(ev, s, now)
        self.final = tok
        self.last = (ev, s)
        if tok <= self.prev:
            return False
        rec = self.rec
        toks = rec.chunk_tokens
        # An OpenAI usage-only chunk after content chunks that carried no usage
        # is the final count, not a chunk of text.
        if self.openai and toks and toks[-1] is None and (
            any(e in ev for e in _EMPTY_CHOICES)
            or (not self.chat and any(e in ev for e in _EMPTY_TEXT))
            or (self.chat and any(e in ev for e in _EMPTY_CONTENT))
        ):
            return False
        if not toks:
            rec.first_token = now
        rec.chunk_times.append(now)  # inline: the path every counted event takes
        toks.append(tok)
        self.prev = tok
        return False

    def _uncounted(self, ev: bytes, s: int, now: float) -> bool:
        """An event without a token count: an error (True: the stream is over), an empty chunk, or
        a chunk of text whose tokens the server does not count."""
        if ev.find(_ERROR_KEY, s) >= 0:
            try:
                obj = json.loads(ev[s:])
            except ValueError:
                obj = None
            if isinstance(obj, dict) and "error" in obj:
                self.rec.error = f"error in stream: {_short(_error_message(obj))}"
                self.rec.end = now
                self.failed = True
                return True
        if self.chat and any(e in ev for e in _EMPTY_CONTENT):
            return False
        if self.openai and any(e in ev for e in _EMPTY_CHOICES):
            return False
        self._chunk(now, None)
        return False

    def _chunk(self, now: float, tok: int | None) -> None:
        rec = self.rec
        if not rec.chunk_times:
            rec.first_token = now
        rec.chunk_times.append(now)
        rec.chunk_tokens.append(tok)

    def finish(self) -> None:
        """The counts into the record, whatever ended the request."""
        rec = self.rec
        if self.final is not None:
            rec.output_tokens = self.final
        if rec.chunk_times:
            rec.token_source = "chunk" if rec.chunk_tokens[-1] is not None else (
                "final_usage" if self.final is not None else "none"
            )
        if self.last is not None:
            _finish_from_last(rec, self.last[0][self.last[1] :], self.api)


async def _read_events(content: aiohttp.StreamReader, stream: _EventStream) -> None:
    """Feed ``stream`` what arrives until it is over or the body ends."""
    clock = time.time
    while True:
        data = await content.readany()
        if not data or stream.feed(data, clock()):
            return


async def _release(content: aiohttp.StreamReader) -> None:
    """Read the end of a chunked body after [DONE], so the connection goes back to the pool
    instead of being closed (a new connection per request costs handshakes)."""
    if content.is_eof():
        return
    drain = asyncio.ensure_future(_drain(content))
    try:
        await asyncio.wait({drain}, timeout=2.0)
    finally:
        drain.cancel()


async def stream_request(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    rec: RequestRecord,
    api: str,
) -> None:
    """Send one streamed request and fill ``rec``; cancellation marks it ``cancelled`` and re-raises."""
    stream = _EventStream(rec, api)
    times = rec.chunk_times
    clock = time.time
    rec.start = clock()
    try:
        async with session.post(url, data=body, headers=headers) as resp:
            rec.http_status = resp.status
            if resp.status != 200:
                text = await resp.text(errors="replace")
                rec.error = f"HTTP {resp.status}: {_short(text) or resp.reason}"
                rec.end = clock()
                return
            await _read_events(resp.content, stream)
            if stream.failed:
                return
            rec.end = clock()
            if stream.done:
                await _release(resp.content)
            if not times:
                rec.error = "stream ended without any token chunk" + ("" if stream.done else " (no [DONE])")
                return
            rec.status = "ok"
    except asyncio.CancelledError:
        rec.end = clock()
        if not rec.stalled:
            rec.status = "cancelled"
            raise
        # Cancelled by the sweep's stall check: a failure of this request, not of the caller.
        task = asyncio.current_task()
        if task is not None and hasattr(task, "uncancel"):
            task.uncancel()
        rec.error = f"timeout: no data from the server for {rec.stalled:g} s after {len(times)} chunks"
    except asyncio.TimeoutError:
        rec.end = clock()
        rec.error = f"timeout after {len(times)} chunks"
    except aiohttp.ClientConnectorError as exc:
        rec.end = clock()
        rec.connection_lost = True
        rec.error = f"cannot connect: {_short(str(exc))}"
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError) as exc:
        rec.end = clock()
        rec.connection_lost = True
        rec.error = f"disconnected after {len(times)} chunks: {type(exc).__name__}: {_short(str(exc))}"
    except aiohttp.ClientError as exc:
        rec.end = clock()
        rec.error = f"{type(exc).__name__}: {_short(str(exc))}"
    finally:
        stream.finish()
