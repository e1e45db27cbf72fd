"""The one interface every model backend satisfies.

A backend answers the two kinds of request (log-likelihood and generation)
for one loaded checkpoint. It never knows which task asked; the engine
batches across a task's documents and the backend orders and batches as its
hardware likes, returning answers in request order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from evalsweep.requests import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult

#: Called with the number of requests just finished, for progress bars.
ProgressCallback = Callable[[int], None]


@runtime_checkable
class Backend(Protocol):
    """A loaded checkpoint that answers requests."""

    name: str

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], progress: ProgressCallback | None = None
    ) -> list[LoglikelihoodResult]:
        """Log-probability of each continuation given its context, and whether it is greedy."""
        ...

    def generate_until(
        self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None
    ) -> list[str]:
        """Greedy generation for each request, cut at its first stop string."""
        ...

    def settings(self) -> Mapping[str, object]:
        """Everything about the backend that can change an answer (part of the cache key)."""
        ...

    def describe(self) -> Mapping[str, object]:
        """Provenance: settings plus what was chosen at run time (batch size, hardware)."""
        ...

    def close(self) -> None:
        """Release the model (and device memory) before the next checkpoint loads."""
        ...
