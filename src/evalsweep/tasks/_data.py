"""Reading benchmark files with errors that name the file and line.

Local data keeps the benchmarks' original formats (MMLU's headerless CSVs,
GSM8K's JSON Lines); Hub data comes through ``datasets``. Both produce the
same rows, so a task does not care which it got.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalsweep.datafiles import display_path, read_records
from evalsweep.errors import DataError


def read_jsonl(
    path: Path, required: Sequence[str], limit: int | None = None
) -> list[dict[str, Any]]:
    """Rows of a JSON Lines file (:func:`evalsweep.datafiles.read_records`'s strict rules);
    each must be an object with the ``required`` keys."""
    source = read_records(path, limit=limit, lines=True, empty_ok=True)
    for record in source.records:
        missing = [key for key in required if key not in record.value]
        if missing:
            raise DataError(f"{display_path(path)}:{record.line}: missing field {missing[0]!r}")
    return [record.value for record in source.records]


def read_csv_rows(path: Path, columns: int, limit: int | None = None) -> list[list[str]]:
    """Rows of a headerless CSV file that must each have exactly ``columns`` fields."""
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    rows: list[list[str]] = []
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            for number, row in enumerate(csv.reader(handle), start=1):
                if limit is not None and len(rows) >= limit:
                    break
                if len(row) != columns:
                    raise DataError(
                        f"{path}:{number}: expected {columns} columns, found {len(row)}"
                    )
                rows.append(row)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"{path}: cannot be read as CSV ({exc})") from exc
    if not rows:
        raise DataError(f"{path}: no rows")
    return rows


def load_hub_split(path: str, name: str | None, split: str) -> list[dict[str, Any]]:
    """A split of a Hub dataset as plain rows, with a one-line error when it can't be had."""
    try:
        import datasets
    except ImportError as exc:  # pragma: no cover - datasets is a dependency
        raise DataError("the 'datasets' package is required to load data from the Hub") from exc
    try:
        dataset = datasets.load_dataset(path, name, split=split)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = f"{path}/{name}" if name else path
        raise DataError(
            f"cannot load {where} split {split!r} from the Hub ({first}); "
            "use --data-dir for local files"
        ) from exc
    return [dict(row) for row in dataset]


def read_label_lines(path: Path, allowed: Sequence[str], limit: int | None = None) -> list[str]:
    """The labels of a ``*-labels.lst`` file (one per line, each one of ``allowed``)."""
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    try:
        lines = path.read_bytes().decode("utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot be read ({exc})") from exc
    if lines and lines[-1] == "":
        lines.pop()
    labels = []
    for number, line in enumerate(lines[:limit], start=1):
        label = line.strip()
        if label not in allowed:
            raise DataError(
                f"{path}:{number}: label must be one of {list(allowed)}, found {line!r}"
            )
        labels.append(label)
    return labels


def with_labels(
    rows: list[dict[str, Any]], labels_path: Path, allowed: Sequence[str], data_path: Path
) -> list[tuple[dict[str, Any], str]]:
    """Rows paired with the labels file beside them, which must have as many lines."""
    labels = read_label_lines(labels_path, allowed, len(rows))
    if len(labels) != len(rows):
        raise DataError(
            f"{labels_path}: {len(labels)} labels for the {len(rows)} rows of {data_path}"
        )
    return list(zip(rows, labels, strict=True))
