"""How numbers are written in reports: one definition for every view a person reads.

A score, a difference and a p-value read the same wherever a reviewer sees them
(the terminal table and its legend, the summary lines, the trend view, ``watch``'s
lines, Markdown and HTML): a score as a proportion (``0.6312``, its standard error
the same way, its confidence interval ``0.584–0.731``), a difference
between scores always in percentage points with the unit said (``-36.2 points``,
an interval ``-51.2 to -21.2 points``, a size without sign ``12.1 points``); a
value that is missing or not finite reads ``n/a``. Nothing else formats a
difference itself.
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


def score_interval(low: Any, high: Any) -> str:
    """A confidence interval of one score (not of a difference): ``0.584–0.731``."""
    if not (finite(low) and finite(high)):
        return "n/a"
    return f"{fixed(low, 3)}–{fixed(high, 3)}"


#: The unit every difference between scores is stated in, and how many of it one whole
#: score (a proportion from 0 to 1) makes.
UNIT = "points"
PER_SCORE = 100.0


def points(value: Any) -> str:
    """The number alone, signed, in percentage points: ``-36.2`` (where the unit is said
    once for many, as a plot's axis); a person reads :func:`difference`."""
    return f"{value * PER_SCORE:+.1f}" if finite(value) else "n/a"


def difference(value: Any) -> str:
    """A difference of proportions, signed, with its unit: ``-36.2 points``."""
    return f"{points(value)} {UNIT}" if finite(value) else "n/a"


def interval(low: Any, high: Any) -> str:
    """A confidence interval of a difference: ``-51.2 to -21.2 points``."""
    if not (finite(low) and finite(high)):
        return "n/a"
    return f"{points(low)} to {points(high)} {UNIT}"


def size(value: Any, high: Any = None) -> str:
    """A size of difference without sign (an MDE, a noise band): ``12.1 points``, or a
    range ``54.8-63.9 points`` when ``high`` differs at the shown precision."""
    if not finite(value):
        return "n/a"
    low_text = f"{abs(value) * PER_SCORE:.1f}"
    if finite(high) and f"{abs(high) * PER_SCORE:.1f}" != low_text:
        return f"{low_text}-{abs(high) * PER_SCORE:.1f} {UNIT}"
    return f"{low_text} {UNIT}"


def p_value(value: Any) -> str:
    """A p-value: three decimals, or two significant digits below 0.001."""
    if not finite(value):
        return "n/a"
    return f"{value:.2g}" if value < 0.001 else f"{value:.3f}"
