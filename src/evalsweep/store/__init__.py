"""Results in SQLite, and the provenance that says how they were made.

One row per (checkpoint identity, backend settings, task settings, document)
holds the requests, the model's raw responses and the score. The key
includes which model answered, so one store can serve many checkpoints
without ever handing one model's answers to another.
"""

from evalsweep.store._migrations import Component
from evalsweep.store._sqlite import (
    SCHEMA_VERSION,
    SampleRecord,
    ScoreRecord,
    Store,
    default_store_path,
)
from evalsweep.store.provenance import environment, settings_key

__all__ = [
    "SCHEMA_VERSION",
    "Component",
    "SampleRecord",
    "ScoreRecord",
    "Store",
    "default_store_path",
    "environment",
    "settings_key",
]
