"""Sweep-level comparison: every candidate checkpoint against the baseline.

This is what the CLI calls. It pairs up score sets by (task, metric, subject),
refuses to compare checkpoints that answered different questions, runs the paired
test for each row, and only then looks at the whole report: headline rows form one
Holm family (release-blocking verdicts need family-wise error control) and MMLU
subject rows form one Benjamini-Hochberg family (drill-downs tolerate a controlled
share of false discoveries). Following the statistics reference, by default each
family spans every candidate in the report. Verdicts use the adjusted p-values;
the MDE of each row is at the Bonferroni level alpha / m of its family.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evalsweep._records import encode, section
from evalsweep.errors import ComparisonError
from evalsweep.stats._adjust import adjust
from evalsweep.stats._paired import PairedComparison, paired_compare
from evalsweep.stats._verdict import DEFAULT_ALPHA, Verdict, decide_verdict

LabelNoise = Mapping[str, tuple[str, float]]
"""Per task name, the benchmark's known label noise: (its name as a person reads it, the
band within which disputed labels alone could move a paired difference). Tasks declare it
(``Task.label_noise``); the caller passes it in."""

FamilyScope = Literal["report", "candidate"]
Family = tuple[str, ...]


@dataclass(frozen=True)
class ScoreSet:
    """One checkpoint's per-question scores for one (task, metric, subject) row."""

    checkpoint: str
    task: str
    metric: str
    subject: str | None
    """None for the task's headline metric; a subject name for an MMLU subject row."""
    higher_is_better: bool
    scores: Mapping[str, float]
    """Document key -> per-question score in [0, 1]."""


@dataclass(frozen=True)
class Comparison:
    """One row of a sweep report: candidate against baseline on one metric."""

    baseline: str
    candidate: str
    task: str
    metric: str
    subject: str | None
    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    p_adjusted: float
    verdict: Verdict
    n: int
    mde: float
    note: str | None
    test: str | None = section()
    """The paired test behind ``p_value`` (:attr:`PairedComparison.method`): exact
    McNemar for 0/1 scores, the sign-flip permutation test for continuous ones."""

    def to_dict(self) -> dict[str, str | float | int | None]:
        """The row as JSON-ready plain values, one key per field (``test`` only when known:
        documents written before it was recorded read back as they were)."""
        data: dict[str, str | float | int | None] = encode(self)
        return data


@dataclass(frozen=True)
class _Pair:
    baseline: ScoreSet
    candidate: ScoreSet
    family: Family


def _row_name(row: ScoreSet) -> str:
    suffix = f", subject {row.subject!r}" if row.subject is not None else ""
    return f"task {row.task!r} (metric {row.metric!r}{suffix})"


def _family(row: ScoreSet, scope: FamilyScope) -> Family:
    kind = "headline" if row.subject is None else "subject"
    if scope == "report":
        return (kind,)
    if row.subject is None:
        return (kind, row.checkpoint)
    return (kind, row.checkpoint, row.task, row.metric)


def _pair_up(
    score_sets: Sequence[ScoreSet], pairs: Sequence[tuple[str, str]], scope: FamilyScope
) -> list[_Pair]:
    """Match each (baseline, candidate) pair's rows with the same (task, metric, subject)."""
    rows: dict[tuple[str, str, str, str | None], ScoreSet] = {}
    for row in score_sets:
        key = (row.checkpoint, row.task, row.metric, row.subject)
        if key in rows:
            raise ComparisonError(
                f"checkpoint {row.checkpoint!r} has two score sets for {_row_name(row)}"
            )
        rows[key] = row
    present = {row.checkpoint for row in score_sets}
    for baseline, _ in pairs:
        if baseline not in present:
            raise ComparisonError(
                f"baseline {baseline!r} has no scores; checkpoints present: {sorted(present)}"
            )
    matched = []
    for baseline, candidate in pairs:
        for row in score_sets:
            if row.checkpoint != candidate or candidate == baseline:
                continue
            base = rows.get((baseline, row.task, row.metric, row.subject))
            if base is None:
                continue
            matched.append(_Pair(base, row, _family(row, scope)))
    for pair in matched:
        base, row = pair.baseline, pair.candidate
        if base.higher_is_better != row.higher_is_better:
            raise ComparisonError(
                f"{row.checkpoint!r} and baseline {base.checkpoint!r} disagree on whether "
                f"higher is better for {_row_name(row)}"
            )
        only_base = base.scores.keys() - row.scores.keys()
        only_cand = row.scores.keys() - base.scores.keys()
        if only_base or only_cand:
            example = sorted(only_base or only_cand)[0]
            raise ComparisonError(
                f"cannot compare {row.checkpoint!r} with baseline {base.checkpoint!r} on "
                f"{_row_name(row)}: {len(only_base)} doc keys only in the baseline, "
                f"{len(only_cand)} only in the candidate (e.g. {example!r})"
            )
    return matched


def _compare_row(
    pair: _Pair, *, alpha: float, confidence: float, power: float, seed: int
) -> PairedComparison:
    keys = sorted(pair.baseline.scores)  # a canonical order keeps seeded resampling stable
    try:
        return paired_compare(
            [pair.baseline.scores[k] for k in keys],
            [pair.candidate.scores[k] for k in keys],
            confidence=confidence,
            seed=seed,
            alpha=alpha,
            power=power,
        )
    except ComparisonError as exc:
        raise ComparisonError(
            f"{pair.candidate.checkpoint!r} vs {pair.baseline.checkpoint!r} on "
            f"{_row_name(pair.candidate)}: {exc}"
        ) from None


def label_noise_note(noise: tuple[str, float] | None, delta: float) -> str | None:
    """The caution a difference within its benchmark's label-noise band carries, or None.

    ``noise`` is (benchmark, band): e.g. about 1.7% of GSM8K's problems have disputed
    labels; on shared labels they can move a paired delta by up to about that much, so a
    smaller difference (even a significant one) should be checked against them.
    """
    from evalsweep._numbers import size

    if noise is not None and abs(delta) <= noise[1]:
        return (
            f"within the {noise[0]} label-noise band (±{size(noise[1])}): check whether the "
            "discordant items concentrate in disputed problems"
        )
    return None


def _note(
    noise: tuple[str, float] | None,
    delta: float,
    ci: tuple[float, float],
    verdict: Verdict,
    margin: float,
) -> str | None:
    from evalsweep._numbers import size

    notes = []
    caution = label_noise_note(noise, delta)
    if caution:
        notes.append(caution)
    if verdict is Verdict.NO_SIGNIFICANT_CHANGE and (ci[0] < -margin or ci[1] > margin):
        notes.append(f"inconclusive: the CI reaches beyond ±{size(margin)}")
    return "; ".join(notes) or None


def compare_sweep(
    score_sets: Sequence[ScoreSet], baseline: str, **settings: Any
) -> list[Comparison]:
    """Compare every other checkpoint with ``baseline`` on every row both have
    (:func:`compare_pairs` with one pair per candidate; the same settings)."""
    candidates = dict.fromkeys(row.checkpoint for row in score_sets if row.checkpoint != baseline)
    if not any(row.checkpoint == baseline for row in score_sets):
        present = sorted({row.checkpoint for row in score_sets})
        raise ComparisonError(
            f"baseline {baseline!r} has no scores; checkpoints present: {present}"
        )
    return compare_pairs(score_sets, [(baseline, c) for c in candidates], **settings)


def compare_pairs(
    score_sets: Sequence[ScoreSet],
    pairs: Sequence[tuple[str, str]],
    *,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = 0.0,
    confidence: float = 0.95,
    power: float = 0.80,
    seed: int = 0,
    practical_margin: float = 0.01,
    subject_method: Literal["bh", "by"] = "bh",
    scope: FamilyScope = "report",
    label_noise: LabelNoise | None = None,
) -> list[Comparison]:
    """Compare each ``(baseline, candidate)`` pair on every row both have, all pairs'
    rows under one multiplicity control (a training run: each checkpoint against the
    first and against the one before it, in one Holm family of headline rows).

    Args:
        score_sets: one record per (checkpoint, task, metric, subject).
        pairs: (baseline, candidate) checkpoint labels, in the order rows are wanted.
        alpha: family-wise level for headline rows and FDR level q for subject rows.
        min_effect: smallest oriented difference that earns a verdict.
        confidence: level of the unadjusted per-row CI.
        power: power at which each row's MDE is computed.
        seed: seed for Monte Carlo tests and bootstrap CIs.
        practical_margin: a "no significant change" row whose CI reaches beyond
            ±margin is noted as inconclusive.
        subject_method: "bh", or "by" for arbitrary dependence between subjects.
        scope: "report" (the reference's default) puts all headline rows of the
            report in one Holm family and all subject rows in one BH family;
            "candidate" uses one Holm family per candidate and one BH family per
            (candidate, task, metric).
        label_noise: per task, its benchmark's label noise (:data:`LabelNoise`): a
            difference within the band is noted.

    Returns:
        One :class:`Comparison` per paired row, candidates in order of first
        appearance and rows in input order.

    Raises:
        ComparisonError: missing baseline, duplicate rows, rows whose doc keys
            differ, disagreeing ``higher_is_better``, or unusable scores.
    """
    matched = _pair_up(score_sets, pairs, scope)
    sizes = Counter(pair.family for pair in matched)
    # Each row is computed on its own (its own seeded resampling), so the order is free:
    # rows on equally many questions go one after another and share their bootstrap indices.
    by_size = sorted(range(len(matched)), key=lambda i: len(matched[i].baseline.scores))
    computed: dict[int, PairedComparison | ComparisonError] = {}
    for i in by_size:
        try:
            computed[i] = _compare_row(
                matched[i],
                alpha=alpha / sizes[matched[i].family],
                confidence=confidence,
                power=power,
                seed=seed,
            )
        except ComparisonError as exc:  # raised below in row order, as one at a time would
            computed[i] = exc
    results = []
    for i in range(len(matched)):
        found = computed[i]
        if isinstance(found, ComparisonError):
            raise found
        results.append(found)

    members: defaultdict[Family, list[int]] = defaultdict(list)
    for index, pair in enumerate(matched):
        members[pair.family].append(index)
    adjusted = [0.0] * len(matched)
    for family, indices in members.items():
        method = "holm" if family[0] == "headline" else subject_method
        for index, p in zip(
            indices, adjust([results[i].p_value for i in indices], method), strict=True
        ):
            adjusted[index] = p

    comparisons = []
    for pair, result, p_adj in zip(matched, results, adjusted, strict=True):
        row = pair.candidate
        verdict = decide_verdict(
            result.delta,
            p_adj,
            higher_is_better=row.higher_is_better,
            alpha=alpha,
            min_effect=min_effect,
        )
        comparisons.append(
            Comparison(
                baseline=pair.baseline.checkpoint,
                candidate=row.checkpoint,
                task=row.task,
                metric=row.metric,
                subject=row.subject,
                delta=result.delta,
                ci_low=result.ci_low,
                ci_high=result.ci_high,
                p_value=result.p_value,
                p_adjusted=p_adj,
                verdict=verdict,
                n=result.n,
                mde=result.mde,
                note=_note(
                    (label_noise or {}).get(row.task),
                    result.delta,
                    (result.ci_low, result.ci_high),
                    verdict,
                    practical_margin,
                ),
                test=result.method,
            )
        )
    order = {name: i for i, name in enumerate(dict.fromkeys(r.checkpoint for r in score_sets))}
    comparisons.sort(key=lambda c: order[c.candidate])  # stable: rows keep input order
    return comparisons
