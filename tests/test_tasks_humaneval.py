"""HumanEval as a task: prompts, sandboxed scoring, pass@k, sampling, end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from evalsweep.requests import GenerationRequest
from evalsweep.tasks import DataSource, get_task
from evalsweep.tasks.humaneval import UNTIL, HumanEval


@pytest.fixture(scope="module")
def problems(data_dir: Path):  # type: ignore[no-untyped-def]
    task = HumanEval(samples=2, temperature=0.8, ks=(1, 2))
    data = task.load(DataSource(str(data_dir)), 3)
    return task, data, task.prepare(data, 0)


def test_prompt_is_the_problem_prompt_with_lm_eval_stops(problems) -> None:  # type: ignore[no-untyped-def]
    task, data, prepared = problems
    first = prepared[0]
    assert first.document.key == "HumanEval/0"
    assert first.requests[0].context.startswith("from typing import List\n")
    assert first.requests[0].until == UNTIL
    assert first.requests[0].max_gen_toks == 1024
    assert [r.sample_index for r in first.requests] == [0, 1]
    assert first.requests[0].key() != first.requests[1].key()


def test_canonical_solution_passes_and_a_wrong_one_fails_in_the_sandbox(problems) -> None:  # type: ignore[no-untyped-def]
    task, data, prepared = problems
    try:
        for problem, item in zip(data.fewshot_pool["problems"], prepared, strict=True):
            scored = task.score(item.document, [problem.canonical_solution, "    return None\n"])
            assert scored.details["verdicts"][0] == "passed"
            assert scored.details["verdicts"][1] == "failed"
            assert scored.metrics["pass@1"] == pytest.approx(0.5)
            assert scored.metrics["pass@2"] == pytest.approx(1.0)
    finally:
        task.close()


def test_hostile_completion_only_fails_itself(problems) -> None:  # type: ignore[no-untyped-def]
    task, data, prepared = problems
    problem = data.fewshot_pool["problems"][0]
    try:
        scored = task.score(
            prepared[0].document, ["    import os\n    os.kill(0, 9)\n", problem.canonical_solution]
        )
        assert scored.details["verdicts"][0] != "passed"
        assert scored.details["verdicts"][1] == "passed"
    finally:
        task.close()


def test_several_samples_need_a_temperature() -> None:
    from evalsweep.errors import TaskError

    with pytest.raises(TaskError, match="temperature"):
        HumanEval(samples=4, temperature=0.0)
    with pytest.raises(TaskError, match="at least 1"):
        HumanEval(samples=4, temperature=0.8, ks=(1, 0))


def test_sampled_generation_is_seeded_per_sample_not_per_batch(gpt2_a: Path) -> None:
    from evalsweep.checkpoints import resolve_checkpoint
    from evalsweep.models import BackendOptions, load_backend

    requests = [
        GenerationRequest("def add(a, b):\n", ("\ndef",), 12, True, 1.0, sample_index=i)
        for i in range(4)
    ]
    together = load_backend("hf", resolve_checkpoint(str(gpt2_a)), BackendOptions(device="cpu"))
    alone = load_backend(
        "hf", resolve_checkpoint(str(gpt2_a)), BackendOptions(device="cpu", batch_size=1)
    )
    batched = together.generate_until(requests)
    single = alone.generate_until(requests)
    assert batched == single
    assert len(set(batched)) > 1  # different sample indices draw differently


def _always_eos(root: Path, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    import torch
    from transformers import GPT2LMHeadModel

    from evalsweep.demo import build_checkpoint

    path = build_checkpoint(root / "always-eos", tokenizer, n_layer=1, width=32, n_head=2)
    model = GPT2LMHeadModel.from_pretrained(path)
    with torch.no_grad():
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(model.transformer.wte.weight[tokenizer.eos_token_id] * 50)
    model.save_pretrained(path, safe_serialization=True)
    return path


def test_cli_run_scores_humaneval_through_the_sandbox(
    tmp_path: Path, tokenizer, data_dir: Path, store_path: Path, cli_env: dict[str, str]
) -> None:  # type: ignore[no-untyped-def]
    model = _always_eos(tmp_path, tokenizer)
    args = [
        "run", str(model), "--tasks", "humaneval", "--data-dir", str(data_dir),
        "--limit", "2", "--store", str(store_path), "--out", str(tmp_path / "out"), "--json",
    ]  # fmt: skip
    result = run_cli(args, env=cli_env)
    assert result.returncode == 0, result.stderr
    (row,) = [r for r in json.loads(result.stdout)["results"] if r["task"] == "humaneval"]
    assert row["metric"] == "pass@1" and row["value"] == 0.0 and row["n"] == 2
    lines = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert [x["response"] for x in lines] == ["", ""]
    assert all(x["verdicts"][0] in {"failed", "error"} for x in lines)


def test_humaneval_is_listed() -> None:
    assert get_task("humaneval").name == "humaneval"


def test_mbpp_prompt_matches_lm_eval_format(data_dir: Path) -> None:
    from evalsweep.tasks.mbpp import MBPP

    task = MBPP()
    data = task.load(DataSource(str(data_dir)), 2)
    (first, _second) = task.prepare(data, 3)
    context = first.requests[0].context
    assert first.document.key == "MBPP/11"
    assert context.count("[DONE]\n\n") == 3
    assert context.startswith(
        "You are an expert Python programmer, and here is your task: Write a function to find "
        "the similar elements from the given two tuple lists. Your code should pass these tests:"
        "\n\nassert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)\n"
    )
    assert context.endswith(
        "Write a python function to remove first and last occurrence of a given character from "
        'the string. Your code should pass these tests:\n\nassert remove_Occ("hello","l") == "heo"'
        '\nassert remove_Occ("abcda","a") == "bcd"\nassert remove_Occ("PHP","P") == "H"\n[BEGIN]\n'
    )
    assert first.requests[0].until == ("[DONE]",)


def test_mbpp_reference_code_passes_and_wrong_code_fails(data_dir: Path) -> None:
    from evalsweep.tasks.mbpp import MBPP

    rows = {
        json.loads(line)["task_id"]: json.loads(line)
        for line in (data_dir / "mbpp" / "mbpp.jsonl").read_text().splitlines()
    }
    task = MBPP(samples=2, temperature=0.5, ks=(1,))
    data = task.load(DataSource(str(data_dir)), 3)
    try:
        for doc in data.documents:
            task.prepare(data, 3)
            reference = rows[int(doc.key.split("/")[1])]["code"]
            scored = task.score(doc, [reference, "def unrelated():\n    return 0\n"])
            assert scored.details["verdicts"] == ["passed", "failed"]
            assert scored.metrics["pass@1"] == pytest.approx(0.5)
    finally:
        task.close()
