"""Verdicts end to end: real checkpoints that prefer one answer letter, on real MMLU rows.

A GPT-2 whose final layer norm has zero weight outputs the same hidden state
(its bias) at every position; setting that bias to the embedding of " B"
makes the tied output layer rank " B" first everywhere. On questions whose
answer is A, an " A"-model scores 100% and a " B"-model 0%: a certain
regression, which the statistics, the table, ``compare``, ``flips`` and
``--fail-on-regression`` must all report.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from conftest import Ran, run_cli

SUBJECT = "high_school_geography"


def _letter_model(root: Path, tokenizer, letter: str) -> Path:  # type: ignore[no-untyped-def]
    import torch
    from transformers import GPT2LMHeadModel

    from evalsweep.demo import build_checkpoint

    path = build_checkpoint(root / f"always-{letter}", tokenizer, n_layer=1, width=32, n_head=2)
    model = GPT2LMHeadModel.from_pretrained(path)
    (token,) = tokenizer.encode(" " + letter)
    with torch.no_grad():
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(model.transformer.wte.weight[token] * 50)
    model.save_pretrained(path, safe_serialization=True)
    return path


@pytest.fixture(scope="module")
def letter_models(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    for letter in "AB":
        assert len(tokenizer.encode(" " + letter)) == 1, "the test needs single-token letters"
    root = tmp_path_factory.mktemp("letters")
    return {letter: _letter_model(root, tokenizer, letter) for letter in "AB"}


@pytest.fixture(scope="module")
def a_answers(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    """A data folder whose SUBJECT test file holds only the real rows answered A."""
    out = tmp_path_factory.mktemp("data")
    for split in ("dev", "test"):
        (out / "mmlu" / split).mkdir(parents=True)
    source = data_dir / "mmlu"
    (out / "mmlu" / "dev" / f"{SUBJECT}_dev.csv").write_bytes(
        (source / "dev" / f"{SUBJECT}_dev.csv").read_bytes()
    )
    with (source / "test" / f"{SUBJECT}_test.csv").open(newline="", encoding="utf-8") as handle:
        rows = [row for row in csv.reader(handle) if row[5] == "A"][:12]
    assert len(rows) == 12
    with (out / "mmlu" / "test" / f"{SUBJECT}_test.csv").open(
        "w", newline="", encoding="utf-8"
    ) as h:
        csv.writer(h).writerows(rows)
    return out


def _evalsweep(env: dict[str, str], *args: str) -> Ran:
    return run_cli(args, env=env)


def _run(env, models, data, store, *refs: str, extra: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    return _evalsweep(
        env, "run", *[str(models[r]) for r in refs], "--tasks", f"mmlu_{SUBJECT}",
        "--data-dir", str(data), "--store", str(store), "--num-fewshot", "1", *extra,
    )  # fmt: skip


def test_letter_models_answer_as_built(letter_models, a_answers, store_path, cli_env):  # type: ignore[no-untyped-def]
    result = _run(cli_env, letter_models, a_answers, store_path, "A", "B", extra=("--json",))
    assert result.returncode == 0, result.stderr
    values = {
        Path(r["checkpoint"]).name: r["value"]
        for r in json.loads(result.stdout)["results"]
        if r["level"] == "task"
    }
    assert values == {"always-A": 1.0, "always-B": 0.0}


def test_certain_drop_is_a_regression_with_exit_status_3(
    letter_models, a_answers, store_path, cli_env
):  # type: ignore[no-untyped-def]
    result = _run(
        cli_env, letter_models, a_answers, store_path, "A", "B",
        extra=("--json", "--fail-on-regression"),
    )  # fmt: skip
    assert result.returncode == 3, result.stderr
    (comparison,) = [c for c in json.loads(result.stdout)["comparisons"] if c["subject"] is None]
    assert comparison["verdict"] == "regression"
    assert comparison["delta"] == pytest.approx(-1.0)
    assert comparison["ci_high"] < 0
    assert comparison["p_value"] == pytest.approx(2 * 0.5**12)  # exact McNemar, 12 discordant
    assert comparison["n"] == 12
    for key in ("baseline", "candidate", "task", "metric", "ci_low", "p_adjusted", "mde"):
        assert key in comparison


def test_certain_gain_is_an_improvement_and_passes_the_gate(
    letter_models, a_answers, store_path, cli_env
):  # type: ignore[no-untyped-def]
    result = _run(
        cli_env, letter_models, a_answers, store_path, "B", "A",
        extra=("--json", "--fail-on-regression"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    verdicts = {c["verdict"] for c in json.loads(result.stdout)["comparisons"]}
    assert verdicts == {"improvement"}


def test_table_marks_the_regression(letter_models, a_answers, store_path, cli_env):  # type: ignore[no-untyped-def]
    result = _run(cli_env, letter_models, a_answers, store_path, "A", "B")
    assert result.returncode == 0, result.stderr
    assert "always-A (baseline)" in result.stdout
    assert "Δ -100.0 points ▼" in result.stdout


def test_compare_recomputes_from_separate_runs_without_a_model(
    letter_models, a_answers, store_path, cli_env, tmp_path
):  # type: ignore[no-untyped-def]
    assert _run(cli_env, letter_models, a_answers, store_path, "A").returncode == 0
    assert _run(cli_env, letter_models, a_answers, store_path, "B").returncode == 0
    # The folders are gone: compare must work from the store alone.
    moved = {k: tmp_path / f"gone-{k}" for k in letter_models}
    refs = [str(letter_models["A"]), str(letter_models["B"])]
    result = _evalsweep(
        cli_env,
        "compare",
        *refs,
        "--tasks",
        f"mmlu_{SUBJECT}",
        "--store",
        str(store_path),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    (comparison,) = [c for c in document["comparisons"] if c["subject"] is None]
    assert comparison["verdict"] == "regression"
    assert comparison["baseline"] == refs[0]
    assert not any(p.exists() for p in moved.values())


def test_compare_refuses_results_made_with_different_settings(
    letter_models, a_answers, store_path, cli_env
):  # type: ignore[no-untyped-def]
    assert _run(cli_env, letter_models, a_answers, store_path, "A").returncode == 0
    other = _evalsweep(
        cli_env, "run", str(letter_models["B"]), "--tasks", f"mmlu_{SUBJECT}", "--data-dir",
        str(a_answers), "--store", str(store_path), "--num-fewshot", "0",
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    refs = [str(letter_models["A"]), str(letter_models["B"])]
    result = _evalsweep(
        cli_env, "compare", *refs, "--tasks", f"mmlu_{SUBJECT}", "--store", str(store_path)
    )
    assert result.returncode != 0
    assert "settings differ" in result.stderr
    assert "1-shot" in result.stderr and "0-shot" in result.stderr
    assert "Traceback" not in result.stderr


def test_flips_lists_every_question_that_changed(letter_models, a_answers, store_path, cli_env):  # type: ignore[no-untyped-def]
    assert _run(cli_env, letter_models, a_answers, store_path, "A", "B").returncode == 0
    result = _evalsweep(
        cli_env, "flips", str(letter_models["B"]), "--baseline", str(letter_models["A"]),
        "--tasks", f"mmlu_{SUBJECT}", "--store", str(store_path), "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    flips = json.loads(result.stdout)
    assert [f["doc_id"] for f in flips] == list(range(12))
    assert {f["direction"] for f in flips} == {"regressed"}
    assert {(f["target"], f["baseline_prediction"], f["candidate_prediction"]) for f in flips} == {
        ("A", "A", "B")
    }
    assert all(f["question"] for f in flips)


def test_unknown_baseline_fails_before_any_compute(
    letter_models, a_answers, store_path, cli_env, sample_rows
):  # type: ignore[no-untyped-def]
    result = _run(
        cli_env, letter_models, a_answers, store_path, "A", "B", extra=("--baseline", "nope")
    )
    assert result.returncode != 0
    assert "--baseline 'nope'" in result.stderr
    assert "Traceback" not in result.stderr
    assert sample_rows(store_path) == 0
