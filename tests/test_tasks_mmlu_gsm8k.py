"""MMLU and GSM8K prompts, scoring and aggregation, against lm-evaluation-harness 0.4.x.

Expected prompts are written out literally (from lm-eval's task YAMLs, quoted in
``shared/docs/lm-eval-reference.md`` §3, and the real data rows); expected scores
are derived by hand from lm-eval's documented regexes and formulas.
"""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import pytest

from evalsweep.errors import DataError, EvalsweepError
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult
from evalsweep.tasks import DataSource, Document, ScoredDocument, get_task
from evalsweep.tasks.gsm8k import GSM8K
from evalsweep.tasks.mmlu import MMLU

DESCRIPTION = (
    "The following are multiple choice questions (with answers) about abstract algebra.\n\n"
)
TEST_0 = (
    "Find the degree for the given field extension Q(sqrt(2), sqrt(3), sqrt(18)) over Q.\n"
    "A. 0\nB. 4\nC. 2\nD. 6\nAnswer:"
)
DEV_0_SHOT = (
    "Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.\n"
    "A. 0\nB. 1\nC. 2\nD. 3\nAnswer: B\n\n"
)
GSM8K_TEST_0 = (
    "Question: Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning "
    "and bakes muffins for her friends every day with four. She sells the remainder at the "
    "farmers' market daily for $2 per fresh duck egg. How much in dollars does she make every "
    "day at the farmers' market?\nAnswer:"
)


def csv_rows(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def jsonl_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def prepare(task, data_dir: Path, limit: int | None, shots: int):  # type: ignore[no-untyped-def]
    return task.prepare(task.load(DataSource(str(data_dir)), limit), shots)


# -- MMLU prompts -------------------------------------------------------------------------


def test_mmlu_zero_shot_prompt_is_lm_eval_format(data_dir: Path) -> None:
    first = prepare(MMLU(subjects=["abstract_algebra"]), data_dir, 1, 0)[0]
    contexts = {r.context for r in first.requests}
    assert contexts == {DESCRIPTION + TEST_0}


def test_mmlu_one_shot_prompt_prepends_first_dev_row(data_dir: Path) -> None:
    first = prepare(MMLU(subjects=["abstract_algebra"]), data_dir, 1, 1)[0]
    contexts = {r.context for r in first.requests}
    assert contexts == {DESCRIPTION + DEV_0_SHOT + TEST_0}


def test_mmlu_five_shot_prompt_uses_first_five_dev_rows_in_order(data_dir: Path) -> None:
    dev = csv_rows(data_dir / "mmlu" / "dev" / "abstract_algebra_dev.csv")
    shots = "".join(
        f"{q.strip()}\nA. {a}\nB. {b}\nC. {c}\nD. {d}\nAnswer: {gold}\n\n"
        for q, a, b, c, d, gold in dev[:5]
    )
    first = prepare(MMLU(subjects=["abstract_algebra"]), data_dir, 1, 5)[0]
    assert first.requests[0].context == DESCRIPTION + shots + TEST_0


def test_mmlu_choices_are_space_letter_continuations(data_dir: Path) -> None:
    first = prepare(MMLU(subjects=["abstract_algebra"]), data_dir, 1, 0)[0]
    assert all(isinstance(r, LoglikelihoodRequest) for r in first.requests)
    assert [r.continuation for r in first.requests] == [" A", " B", " C", " D"]


def test_mmlu_doc_id_is_row_index_within_subject(data_dir: Path) -> None:
    subjects = ["abstract_algebra", "anatomy"]
    data = MMLU(subjects=subjects).load(DataSource(str(data_dir)), 3)
    assert [(d.subject, d.doc_id) for d in data.documents] == [
        (s, i) for s in subjects for i in range(3)
    ]
    for doc in data.documents:
        row = csv_rows(data_dir / "mmlu" / "test" / f"{doc.subject}_test.csv")[doc.doc_id]
        assert doc.fields["question"] == row[0]
        assert list(doc.fields["choices"]) == row[1:5]
        assert doc.fields["answer"] == "ABCD".index(row[5])
    assert len({d.key for d in data.documents}) == len(data.documents)


def test_mmlu_limit_applies_per_subject(data_dir: Path) -> None:
    subjects = ["abstract_algebra", "anatomy"]
    source = DataSource(str(data_dir))
    limited = MMLU(subjects=subjects).load(source, 2)
    full = MMLU(subjects=subjects).load(source, None)
    per_subject = {s: sum(d.subject == s for d in limited.documents) for s in subjects}
    assert per_subject == {"abstract_algebra": 2, "anatomy": 2}
    for subject in subjects:
        rows = csv_rows(data_dir / "mmlu" / "test" / f"{subject}_test.csv")
        assert sum(d.subject == subject for d in full.documents) == len(rows)


def test_mmlu_subject_task_name_selects_one_subject(data_dir: Path) -> None:
    task = get_task("mmlu_anatomy")
    data = task.load(DataSource(str(data_dir)), 2)
    assert task.name == "mmlu_anatomy"
    assert {d.subject for d in data.documents} == {"anatomy"}


# -- MMLU scoring and aggregation ---------------------------------------------------------


def mmlu_doc(subject: str, index: int, answer: int) -> Document:
    return Document(f"{subject}/{index}", index, {"answer": answer}, subject)


def test_mmlu_prediction_is_first_highest_logprob_letter() -> None:
    task = MMLU(subjects=["abstract_algebra"])
    lls = [LoglikelihoodResult(x, False) for x in (-2.0, -1.0, -1.0, -3.0)]
    right = task.score(mmlu_doc("abstract_algebra", 0, 1), lls)
    wrong = task.score(mmlu_doc("abstract_algebra", 1, 2), lls)
    assert (right.prediction, right.target, right.correct, right.metrics["acc"]) == (
        "B",
        "B",
        True,
        1.0,
    )
    assert (wrong.prediction, wrong.target, wrong.correct, wrong.metrics["acc"]) == (
        "B",
        "C",
        False,
        0.0,
    )


def test_mmlu_aggregation_matches_lm_eval_formulas() -> None:
    # stem: abstract_algebra [1, 0, 1, 1], anatomy [0, 1]; other: marketing [1, 0, 0]
    values = {"abstract_algebra": [1, 0, 1, 1], "anatomy": [0, 1], "marketing": [1, 0, 0]}
    documents, scored = [], []
    for subject, accs in values.items():
        for i, acc in enumerate(accs):
            documents.append(mmlu_doc(subject, i, 0))
            scored.append(ScoredDocument("A", "A" if acc else "B", {"acc": float(acc)}, bool(acc)))
    rows = MMLU(subjects=list(values)).aggregate(documents, scored)
    by = {(r.level, r.group): r for r in rows}

    # Subjects: mean and sample stderr sqrt(sum((x - m)^2) / (n - 1)) / sqrt(n).
    assert by[("subject", "abstract_algebra")].value == pytest.approx(0.75)
    assert by[("subject", "abstract_algebra")].stderr == pytest.approx(0.25)  # sqrt(.25)/2
    assert by[("subject", "anatomy")].stderr == pytest.approx(0.5)  # sqrt(.5)/sqrt(2)
    assert by[("subject", "marketing")].value == pytest.approx(1 / 3)
    assert by[("subject", "marketing")].stderr == pytest.approx(math.sqrt(1 / 3) / math.sqrt(3))

    # Categories: size-weighted mean; pooled_sample_stderr
    # sqrt(sum((n_i - 1) * se_i^2 * n_i) / (N - k) / N).
    stem = by[("category", "stem")]
    assert (stem.n, stem.value) == (6, pytest.approx(4 / 6))
    assert stem.stderr == pytest.approx(math.sqrt((3 * 0.25**2 * 4 + 1 * 0.5**2 * 2) / 4 / 6))
    other = by[("category", "other")]
    assert other.stderr == pytest.approx(by[("subject", "marketing")].stderr)

    # Overall mmlu: pooled over the leaf subjects (as lm-eval's group aggregation does;
    # benchmarks/parity_lm_eval.py found pooling over categories off in the 6th digit).
    overall = by[("task", None)]
    se_other = math.sqrt(1 / 3) / math.sqrt(3)
    assert (overall.n, overall.value) == (9, pytest.approx(5 / 9))
    assert overall.stderr == pytest.approx(
        math.sqrt((3 * 0.25**2 * 4 + 1 * 0.5**2 * 2 + 2 * se_other**2 * 3) / (9 - 3) / 9)
    )
    assert rows[0] is overall


def test_mmlu_single_question_subject_has_no_stderr() -> None:
    rows = MMLU(subjects=["anatomy"]).aggregate(
        [mmlu_doc("anatomy", 0, 0)], [ScoredDocument("A", "A", {"acc": 1.0}, True)]
    )
    assert all(r.value == 1.0 and math.isnan(r.stderr) for r in rows)


# -- GSM8K prompts ------------------------------------------------------------------------


def expected_gsm8k_contexts(data_dir: Path, n_docs: int) -> list[str]:
    """lm-eval's default sampler: one Random(1234), sample(train, 5) per document in order."""
    train = jsonl_rows(data_dir / "gsm8k" / "train.jsonl")
    test = jsonl_rows(data_dir / "gsm8k" / "test.jsonl")[:n_docs]
    rnd = random.Random(1234)
    contexts = []
    for doc in test:
        shots = rnd.sample(train, 5)
        text = "".join(f"Question: {s['question']}\nAnswer: {s['answer']}\n\n" for s in shots)
        contexts.append(text + f"Question: {doc['question']}\nAnswer:")
    return contexts


def test_gsm8k_zero_shot_prompt_is_question_answer(data_dir: Path) -> None:
    first = prepare(GSM8K(), data_dir, 1, 0)[0]
    assert first.requests[0].context == GSM8K_TEST_0


def test_gsm8k_five_shot_prompts_draw_sequentially_from_seed_1234(data_dir: Path) -> None:
    prepared = prepare(GSM8K(), data_dir, 4, 5)
    assert [p.requests[0].context for p in prepared] == expected_gsm8k_contexts(data_dir, 4)
    assert prepared[0].requests[0].context.endswith("\n\n" + GSM8K_TEST_0)


def test_gsm8k_requests_generate_until_lm_eval_stop_strings(data_dir: Path) -> None:
    request = prepare(GSM8K(), data_dir, 1, 5)[0].requests[0]
    assert isinstance(request, GenerationRequest)
    assert request.until == ("Question:", "</s>", "<|im_end|>")
    assert request.max_gen_toks == 256
    assert request.do_sample is False


def test_gsm8k_limit_keeps_first_prompts_of_a_full_run(data_dir: Path) -> None:
    full = prepare(GSM8K(), data_dir, None, 5)
    limited = prepare(GSM8K(), data_dir, 3, 5)
    assert len(full) == len(jsonl_rows(data_dir / "gsm8k" / "test.jsonl"))
    assert [p.requests for p in limited] == [p.requests for p in full[:3]]
    assert [p.document.doc_id for p in limited] == [0, 1, 2]


# -- GSM8K scoring ------------------------------------------------------------------------

# (response, gold answer, strict-match extraction, flexible-extract extraction,
#  exact_match strict, exact_match flexible). Strict: first "#### (\-?[0-9\.\,]+)";
# flexible: last match of "(-?[$0-9.,]{2,})|(-?[0-9]+)"; then ",", "\$", "(?s).*#### "
# and "\.$" are removed from both sides and compared case-insensitively.
GSM8K_CASES = [
    ("The answer is 18.\n#### 18", "9 * 2 = 18\n#### 18", "18", "18", 1.0, 1.0),
    ("#### 1,234", "#### 1234", "1,234", "1,234", 1.0, 1.0),
    ("no number", "#### 18", "[invalid]", "[invalid]", 0.0, 0.0),
    ("$18.00", "#### 18", "[invalid]", "$18.00", 0.0, 0.0),
    ("It costs $18.", "#### 18", "[invalid]", "$18.", 0.0, 1.0),
    ("#### 18\nWait, it is 20", "#### 18", "18", "20", 1.0, 0.0),
    ("it fell to -5 degrees", "#### -5", "[invalid]", "-5", 0.0, 1.0),
    ("#### 7", "#### 7", "7", "7", 1.0, 1.0),
    ("#### 18.", "#### 18", "18.", "18.", 1.0, 1.0),
    ("#### 17\n#### 18", "#### 18", "17", "18", 0.0, 1.0),
]


@pytest.mark.parametrize(
    ("response", "gold", "strict", "flexible", "em_strict", "em_flexible"), GSM8K_CASES
)
def test_gsm8k_scoring_extracts_and_matches_like_lm_eval(
    response: str, gold: str, strict: str, flexible: str, em_strict: float, em_flexible: float
) -> None:
    doc = Document("0", 0, {"question": "q", "answer": gold})
    scored = GSM8K().score(doc, [response])
    assert scored.details["filtered"] == {"strict-match": strict, "flexible-extract": flexible}
    assert scored.metrics == {
        "exact_match,strict-match": em_strict,
        "exact_match,flexible-extract": em_flexible,
    }
    assert scored.prediction == strict
    assert scored.correct is (em_strict == 1.0)
    assert scored.response == response


def test_gsm8k_target_is_final_answer_number(data_dir: Path) -> None:
    first = GSM8K().load(DataSource(str(data_dir)), 1).documents[0]
    assert GSM8K().score(first, ["#### 18"]).target == "18"


def test_gsm8k_aggregation_is_mean_with_sample_stderr() -> None:
    docs = [Document(str(i), i, {"question": "q", "answer": "#### 18"}) for i in range(4)]
    responses = ["#### 18", "#### 3", "18", "#### 18"]
    task = GSM8K()
    scored = [task.score(d, [r]) for d, r in zip(docs, responses, strict=True)]
    rows = {r.metric: r for r in task.aggregate(docs, scored)}
    # strict [1, 0, 0, 1]: mean .5, stderr sqrt(1/3)/2; flexible [1, 0, 1, 1]: .75, .25
    assert rows["exact_match,strict-match"].value == pytest.approx(0.5)
    assert rows["exact_match,strict-match"].stderr == pytest.approx(math.sqrt(1 / 3) / 2)
    assert rows["exact_match,flexible-extract"].value == pytest.approx(0.75)
    assert rows["exact_match,flexible-extract"].stderr == pytest.approx(0.25)
    assert all(r.n == 4 for r in rows.values())


# -- malformed data -----------------------------------------------------------------------

GOOD_ROW = '"What is 1+1?",1,2,3,4,B\n'


@pytest.fixture
def bad_data(tmp_path: Path) -> Path:
    """A data folder with valid dev files; tests write the broken test file."""
    (tmp_path / "mmlu" / "test").mkdir(parents=True)
    (tmp_path / "mmlu" / "dev").mkdir(parents=True)
    (tmp_path / "mmlu" / "dev" / "anatomy_dev.csv").write_text(GOOD_ROW * 5, encoding="utf-8")
    (tmp_path / "gsm8k").mkdir()
    good = json.dumps({"question": "q", "answer": "#### 1"}) + "\n"
    (tmp_path / "gsm8k" / "train.jsonl").write_text(good * 6, encoding="utf-8")
    return tmp_path


def test_mmlu_row_with_wrong_column_count_names_file_and_line(bad_data: Path) -> None:
    path = bad_data / "mmlu" / "test" / "anatomy_test.csv"
    path.write_text(GOOD_ROW + '"Short row?",1,2,3,B\n' + GOOD_ROW, encoding="utf-8")
    with pytest.raises(DataError, match="columns") as caught:
        MMLU(subjects=["anatomy"]).load(DataSource(str(bad_data)), None)
    assert f"{path}:2:" in str(caught.value)


def test_mmlu_bad_answer_letter_names_file_and_line(bad_data: Path) -> None:
    path = bad_data / "mmlu" / "test" / "anatomy_test.csv"
    path.write_text(GOOD_ROW * 2 + '"Which?",1,2,3,4,E\n', encoding="utf-8")
    with pytest.raises(DataError, match="A-D") as caught:
        MMLU(subjects=["anatomy"]).load(DataSource(str(bad_data)), None)
    assert f"{path}:3:" in str(caught.value)


def test_gsm8k_invalid_json_line_names_file_and_line(bad_data: Path) -> None:
    path = bad_data / "gsm8k" / "test.jsonl"
    good = json.dumps({"question": "q", "answer": "#### 1"})
    path.write_text(good + "\n" + '{"question": "q", "answer": \n', encoding="utf-8")
    with pytest.raises(DataError, match="not valid JSON") as caught:
        GSM8K().load(DataSource(str(bad_data)), None)
    assert f"{path}:2:" in str(caught.value)


def test_gsm8k_missing_field_names_file_line_and_field(bad_data: Path) -> None:
    path = bad_data / "gsm8k" / "test.jsonl"
    rows = [{"question": "q", "answer": "#### 1"}, {"question": "q"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with pytest.raises(DataError, match="'answer'") as caught:
        GSM8K().load(DataSource(str(bad_data)), None)
    assert f"{path}:2:" in str(caught.value)


def test_missing_data_file_names_the_path(bad_data: Path) -> None:
    with pytest.raises(DataError, match="not found") as caught:
        MMLU(subjects=["anatomy"]).load(DataSource(str(bad_data)), None)
    assert str(bad_data / "mmlu" / "test" / "anatomy_test.csv") in str(caught.value)


def test_gsm8k_more_shots_than_train_rows_is_a_user_error(bad_data: Path) -> None:
    path = bad_data / "gsm8k" / "test.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n", encoding="utf-8")
    task = GSM8K()
    data = task.load(DataSource(str(bad_data)), None)  # 6 train rows
    with pytest.raises(EvalsweepError, match="7"):
        task.prepare(data, 7)
