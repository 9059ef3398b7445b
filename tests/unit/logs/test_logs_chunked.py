"""Tests for glm5lib.logs.chunked and the piecewise read of parse_log.

The chunked path (whole-buffer regexes over pieces of a file) must give the tables the
line-by-line parser gives, on realistic mixes with odd lines among them, and a parse cut into
pieces anywhere must give the tables of one whole read. The line-by-line parser is the
reference: each line through the SGLang parser's state machine, in order.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from glm5lib import logs
from glm5lib.engines.sglang import log as sglang
from glm5lib.logs import parse as log_parse
from glm5lib.logs.text import split_bytes

FIX = Path(__file__).parents[2] / "fixtures" / "logs"
TABLES = ("decode", "prefill", "retractions", "errors", "http")


def line_by_line(raw: bytes, date: str | None = None) -> logs.ServerLog:
    """The reference: every line through the state machine, one at a time."""
    lines = split_bytes(raw)
    cut = bool(lines) and lines[-1] != ""
    if not cut:
        lines.pop()
    parser = sglang._Parser(date=date)
    for index, line in enumerate(lines):
        parser._slow(line, index, cut=cut and index == len(lines) - 1)
    parser.lines = len(lines)
    parser.finish()
    return parser.build()


def assert_same(a: logs.ServerLog, b: logs.ServerLog, what: str = "") -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(
            getattr(a, name).reset_index(drop=True), getattr(b, name).reset_index(drop=True),
            check_dtype=False, obj=f"{what} {name}",
        )
    for attr in ("server_args", "server_args_incomplete", "startup", "ready_at", "skipped", "skipped_examples",
                 "lines", "standin", "became_ready", "last_time"):
        assert getattr(a, attr) == getattr(b, attr), f"{what} {attr}"


STANDIN_ACCESS = 'INFO:     127.0.0.1:{port} - "POST /generate HTTP/1.1" 200 OK'
STANDIN_PREFILL = ("[2026-12-01 04:04:{s:02d} TP0] Prefill batch, #new-seq: {n}, #new-token: {n}, #cached-token: {c}, "
                   "token usage: 0.00, #running-req: {r}, #queue-req: 0, ")
STANDIN_DECODE = ("[2026-12-01 04:04:{s:02d} TP0] Decode batch, #running-req: {r}, #token: {c}, token usage: 0.01, "
                  "cuda graph: True, gen throughput (token/s): {g}.85, #queue-req: 0, ")

# Lines that the whole-buffer regexes must leave to the line-by-line parser, or read as it does.
ODD_LINES = [
    '\x1b[32mINFO\x1b[0m:     127.0.0.1:5000 - "\x1b[1mPOST /generate HTTP/1.1\x1b[0m" \x1b[32m200 OK\x1b[0m',
    'INFO:     127.0.0.1:5001 - "GET /health HTTP/1.1" 200 OK[2026-12-01 04:05:00] The server is fired up and ready to roll!',
    'INFO:     [::1]:5002 - "GET /get_server_info HTTP/1.1" 200 OK',
    'INFO:     ::1:5003 - "GET /metrics HTTP/1.1" 200 OK',
    'INFO:     127.0.0.1:5004 - "GET /caf\u00e9 HTTP/1.1" 404 Not Found',
    'INFO:     127.0.0.1:5005 - "POST /generate HTTP/1.1" 200 OK \u2014 slow',
    'WARNING:  127.0.0.1:5006 - "POST /generate HTTP/1.1" 429 Too Many Requests',
    'INFO:     Started server process [19713]',
    'INFO:     127.0.0.1:5007 - "POST /generate HTTP/1.1" 200',
    'INFO:  \t127.0.0.1:5008 - "POST /generate HTTP/1.1" 503 Service Unavailable',
    "[2026-12-01 04:05:01 TP0] Decode batch, #running-req: 3., #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0, ",
    "[2026-12-01 04:05:02 TP0] Decode batch, #running-req: x y, #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0, ",
    "[2026-12-01 04:05:03 TP0] Decode batch, #running-req: 1:2, #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0, ",
    "[2026-12-01 04:05:04 TP0] Decode batch, #running-req: , #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0, ",
    "[2026-12-01 04:05:05 TP0] Decode batch, #running-req: 4, #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0, nan",
    "[2026-02-30 04:05:06 TP0] Decode batch, #running-req: 4, #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0, ",
    "[2026-12-01 04:05:07.250 TP0] Decode batch, #running-req: 4, #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0, ",
    "[2026-12-01 04:05:08,250 TP0] Decode batch, #running-req: 4, #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0, ",
    "[04:05:09 TP0] Decode batch, #running-req: 4, #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0, ",
    "[2026-12-01 04:05:10 TP0] Decode batch, #running-req: 4, #token: 9, token usage: 0.01, cuda graph: \u00fcber, "
    "gen throughput (token/s): 1.00, #queue-req: 0, ",
    "[2026-12-01 04:05:11 TP0] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, \x0b",
    "[2026-12-01 04:05:12 TP0] Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, \u2028[2026-12-01 04:05:12 TP0] Prefill batch, #new-seq: 2",
    "Capturing batches (bs=8 avail_mem=17.40 GB): 100%|\u2588\u2588| 8/8 [00:05<00:00,  1.52it/s]\r"
    "[2026-12-01 04:05:13 TP0] Decode batch, #running-req: 4, #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0, ",
    "node-1:1234:1234 [0] NCCL INFO Channel 00/02 : 0 1 2 3 4 5 6 7",
    "[2026-12-01 04:05:14 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.4000 -> 0.9000",
    "",
    "some garbage line that no parser understands",
]
# Blocks whose lines act on each other: a traceback, a wrapped server_args line, both
# followed by lines the regexes take.
ODD_BLOCKS = [
    [
        "[2026-12-01 04:05:20 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2570, in run_scheduler_process',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        STANDIN_ACCESS.format(port=6000),
        STANDIN_DECODE.format(s=21, r=3, c=300, g=10),
    ],
    [
        "[2026-12-01 04:05:22 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "x.py", line 1, in f',
        "RuntimeError: NCCL error: unhandled system error",
        STANDIN_DECODE.format(s=23, r=3, c=300, g=10),
    ],
    [
        "[2026-12-01 04:05:24] server_args=ServerArgs(model_path='zai-org/GLM-5', tp_size=8, ",
        STANDIN_ACCESS.format(port=6001),
        STANDIN_ACCESS.format(port=6002),
        "max_running_requests=64, api_key='sk-not-a-real-key-0123456789')",
        STANDIN_ACCESS.format(port=6003),
    ],
    [
        "[2026-12-01 04:05:26] server_args=ServerArgs(model_path='zai-org/GLM-5', tp_size=8, ",
        STANDIN_PREFILL.format(s=27, n=1, c=0, r=0),
        STANDIN_ACCESS.format(port=6004),
    ],
]


def fixture_blocks() -> list[list[str]]:
    # a shutdown line ends a log (what follows is the stop, not a fault): it is no block to scatter
    return [
        [line for line in p.read_text().rstrip("\n").splitlines() if "SIGTERM" not in line]
        for p in sorted(FIX.glob("*.log"))
    ]


# Scheduler values that are not numbers: a table built once types the column as text, one built
# again and again (a follower) types each batch on its own.
TEXT_VALUES = ("#running-req: x y", "#running-req: 1:2", "cuda graph: \u00fcber")
# Line breaks of str.splitlines that are breaks only in a file holding a carriage return, which
# a follower cannot know of a file still growing: it decides for each piece it reads.
BREAKS = ("\x0b", "\u2028")


def realistic_mix(n_blocks: int, seed: int, odd: float = 0.1, text_values: bool = True, breaks: bool = True) -> str:
    """A busy server's log: mostly access lines, prefill and decode lines of the stand-in's
    format, with real SGLang excerpts of every generation and odd lines among them."""
    rng = random.Random(seed)
    fixtures = fixture_blocks()
    odd_lines = [
        line for line in ODD_LINES
        if (text_values or not any(t in line for t in TEXT_VALUES)) and (breaks or not any(c in line for c in BREAKS))
    ]
    out: list[str] = []
    for i in range(n_blocks):
        r = rng.random()
        if r < odd:
            out.extend(rng.choice(ODD_BLOCKS) if rng.random() < 0.3 else [rng.choice(odd_lines)])
        elif r < odd + 0.1:
            out.extend(rng.choice(fixtures))
        else:
            s = i % 60
            out.append(STANDIN_PREFILL.format(s=s, n=rng.randint(1, 40), c=rng.randint(0, 2000), r=rng.randint(0, 60)))
            out.extend(STANDIN_ACCESS.format(port=rng.randint(1024, 65535)) for _ in range(rng.randint(1, 8)))
            if rng.random() < 0.2:
                out.append(STANDIN_DECODE.format(s=s, r=rng.randint(0, 64), c=rng.randint(0, 9999), g=rng.randint(0, 999)))
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_chunked_parse_equals_line_by_line_on_realistic_mixes(seed, monkeypatch):
    text = realistic_mix(2500, seed)
    raw = text.encode()
    reference = line_by_line(raw)
    assert len(reference.http) > 3000 and len(reference.prefill) > 1000 and len(reference.decode) > 200
    assert len(reference.errors) > 5 and reference.skipped > 5
    assert_same(logs.parse_log(raw), reference, "whole")
    # Small pieces: boundaries fall everywhere, shapes are learned in one piece and used in the next.
    monkeypatch.setattr(log_parse, "CHUNK_BYTES", 4093)
    monkeypatch.setattr(log_parse, "_FIRST_CHUNK_BYTES", 1021)
    monkeypatch.setattr(log_parse, "_FIRST_CHUNK_LINES", 5)
    assert_same(logs.parse_log(raw), reference, "pieces")


def test_carriage_returns_anywhere_split_lines_as_the_whole_text():
    # One "\r" in the file makes every line break that str.splitlines knows a line break.
    text = realistic_mix(800, 3, odd=0.3).replace("\n", "\r\n", 50)
    raw = text.encode()
    assert_same(logs.parse_log(raw), line_by_line(raw), "crlf")
    assert_same(logs.parse_log(text), line_by_line(raw), "crlf text")


def test_the_first_time_is_the_first_dated_line_as_before():
    text = "[10:00:00 TP0] Load weight begin. avail mem=93.12 GB\n" + realistic_mix(50, 4)
    assert logs.parse_log(text).first_time == pd.Timestamp("2026-12-01 04:04:00")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, len(ODD_LINES) + len(ODD_BLOCKS) + 2), min_size=1, max_size=60),
       st.integers(1, 400), st.booleans())
def test_any_mix_of_odd_lines_cut_anywhere_reads_as_line_by_line(picks, piece, newline_at_end):
    lines: list[str] = []
    for k in picks:
        if k < len(ODD_LINES):
            lines.append(ODD_LINES[k])
        elif k < len(ODD_LINES) + len(ODD_BLOCKS):
            lines.extend(ODD_BLOCKS[k - len(ODD_LINES)])
        else:
            lines += [STANDIN_PREFILL.format(s=k, n=1, c=2, r=3), STANDIN_ACCESS.format(port=k)]
    text = "\n".join([STANDIN_PREFILL.format(s=0, n=1, c=2, r=3), STANDIN_DECODE.format(s=0, r=1, c=2, g=3), *lines])
    raw = (text + ("\n" if newline_at_end else "")).encode()
    reference = line_by_line(raw)
    # Feed the chunked path directly, cut after any newline.
    parser = sglang._new_parser(None, incremental=False)
    crs = b"\r" in raw
    body, tail = raw[: raw.rfind(b"\n") + 1], raw[raw.rfind(b"\n") + 1 :]
    start = 0
    while start < len(body):
        end = body.find(b"\n", start + piece - 1) + 1 or len(body)
        parser.feed_chunk(body[start:end], crs)
        start = end
    if tail:
        # The last line, split as parse_log splits it: by the whole file's line breaks (a
        # carriage return anywhere in it makes "\u2028" one), not by the tail's alone.
        text = tail.decode("utf-8", errors="replace")
        tail_lines = text.splitlines() if crs else [text]
        if crs and text.endswith("\r"):
            parser.feed_bulk(tail_lines)  # a carriage return ends it: it is whole
        else:
            parser.feed_bulk(tail_lines[:-1])
            parser.feed(tail_lines[-1:], final=True)
    parser.finish()
    assert_same(parser.build(), reference, "chunks")


def test_follower_reads_appended_pieces_as_one_whole_read(tmp_path):
    text = realistic_mix(600, 5, text_values=False, breaks=False)
    path = tmp_path / "server.log"
    follower = logs.follow_log(path)
    rng = random.Random(5)
    at = 0
    with path.open("w") as fh:
        while at < len(text):
            step = rng.randint(1, 20000)
            fh.write(text[at : at + step])  # cut anywhere, mid-line too
            fh.flush()
            at += step
            follower.update()
    assert_same(follower.finish(), line_by_line(text.encode()), "followed")


def test_a_large_file_is_read_in_pieces_with_a_progress_bar(tmp_path, monkeypatch, capsys):
    path = tmp_path / "server.log"
    path.write_text(realistic_mix(400, 6))
    reads: list[int] = []
    real_open = Path.open

    def spy_open(self, *args, **kw):
        fh = real_open(self, *args, **kw)
        if self == path:
            read = fh.read
            fh = _Spy(fh, lambda n=-1: reads.append(n) or read(n))
        return fh

    monkeypatch.setattr(Path, "open", spy_open)
    monkeypatch.setattr(log_parse, "CHUNK_BYTES", 8192)
    monkeypatch.setattr(log_parse, "_FIRST_CHUNK_BYTES", 4096)
    monkeypatch.setattr(log_parse, "PROGRESS_BYTES", 1)
    slog = logs.parse_log(path)
    size = path.stat().st_size
    assert size > 150_000 and len(reads) >= size // 8192  # in pieces
    assert -1 not in reads and max(reads) <= log_parse.DETECT_BYTES < size  # never the whole file at once
    assert "parsing log" in capsys.readouterr().err
    assert_same(slog, line_by_line(path.read_bytes()), "spied")
    logs.parse_log(path, progress=False)
    assert "parsing log" not in capsys.readouterr().err


class _Spy:
    def __init__(self, fh, read):
        self._fh, self.read = fh, read

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()


# Lines of one learned shape but for the bytes the numpy split of glm5lib.logs.fields decides
# on: the prefix, each value's end, the line's end.
DECODE_VARIANTS = [
    "[2026-12-01 04:06:{s:02d} TP0] Decode batch, #running-req: {r}, #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0{end}",
    "[2026-12-01 04:06:{s:02d}.{f} TP0] Decode batch, #running-req: {r}, #token: 9, token usage: 0.01, "
    "cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0{end}",
    "[2026-12-01 04:06:{s:02d}{rank}] Decode batch, #running-req: {r}, #token: 9, token usage: 0.01, cuda graph: True, "
    "gen throughput (token/s): 1.00, #queue-req: 0{end}",
    "[2026-12-01 04:06:{s:02d} TP0] Decode batch [{s}], #running-req: {r}, #token: 9, token usage: 0.01, "
    "cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0{end}",
]
VALUES = ["4", "1234567", "4.", "4..", "x" * 32, "y" * 33, "4.5e-3", "1:2", "0x1f", "-1", "4;5", "\u00e9",
          # about the widths the split reads at once (8 bytes a word, 15 in its first window, 23 at most)
          "1" * 8, "2" * 9, "3" * 15, "4" * 16, "5" * 23, "6" * 24, "7" * 14 + ".", "8" * 7 + "."]
RANKS = ["", " TP1", " DP1 TP1", " tp0", " TP0 EP0", " TP", "  TP0", " TP0 ", " T_P0"]
ENDS = [", ", "", ".", ".,", "., ", ",", ". ", "..", ",  ", "\r"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(DECODE_VARIANTS) - 1), st.integers(0, len(VALUES) - 1),
                          st.integers(0, len(RANKS) - 1), st.integers(0, len(ENDS) - 1), st.integers(1, 8)),
                min_size=1, max_size=40))
def test_scheduler_values_split_by_numpy_read_as_line_by_line(picks):
    lines = [STANDIN_DECODE.format(s=0, r=1, c=2, g=3)] * 3  # the shape, learned from the first piece
    for k, (variant, value, rank, end, frac) in enumerate(picks):
        lines.append(DECODE_VARIANTS[variant].format(s=k % 60, r=VALUES[value], rank=RANKS[rank], end=ENDS[end],
                                                     f="1234567"[:frac]))
        lines.append(STANDIN_DECODE.format(s=k % 60, r=k, c=2, g=3))
    raw = ("\n".join(lines) + "\n").encode()
    parser = sglang._new_parser(None, incremental=False)
    first = raw.find(b"\n") + 1
    parser.feed_chunk(raw[:first], False)
    parser.feed_chunk(raw[first:], False)
    parser.finish()
    assert_same(parser.build(), line_by_line(raw), "split")


def test_iter_log_hands_out_the_rows_of_a_whole_parse_a_piece_at_a_time(tmp_path, monkeypatch):
    path = tmp_path / "server.log"
    path.write_text(realistic_mix(1500, 7, text_values=False))
    monkeypatch.setattr(log_parse, "CHUNK_BYTES", 8192)
    monkeypatch.setattr(log_parse, "_FIRST_CHUNK_BYTES", 4096)
    whole = logs.parse_log(path)
    pieces = list(logs.iter_log(path, piece_bytes=30_000))
    assert len(pieces) > 5
    assert max(len(p.http) for p in pieces) < len(whole.http) / 4  # no piece holds it all
    for name in TABLES:
        joined = pd.concat([getattr(p, name) for p in pieces if len(getattr(p, name))], ignore_index=True)
        pd.testing.assert_frame_equal(joined, getattr(whole, name), check_dtype=False, obj=name)
    assert len(whole.errors) > 5
    last = pieces[-1]
    assert (last.lines, last.server_args, last.startup, last.last_time) == (
        whole.lines, whole.server_args, whole.startup, whole.last_time)
    with pytest.raises(ValueError, match="piece_bytes"):
        next(logs.iter_log(path, piece_bytes=0))


def test_iter_log_reads_vllm_logs_in_pieces():
    raw = (Path(__file__).parents[2] / "fixtures" / "vllm" / "cpu-capped.log").read_bytes() * 20
    whole = logs.parse_log(raw)
    pieces = list(logs.iter_log(raw, piece_bytes=5000))
    assert len(pieces) > 5 and len(whole.decode) > 20
    for name in ("decode", "http"):
        joined = pd.concat([getattr(p, name) for p in pieces if len(getattr(p, name))], ignore_index=True)
        pd.testing.assert_frame_equal(joined, getattr(whole, name), check_dtype=False, obj=name)


def test_vllm_access_lines_read_in_bulk_as_line_by_line():
    from glm5lib.engines.vllm import log as vllm

    rng = random.Random(8)
    blocks = [p.read_text().rstrip("\n").splitlines() for p in sorted((FIX.parent / "vllm").glob("*.log"))]
    access = [
        'INFO:     127.0.0.1:{p} - "POST /v1/completions HTTP/1.1" 200 OK',
        'INFO:     10.0.0.7:{p} - "GET /v1/models HTTP/1.1" 404 Not Found',
        'INFO:     [::1]:{p} - "GET /health HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:{p} - "POST /v1/completions HTTP/1.1" 500 Internal Server Error: CUDA out of memory',
        'INFO:     127.0.0.1:{p} - "GET /NaN HTTP/1.1" 200 OK',
    ]
    out: list[str] = []
    for _ in range(400):
        out.extend(rng.choice(blocks) if rng.random() < 0.1 else [rng.choice(access).format(p=rng.randint(1, 65535))])
    raw = ("\n".join(out) + "\n").encode()
    fast = logs.parse_log(raw, engine="vllm")
    ref = vllm.VllmParser()
    ref.feed(split_bytes(raw)[:-1], final=False)
    ref = ref.build()
    assert len(fast.http) > 150 and len(fast.errors) > len(ref.errors) / 2 > 0
    for name in ("decode", "retractions", "errors", "http"):
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(ref, name), obj=name)
    assert (fast.lines, fast.skipped, fast.startup) == (ref.lines, ref.skipped, ref.startup)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.from_regex(r"\A[0-9]{0,9}\.?[0-9]{0,8}\Z|\A-?[0-9]{1,17}\Z", fullmatch=True), min_size=1, max_size=50))
def test_numbers_by_digit_arithmetic_are_numpys(values):
    from glm5lib.logs.chunked import decimals

    col = np.array([v.encode() for v in values], dtype="S")
    for as_int in (True, False):
        fast = decimals(col, as_int)
        if fast is None:
            continue
        assert not any(v.startswith("-") for v in values) and all(any(c.isdigit() for c in v) for v in values)
        expected = col.astype(np.int64) if fast.dtype == np.int64 else col.astype(np.float64)
        assert fast.dtype == expected.dtype and (fast == expected).all()
        assert fast.dtype == np.float64 or as_int


def test_a_followers_tables_are_the_callers_to_change(tmp_path):
    path = tmp_path / "server.log"
    text = realistic_mix(300, 9, odd=0.0)
    half = text.index("\n", len(text) // 2) + 1
    path.write_text(text[:half])
    follower = logs.follow_log(path)
    first = follower.update()
    status, running = first.http["status"].iloc[0], first.prefill["running_req"].iloc[0]
    first.http.loc[0, "status"] = -1
    first.prefill["running_req"] = -1
    again = follower.update()  # nothing new: the kept tables again
    assert again.http["status"].iloc[0] == status and again.prefill["running_req"].iloc[0] == running
    again.http.loc[0, "status"] = -2
    with path.open("a") as fh:
        fh.write(text[half:])
    final = follower.finish()
    assert final.http["status"].iloc[0] == status and final.prefill["running_req"].iloc[0] == running
    assert (first.http["status"].iloc[0], again.http["status"].iloc[0]) == (-1, -2)
    assert_same(final, line_by_line(text.encode()), "after changes")


def test_access_lines_of_many_alike_shapes_read_as_line_by_line():
    # Many distinct lines of one width (more than a few rounds take: the rest are hashed),
    # ports of every length, and lines that only look alike.
    rng = random.Random(10)
    lines = [STANDIN_PREFILL.format(s=0, n=1, c=2, r=3)]
    for k in range(3000):
        path = f"/v1/p{rng.randint(0, 40):03d}"
        port = str(rng.randint(0, 99999))
        status = rng.choice(["200 OK", "404 Not Found", "500 Internal Server Error"])
        client = rng.choice(["127.0.0.1", "10.0.0.12", "a:b", "host"])
        lines.append(f'INFO:     {client}:{port} - "GET {path} HTTP/1.1" {status}')
        if k % 97 == 0:
            lines.append(f'INFO:     {client}:{port}x - "GET {path} HTTP/1.1" {status}')
            lines.append(f'INFO:     {client}:123456 - "GET {path} HTTP/1.1" {status}')
            lines.append(STANDIN_DECODE.format(s=k % 60, r=k, c=2, g=3))
    raw = ("\n".join(lines) + "\n").encode()
    reference = line_by_line(raw)
    assert len(reference.http) > 3000 and reference.http["path"].nunique() > 30
    assert_same(logs.parse_log(raw), reference, "alike")


# vLLM stats lines: shapes the chunked path learns, and lines it must leave to the line-by-line
# reader (another prefix, odd values, a day that does not exist, colours, V0's hit rate line).
VLLM_STATS = [
    "(APIServer pid={pid}) INFO 12-01 10:{m:02d}:{s:02d} [loggers.py:335] Engine {e:03d}: Avg prompt throughput: "
    "{a} tokens/s, Avg generation throughput: {b} tokens/s, Running: {r} reqs, Waiting: {q} reqs, "
    "GPU KV cache usage: {u}%, Prefix cache hit rate: {h}%",
    "INFO 12-01 10:{m:02d}:{s:02d} [loggers.py:259] Engine {e:03d}: Avg prompt throughput: {a} tokens/s, "
    "Avg generation throughput: {b} tokens/s, Running: {r} reqs, Waiting: {q} reqs, GPU KV cache usage: {u}%, "
    "Prefix cache hit rate: {h}%, MM cache hit rate: {u}%",
    "(APIServer pid={pid}) INFO 12-01 10:{m:02d}:{s:02d}.250 [loggers.py:335] Engine {e:03d}: Avg prompt throughput: "
    "{a} tokens/s, Avg generation throughput: {b} tokens/s, Running: {r} reqs, Waiting: {q} reqs, "
    "CPU KV cache usage: {u}%, Prefix cache hit rate: {h}%",
    "INFO 12-01 10:{m:02d}:{s:02d} metrics.py:449] Avg prompt throughput: {a} tokens/s, Avg generation throughput: "
    "{b} tokens/s, Running: {r} reqs, Swapped: 0 reqs, Pending: {q} reqs, GPU KV cache usage: {u}%, "
    "CPU KV cache usage: 0.0%.",
    "(APIServer pid={pid}) INFO 12-01 10:{m:02d}:{s:02d} [loggers.py:335] Engine {e:03d}: Avg prompt throughput: "
    "{a} tokens/s, Avg generation throughput: {b} tokens/s, Running: {r} reqs, Waiting: {q} reqs, "
    "Preemptions: {r} reqs, GPU KV cache usage: {u}%, Prefix cache hit rate: {h}%",
]
VLLM_ODD_STATS = [
    "INFO 12-01 10:00:{s:02d} metrics.py:449] Prefix cache hit rate: GPU: {h}%, CPU: 0.00%",
    "(APIServer pid=7) INFO 02-30 10:00:{s:02d} [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, "
    "Prefix cache hit rate: 0.0%",
    "(APIServer pid=7) INFO 12-01 10:00:{s:02d} [v1/metrics/loggers.py:335] Engine 000: Avg prompt throughput: "
    "1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%",
    "\x1b[32mINFO\x1b[0m 12-01 10:00:{s:02d} [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, "
    "Prefix cache hit rate: 0.0%",
    "2025-07-08 17:24:{s:02d} - vllm.engine.metrics - INFO - Avg prompt throughput: 2.8 tokens/s, Avg generation "
    "throughput: 0.1 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.2%, "
    "CPU KV cache usage: 0.0%.",
    "(APIServer pid=7) INFO 12-01 10:00:{s:02d} [loggers.py:335] Engine 000: Avg prompt throughput: 1,234.5 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, "
    "Prefix cache hit rate: 0.0%",
    "(APIServer pid=7) INFO 12-01 10:00:{s:02d} [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, "
    "Prefix cache hit rate: 0.0% extra",
    "(APIServer pid=7) INFO 12-01 10:00:{s:02d} [loggers.py:335] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0\u00e9%, "
    "Prefix cache hit rate: 0.0%",
    "(APIServer pid=7) INFO 12-01 10:00:{s:02d} [loggers.py:335] Engine 1234567: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, "
    "Prefix cache hit rate: 0.0%",
]


def vllm_mix(n: int, seed: int) -> bytes:
    """A busy vLLM server's log: access lines, stats lines of several shapes and engines with
    values of every form, odd stats lines and real excerpts among them."""
    rng = random.Random(seed)
    blocks = [p.read_text().rstrip("\n").splitlines() for p in sorted((FIX.parent / "vllm").glob("*.log"))]
    values = ["0.0", "12.5", "-1.5", "3", "100.0", "0", "007", "12345678.9"]
    out: list[str] = []
    for k in range(n):
        r = rng.random()
        if r < 0.03:
            out.extend(rng.choice(blocks))
        elif r < 0.08:
            out.append(rng.choice(VLLM_ODD_STATS).format(s=k % 60, h=rng.choice(values)))
        elif r < 0.4:
            out.append(rng.choice(VLLM_STATS[:4] if rng.random() < 0.9 else VLLM_STATS).format(
                pid=rng.randint(1, 99999), m=k // 60 % 60, s=k % 60, e=rng.choice([0, 0, 0, 1]),
                **{c: rng.choice(values) for c in "abrquh"}))
        else:
            out.extend(f'INFO:     127.0.0.1:{rng.randint(1, 65535)} - "POST /v1/completions HTTP/1.1" 200 OK'
                       for _ in range(rng.randint(1, 6)))
    return ("\n".join(out) + "\n").encode()


def vllm_line_by_line(raw: bytes) -> logs.ServerLog:
    from glm5lib.engines.vllm import log as vllm

    parser = vllm.VllmParser()
    parser.feed(split_bytes(raw)[:-1], final=False)
    parser.finish()
    return parser.build()


def assert_same_vllm(a: logs.ServerLog, b: logs.ServerLog, what: str) -> None:
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=f"{what} {name}")
    for attr in ("lines", "skipped", "skipped_examples", "startup", "server_args", "first_time", "last_time",
                 "ready_at", "became_ready"):
        assert getattr(a, attr) == getattr(b, attr), f"{what} {attr}"


@pytest.mark.parametrize("seed", [0, 1])
def test_vllm_stats_lines_read_in_bulk_as_line_by_line(seed, monkeypatch):
    raw = vllm_mix(3000, seed)
    reference = vllm_line_by_line(raw)
    assert len(reference.decode) > 800 and (reference.decode["engine"] == 1).any()
    assert reference.decode["cache_hit_rate"].notna().any() and len(reference.retractions) > 3
    assert_same_vllm(logs.parse_log(raw, engine="vllm"), reference, "whole")
    from glm5lib.engines.vllm import log as vllm

    parser = vllm._new_parser(None, incremental=False)
    parser.feed_chunk(raw, False)
    assert sum(len(p["_order"]) for p in parser.decode_bulk) > len(reference.decode) / 2  # most read in bulk
    monkeypatch.setattr(log_parse, "CHUNK_BYTES", 3001)
    monkeypatch.setattr(log_parse, "_FIRST_CHUNK_BYTES", 1009)
    monkeypatch.setattr(log_parse, "_FIRST_CHUNK_LINES", 3)
    assert_same_vllm(logs.parse_log(raw, engine="vllm"), reference, "pieces")
    pieces = list(logs.iter_log(raw, engine="vllm", piece_bytes=20_000))
    assert len(pieces) > 5
    decode = pd.concat([p.decode for p in pieces if len(p.decode)], ignore_index=True)
    # (Not cache_hit_rate: a V0 hit rate line right after a piece whose last row is V1's is not
    # joined to it, read in bulk or not; real logs do not mix the two.)
    common = ["time", "running_req", "queue_req", "token_usage", "gen_throughput", "engine"]
    pd.testing.assert_frame_equal(decode[common], reference.decode[common], check_dtype=False, obj="iter_log decode")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(VLLM_STATS) + len(VLLM_ODD_STATS)), st.integers(0, 99)),
                min_size=1, max_size=40), st.integers(1, 600))
def test_any_vllm_stats_lines_cut_anywhere_read_as_line_by_line(picks, piece):
    from glm5lib.engines.vllm import log as vllm

    lines = []
    for k, v in picks:
        value = f"{v}.{v % 10}" if v % 3 else str(v)
        if k < len(VLLM_STATS):
            lines.append(VLLM_STATS[k].format(pid=v, m=v % 60, s=v % 60, e=v % 3, a=value, b=v, r=v, q=value,
                                              u=value, h=value))
        elif k < len(VLLM_STATS) + len(VLLM_ODD_STATS):
            lines.append(VLLM_ODD_STATS[k - len(VLLM_STATS)].format(s=v % 60, h=value))
        else:
            lines.append(f'INFO:     127.0.0.1:{v} - "GET /health HTTP/1.1" 200 OK')
    raw = ("\n".join(lines) + "\n").encode()
    parser = vllm._new_parser(None, incremental=False)
    start = 0
    while start < len(raw):
        end = raw.find(b"\n", start + piece - 1) + 1 or len(raw)
        parser.feed_chunk(raw[start:end], False)
        start = end
    parser.finish()
    assert_same_vllm(parser.build(), vllm_line_by_line(raw), "chunks")


def test_a_stats_line_with_a_date_that_does_not_exist_leaves_its_shape_learnable():
    """A first line that fails for its values (02-30), not its words, must not send every later
    line of that shape to the line-by-line reader."""
    from glm5lib.engines.vllm import log as vllm

    def line(k: int, date: str = "12-01") -> str:
        return VLLM_STATS[0].format(pid=7, m=k // 60 % 60, s=k % 60, e=0, a="1.0", b=k, r=3, q="0", u="1.5",
                                    h="0.0").replace("INFO 12-01", f"INFO {date}")

    raw = ("\n".join([line(0, "02-30")] + [line(k) for k in range(1, 2000)]) + "\n").encode()
    parser = vllm._new_parser(None, incremental=False)
    parser.feed_chunk(raw, False)
    assert sum(len(p["_order"]) for p in parser.decode_bulk) > 1900
    parser.finish()
    assert_same_vllm(parser.build(), vllm_line_by_line(raw), "whole")
