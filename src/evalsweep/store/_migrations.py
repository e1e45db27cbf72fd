"""Versions of the store's tables, and the upgrades between them.

A results file outlives the evalsweep that wrote it, so every set of tables
in it has a version: the results tables ("store", in SQLite's ``user_version``)
and each package's own tables kept beside them (``agent``: quotes, jobs and
the spend ledger), recorded in the ``components`` table.

Opening a file whose tables are older upgrades them: first a backup copy of the
whole file (``<file>.bak-<name>-v<N>``, SQLite's online backup, so it is
consistent even while another process writes), then every step from the
stored version to today's, in one transaction, so a failed upgrade leaves the
file exactly as it was. A file whose tables are newer than this evalsweep
knows is refused with both versions named; nothing in it is changed.

To change a table: add a step to its component's ``steps`` (from the previous
version to the next) and raise ``version``; the ``create`` statements stay
those of the newest version, for new files.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evalsweep.errors import StoreError

#: One upgrade step: SQL statements, or a function given the connection (inside the transaction).
Step = Sequence[str] | Callable[[sqlite3.Connection], None]


@dataclass(frozen=True)
class Component:
    """A set of tables that share one version.

    ``create``: the newest version's ``CREATE TABLE`` statements; ``steps[n]``
    upgrades version ``n`` to ``n + 1``; ``present``: a table whose existence
    shows the component was created before versions were recorded (its
    version then is 1).
    """

    name: str
    version: int
    create: Sequence[str]
    steps: Mapping[int, Step] = field(default_factory=dict)
    present: str | None = None

    def __post_init__(self) -> None:
        missing = [n for n in range(1, self.version) if n not in self.steps]
        if missing:
            raise ValueError(f"component {self.name}: no upgrade step from version {missing}")


COMPONENTS_TABLE = (
    "CREATE TABLE IF NOT EXISTS components (name TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)


def stored_version(conn: sqlite3.Connection, component: Component) -> int:
    """The version of ``component``'s tables in this file; 0 when it has none."""
    if component.name == "store":
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        if version == 0 and _has_table(conn, "samples"):
            return 1  # pragma: no cover - every store written since its first day set it
        return version
    if _has_table(conn, "components"):
        row = conn.execute(
            "SELECT version FROM components WHERE name = ?", (component.name,)
        ).fetchone()
        if row is not None:
            return int(row[0])
    if component.present is not None and _has_table(conn, component.present):
        return 1
    return 0


def ensure_component(conn: sqlite3.Connection, path: Path, component: Component) -> None:
    """Create ``component``'s tables, or upgrade them (backup first, one transaction).

    Raises :class:`StoreError` when the file holds a newer version than this code knows.
    """
    found = stored_version(conn, component)
    if found == component.version:
        if component.name != "store" and not _recorded(conn, component):
            with conn:  # tables from before versions were recorded: adopt them as they are
                _set_version(conn, component)
        return
    if found > component.version:
        raise StoreError(_newer(path, component, found))
    if found > 0:
        _backup(conn, path, component, found)
    previous = conn.isolation_level
    conn.isolation_level = None  # the transaction below is ours, statement by statement
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            found = stored_version(conn, component)  # another process may have upgraded it
            if found > component.version:
                raise StoreError(_newer(path, component, found))
            if found == 0:
                for statement in component.create:
                    conn.execute(statement)
            else:
                for version in range(found, component.version):
                    _apply(conn, component.steps[version])
            _set_version(conn, component)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise StoreError(
            f"cannot upgrade the {component.name} tables of results store {path} "
            f"from version {found} to {component.version}: {exc}"
        ) from exc
    finally:
        conn.isolation_level = previous


def backup_path(path: Path, component: Component, version: int) -> Path:
    """Where the copy made before upgrading ``component`` from ``version`` goes."""
    candidate = path.with_name(f"{path.name}.bak-{component.name}-v{version}")
    number = 1
    while candidate.exists():
        number += 1
        candidate = path.with_name(f"{path.name}.bak-{component.name}-v{version}.{number}")
    return candidate


def _backup(conn: sqlite3.Connection, path: Path, component: Component, version: int) -> None:
    target = backup_path(path, component, version)
    try:
        with sqlite3.connect(target) as copy:
            conn.backup(copy)
        copy.close()
    except (OSError, sqlite3.Error) as exc:
        target.unlink(missing_ok=True)
        raise StoreError(
            f"results store {path}: cannot write a backup to {target} before upgrading "
            f"its {component.name} tables ({exc}); nothing was changed"
        ) from exc


def _apply(conn: sqlite3.Connection, step: Step) -> None:
    if callable(step):
        step(conn)
    else:
        for statement in step:
            conn.execute(statement)


def _set_version(conn: sqlite3.Connection, component: Component) -> None:
    if component.name == "store":
        conn.execute(f"PRAGMA user_version = {int(component.version)}")
        return
    conn.execute(COMPONENTS_TABLE)
    conn.execute(
        "INSERT OR REPLACE INTO components (name, version) VALUES (?, ?)",
        (component.name, component.version),
    )


def _recorded(conn: sqlite3.Connection, component: Component) -> bool:
    if not _has_table(conn, "components"):
        return False
    query = "SELECT 1 FROM components WHERE name = ?"
    return conn.execute(query, (component.name,)).fetchone() is not None


def _has_table(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
    ).fetchone()
    return row is not None


def _newer(path: Path, component: Component, found: int) -> str:
    return (
        f"results store {path} has {component.name} tables of version {found}, newer than "
        f"this evalsweep's {component.version}: upgrade evalsweep, or use another --store"
    )
