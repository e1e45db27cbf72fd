"""Model backends behind one interface (:class:`Backend`).

``load_backend("hf", checkpoint, options)`` returns a backend ready to answer
requests: ``hf`` (transformers, in process), ``vllm`` (vLLM, in process) or
``openai`` (any OpenAI-compatible completions server). To add a backend,
write a module whose class satisfies :class:`Backend` (made as
``Class(checkpoint, options)``) and register it in ``BACKENDS`` below (one line);
an installed package adds its own through the entry point group
``evalsweep.backends`` (:mod:`evalsweep.plugins`, ``docs/extending.md``).
"""

from __future__ import annotations

from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.dtypes import DTYPE_CHOICES, DTYPES
from evalsweep.errors import BackendError
from evalsweep.models._base import (
    Backend,
    BackendOptions,
    ProgressCallback,
    backend_settings,
)
from evalsweep.plugins import Registry


def _vllm(checkpoint: ResolvedCheckpoint, options: BackendOptions) -> Backend:
    """vLLM in process: one engine, or ``--data-parallel-size`` replicas."""
    if options.data_parallel_size > 1:
        from evalsweep.models._vllm_replicas import VLLMReplicas

        return VLLMReplicas(checkpoint, options)
    from evalsweep.models.vllm import VLLMBackend

    return VLLMBackend(checkpoint, options)


#: Every backend by name: a class (or function) called as ``(checkpoint, options)``.
#: evalsweep's own, one line each (imported when first used); installed packages' through
#: the entry point group ``evalsweep.backends``.
BACKENDS = Registry("backend", "evalsweep.backends", BackendError)
BACKENDS.add("hf", "evalsweep.models.hf:HFBackend", "transformers, in process")
BACKENDS.add("vllm", _vllm, "vLLM, in process")
BACKENDS.add(
    "openai", "evalsweep.models.openai:OpenAIBackend", "an OpenAI-compatible server's /v1 API"
)


def load_backend(name: str, checkpoint: ResolvedCheckpoint, options: BackendOptions) -> Backend:
    """Load ``checkpoint`` on backend ``name``."""
    if name not in BACKENDS:
        raise BackendError(f"unknown backend {name!r} (known backends: {', '.join(BACKENDS)})")
    return BACKENDS.make(name, Backend, checkpoint, options)  # type: ignore[no-any-return]


__all__ = [
    "BACKENDS",
    "DTYPES",
    "DTYPE_CHOICES",
    "Backend",
    "BackendOptions",
    "ProgressCallback",
    "backend_settings",
    "load_backend",
]
