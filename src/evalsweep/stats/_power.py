"""Power analysis: the smallest difference a paired comparison can reliably see.

A "no significant change" verdict means little unless the reader knows how large a
change the eval could have detected. These functions give Miller's (2024) Eq. 9/10
for the number of questions and the minimum detectable effect (MDE) from the
variance components, and, for binary scores, Connor's (1987) McNemar refinement
driven by the discordance rate d = (b + c) / n, which is what the reference's MDE
table is built from. Defaults: two-sided alpha = .05, power = .80.
"""

from __future__ import annotations

import functools
import math

from scipy.optimize import brentq

from evalsweep.stats._distributions import normal_quantile


@functools.lru_cache(maxsize=256)  # a sweep asks for a few (alpha, power) pairs many times
def _z_sum(alpha: float, power: float) -> tuple[float, float]:
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    return normal_quantile(1.0 - alpha / 2.0), normal_quantile(power)


def _variance(omega2: float, sigma2_a: float, sigma2_b: float, k_a: int, k_b: int) -> float:
    if omega2 < 0 or sigma2_a < 0 or sigma2_b < 0 or k_a < 1 or k_b < 1:
        raise ValueError("variances must be >= 0 and sample counts K >= 1")
    return omega2 + sigma2_a / k_a + sigma2_b / k_b


def _connor_mde(n: int, discordance: float, z_alpha: float, z_beta: float) -> float:
    """Solve Connor's n = (z_a*sqrt(d) + z_b*sqrt(d - D^2))^2 / D^2 for D."""
    if discordance == 0.0:
        return 0.0
    root_d = math.sqrt(discordance)

    def gap(effect: float) -> float:
        return (
            z_alpha * root_d
            + z_beta * math.sqrt(max(0.0, discordance - effect**2))
            - (effect * math.sqrt(n))
        )

    if gap(root_d) >= 0.0:
        # So few questions (n <= z_alpha^2) that no effect within reach solves the
        # equation; fall back to the first-order formula, which is then > sqrt(d).
        return (z_alpha + z_beta) * math.sqrt(discordance / n)
    return float(brentq(gap, 0.0, root_d, xtol=1e-14, rtol=1e-12))


def minimum_detectable_effect(
    n: int,
    *,
    discordance: float | None = None,
    omega2: float | None = None,
    sigma2_a: float = 0.0,
    sigma2_b: float = 0.0,
    k_a: int = 1,
    k_b: int = 1,
    alpha: float = 0.05,
    power: float = 0.80,
) -> float:
    """The smallest true difference a two-sided paired test detects with given power.

    Give exactly one of ``discordance`` (binary scores) or ``omega2`` (any scores).

    Args:
        n: number of paired questions.
        discordance: binary case, d = (b + c) / n, the share of questions on which
            the two checkpoints disagree; uses Connor's refinement of
            ``(z_a + z_b) * sqrt(d / n)`` (the reference's MDE table).
        omega2: Miller's Eq. 10: Var(x_A) + Var(x_B) - 2 Cov(x_A, x_B), the
            variance of the per-question difference in conditional means. To use an
            observed comparison, pass the sample variance of the differences d_i
            (then leave the sigma terms at 0: they are already inside it).
        sigma2_a: mean within-question answer variance of the baseline.
        sigma2_b: the same for the candidate.
        k_a: answers averaged per question for the baseline (Miller's K).
        k_b: the same for the candidate.
        alpha: two-sided significance level (use alpha / m for a Bonferroni family).
        power: probability of detecting an effect of the returned size.

    Returns:
        The MDE in score units (0.05 = 5 percentage points).

    Raises:
        ValueError: both or neither of discordance/omega2, n < 1, or out-of-range
            parameters.
    """
    if (discordance is None) == (omega2 is None):
        raise ValueError("give exactly one of discordance= or omega2=")
    if n < 1:
        raise ValueError(f"the MDE needs n >= 1 questions, got {n}")
    z_alpha, z_beta = _z_sum(alpha, power)
    if discordance is not None:
        if not 0.0 <= discordance <= 1.0:
            raise ValueError(f"discordance must lie in [0, 1], got {discordance}")
        return _connor_mde(n, discordance, z_alpha, z_beta)
    assert omega2 is not None
    variance = _variance(omega2, sigma2_a, sigma2_b, k_a, k_b)
    return (z_alpha + z_beta) * math.sqrt(variance / n)


def questions_needed(
    effect: float,
    *,
    omega2: float,
    sigma2_a: float = 0.0,
    sigma2_b: float = 0.0,
    k_a: int = 1,
    k_b: int = 1,
    alpha: float = 0.05,
    power: float = 0.80,
) -> float:
    """Miller's Eq. 9: paired questions needed to detect ``effect`` (not rounded up).

    Arguments are as for :func:`minimum_detectable_effect`; ``effect`` must be > 0.
    """
    if effect <= 0:
        raise ValueError(f"the effect to detect must be > 0, got {effect}")
    z_alpha, z_beta = _z_sum(alpha, power)
    variance = _variance(omega2, sigma2_a, sigma2_b, k_a, k_b)
    return (z_alpha + z_beta) ** 2 * variance / effect**2
