"""Multiple-comparison adjustment of p-values (Holm, Benjamini-Hochberg/Yekutieli).

A sweep runs many tests at once: 57 MMLU subjects at alpha=.05 flag at least one
false difference 94.6% of the time. Headline verdicts can block a release, so they
get Holm's family-wise control; subject drill-downs get the false-discovery-rate
control of Benjamini-Hochberg (or Benjamini-Yekutieli under arbitrary dependence).
Adjusted p-values are returned rather than reject/keep flags so that the report
can show both numbers and the verdict rule can compare them with any alpha.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

AdjustMethod = Literal["holm", "bh", "by"]


def adjust(p_values: Sequence[float], method: AdjustMethod) -> list[float]:
    """Adjust a family of p-values for multiplicity.

    Args:
        p_values: raw p-values of one family, each in [0, 1].
        method: ``"holm"`` (step-down, family-wise error under any dependence),
            ``"bh"`` (Benjamini-Hochberg step-up, false discovery rate under
            independence or positive dependence) or ``"by"`` (Benjamini-Yekutieli,
            BH times sum(1/i), any dependence).

    Returns:
        Adjusted p-values in the input order; a test is rejected at level alpha
        exactly when its adjusted p-value is ``<= alpha``.

    Raises:
        ValueError: an unknown method or a p-value outside [0, 1] (including NaN).
    """
    p = np.asarray(p_values, dtype=float)
    if p.ndim != 1:
        raise ValueError("adjust expects a flat sequence of p-values")
    if not np.all((p >= 0.0) & (p <= 1.0)):
        raise ValueError("adjust expects p-values in [0, 1]")
    m = p.size
    if m == 0:
        return []
    order = np.argsort(p, kind="stable")
    ranked = p[order]
    rank = np.arange(1, m + 1, dtype=float)
    if method == "holm":
        # p_(i) * (m - i + 1), made non-decreasing from the smallest p upwards.
        adjusted_sorted = np.maximum.accumulate(np.minimum(1.0, (m - rank + 1) * ranked))
    elif method in ("bh", "by"):
        scale = float(np.sum(1.0 / rank)) if method == "by" else 1.0
        # p_(i) * m / i, made non-decreasing by taking the minimum over larger ranks.
        # Multiplying p by the factor m / i >= 1 (not dividing m * p by i) keeps the
        # rounded result >= p, so an adjusted p-value never dips below its raw one.
        stepped = np.minimum.accumulate((ranked * (scale * m / rank))[::-1])[::-1]
        adjusted_sorted = np.minimum(1.0, stepped)
    else:
        raise ValueError(f"unknown adjustment method {method!r}; use 'holm', 'bh' or 'by'")
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    return [float(x) for x in adjusted]
