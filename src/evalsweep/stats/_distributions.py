"""The few distribution functions the paired tests need, without importing ``scipy.stats``.

``import scipy.stats`` costs about a second of CPU (it builds every distribution
and parses their docstrings), most of what ``evalsweep compare`` spends before it
reads a row. The paired tests need only the normal quantile, the binomial
pmf/cdf/sf at p = 1/2 and the exact two-sided binomial test. ``scipy.stats``
computes each of those with a ``scipy.special`` ufunc (``ndtri``, ``_binom_pmf``,
``_binom_cdf``, ``_binom_sf``) wrapped in argument checks; this module calls the
same ufuncs with the same checks and clipping, and runs ``binomtest``'s two-sided
search step for step (SciPy's algorithm, BSD-3-Clause), so every value is the very
float ``scipy.stats`` gives.

Exact or not used: the shortcut serves only the SciPy versions it was checked
against (:data:`CHECKED_SCIPY`, where the ufuncs have these names and ``scipy.stats``
calls them this way; ``tests/test_stats_distributions.py`` compares every value);
with any other SciPy, ``scipy.stats`` itself answers. :data:`SOURCE` says which.
"""

from __future__ import annotations

import math
from importlib import metadata
from typing import Any

CHECKED_SCIPY = ("1.17",)
"""SciPy minor versions whose ``scipy.stats`` this module is known to match exactly."""


def _load_ufuncs() -> dict[str, Any] | None:
    try:
        version = metadata.version("scipy")
    except metadata.PackageNotFoundError:  # pragma: no cover - scipy is a dependency
        return None
    if ".".join(version.split(".")[:2]) not in CHECKED_SCIPY:
        return None
    try:
        from scipy.special._ufuncs import _binom_cdf, _binom_pmf, _binom_sf, ndtri
    except ImportError:  # pragma: no cover - a checked version has them
        return None
    return {"pmf": _binom_pmf, "cdf": _binom_cdf, "sf": _binom_sf, "ndtri": ndtri}


_UFUNCS = _load_ufuncs()
SOURCE = "scipy.special ufuncs" if _UFUNCS is not None else "scipy.stats"
"""Which computes the values here: the ufuncs directly, or ``scipy.stats`` (the plain path)."""


def _clip(value: Any) -> float:
    return float(min(max(float(value), 0.0), 1.0))


def normal_quantile(q: float) -> float:
    """``scipy.stats.norm.ppf(q)`` for 0 < q < 1."""
    if _UFUNCS is None:
        from scipy.stats import norm

        return float(norm.ppf(q))
    if not 0.0 < q < 1.0:
        raise ValueError(f"a quantile level must lie in (0, 1), got {q}")
    return float(_UFUNCS["ndtri"](q))


def binom_pmf(k: int, n: int) -> float:
    """``scipy.stats.binom.pmf(k, n, 0.5)`` for integers k and n >= 0."""
    if _UFUNCS is None:
        from scipy.stats import binom

        return float(binom.pmf(k, n, 0.5))
    if not 0 <= k <= n:
        return 0.0
    return _clip(_UFUNCS["pmf"](float(k), float(n), 0.5))


def binom_cdf(k: int, n: int) -> float:
    """``scipy.stats.binom.cdf(k, n, 0.5)`` for integers k and n >= 0."""
    if _UFUNCS is None:
        from scipy.stats import binom

        return float(binom.cdf(k, n, 0.5))
    if k >= n:
        return 1.0
    if k < 0:
        return 0.0
    return _clip(_UFUNCS["cdf"](float(k), float(n), 0.5))


def binom_sf(k: int, n: int) -> float:
    """``scipy.stats.binom.sf(k, n, 0.5)`` for integers k and n >= 0."""
    if _UFUNCS is None:
        from scipy.stats import binom

        return float(binom.sf(k, n, 0.5))
    if k >= n:
        return 0.0
    if k < 0:
        return 1.0
    return _clip(_UFUNCS["sf"](float(k), float(n), 0.5))


def binomtest_two_sided(k: int, n: int) -> float:
    """``scipy.stats.binomtest(k, n, 0.5).pvalue`` (two-sided), for 0 <= k <= n, n >= 1."""
    if _UFUNCS is None:
        from scipy.stats import binomtest

        return float(binomtest(k, n, 0.5).pvalue)
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"binomial test needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    p = 0.5
    d = binom_pmf(k, n)
    rerr = 1 + 1e-7
    if k == p * n:
        return 1.0
    if k < p * n:
        ix = _search(lambda x: -binom_pmf(x, n), -d * rerr, math.ceil(p * n), n)
        y = n - ix + int(d * rerr == binom_pmf(ix, n))
        pval = binom_cdf(k, n) + binom_sf(n - y, n)
    else:
        ix = _search(lambda x: binom_pmf(x, n), d * rerr, 0, math.floor(p * n))
        y = ix + 1
        pval = binom_cdf(y - 1, n) + binom_sf(k - 1, n)
    return min(1.0, pval)


def _search(a: Any, d: float, lo: int, hi: int) -> int:
    """SciPy's ``_binary_search_for_binom_tst``: i in [lo, hi] with a(i) <= d < a(i + 1)."""
    while lo < hi:
        mid = lo + (hi - lo) // 2
        value = a(mid)
        if value < d:
            lo = mid + 1
        elif value > d:
            hi = mid - 1
        else:
            return mid
    return lo if a(lo) <= d else lo - 1
