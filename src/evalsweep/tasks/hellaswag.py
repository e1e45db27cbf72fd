"""HellaSwag (Zellers et al.): pick the most plausible ending of an everyday scene.

Matches lm-evaluation-harness 0.4.13 ``tasks/hellaswag``: the query is
``activity_label + ": " + ctx_a + " " + ctx_b.capitalize()`` and each ending
is cleaned by lm-eval's ``preprocess`` (WikiHow's ``[title]`` and other
bracket markers removed, double spaces collapsed); the endings are scored as
continuations after a space; ``acc`` and ``acc_norm``; validation split,
0-shot by default, few-shot examples from ``train`` (lm-eval draws n + 1 and
drops the document, since the task sets no test split).

Data from the Hub (``Rowan/hellaswag``) or, with ``--data-dir``, the text
format of ``hellaswag/hellaswag_val_full.txt.bz2`` (six lines per item: the
already joined ``activity_label: ctx``, the gold index, four endings). That
format keeps no ``ctx_b``, so its query is the joined line as given, without
lm-eval's capitalisation of ``ctx_b``; results on it match lm-eval run on the
same file, not lm-eval on the Hub's rows. A local train file in the same
format (``hellaswag_train_full.txt[.bz2]``) is the few-shot pool when present;
otherwise the validation items are, each document excluded from its own draw.
"""

from __future__ import annotations

import bz2
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalsweep.errors import DataError
from evalsweep.jsonl import split_lines
from evalsweep.tasks._base import DataSource, Document, MetricSpec, TaskData
from evalsweep.tasks._choice import MultipleChoiceTask
from evalsweep.tasks._data import load_hub_split

Row = Mapping[str, Any]
LINES_PER_ITEM = 6


def preprocess(text: str) -> str:
    """lm-eval's ``hellaswag.utils.preprocess``."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    text = text.replace("  ", " ")
    return text


def process_hub_row(row: Row) -> dict[str, Any]:
    """lm-eval's ``process_docs`` for one Hub row."""
    ctx = row["ctx_a"] + " " + row["ctx_b"].capitalize()
    query = preprocess(row["activity_label"] + ": " + ctx)
    return {
        **row,
        "query": query,
        "choices": [preprocess(ending) for ending in row["endings"]],
        "gold": int(row["label"]),
        "question": query,  # what flips and samples.jsonl show
    }


def read_text_format(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Items of the six-lines-per-item text format, processed as lm-eval processes rows."""
    if not path.is_file():
        raise DataError(f"data file not found: {path}")
    opener: Any = bz2.open if path.suffix == ".bz2" else open
    try:
        with opener(path, "rb") as handle:
            # A line ends at "\n" only: "\r", "\x85", "\u2028" and the other characters
            # str.splitlines() and text-mode files break at are text here (a "\r\n" end
            # is a line end).
            lines = [raw.removesuffix(b"\r").decode("utf-8") for _, raw in split_lines(handle)]
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise DataError(f"{path}: cannot be read ({exc})") from exc
    if len(lines) % LINES_PER_ITEM:
        raise DataError(
            f"{path}: {len(lines)} lines, not a multiple of {LINES_PER_ITEM} (one item per "
            "6 lines: context, gold index, four endings)"
        )
    items: list[dict[str, Any]] = []
    for start in range(0, len(lines), LINES_PER_ITEM):
        if limit is not None and len(items) >= limit:
            break
        context, label, *endings = lines[start : start + LINES_PER_ITEM]
        if label.strip() not in ("0", "1", "2", "3"):
            raise DataError(f"{path}:{start + 2}: gold index must be 0-3, found {label!r}")
        query = preprocess(context)
        items.append(
            {
                "query": query,
                "choices": [preprocess(ending) for ending in endings],
                "gold": int(label),
                "question": query,  # what flips and samples.jsonl show
            }
        )
    return items


class HellaSwag(MultipleChoiceTask):
    """The ``hellaswag`` task."""

    name = "hellaswag"
    version = "lm-eval hellaswag v1.0"
    metrics = (MetricSpec("acc"), MetricSpec("acc_norm"))
    fewshot_excludes_document = True

    def question(self, row: Row) -> str:
        return str(row["query"])

    def choices(self, row: Row) -> list[str]:
        return list(row["choices"])

    def gold(self, row: Row) -> int:
        return int(row["gold"])

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        pool: dict[str, list[Row]]
        if source.data_dir is None:
            rows = load_hub_split("Rowan/hellaswag", None, "validation")[:limit]
            test = [_checked(row, "Rowan/hellaswag validation", i) for i, row in enumerate(rows)]
            train = load_hub_split("Rowan/hellaswag", None, "train")
            pool = {
                "fewshot": [_checked(r, "Rowan/hellaswag train", i) for i, r in enumerate(train)]
            }
        else:
            folder = Path(source.data_dir) / "hellaswag"
            validation = _find(folder, "val")
            assert validation is not None
            test = read_text_format(validation, limit)
            train_file = _find(folder, "train", required=False)
            if train_file is not None:
                pool = {"fewshot": list(read_text_format(train_file))}
            else:
                pool = {"eval": list(test if limit is None else read_text_format(validation))}
        documents = [Document(str(i), i, row) for i, row in enumerate(test)]
        return TaskData(documents, pool, source.describe())


def _find(folder: Path, split: str, required: bool = True) -> Path | None:
    for name in (f"hellaswag_{split}_full.txt.bz2", f"hellaswag_{split}_full.txt"):
        if (folder / name).is_file():
            return folder / name
    if required:
        raise DataError(f"data file not found: {folder / f'hellaswag_{split}_full.txt.bz2'}")
    return None


def _checked(row: Row, where: str, index: int) -> dict[str, Any]:
    try:
        processed = process_hub_row(row)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataError(f"{where} row {index}: unexpected format ({exc})") from exc
    if len(processed["choices"]) != 4 or not 0 <= processed["gold"] < 4:
        raise DataError(f"{where} row {index}: expected four endings and a label 0-3")
    return processed
