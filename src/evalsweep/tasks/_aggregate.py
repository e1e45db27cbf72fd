"""lm-eval's aggregation: means, sample standard errors and pooled group errors.

Reproduced exactly (``api/metrics.py``: ``mean_stderr``,
``pooled_sample_stderr``) so that a table from evalsweep and one from
lm-evaluation-harness agree to the last digit on the same samples.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def mean_stderr(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1) over sqrt(n); NaN below two values."""
    n = len(values)
    if n < 2:
        return math.nan
    mu = mean(values)
    return math.sqrt(sum((x - mu) ** 2 for x in values) / (n - 1)) / math.sqrt(n)


def pooled_stderr(stderrs: Sequence[float], sizes: Sequence[int]) -> float:
    """lm-eval's ``pooled_sample_stderr`` for a size-weighted group of subtasks."""
    total = sum(sizes)
    if total - len(sizes) <= 0:
        return math.nan
    pooled_var = sum((size - 1) * err**2 * size for size, err in zip(sizes, stderrs, strict=True))
    return math.sqrt(pooled_var / (total - len(sizes)) / total)


def weighted_mean(values: Sequence[float], sizes: Sequence[int]) -> float:
    total = sum(sizes)
    return sum(v * s for v, s in zip(values, sizes, strict=True)) / total if total else math.nan
