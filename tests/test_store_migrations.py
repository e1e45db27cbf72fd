"""Store versions: an older file is upgraded in one transaction after a backup; newer is refused.

``tests/data/stores/v1.sqlite`` was written by evalsweep's schema version 1
(see the README beside it): real rows, a saved run, an audit entry and the
agent's tables.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from evalsweep.agent._schema import AGENT_TABLES, ensure_agent_tables
from evalsweep.cli import main
from evalsweep.engine import stored_sweep
from evalsweep.errors import StoreError
from evalsweep.store import SCHEMA_VERSION, Component, Store

V1_STORE = Path(__file__).parent / "data" / "stores" / "v1.sqlite"
TABLES = ("samples", "keys", "runs", "audit", "agent_ledger", "agent_quotes", "agent_jobs")


@pytest.fixture
def v1_store(tmp_path: Path) -> Path:
    path = tmp_path / "results.sqlite"
    shutil.copyfile(V1_STORE, path)
    return path


def raw_tables(path: Path, requests: bool = True) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, read with SQLite alone, in a fixed order.

    ``requests=False`` leaves out the samples' requests column (packed since version 3).
    """
    with closing(sqlite3.connect(path)) as conn:
        tables = {
            table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
            for table in TABLES
        }
    if not requests:
        tables["samples"] = [row[:8] + row[9:] for row in tables["samples"]]
    return tables


def user_version(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_committed_store_is_of_version_1() -> None:
    assert user_version(V1_STORE) == 1
    assert SCHEMA_VERSION > 1


def test_a_version_1_store_opens_upgraded_with_every_row_kept(v1_store: Path) -> None:
    before = raw_tables(v1_store)
    with Store(v1_store) as store:
        records = list(store.records())
    assert user_version(v1_store) == SCHEMA_VERSION
    assert raw_tables(v1_store, requests=False) == raw_tables(V1_STORE, requests=False)
    assert len(records) == len(before["samples"]) == 12
    by_key = {(r[0], r[1], r[2], r[3], r[4]): r for r in before["samples"]}
    for record in records:
        row = by_key[(record.checkpoint, record.backend, record.task, record.settings,
                      record.doc_key)]  # fmt: skip
        assert json.dumps(record.requests) == row[8]  # the same requests, keys in order
        assert json.loads(row[9]) == record.responses
        assert json.loads(row[14]) == record.metrics and row[11] == record.prediction


def test_the_upgrade_stores_each_prompt_once_per_row(v1_store: Path) -> None:
    with closing(sqlite3.connect(v1_store)) as conn:
        before = conn.execute("SELECT SUM(LENGTH(requests)) FROM samples WHERE task = 'mmlu'")
        old_bytes = before.fetchone()[0]
    with Store(v1_store) as store:
        new_bytes = store.connection.execute(
            "SELECT SUM(LENGTH(requests)) FROM samples WHERE task = 'mmlu'"
        ).fetchone()[0]
        fresh = list(store.records(task="mmlu"))
        store.write(fresh)  # rows written now are packed the same way
        again = list(store.records(task="mmlu"))
    assert new_bytes < old_bytes / 2  # four choices shared one prompt
    assert [r.requests for r in again] == [r.requests for r in fresh]


def test_the_upgrade_keeps_a_backup_of_the_old_file(v1_store: Path) -> None:
    before = raw_tables(v1_store)
    Store(v1_store).close()
    backup = v1_store.with_name(v1_store.name + ".bak-store-v1")
    assert user_version(backup) == 1
    assert raw_tables(backup) == before
    Store(v1_store).close()  # already upgraded: no second backup
    assert sorted(p.name for p in v1_store.parent.glob("*.bak-*")) == [backup.name]


def test_stored_results_of_a_version_1_store_give_the_numbers_its_run_reported(
    v1_store: Path,
) -> None:
    with closing(sqlite3.connect(v1_store)) as conn:
        (saved,) = [json.loads(row[0]) for row in conn.execute("SELECT document FROM runs")]
    references = [c["reference"] for c in saved["checkpoints"]]
    with Store(v1_store) as store:
        result = stored_sweep(store, references, ["mmlu", "gsm8k"], num_fewshot=1)
    reported = {
        (r["checkpoint"], r["task"], r["metric"], r["level"], r["group"]): (r["value"], r["n"])
        for r in saved["results"]
    }
    again = {
        (item.checkpoint.reference, item.task, a.metric, a.level, a.group): (a.value, a.n)
        for item in result.results
        for a in item.aggregates
    }
    assert again.keys() == reported.keys()
    for key, (value, n) in reported.items():
        assert again[key][1] == n
        assert again[key][0] == pytest.approx(value, abs=1e-6), key


def test_agent_tables_written_before_versions_are_adopted_as_version_1(v1_store: Path) -> None:
    """Agent tables from before versions were recorded are version 1, and are upgraded from
    there: every row kept as it was, with the columns version 2 added after its own."""
    from evalsweep.agent._schema import ADDED_IN_2

    before = raw_tables(v1_store)
    with Store(v1_store) as store:
        ensure_agent_tables(store)
        versions = dict(store.connection.execute("SELECT name, version FROM components"))
        columns = {
            table: [row[1] for row in store.connection.execute(f"PRAGMA table_info({table})")]
            for table in TABLES
            if table.startswith("agent_")
        }
    assert AGENT_TABLES.version == 2 and versions == {"agent": 2}
    assert all(column in columns[table] for table, column, _ in ADDED_IN_2)
    after = raw_tables(v1_store)
    for table in (t for t in TABLES if t.startswith("agent_")):
        assert len(after[table]) == len(before[table]), table
        assert (
            sorted(
                (row[: len(old)] for row, old in zip(after[table], before[table], strict=True)),
                key=repr,
            )
            == before[table]
        ), table


def test_a_store_of_a_newer_version_is_refused_and_left_alone(v1_store: Path) -> None:
    with closing(sqlite3.connect(v1_store)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.commit()
    unchanged = digest(v1_store)
    with pytest.raises(StoreError, match=f"version {SCHEMA_VERSION + 1}, newer than"):
        Store(v1_store)
    assert digest(v1_store) == unchanged
    assert not list(v1_store.parent.glob("*.bak-*"))


def test_the_cli_names_a_newer_store_version_in_one_line(v1_store: Path) -> None:
    with closing(sqlite3.connect(v1_store)) as conn:
        conn.execute("PRAGMA user_version = 7")
        conn.commit()
    result = CliRunner().invoke(
        main, ["compare", "a", "b", "--tasks", "mmlu", "--store", str(v1_store)]
    )
    assert result.exit_code != 0
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "version 7" in lines[0] and str(SCHEMA_VERSION) in lines[0]
    assert "Traceback" not in result.output


def test_newer_agent_tables_are_refused(v1_store: Path) -> None:
    with Store(v1_store) as store:
        ensure_agent_tables(store)
        store.connection.execute("UPDATE components SET version = 9 WHERE name = 'agent'")
        store.connection.commit()
        with pytest.raises(StoreError, match="agent tables of version 9"):
            ensure_agent_tables(store)


def test_upgrade_steps_run_in_order_from_the_stored_version(store_path: Path) -> None:
    first = Component("extra", 1, ["CREATE TABLE extra_items (name TEXT)"], present="extra_items")
    third = Component(
        "extra",
        3,
        ["CREATE TABLE extra_items (name TEXT, size INTEGER, seen REAL)"],
        steps={
            1: ["ALTER TABLE extra_items ADD COLUMN size INTEGER"],
            2: lambda conn: conn.execute("ALTER TABLE extra_items ADD COLUMN seen REAL"),
        },
        present="extra_items",
    )
    with Store(store_path) as store:
        store.ensure_component(first)
        store.connection.execute("INSERT INTO extra_items VALUES ('kept')")
        store.connection.commit()
    with Store(store_path) as store:
        store.ensure_component(third)
        rows = store.connection.execute("SELECT name, size, seen FROM extra_items").fetchall()
        version = store.connection.execute(
            "SELECT version FROM components WHERE name = 'extra'"
        ).fetchone()
    assert rows == [("kept", None, None)] and version == (3,)
    assert store_path.with_name(store_path.name + ".bak-extra-v1").exists()


def test_a_failing_upgrade_changes_nothing(store_path: Path) -> None:
    first = Component("extra", 1, ["CREATE TABLE extra_items (name TEXT)"], present="extra_items")
    broken = Component(
        "extra",
        2,
        first.create,
        steps={1: ["CREATE TABLE extra_more (x)", "INSERT INTO no_such_table VALUES (1)"]},
        present="extra_items",
    )
    with Store(store_path) as store:
        store.ensure_component(first)
    with Store(store_path) as store:
        with pytest.raises(StoreError, match="cannot upgrade the extra tables .* from version 1"):
            store.ensure_component(broken)
        tables = {r[0] for r in store.connection.execute("SELECT name FROM sqlite_master")}
        version = store.connection.execute(
            "SELECT version FROM components WHERE name = 'extra'"
        ).fetchone()
    assert "extra_more" not in tables and version == (1,)


def test_a_component_without_every_upgrade_step_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="no upgrade step"):
        Component("extra", 3, [], steps={1: []})
