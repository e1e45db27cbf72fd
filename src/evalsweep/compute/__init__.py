"""Where the work runs: this machine, an SSH host, a cloud GPU, a Ray cluster.

A :class:`Target` says what it is, what it costs per hour and runs sweeps;
``local`` (this machine, free) always exists, others come from the
``[targets.NAME]`` tables of the person's configuration.
"""

from evalsweep.compute._base import LocalTarget, Target, TargetInfo, load_targets

__all__ = ["LocalTarget", "Target", "TargetInfo", "load_targets"]
