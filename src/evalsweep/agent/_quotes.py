"""Quotes: a price preview bound to exactly one set of parameters, used once.

A quote records the parameters (and what they resolved to: checkpoint
identities, the exact requests), the target's hourly rate, the estimated run
time and cost, and an expiry. Starting work consumes the quote in one SQL
statement, so a quote cannot be used twice even by two calls racing.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from evalsweep.agent._schema import ensure_agent_tables
from evalsweep.errors import EvalsweepError
from evalsweep.store import Store


class GateError(EvalsweepError):
    """The approval gate refused: no quote, a used, expired or changed one, no approval.

    ``quote_id`` and ``target``: what the refusal was about, for its audit entry (written
    where the refused call came in: the MCP server's ``call_tool``, ``evalsweep approve``).
    """

    def __init__(
        self, message: str, quote_id: str | None = None, target: str | None = None
    ) -> None:
        super().__init__(message)
        self.quote_id = quote_id
        self.target = target


@dataclass(frozen=True)
class Quote:
    quote_id: str
    kind: str
    target: str
    params: dict[str, Any]
    params_hash: str
    preview: dict[str, Any]
    hourly_rate: float
    estimated_cost: float
    needs_approval: bool
    created: float
    expires: float
    approved: float | None
    approved_by: str | None
    used: float | None
    used_by: str | None


def params_hash(params: dict[str, Any]) -> str:
    text = json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def create_quote(
    store: Store,
    *,
    kind: str,
    target: str,
    params: dict[str, Any],
    preview: dict[str, Any],
    hourly_rate: float,
    estimated_cost: float,
    needs_approval: bool,
    ttl_s: float,
) -> Quote:
    ensure_agent_tables(store)
    now = time.time()
    quote_id = "q-" + secrets.token_hex(5)
    digest = params_hash(params)
    with store.connection:
        store.connection.execute(
            "INSERT INTO agent_quotes (quote_id, kind, target, params, params_hash, preview, "
            "hourly_rate, estimated_cost, needs_approval, created, expires) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                quote_id,
                kind,
                target,
                json.dumps(params, sort_keys=True),
                digest,
                json.dumps(preview, sort_keys=True, default=str),
                hourly_rate,
                estimated_cost,
                int(needs_approval),
                now,
                now + ttl_s,
            ),
        )
    return load_quote(store, quote_id)


def load_quote(store: Store, quote_id: str) -> Quote:
    ensure_agent_tables(store)
    row = store.connection.execute(
        "SELECT quote_id, kind, target, params, params_hash, preview, hourly_rate, "
        "estimated_cost, needs_approval, created, expires, approved, approved_by, used, used_by "
        "FROM agent_quotes WHERE quote_id = ?",
        (quote_id,),
    ).fetchone()
    if row is None:
        raise GateError(f"no quote {quote_id!r}: ask for a price preview first")
    return Quote(
        quote_id=row[0],
        kind=row[1],
        target=row[2],
        params=json.loads(row[3]),
        params_hash=row[4],
        preview=json.loads(row[5]),
        hourly_rate=float(row[6]),
        estimated_cost=float(row[7]),
        needs_approval=bool(row[8]),
        created=float(row[9]),
        expires=float(row[10]),
        approved=row[11],
        approved_by=row[12],
        used=row[13],
        used_by=row[14],
    )


def mark_approved(store: Store, quote_id: str, by: str) -> bool:
    """Record an approval; False when the quote is already used or approved."""
    with store.connection:
        cursor = store.connection.execute(
            "UPDATE agent_quotes SET approved = ?, approved_by = ? "
            "WHERE quote_id = ? AND approved IS NULL AND used IS NULL",
            (time.time(), by, quote_id),
        )
    return cursor.rowcount == 1


def consume(store: Store, quote_id: str, used_by: str) -> bool:
    """Mark the quote used, atomically; False when it already was."""
    with store.connection:
        cursor = store.connection.execute(
            "UPDATE agent_quotes SET used = ?, used_by = ? WHERE quote_id = ? AND used IS NULL",
            (time.time(), used_by, quote_id),
        )
    return cursor.rowcount == 1
