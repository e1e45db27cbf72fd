"""The SQLite results store: per-document rows written in transactions.

Rows are written a chunk at a time inside one transaction, so an interrupted
run leaves only whole chunks behind and the next run recomputes nothing that
is stored. Each row also keeps a hash of its requests: if the data or the
prompt changed, the stored row no longer matches and is recomputed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from evalsweep.errors import StoreError
from evalsweep.store._migrations import COMPONENTS_TABLE, Component, ensure_component

#: Version of the results tables (``samples``, ``keys``, ``runs``, ``audit``, ``components``).
#: 1: the first release; 2: ``components`` records the versions of other packages' tables;
#: 3: a row's requests keep each distinct context once (``_pack_requests``);
#: 4: an index holding what statistics read of each row (``SCORES_INDEX``).
SCHEMA_VERSION = 4
SCHEMA = """
CREATE TABLE IF NOT EXISTS samples (
    checkpoint   TEXT NOT NULL,
    backend      TEXT NOT NULL,
    task         TEXT NOT NULL,
    settings     TEXT NOT NULL,
    doc_key      TEXT NOT NULL,
    doc_id       INTEGER NOT NULL,
    subject      TEXT,
    request_hash TEXT NOT NULL,
    requests     TEXT NOT NULL,
    responses    TEXT NOT NULL,
    target       TEXT NOT NULL,
    prediction   TEXT NOT NULL,
    correct      INTEGER NOT NULL,
    response     TEXT,
    metrics      TEXT NOT NULL,
    details      TEXT NOT NULL,
    document     TEXT NOT NULL,
    created      REAL NOT NULL,
    PRIMARY KEY (checkpoint, backend, task, settings, doc_key)
);
CREATE TABLE IF NOT EXISTS keys (
    key      TEXT PRIMARY KEY,
    kind     TEXT NOT NULL,
    value    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id   TEXT PRIMARY KEY,
    created  REAL NOT NULL,
    document TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    kind         TEXT NOT NULL,
    target       TEXT,
    text         TEXT NOT NULL,
    started      REAL NOT NULL,
    ended        REAL,
    exit_code    INTEGER,
    output_bytes INTEGER,
    detail       TEXT NOT NULL
);
"""

#: What :meth:`Store.scores` reads, in the order it asks, so ``compare`` reads this
#: index alone: a row's bytes are mostly its requests, which the statistics never need.
SCORES_INDEX = (
    "CREATE INDEX IF NOT EXISTS samples_scores ON samples "
    "(checkpoint, task, backend, settings, doc_key, doc_id, subject, correct, metrics)"
)
STORE_TABLES = Component(
    name="store",
    version=SCHEMA_VERSION,
    create=[*(s.strip() for s in SCHEMA.split(";") if s.strip()), COMPONENTS_TABLE, SCORES_INDEX],
    steps={1: [COMPONENTS_TABLE], 2: lambda conn: _compact_requests(conn), 3: [SCORES_INDEX]},
)


def default_store_path() -> Path:
    """``$EVALSWEEP_STORE``, else ``$XDG_DATA_HOME/evalsweep/results.sqlite``."""
    if os.environ.get("EVALSWEEP_STORE"):
        return Path(os.environ["EVALSWEEP_STORE"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "evalsweep" / "results.sqlite"


@dataclass(frozen=True)
class SampleRecord:
    """One stored document result."""

    checkpoint: str
    backend: str
    task: str
    settings: str
    doc_key: str
    doc_id: int
    subject: str | None
    request_hash: str
    requests: list[Any]
    responses: list[Any]
    target: str
    prediction: str
    correct: bool
    response: str | None
    metrics: dict[str, float]
    details: dict[str, Any]
    document: dict[str, Any]


class ScoreRecord(NamedTuple):
    """What statistics read of a stored row: which document, and its scores.

    Read by :meth:`Store.scores` from five small columns, without decoding a row's
    requests, responses, details or document (most of a row's bytes). A named tuple:
    tens of thousands are made per compare, and a tuple is made several times faster
    than a frozen dataclass.
    """

    doc_key: str
    doc_id: int
    subject: str | None
    correct: bool
    metrics: dict[str, float]


class Store:
    """A results store in one SQLite file."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=30)
            self._conn.execute("PRAGMA journal_mode=WAL")
            ensure_component(self._conn, self.path, STORE_TABLES)
        except (OSError, sqlite3.Error) as exc:
            self._close_quietly()
            raise StoreError(f"cannot open results store {self.path}: {exc}") from exc
        except StoreError:
            self._close_quietly()
            raise

    def _close_quietly(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def remember_key(self, key: str, kind: str, value: Any) -> None:
        """Record what a settings hash stands for, so ``compare`` can explain mismatches."""
        with self._conn:
            self._conn.execute(
                "INSERT OR IGNORE INTO keys (key, kind, value) VALUES (?, ?, ?)",
                (key, kind, json.dumps(value, sort_keys=True, default=str)),
            )

    def remember_reference(self, reference: str, resolved: dict[str, Any]) -> None:
        """What a reference last resolved to, so ``compare`` works offline later."""
        with self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO keys (key, kind, value) VALUES (?, 'reference', ?)",
                (f"reference:{reference}", json.dumps(resolved, sort_keys=True)),
            )

    def lookup_reference(self, reference: str) -> dict[str, Any] | None:
        found = self.lookup_key(f"reference:{reference}")
        return dict(found) if found else None

    def settings_of(self, checkpoint: str, task: str) -> list[tuple[str, str, int]]:
        """(backend key, task settings key, row count) combinations stored for a checkpoint."""
        cursor = self._conn.execute(
            "SELECT backend, settings, COUNT(*) FROM samples WHERE checkpoint=? AND task=? "
            "GROUP BY backend, settings",
            (checkpoint, task),
        )
        return [(row[0], row[1], int(row[2])) for row in cursor]

    def lookup_key(self, key: str) -> Any:
        row = self._conn.execute("SELECT value FROM keys WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def fetch(
        self, checkpoint: str, backend: str, task: str, settings: str, doc_keys: Sequence[str]
    ) -> dict[str, SampleRecord]:
        """Stored rows for these documents, by document key (absent ones left out)."""
        found: dict[str, SampleRecord] = {}
        for start in range(0, len(doc_keys), 500):
            part = list(doc_keys[start : start + 500])
            marks = ",".join("?" * len(part))
            cursor = self._conn.execute(
                f"SELECT * FROM samples WHERE checkpoint=? AND backend=? AND task=? "
                f"AND settings=? AND doc_key IN ({marks})",
                (checkpoint, backend, task, settings, *part),
            )
            for row in cursor:
                record = _record(row)
                found[record.doc_key] = record
        return found

    def write(self, records: Iterable[SampleRecord]) -> None:
        """Insert or replace rows in one transaction: all of them or none."""
        now = time.time()
        rows = [
            (
                r.checkpoint,
                r.backend,
                r.task,
                r.settings,
                r.doc_key,
                r.doc_id,
                r.subject,
                r.request_hash,
                _pack_requests(r.requests),
                json.dumps(r.responses),
                r.target,
                r.prediction,
                int(r.correct),
                r.response,
                json.dumps(r.metrics),
                json.dumps(r.details),
                json.dumps(r.document, default=str),
                now,
            )  # fmt: skip
            for r in records
        ]
        if not rows:
            return
        try:
            with self._conn:
                self._conn.executemany(
                    f"INSERT OR REPLACE INTO samples VALUES ({','.join('?' * len(rows[0]))})",
                    rows,
                )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot write to results store {self.path}: {exc}") from exc
        except UnicodeEncodeError:
            raise StoreError(_not_unicode(self.path, rows)) from None

    def records(
        self,
        checkpoint: str | None = None,
        task: str | None = None,
        backend: str | None = None,
        settings: str | None = None,
    ) -> Iterator[SampleRecord]:
        """Stored rows, optionally filtered by checkpoint identity, task and settings keys."""
        query = "SELECT * FROM samples WHERE 1=1"
        args: list[str] = []
        for column, value in (
            ("checkpoint", checkpoint),
            ("task", task),
            ("backend", backend),
            ("settings", settings),
        ):
            if value:
                query += f" AND {column} = ?"
                args.append(value)
        for row in self._conn.execute(query + " ORDER BY task, doc_key", args):
            yield _record(row)

    def scores(self, checkpoint: str, task: str, backend: str, settings: str) -> list[ScoreRecord]:
        """The rows :meth:`records` gives for these keys, as :class:`ScoreRecord` only.

        Rows whose metrics are the same text share one decoded dict: read it, never change it.
        """
        cursor = self._conn.execute(
            "SELECT doc_key, doc_id, subject, correct, metrics FROM samples WHERE checkpoint = ? "
            "AND task = ? AND backend = ? AND settings = ? ORDER BY task, doc_key",
            (checkpoint, task, backend, settings),
        )
        decoded: dict[str, dict[str, float]] = {}  # most rows hold one of a few metric texts
        records = []
        for doc_key, doc_id, subject, correct, text in cursor:
            metrics = decoded.get(text)
            if metrics is None:
                metrics = decoded[text] = json.loads(text)
            records.append(ScoreRecord(doc_key, doc_id, subject, bool(correct), metrics))
        return records

    def save_run(self, run_id: str, document: str) -> None:
        """Keep a run's result document, as JSON text (``evalsweep.report.document_json``)."""
        with self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO runs VALUES (?, ?, ?)", (run_id, time.time(), document)
            )

    def runs(self) -> list[tuple[str, str]]:
        """Every stored run as (run id, its result document's JSON text), oldest first.

        The text is read back by ``evalsweep.report.parse_document``.
        """
        cursor = self._conn.execute("SELECT run_id, document FROM runs ORDER BY created")
        return [(str(row[0]), str(row[1])) for row in cursor]

    def ensure_component(self, component: Component) -> None:
        """Create or upgrade another package's tables in this file (see ``_migrations``).

        Packages such as ``agent`` keep their state here too, so one file holds
        results, jobs and the audit log; their tables carry their own version, so
        an older file is upgraded (after a backup copy) and a newer one refused.
        """
        try:
            ensure_component(self._conn, self.path, component)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot create tables in results store {self.path}: {exc}") from exc

    @property
    def connection(self) -> sqlite3.Connection:
        """The SQLite connection, for packages that keep their own tables here."""
        return self._conn

    def audit_begin(
        self,
        kind: str,
        text: str,
        *,
        target: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> int:
        """Record that something starts (a command on a target, an approval asked...).

        Written before the thing runs, so a crash still leaves its exact text behind.
        Returns the entry's id for ``audit_end``.
        """
        with self._conn:
            cursor = self._conn.execute(
                "INSERT INTO audit (kind, target, text, started, detail) VALUES (?, ?, ?, ?, ?)",
                (kind, target, text, time.time(), json.dumps(detail or {}, default=str)),
            )
        return int(cursor.lastrowid or 0)

    def audit_end(self, entry: int, exit_code: int | None, output_bytes: int | None) -> None:
        with self._conn:
            self._conn.execute(
                "UPDATE audit SET ended = ?, exit_code = ?, output_bytes = ? WHERE id = ?",
                (time.time(), exit_code, output_bytes, entry),
            )

    def audit_event(
        self,
        kind: str,
        text: str,
        *,
        target: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> int:
        """Record a one-off event (an approval, a refusal): started and ended at once."""
        now = time.time()
        with self._conn:
            cursor = self._conn.execute(
                "INSERT INTO audit (kind, target, text, started, ended, detail) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (kind, target, text, now, now, json.dumps(detail or {}, default=str)),
            )
        return int(cursor.lastrowid or 0)

    def audit_entries(
        self, *, kind: str | None = None, target: str | None = None, since: float | None = None
    ) -> list[dict[str, Any]]:
        """The audit log, oldest first, optionally filtered."""
        query = "SELECT id, kind, target, text, started, ended, exit_code, output_bytes, detail "
        query += "FROM audit WHERE 1=1"
        args: list[Any] = []
        if kind:
            query += " AND kind = ?"
            args.append(kind)
        if target:
            query += " AND target = ?"
            args.append(target)
        if since is not None:
            query += " AND started >= ?"
            args.append(since)
        names = ("id", "kind", "target", "text", "started", "ended", "exit_code", "output_bytes")
        entries = []
        for row in self._conn.execute(query + " ORDER BY id", args):
            entry = dict(zip(names, row[:8], strict=True))
            entry["detail"] = json.loads(row[8])
            entries.append(entry)
        return entries

    def load_run(self, run_id: str) -> str:
        """A run's result document as JSON text (read by ``evalsweep.report.parse_document``)."""
        row = self._conn.execute("SELECT document FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            raise StoreError(f"no run {run_id!r} in {self.path}")
        return str(row[0])


_TEXT_COLUMNS = (
    "checkpoint", "backend", "task", "settings", "doc_key", "doc_id", "subject", "request_hash",
    "requests", "responses", "target", "prediction", "correct", "response",
)  # fmt: skip


def _not_unicode(path: Path, rows: Sequence[tuple[Any, ...]]) -> str:
    """Which row and column hold text SQLite cannot take (a lone surrogate), in one line."""
    for row in rows:
        for column, value in zip(_TEXT_COLUMNS, row, strict=False):
            if isinstance(value, str) and any("\ud800" <= c <= "\udfff" for c in value):
                return (
                    f"cannot write to results store {path}: the {column} of {row[2]} document "
                    f"{row[4]!r} holds a lone surrogate (not Unicode text); nothing was written"
                )
    return f"cannot write to results store {path}: a row holds text that is not Unicode"


def _record(row: sqlite3.Row | tuple[Any, ...]) -> SampleRecord:
    return SampleRecord(
        checkpoint=row[0], backend=row[1], task=row[2], settings=row[3], doc_key=row[4],
        doc_id=row[5], subject=row[6], request_hash=row[7], requests=_unpack_requests(row[8]),
        responses=json.loads(row[9]), target=row[10], prediction=row[11],
        correct=bool(row[12]), response=row[13], metrics=json.loads(row[14]),
        details=json.loads(row[15]), document=json.loads(row[16]),
    )  # fmt: skip


def _pack_requests(requests: list[Any]) -> str:
    """A row's requests as stored: each distinct context once.

    MMLU's four choices share one few-shot prompt, which was most of a stored row.
    Each request that has a text ``context`` keeps its keys in order, with an empty
    context and its index in ``contexts`` at the same position in ``refs``.
    """
    contexts: dict[str, int] = {}
    packed: list[Any] = []
    refs: list[int | None] = []
    for request in requests:
        if isinstance(request, dict) and isinstance(request.get("context"), str):
            refs.append(contexts.setdefault(request["context"], len(contexts)))
            packed.append({**request, "context": ""})
        else:
            refs.append(None)
            packed.append(request)
    return json.dumps({"contexts": list(contexts), "refs": refs, "requests": packed})


def _unpack_requests(text: str) -> list[Any]:
    """The requests exactly as written (rows of schema versions 1 and 2 hold a plain list)."""
    value = json.loads(text)
    if isinstance(value, list):
        return value
    contexts = value["contexts"]
    requests: list[Any] = value["requests"]
    for request, ref in zip(requests, value["refs"], strict=True):
        if ref is not None:
            request["context"] = contexts[ref]
    return requests


def _compact_requests(conn: sqlite3.Connection) -> None:
    """Upgrade step 2 -> 3: every row's requests packed, inside the upgrade's transaction."""
    last = -1
    while True:
        batch = conn.execute(
            "SELECT rowid, requests FROM samples WHERE rowid > ? ORDER BY rowid LIMIT 2000", (last,)
        ).fetchall()
        if not batch:
            return
        conn.executemany(
            "UPDATE samples SET requests = ? WHERE rowid = ?",
            [(_pack_requests(json.loads(text)), rowid) for rowid, text in batch],
        )
        last = batch[-1][0]
