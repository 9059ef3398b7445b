"""``glm5 tune RUN_DIR --phase P`` starts from the configuration the phase ran, read as the tuner reads it."""

from __future__ import annotations

import argparse

import pandas as pd
import pytest

from glm5lib import rundir
from glm5lib.cli.tune import _from_phase
from glm5lib.engines.sglang.config import ServerConfig
from glm5lib.errors import ConfigError


def _args(run, **kw):
    return argparse.Namespace(**{"run": str(run), "phase": "baseline", "config": None, "backend": None, **kw})


def test_the_phases_configuration_is_the_start_and_a_given_config_wins(tmp_path):
    folder = tmp_path / "run" / "baseline"
    folder.mkdir(parents=True)
    pd.DataFrame({"concurrency": [64], "output_throughput": [900.0]}).to_csv(folder / rundir.SWEEP, index=False)
    ServerConfig.load("glm5-baseline").with_changes(max_running_requests=48).save(folder / rundir.CONFIG)
    config, backend, where = _from_phase(_args(tmp_path / "run"))
    assert config.get("max_running_requests") == 48 and backend == "sim" and where == folder
    config, _, _ = _from_phase(_args(tmp_path / "run", config="glm5-fix"))
    assert config.get("max_running_requests") != 48
    (folder / rundir.CONFIG).write_text("{not json")
    with pytest.raises(ConfigError, match=r"config\.json"):
        _from_phase(_args(tmp_path / "run"))
