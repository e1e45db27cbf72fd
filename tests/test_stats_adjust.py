"""Multiplicity adjustment: Holm, Benjamini-Hochberg and Benjamini-Yekutieli.

The reference example T6 is asserted to 1e-6; the properties check the adjusted
p-values against the textbook step-down/step-up procedures and scipy's BH/BY.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from scipy.stats import false_discovery_control

from evalsweep.stats import adjust

T6 = [0.0004, 0.0021, 0.0090, 0.0170, 0.0240, 0.0310, 0.0410, 0.0620, 0.2100, 0.6800]
EXACT = 1e-6


def rejections(adjusted: list[float], alpha: float = 0.05) -> int:
    return sum(p <= alpha for p in adjusted)


def test_holm_matches_reference_example() -> None:
    expected = [0.004, 0.0189, 0.072, 0.119, 0.144, 0.155, 0.164, 0.186, 0.42, 0.68]
    adjusted = adjust(T6, "holm")
    assert adjusted == pytest.approx(expected, abs=EXACT)
    assert rejections(adjusted) == 2


def test_bh_matches_reference_example() -> None:
    expected = [0.004, 0.0105, 0.03, 0.0425, 0.048, 0.051667, 0.058571, 0.0775, 0.233333, 0.68]
    adjusted = adjust(T6, "bh")
    assert adjusted == pytest.approx(expected, abs=EXACT)
    assert rejections(adjusted) == 5


def test_by_rejects_two_in_reference_example() -> None:
    assert rejections(adjust(T6, "by")) == 2


def test_adjusted_values_come_back_in_input_order() -> None:
    shuffled = [T6[i] for i in (9, 0, 4, 2)]
    assert adjust(shuffled, "holm") == pytest.approx([0.68, 0.0016, 0.048, 0.027], abs=EXACT)
    assert adjust(shuffled, "bh") == pytest.approx([0.68, 0.0016, 0.032, 0.018], abs=EXACT)


def test_empty_family_adjusts_to_nothing() -> None:
    assert adjust([], "holm") == []
    assert adjust([], "bh") == []


def test_single_test_is_left_alone() -> None:
    assert adjust([0.03], "holm") == [0.03]
    assert adjust([0.03], "bh") == [0.03]


def test_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown adjustment method"):
        adjust([0.1], "bonferroni")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-0.01, 1.01, float("nan")])
def test_p_values_outside_unit_interval_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        adjust([0.2, bad], "holm")


p_lists = st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=60)
methods = st.sampled_from(["holm", "bh", "by"])


@given(p=p_lists, method=methods)
@example(p=[0.0] * 5 + [0.8217104548331429], method="bh")  # m * p / m once rounded below p
def test_adjusted_p_values_are_at_least_raw_and_at_most_one(p: list[float], method: str) -> None:
    adjusted = adjust(p, method)  # type: ignore[arg-type]
    assert len(adjusted) == len(p)
    for raw, adj in zip(p, adjusted, strict=True):
        assert raw <= adj <= 1.0


@given(p=p_lists, method=methods)
def test_adjustment_preserves_the_order_of_raw_p_values(p: list[float], method: str) -> None:
    adjusted = adjust(p, method)  # type: ignore[arg-type]
    for i in range(len(p)):
        for j in range(len(p)):
            if p[i] <= p[j]:
                assert adjusted[i] <= adjusted[j]


@given(p=p_lists, method=methods, data=st.data())
def test_adjustment_does_not_depend_on_input_order(
    p: list[float], method: str, data: st.DataObject
) -> None:
    order = data.draw(st.permutations(range(len(p))))
    adjusted = adjust(p, method)  # type: ignore[arg-type]
    permuted = adjust([p[i] for i in order], method)  # type: ignore[arg-type]
    assert permuted == [adjusted[i] for i in order]


@given(p=p_lists)
def test_holm_lies_between_raw_and_bonferroni(p: list[float]) -> None:
    m = len(p)
    for raw, adj in zip(p, adjust(p, "holm"), strict=True):
        assert adj <= min(1.0, m * raw) + 1e-15


@given(p=p_lists)
def test_bh_is_never_more_conservative_than_holm(p: list[float]) -> None:
    for bh, holm in zip(adjust(p, "bh"), adjust(p, "holm"), strict=True):
        assert bh <= holm + 1e-15


@given(p=p_lists, method=st.sampled_from(["bh", "by"]))
def test_bh_and_by_agree_with_scipy(p: list[float], method: str) -> None:
    expected = false_discovery_control(np.array(p), method=method)
    assert adjust(p, method) == pytest.approx(list(expected), abs=1e-12)  # type: ignore[arg-type]


def _near_any_threshold(p: list[float], thresholds: list[float]) -> bool:
    return any(abs(x - t) <= 1e-12 for x in p for t in thresholds)


@given(p=p_lists, alpha=st.sampled_from([0.01, 0.05, 0.1, 0.2]))
def test_holm_rejects_what_the_step_down_procedure_rejects(p: list[float], alpha: float) -> None:
    m = len(p)
    assume(not _near_any_threshold(p, [alpha / k for k in range(1, m + 1)]))
    rejected = set()
    for step, index in enumerate(sorted(range(m), key=lambda i: p[i])):
        if p[index] > alpha / (m - step):
            break
        rejected.add(index)
    adjusted = adjust(p, "holm")
    assert {i for i in range(m) if adjusted[i] <= alpha} == rejected


@given(p=p_lists, q=st.sampled_from([0.01, 0.05, 0.1, 0.2]))
def test_bh_rejects_what_the_step_up_procedure_rejects(p: list[float], q: float) -> None:
    m = len(p)
    assume(not _near_any_threshold(p, [k * q / m for k in range(1, m + 1)]))
    ranked = sorted(range(m), key=lambda i: p[i])
    largest = max(
        (rank for rank in range(1, m + 1) if p[ranked[rank - 1]] <= rank * q / m), default=0
    )
    adjusted = adjust(p, "bh")
    assert {i for i in range(m) if adjusted[i] <= q} == set(ranked[:largest])
