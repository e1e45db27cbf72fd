"""The one interface every model backend satisfies.

A backend answers the two kinds of request (log-likelihood and generation)
for one loaded checkpoint. It never knows which task asked; the engine
batches across a task's documents and the backend orders and batches as its
hardware likes, returning answers in request order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from evalsweep.requests import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult


@dataclass(frozen=True)
class BackendOptions:
    """User settings for a backend (``--device``, ``--dtype``, ``--batch-size``...)."""

    device: str = "auto"
    dtype: str = "auto"
    batch_size: int | None = None  # None: automatic, by token budget
    trust_remote_code: bool = False
    max_length: int | None = None  # vLLM: its max_model_len
    prefix_reuse: bool = True  # compute a shared few-shot prefix once per group
    # vLLM
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    gpu_memory_utilization: float | None = None  # GPU only; None: vLLM's default (0.92)
    kv_cache_space: float | None = None  # GiB of KV cache on vLLM's CPU build; None: it fits
    enforce_eager: bool = False  # no graph compilation: a faster start, slower steps
    # OpenAI-compatible server
    base_url: str | None = None
    model_name: str | None = None  # served model name (default: asked from /v1/models)
    api_key_env: str | None = None  # environment variable holding the API key
    concurrency: int = 8
    max_retries: int = 5
    timeout: float = 300.0


def backend_settings(
    backend: str,
    *,
    dtype: str,
    device_type: str,
    max_length: int | None,
    trust_remote_code: bool,
) -> dict[str, object]:
    """The settings that can change a backend's answers, in their one shape.

    A loaded backend's ``settings()`` (what it resolved) and the cache key
    (:func:`evalsweep.engine.backend_cache_key`, what the options ask for, before any model
    loads) both build them here, so the two always name the same fields.
    """
    return {
        "backend": backend,
        "dtype": dtype,
        "device_type": device_type,
        "max_length": max_length,
        "trust_remote_code": trust_remote_code,
    }


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
        """What the loaded backend chose that can change an answer (the dtype it resolved).

        Provenance, recorded with a run; not the cache key. The key is built before
        any model loads, from the options alone, in :mod:`evalsweep.engine._cache_key`.
        """
        ...

    def describe(self) -> Mapping[str, object]:
        """Provenance: settings plus what was chosen at run time (batch size, hardware)."""
        ...

    def close(self) -> None:
        """Release the model (and device memory) before the next checkpoint loads."""
        ...
