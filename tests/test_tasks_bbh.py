"""BIG-Bench Hard against lm-evaluation-harness 0.4.13's own ``bbh`` and ``bbh_fewshot``.

lm-eval's 27 subtask YAMLs of each form (few-shot samples, generation settings, the
``get-answer`` filter), with only the dataset source changed to the slices under
``tests/data/bbh``, build their requests and score responses in this process;
evalsweep's must be the same.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli
from evalsweep.errors import DataError, TaskError
from evalsweep.requests import GenerationRequest
from evalsweep.tasks import DataSource, get_task
from evalsweep.tasks.bbh import SUBTASKS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

FORMS = {"bbh": "cot_fewshot", "bbh_fewshot": "fewshot"}
LIMIT = 3
pytestmark = pytest.mark.integration  # lm-eval is the reference


@pytest.fixture(scope="module")
def lm_eval_bbh(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> dict[str, Any]:
    """lm-eval's task objects: {(form, subtask): task}."""
    from lm_eval.tasks import TaskManager

    import _lm_eval_tasks as local

    out = tmp_path_factory.mktemp("lm_eval_bbh")
    for form in FORMS.values():
        local.write_bbh_tasks(data_dir, out, form)
    manager = TaskManager(include_path=str(out), include_defaults=False)
    names = [f"{local.PREFIX}bbh_{form}_{s}" for form in FORMS.values() for s in SUBTASKS]
    loaded = manager.load(names)["tasks"]
    tasks = {}
    for name, form in FORMS.items():
        for subtask in SUBTASKS:
            task = loaded[f"{local.PREFIX}bbh_{form}_{subtask}"]
            task.set_fewshot_seed(1234)
            task.build_all_requests(limit=LIMIT, rank=0, world_size=1)
            tasks[(name, subtask)] = task
    return tasks


@pytest.mark.parametrize("name", list(FORMS))
def test_every_subtasks_prompt_and_generation_settings_are_lm_evals(
    name: str, lm_eval_bbh: dict[str, Any], data_dir: Path
) -> None:
    task = get_task(name)
    prepared = task.prepare(task.load(DataSource(str(data_dir)), LIMIT), 3)
    assert len(prepared) == 27 * LIMIT
    for item in prepared:
        subtask = item.document.subject
        assert subtask is not None
        instance = next(
            i for i in lm_eval_bbh[(name, subtask)].instances if i.doc_id == item.document.doc_id
        )
        context, kwargs = instance.args
        (request,) = item.requests
        assert isinstance(request, GenerationRequest)
        assert request.context == context, (subtask, item.document.doc_id)
        assert list(request.until) == kwargs["until"]
        assert request.max_gen_toks == kwargs.get("max_gen_toks", 256)  # lm-eval HF's default
        assert not kwargs["do_sample"]


RESPONSES = [
    "Let's see. So the answer is {target}.",  # the worked form's ending
    "So the answer is {target}. So the answer is nothing.",  # first match wins
    " {target}",  # the plain form's raw answer (with the space the model put there)
    "{target}",
    "the answer is",  # nothing after it
    "no answer here",
]


@pytest.mark.parametrize("name", list(FORMS))
def test_answer_extraction_and_exact_match_are_lm_evals(
    name: str, lm_eval_bbh: dict[str, Any], data_dir: Path
) -> None:
    task = get_task(name)
    documents = task.load(DataSource(str(data_dir)), LIMIT).documents
    metric = task.metrics[0].key
    compared = 0
    for subtask in ("navigate", "object_counting", "dyck_languages", "word_sorting"):
        reference = lm_eval_bbh[(name, subtask)]
        mine_docs = {d.doc_id: d for d in documents if d.subject == subtask}
        for template in RESPONSES:
            for instance in reference.instances:  # lm-eval filters every instance at once
                instance.resps = [template.format(target=instance.doc["target"])]
            reference.apply_filters()
            for instance in reference.instances:
                ((key, filtered),) = instance.filtered_resps.items()
                if isinstance(filtered, list):  # no filter: the responses as they are
                    (filtered,) = filtered
                theirs = reference.process_results(instance.doc, [filtered])["exact_match"]
                mine = task.score(mine_docs[instance.doc_id], instance.resps)
                assert mine.metrics == {metric: float(theirs)}, (subtask, instance.resps)
                if name == "bbh":
                    assert key == "get-answer"
                    assert mine.details["filtered"]["get-answer"] == filtered
                compared += 1
    assert compared == 4 * LIMIT * len(RESPONSES)


def test_subtask_names_select_one_subject_and_aggregate_is_weighted(data_dir: Path) -> None:
    task = get_task("bbh_navigate")
    documents = task.load(DataSource(str(data_dir)), None).documents
    assert {d.subject for d in documents} == {"navigate"} and len(documents) == 6
    whole = get_task("bbh")
    docs = [d for d in whole.load(DataSource(str(data_dir)), 2).documents][:4]  # 2 subjects
    scored = [
        whole.score(d, [f"So the answer is {d.fields['target']}." if i else "x"])
        for i, d in enumerate(docs)
    ]
    overall, *subjects = whole.aggregate(docs, scored)
    assert (overall.value, overall.n, overall.group) == (0.75, 4, None)
    assert [(s.group, s.level, s.value) for s in subjects] == [
        (docs[0].subject, "subject", 0.5),
        (docs[2].subject, "subject", 1.0),
    ]


def test_bad_input_is_one_line(tmp_path: Path, data_dir: Path) -> None:
    with pytest.raises(TaskError, match="unknown BIG-Bench Hard subtask 'nope'"):
        get_task("bbh").__class__("cot", ["nope"])
    with pytest.raises(DataError, match="4-shot needs 4 exemplars, BIG-Bench Hard has 3"):
        task = get_task("bbh_navigate")
        task.prepare(task.load(DataSource(str(data_dir)), 1), 4)
    (tmp_path / "bbh" / "bbh").mkdir(parents=True)
    (tmp_path / "bbh" / "bbh" / "navigate.json").write_text(
        '{"canary": "c", "examples": [{"input": "q"}]}', encoding="utf-8"
    )
    with pytest.raises(DataError, match=r"navigate\.json: example 0 must have text 'input' and"):
        get_task("bbh_navigate").load(DataSource(str(tmp_path)), None)


@pytest.mark.slow
def test_run_compares_checkpoints_per_subtask(
    tmp_path: Path, gpt2_a: Path, gpt2_b: Path, data_dir: Path, cli_env: dict[str, str]
) -> None:
    command = [
        "run", str(gpt2_a), str(gpt2_b), "--tasks", "bbh_fewshot", "--limit", "1",
        "--data-dir", str(data_dir), "--device", "cpu", "--store", str(tmp_path / "s.db"),
        "--out", str(tmp_path / "out"), "--json",
    ]  # fmt: skip
    ran = run_cli(command, env=cli_env)
    assert ran.returncode == 0, ran.stderr
    document = json.loads(ran.stdout)
    subjects = {r["group"] for r in document["results"] if r["level"] == "subject"}
    assert subjects == set(SUBTASKS)
    rows = {(c["task"], c["subject"]) for c in document["comparisons"]}
    assert ("bbh_fewshot", None) in rows and ("bbh_fewshot", "navigate") in rows
    html = tmp_path / "report.html"
    report = run_cli(
        ["report", str(gpt2_a), str(gpt2_b), "--tasks", "bbh_fewshot", "--store",
         str(tmp_path / "s.db"), "--html", str(html)],
        env=cli_env,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    text = html.read_text(encoding="utf-8")
    assert "bbh_fewshot" in text and "tracking_shuffled_objects_seven_objects" in text


def test_stop_tilt_makes_greedy_generation_reach_the_stop_sequences(
    gpt2_a: Path, tmp_path: Path
) -> None:
    """The parity benchmark's tilted model: the next token becomes a stop token."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import _lm_eval_tasks as local
    from evalsweep.tasks.bbh import UNTIL

    def next_tokens(path: Path) -> list[int]:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        out = []
        for text in ("Q: Is 2 + 2 = 4?\nA:", "Sort the words: pear apple\nA:", "not ( True )"):
            ids = tokenizer(text, return_tensors="pt").input_ids
            with torch.no_grad():
                out.append(int(model(ids).logits[0, -1].argmax()))
        return out

    tilted = shutil.copytree(gpt2_a, tmp_path / "tilted")
    stop_ids = local.tilt_toward_stops(tilted, UNTIL, alpha=50.0, weight_scale=3.0)
    tokenizer = AutoTokenizer.from_pretrained(tilted)
    assert tokenizer.eos_token_id in stop_ids
    assert all(
        i == tokenizer.eos_token_id or any(s in tokenizer.decode([i]) for s in UNTIL)
        for i in stop_ids
    )
    assert not set(next_tokens(gpt2_a)) & set(stop_ids)  # the random model never stops
    assert set(next_tokens(tilted)) <= set(stop_ids)
