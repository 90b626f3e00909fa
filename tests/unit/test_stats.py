"""`core.stats`: the least-squares parabola (experiment 6's recomputed total) against exact and noisy curves."""

from __future__ import annotations

import random

import pytest

from core.stats import linear_fit, quadratic_fit


def test_a_parabola_is_found_exactly_and_a_line_has_no_curvature():
    xs = [float(x) for x in range(10)]
    fit = quadratic_fit(xs, [3 + 2 * x + 0.5 * x * x for x in xs])
    assert fit is not None and (fit.a, fit.b, fit.c, fit.r2) == pytest.approx((3.0, 2.0, 0.5, 1.0))
    line = quadratic_fit(xs, [7 - 4 * x for x in xs])
    assert line is not None and (line.a, line.b, line.c) == pytest.approx((7.0, -4.0, 0.0), abs=1e-9)


def test_a_curve_bending_down_has_a_negative_curvature():
    xs = [float(x) for x in range(20)]
    fit = quadratic_fit(xs, [100 + 10 * x - 0.25 * x * x for x in xs])
    assert fit is not None and fit.c == pytest.approx(-0.25) and fit.at(10) == pytest.approx(175.0)


def test_far_from_zero_x_stays_well_conditioned():
    """Contexts of thousands of tokens: x⁴ sums of 10¹⁶ would swamp a fit in raw powers of x."""
    xs = [float(x) for x in range(5000, 5200)]
    fit = quadratic_fit(xs, [1.0 + 0.002 * x + 3e-6 * x * x for x in xs])
    assert fit is not None and fit.c == pytest.approx(3e-6, rel=1e-6) and fit.r2 == pytest.approx(1.0)


def test_noise_lowers_r2_but_keeps_the_curvature_near_the_truth():
    rng = random.Random(6)
    xs = [float(x) for x in range(129)]
    ys = [sum(32 + i for i in range(int(x) + 1)) * rng.uniform(0.85, 1.15) for x in xs]  # 15 % per point
    fit = quadratic_fit(xs, ys)
    assert fit is not None and 0.35 < fit.c < 0.65 and 0.9 < fit.r2 < 1.0


def test_too_few_points_or_unequal_lengths_give_no_fit():
    assert quadratic_fit([1.0, 2.0], [1.0, 2.0]) is None
    assert quadratic_fit([1.0, 1.0, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0]) is None  # two distinct x
    assert quadratic_fit([1.0, 2.0, 3.0], [1.0, 2.0]) is None
    assert linear_fit([1.0], [2.0]) is None
