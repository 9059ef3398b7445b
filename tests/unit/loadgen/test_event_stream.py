"""The event stream of one response, read however the bytes are cut: chunks, counts, errors."""

from __future__ import annotations

import json

from glm5lib.loadgen.client import RequestRecord, _completion_tokens, _EventStream


def _events(n: int, eol: bytes = b"\n") -> bytes:
    out = b""
    for i in range(1, n + 1):
        obj = {"text": "x" * i, "meta_info": {"id": "r1", "prompt_tokens": 7, "completion_tokens": i}}
        out += b"data: " + json.dumps(obj).encode() + eol + eol
    return out + b"data: [DONE]" + eol + eol


def test_a_stream_cut_anywhere_reads_the_same():
    # CRLF streams are told by their first read, which holds a whole line at least
    for whole, sizes in ((_events(5), (1, 7, 64)), (_events(5, b"\r\n"), (100, 130, 100_000))):
        _read_in_pieces(whole, sizes)


def _read_in_pieces(whole: bytes, sizes: tuple[int, ...]) -> None:
    for size in sizes:
        rec = RequestRecord(level=1, index=0)
        stream = _EventStream(rec, "generate")
        pieces = [whole[i : i + size] for i in range(0, len(whole), size)]
        ended = [stream.feed(piece, float(k)) for k, piece in enumerate(pieces)]
        assert ended[-1] and not any(ended[:-1]) and stream.done and not stream.failed
        stream.finish()
        assert rec.chunk_tokens == [1, 2, 3, 4, 5] and rec.output_tokens == 5 and rec.token_source == "chunk"
        assert rec.prompt_tokens == 7 and rec.id == "r1" and rec.first_token == rec.chunk_times[0]


def test_an_error_event_ends_the_stream_as_failed_and_uncounted_chunks_are_kept():
    rec = RequestRecord(level=1, index=0)
    stream = _EventStream(rec, "completions")
    assert not stream.feed(b': keep-alive\n\ndata: {"choices": [{"text": "a"}]}\n\n', 1.0)
    assert not stream.feed(b'data: {"choices": []}\n\n', 1.5)  # an empty chunk is no chunk
    assert stream.feed(b'data: {"error": {"message": "boom"}}\n\n', 2.0)
    assert stream.failed and not stream.done and rec.error == "error in stream: boom" and rec.end == 2.0
    stream.finish()
    assert rec.chunk_tokens == [None] and rec.token_source == "none"


def test_the_count_is_read_from_the_bytes():
    assert _completion_tokens(b'data: {"usage": {"completion_tokens": 12}}', 6) == 12
    assert _completion_tokens(b'data: {"usage": {"completion_tokens": 12, "x": 1}}', 6) == 12
    assert _completion_tokens(b'data: {"usage": {"completion_tokens":  3 }}', 6) == 3
    assert _completion_tokens(b'data: {"text": "a"}', 6) is None
