"""The two kinds of question a task asks a model, and their answers.

These records are the only thing that crosses between tasks and backends:
a task never knows which backend answers, a backend never knows which task
asked. They mirror lm-evaluation-harness's ``loglikelihood`` and
``generate_until`` request types so that prompts and scores can match it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class LoglikelihoodRequest:
    """Log-probability of ``continuation`` following ``context``.

    As in lm-eval, word-boundary spaces belong to the continuation
    (context ``"Answer:"``, continuation ``" A"``).
    """

    context: str
    continuation: str

    kind = "loglikelihood"

    def key(self) -> str:
        return _digest([self.kind, self.context, self.continuation])


@dataclass(frozen=True)
class LoglikelihoodResult:
    logprob: float
    is_greedy: bool


@dataclass(frozen=True)
class GenerationRequest:
    """Greedy continuation of ``context`` until a stop string or ``max_gen_toks`` tokens."""

    context: str
    until: tuple[str, ...] = ()
    max_gen_toks: int = 256
    do_sample: bool = False
    temperature: float = 0.0
    sample_index: int = 0  # tells apart the n samples of one prompt (and seeds their sampling)
    extra: dict[str, object] = field(default_factory=dict, compare=False, hash=False)

    kind = "generate_until"

    def key(self) -> str:
        payload = asdict(self)
        return _digest([self.kind, json.dumps(payload, sort_keys=True, default=str)])


Request = LoglikelihoodRequest | GenerationRequest


def _digest(parts: list[str]) -> str:
    return hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()
