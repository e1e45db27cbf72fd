"""The typed result document: one way to JSON and back, versioned, and strict on what it reads.

A document travels between machines (``--json``, ``results.json``, the store's runs, a
remote target's stdout), so every reader goes through ``parse_document``/``read_document``:
a round trip gives back an equal document, a version-1 document (written before
``schema_version`` existed, committed under ``tests/data/documents/``) reads, a newer
version is refused by name, and a damaged or hostile file is one line naming the file.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalsweep.errors import DataError
from evalsweep.report import (
    SCHEMA_VERSION,
    ResultDocument,
    document_json,
    parse_document,
    read_document,
)
from evalsweep.stats import Verdict


@pytest.fixture
def v1_path(data_dir: Path) -> Path:
    return data_dir / "documents" / "v1-run.json"


@pytest.fixture
def v1(v1_path: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(v1_path.read_text(encoding="utf-8"))
    return value


def _refused(value: Any, tmp_path: Path, name: str = "results.json") -> str:
    path = tmp_path / name
    path.write_text(value if isinstance(value, str) else json.dumps(value), encoding="utf-8")
    with pytest.raises(DataError) as caught:
        read_document(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path)), message
    return message


def test_a_version_1_document_reads_with_every_field_typed(v1_path: Path, v1: dict) -> None:
    assert "schema_version" not in v1
    document = read_document(v1_path)
    assert document.schema_version == SCHEMA_VERSION
    assert document.run_id == v1["run_id"]
    listed = [c["reference"] for c in v1["checkpoints"]]
    assert [e.reference for e in document.checkpoints] == listed
    assert [e.checkpoint.identity for e in document.checkpoints] == [
        c["identity"] for c in v1["checkpoints"]
    ]
    assert {r.level for r in document.results} == {"task", "category", "subject"}
    assert [(r.task, r.metric, r.value, r.n) for r in document.results] == [
        (r["task"], r["metric"], r["value"], r["n"]) for r in v1["results"]
    ]
    assert all(isinstance(c.verdict, Verdict) for c in document.comparisons)
    assert [c.to_dict() for c in document.comparisons] == v1["comparisons"]
    assert document.settings.tasks["mmlu_anatomy"].num_fewshot == 5
    assert document.compute is not None and document.compute["kind"] == "local"


def test_upgraded_version_1_is_what_was_read_plus_the_version(v1_path: Path, v1: dict) -> None:
    written = json.loads(document_json(read_document(v1_path)))
    assert written == {"schema_version": SCHEMA_VERSION, **v1}
    assert list(written) == ["schema_version", *v1]  # keys in the order --json always had


def test_round_trip_document_to_json_to_document_is_equal(v1_path: Path) -> None:
    document = read_document(v1_path)
    for indent in (2, None):
        text = document_json(document, indent=indent)
        again = parse_document(text, "round trip")
        assert again == document
        assert document_json(again, indent=indent) == text


def test_optional_sections_round_trip_and_are_absent_when_empty(v1_path: Path) -> None:
    from evalsweep.report import Demo

    bare = dataclasses.replace(read_document(v1_path), compute=None)
    assert "compute" not in json.loads(document_json(bare))
    full = dataclasses.replace(
        bare,
        secrets_received=["HF_TOKEN"],
        demo=Demo(seed=3, story=["step 1", "step 2"], verdict="Caught."),
    )
    assert parse_document(document_json(full), "full") == full
    assert list(json.loads(document_json(full)))[-2:] == ["secrets_received", "demo"]


def test_a_newer_version_is_refused_by_name(v1: dict, tmp_path: Path) -> None:
    message = _refused({"schema_version": SCHEMA_VERSION + 1, **v1}, tmp_path)
    assert f"schema version {SCHEMA_VERSION + 1} is newer" in message
    assert "upgrade evalsweep" in message
    # Refused even when its fields are not this version's: the version is read first.
    _refused({"schema_version": SCHEMA_VERSION + 7, "something": "else"}, tmp_path)


@pytest.mark.parametrize("version", [0, -1, "2", 2.0, True, None])
def test_a_version_that_is_not_a_positive_integer_is_refused(
    v1: dict, tmp_path: Path, version: Any
) -> None:
    message = _refused({"schema_version": version, **v1}, tmp_path)
    assert "schema_version" in message


def _set(value: dict, path: str, new: Any) -> dict:
    """A copy of ``value`` with the field at ``a.b[0].c`` replaced (or removed, for ...)."""
    copy = json.loads(json.dumps(value))
    parts = path.replace("[", ".[").split(".")
    holder: Any = copy
    for part in parts[:-1]:
        holder = holder[int(part[1:-1])] if part.startswith("[") else holder[part]
    last = parts[-1]
    key: Any = int(last[1:-1]) if last.startswith("[") else last
    if new is ...:
        del holder[key]
    else:
        holder[key] = new
    return copy


@pytest.mark.parametrize(
    ("path", "new", "named"),
    [
        ("run_id", 7, "run_id: expected a string, found a number"),
        ("seconds", "fast", "seconds: expected a number"),
        ("results", {}, "results: expected an array"),
        ("results[0].n", 1.5, "results[0].n: expected an integer"),
        ("results[1].value", True, "results[1].value: expected a number, found true"),
        ("comparisons[0].verdict", "better", "comparisons[0].verdict: 'better' is not a verdict"),
        ("comparisons[2].delta", None, "comparisons[2].delta: expected a number, found null"),
        ("checkpoints[1].identity", ..., "checkpoints[1].identity: missing"),
        ("checkpoints[0].runtime", [], "checkpoints[0].runtime: expected an object"),
        ("settings.tasks.arc_easy.num_fewshot", "0", "settings.tasks.arc_easy.num_fewshot"),
        ("settings", ..., "settings: missing"),
        ("command", ["evalsweep", 3], "command: expected an array of strings"),
        ("computed_documents", {"a::b": "3"}, "computed_documents.a::b: expected an integer"),
        ("unexpected", 1, "unexpected: not a field of this schema version"),
    ],
)
def test_a_wrong_type_or_missing_field_is_named(
    v1: dict, tmp_path: Path, path: str, new: Any, named: str
) -> None:
    message = _refused(_set(v1, path, new), tmp_path)
    assert f"result document field {named}" in message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested deeper"),
        ('{"run_id": "' + "a" * 10 + '", "seconds": 1' + "0" * 5000 + "}", "more than 4300 digits"),
        ('{"seconds": 1e999}', "too large"),
        ('{"run_id": "a\x00b"}', "NUL"),
        ('{"run_id": "a", "run_id": "b"}', "appears twice"),
        ('{"run_id": "\\ud800"}', "lone surrogate"),
        ("[1, 2]", "expected a JSON object"),
        ('{"run_id": ', "not valid JSON"),
        ("", "not valid JSON"),
    ],
)
def test_a_hostile_file_is_one_line_naming_it(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in _refused(text, tmp_path)


def test_a_file_that_is_not_utf8_or_not_a_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'{"run_id": "caf\xe9"}')
    with pytest.raises(DataError, match="not valid UTF-8"):
        read_document(bad)
    with pytest.raises(DataError, match=str(tmp_path)):
        read_document(tmp_path)  # a directory


def test_parse_names_its_source_in_the_error() -> None:
    with pytest.raises(DataError, match=r"^run 'abc' in store\.sqlite:1: not valid JSON"):
        parse_document("{", "run 'abc' in store.sqlite")


def test_nan_written_by_the_writer_reads_back(v1_path: Path) -> None:
    document = read_document(v1_path)
    odd = dataclasses.replace(
        document, comparisons=[dataclasses.replace(document.comparisons[0], mde=float("nan"))]
    )
    again = parse_document(document_json(odd), "nan")
    assert again.comparisons[0].mde != again.comparisons[0].mde  # NaN, as written


def test_a_refused_file_is_one_line_in_a_fresh_interpreter(v1_path: Path, tmp_path: Path) -> None:
    """A person's damaged results.json read through the MCP path: one line, no traceback."""
    broken = tmp_path / "results.json"
    broken.write_text(json.dumps({"schema_version": 99}), encoding="utf-8")
    code = (
        "import sys\n"
        "from evalsweep.errors import EvalsweepError\n"
        "from evalsweep.report import read_document\n"
        "try:\n"
        "    read_document(sys.argv[1])\n"
        "except EvalsweepError as error:\n"
        "    print(error)\n"
        "    sys.exit(2)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(broken)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and done.stderr == ""
    assert done.stdout.count("\n") == 1 and "schema version 99 is newer" in done.stdout
    assert isinstance(read_document(v1_path), ResultDocument)
