"""``compare``'s fast path gives the very numbers the plain path gave, verdict for verdict.

The store here is real SQLite filled through ``Store.write`` with rows whose scores are
drawn from a fixed seed: three checkpoints on MMLU (57 subjects of 12 to 420 questions,
so subject rows take both the bootstrap interval below 300 questions and the normal one
above; one subject holds fractional scores, which take the sign-flip test and the float
bootstrap) and on GSM8K (1,319 problems, two metrics). Three references:

* ``tests/data/documents/compare-before.json``: what ``evalsweep compare`` computed on
  this store before it read scores only (commit ``fa04cdd``; see the README there);
* the full rows (``stored_sweep`` without ``scores_only``), the path ``report`` takes;
* the plain bootstrap, ``diffs[indices].mean()``, for the integer shortcut.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalsweep.store import SampleRecord, Store

REFERENCES = ("ckpt-a", "ckpt-b", "ckpt-c")
BACKEND_KEY = "backend-identical-test"
SETTINGS = {"mmlu": "settings-mmlu-identical-test", "gsm8k": "settings-gsm8k-identical-test"}
GSM8K_METRICS = ("exact_match,strict-match", "exact_match,flexible-extract")
FRACTIONAL_SUBJECT = "virology"


def subject_sizes() -> dict[str, int]:
    from evalsweep.tasks.mmlu import CATEGORIES

    rng = random.Random(7)
    return {subject: rng.choice((12, 45, 90, 150, 260, 299, 300, 420)) for subject in CATEGORIES}


def build_store(path: Path) -> None:
    """Fill ``path`` with the seeded rows (the same every time: the golden file depends on it)."""
    rng = random.Random(2024)
    with Store(path) as store:
        store.remember_key(BACKEND_KEY, "backend", {"backend": "hf", "dtype": "float32"})
        for task, key in SETTINGS.items():
            store.remember_key(key, "task", {"task": task, "num_fewshot": 0, "version": "test"})
        for index, reference in enumerate(REFERENCES):
            identity = f"imported:{reference}"
            store.remember_reference(
                reference,
                {"reference": reference, "kind": "imported", "location": reference,
                 "revision": None, "identity": identity, "commit": None, "base": None},
            )  # fmt: skip
            skill = (0.5, 0.58, 0.42)[index]  # b gains, c loses
            rows = []
            for subject, size in subject_sizes().items():
                for doc_id in range(size):
                    if subject == FRACTIONAL_SUBJECT:
                        value = round(rng.random(), 3)
                    else:
                        value = float(rng.random() < skill)
                    rows.append(_row(identity, "mmlu", f"{subject}/{doc_id}", doc_id, subject,
                                     {"acc": value}))  # fmt: skip
            for doc_id in range(1319):
                strict = float(rng.random() < skill - 0.2)
                flexible = max(strict, float(rng.random() < skill - 0.1))
                metrics = dict(zip(GSM8K_METRICS, (strict, flexible), strict=True))
                rows.append(_row(identity, "gsm8k", str(doc_id), doc_id, None, metrics))
            store.write(rows)


def _row(
    identity: str, task: str, key: str, doc_id: int, subject: str | None, metrics: dict
) -> SampleRecord:
    correct = bool(next(iter(metrics.values())) == 1.0)
    return SampleRecord(
        checkpoint=identity, backend=BACKEND_KEY, task=task, settings=SETTINGS[task],
        doc_key=key, doc_id=doc_id, subject=subject, request_hash=f"hash-{task}-{key}",
        requests=[{"context": "Question: ...", "continuation": " A"}], responses=[[-1.0, True]],
        target="A", prediction="A" if correct else "B", correct=correct, response=None,
        metrics=metrics, details={}, document={"question": f"question {key}"},
    )  # fmt: skip


def computed(store_path: Path, *, scores_only: bool) -> dict[str, Any]:
    """What ``compare`` shows: the comparisons and the result rows, as plain JSON values."""
    from evalsweep.comparison import compare_results
    from evalsweep.engine import stored_sweep

    with Store(store_path) as store:
        kwargs = {"scores_only": True} if scores_only else {}
        result = stored_sweep(store, list(REFERENCES), ["mmlu", "gsm8k"], None, **kwargs)
    results = [
        [item.checkpoint.reference, item.task, a.metric, a.level, a.group, a.value, a.stderr, a.n]
        for item in result.results
        for a in item.aggregates
    ]
    comparisons = [c.to_dict() for c in compare_results(result)]
    return json.loads(json.dumps({"results": results, "comparisons": comparisons}))


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("identical") / "store.sqlite"
    build_store(path)
    return path


def test_compare_gives_the_numbers_and_verdicts_it_gave_before(
    store_path: Path, data_dir: Path
) -> None:
    before = json.loads((data_dir / "documents" / "compare-before.json").read_text())
    now = computed(store_path, scores_only=True)
    assert len(now["comparisons"]) == len(before["comparisons"]) == 2 * (57 + 3)
    assert {c["verdict"] for c in now["comparisons"]} == {
        "improvement",
        "regression",
        "no significant change",
    }
    # The paired test each row used is recorded now (McNemar for rows of 0/1 scores; this
    # store's MMLU virology rows hold other scores, hence sign-flip there and in the MMLU
    # headline); everything the document held before is the same.
    tests = {(c["task"], c["subject"]): c.pop("test") for c in now["comparisons"]}
    assert {k for k, v in tests.items() if v != "mcnemar-exact"} == {
        ("mmlu", None),
        ("mmlu", "virology"),
    }
    assert set(tests.values()) == {"mcnemar-exact", "sign-flip-monte-carlo"}
    assert now == before  # every float bit for bit, every verdict


def test_scores_only_reads_what_the_full_rows_give(store_path: Path) -> None:
    assert computed(store_path, scores_only=True) == computed(store_path, scores_only=False)


def test_flips_refuse_a_scores_only_read(store_path: Path) -> None:
    from evalsweep.comparison import find_flips
    from evalsweep.engine import stored_sweep
    from evalsweep.errors import ComparisonError

    with Store(store_path) as store:
        light = stored_sweep(store, list(REFERENCES[:2]), ["gsm8k"], scores_only=True)
        full = stored_sweep(store, list(REFERENCES[:2]), ["gsm8k"])
    with pytest.raises(ComparisonError, match="full"):
        find_flips(light, REFERENCES[0], REFERENCES[1])
    assert find_flips(full, REFERENCES[0], REFERENCES[1])  # the full rows still give them


@pytest.mark.parametrize("n", [1, 7, 120, 299])
@pytest.mark.parametrize("kind", ["binary", "fractional", "binary-with-halves"])
def test_the_bootstrap_interval_is_the_plain_one(n: int, kind: str) -> None:
    from evalsweep.stats._paired import _CHUNK_CELLS, _bootstrap_ci

    rng = np.random.default_rng(n)
    a = rng.integers(0, 2, n).astype(float)
    b = rng.integers(0, 2, n).astype(float)
    if kind == "fractional":
        b = rng.random(n)
    elif kind == "binary-with-halves":
        b[::3] = 0.5
    diffs = b - a
    for seed in (0, 3):
        for resamples in (1, 999, 10_000):
            plain_rng = np.random.default_rng(seed)
            rows = max(1, _CHUNK_CELLS // n)
            means = np.empty(resamples)
            for start in range(0, resamples, rows):
                count = min(rows, resamples - start)
                picked = plain_rng.integers(0, n, size=(count, n))
                means[start : start + count] = diffs[picked].mean(axis=1)
            tail = (1.0 - 0.95) / 2.0
            low, high = np.quantile(means, [tail, 1.0 - tail])
            found = _bootstrap_ci(diffs, confidence=0.95, resamples=resamples, seed=seed)
            assert found == (float(low), float(high))


def test_compare_reads_scores_from_the_index_alone(store_path: Path) -> None:
    """Every query the scores-only read makes is answered by a covering index."""
    from evalsweep.engine import stored_sweep

    with Store(store_path) as store:
        conn = store.connection
        seen: list[str] = []
        conn.set_trace_callback(seen.append)
        try:
            stored_sweep(store, list(REFERENCES), ["mmlu", "gsm8k"], scores_only=True)
        finally:
            conn.set_trace_callback(None)
        reads = [q for q in seen if "FROM samples" in q and "doc_key, doc_id" in q]
        assert len(reads) == 2 * len(REFERENCES)
        for query in reads:
            plan = " ".join(str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + query))
            assert "COVERING INDEX samples_scores" in plan, plan
