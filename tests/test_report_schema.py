"""The result document's JSON Schema: made from the one declaration, shipped with the
package, and in agreement with the reader on what a document is."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from evalsweep.errors import DataError
from evalsweep.report._schema import SCHEMA_VERSION, document_schema, parse_document
from test_report_document import _set  # noqa: E402 - the field-path helper of the reader's tests


@pytest.fixture
def v1(data_dir: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((data_dir / "documents" / "v1-run.json").read_text())
    return value


def _validator() -> jsonschema.protocols.Validator:
    schema = document_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_shipped_schema_is_the_declarations() -> None:
    shipped = resources.files("evalsweep.report").joinpath("result-document.schema.json")
    assert json.loads(shipped.read_text(encoding="utf-8")) == document_schema()
    assert document_schema()["$id"].endswith(f":{SCHEMA_VERSION}")


def test_documents_the_reader_takes_are_valid(v1: dict[str, Any]) -> None:
    validator = _validator()
    validator.validate(v1)  # version 1: no schema_version, no optional sections
    written = parse_document(json.dumps(v1), "v1").to_dict()
    assert written["schema_version"] == SCHEMA_VERSION
    validator.validate(written)


@pytest.mark.parametrize(
    ("path", "new"),
    [
        ("run_id", 7),
        ("seconds", "fast"),
        ("results", {}),
        ("results[0].n", 1.5),
        ("results[1].value", True),
        ("comparisons[0].verdict", "better"),
        ("comparisons[2].delta", None),
        ("checkpoints[1].identity", ...),
        ("checkpoints[0].runtime", []),
        ("settings.tasks.arc_easy.num_fewshot", "0"),
        ("settings", ...),
        ("command", ["evalsweep", 3]),
        ("computed_documents", {"a::b": "3"}),
        ("unexpected", 1),
    ],
)
def test_what_the_reader_refuses_the_schema_refuses(
    v1: dict[str, Any], path: str, new: Any
) -> None:
    document = _set(v1, path, new)
    with pytest.raises(DataError):
        parse_document(json.dumps(document), "doc")
    assert not _validator().is_valid(document)
