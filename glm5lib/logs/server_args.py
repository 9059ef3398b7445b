"""SGLang's ``server_args=ServerArgs(...)`` line into a dict of Python values.

Releases up to 0.5.9 log the dataclass repr ``server_args=ServerArgs(name=value, ...)``; later
ones (0.5.23: ``ServerArgs`` is a msgspec Struct) log its resolved dict,
``server_args={'name': value, ...}``. Both are read the same way. The repr is read by a small tokenizer that splits it at top-level commas (strings, lists, dicts
and enum reprs such as ``<LoadFormat.AUTO: 'auto'>`` kept whole) and :func:`ast.literal_eval`
per value, so a line wrapped by a terminal or cut off by a paste still yields every complete
field.
"""

from __future__ import annotations

import ast
import copy
import functools
import math
import re
from collections.abc import Iterable
from typing import Any

from glm5lib.logs.text import strip_ansi
from glm5lib.masking import mask_mapping

__all__ = [
    "SIMPLE_LITERALS",
    "ServerArgs",
    "parse_server_args",
]

class ServerArgs(dict):
    """The dict :func:`parse_server_args` returns; ``incomplete`` is True when the text was cut."""

    incomplete: bool = False
    unparsed: list[str]

    def __init__(self, *args: Any, incomplete: bool = False, unparsed: Iterable[str] = (), **kw: Any):
        super().__init__(*args, **kw)
        self.incomplete = incomplete
        self.unparsed = list(unparsed)

    def masked(self) -> dict[str, Any]:
        """A plain dict copy with secrets masked (what to display or save)."""
        return mask_mapping(self)

    def __repr__(self) -> str:
        # Never print a secret by accident, e.g. when a notebook shows the object.
        tail = ", incomplete=True" if self.incomplete else ""
        return f"ServerArgs({dict.__repr__(self.masked())}{tail})"


_TOKEN_SCAN_RE = re.compile(r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\"|[\[\](){},<>]|['\"]")
_FIELD_NAME_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=(.*)$", re.DOTALL)
# An item of the dict form (0.5.23): 'name': value
_DICT_ITEM_RE = re.compile(r"^\s*'([A-Za-z_][A-Za-z0-9_]*)'\s*:(.*)$", re.DOTALL)
_CLOSERS = {"]": "[", ")": "(", "}": "{", ">": "<"}


def parse_server_args(text: str) -> ServerArgs:
    """Read SGLang's ``server_args=ServerArgs(...)`` line (or the bare ``ServerArgs(...)`` repr).

    Values become Python values (int, float, bool, None, str, list, dict); a value that is not
    a Python literal (an enum repr, an object) is kept as its text. Lines wrapped by a terminal
    or a paste are joined. A truncated text yields every complete ``name=value`` it holds and
    the result's ``incomplete`` attribute is True. Secrets are kept in the dict (so a server can
    be relaunched) but masked by its ``repr`` and by :meth:`ServerArgs.masked`.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_server_args expects the log text as str, got {type(text).__name__}")
    known = _PARSED.get(text)
    if known is None:
        known = _parse(text)
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[text] = known
    result, incomplete, unparsed = known
    # A copy: values that are lists or dicts are copied whole, the rest are immutable.
    fresh = {k: v if type(v) in _IMMUTABLE else copy.deepcopy(v) for k, v in result.items()}
    return ServerArgs(fresh, incomplete=incomplete, unparsed=unparsed)


# Texts read before and what they gave: logs concatenated from several runs of one server, or
# a follower reading the same start-up again, hold the same line many times (each read costs
# thousands of tokens and literal_eval calls; a deep copy of the result is ten times cheaper).
_PARSED: dict[str, tuple[dict[str, Any], bool, tuple[str, ...]]] = {}
_PARSED_MAX = 64
_IMMUTABLE = frozenset({int, float, bool, str, type(None)})


def _parse(text: str) -> tuple[dict[str, Any], bool, tuple[str, ...]]:
    text = strip_ansi(text)
    start = text.find("ServerArgs(")
    if start >= 0:
        body = text[start + len("ServerArgs(") :]
    else:
        body = text.split("server_args=", 1)[1] if "server_args=" in text else text
    # A terminal or a paste wraps the line; the repr itself never holds a raw newline.
    body = body.replace("\r", "").replace("\n", "")
    dict_form = start < 0 and body.lstrip().startswith("{")
    if dict_form:
        body = body.lstrip()[1:]
    pieces, closed = _split_top_level(body, "}" if dict_form else ")")
    field_re = _DICT_ITEM_RE if dict_form else _FIELD_NAME_RE
    result: dict[str, Any] = {}
    unparsed: list[str] = []
    incomplete = not closed
    for i, piece in enumerate(pieces):
        m = field_re.match(piece)
        last_open = (not closed) and i == len(pieces) - 1
        if not m:
            if piece.strip():
                unparsed.append(piece.strip())
                incomplete = True
            continue
        name, raw = m.group(1), m.group(2).strip()
        if last_open:
            # The final piece of a cut text may itself be cut ("max_running_requests=10" of 1024).
            incomplete = True
            continue
        result[name] = _literal(raw)
    if not result and start < 0 and "server_args=" not in text:
        incomplete = True
    return result, incomplete, tuple(unparsed)


@functools.lru_cache(maxsize=64)
def closes(body: str) -> bool:
    """Whether the top-level ``)`` of a ``ServerArgs(`` body is in ``body`` (a wrapped line is
    asked again as each piece comes: the answers are kept); for the dict form
    (``server_args={...``), whether its top-level ``}`` is."""
    head = body.split("server_args=", 1)[1].lstrip() if body.startswith("server_args=") else ""
    if head.startswith("{"):
        return _split_top_level(head[1:], "}")[1]
    return _split_top_level(body)[1]


def _split_top_level(body: str, closer: str = ")") -> tuple[list[str], bool]:
    """Split ``a=1, b=[1, 2], c='x, y')...`` at top-level commas; True when the ``closer`` was seen."""
    pieces: list[str] = []
    stack: list[str] = []
    start = 0
    for m in _TOKEN_SCAN_RE.finditer(body):
        tok = m.group()
        if len(tok) > 1 or tok in "'\"":
            if len(tok) == 1:
                # An unterminated quote: the rest of the text is a cut-off string.
                pieces.append(body[start:])
                return pieces, False
            continue
        if tok in "[({":
            stack.append(tok)
        elif tok == "<":
            # Enum reprs such as <LoadFormat.AUTO: 'auto'>; a lone '<' elsewhere is harmless.
            if body[m.end() : m.end() + 1].isalpha():
                stack.append(tok)
        elif tok in "])}>":
            if stack and stack[-1] == _CLOSERS[tok]:
                stack.pop()
            elif tok == closer and not stack:
                pieces.append(body[start : m.start()])
                return pieces, True
        elif tok == "," and not stack:
            pieces.append(body[start : m.start()])
            start = m.end()
    pieces.append(body[start:])
    return pieces, False


SIMPLE_LITERALS = {"None": None, "True": True, "False": False, "inf": math.inf, "nan": math.nan}


def _literal(raw: str) -> Any:
    if raw in SIMPLE_LITERALS:
        return SIMPLE_LITERALS[raw]
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    if raw.startswith("<") and raw.endswith(">"):
        m = re.match(r"<[\w.]+: (.*)>$", raw)
        if m:
            try:
                return ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return m.group(1)
    return raw

