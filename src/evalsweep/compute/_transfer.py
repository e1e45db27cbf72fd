"""Results in pieces: a store's rows as JSONL files of at most 5 MB.

A sweep that ran elsewhere (an ssh host, a cloud GPU, a Ray worker) comes
back as pieces: each a JSONL file no larger than ``MAX_PIECE_BYTES`` holding
whole rows, so a dropped connection costs one piece, not the sweep. Rows keep
their keys and request hashes, and the settings and reference keys they
point to travel with them, so ``compare``, ``flips`` and ``report`` work on
the imported rows as on local ones.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evalsweep.errors import StoreError
from evalsweep.store import SampleRecord, Store

MAX_PIECE_BYTES = 5_000_000


@dataclass(frozen=True)
class Piece:
    """One exported file: its name, size, content hash and row count."""

    name: str
    bytes: int
    sha256: str
    rows: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def selection_lines(
    store: Store, references: Sequence[str], tasks: Sequence[str]
) -> Iterator[dict[str, Any]]:
    """Rows of these checkpoints on these tasks, and the keys they need, as JSON objects.

    References are looked up as this store resolved them (``run`` remembers each
    reference before computing), so a sweep that died half-way still exports
    what it finished. References the store never saw are left out.
    """
    identities = {}
    for reference in references:
        resolved = store.lookup_reference(reference)
        if resolved is not None:
            identities[str(resolved["identity"])] = reference
            yield {
                "type": "key",
                "key": f"reference:{reference}",
                "kind": "reference",
                "value": resolved,
            }
    settings: set[str] = set()
    for identity in identities:
        for task in tasks:
            for record in store.records(identity, task):
                settings.update((record.backend, record.settings))
                yield {"type": "sample", **asdict(record)}
    for key in sorted(settings):
        row = store.connection.execute(
            "SELECT kind, value FROM keys WHERE key = ?", (key,)
        ).fetchone()
        if row is not None:
            yield {"type": "key", "key": key, "kind": row[0], "value": json.loads(row[1])}


def rows_lines(records: Iterable[SampleRecord]) -> Iterator[dict[str, Any]]:
    """Sample rows as JSON objects (what a Ray worker sends back)."""
    for record in records:
        yield {"type": "sample", **asdict(record)}


def pack(
    lines: Iterable[dict[str, Any]], max_bytes: int = MAX_PIECE_BYTES
) -> Iterator[tuple[bytes, int]]:
    """Group JSON lines into pieces of at most ``max_bytes`` (a single larger row stands alone)."""
    buffer: list[bytes] = []
    size = 0
    for line in lines:
        encoded = (json.dumps(line, ensure_ascii=False, default=str) + "\n").encode()
        if buffer and size + len(encoded) > max_bytes:
            yield b"".join(buffer), len(buffer)
            buffer, size = [], 0
        buffer.append(encoded)
        size += len(encoded)
    if buffer:
        yield b"".join(buffer), len(buffer)


def export_pieces(
    store: Store,
    references: Sequence[str],
    tasks: Sequence[str],
    out_dir: Path,
    max_bytes: int = MAX_PIECE_BYTES,
) -> list[Piece]:
    """Write the selection as ``piece-00000.jsonl``... in ``out_dir``; return what was written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    pieces = []
    for number, (data, rows) in enumerate(
        pack(selection_lines(store, references, tasks), max_bytes)
    ):
        name = f"piece-{number:05d}.jsonl"
        (out_dir / name).write_bytes(data)
        pieces.append(Piece(name, len(data), hashlib.sha256(data).hexdigest(), rows))
    return pieces


def import_piece(store: Store, data: bytes, expected_sha256: str | None = None) -> int:
    """Write one piece's rows and keys into ``store`` in one transaction; return rows written."""
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        raise StoreError("a results piece arrived damaged (its sha256 differs); run again")
    records = []
    for number, text in enumerate(data.decode().splitlines(), start=1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
            kind = line.pop("type")
            if kind == "key":
                if line["kind"] == "reference":
                    store.remember_reference(line["key"].removeprefix("reference:"), line["value"])
                else:
                    store.remember_key(line["key"], line["kind"], line["value"])
            elif kind == "sample":
                records.append(SampleRecord(**line))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"results piece line {number} is malformed: {exc}") from None
    store.write(records)
    return len(records)
