"""Flips of a task-file task show the question: its rendered prompt, or ``doc_to_question``.

A task file's rows need no ``question`` field, so the flip tables (Markdown, HTML,
terminal) once showed an empty question for every flip of such a task. Two real
GPT-2s built to always answer " A" or " B" (as in test_compare_cli) disagree on
every row of a small real task file, so every row is a flip.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from test_cli_compare import _letter_model

ROWS = [
    {"country": "France", "capital": "Paris"},
    {"country": "Japan", "capital": "Tokyo"},
    {"country": "Kenya", "capital": "Nairobi"},
]
TEXT = "Q: Is {{capital}} the capital of {{country}}? A or B?\\nA:"


def _task_file(folder: Path, name: str, extra: str = "") -> Path:
    (folder / "capitals.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    path = folder / f"{name}.yaml"
    path.write_text(
        f'task: {name}\ndata: capitals.jsonl\ndoc_to_text: "{TEXT}"\n'
        'doc_to_choice: ["A", "B"]\ndoc_to_target: "0"\n' + extra
    )
    return path


@pytest.fixture(scope="module")
def flips(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> dict[str, list[dict]]:  # type: ignore[no-untyped-def]
    from evalsweep.comparison import find_flips
    from evalsweep.engine import SweepSpec, run_sweep
    from evalsweep.models import BackendOptions
    from evalsweep.store import Store

    root = tmp_path_factory.mktemp("flip-questions")
    models = [str(_letter_model(root, tokenizer, letter)) for letter in "AB"]
    plain = _task_file(root, "capitals_plain")
    asked = _task_file(root, "capitals_asked", 'doc_to_question: "Capital of {{country}}?"\n')
    with Store(root / "results.sqlite") as store:
        result = run_sweep(
            SweepSpec(
                checkpoints=models,
                tasks=[str(plain), str(asked)],
                options=BackendOptions(device="cpu", dtype="float32"),
            ),
            store,
        )
    found: dict[str, list[dict]] = {}
    for flip in find_flips(result, models[0], models[1]):
        found.setdefault(flip.task, []).append(flip.to_dict())
    return found


def test_a_task_file_flip_shows_the_rendered_prompt(flips: dict[str, list[dict]]) -> None:
    rows = sorted(flips["capitals_plain"], key=lambda f: f["doc_id"])
    assert [f["direction"] for f in rows] == ["regressed"] * len(ROWS)
    assert [f["question"] for f in rows] == [
        f"Q: Is {r['capital']} the capital of {r['country']}? A or B?\nA:" for r in ROWS
    ]


def test_doc_to_question_is_what_the_flip_shows(flips: dict[str, list[dict]]) -> None:
    rows = sorted(flips["capitals_asked"], key=lambda f: f["doc_id"])
    assert [f["question"] for f in rows] == [f"Capital of {r['country']}?" for r in ROWS]


def test_the_markdown_flip_table_shows_the_question(flips: dict[str, list[dict]]) -> None:
    from evalsweep.report import ResultDocument, Settings, render_markdown

    rows = flips["capitals_plain"] + flips["capitals_asked"]
    empty = ResultDocument(
        run_id="flips-test", created="2026-01-01T00:00:00+00:00", evalsweep_version="test",
        command=[], settings=Settings(backend={}, options={}, limit=None, data="hub", tasks={}),
        checkpoints=[], results=[], computed_documents={}, comparisons=[], environment={},
        seconds=0.0,
    )  # fmt: skip
    markdown = render_markdown(empty, {"B": rows})
    assert "Q: Is Paris the capital of France? A or B? A:" in markdown
    assert "Capital of Kenya?" in markdown


def test_a_bad_doc_to_question_is_named_before_anything_runs(tmp_path: Path) -> None:
    from evalsweep.errors import TaskError
    from evalsweep.tasks import DataSource
    from evalsweep.tasks.custom import load_task_file

    path = _task_file(tmp_path, "capitals_bad", 'doc_to_question: "{{contry}}"\n')
    task = load_task_file(path)
    with pytest.raises(TaskError, match=r"doc_to_question: 'contry' is undefined"):
        task.load(DataSource(None), None)
