"""The one non-negative least-squares solver that the performance model and the stand-in's fit share."""

from __future__ import annotations

import numpy as np
import pytest

from glm5lib.stepmodel import nnls


def _kkt(x: np.ndarray, y: np.ndarray, coef: np.ndarray) -> None:
    """The conditions of the NNLS optimum: c >= 0; the residual's gradient is 0 on every column
    in use and cannot be lowered by raising a column held at 0."""
    grad = x.T @ (y - x @ coef)
    assert (coef >= 0).all()
    assert np.allclose(grad[coef > 0], 0.0, atol=1e-9)
    assert (grad[coef == 0] <= 1e-9).all()


def test_a_fit_that_wants_a_negative_slope_holds_it_at_zero():
    batch = np.array([1.0, 2.0, 3.0, 4.0])
    x = np.column_stack([np.ones_like(batch), batch])
    y = np.array([4.0, 3.0, 2.0, 1.0])  # unconstrained: 5 - 1 * batch
    coef = nnls(x, y)
    # the slope's constraint is active: 0, and the intercept is the mean step
    assert coef == pytest.approx([2.5, 0.0])
    _kkt(x, y, coef)


def test_an_exact_non_negative_model_is_recovered():
    batch = np.array([1.0, 4.0, 16.0, 64.0, 256.0])
    kv = np.array([3.0, 9.0, 1.0, 30.0, 7.0])
    x = np.column_stack([np.ones_like(batch), batch, kv])
    y = 2.0 + 0.5 * batch + 0.25 * kv
    assert nnls(x, y) == pytest.approx([2.0, 0.5, 0.25])


def test_one_column_of_three_at_its_bound_and_the_rest_refitted():
    batch = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    kv = np.array([5.0, 1.0, 4.0, 2.0, 6.0, 3.0])
    x = np.column_stack([np.ones_like(batch), batch, kv])
    y = 3.0 - 0.5 * batch + 2.0 * kv
    coef = nnls(x, y)
    assert coef[1] == 0.0
    refit, *_ = np.linalg.lstsq(x[:, [0, 2]], y, rcond=None)
    assert coef[[0, 2]] == pytest.approx(refit) and (refit > 0).all()
    _kkt(x, y, coef)


def test_weights_scale_each_rows_residual():
    x = np.ones((2, 1))
    y = np.array([1.0, 3.0])
    # minimises (3 * (1 - c))^2 + (1 * (3 - c))^2: c = (9 * 1 + 1 * 3) / (9 + 1)
    assert nnls(x, y, np.array([3.0, 1.0])) == pytest.approx([1.2])
    assert nnls(x, y) == pytest.approx([2.0])


def test_a_target_below_every_column_gives_all_zeros():
    x = np.column_stack([np.ones(4), np.arange(1.0, 5.0)])
    assert nnls(x, -np.arange(1.0, 5.0)).tolist() == [0.0, 0.0]
