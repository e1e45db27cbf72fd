"""The SQLite results store itself: rows round-trip exactly, a write is all or nothing,
rows survive reopening, and a bad row or a missing run is one line naming it."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

import pytest

from evalsweep.errors import StoreError
from evalsweep.store import Store
from evalsweep.store._sqlite import SampleRecord, ScoreRecord


def _row(
    doc: int, *, task: str = "arc_easy", correct: bool = True, **changes: object
) -> SampleRecord:
    ask = {"context": "Q: é?\n", "continuation": " A"}
    record = SampleRecord(
        checkpoint="sha-a", backend="hf", task=task, settings="s1", doc_key=f"{doc:03d}",
        doc_id=doc, subject=None if doc % 2 else "physics", request_hash=f"h{doc}",
        requests=[ask, {**ask, "continuation": " B"}],
        responses=[[-1.5, True], [-2.25, False]], target="A", prediction="A" if correct else "B",
        correct=correct, response=None, metrics={"acc": float(correct), "acc_norm": 0.5},
        details={"scores": [-1.5, -2.25]}, document={"question": "é?", "id": doc},
    )  # fmt: skip
    return dataclasses.replace(record, **changes)  # type: ignore[arg-type]


def test_rows_come_back_exactly_as_written_and_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    rows = [_row(i, correct=i % 3 != 0) for i in range(5)]
    with Store(path) as store:
        store.write(rows)
    with Store(path) as again:
        got = again.fetch("sha-a", "hf", "arc_easy", "s1", [r.doc_key for r in rows] + ["nope"])
        assert got == {r.doc_key: r for r in rows}
        assert list(again.records(task="arc_easy")) == rows
        assert list(again.records(task="gsm8k")) == []
        assert again.scores("sha-a", "arc_easy", "hf", "s1") == [
            ScoreRecord(r.doc_key, r.doc_id, r.subject, r.correct, r.metrics) for r in rows
        ]


def test_a_row_written_again_replaces_the_old_one(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        store.write([_row(1, correct=True)])
        store.write([_row(1, correct=False)])
        (only,) = store.records()
        assert only.correct is False and only.prediction == "B"


def test_a_write_with_one_bad_row_writes_nothing_and_names_the_row(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        bad = _row(7, prediction="\ud800")
        with pytest.raises(StoreError, match=r"prediction of arc_easy document '007'.*nothing"):
            store.write([_row(6), bad])
        assert list(store.records()) == []


def test_runs_and_keys_are_kept_and_a_missing_run_is_named(tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store:
        store.save_run("run-1", '{"schema": 3}')
        assert store.load_run("run-1") == '{"schema": 3}'
        assert [run_id for run_id, _ in store.runs()] == ["run-1"]
        with pytest.raises(StoreError, match="no run 'run-2'"):
            store.load_run("run-2")
        store.remember_key("k1", "backend", {"dtype": "float32"})
        assert store.lookup_key("k1") == {"dtype": "float32"}
        assert store.lookup_key("k2") is None


def test_a_file_that_is_not_a_store_is_one_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "not.sqlite"
    path.write_bytes(b"this is not a database, just some bytes" * 100)
    with pytest.raises(StoreError, match=f"cannot open results store {path}"):
        Store(path)
    # A real SQLite file of someone else's keeps its tables; evalsweep adds its own.
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE theirs (x INTEGER)")
    with Store(other) as store:
        store.write([_row(1)])
    with sqlite3.connect(other) as conn:
        assert conn.execute("SELECT count(*) FROM theirs").fetchone() == (0,)
