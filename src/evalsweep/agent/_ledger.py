"""The spend ledger: what every job and every deployed machine has cost so far.

One row per billed item (a job, a machine between deploy/start and
stop/terminate) with its hourly rate, start and end. Spend is computed per
second from those times, so it keeps counting while no server is running,
and ``charged`` records what the watchdog last billed. Limits come from the
configuration; this module only measures.
"""

from __future__ import annotations

import time

from evalsweep.agent._schema import ensure_agent_tables
from evalsweep.store import Store


def open_item(
    store: Store, item: str, *, kind: str, connection: str, target: str, hourly_rate: float
) -> None:
    ensure_agent_tables(store)
    with store.connection:
        store.connection.execute(
            "INSERT INTO agent_ledger (item, kind, connection, target, hourly_rate, started) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (item, kind, connection, target, hourly_rate, time.time()),
        )


def close_item(store: Store, item: str, ended: float | None = None) -> None:
    with store.connection:
        store.connection.execute(
            "UPDATE agent_ledger SET ended = ? WHERE item = ? AND ended IS NULL",
            (ended or time.time(), item),
        )
    charge(store)


def charge(store: Store, now: float | None = None) -> None:
    """Bill every item up to ``now`` (or its end)."""
    ensure_agent_tables(store)
    now = now or time.time()
    with store.connection:
        store.connection.execute(
            "UPDATE agent_ledger SET charged = hourly_rate * "
            "(MAX(COALESCE(ended, ?), started) - started) / 3600.0",
            (now,),
        )


def spent(
    store: Store, *, connection: str | None = None, since: float | None = None, now: float = 0.0
) -> float:
    """Spend so far (USD), live to the second, for one connection or all."""
    ensure_agent_tables(store)
    now = now or time.time()
    query = (
        "SELECT COALESCE(SUM(hourly_rate * (MAX(COALESCE(ended, ?), started) - "
        "MAX(started, ?)) / 3600.0), 0) FROM agent_ledger WHERE COALESCE(ended, ?) >= ?"
    )
    floor = since or 0.0
    args: list[object] = [now, floor, now, floor]
    if connection is not None:
        query += " AND connection = ?"
        args.append(connection)
    return float(store.connection.execute(query, args).fetchone()[0])


def running_rate(store: Store, *, connection: str | None = None) -> float:
    """USD per hour of everything still open."""
    ensure_agent_tables(store)
    query = "SELECT COALESCE(SUM(hourly_rate), 0) FROM agent_ledger WHERE ended IS NULL"
    args: list[object] = []
    if connection is not None:
        query += " AND connection = ?"
        args.append(connection)
    return float(store.connection.execute(query, args).fetchone()[0])


def open_items(store: Store) -> list[tuple[str, str, str, str, float, float]]:
    """(item, kind, connection, target, hourly_rate, started) of open items, newest first."""
    ensure_agent_tables(store)
    rows = store.connection.execute(
        "SELECT item, kind, connection, target, hourly_rate, started FROM agent_ledger "
        "WHERE ended IS NULL ORDER BY started DESC"
    ).fetchall()
    return [(r[0], r[1], r[2], r[3], float(r[4]), float(r[5])) for r in rows]
