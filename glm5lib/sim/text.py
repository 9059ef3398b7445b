"""Token text for the stand-in: precomputed so that streaming costs a string slice per chunk.

The stand-in has no tokenizer. It counts one token per whitespace-separated word of a text
prompt (``len(text.split())``), or one per id of ``input_ids``, and it "generates" words
from a fixed pseudo-random sequence: each generated token is one word with a leading space,
so counting the output the same way gives back its token count. The whole-text-so-far of a
request is a slice of one long precomputed string, and its ``output_ids`` JSON a slice of
another; nothing is built per token.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

__all__ = ["TOKEN_CYCLE", "TokenText", "count_prompt_tokens"]

_WORDS_TEXT = (
    "the of and to in is that for it as with was on be by this are at from or an which "
    "model batch token server request queue power memory cache kernel graph decode prefill "
    "throughput latency concurrency attention expert router layer tensor parallel stream "
    "result measure config baseline reference fix bottleneck limit scheduler capacity "
    "step time rate load window sample trace log value figure table report run phase"
)
_WORDS = _WORDS_TEXT.split()

# Length of the precomputed cycle; longer outputs wrap around (still one slice or two).
TOKEN_CYCLE = 8192


def count_prompt_tokens(text: str) -> int:
    """The stand-in's token count of a prompt: one per whitespace-separated word (at least 1)."""
    return max(1, len(text.split()))


class TokenText:
    """Generated text and ids for a token range, as slices of precomputed strings."""

    def __init__(self, seed: int = 0, vocab_offset: int = 1000, cycle: int = TOKEN_CYCLE):
        rng = random.Random(seed)
        n = len(_WORDS)
        picks = [rng.randrange(n) for _ in range(cycle)]
        # Doubled so that any window of up to `cycle` tokens starting anywhere is one slice.
        picks = picks + picks
        words = [" " + _WORDS[i] for i in picks]
        ids = [str(vocab_offset + i) for i in picks]
        self.cycle = cycle
        self._text = "".join(words)
        self._text_off = [0]
        for w in words:
            self._text_off.append(self._text_off[-1] + len(w))
        self._ids = ",".join(ids)
        self._ids_off = [0]
        pos = 0
        for k, s in enumerate(ids):
            pos += len(s) + (1 if k else 0)
            self._ids_off.append(pos)
        self._ids_list = [vocab_offset + i for i in picks]

    def _spans(self, start: int, end: int) -> Iterator[tuple[int, int]]:
        """Tokens [start, end) as runs within one cycle: ``(offset in the cycle, length)``."""
        while start < end:
            take = min(end - start, self.cycle)
            yield start % self.cycle, take
            start += take

    def text(self, start: int, end: int) -> str:
        """Text of generated tokens [start, end) of a stream that began at cycle offset 0."""
        off = self._text_off
        return "".join(self._text[off[s] : off[s + n]] for s, n in self._spans(start, end))

    def ids_json(self, start: int, end: int) -> str:
        """The JSON list of ids of tokens [start, end), e.g. ``[1003,1017]``."""
        off = self._ids_off
        runs = (self._ids[off[s] + (1 if s else 0) : off[s + n]] for s, n in self._spans(start, end))
        return "[" + ",".join(runs) + "]"

    def ids(self, start: int, end: int) -> list[int]:
        return [i for s, n in self._spans(start, end) for i in self._ids_list[s : s + n]]
