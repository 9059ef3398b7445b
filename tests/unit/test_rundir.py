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


def test_display_path_hides_the_checkout_location_for_shipped_data(tmp_path):
    from glm5lib.paths import data_dir, display_path

    shipped = data_dir() / "profiles" / "glm5-nvfp4-8x-rtxpro6000.json"
    assert display_path(shipped) == "data/profiles/glm5-nvfp4-8x-rtxpro6000.json"
    outside = tmp_path / "mine.json"
    assert display_path(outside) == str(outside)
