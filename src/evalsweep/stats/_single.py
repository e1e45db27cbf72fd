"""One checkpoint's score on one benchmark: mean, standard error and interval.

The report shows every score as ``score (SE) [CI95], n`` before any comparison, so
readers can see how much a number could move on a re-draw of the questions. The
SE is the CLT one with the n-1 divisor, identical to lm-evaluation-harness's
``mean_stderr``; the interval is Wilson for 0/1 scores (sane at 0% and 100%,
where Wald collapses) and mean +- t * SE for fractional ones. Grouped questions
get the clustered SE with Inspect's C/(C-1) factor, and MMLU-style aggregates the
stratified SE, which matches lm-eval's pooled SE.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evalsweep.errors import ComparisonError
from evalsweep.stats._validate import Scores, as_scores, is_binary

BinaryInterval = Literal["wilson", "clopper-pearson"]


@dataclass(frozen=True)
class ScoreSummary:
    """A single checkpoint's mean score with its uncertainty."""

    mean: float
    se: float
    ci_low: float
    ci_high: float
    n: int
    ci_method: str
    """"wilson", "clopper-pearson", "t" or "t-clustered"."""


def _clustered_se(scores: np.ndarray, clusters: Sequence[Hashable]) -> tuple[float, int]:
    """Miller's Appendix A sandwich SE times Inspect's C/(C-1); returns (se, C)."""
    if len(clusters) != scores.size:
        raise ComparisonError(f"got {len(clusters)} cluster ids for {scores.size} scores")
    residuals = scores - scores.mean()
    totals: dict[Hashable, float] = {}
    for cluster, value in zip(clusters, residuals, strict=True):
        totals[cluster] = totals.get(cluster, 0.0) + float(value)
    count = len(totals)
    if count < 2:
        raise ComparisonError("a clustered standard error needs at least 2 clusters")
    squared = sum(total**2 for total in totals.values())
    return math.sqrt(count / (count - 1) * squared) / scores.size, count


def summarize_scores(
    scores: Scores,
    *,
    confidence: float = 0.95,
    clusters: Sequence[Hashable] | None = None,
    binary_interval: BinaryInterval = "wilson",
) -> ScoreSummary:
    """Mean, SE and confidence interval of one checkpoint's per-question scores.

    Args:
        scores: per-question scores in [0, 1]; at least 2.
        confidence: interval level.
        clusters: optional cluster id per question (questions drawn in groups); the
            SE is then clustered and the interval uses t with C - 1 degrees of freedom.
        binary_interval: interval for unclustered 0/1 scores.

    Returns:
        A :class:`ScoreSummary`; fractional-score intervals are clipped to [0, 1].

    Raises:
        ComparisonError: fewer than 2 scores, scores outside [0, 1], or bad clusters.
    """
    from scipy.stats import binomtest, t  # here: importing scipy.stats costs a second

    values = as_scores(scores, "score")
    n = values.size
    if n < 2:
        raise ComparisonError("a standard error needs at least 2 scores")
    mean = float(values.mean())
    tail = 0.5 + confidence / 2.0
    if clusters is not None:
        se, count = _clustered_se(values, clusters)
        half = float(t.ppf(tail, count - 1)) * se
        return ScoreSummary(
            mean, se, max(0.0, mean - half), min(1.0, mean + half), n, "t-clustered"
        )
    se = float(values.std(ddof=1)) / math.sqrt(n)
    if is_binary(values):
        method = "wilson" if binary_interval == "wilson" else "exact"
        interval = binomtest(int(values.sum()), n).proportion_ci(confidence, method=method)
        return ScoreSummary(mean, se, float(interval.low), float(interval.high), n, binary_interval)
    half = float(t.ppf(tail, n - 1)) * se
    return ScoreSummary(mean, se, max(0.0, mean - half), min(1.0, mean + half), n, "t")


def stratified_se(ses: Sequence[float], sizes: Sequence[int], *, macro: bool = False) -> float:
    """SE of an aggregate over independent subtasks, sqrt(sum(w_s^2 * SE_s^2)).

    With ``macro=False`` the weights are n_s / N (a micro-average such as MMLU's
    14,042 questions); with ``macro=True`` every subtask weighs 1/k. Unlike
    lm-eval's pooled SE this stays correct for macro-averages.
    """
    se = np.asarray(ses, dtype=float)
    n = np.asarray(sizes, dtype=float)
    if se.shape != n.shape or se.ndim != 1 or se.size == 0:
        raise ComparisonError("stratified_se needs one SE per subtask size, and at least one")
    weights = np.full(se.size, 1.0 / se.size) if macro else n / n.sum()
    return float(np.sqrt(np.sum(weights**2 * se**2)))
