"""The code-eval record (``code-eval --json``, ``<results>.run.json``): versioned, declared
once, written by a real run, read back strictly and valid against its shipped schema."""

from __future__ import annotations

import gzip
import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from evalsweep._records import encode
from evalsweep.codeeval import (
    CodeEvalRecord,
    code_eval,
    code_eval_schema,
    read_code_eval_record,
    record_path,
)
from evalsweep.codeeval._record import CODE_EVAL_RECORD_VERSION
from evalsweep.errors import DataError

HUMANEVAL = Path(__file__).parent / "data" / "humaneval" / "HumanEval.jsonl.gz"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("record")
    with gzip.open(HUMANEVAL, "rt") as handle:
        problems = [json.loads(line) for line in handle][:3]
    samples = folder / "samples.jsonl"
    rows = [{"task_id": p["task_id"], "completion": p["canonical_solution"]} for p in problems]
    rows.append({"task_id": problems[0]["task_id"], "completion": "    return None\n"})
    samples.write_text("".join(json.dumps(row) + "\n" for row in rows))
    ran = code_eval(HUMANEVAL, samples, ks=(1,), workers=1, config={})
    path = record_path(ran.result.results_path)
    assert json.loads(path.read_text()) == json.loads(json.dumps(ran.as_dict(), default=str))
    return path


def test_a_real_runs_record_reads_back_and_is_valid(written: Path) -> None:
    value: dict[str, Any] = json.loads(written.read_text())
    assert next(iter(value)) == "schema_version" and value["schema_version"] == 1
    record = read_code_eval_record(written)
    assert isinstance(record, CodeEvalRecord)
    assert record.counts["passed"] == 3 and record.counts["failed"] == 1
    assert record.run.sandbox.layers and record.execution["path"] == "local"
    assert encode(record) == value  # nothing lost, nothing added
    schema = code_eval_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(value)


def test_the_shipped_schema_is_the_declarations() -> None:
    shipped = resources.files("evalsweep.codeeval").joinpath("code-eval-record.schema.json")
    assert json.loads(shipped.read_text(encoding="utf-8")) == code_eval_schema()


def test_a_record_written_before_versions_reads_as_version_1(written: Path, tmp_path: Path) -> None:
    value = json.loads(written.read_text())
    del value["schema_version"]
    old = tmp_path / "old.run.json"
    old.write_text(json.dumps(value))
    assert read_code_eval_record(old).schema_version == CODE_EVAL_RECORD_VERSION


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda v: v.update(n_samples="4"), "n_samples: expected an integer, found a string"),
        (lambda v: v["run"]["limits"].update(timeout=None), "run.limits.timeout: expected a"),
        (lambda v: v["run"]["sandbox"].pop("layers"), "run.sandbox.layers: missing"),
        (lambda v: v.update(surprise=1), "surprise: not a field of this schema version"),
        (lambda v: v.update(schema_version=99), "schema version 99 is newer"),
    ],
)
def test_a_wrong_record_is_one_line_naming_the_field(
    written: Path, tmp_path: Path, change: Any, named: str
) -> None:
    value = json.loads(written.read_text())
    change(value)
    bad = tmp_path / "bad.run.json"
    bad.write_text(json.dumps(value))
    with pytest.raises(DataError) as caught:
        read_code_eval_record(bad)
    assert named in str(caught.value) and "\n" not in str(caught.value)
    assert not jsonschema.Draft202012Validator(code_eval_schema()).is_valid(value) or (
        "newer" in named
    )
