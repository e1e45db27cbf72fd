"""The cache key: when a stored answer may be given again instead of asking a model.

This is the product's promise never to mix models or settings up, so it is
built here and nowhere else. A stored row is found again only under the same

- checkpoint identity (what was evaluated: a content hash or a pinned revision,
  see :mod:`evalsweep.checkpoints`),
- backend key (:func:`backend_cache_key`): every backend option that can change an
  answer, known from the options alone, before any model is loaded,
- task name and task key (:func:`task_cache_key`): the task's version, its
  number of few-shot examples, its own settings (samples, temperature, a task
  file's content) and the chat-template options,
- document key, and the same request hash (the prompts themselves; a row whose
  requests differ is asked again).

Each :class:`~evalsweep.models.BackendOptions` field is classified in
``OPTION_ROLES``. A speed-only option must give exactly the answers of its
default (the "exact or not used" rule for fast paths), so it stays out of the
key and results computed with any value are reused. A new option that is not
classified fails the cache-key tests.

Keys of existing stores must not change: a change to what a key holds is a
store migration (:mod:`evalsweep.store._migrations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from evalsweep.dtypes import DTYPES
from evalsweep.models._base import backend_settings
from evalsweep.store import settings_key

if TYPE_CHECKING:
    from evalsweep.engine._chat import ChatOptions
    from evalsweep.engine._sweep import SweepSpec
    from evalsweep.tasks import Task

Role = Literal["answer", "speed", "source"]

#: Every :class:`~evalsweep.models.BackendOptions` field and what it does to an answer:
#: ``answer``: it can change one, so the backend key holds it;
#: ``speed``: only how fast answers come (or whether they come at all), never what they are;
#: ``source``: which server answers for the checkpoint; the checkpoint reference names
#: what is evaluated (its identity is in the key) and the server is recorded as provenance.
OPTION_ROLES: Mapping[str, Role] = {
    "device": "answer",  # its type (cpu, cuda) changes kernels; the index only places the model
    "dtype": "answer",
    "trust_remote_code": "answer",  # runs the checkpoint's own modelling code
    "max_length": "answer",  # truncates long contexts
    "batch_size": "speed",
    "prefix_reuse": "speed",
    "tensor_parallel_size": "speed",
    "data_parallel_size": "speed",
    "gpu_memory_utilization": "speed",
    "kv_cache_space": "speed",
    "enforce_eager": "speed",
    "concurrency": "speed",
    "max_retries": "speed",
    "timeout": "speed",
    "api_key_env": "speed",
    "base_url": "source",
    "model_name": "source",
}


#: Every :class:`~evalsweep.engine.SweepSpec` field and where it enters a stored row's address.
SPEC_ROLES: Mapping[str, str] = {
    "checkpoints": "checkpoint identity",
    "tasks": "task name and task key",
    "data_dir": "document key and request hash (the documents and prompts read)",
    "limit": "which documents are asked; each is keyed on its own",
    "num_fewshot": "task key",
    "backend": "backend key",
    "options": "backend key, field by field (OPTION_ROLES)",
    "chat": "task key (ChatOptions.settings)",
    "expect_identities": "none: a check that the checkpoints are the approved ones (their "
    "identities are the key)",
    "expect_work": "none: a check that the prompts are the approved ones (each request is "
    "keyed on its own)",
}


@dataclass(frozen=True)
class CacheKey:
    """One part of a stored answer's address: the settings and their short hash."""

    kind: Literal["backend", "task"]
    settings: Mapping[str, Any]

    @property
    def key(self) -> str:
        """The hash stored with each row (``backend:…`` or ``task:…``)."""
        return settings_key(self.kind, self.settings)


def backend_cache_key(spec: SweepSpec) -> CacheKey:
    """The backend settings that can change an answer, known without loading a model."""
    options = spec.options
    device = options.device
    if spec.backend == "openai":
        device = "remote"  # the server's hardware; its address is provenance, not key
    elif device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    return CacheKey(
        "backend",
        backend_settings(
            spec.backend,
            dtype=DTYPES.get(options.dtype, options.dtype),
            device_type=device.split(":")[0],
            max_length=options.max_length,
            trust_remote_code=options.trust_remote_code,
        ),
    )


def task_cache_key(task: Task, num_fewshot: int, chat: ChatOptions) -> CacheKey:
    """The task settings that can change an answer or its score."""
    settings = {"task": task.name, "version": task.version, "num_fewshot": num_fewshot}
    settings.update(task.extra_settings())
    settings.update(chat.settings())
    return CacheKey("task", settings)
