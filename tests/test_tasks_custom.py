"""A person's own task: a JSONL file plus a YAML or TOML task file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from evalsweep.errors import EvalsweepError, TaskError
from evalsweep.requests import GenerationRequest, LoglikelihoodResult
from evalsweep.tasks import DataSource, get_task

ROWS = [
    {"country": "France", "choices": ["Paris", "Lyon", "Nice"], "answer": 0},
    {"country": "Italy", "choices": ["Milan", "Rome", "Turin"], "answer": 1},
    {"country": "Spain", "choices": ["Madrid", "Seville", "Bilbao"], "answer": "Madrid"},
    {"country": "Peru", "choices": ["Cusco", "Lima"], "answer": 1},
]
CHOICE_YAML = """\
task: capitals
data: capitals.jsonl
doc_to_text: "Q: What is the capital of {{country}}?\\nA:"
doc_to_choice: choices
doc_to_target: answer
num_fewshot: 2
"""
GENERATION_TOML = """\
task = "capitals_gen"
data = "capitals.jsonl"
output_type = "generate_until"
description = "Capitals of countries.\\n\\n"
doc_to_text = "Q: What is the capital of {{country}}?\\nA:"
doc_to_target = "{{ choices[answer] if answer is number else answer }}"
ignore_case = true
generation_kwargs = { until = ["\\n"], max_gen_toks = 8 }
"""


def write_task(folder: Path, name: str, text: str) -> Path:
    (folder / "capitals.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in ROWS), encoding="utf-8"
    )
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def prepared(path: Path, shots: int | None = None):  # type: ignore[no-untyped-def]
    task = get_task(str(path))
    data = task.load(DataSource(None), None)
    return task, task.prepare(data, task.default_num_fewshot if shots is None else shots)


def test_multiple_choice_task_file_builds_lm_eval_style_prompts(tmp_path: Path) -> None:
    task, items = prepared(write_task(tmp_path, "capitals.yaml", CHOICE_YAML))
    assert task.name == "capitals" and task.default_num_fewshot == 2
    assert [m.key for m in task.metrics] == ["acc", "acc_norm"]
    for item in items:
        question = f"Q: What is the capital of {item.document.fields['country']}?\nA:"
        context = item.requests[0].context
        assert context.endswith("\n\n" + question)
        assert context.count("Q: ") == 3 and question not in context[: -len(question)]
        assert [r.continuation for r in item.requests] == [
            " " + c for c in item.document.fields["choices"]
        ]
    gold = [task.gold(item.document.fields) for item in items]  # type: ignore[attr-defined]
    assert gold == [0, 1, 0, 1]  # an index, or the choice's own text


def test_multiple_choice_task_scores_acc_and_acc_norm(tmp_path: Path) -> None:
    task, items = prepared(write_task(tmp_path, "capitals.yaml", CHOICE_YAML), shots=0)
    scored = task.score(
        items[1].document, [LoglikelihoodResult(v, False) for v in (-5.0, -1.0, -3.0)]
    )
    assert scored.metrics == {"acc": 1.0, "acc_norm": 1.0} and scored.prediction == "Rome"


def test_generation_task_file_in_toml_asks_until_stop_and_scores_exact_match(
    tmp_path: Path,
) -> None:
    task, items = prepared(write_task(tmp_path, "capitals.toml", GENERATION_TOML))
    request = items[0].requests[0]
    assert isinstance(request, GenerationRequest)
    assert request.context == "Capitals of countries.\n\nQ: What is the capital of France?\nA:"
    assert request.until == ("\n",) and request.max_gen_toks == 8
    assert task.score(items[0].document, [" paris"]).metrics == {"exact_match": 1.0}
    assert task.score(items[0].document, [" Lyon"]).metrics == {"exact_match": 0.0}


def edited(old: str, new: str) -> str:
    return CHOICE_YAML.replace(old, new)


MALFORMED = [
    (CHOICE_YAML + "temperature: 3\n", r"capitals.yaml: unknown key 'temperature'"),
    (CHOICE_YAML + "  bad: [\n", r"capitals.yaml:7: not valid YAML"),
    (edited("{{country}}", "{{contry}}"), r"doc_to_text: 'contry' is undefined in .*jsonl:1"),
    (edited("{{country}}", "{{country"), r"capitals.yaml: doc_to_text: template error"),
    (edited("num_fewshot: 2", "num_fewshot: many"), r"num_fewshot: must be a whole number"),
    (edited("data: capitals.jsonl", "data: no.jsonl"), r"data file not found: .*no.jsonl"),
    (CHOICE_YAML + "output_type: essay\n", r"output_type: must be multiple_choice or"),
    (edited("target: answer", "target: '7'"), r"doc_to_target: .*jsonl:1: index 7 out of range"),
    ("- just\n- a list\n", r"capitals.yaml: expected a mapping"),
]


@pytest.mark.parametrize(("text", "message"), MALFORMED)
def test_malformed_task_file_fails_with_one_line_naming_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write_task(tmp_path, "capitals.yaml", text)
    with pytest.raises(EvalsweepError, match=message) as err:
        task = get_task(str(path))
        task.load(DataSource(None), None)
    assert "\n" not in str(err.value)


def test_task_named_from_a_task_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_task(tmp_path, "capitals.yaml", CHOICE_YAML)
    with pytest.raises(TaskError, match="unknown task 'capitals'"):
        get_task("capitals")
    monkeypatch.setenv("EVALSWEEP_TASK_DIRS", str(tmp_path))
    assert get_task("capitals").name == "capitals"


@pytest.mark.slow
def test_run_and_compare_a_task_file_end_to_end(
    tmp_path: Path, gpt2_a: Path, gpt2_b: Path, cli_env: dict[str, str]
) -> None:
    path = write_task(tmp_path, "capitals.yaml", CHOICE_YAML)
    store = str(tmp_path / "s.db")
    common = ["--store", store, "--json"]
    run = run_cli(
        ["run", str(gpt2_a), str(gpt2_b), "--tasks", str(path),
         "--device", "cpu", *common],
        env=cli_env, )  # fmt: skip
    assert run.returncode == 0, run.stderr
    document = json.loads(run.stdout)
    assert {(r["task"], r["metric"], r["n"]) for r in document["results"]} >= {
        ("capitals", "acc", 4),
        ("capitals", "acc_norm", 4),
    }
    compare = run_cli(
        ["compare", str(gpt2_a), str(gpt2_b), "--tasks",
         str(path), *common],
        env=cli_env, )  # fmt: skip
    assert compare.returncode == 0, compare.stderr
    again = json.loads(compare.stdout)
    assert [r["value"] for r in again["results"]] == [r["value"] for r in document["results"]]
    assert {c["task"] for c in again["comparisons"]} == {"capitals"}
