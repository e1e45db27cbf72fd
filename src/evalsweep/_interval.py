"""How often progress is reported: one setting for the terminal's plain lines and a job's log.

``EVALSWEEP_PROGRESS_INTERVAL`` (seconds, 0 or more) sets both; without it the plain lines
come every 10 s and an agent job writes its progress to the store and its log every 2 s.
Kept apart from ``evalsweep.report`` so that a job's supervisor reads it without importing
the reporting stack.
"""

from __future__ import annotations

import os

INTERVAL_ENV = "EVALSWEEP_PROGRESS_INTERVAL"


def progress_interval(default: float) -> float:
    """Seconds between progress reports: ``$EVALSWEEP_PROGRESS_INTERVAL``, else ``default``.

    A value that is not a number, or is negative, is ignored (progress is never worth an error).
    """
    raw = os.environ.get(INTERVAL_ENV, "")
    try:
        value = float(raw) if raw.strip() else default
    except ValueError:
        return default
    return value if value >= 0 and value == value and value != float("inf") else default
