"""TruthfulQA MC1/MC2, WinoGrande, PIQA and BoolQ against lm-evaluation-harness 0.4.13 itself.

lm-eval's own task YAMLs and functions (read from the installed package, with only the
dataset source changed to the slices under ``tests/data``, by the converters the
parity benchmark uses) build their requests in this process; evalsweep's must be the
same strings, document by document, 0-shot and few-shot. Scoring is checked by
handing both the same log-likelihoods.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from evalsweep.errors import DataError
from evalsweep.requests import LoglikelihoodRequest, LoglikelihoodResult
from evalsweep.tasks import DataSource, get_task
from evalsweep.tasks.truthfulqa import mc2_true_mass

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

NEW_TASKS = ("truthfulqa_mc1", "truthfulqa_mc2", "winogrande", "piqa", "boolq")
pytestmark = pytest.mark.integration  # lm-eval is the reference


@pytest.fixture(scope="module")
def lm_eval_tasks(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, Any]:
    """lm-eval's task objects for the five tasks, reading the test slices."""
    from lm_eval.tasks import TaskManager

    import _lm_eval_tasks as local

    out = tmp_path_factory.mktemp("lm_eval_tasks")
    local.write_truthfulqa_tasks(data_dir, out)
    local.write_winogrande_task(data_dir, out)
    local.write_piqa_task(data_dir, out)
    local.write_boolq_task(data_dir, out)
    manager = TaskManager(include_path=str(out), include_defaults=False)
    names = [local.PREFIX + name for name in NEW_TASKS]
    tasks = manager.load(names)["tasks"]
    return {name.removeprefix(local.PREFIX): tasks[name] for name in names}


def lm_eval_requests(task: Any, num_fewshot: int, limit: int) -> dict[int, list[tuple[str, str]]]:
    """(context, continuation) of every request lm-eval builds, by document."""
    task.set_config("num_fewshot", num_fewshot)
    task.set_fewshot_seed(1234)
    task.build_all_requests(limit=limit, rank=0, world_size=1)
    by_doc: dict[int, list[tuple[int, tuple[str, str]]]] = {}
    for instance in task.instances:
        by_doc.setdefault(instance.doc_id, []).append((instance.idx, instance.args))
    return {doc: [args for _, args in sorted(pairs)] for doc, pairs in by_doc.items()}


@pytest.mark.parametrize("num_fewshot", [0, 3])
@pytest.mark.parametrize("name", NEW_TASKS)
def test_requests_are_lm_evals_string_for_string(
    name: str, num_fewshot: int, lm_eval_tasks: dict[str, Any], data_dir: Path
) -> None:
    limit = 25
    theirs = lm_eval_requests(lm_eval_tasks[name], num_fewshot, limit)
    task = get_task(name)
    prepared = task.prepare(task.load(DataSource(str(data_dir)), limit), num_fewshot)
    assert len(prepared) == len(theirs) == limit
    for item in prepared:
        mine = [(r.context, r.continuation) for r in item.requests]
        assert all(isinstance(r, LoglikelihoodRequest) for r in item.requests)
        assert mine == theirs[item.document.doc_id], (name, item.document.doc_id)
    if num_fewshot:  # the shots are really there
        bare = task.prepare(task.load(DataSource(str(data_dir)), limit), 0)
        for shots, plain in zip(prepared, bare, strict=True):
            assert shots.requests[0].context.endswith(plain.requests[0].context)
            assert shots.requests[0].context.count("\n\n") >= num_fewshot + plain.requests[
                0
            ].context.count("\n\n")


@pytest.mark.parametrize("name", NEW_TASKS)
def test_scores_are_lm_evals_for_the_same_log_likelihoods(
    name: str, lm_eval_tasks: dict[str, Any], data_dir: Path
) -> None:
    reference = lm_eval_tasks[name]
    docs = list(reference.eval_docs)[:25]
    task = get_task(name)
    documents = task.load(DataSource(str(data_dir)), 25).documents
    rnd = random.Random(7)
    scored = []
    for doc, document in zip(docs, documents, strict=True):
        n = len(reference.doc_to_choice(doc))
        lls = [rnd.uniform(-60.0, -1.0) for _ in range(n)]
        theirs = reference.process_results(doc, [(ll, False) for ll in lls])
        mine = task.score(document, [LoglikelihoodResult(ll, False) for ll in lls])
        assert set(mine.metrics) == set(theirs)
        for key, value in theirs.items():
            assert mine.metrics[key] == float(value), (name, key)
        scored.append(mine)
    aggregates = {row.metric: row for row in task.aggregate(documents, scored)}
    for key in aggregates:
        values = [s.metrics[key] for s in scored]
        assert aggregates[key].value == pytest.approx(sum(values) / len(values))


def test_mc2_is_the_probability_mass_on_the_true_answers() -> None:
    lls = [math.log(0.2), math.log(0.3), math.log(0.5)]
    assert mc2_true_mass(lls, [1, 0, 1]) == pytest.approx(0.7)
    # Far below exp's range lm-eval would divide 0 by 0; the shifted form keeps the mass.
    assert mc2_true_mass([-2000.0, -2000.0 + math.log(3)], [0, 1]) == pytest.approx(0.75)


def test_winogrande_puts_the_option_in_the_context_and_scores_the_rest(data_dir: Path) -> None:
    task = get_task("winogrande")
    item = task.prepare(task.load(DataSource(str(data_dir)), 1), 0)[0]
    fields = item.document.fields
    assert fields["sentence"].startswith("Sarah was a much better surgeon than Maria so _")
    assert [(r.context, r.continuation) for r in item.requests] == [
        ("Sarah was a much better surgeon than Maria so Sarah", " always got the easier cases."),
        ("Sarah was a much better surgeon than Maria so Maria", " always got the easier cases."),
    ]
    scored = task.score(
        item.document, [LoglikelihoodResult(-9.0, False), LoglikelihoodResult(-3.0, True)]
    )
    assert (scored.target, scored.prediction, scored.metrics) == ("Maria", "Maria", {"acc": 1.0})


def test_boolq_local_rows_are_superglue_rows(data_dir: Path) -> None:
    row = get_task("boolq").load(DataSource(str(data_dir)), 1).documents[0].fields
    assert row["passage"].startswith("Ethanol fuel -- ")
    assert (row["question"], row["label"]) == (
        "does ethanol take more energy make that produces",
        0,
    )


@pytest.mark.parametrize(
    ("folder", "name", "content", "message"),
    [
        ("winogrande", "dev.jsonl", '{"sentence": "no blank", "option1": "a", "option2": "b", '
         '"answer": "1"}\n', r"dev\.jsonl:1: unexpected WinoGrande row \('sentence' must hold"),
        ("boolq", "dev.jsonl", '{"question": "q", "title": "t", "answer": "yes", "passage": "p"}\n',
         r"dev\.jsonl:1: 'answer' must be true or false"),
        ("truthfulqa", "mc_task.json", '[{"question": "q", "mc1_targets": {"a": 0, "b": 1}, '
         '"mc2_targets": {"a": 1}}]', r"mc_task\.json:1: unexpected TruthfulQA row"),
    ],
)  # fmt: skip
def test_malformed_local_rows_are_one_line_errors_naming_file_and_line(
    tmp_path: Path, folder: str, name: str, content: str, message: str
) -> None:
    (tmp_path / folder).mkdir()
    (tmp_path / folder / name).write_text(content, encoding="utf-8")
    task = {"winogrande": "winogrande", "boolq": "boolq", "truthfulqa": "truthfulqa_mc1"}[folder]
    with pytest.raises(DataError, match=message):
        get_task(task).load(DataSource(str(tmp_path)), None)


def test_piqa_labels_file_shorter_than_the_rows_is_refused(tmp_path: Path, data_dir: Path) -> None:
    (tmp_path / "piqa").mkdir()
    source = data_dir / "piqa"
    (tmp_path / "piqa" / "valid.jsonl").write_bytes((source / "valid.jsonl").read_bytes())
    (tmp_path / "piqa" / "valid-labels.lst").write_text("0\n1\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"valid-labels\.lst: 2 labels for the 100 rows"):
        get_task("piqa").load(DataSource(str(tmp_path)), None)


@pytest.mark.slow
def test_run_compares_two_checkpoints_on_the_new_tasks(
    tmp_path: Path, gpt2_a: Path, gpt2_b: Path, data_dir: Path, cli_env: dict[str, str]
) -> None:
    command = [
        "run", str(gpt2_a), str(gpt2_b), "--tasks", ",".join(NEW_TASKS), "--limit", "6",
        "--data-dir", str(data_dir), "--device", "cpu", "--store", str(tmp_path / "s.db"),
        "--out", str(tmp_path / "out"), "--json",
    ]  # fmt: skip
    ran = run_cli(command, env=cli_env)
    assert ran.returncode == 0, ran.stderr
    document = json.loads(ran.stdout)
    rows = {(r["task"], r["metric"]) for r in document["results"] if r["level"] == "task"}
    assert rows == {
        ("truthfulqa_mc1", "acc"), ("truthfulqa_mc2", "acc"), ("winogrande", "acc"),
        ("piqa", "acc"), ("piqa", "acc_norm"), ("boolq", "acc"),
    }  # fmt: skip
    tests = {(c["task"], c["metric"]): c["test"] for c in document["comparisons"]}
    assert tests[("truthfulqa_mc2", "acc")].startswith("sign-flip")
    assert tests[("winogrande", "acc")].startswith("mcnemar")
    mc2 = [r for r in document["results"] if r["task"] == "truthfulqa_mc2"][0]
    assert 0.0 < mc2["value"] < 1.0 and mc2["value"] not in (k / 6 for k in range(7))
