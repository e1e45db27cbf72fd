"""The engine: turns a sweep spec into stored, scored documents.

``run_sweep`` resolves references, builds prompts, loads each checkpoint once,
asks its backend only for what the store lacks, and commits scores chunk by
chunk so interrupted sweeps resume.
"""

from evalsweep.engine._cache_key import OPTION_ROLES, CacheKey, backend_cache_key, task_cache_key
from evalsweep.engine._chat import ChatOptions
from evalsweep.engine._stored import stored_sweep
from evalsweep.engine._sweep import (
    CheckpointTaskResult,
    Progress,
    SilentProgress,
    SweepResult,
    SweepSpec,
    TaskRun,
    backend_settings,
    plan_sweep,
    run_sweep,
    work_digest,
)
from evalsweep.engine._sweep import _request_hash as request_hash

__all__ = [
    "OPTION_ROLES",
    "CacheKey",
    "backend_cache_key",
    "task_cache_key",
    "ChatOptions",
    "CheckpointTaskResult",
    "Progress",
    "SilentProgress",
    "SweepResult",
    "SweepSpec",
    "TaskRun",
    "backend_settings",
    "plan_sweep",
    "work_digest",
    "request_hash",
    "run_sweep",
    "stored_sweep",
]
