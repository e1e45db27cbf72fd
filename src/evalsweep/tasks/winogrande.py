"""WinoGrande (Sakaguchi et al.): which of two names fills the blank, by partial scoring.

Matches lm-evaluation-harness 0.4.13 ``tasks/winogrande`` (version 1.0,
``winogrande_xl``, validation split). Partial scoring: each option fills the
blank and *is part of the context*; the continuation, the same for both, is
the rest of the sentence after the blank (stripped, after a space), and the
option under which it is likelier wins. So a document sends two requests with
different contexts and one continuation. ``acc`` only; 0-shot by default.

Few-shot examples (lm-eval: the ``train`` split, drawn by its default sampler,
each document excluded from its own draw) are each the sentence up to the
blank with the right option, a space, and the rest of the sentence.

Data from the Hub (``allenai/winogrande``, ``winogrande_xl``) or, with
``--data-dir``, AI2's original ``winogrande/dev.jsonl`` (WinoGrande 1.1, the
file the Hub's validation split is built from); ``train_xl.jsonl`` beside it
is the few-shot pool when present, otherwise the validation rows are, as
lm-eval falls back to them without a training split.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalsweep.errors import DataError
from evalsweep.requests import LoglikelihoodRequest, LoglikelihoodResult
from evalsweep.tasks._base import (
    DataSource,
    Document,
    MetricSpec,
    PreparedDocument,
    ScoredDocument,
    TaskData,
)
from evalsweep.tasks._choice import MultipleChoiceTask, first_argmax
from evalsweep.tasks._data import load_hub_split, read_jsonl
from evalsweep.tasks._fewshot import FewshotSampler

Row = Mapping[str, Any]
FIELDS = ("sentence", "option1", "option2", "answer")


def partial_contexts(row: Row) -> list[str]:
    """lm-eval's ``doc_to_choice``: the sentence up to the blank, with each option."""
    blank = row["sentence"].index("_")
    return [row["sentence"][:blank] + option for option in (row["option1"], row["option2"])]


def continuation(row: Row) -> str:
    """lm-eval's ``doc_to_target``: the rest of the sentence after the blank, stripped."""
    return str(row["sentence"][row["sentence"].index("_") + 1 :].strip())


def gold(row: Row) -> int:
    """lm-eval's ``doc_to_text`` (which gives the gold index for this task)."""
    return {"1": 0, "2": 1}[row["answer"]]


class Winogrande(MultipleChoiceTask):
    """The ``winogrande`` task."""

    name = "winogrande"
    version = "lm-eval winogrande v1.0"
    default_num_fewshot = 0
    fewshot_excludes_document = True
    metrics = (MetricSpec("acc"),)

    def choices(self, row: Row) -> list[str]:
        return [str(row["option1"]), str(row["option2"])]

    def gold(self, row: Row) -> int:
        return gold(row)

    def load(self, source: DataSource, limit: int | None) -> TaskData:
        pool: dict[str, list[Row]]
        test: list[Row]
        if source.data_dir is None:
            rows = load_hub_split("allenai/winogrande", "winogrande_xl", "validation")
            test = [_checked(r, "allenai/winogrande validation", i) for i, r in enumerate(rows)]
            rows = load_hub_split("allenai/winogrande", "winogrande_xl", "train")
            pool = {
                "fewshot": [_checked(r, "allenai/winogrande train", i) for i, r in enumerate(rows)]
            }
        else:
            folder = Path(source.data_dir) / "winogrande"
            test = _local(folder / "dev.jsonl")
            train_file = folder / "train_xl.jsonl"
            pool = {"fewshot": _local(train_file)} if train_file.is_file() else {"eval": test}
        documents = [
            Document(str(i), i, {**row, "question": row["sentence"]})
            for i, row in enumerate(test[:limit])
        ]
        return TaskData(documents, pool, source.describe())

    def prepare(self, data: TaskData, num_fewshot: int) -> list[PreparedDocument]:
        from_eval = "eval" in data.fewshot_pool
        sampler = FewshotSampler(
            self.name,
            data.fewshot_pool["eval" if from_eval else "fewshot"],
            exclude_self=True,
        )
        prepared = []
        for doc in data.documents:
            row = {key: doc.fields[key] for key in data_keys(doc.fields)}
            shots = "".join(
                partial_contexts(s)[gold(s)] + " " + continuation(s) + self.fewshot_delimiter
                for s in sampler.draw(num_fewshot, row)
            )
            requests = tuple(
                LoglikelihoodRequest(shots + context, " " + continuation(row))
                for context in partial_contexts(row)
            )
            # No chat form: lm-eval renders each option's context as its own conversation.
            prepared.append(PreparedDocument(doc, requests))
        return prepared

    def score(
        self, document: Document, responses: Sequence[LoglikelihoodResult] | Sequence[str]
    ) -> ScoredDocument:
        results = [r for r in responses if isinstance(r, LoglikelihoodResult)]
        lls = [r.logprob for r in results]
        options = self.choices(document.fields)
        answer = gold(document.fields)
        pred = first_argmax(lls)
        return ScoredDocument(
            target=options[answer],
            prediction=options[pred],
            metrics={"acc": float(pred == answer)},
            correct=pred == answer,
            details={
                "logprobs": lls,
                "is_greedy": [r.is_greedy for r in results],
                "gold": answer,
                "pred": pred,
            },
        )


def data_keys(fields: Row) -> list[str]:
    """The row's own keys (what lm-eval compares to leave a document out of its draw)."""
    return [key for key in fields if key != "question"]


def _local(path: Path) -> list[Row]:
    rows = read_jsonl(path, FIELDS)
    return [_checked(row, str(path), number) for number, row in enumerate(rows, 1)]


def _checked(row: Row, where: str, number: int) -> dict[str, Any]:
    try:
        sentence, answer = row["sentence"], row["answer"]
        if not isinstance(sentence, str) or "_" not in sentence:
            raise ValueError("'sentence' must hold the blank '_'")
        if answer not in ("1", "2"):
            raise ValueError(f'\'answer\' must be "1" or "2", found {answer!r}')
        if not isinstance(row["option1"], str) or not isinstance(row["option2"], str):
            raise ValueError("'option1' and 'option2' must be text")
    except (KeyError, TypeError, ValueError) as exc:
        raise DataError(f"{where}:{number}: unexpected WinoGrande row ({exc})") from exc
    return dict(row)
