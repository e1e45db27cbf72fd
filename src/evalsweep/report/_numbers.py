"""How numbers are written in reports: one definition for the HTML and Markdown views.

A score, a difference and a p-value read the same wherever a reviewer sees
them: a score as a proportion (``0.6312``), a difference between scores always in
percentage points (``-36.2``), in every view and legend; a value that is missing
or not finite reads ``n/a``.
"""

from __future__ import annotations

import math
from typing import Any, TypeGuard


def finite(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is a number that can be written (not None, NaN or infinite)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def fixed(value: Any, digits: int = 4) -> str:
    """A score: ``0.6312``."""
    return f"{value:.{digits}f}" if finite(value) else "n/a"


def points(value: Any) -> str:
    """A difference of proportions in percentage points, with its sign: ``-36.2``."""
    return f"{value * 100:+.1f}" if finite(value) else "n/a"


def p_value(value: Any) -> str:
    """A p-value: three decimals, or two significant digits below 0.001."""
    if not finite(value):
        return "n/a"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"
