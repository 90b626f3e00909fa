"""Small statistics: medians and a least-squares line, with no numpy needed."""

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
