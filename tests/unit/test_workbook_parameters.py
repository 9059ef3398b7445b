"""The workbook's parameters are checked against what its notebooks declare before any notebook runs."""

from __future__ import annotations

import pytest

from glm5lib import cli, workbook
from glm5lib.errors import ConfigError

NOTEBOOKS = workbook.list_notebooks()


def test_the_notebooks_declare_what_the_readme_and_the_tests_pass():
    declared = workbook.declared_parameters(NOTEBOOKS)
    assert {"CONCURRENCIES", "BACKEND", "FIX_CHANGES", "STEP_PROFILE", "WATCH_URL"} <= set(declared)
    assert [1, 64, 256, 1024] in declared["CONCURRENCIES"]["defaults"]
    assert "02-measure-baseline.ipynb" in declared["CONCURRENCIES"]["notebooks"]
    workbook.check_parameters({"CONCURRENCIES": [1, 64], "OUTPUT_LEN": 128, "LEVEL_DURATION_S": 5,
                               "APPLY_PATCH": False, "FIX_CHANGES": {"max_running_requests": 512},
                               "BACKEND": "http://127.0.0.1:30000", "RUN_DIR": "x"}, NOTEBOOKS)


@pytest.mark.parametrize(("params", "words"), [
    ({"CONCURRENCIES": "abc"}, r"CONCURRENCIES='abc' is not valid: it takes a list, like its default \[1, 64, 256, 1024\]"),
    ({"CONCURRENCIES": [1, 0]}, "CONCURRENCIES level 0 is not valid"),
    ({"CONCURRENCIES": []}, "at least one level"),
    ({"CONCURENCIES": [1]}, "declared by none of the notebooks run; did you mean CONCURRENCIES"),
    ({"INPUT_LEN": 1.5}, "INPUT_LEN=1.5 is not valid: it takes a whole number"),
    ({"TP_SIZE": True}, "TP_SIZE=True is not valid"),
    ({"LEVEL_DURATION_S": float("inf")}, "finite number"),
    ({"APPLY_PATCH": "no"}, "APPLY_PATCH='no' is not valid: it takes True or False"),
])
def test_a_bad_parameter_is_refused_naming_it_and_what_it_takes(params, words):
    with pytest.raises(ConfigError, match=words) as refused:
        workbook.check_parameters(params, NOTEBOOKS)
    assert refused.value.field == next(iter(params))


def test_the_command_refuses_before_it_makes_a_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    code = cli.main(["workbook", "run", "-q", "--run-dir", str(run), "-p", "CONCURRENCIES=abc"])
    assert code != 0 and not run.exists()
    assert "CONCURRENCIES='abc' is not valid" in capsys.readouterr().err
