"""ARC and HellaSwag against lm-evaluation-harness 0.4.13's own task code.

The references are lm-eval itself, imported here: the Jinja templates of its
installed ``arc_easy.yaml``, its HellaSwag ``process_docs``, and its few-shot
sampler, run on the real local data files.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from conftest import run_cli
from evalsweep.errors import DataError
from evalsweep.requests import LoglikelihoodRequest, LoglikelihoodResult
from evalsweep.tasks import DataSource, get_task
from evalsweep.tasks.hellaswag import process_hub_row, read_text_format


def lm_eval_yaml(*parts: str) -> dict:  # type: ignore[type-arg]
    import lm_eval

    path = Path(lm_eval.__file__).parent / "tasks" / Path(*parts)
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def hub_shape(row: dict) -> dict:  # type: ignore[type-arg]
    """An evalsweep ARC row back in allenai/ai2_arc's schema, which lm-eval's YAML reads."""
    return {
        "id": row["id"],
        "question": row["question"],
        "choices": {"text": row["choices"], "label": row["labels"]},
        "answerKey": row["answerKey"],
    }


def lm_eval_hellaswag_docs(rows: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    """lm-eval's ``process_docs`` on the local text file's items in the Hub's row shape."""
    import datasets
    from lm_eval.tasks.hellaswag.utils import process_docs

    return list(process_docs(datasets.Dataset.from_list(rows)))


def local_hellaswag_as_hub_rows(path: Path, limit: int) -> list[dict]:  # type: ignore[type-arg]
    import bz2

    with bz2.open(path, "rt", encoding="utf-8") as handle:
        lines = handle.read().split("\n")[: 6 * limit]
    rows = []
    for start in range(0, len(lines), 6):
        context, label, *endings = lines[start : start + 6]
        activity, _, ctx = context.partition(": ")
        rows.append(
            {
                "activity_label": activity,
                "ctx_a": ctx,
                "ctx_b": "",
                "endings": endings,
                "label": label,
            }
        )
    return rows


@pytest.mark.parametrize("name", ["arc_easy", "arc_challenge"])
def test_arc_prompt_choices_and_gold_are_lm_eval_templates_rendered(
    name: str, data_dir: Path
) -> None:
    from lm_eval.utils import apply_template

    config = lm_eval_yaml("arc", "arc_easy.yaml")
    task = get_task(name)
    prepared = task.prepare(task.load(DataSource(str(data_dir)), 40), 0)
    assert len(prepared) == 40
    for item in prepared:
        doc = hub_shape(dict(item.document.fields))
        choices = ast.literal_eval(apply_template(config["doc_to_choice"], doc))
        gold = int(apply_template(config["doc_to_target"], doc))
        context = apply_template(config["doc_to_text"], doc)
        assert [(r.context, r.continuation) for r in item.requests] == [
            (context, " " + choice) for choice in choices
        ]
        scored = task.score(
            item.document,
            [LoglikelihoodResult(-1.0 if i == gold else -9.0, False) for i in range(len(choices))],
        )
        assert scored.target == choices[gold] and scored.metrics["acc"] == 1.0


def test_arc_numeric_answer_key_picks_the_choice_with_that_label(data_dir: Path) -> None:
    task = get_task("arc_easy")
    doc = task.load(DataSource(str(data_dir)), 15).documents[14]
    assert doc.fields["labels"] == ["1", "2", "3", "4"] and doc.fields["answerKey"] == "2"
    assert task.gold(doc.fields) == 1  # type: ignore[attr-defined]


def test_arc_fewshot_examples_are_drawn_as_lm_eval_draws_them(data_dir: Path) -> None:
    from lm_eval.api.samplers import ContextSampler

    task = get_task("arc_challenge")
    data = task.load(DataSource(str(data_dir)), 12)
    pool = data.fewshot_pool["fewshot"]  # no local Train file: Dev, as lm-eval's fallback
    assert len(pool) == 299
    reference = ContextSampler(list(pool), rnd=1234)
    for item in task.prepare(data, 3):
        shots = reference.sample(3)
        answers = [s["choices"][s["labels"].index(s["answerKey"])] for s in shots]
        expected = "".join(
            f"Question: {s['question']}\nAnswer: {a}\n\n"
            for s, a in zip(shots, answers, strict=True)
        )
        context = item.requests[0].context
        assert context == expected + f"Question: {item.document.fields['question']}\nAnswer:"


def test_hellaswag_local_items_are_lm_eval_processed_docs(data_dir: Path) -> None:
    path = data_dir / "hellaswag" / "hellaswag_val_full.txt.bz2"
    mine = read_text_format(path, 300)
    theirs = lm_eval_hellaswag_docs(local_hellaswag_as_hub_rows(path, 300))
    assert len(mine) == len(theirs) == 300
    for ours, lm in zip(mine, theirs, strict=True):
        assert (ours["query"], ours["choices"], ours["gold"]) == (
            lm["query"],
            lm["choices"],
            lm["gold"],
        )
    assert mine[0]["query"] == "Roof shingle removal: A man is sitting on a roof. he"
    assert mine[0]["gold"] == 3


def test_hellaswag_hub_rows_get_lm_eval_capitalisation_and_cleaning() -> None:
    row = {
        "ind": 4,
        "activity_label": "Home and Garden",
        "ctx_a": "[header] How to plant tulips [title] Pick a sunny spot.",
        "ctx_b": "then you",
        "endings": ["dig  a hole [step] six inches deep.", "b", "c", "d"],
        "label": "0",
    }
    ours = process_hub_row(row)
    (theirs,) = lm_eval_hellaswag_docs([row])
    assert (ours["query"], ours["choices"], ours["gold"]) == (
        theirs["query"],
        theirs["choices"],
        theirs["gold"],
    )
    assert ours["query"].endswith("Then you")


def test_hellaswag_fewshot_without_train_skips_the_document_like_lm_eval(data_dir: Path) -> None:
    from lm_eval.api.samplers import ContextSampler

    task = get_task("hellaswag")
    data = task.load(DataSource(str(data_dir)), 5)
    pool = data.fewshot_pool["eval"]
    reference = ContextSampler(list(pool), rnd=1234)
    for item in task.prepare(data, 2):
        shots = reference.sample(2, eval_doc=item.document.fields)
        assert item.document.fields not in shots
        expected = "".join(f"{s['query']} {s['choices'][s['gold']]}\n\n" for s in shots)
        assert item.requests[0].context == expected + item.document.fields["query"]


def test_acc_norm_divides_log_likelihood_by_choice_length_in_characters(data_dir: Path) -> None:
    task = get_task("hellaswag")
    item = task.prepare(task.load(DataSource(str(data_dir)), 1), 0)[0]
    choices = item.document.fields["choices"]
    lengths = [len(c) for c in choices]
    longest = lengths.index(max(lengths))
    # Every choice has the same log-likelihood per character except the longest one,
    # which is a little better per character but worst in total.
    lls = [-1.0 * n for n in lengths]
    lls[longest] = -0.9 * lengths[longest]
    scored = task.score(item.document, [LoglikelihoodResult(ll, False) for ll in lls])
    assert scored.details["pred_norm"] == longest
    assert scored.details["pred"] == lls.index(max(lls)) != longest
    gold = item.document.fields["gold"]
    assert scored.metrics == {
        "acc": float(scored.details["pred"] == gold),
        "acc_norm": float(longest == gold),
    }


def test_malformed_hellaswag_file_names_file_and_line(tmp_path: Path) -> None:
    folder = tmp_path / "hellaswag"
    folder.mkdir()
    (folder / "hellaswag_val_full.txt").write_text("ctx\n7\na\nb\nc\nd\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"hellaswag_val_full\.txt:2: gold index"):
        get_task("hellaswag").load(DataSource(str(tmp_path)), None)


def test_missing_arc_file_is_a_one_line_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="ARC-Easy-Test.jsonl"):
        get_task("arc_easy").load(DataSource(str(tmp_path)), None)


@pytest.mark.slow
def test_run_compares_checkpoints_on_arc_and_hellaswag_and_resumes(
    tmp_path: Path, gpt2_a: Path, gpt2_b: Path, data_dir: Path, cli_env: dict[str, str]
) -> None:
    command = [
        "run", str(gpt2_a), str(gpt2_b),
        "--tasks", "arc_easy,arc_challenge,hellaswag", "--limit", "4",
        "--data-dir", str(data_dir), "--device", "cpu", "--store", str(tmp_path / "s.db"),
        "--out", str(tmp_path / "out"), "--json",
    ]  # fmt: skip
    first = run_cli(command, env=cli_env)
    assert first.returncode == 0, first.stderr
    document = json.loads(first.stdout)
    metrics = {(r["task"], r["metric"], r["n"]) for r in document["results"]}
    for task in ("arc_easy", "arc_challenge", "hellaswag"):
        assert {(task, "acc", 4), (task, "acc_norm", 4)} <= metrics
    assert {c["task"] for c in document["comparisons"]} == {
        "arc_easy",
        "arc_challenge",
        "hellaswag",
    }
    lines = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * 3 * 4
    assert all(
        isinstance(line["choices"], list) and len(line["logprobs"]) == len(line["choices"])
        for line in lines
    )
    again = run_cli(command, env=cli_env)
    assert again.returncode == 0, again.stderr
    assert set(json.loads(again.stdout)["computed_documents"].values()) == {0}


def test_requests_are_plain_loglikelihood_pairs(data_dir: Path) -> None:
    task = get_task("hellaswag")
    item = task.prepare(task.load(DataSource(str(data_dir)), 1), 0)[0]
    assert all(isinstance(r, LoglikelihoodRequest) for r in item.requests)
    assert [r.continuation for r in item.requests] == [
        " " + c for c in item.document.fields["choices"]
    ]
