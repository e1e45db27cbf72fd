"""Suites: ``--tasks leaderboard`` is the Open LLM Leaderboard's six tasks at its counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli
from evalsweep.engine import SweepSpec, plan_sweep
from evalsweep.errors import TaskError
from evalsweep.tasks import SUITES, expand_suites, get_task

LEADERBOARD = [
    ("arc_challenge", 25),
    ("hellaswag", 10),
    ("mmlu", 5),
    ("truthfulqa_mc2", 0),
    ("winogrande", 5),
    ("gsm8k", 5),
]


def test_leaderboard_is_the_open_llm_leaderboard_v1() -> None:
    assert list(SUITES["leaderboard"].members) == LEADERBOARD
    assert expand_suites(["leaderboard"], None) == LEADERBOARD
    for name, _ in LEADERBOARD:
        assert get_task(name).name == name  # every member is a registered task


def test_a_task_named_beside_a_suite_runs_once_where_first_named() -> None:
    assert expand_suites(["mmlu", "leaderboard", "piqa", "gsm8k"], None) == [
        ("mmlu", None),
        *[m for m in LEADERBOARD if m[0] != "mmlu"],
        ("piqa", None),
    ]


def test_a_suite_refuses_num_fewshot_naming_its_counts() -> None:
    with pytest.raises(TaskError, match=r"suite 'leaderboard'.*arc_challenge 25-shot"):
        expand_suites(["leaderboard"], 3)
    assert expand_suites(["mmlu"], 3) == [("mmlu", None)]  # plain tasks take it as before


def test_unknown_task_error_lists_the_suites() -> None:
    with pytest.raises(TaskError, match="suites: leaderboard"):
        get_task("leaderbord")


def test_plan_runs_each_member_at_the_suites_count(gpt2_a: Path, data_dir: Path) -> None:
    spec = SweepSpec(
        checkpoints=[str(gpt2_a)], tasks=["leaderboard", "piqa"], data_dir=str(data_dir), limit=2
    )
    _, runs = plan_sweep(spec)
    assert [(name, run.num_fewshot) for name, run in runs.items()] == [*LEADERBOARD, ("piqa", 0)]
    arc = runs["arc_challenge"].prepared[0].requests[0].context
    assert arc.count("\nAnswer: ") == 25  # 25 examples, then the question's own "Answer:"
    assert runs["arc_challenge"].settings["num_fewshot"] == 25  # and in the cache key


def test_tasks_command_lists_suites_beside_tasks(tmp_path: Path, cli_env: dict[str, str]) -> None:
    ran = run_cli(["tasks", "--json"], env=cli_env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    rows = {row["name"]: row for row in json.loads(ran.stdout)}
    assert rows["leaderboard"]["kind"] == "suite"
    assert [(t["name"], t["num_fewshot"]) for t in rows["leaderboard"]["tasks"]] == LEADERBOARD
    assert rows["winogrande"]["kind"] == "task"
    text = run_cli(["tasks"], env=cli_env, cwd=tmp_path)
    assert "leaderboard  Open LLM Leaderboard (v1): arc_challenge 25-shot" in text.stdout


def test_run_with_a_suite_and_num_fewshot_is_one_line_error(
    tmp_path: Path, gpt2_a: Path, data_dir: Path, cli_env: dict[str, str]
) -> None:
    ran = run_cli(
        ["run", str(gpt2_a), "--tasks", "leaderboard", "--num-fewshot", "3", "--data-dir",
         str(data_dir), "--store", str(tmp_path / "s.db"), "--out", str(tmp_path / "out")],
        env=cli_env,
    )  # fmt: skip
    assert ran.returncode != 0
    assert "--num-fewshot cannot be combined with the suite 'leaderboard'" in ran.stderr
    assert "Traceback" not in ran.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_leaderboard_run_then_compare_from_the_store(
    tmp_path: Path, gpt2_a: Path, gpt2_b: Path, data_dir: Path, cli_env: dict[str, str]
) -> None:
    store = str(tmp_path / "s.db")
    ran = run_cli(
        ["run", str(gpt2_a), str(gpt2_b), "--tasks", "leaderboard", "--limit", "2",
         "--data-dir", str(data_dir), "--device", "cpu", "--store", store],
        env=cli_env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "arc_challenge (25-shot)" in ran.stdout  # the table's header says the count
    compared = run_cli(
        ["compare", str(gpt2_a), str(gpt2_b), "--tasks", "leaderboard", "--store", store,
         "--json"],
        env=cli_env,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    document = json.loads(compared.stdout)
    assert list(dict.fromkeys(c["task"] for c in document["comparisons"])) == [
        name for name, _ in LEADERBOARD
    ]
    shots = {name: t["num_fewshot"] for name, t in document["settings"]["tasks"].items()}
    assert shots == dict(LEADERBOARD)
    tests = {c["task"]: c["test"] for c in document["comparisons"] if c["subject"] is None}
    assert tests["truthfulqa_mc2"].startswith("sign-flip")


def test_ray_shards_name_each_member_with_the_suites_count() -> None:
    from evalsweep.compute._ray import spec_tasks

    spec = SweepSpec(checkpoints=["a"], tasks=["piqa", "leaderboard"])
    assert spec_tasks(spec) == {"piqa": ("piqa", None), **{n: (n, k) for n, k in LEADERBOARD}}
