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


def paired_counts(first, second) -> tuple[int, int, int, int]:
    """The 2x2 table of two arms run on the same trials, in `newcombe_paired`'s order: (both won,
    only the first won, only the second won, neither won). Any iterables of truth values (lists,
    flattened arrays) of the same length.

    >>> paired_counts([True, True, False, False], [True, False, True, False])
    (1, 1, 1, 1)
    """
    a, b = [bool(x) for x in first], [bool(x) for x in second]
    if len(a) != len(b):
        raise ValueError(f"paired trials need the same number of outcomes per arm, got {len(a)} and {len(b)}")
    both = sum(x and y for x, y in zip(a, b))
    first_only = sum(x and not y for x, y in zip(a, b))
    second_only = sum(y and not x for x, y in zip(a, b))
    return both, first_only, second_only, len(a) - both - first_only - second_only


def newcombe_paired(both: int, first_only: int, second_only: int, neither: int,
                    z: float = Z95) -> tuple[float, float, float]:
    """Difference p1 - p2 of two success rates measured on the SAME trials (each trial run once
    with each arm: paired seeds), from the 2x2 counts: trials both arms won, only the first won,
    only the second won, neither won. Newcombe's square-and-add interval for paired data (1998,
    method 10): the two Wilson intervals combined through the estimated correlation of the arms
    (with his continuity correction), so the trials both arms won or both lost narrow the interval
    as they should. Returns (diff, low, high). The independent-samples ``newcombe`` above ignores
    the pairing and is wider whenever the arms agree on most trials.

    >>> [round(x, 4) for x in newcombe_paired(59, 6, 16, 80)]     # Fagerland et al., ch. 8 (Cavo 2012)
    [-0.0621, -0.1186, -0.0046]
    """
    counts = (both, first_only, second_only, neither)
    if any(c < 0 for c in counts) or sum(counts) == 0:
        raise ValueError(f"newcombe_paired needs non-negative counts of at least one trial, got {counts}")
    n = sum(counts)
    k1, k2 = both + first_only, both + second_only          # successes of each arm
    p1, p2 = k1 / n, k2 / n
    l1, u1 = wilson(k1, n, z)
    l2, u2 = wilson(k2, n, z)
    margins = k1 * (n - k1) * k2 * (n - k2)
    cross = both * neither - first_only * second_only
    if margins == 0:
        phi = 0.0
    elif cross > n / 2:
        phi = (cross - n / 2) / math.sqrt(margins)
    elif cross >= 0:
        phi = 0.0
    else:
        phi = cross / math.sqrt(margins)
    d = p1 - p2
    a, b = p1 - l1, u2 - p2
    c, e = u1 - p1, p2 - l2
    low = d - math.sqrt(max(0.0, a * a + b * b - 2 * phi * a * b))
    high = d + math.sqrt(max(0.0, c * c + e * e - 2 * phi * c * e))
    return (d, max(-1.0, low), min(1.0, high))


def clustered_gain(clusters: list[tuple[int, int, int]], z: float = Z95) -> tuple[float, float, float]:
    """Gain of arm 1 over arm 2 on paired trials that come in independent clusters, each
    (successes of arm 1, successes of arm 2, trials), where the trials inside a cluster may depend
    on each other (a memory that grows episode after episode of one task). The ratio estimate with
    its cluster-robust (sandwich) standard error and a normal interval: (gain, low, high). For many
    clusters (tens or more); with few, the interval is too narrow.

    >>> [round(x, 3) for x in clustered_gain([(3, 1, 4), (2, 2, 4), (4, 3, 4), (1, 1, 4)])]
    [0.188, -0.047, 0.422]
    """
    if len(clusters) < 2 or any(m <= 0 for _, _, m in clusters):
        raise ValueError("clustered_gain needs at least two clusters, each of at least one trial")
    total = sum(m for _, _, m in clusters)
    gain = sum(a - b for a, b, _ in clusters) / total
    g = len(clusters)
    var = g / (g - 1) * sum((a - b - gain * m) ** 2 for a, b, m in clusters) / total ** 2
    half = z * math.sqrt(var)
    return (gain, gain - half, gain + half)
