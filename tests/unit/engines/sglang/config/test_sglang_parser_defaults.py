"""The server-args reader reads a field's default the same way from a dataclass and a msgspec struct."""

import dataclasses

import pytest

from glm5lib.engines.sglang.config.sglang_parser import _default_of, _fields


@dataclasses.dataclass
class _Args:
    model_path: str
    tp_size: int = 1
    hosts: list = dataclasses.field(default_factory=lambda: ["a"])


def test_default_of_a_dataclass_field():
    fields = {f.name: f for f in dataclasses.fields(_Args)}
    assert _default_of(fields["model_path"], dataclasses.MISSING) == (None, "required")
    assert _default_of(fields["tp_size"], dataclasses.MISSING) == (1, None)
    assert _default_of(fields["hosts"], dataclasses.MISSING) == (["a"], None)
    assert _fields(_Args)["tp_size"] == {"annotation": "int", "default": 1, "default_expr": None}


def test_default_of_a_msgspec_field():
    msgspec = pytest.importorskip("msgspec")

    class Args(msgspec.Struct):
        model_path: str
        tp_size: int = 1
        hosts: list = msgspec.field(default_factory=lambda: ["a"])

    got = {f.name: _default_of(f, msgspec.NODEFAULT) for f in msgspec.structs.fields(Args)}
    assert got == {"model_path": (None, "required"), "tp_size": (1, None), "hosts": (["a"], None)}
