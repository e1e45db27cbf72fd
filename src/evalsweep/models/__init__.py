"""Model backends behind one interface (:class:`Backend`).

``load_backend("hf", checkpoint, options)`` returns a backend ready to answer
requests. To add a backend (vLLM, an OpenAI-compatible server), write a
module whose class satisfies :class:`Backend` and register its loader here.
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
    max_length: int | None = None
    prefix_reuse: bool = True  # compute a shared few-shot prefix once per group


BACKENDS = ("hf",)


def load_backend(name: str, checkpoint: ResolvedCheckpoint, options: BackendOptions) -> Backend:
    """Load ``checkpoint`` on backend ``name``."""
    if name == "hf":
        from evalsweep.models.hf import HFBackend

        return HFBackend(checkpoint, options)
    raise BackendError(f"unknown backend {name!r} (known backends: {', '.join(BACKENDS)})")


__all__ = ["BACKENDS", "Backend", "BackendOptions", "ProgressCallback", "load_backend"]
