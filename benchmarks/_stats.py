"""Percentiles and unit helpers shared by the benchmarks."""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["MIB", "percentile", "rounded"]

MIB = 1024 * 1024


def percentile(samples: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) with linear interpolation (numpy's default).

    Raises ``ValueError`` on an empty sequence or a ``p`` outside 0..100.
    """
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is outside 0..100")
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def rounded(value: float, digits: int = 3) -> float:
    """``value`` rounded for the JSON report."""
    return round(value, digits)
