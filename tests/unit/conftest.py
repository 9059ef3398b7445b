"""Unit tests launch nothing: a test here that starts a process or a listening server fails.

Such a test belongs in ``tests/integration/``; this keeps ``make test-quick`` (which runs only
``tests/unit``) quick and free of the machine's state.
"""

from __future__ import annotations

import os
import socket
import subprocess

import pytest


def _refuse(what: str):
    def refuse(*_args, **_kwargs):
        raise AssertionError(f"a unit test {what}; tests that do belong in tests/integration/")

    return refuse


@pytest.fixture(autouse=True)
def _launches_nothing(monkeypatch):
    monkeypatch.setattr(subprocess.Popen, "__init__", _refuse("started a process (subprocess)"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"started a process (os.{name})"))
    monkeypatch.setattr(socket.socket, "listen", _refuse("started a server (a listening socket)"))
