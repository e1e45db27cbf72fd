"""What a benchmark is known for comes from its task (``Task.label_noise``,
``Task.categories``), never from the look of its name: statistics, the summary and the
HTML report read it through :func:`evalsweep.tasks.benchmark_facts` / ``facts_of``."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsweep.report._html import _category
from evalsweep.report._summary import _noise_note
from evalsweep.stats import Comparison, Verdict
from evalsweep.tasks import BenchmarkFacts, LabelNoise, benchmark_facts, facts_of
from evalsweep.tasks.custom import TASK_DIRS_ENV
from evalsweep.tasks.gsm8k import GSM8K
from evalsweep.tasks.mmlu import CATEGORIES, MMLU


def test_gsm8k_declares_its_label_noise_and_mmlu_its_categories() -> None:
    assert benchmark_facts("gsm8k").label_noise == LabelNoise("GSM8K", 0.017)
    assert benchmark_facts("gsm8k").categories == {}
    assert dict(benchmark_facts("mmlu").categories) == CATEGORIES
    # A one-subject MMLU task is MMLU: the same categories.
    assert benchmark_facts("mmlu_anatomy").categories["anatomy"] == "stem"
    assert benchmark_facts("arc_easy") == BenchmarkFacts()


@pytest.mark.parametrize("name", ["gsm8k_cot", "mmlux", "nothing", "leaderboard"])
def test_a_name_that_is_no_registered_task_declares_nothing(name: str) -> None:
    # The names look like GSM8K's or MMLU's: looks decide nothing.
    assert benchmark_facts(name) == BenchmarkFacts()


def test_a_task_file_is_never_read_for_its_facts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = tmp_path / "gsm8k_mine.yaml"
    broken.write_text("{{ not: [a task file\n")
    assert benchmark_facts(str(broken)) == BenchmarkFacts()
    # A task folder's file by name, too (the name is no task of evalsweep's).
    monkeypatch.setenv(TASK_DIRS_ENV, str(tmp_path))
    benchmark_facts.cache_clear()
    assert benchmark_facts("gsm8k_mine") == BenchmarkFacts()


def test_members_a_task_gives_wrongly_count_as_none() -> None:
    class Odd:
        label_noise = 0.5  # not a LabelNoise
        categories = ["stem"]  # not a mapping

    assert facts_of(Odd()) == BenchmarkFacts()
    assert facts_of(GSM8K()).label_noise == GSM8K.label_noise
    assert facts_of(MMLU(subjects=["anatomy"])).categories is MMLU.categories


def _row(task: str, delta: float) -> Comparison:
    return Comparison(
        baseline="a", candidate="b", task=task, metric="acc", subject=None, delta=delta,
        ci_low=delta - 0.01, ci_high=delta + 0.01, p_value=0.5, p_adjusted=0.5,
        verdict=Verdict.NO_SIGNIFICANT_CHANGE, n=1319, mde=0.02, note=None, test="mcnemar",
    )  # fmt: skip


def test_the_summary_and_the_html_report_ask_the_task() -> None:
    assert "within the GSM8K label-noise band" in (_noise_note(_row("gsm8k", 0.01)) or "")
    assert _noise_note(_row("gsm8k", 0.05)) is None  # outside the band
    assert _noise_note(_row("gsm8k_cot", 0.01)) is None  # no such task: nothing declared
    assert _category("mmlu", "anatomy") == "stem"
    assert _category("mmlu_anatomy", "anatomy") == "stem"
    assert _category("arc_easy", "anatomy") == ""
