"""Sweep-level comparison: pairing rows, multiplicity families, verdicts and notes.

Rows are built from 2x2 counts whose exact McNemar p-values are the reference's
T2 vectors, so the expected adjusted p-values can be written down by hand.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalsweep.errors import ComparisonError
from evalsweep.stats import (
    Comparison,
    ScoreSet,
    Verdict,
    adjust,
    compare_pairs,
    compare_sweep,
    decide_verdict,
    minimum_detectable_effect,
)

P_45_75 = 0.00784659  # exact McNemar p for (b, c) = (45, 75), reference T2
P_120_150 = 0.0773894  # and for (120, 150)
EXACT = 1e-6


def pair(
    task: str,
    worse: int,
    better: int,
    *,
    both: int = 100,
    neither: int = 100,
    metric: str = "acc",
    subject: str | None = None,
    higher_is_better: bool = True,
    baseline: str = "base",
    candidate: str = "cand",
) -> list[ScoreSet]:
    """Baseline and candidate rows whose 2x2 table is (both, worse, better, neither)."""
    a = [1.0] * both + [1.0] * worse + [0.0] * better + [0.0] * neither
    b = [1.0] * both + [0.0] * worse + [1.0] * better + [0.0] * neither
    keys = [f"{task}/{subject}/{i}" for i in range(len(a))]
    return [
        ScoreSet(name, task, metric, subject, higher_is_better, dict(zip(keys, s, strict=True)))
        for name, s in ((baseline, a), (candidate, b))
    ]


def flipped(base: ScoreSet, name: str, worse: int, better: int) -> ScoreSet:
    """A candidate row that loses ``worse`` of the baseline's right answers and gains ``better``."""
    right = [k for k, v in base.scores.items() if v == 1.0][:worse]
    wrong = [k for k, v in base.scores.items() if v == 0.0][:better]
    changes = {k: 0.0 for k in right} | {k: 1.0 for k in wrong}
    return replace(base, checkpoint=name, scores={**base.scores, **changes})


def by_task(rows: list[Comparison]) -> dict[str, Comparison]:
    return {row.task: row for row in rows}


# --- the verdict rule ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("delta", "p_adjusted", "higher_is_better", "min_effect", "expected"),
    [
        (0.02, 0.01, True, 0.0, Verdict.IMPROVEMENT),
        (-0.02, 0.01, True, 0.0, Verdict.REGRESSION),
        (0.02, 0.01, False, 0.0, Verdict.REGRESSION),
        (-0.02, 0.01, False, 0.0, Verdict.IMPROVEMENT),
        (0.02, 0.05, True, 0.0, Verdict.IMPROVEMENT),  # p_adj <= alpha counts
        (0.02, 0.0501, True, 0.0, Verdict.NO_SIGNIFICANT_CHANGE),
        (0.02, 0.01, True, 0.03, Verdict.NO_SIGNIFICANT_CHANGE),
        (-0.03, 0.01, True, 0.03, Verdict.REGRESSION),
        (0.0, 0.0, True, 0.0, Verdict.NO_SIGNIFICANT_CHANGE),
    ],
)
def test_verdict_rule_follows_the_reference(
    delta: float, p_adjusted: float, higher_is_better: bool, min_effect: float, expected: Verdict
) -> None:
    verdict = decide_verdict(
        delta, p_adjusted, higher_is_better=higher_is_better, min_effect=min_effect
    )
    assert verdict is expected


def test_verdicts_read_as_the_reference_words() -> None:
    assert [v.value for v in Verdict] == ["improvement", "regression", "no significant change"]


# --- multiplicity families -----------------------------------------------------------


def test_headline_rows_share_one_holm_family() -> None:
    rows = pair("arc", 45, 75) + pair("hellaswag", 75, 45) + pair("winogrande", 120, 150)
    result = by_task(compare_sweep(rows, "base"))
    assert result["arc"].p_value == pytest.approx(P_45_75, abs=EXACT)
    assert result["arc"].p_adjusted == pytest.approx(3 * P_45_75, abs=EXACT)
    assert result["hellaswag"].p_adjusted == pytest.approx(3 * P_45_75, abs=EXACT)
    assert result["winogrande"].p_adjusted == pytest.approx(P_120_150, abs=EXACT)
    assert result["arc"].verdict is Verdict.IMPROVEMENT
    assert result["hellaswag"].verdict is Verdict.REGRESSION
    assert result["winogrande"].verdict is Verdict.NO_SIGNIFICANT_CHANGE


def test_rows_against_the_previous_checkpoint_join_the_same_holm_family() -> None:
    """A run of three: step2 and step3 against step1, and step3 against step2, are one family."""
    step1, step2 = pair("arc", 45, 75, baseline="step1", candidate="step2")
    step3 = flipped(step1, "step3", 75, 45)
    rows = compare_pairs(
        [step1, step2, step3], [("step1", "step2"), ("step1", "step3"), ("step2", "step3")]
    )
    assert [(c.baseline, c.candidate) for c in rows] == [
        ("step1", "step2"), ("step1", "step3"), ("step2", "step3"),
    ]  # fmt: skip
    raw = [c.p_value for c in rows]
    assert [c.p_adjusted for c in rows] == pytest.approx(adjust(raw, "holm"), abs=EXACT)
    assert raw[:2] == pytest.approx([P_45_75, P_45_75], abs=EXACT)
    assert raw[2] < P_45_75 / 3  # step2 -> step3 drops most: first in Holm's order (x3)
    assert rows[2].p_adjusted == pytest.approx(3 * raw[2], abs=EXACT)
    assert rows[2].delta < 0 and rows[2].verdict is Verdict.REGRESSION


def test_lower_is_better_metric_turns_a_rise_into_a_regression() -> None:
    rows = pair("arc", 45, 75, metric="error_rate", higher_is_better=False)
    (row,) = compare_sweep(rows, "base")
    assert row.delta > 0
    assert row.verdict is Verdict.REGRESSION


def test_subject_rows_use_bh_and_stay_out_of_the_headline_family() -> None:
    rows = pair("mmlu", 45, 75)
    for k in (10, 9, 8, 7):  # exact McNemar p = 2 / 2^k
        rows += pair("mmlu", 0, k, subject=f"subject_{k}")
    result = compare_sweep(rows, "base")
    headline = [r for r in result if r.subject is None]
    subjects = {r.subject: r for r in result if r.subject is not None}
    assert headline[0].p_adjusted == pytest.approx(P_45_75, abs=EXACT)  # a family of one
    expected_bh = {"subject_10": 0.0078125, "subject_9": 0.0078125}
    expected_bh |= {"subject_8": 0.0104167, "subject_7": 0.015625}
    for name, expected in expected_bh.items():
        assert subjects[name].p_adjusted == pytest.approx(expected, abs=EXACT)
    assert subjects["subject_9"].p_adjusted < adjust([2 / 2**k for k in (10, 9, 8, 7)], "holm")[1]


def test_a_subject_significant_alone_is_not_after_bh_over_57_subjects() -> None:
    rows = pair("mmlu", 2, 10, subject="subject_0")
    for i in range(1, 57):
        rows += pair("mmlu", 5, 5, subject=f"subject_{i}")
    result = {r.subject: r for r in compare_sweep(rows, "base")}
    assert result["subject_0"].p_value < 0.05
    assert result["subject_0"].p_adjusted == pytest.approx(1.0)
    assert result["subject_0"].verdict is Verdict.NO_SIGNIFICANT_CHANGE


def test_by_adjustment_can_be_chosen_for_subject_rows() -> None:
    rows = [row for k in (10, 9, 8, 7) for row in pair("mmlu", 0, k, subject=f"s{k}")]
    result = compare_sweep(rows, "base", subject_method="by")
    raw = [r.p_value for r in result]
    assert [r.p_adjusted for r in result] == pytest.approx(adjust(raw, "by"), abs=1e-12)


def test_families_span_all_candidates_by_default() -> None:
    base = pair("arc", 0, 0, both=200, neither=200)[0]
    rows = [base, flipped(base, "c1", 45, 75), flipped(base, "c2", 120, 150)]
    report = {r.candidate: r for r in compare_sweep(rows, "base")}
    assert report["c1"].p_adjusted == pytest.approx(2 * P_45_75, abs=EXACT)
    assert report["c2"].p_adjusted == pytest.approx(P_120_150, abs=EXACT)
    per_candidate = {r.candidate: r for r in compare_sweep(rows, "base", scope="candidate")}
    assert per_candidate["c1"].p_adjusted == pytest.approx(P_45_75, abs=EXACT)
    assert per_candidate["c2"].p_adjusted == pytest.approx(P_120_150, abs=EXACT)


def test_row_mde_is_at_the_bonferroni_level_of_its_family() -> None:
    rows = pair("arc", 45, 75) + pair("hellaswag", 75, 45) + pair("winogrande", 120, 150)
    row = by_task(compare_sweep(rows, "base"))["arc"]
    assert row.mde == pytest.approx(
        minimum_detectable_effect(320, discordance=120 / 320, alpha=0.05 / 3), abs=1e-12
    )


# --- pairing and refusals ------------------------------------------------------------


def test_rows_are_paired_by_doc_key_not_by_position() -> None:
    scores = {f"q{i}": float(i % 2) for i in range(40)}
    reversed_scores = dict(reversed(list(scores.items())))
    rows = [
        ScoreSet("base", "arc", "acc", None, True, scores),
        ScoreSet("cand", "arc", "acc", None, True, reversed_scores),
    ]
    (row,) = compare_sweep(rows, "base")
    assert row.delta == 0.0
    assert row.p_value == 1.0


def test_rows_only_one_checkpoint_has_are_skipped() -> None:
    rows = pair("arc", 45, 75) + pair("piqa", 5, 5)[:1] + pair("boolq", 5, 5)[1:]
    assert [r.task for r in compare_sweep(rows, "base")] == ["arc"]


def test_mismatched_doc_keys_are_refused_naming_the_task() -> None:
    base, cand = pair("gsm8k", 10, 12, metric="exact_match")
    trimmed = replace(cand, scores=dict(list(cand.scores.items())[1:]))
    with pytest.raises(ComparisonError, match=r"gsm8k.*1 doc keys only in the baseline"):
        compare_sweep([base, trimmed], "base")


def test_missing_baseline_is_refused() -> None:
    with pytest.raises(ComparisonError, match="baseline 'main' has no scores"):
        compare_sweep(pair("arc", 1, 2), "main")


def test_duplicate_rows_are_refused() -> None:
    rows = pair("arc", 1, 2)
    with pytest.raises(ComparisonError, match="two score sets"):
        compare_sweep(rows + rows[:1], "base")


def test_disagreeing_higher_is_better_is_refused() -> None:
    base, cand = pair("arc", 1, 2)
    flipped = replace(cand, higher_is_better=False)
    with pytest.raises(ComparisonError, match="higher is better"):
        compare_sweep([base, flipped], "base")


def test_out_of_range_scores_are_refused_naming_the_row() -> None:
    base, cand = pair("arc", 1, 2)
    bad = replace(cand, scores={**cand.scores, "arc/None/0": 2.0})
    with pytest.raises(ComparisonError, match=r"'cand' vs 'base' on task 'arc'.*\[0, 1\]"):
        compare_sweep([base, bad], "base")


def test_candidates_come_back_in_order_of_first_appearance() -> None:
    rows = pair("arc", 1, 2, candidate="z") + pair("arc", 1, 2, candidate="a")[1:]
    rows += pair("piqa", 1, 2, candidate="a") + pair("piqa", 1, 2, candidate="z")[1:]
    assert [(r.candidate, r.task) for r in compare_sweep(rows, "base")] == [
        ("z", "arc"),
        ("z", "piqa"),
        ("a", "arc"),
        ("a", "piqa"),
    ]


# --- notes ---------------------------------------------------------------------------


NOISE = {"gsm8k": ("GSM8K", 0.017)}  # as the caller passes what the task declares


def test_gsm8k_difference_inside_label_noise_band_gets_a_note() -> None:
    rows = pair("gsm8k", 50, 65, both=955, neither=249)  # 1,319 questions, delta = +1.14pp
    (row,) = compare_sweep(rows, "base", label_noise=NOISE)
    assert row.note is not None and "within the GSM8K label-noise band (±1.7 points)" in row.note
    # Without what the task declares, stats knows nothing of the benchmark's name.
    (bare,) = compare_sweep(rows, "base")
    assert bare.note is None or "label-noise" not in bare.note


def test_gsm8k_difference_outside_label_noise_band_has_no_such_note() -> None:
    (row,) = compare_sweep(pair("gsm8k", 45, 75, both=955, neither=244), "base", label_noise=NOISE)
    assert row.delta == pytest.approx(30 / 1319)
    assert row.note is None or "label-noise" not in row.note


def test_label_noise_note_is_only_for_the_task_that_declares_it() -> None:
    (row,) = compare_sweep(pair("arc", 50, 65, both=955, neither=249), "base", label_noise=NOISE)
    assert row.note is None or "label-noise" not in row.note


def test_no_change_with_a_wide_ci_is_marked_inconclusive() -> None:
    (row,) = compare_sweep(pair("arc", 10, 12, both=40, neither=38), "base")
    assert row.verdict is Verdict.NO_SIGNIFICANT_CHANGE
    assert row.note is not None and "inconclusive" in row.note


def test_confident_no_change_carries_no_note() -> None:
    (row,) = compare_sweep(pair("arc", 0, 0, both=1000, neither=1000), "base")
    assert row.verdict is Verdict.NO_SIGNIFICANT_CHANGE
    assert row.note is None


def test_significant_rows_are_never_marked_inconclusive() -> None:
    (row,) = compare_sweep(pair("arc", 45, 75, both=955, neither=244), "base")
    assert row.verdict is Verdict.IMPROVEMENT
    assert row.ci_high > 0.01  # the CI is wide, but the difference is significant
    assert row.note is None


def test_min_effect_turns_a_small_significant_difference_into_no_change() -> None:
    rows = pair("gsm8k", 45, 75, both=955, neither=244)
    assert compare_sweep(rows, "base")[0].verdict is Verdict.IMPROVEMENT
    assert compare_sweep(rows, "base", min_effect=0.03)[0].verdict is Verdict.NO_SIGNIFICANT_CHANGE


def test_result_does_not_depend_on_the_order_of_doc_keys() -> None:
    base = {f"q{i}": (i * 37 % 101) / 100 for i in range(150)}
    cand = {f"q{i}": (i * 53 % 97) / 96 for i in range(150)}
    in_order = [
        ScoreSet("base", "humaneval", "pass@5", None, True, base),
        ScoreSet("cand", "humaneval", "pass@5", None, True, cand),
    ]
    shuffled = [
        replace(row, scores=dict(sorted(row.scores.items(), key=lambda kv: kv[1])))
        for row in in_order
    ]
    assert compare_sweep(in_order, "base") == compare_sweep(shuffled, "base")


# --- output --------------------------------------------------------------------------


def test_to_dict_has_exactly_the_comparison_fields_and_is_json_ready() -> None:
    (row,) = compare_sweep(pair("mmlu", 45, 75, subject="anatomy"), "base")
    data = row.to_dict()
    assert list(data) == [
        "baseline",
        "candidate",
        "task",
        "metric",
        "subject",
        "delta",
        "ci_low",
        "ci_high",
        "p_value",
        "p_adjusted",
        "verdict",
        "n",
        "mde",
        "note",
        "test",
    ]
    assert data["verdict"] == "improvement"
    assert data["subject"] == "anatomy"
    assert json.loads(json.dumps(data, allow_nan=False)) == data


# --- properties ----------------------------------------------------------------------

counts = st.tuples(st.integers(0, 40), st.integers(0, 40), st.integers(0, 30), st.integers(0, 30))


@settings(max_examples=30, deadline=None)
@given(tables=st.lists(counts, min_size=1, max_size=4))
def test_swapping_baseline_and_candidate_mirrors_every_row(
    tables: list[tuple[int, int, int, int]],
) -> None:
    rows: list[ScoreSet] = []
    for i, (worse, better, both, neither) in enumerate(tables):
        if worse + better + both + neither == 0:
            both = 1
        rows += pair(f"task{i}", worse, better, both=both, neither=neither)
    forward = compare_sweep(rows, "base")
    backward = compare_sweep(rows, "cand")
    mirror = {
        Verdict.IMPROVEMENT: Verdict.REGRESSION,
        Verdict.REGRESSION: Verdict.IMPROVEMENT,
        Verdict.NO_SIGNIFICANT_CHANGE: Verdict.NO_SIGNIFICANT_CHANGE,
    }
    for f, b in zip(forward, backward, strict=True):
        assert (b.baseline, b.candidate, b.task) == (f.candidate, f.baseline, f.task)
        assert b.delta == -f.delta
        assert b.p_value == pytest.approx(f.p_value, abs=1e-12)
        assert b.p_adjusted == pytest.approx(f.p_adjusted, abs=1e-12)
        assert b.verdict is mirror[f.verdict]


@settings(max_examples=30, deadline=None)
@given(
    scores=st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=50),
    tasks=st.integers(1, 3),
)
def test_a_checkpoint_compared_with_itself_shows_no_change(scores: list[float], tasks: int) -> None:
    mapping = {f"q{i}": s for i, s in enumerate(scores)}
    rows = [
        ScoreSet(name, f"task{t}", "acc", None, True, mapping)
        for t in range(tasks)
        for name in ("base", "rerun")
    ]
    for row in compare_sweep(rows, "base"):
        assert (row.delta, row.p_value, row.p_adjusted) == (0.0, 1.0, 1.0)
        assert row.verdict is Verdict.NO_SIGNIFICANT_CHANGE


def test_continuous_rows_take_the_sign_flip_test_in_the_same_holm_family() -> None:
    """TruthfulQA MC2's per-question probability mass is not 0/1: its row uses the paired
    sign-flip test, is adjusted with the binary rows, and gets the same verdict rules."""
    import random

    rnd = random.Random(3)
    base = {str(i): rnd.random() for i in range(200)}
    cand = {k: min(1.0, v + 0.08 + rnd.uniform(-0.05, 0.05)) for k, v in base.items()}
    continuous = [
        ScoreSet(name, "truthfulqa_mc2", "acc", None, True, scores)
        for name, scores in (("base", base), ("cand", cand))
    ]
    rows = compare_sweep([*pair("winogrande", 45, 75), *continuous], "base")
    by_task = {row.task: row for row in rows}
    assert by_task["winogrande"].test == "mcnemar-exact"
    assert by_task["truthfulqa_mc2"].test == "sign-flip-monte-carlo"
    assert by_task["truthfulqa_mc2"].verdict is Verdict.IMPROVEMENT
    # Holm over the two headline rows: the larger p is not adjusted below itself.
    ps = sorted(row.p_value for row in rows)
    assert sorted(row.p_adjusted for row in rows) == pytest.approx(
        [2 * ps[0], max(2 * ps[0], ps[1])]
    )
    assert by_task["truthfulqa_mc2"].to_dict()["test"] == "sign-flip-monte-carlo"
