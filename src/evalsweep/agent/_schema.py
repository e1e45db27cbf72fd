"""The agent's tables, kept in the results store beside the results.

Quotes, jobs and the spend ledger live in the same SQLite file as the results
and the audit log, so a job outlives the server that started it and
``evalsweep approve`` in another terminal sees the same quotes.
"""

from __future__ import annotations

import sqlite3

from evalsweep.store import Component, Store

SCHEMA = """
CREATE TABLE IF NOT EXISTS agent_quotes (
    quote_id       TEXT PRIMARY KEY,
    kind           TEXT NOT NULL,
    target         TEXT NOT NULL,
    params         TEXT NOT NULL,
    params_hash    TEXT NOT NULL,
    preview        TEXT NOT NULL,
    hourly_rate    REAL NOT NULL,
    estimated_cost REAL NOT NULL,
    needs_approval INTEGER NOT NULL,
    created        REAL NOT NULL,
    expires        REAL NOT NULL,
    approved       REAL,
    approved_by    TEXT,
    used           REAL,
    used_by        TEXT
);
CREATE TABLE IF NOT EXISTS agent_jobs (
    job_id      TEXT PRIMARY KEY,
    quote_id    TEXT NOT NULL,
    connection  TEXT NOT NULL,
    target      TEXT NOT NULL,
    params      TEXT NOT NULL,
    plan        TEXT NOT NULL,
    argv        TEXT NOT NULL,
    out_dir     TEXT NOT NULL,
    log_path    TEXT NOT NULL,
    pid         INTEGER,
    pid_start   TEXT,
    status      TEXT NOT NULL,
    reason      TEXT,
    exit_code   INTEGER,
    started     REAL NOT NULL,
    ended       REAL,
    deadline    REAL NOT NULL,
    work        REAL NOT NULL,
    loads       INTEGER NOT NULL,
    audit_id    INTEGER,
    estimated_s REAL,
    progress    TEXT
);
CREATE TABLE IF NOT EXISTS agent_ledger (
    item        TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    connection  TEXT NOT NULL,
    target      TEXT NOT NULL,
    hourly_rate REAL NOT NULL,
    started     REAL NOT NULL,
    ended       REAL,
    charged     REAL NOT NULL DEFAULT 0,
    reserved    REAL NOT NULL DEFAULT 0,
    deadline    REAL
);
"""

#: Columns version 2 added (spend reservations, estimates against actuals, live progress):
#: (table, column, declaration). ``SCHEMA`` already has them; version 1's tables get them
#: from ``_add_columns``.
ADDED_IN_2 = (
    ("agent_jobs", "estimated_s", "REAL"),
    ("agent_jobs", "progress", "TEXT"),
    ("agent_ledger", "reserved", "REAL NOT NULL DEFAULT 0"),
    ("agent_ledger", "deadline", "REAL"),
)


def _add_columns(conn: sqlite3.Connection) -> None:
    """Version 1 to 2: the columns ``ADDED_IN_2`` names, where a table lacks them."""
    for table, column, declaration in ADDED_IN_2:
        names = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if column not in names:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


#: The agent's tables and their version. 1: as first released; 2: reservations, estimates
#: and progress (``ADDED_IN_2``). To change them, add the next step and raise the version;
#: ``SCHEMA`` stays the newest.
AGENT_TABLES = Component(
    name="agent",
    version=2,
    create=[statement.strip() for statement in SCHEMA.split(";") if statement.strip()],
    steps={1: _add_columns},
    present="agent_quotes",
)


def ensure_agent_tables(store: Store) -> None:
    store.ensure_component(AGENT_TABLES)
