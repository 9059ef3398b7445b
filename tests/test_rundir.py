from __future__ import annotations

import pytest

from glm5lib import rundir
from glm5lib.errors import ConfigError


def test_new_run_dirs_are_distinct_and_created(tmp_path):
    a = rundir.new_run_dir(tmp_path)
    b = rundir.new_run_dir(tmp_path)
    assert a != b
    assert a.is_dir() and b.is_dir()
    assert a.parent == tmp_path


def test_named_run_dir(tmp_path):
    assert rundir.new_run_dir(tmp_path, "demo") == tmp_path / "demo"


def test_phase_dir_rejects_path_tricks(tmp_path):
    assert rundir.phase_dir(tmp_path, "baseline") == tmp_path / "baseline"
    with pytest.raises(ConfigError, match="phase name"):
        rundir.phase_dir(tmp_path, "../escape")
