"""Small statistics: medians, a least-squares line and parabola, with no numpy needed."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


@dataclass
class LinearFit:
    slope: float
    intercept: float
    r2: float

    def at(self, x: float) -> float:
        return self.slope * x + self.intercept


def linear_fit(xs: Iterable[float | None], ys: Iterable[float | None]) -> LinearFit | None:
    """Least squares y = slope*x + intercept over the pairs where both are present; None if < 2 x values."""
    pairs = [(x, y) for x, y in zip(xs, ys, strict=False) if x is not None and y is not None]
    if len({x for x, _ in pairs}) < 2:
        return None
    n = len(pairs)
    mean_x = sum(x for x, _ in pairs) / n
    mean_y = sum(y for _, y in pairs) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in pairs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in pairs)
    slope = sxy / sxx
    intercept = mean_y - slope * mean_x
    ss_tot = sum((y - mean_y) ** 2 for _, y in pairs)
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in pairs)
    return LinearFit(slope, intercept, 1.0 - ss_res / ss_tot if ss_tot else 1.0)


@dataclass(frozen=True)
class QuadraticFit:
    """y = a + b x + c x²."""

    a: float
    b: float
    c: float
    r2: float

    def at(self, x: float) -> float:
        return self.a + self.b * x + self.c * x * x


def _det(m: list[list[float]]) -> float:
    return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
            + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))


def quadratic_fit(xs: Sequence[float], ys: Sequence[float]) -> QuadraticFit | None:
    """Least squares y = a + b x + c x² (the 3 x 3 normal equations by Cramer's rule, in x less its mean so that
    large x stay well conditioned); None with fewer than 3 distinct x or unequal lengths."""
    if len(xs) != len(ys) or len(set(xs)) < 3:
        return None
    mean_x = sum(xs) / len(xs)
    us = [x - mean_x for x in xs]
    s = [sum(u ** k for u in us) for k in range(5)]
    t = [sum(y * u ** k for u, y in zip(us, ys, strict=True)) for k in range(3)]
    m = [[s[0], s[1], s[2]], [s[1], s[2], s[3]], [s[2], s[3], s[4]]]
    d = _det(m)
    if d == 0:
        return None
    a, b, c = (_det([[t[r] if col == k else m[r][col] for col in range(3)] for r in range(3)]) / d for k in range(3))
    # back from u = x - mean: a + b u + c u² = (a - b mean + c mean²) + (b - 2 c mean) x + c x²
    fit = QuadraticFit(a - b * mean_x + c * mean_x ** 2, b - 2 * c * mean_x, c, 0.0)
    mean_y = sum(ys) / len(ys)
    ss_tot = sum((y - mean_y) ** 2 for y in ys)
    ss_res = sum((y - fit.at(x)) ** 2 for x, y in zip(xs, ys, strict=True))
    return QuadraticFit(fit.a, fit.b, fit.c, 1.0 - ss_res / ss_tot if ss_tot else 1.0)


def nearest_rank(values: Sequence[float], percent: float) -> float | None:
    """The nearest-rank percentile: the smallest value with at least ``percent`` % of the values at or below it.

    With the n values sorted, it is the one at 1-based rank ``ceil(percent / 100 * n)`` (rank 1 for 0 %).
    It is always one of the measured values, never an interpolation; None when there are none.
    """
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(percent / 100 * len(ordered))) - 1]


def spike(values: Sequence[float], factor: float) -> tuple[int, float] | None:
    """The index of the value furthest above the median and its multiple of the median, where that multiple is at
    least ``factor``: a step that waited on something else (another program took the CPU), not on its own work.
    None with fewer than three values (no median to stand out from) or none that far above it."""
    if len(values) < 3:
        return None
    middle = statistics.median(values)
    worst = max(range(len(values)), key=lambda i: values[i])
    if middle <= 0 or values[worst] < factor * middle:
        return None
    return worst, values[worst] / middle
