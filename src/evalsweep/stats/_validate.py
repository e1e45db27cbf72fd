"""Turn user score lists into float arrays, refusing what the statistics cannot use.

Every statistic here assumes per-question scores in [0, 1] (a correct/incorrect
flag, a pass@k estimate, an option probability). Scores arrive from stores and
files the user controls, so bad input is a user-facing :class:`ComparisonError`
with a one-line message naming the list and the position, not a NaN three
functions later.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from evalsweep.errors import ComparisonError

Scores = Sequence[float] | npt.NDArray[Any]
"""Per-question scores: bools, 0/1, or fractions in [0, 1]."""


def as_scores(values: Scores, name: str) -> npt.NDArray[np.float64]:
    """Return ``values`` as a 1-d float array, or raise ComparisonError saying why not."""
    try:
        array = np.asarray(values, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ComparisonError(f"{name} scores are not numbers: {exc}") from None
    if array.ndim != 1:
        raise ComparisonError(f"{name} scores must be a flat list, got shape {array.shape}")
    if array.size == 0:
        raise ComparisonError(f"{name} scores are empty; there is nothing to compare")
    bad = np.flatnonzero(~((array >= 0.0) & (array <= 1.0)))
    if bad.size:
        i = int(bad[0])
        raise ComparisonError(
            f"{name} score at position {i} is {array[i]!r}; scores must lie in [0, 1]"
        )
    return array


def is_binary(*arrays: npt.NDArray[np.float64]) -> bool:
    """True when every score is exactly 0 or 1 (correct/incorrect outcomes)."""
    return all(bool(np.all((a == 0.0) | (a == 1.0))) for a in arrays)
