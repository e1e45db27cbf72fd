"""Model backends behind one interface (:class:`Backend`).

``load_backend("hf", checkpoint, options)`` returns a backend ready to answer
requests: ``hf`` (transformers, in process), ``vllm`` (vLLM, in process) or
``openai`` (any OpenAI-compatible completions server). To add a backend,
write a module whose class satisfies :class:`Backend` and register its
loader here.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.errors import BackendError
from evalsweep.models._base import Backend, ProgressCallback


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
    gpu_memory_utilization: float | None = None  # None: vLLM's default (0.9)
    enforce_eager: bool = False  # no graph compilation: a faster start, slower steps
    # OpenAI-compatible server
    base_url: str | None = None
    model_name: str | None = None  # served model name (default: asked from /v1/models)
    api_key_env: str | None = None  # environment variable holding the API key
    concurrency: int = 8
    max_retries: int = 5
    timeout: float = 300.0


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


__all__ = ["BACKENDS", "Backend", "BackendOptions", "ProgressCallback", "load_backend"]
