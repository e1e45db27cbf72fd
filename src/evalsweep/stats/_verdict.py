"""The verdict rule: turn an adjusted p-value and a difference into one word.

Users read the verdict, not the p-value, so the rule is deliberately plain and in
one place: a difference counts only when its multiplicity-adjusted p-value clears
alpha and, optionally, its size clears a minimum practical effect. The direction
is read through ``higher_is_better`` so that a drop in, say, perplexity is an
improvement. The confidence interval shown beside a verdict is unadjusted and for
information only; at the margin the two can disagree, and the verdict follows
the adjusted p-value.
"""

from __future__ import annotations

from enum import StrEnum

DEFAULT_ALPHA = 0.05
"""The significance level verdicts use unless told otherwise (family-wise for headline rows,
the false-discovery rate q for subject rows)."""


class Verdict(StrEnum):
    """What a paired comparison says about the candidate against the baseline."""

    IMPROVEMENT = "improvement"
    REGRESSION = "regression"
    NO_SIGNIFICANT_CHANGE = "no significant change"


def decide_verdict(
    delta: float,
    p_adjusted: float,
    *,
    higher_is_better: bool = True,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = 0.0,
) -> Verdict:
    """Apply the reference's verdict rule to one test.

    Args:
        delta: mean(candidate) - mean(baseline), in score units.
        p_adjusted: the test's p-value after multiplicity adjustment (the raw
            p-value when the test stands alone).
        higher_is_better: False for metrics where a lower score is better.
        alpha: significance level (the FDR level q for a BH family).
        min_effect: smallest oriented difference worth a verdict; 0 means pure
            significance.

    Returns:
        IMPROVEMENT or REGRESSION when significant and large enough, otherwise
        NO_SIGNIFICANT_CHANGE.
    """
    gain = delta if higher_is_better else -delta
    if p_adjusted <= alpha:
        if gain > 0 and gain >= min_effect:
            return Verdict.IMPROVEMENT
        if gain < 0 and -gain >= min_effect:
            return Verdict.REGRESSION
    return Verdict.NO_SIGNIFICANT_CHANGE
