"""Few-shot examples drawn exactly as lm-evaluation-harness draws them.

lm-eval's ``default`` sampler keeps one ``random.Random(1234)`` per task and
draws ``sample(pool, n)`` for each test document in document order, so a
document's examples depend on the documents before it (``--limit N`` keeps the
first N documents' prompts). When the few-shot pool is the split being
evaluated (its rule when a task has no training split), it draws ``n + 1``
and drops the document itself. ``first_n`` takes the pool's first n rows.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from evalsweep.errors import DataError

FEWSHOT_SEED = 1234

Row = Mapping[str, Any]


class FewshotSampler:
    """Draws each document's examples; call :meth:`draw` once per document, in order."""

    def __init__(
        self, task: str, pool: Sequence[Row], method: str = "default", exclude_self: bool = False
    ) -> None:
        if method not in ("default", "first_n"):
            raise DataError(f"{task}: unknown few-shot sampler {method!r} (default, first_n)")
        self.task = task
        self.pool = list(pool)
        self.method = method
        self.exclude_self = exclude_self
        self._rnd = random.Random(FEWSHOT_SEED)

    def draw(self, n: int, document: Row) -> list[Row]:
        if n == 0:
            return []
        available = len(self.pool) - (1 if self.exclude_self else 0)
        if n > available:
            raise DataError(
                f"{self.task}: {n}-shot needs {n} few-shot rows, the pool has {available}"
            )
        if self.method == "first_n":
            pool = [row for row in self.pool if row != document] if self.exclude_self else self.pool
            return list(pool[:n])
        if not self.exclude_self:
            return self._rnd.sample(self.pool, n)
        drawn = [row for row in self._rnd.sample(self.pool, n + 1) if row != document][:n]
        if len(drawn) < n:  # the pool holds copies of the document: lm-eval draws again
            drawn = self._rnd.sample([row for row in self.pool if row != document], n)
        return drawn
