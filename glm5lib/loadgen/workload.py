"""Seeded request workloads: random token-id or word prompts, length ranges, prompt files.

A workload is a list of :class:`RequestSpec` built up front for one level, so the same seed,
level and parameters always give the same prompts and lengths (a sweep is reproducible and a
resumed level sends what the interrupted one would have sent).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glm5lib.errors import ConfigError

__all__ = ["RequestSpec", "load_prompts", "make_workload"]

# Common short English words: each is one token in the usual BPE vocabularies, so a prompt of
# n words is close to n tokens. The server's own usage count is what gets recorded.
_WORD_TEXT = (
    "the of and to in is was for on that with as by at from his her an were are which this be "
    "or have had not but they one all their there been has when who more if will would no out "
    "so up said what about its into than them can only other new some could time these two may "
    "first then do any like my now over such our man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three"
)
_WORDS = tuple(_WORD_TEXT.split())


@dataclass(frozen=True)
class RequestSpec:
    """One request of a workload: the prompt (text or token ids) and the output length asked."""

    index: int
    prompt: str | list[int]
    output_len: int
    input_len: int | None = None  # intended prompt length in tokens, when known


def _lengths(rng: np.random.Generator, n: int, length: int, range_ratio: float) -> np.ndarray:
    # bench_serving's convention: uniform integers in [length * range_ratio, length].
    low = max(1, int(length * range_ratio))
    if low >= length:
        return np.full(n, length, dtype=np.int64)
    return rng.integers(low, length + 1, size=n)


def load_prompts(path: str | Path) -> list[tuple[str, int | None]]:
    """Read a prompt file: ``.jsonl`` (``prompt``/``text``/``input`` and optional ``output_len``/
    ``max_tokens``), ShareGPT ``.json`` (first human turn) or ``.txt`` (one prompt a line).

    Returns ``[(prompt, output_len or None), ...]``.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"dataset file {str(p)!r} does not exist", field="dataset")
    prompts: list[tuple[str, int | None]] = []
    suffix = p.suffix.lower()
    text = p.read_text(encoding="utf-8")
    if suffix == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"dataset {p.name} line {n} is not JSON ({exc.msg})", field="dataset"
                ) from None
            prompt = next((obj[k] for k in ("prompt", "text", "input") if k in obj), None)
            if not isinstance(prompt, str):
                raise ConfigError(
                    f"dataset {p.name} line {n} has no string 'prompt', 'text' or 'input' field",
                    field="dataset",
                    valid=["prompt", "text", "input"],
                )
            out = obj.get("output_len", obj.get("max_tokens"))
            prompts.append((prompt, int(out) if out is not None else None))
    elif suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"dataset {p.name} is not JSON ({exc.msg})", field="dataset") from None
        if not isinstance(data, list):
            raise ConfigError(
                f"dataset {p.name}: expected a ShareGPT-style list of conversations", field="dataset"
            )
        for item in data:
            turns = item.get("conversations") if isinstance(item, dict) else None
            if not turns:
                continue
            human = next((t.get("value") for t in turns if t.get("from") in ("human", "user")), None)
            if isinstance(human, str) and human.strip():
                prompts.append((human, None))
    elif suffix == ".txt":
        prompts = [(line, None) for line in text.splitlines() if line.strip()]
    else:
        raise ConfigError(
            f"dataset {p.name}: unknown file type {suffix!r}",
            field="dataset",
            valid=[".jsonl", ".json", ".txt"],
        )
    if not prompts:
        raise ConfigError(f"dataset {p.name} holds no prompts", field="dataset")
    return prompts


def make_workload(
    n: int,
    *,
    level: int | str,
    seed: int = 0,
    input_len: int = 256,
    output_len: int = 256,
    range_ratio: float = 1.0,
    dataset: str | Path | Sequence[tuple[str, int | None]] | None = None,
    token_ids: bool = True,
    vocab_range: tuple[int, int] = (1000, 30000),
    words_for: Callable[[int], int] | None = None,
) -> list[RequestSpec]:
    """Build ``n`` requests for one level, deterministic in (seed, level, parameters).

    Random prompts are token ids (exact input length) when ``token_ids`` else words: one a
    token, or ``words_for(tokens)`` of them (:meth:`glm5lib.loadgen.prompts.PromptScale.words`,
    sized in the served model's tokens); a ``dataset`` (a path or already-loaded pairs)
    supplies prompts instead, sampled with the seed. ``RequestSpec.input_len`` is the length
    asked for, in tokens.
    """
    if not 0.0 <= range_ratio <= 1.0:
        raise ConfigError(
            f"range_ratio={range_ratio!r} is not valid: use a number from 0 to 1", field="range_ratio"
        )
    if input_len < 1 or output_len < 1:
        raise ConfigError(
            f"input_len={input_len} and output_len={output_len} must both be at least 1",
            field="input_len" if input_len < 1 else "output_len",
        )
    # zlib.crc32 rather than hash(): stable across processes.
    rng = np.random.default_rng([seed, zlib.crc32(str(level).encode())])
    out_lens = _lengths(rng, n, output_len, range_ratio)
    specs: list[RequestSpec] = []
    if dataset is not None:
        pairs = load_prompts(dataset) if isinstance(dataset, (str, Path)) else list(dataset)
        picks = rng.integers(0, len(pairs), size=n)
        for i in range(n):
            prompt, own_out = pairs[int(picks[i])]
            specs.append(RequestSpec(i, prompt, int(own_out or out_lens[i])))
        return specs
    in_lens = _lengths(rng, n, input_len, range_ratio)
    lo, hi = vocab_range
    for i in range(n):
        k = int(in_lens[i])
        if token_ids:
            prompt: str | list[int] = rng.integers(lo, hi, size=k).tolist()
        else:
            idx = rng.integers(0, len(_WORDS), size=words_for(k) if words_for is not None else k)
            prompt = " ".join(_WORDS[j] for j in idx)
        specs.append(RequestSpec(i, prompt, int(out_lens[i]), k))
    return specs
