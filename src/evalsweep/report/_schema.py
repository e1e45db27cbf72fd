"""The result document as typed records, and the one way it becomes JSON and back.

A result document travels: ``--json`` prints it, ``results.json`` keeps it, the
store's ``runs`` table holds it for ``evalsweep serve``, and a remote target
sends it back over ssh. So it carries ``schema_version``, and every reader goes
through :func:`parse_document` (text) or :func:`read_document` (a file), which
apply the strict rules of :mod:`evalsweep.datafiles` (nesting, integer size,
duplicate keys, lone surrogates) and then check every field's type, so a
hostile or damaged file is one :class:`~evalsweep.errors.DataError` line
naming the file and the field, never a traceback or a half-read document.

Versions:

* 1: the untyped documents written before ``schema_version`` existed (no key).
  Their fields are exactly version 2's, so they are read as version 2.
* 2: the fields of version 3 without ``steps`` and ``previous``.
* 3: the fields of version 4 without ``best``: a training run's checkpoints carry their
  steps, and each is also compared with the one before it (``previous``).
* 4: this module's :class:`ResultDocument`: a run's best checkpoint (by the chosen
  tasks) is also tested against each other checkpoint (``best``).

A document of a version newer than :data:`SCHEMA_VERSION` is refused by name.
The JSON written is what ``--json`` always printed, with ``schema_version``
first; optional sections (``compute``, ``secrets_received``, ``demo``, ``steps``,
``previous``, ``best``) appear
only when present.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from evalsweep._records import (
    FLATTEN,
    LEADING,
    VERSION,
    decode,
    encode,
    json_schema,
    kind_of,
    section,
)
from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.datafiles import display_path, parse_json_text, read_json_text
from evalsweep.errors import DataError
from evalsweep.stats import Comparison

SCHEMA_VERSION = 4
"""The version :func:`document_json` writes; :func:`parse_document` reads 1 up to this."""

JSONObject = dict[str, Any]
"""An open JSON object kept as given (backend settings, options, machine facts)."""


@dataclass(frozen=True)
class TaskSettings:
    """How one task was run: its code version, shots, documents and task key."""

    version: str
    num_fewshot: int
    n_documents: int
    settings_key: str


@dataclass(frozen=True)
class Settings:
    """The settings the numbers were made with."""

    backend: JSONObject
    """The backend part of the cache key (``backend``, ``dtype``, ``device_type``, ...)."""
    options: JSONObject
    """Every backend option as given, speed-only ones included."""
    limit: int | None
    data: str
    """Where the task data came from: ``hub``, ``local:<dir>`` or ``stored results in ...``."""
    tasks: dict[str, TaskSettings]


@dataclass(frozen=True)
class CheckpointEntry:
    """One compared checkpoint: what its reference resolved to, and how it was loaded."""

    checkpoint: ResolvedCheckpoint = field(metadata={FLATTEN: True})
    runtime: JSONObject
    """What the backend reported about the loaded model (``{"loaded": False}`` if none was)."""

    @property
    def reference(self) -> str:
        return self.checkpoint.reference


@dataclass(frozen=True)
class ResultRow:
    """One aggregate score: a checkpoint's metric on a task, category or subject."""

    checkpoint: str
    identity: str
    task: str
    metric: str
    level: str
    """``task``, or ``category`` and ``subject`` for MMLU."""
    group: str | None
    value: float | None
    """None when the metric could not be computed (no finite value)."""
    stderr: float | None
    n: int


@dataclass(frozen=True)
class Demo:
    """What ``evalsweep demo`` adds: its seed, the training story and its last word."""

    seed: int
    story: list[str]
    verdict: str


@dataclass(frozen=True)
class ResultDocument:
    """Everything one ``run``, ``compare`` or ``report`` found, and how it was made."""

    run_id: str
    created: str
    evalsweep_version: str
    command: list[str]
    settings: Settings
    checkpoints: list[CheckpointEntry]
    results: list[ResultRow]
    computed_documents: dict[str, int]
    """``"<reference>::<task>"`` -> documents a model was asked for in this run."""
    comparisons: list[Comparison]
    environment: JSONObject
    seconds: float
    compute: JSONObject | None = section()
    """Where the sweep ran and what it cost (a run through a compute target)."""
    secrets_received: list[str] | None = section()
    """Names (never values) of secrets a remote run was sent."""
    demo: Demo | None = section()
    steps: dict[str, int] | None = section()
    """The training step of each checkpoint, when they are one run (in step order)."""
    previous: list[Comparison] | None = section()
    """A run's checkpoints each against the one before it (the baseline's rows excepted),
    under the same multiplicity control as ``comparisons``."""
    best: list[Comparison] | None = section()
    """A run's best checkpoint (``candidate``) against each other one (``baseline``), on
    the headline metrics of the tasks it was chosen by, in one Holm family of their own."""
    schema_version: int = field(default=SCHEMA_VERSION, metadata={LEADING: True, VERSION: True})
    """The version of this schema the document was written with (see the module's docstring)."""

    @property
    def references(self) -> list[str]:
        """The checkpoints in order: those listed, then any only named by a result row."""
        listed = [entry.reference for entry in self.checkpoints]
        return list(dict.fromkeys([*listed, *(row.checkpoint for row in self.results)]))

    @property
    def baseline(self) -> str | None:
        """The checkpoint the others were compared with, if any comparison was made."""
        return self.comparisons[0].baseline if self.comparisons else None

    def to_dict(self) -> JSONObject:
        """Plain JSON values, keys in the order ``--json`` has always printed them (the
        declaration's; optional sections only when present)."""
        data: JSONObject = encode(self)
        return data


def result_row_dict(row: ResultRow) -> JSONObject:
    """One result row as the plain JSON object the document holds."""
    data: JSONObject = encode(row)
    return data


def document_schema() -> JSONObject:
    """The result document's JSON Schema, from its declaration (shipped as
    ``report/result-document.schema.json``)."""
    return json_schema(
        ResultDocument,
        title="evalsweep result document",
        schema_id=f"urn:evalsweep:result-document:{SCHEMA_VERSION}",
    )


def document_json(
    document: ResultDocument, indent: int | None = 2, *, ensure_ascii: bool = True
) -> str:
    """The document as JSON text: indented for people (``--json``, ``results.json``), on one
    line (``indent=None``) for the store and the HTML report."""
    return json.dumps(document.to_dict(), indent=indent, ensure_ascii=ensure_ascii, default=str)


def read_document(path: str | Path) -> ResultDocument:
    """A result document from a file (``results.json``), by the strict rules.

    Raises:
        DataError: one line naming the file and what is wrong with it.
    """
    value = read_json_text(path)
    return _document(value, display_path(path))


def parse_document(text: str | bytes, where: str) -> ResultDocument:
    """A result document from JSON text; ``where`` names its source in any error.

    Raises:
        DataError: one line naming ``where`` and what is wrong.
    """
    value = parse_json_text(text, where)
    return _document(value, where)


# --- reading: every field checked, every failure one line naming the field ---------------


def _version(top: dict[str, Any], fail: Any, where: str) -> int:
    if "schema_version" not in top:
        return 1  # written before documents carried a version: version 2's fields
    version = top["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int):
        fail("schema_version", f"expected an integer, found {kind_of(version)}")
    if version > SCHEMA_VERSION:
        raise DataError(
            f"{where}: result document schema version {version} is newer than this "
            f"evalsweep reads (1 to {SCHEMA_VERSION}); upgrade evalsweep to read it"
        )
    if version < 1:
        fail("schema_version", f"{version} is not a schema version")
    return int(version)


def _document(value: Any, where: str) -> ResultDocument:
    def fail(path: str, message: str) -> NoReturn:
        raise DataError(f"{where}: result document field {path}: {message}")

    if not isinstance(value, dict):
        fail("", f"expected an object, found {kind_of(value)}")
    _version(value, fail, where)  # 1 to 4 differ only by optional sections; upgrades go here
    document: ResultDocument = decode(ResultDocument, value, fail, strict=True)
    return document
