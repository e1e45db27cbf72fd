"""The spend ledger: what every job and every deployed machine may cost, and has cost.

One row per billed item (a job, a machine between deploy/start and
stop/terminate) with its hourly rate, start, end and **reservation**: when
paid work starts it reserves its worst case, ``rate x (deadline - start)``,
against the per-connection and the global limit, in one write transaction,
so two starts racing (in one server or in several) can never both take the
same dollars. The item's deadline is what the limits leave after every other
open reservation (and at most ``max_job_hours``); the job's supervisor stops
it there whether or not a server is running. Spend is computed per second
from the times, so it keeps counting while no server is running; ``charged``
records what the watchdog last billed. Limits come from the configuration;
this module only measures and reserves.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from evalsweep.agent._schema import ensure_agent_tables
from evalsweep.errors import EvalsweepError
from evalsweep.store import Store


class BudgetError(EvalsweepError):
    """Paid work that the spend limits cannot cover."""


@dataclass(frozen=True)
class Limits:
    """The person's limits, as the ledger applies them (from ``AgentSettings``)."""

    per_connection_usd: float
    global_usd: float
    global_window_days: float
    max_job_hours: float


@dataclass(frozen=True)
class Reservation:
    item: str
    started: float
    deadline: float
    reserved_usd: float
    hourly_rate: float

    @property
    def seconds(self) -> float:
        return self.deadline - self.started


def committed(
    store: Store,
    *,
    connection: str | None = None,
    since: float | None = None,
    now: float = 0.0,
    overrun: bool = True,
) -> float:
    """What the limits must still cover: spend of ended items plus each open item's
    reservation (or its spend so far, when it ran past it, unless ``overrun`` is False:
    an item past its deadline is being stopped, and is not a reason to stop another)."""
    ensure_agent_tables(store)
    now = now or time.time()
    floor = since or 0.0
    running = (
        "MAX(reserved, hourly_rate * (MAX(?, started) - started) / 3600.0)"
        if overrun
        else "(reserved + 0 * ?)"
    )
    query = (
        f"SELECT COALESCE(SUM(CASE WHEN ended IS NULL THEN {running} "
        "ELSE hourly_rate * (MAX(ended, started) - "
        "MAX(started, ?)) / 3600.0 END), 0) FROM agent_ledger "
        "WHERE (ended IS NULL OR ended >= ?)"
    )
    args: list[object] = [now, floor, floor]
    if connection is not None:
        query += " AND connection = ?"
        args.append(connection)
    return float(store.connection.execute(query, args).fetchone()[0])


def left(store: Store, limits: Limits, connection: str, now: float = 0.0) -> float:
    """Dollars no reservation holds yet, under the tighter of the two limits."""
    now = now or time.time()
    since = now - limits.global_window_days * 86400
    return min(
        limits.per_connection_usd - committed(store, connection=connection, now=now),
        limits.global_usd - committed(store, since=since, now=now),
    )


def reserve(
    store: Store,
    item: str,
    *,
    kind: str,
    connection: str,
    target: str,
    hourly_rate: float,
    limits: Limits,
    needed_usd: float,
    cap_usd: float | None = None,
) -> Reservation:
    """Open ``item`` with its worst case reserved; its deadline is what the limits leave,
    and never more than ``cap_usd`` buys (the worst case the person approved).

    Raises:
        BudgetError: when paid work has no limits configured, or when what the
            limits leave is less than ``needed_usd`` (the estimate).
    """
    ensure_agent_tables(store)
    conn = store.connection
    if conn.in_transaction:
        conn.commit()
    conn.execute("BEGIN IMMEDIATE")  # one reservation at a time, across processes
    try:
        now = time.time()
        seconds = limits.max_job_hours * 3600.0
        if hourly_rate > 0:
            if limits.per_connection_usd <= 0 or limits.global_usd <= 0:
                raise BudgetError(
                    "paid work needs spend limits: the person must set [limits] "
                    "per_connection_usd and global_usd in their evalsweep configuration"
                )
            free = left(store, limits, connection, now)
            if free < max(needed_usd, 0.0) or free <= 0:
                since = now - limits.global_window_days * 86400
                mine = committed(store, connection=connection, now=now)
                everyone = committed(store, since=since, now=now)
                raise BudgetError(
                    f"refused: the spend limits leave ${max(free, 0.0):.4f} and this work is "
                    f"estimated at ${needed_usd:.4f}; this connection has spent and reserved "
                    f"${mine:.4f} of ${limits.per_connection_usd:.2f}, all connections "
                    f"${everyone:.4f} of ${limits.global_usd:.2f}"
                )
            seconds = min(seconds, free / hourly_rate * 3600.0)
            if cap_usd is not None:
                seconds = min(seconds, max(cap_usd, 0.0) / hourly_rate * 3600.0)
        reserved = hourly_rate * seconds / 3600.0
        conn.execute(
            "INSERT INTO agent_ledger (item, kind, connection, target, hourly_rate, started, "
            "reserved, deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (item, kind, connection, target, hourly_rate, now, reserved, now + seconds),
        )
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return Reservation(item, now, now + seconds, reserved, hourly_rate)


def release(store: Store, item: str) -> None:
    """Drop a reservation whose work never started."""
    with store.connection:
        store.connection.execute("DELETE FROM agent_ledger WHERE item = ?", (item,))


def close_item(store: Store, item: str, ended: float | None = None) -> None:
    with store.connection:
        store.connection.execute(
            "UPDATE agent_ledger SET ended = ? WHERE item = ? AND ended IS NULL",
            (ended or time.time(), item),
        )
    charge(store)


def stopping(store: Store, item: str, grace_s: float) -> None:
    """``item`` has been asked to stop: it stays open (billed until it has really stopped),
    its reservation and deadline cut to what it may still spend within ``grace_s``."""
    now = time.time()
    with store.connection:
        store.connection.execute(
            "UPDATE agent_ledger SET deadline = MIN(COALESCE(deadline, ?), ?), "
            "reserved = MIN(reserved, hourly_rate * (? - started) / 3600.0) "
            "WHERE item = ? AND ended IS NULL",
            (now + grace_s, now + grace_s, now + grace_s, item),
        )


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


def outstanding(store: Store, *, connection: str | None = None, now: float = 0.0) -> float:
    """Reserved and not spent yet: what open items may still cost, at most."""
    ensure_agent_tables(store)
    now = now or time.time()
    query = (
        "SELECT COALESCE(SUM(MAX(reserved - hourly_rate * (MAX(?, started) - started) / 3600.0, "
        "0)), 0) FROM agent_ledger WHERE ended IS NULL"
    )
    args: list[object] = [now]
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


def overdue_machines(store: Store, now: float = 0.0) -> list[tuple[str, str]]:
    """(item, target) of open machines past their reserved deadline."""
    ensure_agent_tables(store)
    rows = store.connection.execute(
        "SELECT item, target FROM agent_ledger WHERE ended IS NULL AND kind = 'machine' "
        "AND deadline IS NOT NULL AND deadline < ?",
        (now or time.time(),),
    ).fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]
