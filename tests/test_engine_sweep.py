"""run_sweep end to end: plan before compute, store lookups, chunked commits, resume."""

from __future__ import annotations

import csv
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import evalsweep.engine._sweep as sweep_module
from evalsweep.engine import SweepResult, SweepSpec, run_sweep
from evalsweep.errors import CheckpointError, DataError
from evalsweep.models import BackendOptions
from evalsweep.store import Store
from evalsweep.tasks.mmlu import MMLU

SUBJECTS = ["abstract_algebra", "anatomy"]
OPTIONS = BackendOptions(device="cpu", dtype="float32")


class RecordingProgress:
    """A real Progress implementation that remembers what the engine reported."""

    def __init__(self, on_advance: Callable[[int], None] | None = None) -> None:
        self.notes: list[str] = []
        self.advanced = 0
        self.on_advance = on_advance

    def start(self, label: str, total: int) -> None:
        pass

    def advance(self, count: int) -> None:
        self.advanced += count
        if self.on_advance:
            self.on_advance(self.advanced)

    def finish(self) -> None:
        pass

    def note(self, message: str) -> None:
        self.notes.append(message)


def spec_for(
    checkpoints: list[Path],
    data_dir: Path,
    limit: int,
    gsm8k: bool = True,
    subjects: list[str] = SUBJECTS,
    num_fewshot: int | None = None,
) -> SweepSpec:
    tasks: list[Any] = [MMLU(subjects=subjects)] + (["gsm8k"] if gsm8k else [])
    return SweepSpec(
        checkpoints=[str(c) for c in checkpoints],
        tasks=tasks,
        data_dir=str(data_dir),
        limit=limit,
        num_fewshot=num_fewshot,
        options=OPTIONS,
    )


def by_task(result: SweepResult) -> dict[tuple[str, str], Any]:
    return {(r.checkpoint.reference, r.task): r for r in result.results}


def scores(result: SweepResult) -> dict[tuple[str, str], Any]:
    """Everything a result says, per checkpoint and task, for equality checks."""
    return {
        key: (
            [d.key for d in item.documents],
            [(s.prediction, s.target, dict(s.metrics), s.response) for s in item.scored],
            [(a.metric, a.level, a.group, a.value, a.n) for a in item.aggregates],
        )
        for key, item in by_task(result).items()
    }


@dataclass
class FirstSweep:
    spec: SweepSpec
    result: SweepResult
    store_file: Path


@pytest.fixture(scope="module")
def first_sweep(
    gpt2_a: Path, gpt2_b: Path, data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> FirstSweep:
    """Two checkpoints x (MMLU, 2 subjects, limit 2 per subject + GSM8K limit 2)."""
    store_file = tmp_path_factory.mktemp("first-sweep") / "results.sqlite"
    spec = spec_for([gpt2_a, gpt2_b], data_dir, limit=2)
    with Store(store_file) as store:
        result = run_sweep(spec, store)
    return FirstSweep(spec, result, store_file)


def copy_store(first: FirstSweep, store_path: Path) -> Store:
    shutil.copyfile(first.store_file, store_path)
    return Store(store_path)


def test_sweep_scores_every_checkpoint_on_every_task(first_sweep: FirstSweep) -> None:
    items = by_task(first_sweep.result)
    references = list(first_sweep.spec.checkpoints)
    assert sorted(items) == sorted((c, t) for c in references for t in ("mmlu", "gsm8k"))
    for reference in references:
        mmlu, gsm8k = items[(reference, "mmlu")], items[(reference, "gsm8k")]
        assert [d.key for d in mmlu.documents] == [f"{s}/{i}" for s in SUBJECTS for i in (0, 1)]
        assert mmlu.computed == 4
        assert [d.key for d in gsm8k.documents] == ["0", "1"]
        assert gsm8k.computed == 2
        assert all(s.response is not None for s in gsm8k.scored)
        headline = {a.metric: a for a in gsm8k.aggregates}
        assert set(headline) == {"exact_match,strict-match", "exact_match,flexible-extract"}
        overall = [a for a in mmlu.aggregates if a.level == "task"]
        assert len(overall) == 1 and overall[0].n == 4
        values = [s.metrics["acc"] for s in mmlu.scored]
        assert overall[0].value == pytest.approx(sum(values) / len(values))


def test_sweep_stores_one_row_per_checkpoint_task_and_document(
    first_sweep: FirstSweep, store_path: Path
) -> None:
    with copy_store(first_sweep, store_path) as store:
        for checkpoint in first_sweep.result.checkpoints:
            rows = list(store.records(checkpoint=checkpoint.identity))
            assert sorted((r.task, r.doc_key) for r in rows) == sorted(
                [("mmlu", f"{s}/{i}") for s in SUBJECTS for i in (0, 1)]
                + [("gsm8k", "0"), ("gsm8k", "1")]
            )


def test_rerun_computes_nothing_and_gives_identical_results(
    first_sweep: FirstSweep, store_path: Path
) -> None:
    progress = RecordingProgress()
    with copy_store(first_sweep, store_path) as store:
        again = run_sweep(first_sweep.spec, store, progress)
    assert [r.computed for r in again.results] == [0] * len(again.results)
    assert progress.notes == [] and progress.advanced == 0  # no model was even loaded
    assert scores(again) == scores(first_sweep.result)


@pytest.mark.slow
def test_larger_limit_computes_only_the_new_documents(
    first_sweep: FirstSweep, store_path: Path, gpt2_a: Path, data_dir: Path
) -> None:
    with copy_store(first_sweep, store_path) as store:
        bigger = run_sweep(spec_for([gpt2_a], data_dir, limit=3), store)
    old = by_task(first_sweep.result)
    for key, item in by_task(bigger).items():
        new_documents = len(SUBJECTS) if key[1] == "mmlu" else 1
        assert item.computed == new_documents, key
        assert len(item.documents) == len(old[key].documents) + new_documents
        previous = {d.key: s for d, s in zip(old[key].documents, old[key].scored, strict=True)}
        kept = {d.key: s for d, s in zip(item.documents, item.scored, strict=True)}
        assert {k: kept[k] for k in previous} == previous


def test_cache_key_includes_checkpoint_identity(first_sweep: FirstSweep, store_path: Path) -> None:
    a, b = first_sweep.result.checkpoints
    assert a.identity != b.identity
    with copy_store(first_sweep, store_path) as store:
        rows_a = {r.doc_key: r for r in store.records(checkpoint=a.identity, task="mmlu")}
        rows_b = {r.doc_key: r for r in store.records(checkpoint=b.identity, task="mmlu")}
    assert rows_a.keys() == rows_b.keys() and len(rows_a) == 4
    for key in rows_a:
        assert rows_a[key].request_hash == rows_b[key].request_hash  # same prompts
        assert rows_a[key].requests == rows_b[key].requests
        assert rows_a[key].details["logprobs"] != rows_b[key].details["logprobs"]


def test_same_bytes_under_another_folder_reuse_stored_results(
    first_sweep: FirstSweep, store_path: Path, gpt2_a: Path, tmp_path: Path, data_dir: Path
) -> None:
    twin = Path(shutil.copytree(gpt2_a, tmp_path / "same-weights"))
    progress = RecordingProgress()
    with copy_store(first_sweep, store_path) as store:
        result = run_sweep(spec_for([twin], data_dir, limit=2), store, progress)
    assert [r.computed for r in result.results] == [0, 0]
    assert progress.notes == []
    original = {t: v for (c, t), v in scores(first_sweep.result).items() if c == str(gpt2_a)}
    assert {t: v for (_, t), v in scores(result).items()} == original


def test_interrupted_run_keeps_whole_chunks_and_rerun_completes(
    monkeypatch: pytest.MonkeyPatch, gpt2_c: Path, data_dir: Path, store_path: Path, tmp_path: Path
) -> None:
    # Configuration, not a mock: commit every 8 requests (two MMLU questions).
    monkeypatch.setattr(sweep_module, "LOGLIKELIHOOD_CHUNK", 8)
    spec = spec_for([gpt2_c], data_dir, limit=5, gsm8k=False, subjects=["anatomy"])

    def interrupt(advanced: int) -> None:
        if advanced > 8:  # inside the second chunk
            raise KeyboardInterrupt

    with Store(store_path) as store, pytest.raises(KeyboardInterrupt):
        run_sweep(spec, store, RecordingProgress(interrupt))
    with Store(store_path) as store:
        stored = sorted(r.doc_key for r in store.records())
    assert stored == ["anatomy/0", "anatomy/1"]

    with Store(store_path) as store:
        resumed = run_sweep(spec, store)
    with Store(tmp_path / "clean.sqlite") as store:
        clean = run_sweep(spec, store)
    assert [r.computed for r in resumed.results] == [3]
    assert [r.computed for r in clean.results] == [5]
    resumed_lls = [s.details["logprobs"] for s in resumed.results[0].scored]
    clean_lls = [s.details["logprobs"] for s in clean.results[0].scored]
    assert len(resumed_lls) == 5
    for got, want in zip(resumed_lls, clean_lls, strict=True):
        assert got == pytest.approx(want, abs=1e-4)


def test_bad_data_fails_before_any_row_is_written(
    gpt2_a: Path, data_dir: Path, tmp_path: Path, store_path: Path
) -> None:
    local = tmp_path / "data"
    for split in ("test", "dev"):
        (local / "mmlu" / split).mkdir(parents=True)
        name = f"anatomy_{split}.csv"
        shutil.copyfile(data_dir / "mmlu" / split / name, local / "mmlu" / split / name)
    (local / "gsm8k").mkdir()
    good = json.dumps({"question": "q", "answer": "#### 1"})
    (local / "gsm8k" / "train.jsonl").write_text((good + "\n") * 6, encoding="utf-8")
    bad = local / "gsm8k" / "test.jsonl"
    bad.write_text(good + "\n{not json\n", encoding="utf-8")
    # MMLU (valid) comes first: its prompts are built, but nothing is computed.
    spec = spec_for([gpt2_a], local, limit=2, subjects=["anatomy"])
    progress = RecordingProgress()
    with Store(store_path) as store:
        with pytest.raises(DataError, match=f"{bad}:2:"):
            run_sweep(spec, store, progress)
        assert list(store.records()) == []
    assert progress.notes == [] and progress.advanced == 0


def test_unresolvable_second_checkpoint_fails_before_any_row_is_written(
    gpt2_a: Path, data_dir: Path, tmp_path: Path, store_path: Path
) -> None:
    spec = spec_for([gpt2_a, tmp_path / "missing"], data_dir, limit=1, gsm8k=False)
    with Store(store_path) as store:
        with pytest.raises(CheckpointError, match="missing"):
            run_sweep(spec, store)
        assert list(store.records()) == []


def test_corrected_gold_answer_is_not_served_from_a_stale_score(
    gpt2_a: Path, data_dir: Path, tmp_path: Path, store_path: Path
) -> None:
    # 0-shot MMLU: a question's own answer is not part of its prompt, so fixing a
    # wrong label in the data leaves the requests (and the model's answers) as they were.
    local = tmp_path / "data"
    for split in ("test", "dev"):
        (local / "mmlu" / split).mkdir(parents=True)
        name = f"anatomy_{split}.csv"
        shutil.copyfile(data_dir / "mmlu" / split / name, local / "mmlu" / split / name)
    spec = spec_for([gpt2_a], local, limit=2, gsm8k=False, subjects=["anatomy"], num_fewshot=0)
    with Store(store_path) as store:
        before = run_sweep(spec, store).results[0]
    test_file = local / "mmlu" / "test" / "anatomy_test.csv"
    with test_file.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    old_gold = rows[0][5]
    new_gold = (
        before.scored[0].prediction
        if before.scored[0].prediction != old_gold
        else "ABCD"[("ABCD".index(old_gold) + 1) % 4]
    )
    rows[0][5] = new_gold
    with test_file.open("w", newline="", encoding="utf-8") as handle:
        csv.writer(handle).writerows(rows)

    with Store(store_path) as store:
        after = run_sweep(spec, store).results[0]
    first = after.scored[0]
    assert first.target == new_gold
    assert first.correct is (first.prediction == new_gold)
    assert first.metrics["acc"] == float(first.prediction == new_gold)
