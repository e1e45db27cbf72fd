"""User-facing failures.

Every error a user can cause (a bad reference, a missing data file, an unknown
task) is raised as an :class:`EvalsweepError` subclass with a one-line message
that names what and where. The CLI catches them once and prints that line;
anything else is a bug and keeps its traceback.
"""


class EvalsweepError(Exception):
    """Base class: a failure the user can act on, shown as one line."""

    exit_code = 2


class CheckpointError(EvalsweepError):
    """A checkpoint reference cannot be resolved or loaded."""


class DataError(EvalsweepError):
    """A benchmark data file is missing or malformed."""


class TaskError(EvalsweepError):
    """An unknown task or an invalid task setting."""


class BackendError(EvalsweepError):
    """The model backend failed in a way the user can fix (device, memory, dtype)."""


class StoreError(EvalsweepError):
    """The results store cannot be opened or is inconsistent with the request."""


class ComparisonError(EvalsweepError):
    """Results cannot be compared (different settings, missing baseline)."""


class ConfigError(EvalsweepError):
    """The person's configuration file is missing a value or malformed."""


class TargetError(EvalsweepError):
    """A compute target is unknown, unreachable or refused the work."""
