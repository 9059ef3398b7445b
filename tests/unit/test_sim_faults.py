"""The stand-in's fault specs: each kind sets the field of its name, read as its kind says."""

import math

import pytest

from glm5lib.errors import ConfigError
from glm5lib.sim.faults import FAULT_KINDS, parse_faults


def test_every_kind_sets_the_field_of_its_name():
    f = parse_faults(["nan-after=3,hang-after=4,reset-after=5,nan-after-steps=6,hang-after-steps=7",
                      "nan-after-s=1.5,hang-after-s=2.5,health-delay=0.25,slow-start=0.5",
                      "oom-at-start", "nccl-at-start"])
    assert (f.nan_after, f.hang_after, f.reset_after, f.nan_after_steps, f.hang_after_steps) == (3, 4, 5, 6, 7)
    assert (f.nan_after_s, f.hang_after_s, f.health_delay, f.slow_start) == (1.5, 2.5, 0.25, 0.5)
    assert f.oom_at_start and f.nccl_at_start
    assert all(hasattr(f, kind.replace("-", "_")) for kind in FAULT_KINDS)


@pytest.mark.parametrize("spec", ["nan-after=1.5", "hang-after-steps=-1", "nan-after-s=inf", "health-delay=-0.1",
                                  "slow-start=-1", "reset-after=soon"])
def test_a_value_outside_its_kind_is_refused(spec):
    with pytest.raises(ConfigError, match="is not a valid"):
        parse_faults([spec])


def test_slow_start_takes_any_seconds_not_below_zero():
    assert parse_faults(["slow-start=inf"]).slow_start == math.inf


def test_specs_name_every_fault_that_is_on_in_a_fixed_order_and_read_back_the_same():
    from glm5lib.sim.faults import Faults

    assert Faults().specs() == []
    specs = ["nan-after=3", "nan-after-steps=0", "nan-after-s=1.5", "oom-at-start", "nccl-at-start",
             "slow-start=0.5", "hang-after=4", "hang-after-steps=7", "hang-after-s=2.5", "reset-after=5",
             "health-delay=0.25"]
    assert parse_faults(list(reversed(specs))).specs() == specs
    assert Faults(nan_after=1_000_000, health_delay=1e6).specs() == ["nan-after=1000000", "health-delay=1e+06"]
