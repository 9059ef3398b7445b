"""Text prompts exact in the served model's tokens.

Random text prompts are made of common words, and how many tokens a word is depends on the
model's vocabulary (a small one splits each into several: 512 words were about 2,100 tokens on
the CPU test model). :class:`PromptScale` turns an asked length in tokens into a number of words,
``words = (tokens - overhead) / tokens_per_word``, fitted from one of three sources, best first:

- ``tokenizer``: the served model's own tokenizer, where the model is a local folder
  (transformers' ``AutoTokenizer`` if importable, else ``tokenizer.json`` through the
  ``tokenizers`` package), on sample prompts of the asked lengths;
- ``usage``: the server's own prompt-token counts for the warm-up requests;
- ``words``: one token a word (no tokenizer, no warm-up to learn from).

Token-id prompts need none of this: they are the asked length by construction.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glm5lib.loadgen.client import RequestRecord
from glm5lib.loadgen.settings import SweepSettings
from glm5lib.loadgen.workload import RequestSpec, make_workload

__all__ = ["PROMPT_TOLERANCE", "PromptScale", "PromptSizer", "fit_scale", "local_tokenizer"]

#: Prompts whose server-counted length is off the asked one by more than this share are warned of.
PROMPT_TOLERANCE = 0.1

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PromptScale:
    """``tokens = overhead + tokens_per_word * words`` for the served model; ``source`` says whence."""

    tokens_per_word: float = 1.0
    overhead: float = 0.0
    source: str = "words"

    def words(self, tokens: int) -> int:
        """Words for a prompt of ``tokens`` tokens (at least one)."""
        return max(1, round((tokens - self.overhead) / self.tokens_per_word))

    def describe(self) -> str:
        return f"{self.tokens_per_word:.2f} tokens a word + {self.overhead:.0f} ({self.source})"


def fit_scale(points: Sequence[tuple[float, float]], source: str) -> PromptScale | None:
    """The tokens a word through ``(words, tokens)`` points (their totals' ratio); None when the
    points give none.

    A line through two lengths would also give the chat template's overhead, but random words
    differ in length, so that intercept is off by tens of tokens (prompts came out 6% short on
    the CPU test model); the ratio puts the overhead into the words, off by its share of the
    prompt at most (a 15-token template is 3% of a 512-token prompt).
    """
    pts = [(float(w), float(t)) for w, t in points if w and w > 0 and t and t > 0]
    if not pts:
        return None
    slope = sum(t for _, t in pts) / sum(w for w, _ in pts)
    return PromptScale(slope, 0.0, source)


def local_tokenizer(model: str | Path | None) -> Callable[[str], int] | None:
    """A function counting the tokens of a text with the tokenizer of the local model folder
    ``model``; None when ``model`` is not a local folder or no tokenizer package can read it."""
    if not model:
        return None
    path = Path(str(model)).expanduser()
    if not path.is_dir():
        return None
    if importlib.util.find_spec("transformers") is not None:
        try:
            from transformers import AutoTokenizer

            tok: Any = AutoTokenizer.from_pretrained(str(path))
            return lambda text: len(tok(text, add_special_tokens=False)["input_ids"])
        except Exception as exc:  # a folder transformers cannot read: try the next way
            log.debug("transformers could not load the tokenizer of %s: %s", path, exc)
    if (path / "tokenizer.json").is_file() and importlib.util.find_spec("tokenizers") is not None:
        try:
            from tokenizers import Tokenizer

            fast = Tokenizer.from_file(str(path / "tokenizer.json"))
            return lambda text: len(fast.encode(text, add_special_tokens=False).ids)
        except Exception as exc:
            log.debug("tokenizers could not read %s: %s", path / "tokenizer.json", exc)
    return None


#: token ids of random prompts where the served model's vocabulary is not known here: common
#: BPE vocabularies hold 32 k ids or more (the range is said in each level's prompt_source)
DEFAULT_ID_RANGE = (1000, 30000)


def model_vocab(place: str | Path | None) -> tuple[int, str] | None:
    """``(vocabulary size, where it was read)`` of a local model folder: its config.json's
    ``vocab_size`` (or its text model's), else its tokenizer.json's vocabulary; None when
    ``place`` is not a folder here or says nothing."""
    if not place:
        return None
    path = Path(str(place)).expanduser()
    config = path / "config.json"
    if config.is_file():
        try:
            data = json.loads(config.read_text())
        except (OSError, ValueError):
            data = {}
        for d in (data, data.get("text_config") or {}, data.get("language_config") or {}):
            size = d.get("vocab_size") if isinstance(d, dict) else None
            if isinstance(size, int) and size > 0:
                return size, str(config)
    tok = path / "tokenizer.json"
    if tok.is_file():
        try:
            model = json.loads(tok.read_text()).get("model") or {}
        except (OSError, ValueError):
            model = {}
        vocab = model.get("vocab")
        if isinstance(vocab, (dict, list)) and vocab:
            return len(vocab), str(tok)
    return None


def id_range(vocab: int | None) -> tuple[int, int]:
    """Token ids to draw random prompts from for a vocabulary of ``vocab`` ids: within it, clear of
    the lowest tenth (special and byte tokens) and of the top (added tokens)."""
    lo, hi = DEFAULT_ID_RANGE
    if vocab is None:
        return lo, hi
    return min(lo, vocab // 10), max(min(hi, vocab - max(1, vocab // 50)), min(lo, vocab // 10) + 1)


class PromptSizer:
    """A sweep's prompts: its levels' and warm-up's workloads, sized by the best scale it has learnt."""

    def __init__(self, settings: SweepSettings, dataset: Sequence[tuple[str, int | None]] | None = None) -> None:
        self.settings = settings
        self.dataset = dataset
        self.scale = PromptScale()
        self.ids = DEFAULT_ID_RANGE
        self.ids_source = "assumed: the served model's vocabulary was not found here"

    @property
    def sizing(self) -> bool:
        """Random word prompts sized in the served model's tokens (not token ids, a dataset, or off)."""
        return self.dataset is None and not self.settings.token_ids and self.settings.exact_prompts

    @property
    def source(self) -> str:
        """How prompts were made: ``token_ids``, ``dataset``, ``words`` or the scale's source."""
        if self.dataset is not None:
            return "dataset"
        if self.settings.token_ids:
            return f"token_ids {self.ids[0]}-{self.ids[1] - 1} ({self.ids_source})"
        return self.scale.source if self.settings.exact_prompts else "words"

    def workload(self, n: int, *, level: int | str, input_len: int | None = None, output_len: int | None = None,
                 range_ratio: float | None = None) -> list[RequestSpec]:
        s = self.settings
        return make_workload(n, level=level, seed=s.seed, input_len=input_len or s.input_len,
                             output_len=output_len or s.output_len,
                             range_ratio=s.range_ratio if range_ratio is None else range_ratio,
                             dataset=self.dataset, token_ids=bool(s.token_ids), vocab_range=self.ids,
                             words_for=self.scale.words if self.sizing else None)

    def crash_hint(self) -> str:
        """What to say of random token ids when the engine died at its first requests ("" when the
        prompts were not token ids)."""
        if not self.settings.token_ids or self.dataset is not None:
            return ""
        return (f"; its first requests were random token ids {self.ids[0]}-{self.ids[1] - 1} ({self.ids_source}): "
                "ids beyond the model's vocabulary crash an engine at its first request (an embedding gather out "
                "of bounds); pass token_ids=False for text prompts, or serve the model from a folder this machine "
                "can read")

    def from_model(self, where: Sequence[str | Path | None]) -> None:
        """Size random token ids to the first local model folder among ``where`` that names its
        vocabulary (a 2,048-id model given ids up to 30,000 dies at its first request)."""
        if not self.settings.token_ids or self.dataset is not None:
            return
        for place in where:
            found = model_vocab(place)
            if found is not None:
                self.ids = id_range(found[0])
                self.ids_source = f"vocabulary {found[0]:,} from {found[1]}"
                log.info("random prompt ids %d-%d: %s", self.ids[0], self.ids[1] - 1, self.ids_source)
                return

    def warmup_workload(self, n: int) -> list[RequestSpec]:
        """``n`` warm-up requests; word prompts alternate the asked length and half of it (the
        server's counts of both give the tokens a word)."""
        full = self.settings.input_len
        specs = []
        for i in range(n):
            length = full if i % 2 == 0 or not self.sizing else max(1, full // 2)
            spec = self.workload(1, level=-1 if i == 0 else f"-1-{i}", input_len=length,
                                 output_len=min(self.settings.output_len, 16), range_ratio=1.0)[0]
            specs.append(RequestSpec(i, spec.prompt, spec.output_len, spec.input_len))
        return specs

    def from_tokenizer(self, where: Sequence[str | Path | None]) -> None:
        """Fit the scale with the first local tokenizer among ``where`` (model names or paths)."""
        if not self.sizing:
            return
        for place in where:
            count = local_tokenizer(place)
            if count is None:
                continue
            lengths = sorted({self.settings.input_len, max(1, self.settings.input_len // 2)})
            points = [(len(str(spec.prompt).split()), count(str(spec.prompt)))
                      for n in lengths for spec in make_workload(2, level="prompt-scale", seed=self.settings.seed,
                                                                 input_len=n, output_len=1, token_ids=False)]
            scale = fit_scale(points, "tokenizer")
            if scale is not None:
                self.scale = scale
                log.info("prompts sized with the tokenizer of %s: %s", place, scale.describe())
                return

    def from_usage(self, recs: Sequence[RequestRecord], specs: Sequence[RequestSpec]) -> None:
        """Refit the scale from the server's prompt-token counts of the warm-up requests ``recs``
        (sent from ``specs``), unless the tokenizer's sizing already agrees with them."""
        if not self.sizing:
            return
        pairs = [(spec, rec) for spec, rec in zip(specs, recs, strict=True) if rec.prompt_tokens]
        measured = fit_scale([(len(str(spec.prompt).split()), rec.prompt_tokens) for spec, rec in pairs], "usage")
        if measured is None:
            return
        asked = sum(spec.input_len or 0 for spec, _ in pairs)
        off = abs(sum(rec.prompt_tokens or 0 for _, rec in pairs) / asked - 1.0) if asked else 1.0
        if self.scale.source == "tokenizer" and off <= PROMPT_TOLERANCE / 2:
            return  # the tokenizer's sizing agrees with the server's counts
        self.scale = measured
        log.info("prompts sized from the server's prompt-token counts during warm-up: %s", measured.describe())
