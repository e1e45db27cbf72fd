"""Reading benchmark files with errors that name the file and line.

Local data keeps the benchmarks' original formats (MMLU's headerless CSVs,
GSM8K's JSON Lines); Hub data comes through ``datasets``. Both produce the
same rows, so a task does not care which it got.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from evalsweep.errors import DataError
from evalsweep.jsonl import LineError, holds_surrogate, is_blank, loads_line, split_lines


def read_jsonl(
    path: Path,
    required: Sequence[str],
    limit: int | None = None,
    opener: Callable[[Path], IO[bytes]] | None = None,
) -> list[dict[str, Any]]:
    """Rows of a JSON Lines file; each must be an object with the ``required`` keys.

    Lines end at ``b"\\n"`` only (:mod:`evalsweep.jsonl`): text holding ``\\r``,
    ``\\x85``, ``\\u2028`` and other characters that text-mode files or
    ``splitlines()`` treat as breaks is read whole. ``opener`` opens the file for
    binary reading (``gzip.open`` for ``.gz``).
    """
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    rows: list[dict[str, Any]] = []
    try:
        with (opener or _open_binary)(path) as handle:
            for number, raw in split_lines(handle):
                if limit is not None and len(rows) >= limit:
                    break
                if is_blank(raw):
                    continue
                try:
                    row = loads_line(raw)
                except LineError as exc:
                    raise DataError(f"{path}:{number}: {exc.problem}") from None
                if not isinstance(row, dict):
                    raise DataError(f"{path}:{number}: expected a JSON object")
                missing = [key for key in required if key not in row]
                if missing:
                    raise DataError(f"{path}:{number}: missing field {missing[0]!r}")
                if holds_surrogate(row, raw):
                    raise DataError(
                        f"{path}:{number}: holds a lone surrogate (a \\ud800-\\udfff escape "
                        "without its pair), which is not Unicode text; fix the line"
                    )
                rows.append(row)
    except (OSError, EOFError) as exc:
        raise DataError(f"{path}: cannot be read ({exc})") from None
    return rows


def _open_binary(path: Path) -> IO[bytes]:
    return path.open("rb")


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
        first = str(exc).strip().split("\n")[0].strip() if str(exc).strip() else type(exc).__name__
        where = f"{path}/{name}" if name else path
        raise DataError(
            f"cannot load {where} split {split!r} from the Hub ({first}); "
            "use --data-dir for local files"
        ) from exc
    return [dict(row) for row in dataset]
