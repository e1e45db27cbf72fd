"""``evalsweep`` as a user runs it: the real command line, real checkpoints, a real store."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import Ran, run_cli

TASKS = "mmlu_abstract_algebra,gsm8k"
A, B = "./gpt2-alpha", "./gpt2-beta"


def evalsweep(args: list[str], cwd: Path, env: dict[str, str]) -> Ran:
    """The command as a user in ``cwd`` types it, run in this process."""
    return run_cli(args, env=env, cwd=cwd)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory, gpt2_a: Path, gpt2_b: Path) -> Path:
    """A folder of checkpoints named as a user would name them, run from inside it."""
    root = tmp_path_factory.mktemp("cli")
    (root / A).symlink_to(gpt2_a, target_is_directory=True)
    (root / B).symlink_to(gpt2_b, target_is_directory=True)
    return root


@dataclass
class MainRun:
    ran: Ran
    document: dict[str, Any]
    out: Path
    store: Path


@pytest.fixture(scope="module")
def main_run(workspace: Path, data_dir: Path, cli_env: dict[str, str]) -> MainRun:
    store, out = workspace / "results.sqlite", workspace / "out"
    ran = evalsweep(
        ["run", A, B, "--tasks", TASKS, "--data-dir", str(data_dir), "--limit", "2"]
        + ["--store", str(store), "--out", str(out), "--json"],
        workspace,
        cli_env,
    )
    assert ran.returncode == 0, ran.stderr
    return MainRun(ran, json.loads(ran.stdout), out, store)


@pytest.mark.slow
def test_run_json_lists_checkpoints_with_identities(main_run: MainRun) -> None:
    checkpoints = main_run.document["checkpoints"]
    assert [c["reference"] for c in checkpoints] == [A, B]
    assert all(c["identity"].startswith("local:sha256:") for c in checkpoints)
    assert checkpoints[0]["identity"] != checkpoints[1]["identity"]
    assert "Traceback" not in main_run.ran.stderr


@pytest.mark.slow
def test_run_json_records_settings(main_run: MainRun, data_dir: Path) -> None:
    settings = main_run.document["settings"]
    assert settings["limit"] == 2
    assert settings["data"] == f"local:{data_dir}"
    assert settings["backend"]["backend"] == "hf"
    tasks = settings["tasks"]
    assert tasks["mmlu_abstract_algebra"]["num_fewshot"] == 5
    assert tasks["gsm8k"]["num_fewshot"] == 5
    assert tasks["gsm8k"]["n_documents"] == 2


@pytest.mark.slow
def test_run_json_has_value_stderr_and_n_per_task_and_metric(main_run: MainRun) -> None:
    headline = {
        (r["checkpoint"], r["task"], r["metric"]): r
        for r in main_run.document["results"]
        if r["level"] == "task"
    }
    expected = {
        (c, task, metric)
        for c in (A, B)
        for task, metric in [
            ("mmlu_abstract_algebra", "acc"),
            ("gsm8k", "exact_match,strict-match"),
            ("gsm8k", "exact_match,flexible-extract"),
        ]
    }
    assert set(headline) == expected
    for row in headline.values():
        assert row["n"] == 2
        assert 0.0 <= row["value"] <= 1.0
        assert "stderr" in row and (row["stderr"] is None or row["stderr"] >= 0)


@pytest.mark.slow
def test_run_json_records_versions_and_hardware(main_run: MainRun) -> None:
    environment = main_run.document["environment"]
    versions = environment["versions"]
    for package in ("evalsweep", "torch", "transformers"):
        assert versions[package], package
    import torch
    import transformers

    assert versions["torch"] == torch.__version__
    assert versions["transformers"] == transformers.__version__
    assert environment["hardware"]["cpu_count"] == os.cpu_count()


@pytest.mark.slow
def test_run_json_compares_candidate_with_baseline(main_run: MainRun) -> None:
    comparisons = main_run.document["comparisons"]
    headline = {(c["task"], c["metric"]) for c in comparisons if c["subject"] is None}
    assert headline == {
        ("mmlu_abstract_algebra", "acc"),
        ("gsm8k", "exact_match,strict-match"),
        ("gsm8k", "exact_match,flexible-extract"),
    }
    assert {(c["baseline"], c["candidate"]) for c in comparisons} == {(A, B)}
    assert all(c["n"] == 2 and "verdict" in c for c in comparisons)


@pytest.mark.slow
def test_samples_jsonl_has_one_line_per_checkpoint_task_and_document(main_run: MainRun) -> None:
    text = (main_run.out / "samples.jsonl").read_text(encoding="utf-8")
    lines = [json.loads(line) for line in text.splitlines()]
    keys = sorted((s["checkpoint"], s["task"], s["doc_id"]) for s in lines)
    assert keys == sorted(
        (c, t, i) for c in (A, B) for t in ("mmlu_abstract_algebra", "gsm8k") for i in (0, 1)
    )
    for sample in lines:
        for field in ("target", "prediction", "correct"):
            assert field in sample, field
        assert isinstance(sample["correct"], bool)
        if sample["task"] == "gsm8k":
            assert isinstance(sample["response"], str)
            assert sample["target"] == {0: "18", 1: "3"}[sample["doc_id"]]
        else:
            assert sample["subject"] == "abstract_algebra"
            assert sample["prediction"] in {"A", "B", "C", "D"}
            assert sample["target"] == {0: "B", 1: "C"}[sample["doc_id"]]


@pytest.mark.slow
def test_results_json_file_equals_printed_document(main_run: MainRun) -> None:
    written = json.loads((main_run.out / "results.json").read_text(encoding="utf-8"))
    assert written == main_run.document


@pytest.mark.slow
def test_table_shows_each_checkpoint_and_no_regression_exits_zero(
    main_run: MainRun, workspace: Path, data_dir: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    assert all(c["verdict"] != "regression" for c in main_run.document["comparisons"])
    store = tmp_path / "results.sqlite"
    shutil.copyfile(main_run.store, store)
    ran = evalsweep(
        ["run", A, B, "--tasks", TASKS, "--data-dir", str(data_dir), "--limit", "2"]
        + ["--store", str(store), "--fail-on-regression"],
        workspace,
        cli_env,
    )
    assert ran.returncode == 0, ran.stderr
    # Folders that share a parent are labelled by their own names.
    assert "gpt2-alpha (baseline)" in ran.stdout
    assert "gpt2-beta" in ran.stdout
    assert "mmlu_abstract_algebra" in ran.stdout and "gsm8k" in ran.stdout
    assert "Traceback" not in ran.stderr


@pytest.mark.parametrize("command", [[], ["run"], ["tasks"], ["demo"]])
def test_help_works_for_each_command(
    command: list[str], tmp_path: Path, cli_env: dict[str, str]
) -> None:
    ran = evalsweep([*command, "--help"], tmp_path, cli_env)
    assert ran.returncode == 0, ran.stderr
    assert "Usage:" in ran.stdout
    if command == ["run"]:
        for option in ("--tasks", "--limit", "--store", "--out", "--baseline", "--json"):
            assert option in ran.stdout


def test_tasks_json_lists_mmlu_and_gsm8k(tmp_path: Path, cli_env: dict[str, str]) -> None:
    ran = evalsweep(["tasks", "--json"], tmp_path, cli_env)
    assert ran.returncode == 0, ran.stderr
    rows = {row["name"]: row for row in json.loads(ran.stdout)}
    assert {"mmlu", "gsm8k"} <= set(rows)
    assert rows["gsm8k"]["metrics"] == ["exact_match,strict-match", "exact_match,flexible-extract"]
    assert rows["mmlu"]["metrics"] == ["acc"]


# -- bad input: one line on stderr, no traceback, nothing stored ---------------------------


def broken_copy(source: Path, target: Path, breakage: Callable[[Path], None]) -> Path:
    shutil.copytree(source, target)
    breakage(target)
    return target


def no_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()


def corrupt_weights(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])


@pytest.fixture(scope="module")
def bad_inputs(
    workspace: Path, gpt2_a: Path, data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    broken_copy(gpt2_a, workspace / "noweights", no_weights)
    broken_copy(gpt2_a, workspace / "corrupt", corrupt_weights)
    partial = tmp_path_factory.mktemp("partial-data")
    for split in ("test", "dev"):
        (partial / "mmlu" / split).mkdir(parents=True)
        name = f"abstract_algebra_{split}.csv"
        shutil.copyfile(data_dir / "mmlu" / split / name, partial / "mmlu" / split / name)
    (partial / "gsm8k").mkdir()  # no test.jsonl / train.jsonl
    return partial


BAD_INPUTS = {
    "unknown_task": ([A], ["--tasks", "mmlu_abstract_algebra,nope"], "unknown task 'nope'"),
    "missing_data_file": ([A], ["--tasks", TASKS, "--data-dir", "{partial}"], "test.jsonl"),
    "checkpoint_without_weights": (["./noweights"], [], "'./noweights': no weight files"),
    "unknown_baseline": ([A, B], ["--baseline", "./c"], "--baseline './c'"),
    "limit_zero": ([A], ["--limit", "0"], "--limit must be at least 1"),
    "gsm8k_more_shots_than_train": ([A], ["--tasks", "gsm8k", "--num-fewshot", "8000"], "8000"),
    "hub_offline": (["EleutherAI/pythia-70m@step1000"], [], "cannot reach the Hub"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_fails_with_one_line_and_stores_nothing(
    case: str,
    bad_inputs: Path,
    workspace: Path,
    data_dir: Path,
    cli_env: dict[str, str],
    tmp_path: Path,
    sample_rows: Callable[[Path], int],
) -> None:
    checkpoints, extra, expected = BAD_INPUTS[case]
    extra = [arg.replace("{partial}", str(bad_inputs)) for arg in extra]
    store = tmp_path / "results.sqlite"
    defaults = ["--tasks", "mmlu_abstract_algebra", "--data-dir", str(data_dir), "--limit", "2"]
    ran = evalsweep(
        ["run", *checkpoints, *defaults, *extra, "--store", str(store), "--json"],
        workspace,
        cli_env,
    )
    assert ran.returncode not in (0, 1), (ran.returncode, ran.stderr)
    assert "Traceback" not in ran.stderr + ran.stdout
    assert len(ran.stderr_lines) == 1, ran.stderr
    assert ran.stderr_lines[0].startswith("evalsweep: error: ")
    assert expected in ran.stderr_lines[0]
    assert ran.stdout == ""
    assert sample_rows(store) == 0


def test_corrupt_second_checkpoint_fails_before_first_is_computed(
    bad_inputs: Path,
    workspace: Path,
    data_dir: Path,
    cli_env: dict[str, str],
    tmp_path: Path,
    sample_rows: Callable[[Path], int],
) -> None:
    """A truncated safetensors file is reported in one line, and must stop the sweep
    before any checkpoint is computed (it is second here, after a good one)."""
    store = tmp_path / "results.sqlite"
    ran = evalsweep(
        ["run", A, "./corrupt", "--tasks", "mmlu_abstract_algebra"]
        + ["--data-dir", str(data_dir), "--limit", "2", "--store", str(store), "--json"],
        workspace,
        cli_env,
    )
    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr
    assert len(ran.stderr_lines) == 1, ran.stderr
    assert ran.stderr_lines[0].startswith("evalsweep: error: checkpoint './corrupt'")
    assert sample_rows(store) == 0, (
        "rows of the first checkpoint were computed before ./corrupt was found broken"
    )


# -- a real regression: two checkpoints that always answer the same letter -----------------


def letter_checkpoint(source: Path, target: Path, letter: str) -> Path:
    """A real GPT-2 whose final layer norm outputs one fixed vector, so that every
    position predicts the same distribution, peaked on the token of ``" <letter>"``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source)
    context = "Answer:"
    (token,) = tokenizer.encode(context + " " + letter)[len(tokenizer.encode(context)) :]
    with torch.no_grad():
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(model.transformer.wte.weight[token] * 100)
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    return target


@pytest.mark.slow
def test_fail_on_regression_exits_3_when_candidate_is_significantly_worse(
    workspace: Path, gpt2_a: Path, data_dir: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    # public_relations, first 40 questions: 19 have answer B and 3 have answer A.
    letter_checkpoint(gpt2_a, workspace / "always-b", "B")
    letter_checkpoint(gpt2_a, workspace / "always-a", "A")
    ran = evalsweep(
        ["run", "./always-b", "./always-a", "--tasks", "mmlu_public_relations"]
        + ["--data-dir", str(data_dir), "--limit", "40", "--num-fewshot", "0"]
        + ["--store", str(tmp_path / "results.sqlite"), "--json", "--fail-on-regression"],
        workspace,
        cli_env,
    )
    document = json.loads(ran.stdout)
    acc = {
        r["checkpoint"]: r["value"]
        for r in document["results"]
        if r["level"] == "task" and r["metric"] == "acc"
    }
    assert acc == {"./always-b": pytest.approx(19 / 40), "./always-a": pytest.approx(3 / 40)}
    (comparison,) = [c for c in document["comparisons"] if c["subject"] is None]
    assert comparison["verdict"] == "regression"
    assert ran.returncode == 3, ran.stderr


def test_bad_input_without_json_also_fails_with_one_line(
    workspace: Path, data_dir: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    ran = evalsweep(
        ["run", A, "--tasks", "mmlu_abstract_algebra,nope", "--data-dir", str(data_dir)]
        + ["--store", str(tmp_path / "results.sqlite")],
        workspace,
        cli_env,
    )
    assert ran.returncode == 2, ran.stderr
    assert "Traceback" not in ran.stderr
    assert len(ran.stderr_lines) == 1, ran.stderr
    assert ran.stderr_lines[0].startswith("evalsweep: error: unknown task 'nope'")
