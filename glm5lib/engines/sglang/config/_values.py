"""Checking one SGLang flag's value: its type, choices and the bounds SGLang enforces late.

:func:`check_value` is the one check of a value against a :class:`~glm5lib.engines.sglang.config.FlagSpec`
(re-exported as :func:`glm5lib.engines.sglang.config.check_value`); :func:`type_name` says in words what a flag
takes. Every error is a :class:`~glm5lib.errors.ConfigError` naming the field and what is valid.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable
from typing import Any

from glm5lib.engines.sglang.config._releases import FlagSpec
from glm5lib.errors import ConfigError

__all__ = ["check_value", "type_name"]

# Bounds SGLang enforces late (or not at all) and that a config can be checked against early.
# (low, high, low_inclusive); chunked_prefill_size also takes -1 ("disable chunking").
_RANGES: dict[str, tuple[float | None, float | None, bool]] = {
    "port": (1, 65535, True),
    "mem_fraction_static": (0.0, 1.0, False),
    "schedule_conservativeness": (0.0, None, False),
}
_POSITIVE = frozenset({
    "tp_size", "pp_size", "dp_size", "ep_size", "attn_cp_size", "moe_dp_size", "nnodes",
    "max_running_requests", "max_queued_requests", "max_total_tokens", "max_prefill_tokens",
    "page_size", "cuda_graph_max_bs", "context_length", "stream_interval",
    "tokenizer_worker_num", "num_continuous_decode_steps", "watchdog_timeout",
    "cuda_graph_bs", "dist_timeout", "max_lora_rank", "max_loras_per_batch",
    # 0.5.23's per-phase successors of cuda_graph_max_bs / cuda_graph_bs
    "cuda_graph_max_bs_decode", "cuda_graph_max_bs_prefill", "cuda_graph_bs_decode", "cuda_graph_bs_prefill",
})
_MINUS_ONE_ALLOWED = frozenset({"chunked_prefill_size"})


def _closest(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    return difflib.get_close_matches(word, list(candidates), n=n, cutoff=0.6)


def type_name(spec: FlagSpec) -> str:
    """What a flag takes, in words (``int``, ``list of str``, ``JSON value``, ``no value``)."""
    if spec.value_type == "list":
        return f"list of {spec.item_type or 'str'}"
    return {"json": "JSON value", "none": "no value"}.get(spec.value_type, spec.value_type)


def _convert_token(spec: FlagSpec, token: str, kind: str | None = None) -> Any:
    """A command-line token to the Python value SGLang's argparse would make of it."""
    kind = kind or spec.value_type
    try:
        if kind == "int":
            return int(token)
        if kind == "float":
            return float(token)
        if kind == "json":
            return json.loads(token)
    except ValueError:
        raise ConfigError(
            f"{spec.flag} expects {'an integer' if kind == 'int' else 'a number' if kind == 'float' else 'JSON'}"
            f", got {token!r}",
            field=spec.field,
            valid=[kind],
        ) from None
    return token


def _check_scalar(spec: FlagSpec, value: Any, kind: str) -> Any:
    field = spec.field
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(
                f"{field} is a switch ({spec.flag}); expected True or False, got {value!r}",
                field=field, valid=["True", "False"],
            )
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise ConfigError(
                    f"{field} ({spec.flag}) expects an integer, got {value!r} ({type(value).__name__})",
                    field=field, valid=["int"],
                )
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(
                f"{field} ({spec.flag}) expects a finite number, got {value!r}",
                field=field, valid=["float"],
            )
        value = float(value)
    elif kind == "str" and not isinstance(value, str):
        raise ConfigError(
            f"{field} ({spec.flag}) expects a string, got {value!r} ({type(value).__name__})",
            field=field, valid=["str"],
        )
    if spec.choices is not None and value not in spec.choices:
        close = _closest(str(value), [str(c) for c in spec.choices])
        hint = f" (closest: {close[0]!r})" if close else ""
        raise ConfigError(
            f"{field}={value!r} is not a valid choice for {spec.flag}{hint}; valid: "
            + ", ".join(repr(c) for c in spec.choices),
            field=field,
            valid=[str(c) for c in spec.choices],
        )
    if field in _POSITIVE or field in _MINUS_ONE_ALLOWED:
        if field in _MINUS_ONE_ALLOWED and value == -1:
            return value
        if value <= 0:
            extra = " or -1 (disable)" if field in _MINUS_ONE_ALLOWED else ""
            raise ConfigError(
                f"{field} ({spec.flag}) must be a positive {'integer' if kind == 'int' else 'number'}{extra}, got {value!r}",
                field=field, valid=["> 0"] + (["-1"] if extra else []),
            )
    if field in _RANGES:
        low, high, low_inclusive = _RANGES[field]
        too_low = low is not None and (value < low if low_inclusive else value <= low)
        too_high = high is not None and value > high
        if too_low or too_high:
            bracket = "[" if low_inclusive else "("
            raise ConfigError(
                f"{field} ({spec.flag}) must be in {bracket}{low}, {high if high is not None else 'inf'}], got {value!r}",
                field=field, valid=[f"{bracket}{low}, {high}]"],
            )
    return value


def check_value(spec: FlagSpec, value: Any) -> Any:
    """Validated (and normalised) value for ``spec``; raises ConfigError naming the field."""
    if value is None:
        if spec.nullable:
            return None
        raise ConfigError(
            f"{spec.field} ({spec.flag}) cannot be None; its default is {spec.default!r}",
            field=spec.field, valid=[type_name(spec)],
        )
    kind = spec.value_type
    if kind == "none":
        return value
    if kind == "list":
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            raise ConfigError(
                f"{spec.field} ({spec.flag}) expects a {type_name(spec)}, got {value!r}",
                field=spec.field, valid=[type_name(spec)],
            )
        return [_check_scalar(spec, item, spec.item_type or "str") for item in value]
    if kind == "json":
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise ConfigError(
                    f"{spec.field} ({spec.flag}) expects JSON, got {value!r}",
                    field=spec.field, valid=["JSON"],
                ) from None
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise ConfigError(
                f"{spec.field} ({spec.flag}) expects a JSON-serialisable value, got {value!r}",
                field=spec.field, valid=["JSON"],
            ) from None
        return value
    return _check_scalar(spec, value, kind)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple):
        a = list(a)
    if isinstance(b, tuple):
        b = list(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (isinstance(a, bool) and isinstance(b, bool) and a == b)
    return a == b
