"""Model backends behind one interface (:class:`Backend`).

``load_backend("hf", checkpoint, options)`` returns a backend ready to answer
requests: ``hf`` (transformers, in process), ``vllm`` (vLLM, in process) or
``openai`` (any OpenAI-compatible completions server). To add a backend,
write a module whose class satisfies :class:`Backend` and register its
loader here.
"""

from __future__ import annotations

from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.errors import BackendError
from evalsweep.models._base import DTYPES, Backend, BackendOptions, ProgressCallback

BACKENDS = ("hf", "vllm", "openai")


def load_backend(name: str, checkpoint: ResolvedCheckpoint, options: BackendOptions) -> Backend:
    """Load ``checkpoint`` on backend ``name``."""
    if name == "hf":
        from evalsweep.models.hf import HFBackend

        return HFBackend(checkpoint, options)
    if name == "vllm":
        from evalsweep.models.vllm import VLLMBackend

        if options.data_parallel_size > 1:
            from evalsweep.models._vllm_replicas import VLLMReplicas

            return VLLMReplicas(checkpoint, options)

        return VLLMBackend(checkpoint, options)
    if name == "openai":
        from evalsweep.models.openai import OpenAIBackend

        return OpenAIBackend(checkpoint, options)
    raise BackendError(f"unknown backend {name!r} (known backends: {', '.join(BACKENDS)})")


__all__ = [
    "BACKENDS",
    "DTYPES",
    "Backend",
    "BackendOptions",
    "ProgressCallback",
    "load_backend",
]
