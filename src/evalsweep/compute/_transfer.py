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
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from evalsweep._atomic import atomic_write
from evalsweep.errors import StoreError
from evalsweep.jsonl import LINE_END, LineError, dumps_line, is_blank, loads_line, split_lines
from evalsweep.store import SampleRecord, Store

MAX_PIECE_BYTES = 5_000_000
#: The file beside the pieces that lists them (name, bytes, sha256, lines).
MANIFEST = "manifest.json"
PIECE_FORMAT = 1


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


def row_pieces(
    records: Iterable[SampleRecord], max_bytes: int = MAX_PIECE_BYTES
) -> list[tuple[bytes, str, int]]:
    """Sample rows as pieces, each with its sha256 and line count (a Ray worker's answer)."""
    return [
        (data, hashlib.sha256(data).hexdigest(), rows)
        for data, rows in pack(rows_lines(records), max_bytes)
    ]


def pack(
    lines: Iterable[dict[str, Any]], max_bytes: int = MAX_PIECE_BYTES
) -> Iterator[tuple[bytes, int]]:
    """Group JSON lines into pieces of at most ``max_bytes`` (a single larger row stands alone).

    Each line is written by :func:`evalsweep.jsonl.dumps_line`, the rule every
    reader of pieces splits by.
    """
    buffer: list[bytes] = []
    size = 0
    for line in lines:
        try:
            encoded = dumps_line(line, default=str)
        except LineError as exc:
            where = line.get("doc_key") or line.get("key")
            raise StoreError(f"cannot export row {where!r}: {exc.problem}") from None
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
    """Write the selection as ``piece-00000.jsonl``... in ``out_dir``; return what was written.

    ``manifest.json`` beside the pieces, written last, lists every piece with its
    size, sha256 and line count, so an import can tell a damaged, cut or missing
    piece from a whole one.
    """
    pieces = []
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for number, (data, rows) in enumerate(
            pack(selection_lines(store, references, tasks), max_bytes)
        ):
            name = f"piece-{number:05d}.jsonl"
            atomic_write(out_dir / name, data, mode=0o666)
            pieces.append(Piece(name, len(data), hashlib.sha256(data).hexdigest(), rows))
        manifest = {"format": PIECE_FORMAT, "pieces": [p.as_dict() for p in pieces]}
        atomic_write(out_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n", mode=0o666)
    except OSError as exc:
        raise StoreError(f"cannot write results pieces to {out_dir}: {exc.strerror}") from None
    return pieces


class PieceError(StoreError):
    """A piece that cannot be imported; ``piece`` and ``line`` (0: the whole piece) say where."""

    def __init__(self, piece: str, line: int, problem: str) -> None:
        where = f"results piece {piece}" + (f" line {line}" if line else "")
        super().__init__(f"{where}: {problem}")
        self.piece, self.line, self.problem = piece, line, problem


_RECORD_TYPES = {f.name: f.type for f in fields(SampleRecord)}
_CHECKS: dict[str, Any] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "bool": lambda v: isinstance(v, bool),
    "str | None": lambda v: v is None or isinstance(v, str),
    "list[Any]": lambda v: isinstance(v, list),
    "dict[str, float]": lambda v: isinstance(v, dict),
    "dict[str, Any]": lambda v: isinstance(v, dict),
}


def _sample(line: dict[str, Any]) -> SampleRecord:
    missing = [name for name in _RECORD_TYPES if name not in line]
    if missing:
        raise LineError(f"a sample row without {missing[0]!r}")
    unknown = sorted(set(line) - set(_RECORD_TYPES))
    if unknown:
        raise LineError(f"a sample row with an unknown field {unknown[0]!r}")
    for name, kind in _RECORD_TYPES.items():
        if not _CHECKS[str(kind)](line[name]):
            raise LineError(f"a sample row whose {name!r} is {type(line[name]).__name__}")
    return SampleRecord(**line)


def read_piece(
    data: bytes,
    name: str = "(unnamed)",
    expected_sha256: str | None = None,
    expected_rows: int | None = None,
) -> tuple[list[dict[str, Any]], list[SampleRecord]]:
    """A piece's keys and sample rows, every line checked; nothing is written.

    Lines end at ``b"\\n"`` only (:mod:`evalsweep.jsonl`); a piece whose last line has
    no end was cut short.

    Raises:
        PieceError: the piece differs from its sha256 or line count, was cut short, or
            a line is not a key or sample row (naming the line).
    """
    if expected_sha256 is not None and hashlib.sha256(data).hexdigest() != expected_sha256:
        raise PieceError(name, 0, "arrived damaged (its sha256 differs from the export's)")
    if data and not data.endswith(LINE_END):
        last = data.count(LINE_END) + 1
        raise PieceError(name, last, "is cut short (the file ends inside this line)")
    keys: list[dict[str, Any]] = []
    records: list[SampleRecord] = []
    count = 0
    for number, raw in split_lines(data):
        if is_blank(raw):
            continue
        count += 1
        try:
            line = loads_line(raw)
            if not isinstance(line, dict):
                raise LineError(f"a JSON {type(line).__name__}, not a row")
            kind = line.pop("type", None)
            if kind == "key":
                if not isinstance(line.get("key"), str) or not isinstance(line.get("kind"), str):
                    raise LineError("a key row without a text 'key' and 'kind'")
                if "value" not in line:
                    raise LineError("a key row without 'value'")
                keys.append(line)
            elif kind == "sample":
                records.append(_sample(line))
            else:
                raise LineError(f"a row of unknown type {kind!r}")
        except LineError as exc:
            raise PieceError(name, number, f"is malformed: {exc.problem}") from None
    if expected_rows is not None and count != expected_rows:
        raise PieceError(name, 0, f"holds {count} lines, the export wrote {expected_rows}")
    return keys, records


def import_piece(
    store: Store,
    data: bytes,
    expected_sha256: str | None = None,
    *,
    name: str = "(unnamed)",
    expected_rows: int | None = None,
) -> int:
    """Check a whole piece, then write its keys and rows into ``store``; return rows written.

    A piece with any bad line writes nothing (see :func:`read_piece`).
    """
    keys, records = read_piece(data, name, expected_sha256, expected_rows)
    for line in keys:
        if line["kind"] == "reference":
            store.remember_reference(line["key"].removeprefix("reference:"), line["value"])
        else:
            store.remember_key(line["key"], line["kind"], line["value"])
    store.write(records)
    return len(records)


def read_manifest(folder: Path) -> dict[str, Piece] | None:
    """The pieces ``manifest.json`` in ``folder`` lists, by name; None when there is none.

    Raises:
        StoreError: the manifest is there but unreadable.
    """
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_bytes().decode("utf-8"))
        return {p["name"]: Piece(**p) for p in found["pieces"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StoreError(
            f"{path}: not a manifest of results pieces ({exc}); export again"
        ) from None


def pieces_to_import(paths: Sequence[Path]) -> list[tuple[Path, Piece | None]]:
    """Each piece file to import, with what its export's manifest says about it.

    A folder stands for the pieces its manifest lists, in order (every one must be
    there). A file is checked against the manifest beside it when there is one, and
    must be listed in it (an unlisted file is left from another export). The manifest
    itself, named among the files (``pieces/*`` as a shell expands it), is what the
    others are checked against, not a piece; files of one export are imported in its
    manifest's order, each once, so ``pieces/*`` imports as ``pieces/`` does.

    Raises:
        StoreError: a folder without a manifest, a listed piece that is missing, or a
            piece its folder's manifest does not list.
    """
    planned: list[tuple[Path, Piece | None]] = []
    for path in paths:
        if path.name == MANIFEST and path.is_file():
            continue  # the list the pieces beside it are checked against
        if path.is_dir():
            manifest = read_manifest(path)
            if manifest is None:
                raise StoreError(
                    f"{path}: no {MANIFEST} (not a folder written by export-results); "
                    "name the piece files instead"
                )
            for name, piece in manifest.items():
                if not (path / name).is_file():
                    raise StoreError(
                        f"{path / name}: missing ({MANIFEST} lists it); copy it from where "
                        "the export ran, or export again"
                    )
                planned.append((path / name, piece))
            continue
        manifest = read_manifest(path.parent)
        if manifest is not None and path.name not in manifest:
            raise StoreError(
                f"{path}: not listed in {path.parent / MANIFEST} (left from another export?); "
                "leave it out or export again"
            )
        planned.append((path, manifest[path.name] if manifest is not None else None))
    seen: set[Path] = set()
    unique: list[tuple[Path, Piece | None]] = []
    for path, listed_as in planned:
        if path.resolve() not in seen:
            seen.add(path.resolve())
            unique.append((path, listed_as))
    # Files of one export in its manifest's order, where its first file was given.
    first: dict[Path, int] = {}
    keys = []
    for index, (path, _) in enumerate(unique):
        folder = first.setdefault(path.parent, index)
        listed = read_manifest(path.parent)
        keys.append((folder, list(listed).index(path.name) if listed is not None else index))
    return [item for _, item in sorted(zip(keys, unique, strict=True), key=lambda k: k[0])]
