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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.datafiles import display_path, parse_json_text, read_json_text
from evalsweep.errors import DataError
from evalsweep.stats import Comparison, Verdict

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

    checkpoint: ResolvedCheckpoint
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
    compute: JSONObject | None = None
    """Where the sweep ran and what it cost (a run through a compute target)."""
    secrets_received: list[str] | None = None
    """Names (never values) of secrets a remote run was sent."""
    demo: Demo | None = None
    steps: dict[str, int] | None = None
    """The training step of each checkpoint, when they are one run (in step order)."""
    previous: list[Comparison] | None = None
    """A run's checkpoints each against the one before it (the baseline's rows excepted),
    under the same multiplicity control as ``comparisons``."""
    best: list[Comparison] | None = None
    """A run's best checkpoint (``candidate``) against each other one (``baseline``), on
    the headline metrics of the tasks it was chosen by, in one Holm family of their own."""
    schema_version: int = field(default=SCHEMA_VERSION)

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
        """Plain JSON values, keys in the order ``--json`` has always printed them."""
        data: JSONObject = {
            "schema_version": self.schema_version,
            "run_id": self.run_id,
            "created": self.created,
            "evalsweep_version": self.evalsweep_version,
            "command": list(self.command),
            "settings": {
                "backend": self.settings.backend,
                "options": self.settings.options,
                "limit": self.settings.limit,
                "data": self.settings.data,
                "tasks": {
                    name: {
                        "version": task.version,
                        "num_fewshot": task.num_fewshot,
                        "n_documents": task.n_documents,
                        "settings_key": task.settings_key,
                    }
                    for name, task in self.settings.tasks.items()
                },
            },
            "checkpoints": [
                {**entry.checkpoint.to_dict(), "runtime": entry.runtime}
                for entry in self.checkpoints
            ],
            "results": [result_row_dict(row) for row in self.results],
            "computed_documents": dict(self.computed_documents),
            "comparisons": [c.to_dict() for c in self.comparisons],
            "environment": self.environment,
            "seconds": self.seconds,
        }
        if self.compute is not None:
            data["compute"] = self.compute
        if self.secrets_received is not None:
            data["secrets_received"] = list(self.secrets_received)
        if self.demo is not None:
            data["demo"] = {
                "seed": self.demo.seed,
                "story": list(self.demo.story),
                "verdict": self.demo.verdict,
            }
        if self.steps is not None:
            data["steps"] = dict(self.steps)
        if self.previous is not None:
            data["previous"] = [c.to_dict() for c in self.previous]
        if self.best is not None:
            data["best"] = [c.to_dict() for c in self.best]
        return data


def result_row_dict(row: ResultRow) -> JSONObject:
    """One result row as the plain JSON object the document holds."""
    return {
        "checkpoint": row.checkpoint,
        "identity": row.identity,
        "task": row.task,
        "metric": row.metric,
        "level": row.level,
        "group": row.group,
        "value": row.value,
        "stderr": row.stderr,
        "n": row.n,
    }


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

T = TypeVar("T")


class _Fields:
    """Typed access to one JSON object of the document; errors name the file and field."""

    def __init__(self, value: Any, where: str, path: str) -> None:
        self.where = where
        self.path = path
        if not isinstance(value, dict):
            self.fail(path, f"expected an object, found {_kind(value)}")
        self.value: dict[str, Any] = value

    def fail(self, path: str, message: str) -> Any:
        raise DataError(f"{self.where}: result document field {path}: {message}")

    def _get(self, key: str, optional: bool) -> Any:
        if key not in self.value:
            if optional:
                return None
            self.fail(self._name(key), "missing")
        return self.value[key]

    def _name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def text(self, key: str, *, optional: bool = False) -> Any:
        value = self._get(key, optional)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            self.fail(self._name(key), f"expected a string, found {_kind(value)}")
        return value

    def integer(self, key: str, *, optional: bool = False) -> Any:
        value = self._get(key, optional)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(self._name(key), f"expected an integer, found {_kind(value)}")
        return value

    def number(self, key: str, *, optional: bool = False) -> Any:
        value = self._get(key, optional)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(self._name(key), f"expected a number, found {_kind(value)}")
        return float(value)

    def obj(self, key: str, *, optional: bool = False) -> Any:
        value = self._get(key, optional)
        if value is None and optional:
            return None
        if not isinstance(value, dict):
            self.fail(self._name(key), f"expected an object, found {_kind(value)}")
        return value

    def fields(self, key: str) -> _Fields:
        return _Fields(self.obj(key), self.where, self._name(key))

    def items(self, key: str, read: Callable[[_Fields], T], *, optional: bool = False) -> Any:
        value = self._get(key, optional)
        if value is None and optional:
            return None
        if not isinstance(value, list):
            self.fail(self._name(key), f"expected an array, found {_kind(value)}")
        return [
            read(_Fields(item, self.where, f"{self._name(key)}[{i}]"))
            for i, item in enumerate(value)
        ]

    def texts(self, key: str, *, optional: bool = False) -> Any:
        value = self._get(key, optional)
        if value is None and optional:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(self._name(key), "expected an array of strings")
        return list(value)

    def known(self, keys: set[str]) -> None:
        extra = sorted(set(self.value) - keys)
        if extra:
            self.fail(self._name(extra[0]), "not a field of this schema version")


def _kind(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    return "a number"


def _version(top: _Fields) -> int:
    if "schema_version" not in top.value:
        return 1  # written before documents carried a version: version 2's fields
    version = top.integer("schema_version")
    if version > SCHEMA_VERSION:
        raise DataError(
            f"{top.where}: result document schema version {version} is newer than this "
            f"evalsweep reads (1 to {SCHEMA_VERSION}); upgrade evalsweep to read it"
        )
    if version < 1:
        top.fail("schema_version", f"{version} is not a schema version")
    return version


def _document(value: Any, where: str) -> ResultDocument:
    top = _Fields(value, where, "")
    _version(top)  # 1 to 4 differ only by optional sections; an upgrade step goes here
    top.known({*_TOP_FIELDS, "schema_version"})
    demo = top.fields("demo") if "demo" in top.value else None
    return ResultDocument(
        run_id=top.text("run_id"),
        created=top.text("created"),
        evalsweep_version=top.text("evalsweep_version"),
        command=top.texts("command"),
        settings=_settings(top.fields("settings")),
        checkpoints=top.items("checkpoints", _checkpoint_entry),
        results=top.items("results", _result_row),
        computed_documents=_counts(top.fields("computed_documents")),
        comparisons=top.items("comparisons", _comparison),
        environment=top.obj("environment"),
        seconds=top.number("seconds"),
        compute=top.obj("compute", optional=True),
        secrets_received=top.texts("secrets_received", optional=True),
        demo=_demo(demo) if demo is not None else None,
        steps=_counts(top.fields("steps")) if "steps" in top.value else None,
        previous=top.items("previous", _comparison, optional=True),
        best=top.items("best", _comparison, optional=True),
        schema_version=SCHEMA_VERSION,
    )


_TOP_FIELDS = {
    "run_id", "created", "evalsweep_version", "command", "settings", "checkpoints", "results",
    "computed_documents", "comparisons", "environment", "seconds", "compute",
    "secrets_received", "demo", "steps", "previous", "best",
}  # fmt: skip


def _settings(item: _Fields) -> Settings:
    tasks = item.fields("tasks")
    return Settings(
        backend=item.obj("backend"),
        options=item.obj("options"),
        limit=item.integer("limit", optional=True),
        data=item.text("data"),
        tasks={name: _task_settings(tasks.fields(name)) for name in tasks.value},
    )


def _task_settings(item: _Fields) -> TaskSettings:
    return TaskSettings(
        version=item.text("version"),
        num_fewshot=item.integer("num_fewshot"),
        n_documents=item.integer("n_documents"),
        settings_key=item.text("settings_key"),
    )


def _resolved(item: _Fields) -> ResolvedCheckpoint:
    base = item.fields("base") if item.value.get("base") is not None else None
    return ResolvedCheckpoint(
        reference=item.text("reference"),
        kind=item.text("kind"),
        location=item.text("location"),
        revision=item.text("revision", optional=True),
        identity=item.text("identity"),
        commit=item.text("commit", optional=True),
        base=_resolved(base) if base is not None else None,
    )


def _checkpoint_entry(item: _Fields) -> CheckpointEntry:
    return CheckpointEntry(checkpoint=_resolved(item), runtime=item.obj("runtime"))


def _result_row(item: _Fields) -> ResultRow:
    return ResultRow(
        checkpoint=item.text("checkpoint"),
        identity=item.text("identity"),
        task=item.text("task"),
        metric=item.text("metric"),
        level=item.text("level"),
        group=item.text("group", optional=True),
        value=item.number("value", optional=True),
        stderr=item.number("stderr", optional=True),
        n=item.integer("n"),
    )


_VERDICTS = {verdict.value: verdict for verdict in Verdict}


def _comparison(item: _Fields) -> Comparison:
    verdict = item.text("verdict")
    if verdict not in _VERDICTS:
        item.fail(item._name("verdict"), f"{verdict[:40]!r} is not a verdict")
    return Comparison(
        baseline=item.text("baseline"),
        candidate=item.text("candidate"),
        task=item.text("task"),
        metric=item.text("metric"),
        subject=item.text("subject", optional=True),
        delta=item.number("delta"),
        ci_low=item.number("ci_low"),
        ci_high=item.number("ci_high"),
        p_value=item.number("p_value"),
        p_adjusted=item.number("p_adjusted"),
        verdict=_VERDICTS[verdict],
        n=item.integer("n"),
        mde=item.number("mde"),
        note=item.text("note", optional=True),
        test=item.text("test", optional=True),
    )


def _counts(item: _Fields) -> dict[str, int]:
    return {key: item.integer(key) for key in item.value}


def _demo(item: _Fields) -> Demo:
    return Demo(seed=item.integer("seed"), story=item.texts("story"), verdict=item.text("verdict"))
