"""Confidence intervals for success rates (two-sided 95%)."""
from __future__ import annotations

import math

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials.

    >>> [round(x, 3) for x in wilson(100, 200)]
    [0.431, 0.569]
    """
    if n <= 0:
        return (0.0, 1.0)
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # exact bounds at the ends (rounding would give 0.9999999999999999 for k == n)
    return (0.0 if k == 0 else max(0.0, centre - half), 1.0 if k == n else min(1.0, centre + half))


def mean_of_rates(cells: list[tuple[int, int]], z: float = Z95) -> tuple[float, float, float]:
    """The plain mean of several independent success rates, each (k, n), with the interval that
    combines their Wilson intervals (MOVER, the construction behind Newcombe's difference below):
    (mean, low, high). Unlike a normal approximation it keeps its width when a rate is 0 or 1.

    >>> [round(x, 3) for x in mean_of_rates([(0, 10), (10, 10)])]
    [0.5, 0.361, 0.639]
    """
    if not cells or any(n <= 0 for _, n in cells):
        raise ValueError("mean_of_rates needs at least one rate, each over at least one trial")
    g = len(cells)
    ps = [k / n for k, n in cells]
    bounds = [wilson(k, n, z) for k, n in cells]
    m = sum(ps) / g
    low = m - math.sqrt(sum((p - lo) ** 2 for p, (lo, _) in zip(ps, bounds))) / g
    high = m + math.sqrt(sum((hi - p) ** 2 for p, (_, hi) in zip(ps, bounds))) / g
    return (m, max(0.0, low), min(1.0, high))


def newcombe(k1: int, n1: int, k2: int, n2: int, z: float = Z95) -> tuple[float, float, float]:
    """Difference p1 - p2 with Newcombe's hybrid score interval: (diff, low, high)."""
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = wilson(k1, n1, z)
    l2, u2 = wilson(k2, n2, z)
    d = p1 - p2
    return (d, d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2), d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2))
