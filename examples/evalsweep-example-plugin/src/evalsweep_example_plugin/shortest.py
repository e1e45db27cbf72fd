"""The ``shortest`` backend: no model; every answer is the shortest continuation.

A backend is a class (or function) called as ``(checkpoint, options)`` whose objects
satisfy ``evalsweep.models.Backend``. This one is a baseline any checkpoint should beat
on a task whose right answers are not the short ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from evalsweep.models import BackendOptions, ProgressCallback, backend_settings
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult


class ShortestBackend:
    """No model: the shortest continuation wins (a baseline)."""

    name = "shortest"

    def __init__(self, checkpoint: Any, options: BackendOptions) -> None:
        self.reference = checkpoint.reference
        self.options = options

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], progress: ProgressCallback | None = None
    ) -> list[LoglikelihoodResult]:
        results = [LoglikelihoodResult(-float(len(r.continuation)), False) for r in requests]
        if progress is not None:
            progress(len(requests))
        return results

    def generate_until(
        self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None
    ) -> list[str]:
        if progress is not None:
            progress(len(requests))
        return ["" for _ in requests]

    def settings(self) -> Mapping[str, object]:
        return backend_settings(
            self.name,
            dtype="none",  # no weights
            device_type="cpu",
            max_length=None,
            trust_remote_code=self.options.trust_remote_code,
        )

    def describe(self) -> Mapping[str, object]:
        return {**self.settings(), "checkpoint": self.reference}

    def close(self) -> None:
        return None
