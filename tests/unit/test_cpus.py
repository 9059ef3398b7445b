"""CPU layouts: parsing, checking against this process's cores, and pinning this process's threads."""

from __future__ import annotations

import os
import threading

import pytest

from glm5lib import cpus
from glm5lib.errors import ConfigError

HERE = sorted(os.sched_getaffinity(0))


def test_core_lists_round_trip_in_tasksets_form():
    assert cpus.parse_cpus("0-2,5") == (0, 1, 2, 5)
    assert cpus.parse_cpus(" 7, 3-4 ") == (3, 4, 7)
    assert cpus.format_cpus((5, 0, 1, 2)) == "0-2,5"
    assert cpus.format_cpus([3]) == "3"
    for text in ("0-2,5", "1", "0,2,4", "0-7"):
        assert cpus.format_cpus(cpus.parse_cpus(text)) == text


@pytest.mark.parametrize("text", ["a", "3-1", "1-", "", "1.5"])
def test_a_bad_core_list_names_the_input(text):
    with pytest.raises(ConfigError, match="is not a core number or range") as info:
        cpus.parse_cpus(text, field="cpus")
    assert info.value.field == "cpus"


def test_split_gives_the_client_the_last_core_and_the_server_the_rest(monkeypatch):
    monkeypatch.setattr(cpus, "_available", lambda: [0, 1, 2, 3])
    layout = cpus.layout("split")
    assert (layout.server, layout.client) == ((0, 1, 2), (3,))
    assert layout.describe() == "server on CPU 0-2, load generator on CPU 3"
    monkeypatch.setattr(cpus, "_available", lambda: [4])
    with pytest.raises(ConfigError, match="needs at least two cores; this process may use 4"):
        cpus.layout("split")


def test_an_explicit_layout_is_checked_against_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.setattr(cpus, "_available", lambda: [0, 1, 2, 3])
    assert cpus.layout("0-1/3").to_dict() == {"spec": "0-1/3", "server": [0, 1], "client": [3]}
    with pytest.raises(ConfigError, match=r"names CPU 9, which this process may not use \(it may use 0-3\)"):
        cpus.layout("0/9")
    with pytest.raises(ConfigError, match="share CPU 1"):
        cpus.layout("0-1/1")
    with pytest.raises(ConfigError, match="is not a CPU layout") as info:
        cpus.layout("0,1")
    assert "split" in info.value.valid[0]


def test_no_spec_reads_the_environment_and_names_it_in_errors(monkeypatch):
    monkeypatch.delenv(cpus.ENV_VAR, raising=False)
    assert cpus.layout(None) is None and cpus.current() is None
    assert cpus.layout("") is None and cpus.layout("off") is None
    monkeypatch.setenv(cpus.ENV_VAR, "bogus")
    with pytest.raises(ConfigError) as info:
        cpus.layout(None)
    assert info.value.field == cpus.ENV_VAR


@pytest.mark.skipif(len(HERE) < 2, reason="needs two cores to split")
def test_using_sets_the_layout_in_force_and_restores_it(monkeypatch):
    monkeypatch.delenv(cpus.ENV_VAR, raising=False)
    with cpus.using("split") as layout:
        assert cpus.current() == layout and layout.client == (HERE[-1],)
    assert cpus.current() is None
    monkeypatch.setenv(cpus.ENV_VAR, "split")
    assert cpus.current().client == (HERE[-1],)


def test_pinned_here_moves_every_thread_and_gives_their_cores_back():
    seen: dict[str, set[int]] = {}
    release = threading.Event()

    def before_block():  # a thread that was running when the block began
        release.wait(5)
        seen["old"] = os.sched_getaffinity(0)

    old = threading.Thread(target=before_block)
    old.start()
    try:
        with cpus.pinned_here([HERE[0]]):
            assert os.sched_getaffinity(0) == {HERE[0]}
            inner = threading.Thread(target=lambda: seen.setdefault("new", os.sched_getaffinity(0)))
            inner.start()
            inner.join()
            release.set()
            old.join()
        assert seen == {"old": {HERE[0]}, "new": {HERE[0]}}
        assert os.sched_getaffinity(0) == set(HERE)
    finally:
        release.set()
        old.join()


def test_pinned_here_without_cores_changes_nothing():
    with cpus.pinned_here(None):
        assert os.sched_getaffinity(0) == set(HERE)
