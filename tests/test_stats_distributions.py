"""The paired tests' distribution functions give the very floats ``scipy.stats`` gives.

``evalsweep.stats._distributions`` calls SciPy's own ufuncs instead of importing
``scipy.stats`` (a second of start-up); every value is compared here with
``scipy.stats`` bit for bit: all (k, n) up to n = 40, then sampled k (ends, mode,
tails) up to n = 28,084, and normal quantiles across (0, 1).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom, binomtest, norm

from evalsweep.stats import _distributions as dist


def test_this_scipy_is_served_by_the_ufuncs() -> None:
    # The constraints pin a checked SciPy: the shortcut, not the fallback, is what runs.
    assert dist.SOURCE == "scipy.special ufuncs"


def _pairs() -> list[tuple[int, int]]:
    pairs = [(k, n) for n in range(1, 41) for k in range(-1, n + 2)]
    rng = np.random.default_rng(0)
    for n in (*range(41, 400, 17), 1000, 1319, 2107, 14042, 28084):
        middle = n // 2
        ks = {0, 1, n - 1, n, middle - 1, middle, middle + 1}
        ks |= {int(k) for k in rng.integers(0, n + 1, 8)}
        ks |= {int(k) for k in rng.normal(middle, n**0.5 * 2, 8).astype(int) if 0 <= k <= n}
        pairs += [(k, n) for k in sorted(ks)]
    return pairs


PAIRS = _pairs()


def test_binomial_pmf_cdf_sf_are_scipys() -> None:
    for k, n in PAIRS:
        assert dist.binom_pmf(k, n) == float(binom.pmf(k, n, 0.5)), (k, n)
        assert dist.binom_cdf(k, n) == float(binom.cdf(k, n, 0.5)), (k, n)
        assert dist.binom_sf(k, n) == float(binom.sf(k, n, 0.5)), (k, n)


def test_two_sided_binomial_test_is_scipys() -> None:
    for k, n in PAIRS:
        if 0 <= k <= n:
            assert dist.binomtest_two_sided(k, n) == float(binomtest(k, n, 0.5).pvalue), (k, n)


def test_normal_quantile_is_scipys() -> None:
    levels = [0.975, 0.8, 0.5, 0.025, 1e-12, 1 - 1e-12]
    levels += [1 - 0.05 / (2 * m) for m in range(1, 200)]
    levels += list(np.random.default_rng(1).random(500))
    for q in levels:
        assert dist.normal_quantile(float(q)) == float(norm.ppf(q)), q


def test_out_of_range_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="quantile level"):
        dist.normal_quantile(1.0)
    with pytest.raises(ValueError, match="binomial test"):
        dist.binomtest_two_sided(5, 4)
