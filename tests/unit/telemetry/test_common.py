"""The telemetry collectors' shared checks."""

import pytest

from glm5lib.errors import ConfigError
from glm5lib.telemetry._common import positive_interval


def test_positive_interval_returns_seconds_as_a_float():
    assert positive_interval("0.5", example=1.0) == 0.5
    assert positive_interval(2, example=0.1) == 2.0


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf")])
def test_positive_interval_refuses_what_is_not_positive_and_finite(bad):
    with pytest.raises(ConfigError, match=r"must be a positive number of seconds, e.g. 0.1"):
        positive_interval(bad, example=0.1)


@pytest.mark.parametrize("bad", ["soon", None, [1]])
def test_positive_interval_refuses_what_is_not_a_number(bad):
    with pytest.raises(ConfigError, match="is not a number of seconds") as err:
        positive_interval(bad, example=1.0)
    assert err.value.field == "interval"
