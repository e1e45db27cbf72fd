"""Confinement applied to a freshly forked child before untrusted code runs.

The worker's namespaces, read-only root and cgroup are set up once when the
zygote starts (see ``jail``); what must differ per sample is applied here, in
the child, between ``fork`` and the first line of sample code (after a new
session and the closing of every descriptor above 0-3, which the zygote put
in place before the fork): resource limits, and finally the loss of every
privilege (capabilities, or the uid itself) followed by the seccomp filter.
The order matters: the filter forbids the calls made by the earlier steps.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
from typing import Any

from . import linux


class Confinement:
    """What a child does to itself before it runs code it does not trust.

    ``dumpable``: the zygote is not dumpable (nothing may read its memory); a
    sample may read its own /proc/self like any program, so it becomes
    dumpable again.
    """

    def __init__(
        self,
        *,
        rlimits: list[tuple[int, int, int]] | None = None,
        drop_capabilities: bool = False,
        switch_to: tuple[int, int] | None = None,
        seccomp: linux.SeccompProgram | None = None,
        no_new_privs: bool = True,
        oom_score_adj: int | None = 1000,
        cwd: str | None = "/",
        dumpable: bool = True,
        restore_sigint: bool = True,
    ) -> None:
        self.rlimits = rlimits or []
        self.drop_capabilities = drop_capabilities
        self.switch_to = switch_to  # (uid, gid) when there is no user namespace
        self.seccomp = seccomp
        self.no_new_privs = no_new_privs
        self.oom_score_adj = oom_score_adj
        self.cwd = cwd  # None: stay where the parent forked (it entered the place itself)
        self.dumpable = dumpable
        self.restore_sigint = restore_sigint


def apply(plan: Confinement) -> None:
    """Apply ``plan`` to the calling process; any failure aborts the child."""
    if plan.oom_score_adj is not None:
        with contextlib.suppress(OSError):  # without /proc the cgroup limit still applies
            linux.write_file("/proc/self/oom_score_adj", str(plan.oom_score_adj))
    if plan.cwd is not None:
        os.chdir(plan.cwd)
    for which, soft, hard in plan.rlimits:
        resource.setrlimit(which, (soft, hard))
    if plan.switch_to is not None:
        uid, gid = plan.switch_to
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
    if plan.drop_capabilities:
        linux.drop_all_capabilities()
    if plan.dumpable:  # after any uid change, which resets it
        linux.prctl(linux.PR_SET_DUMPABLE, 1)
    if plan.no_new_privs or plan.seccomp is not None:
        linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
    if plan.seccomp is not None:
        plan.seccomp.load()
    if plan.restore_sigint:
        # The zygote runs as pid 1 with SIGINT at its default (so that nothing
        # in the namespace can interrupt it); a Python program expects the
        # usual KeyboardInterrupt handler.
        signal.signal(signal.SIGINT, signal.default_int_handler)


def native_form(plan: Confinement) -> tuple[Any, ...]:
    """``plan`` as plain values for the C sample loop, which applies it (see ``_sampleloop.c``).

    Everything but ``cwd`` (the loop forks from the scratch space) and
    ``restore_sigint`` (a Python-level handler, set by the child's Python).
    """
    if plan.cwd is not None:
        raise ValueError("the C sample loop forks from the scratch space: no cwd")
    return (
        [(which, soft, hard) for which, soft, hard in plan.rlimits],
        plan.switch_to,
        plan.drop_capabilities,
        plan.dumpable,
        plan.no_new_privs,
        plan.seccomp.bpf if plan.seccomp is not None else None,
        plan.oom_score_adj,
    )


def rlimits_for(
    *,
    address_space: int,
    file_size: int,
    open_files: int,
    cpu_seconds: int,
    processes: int,
    open_files_hard: int | None = None,
) -> list[tuple[int, int, int]]:
    """The per-sample resource limits, as ``(resource, soft, hard)`` triples.

    The open files' hard limit is ``open_files_hard`` where this process may raise its
    own that far, else its own (never below the soft limit): a program may raise its
    soft limit as one process started here could.
    """
    hard = _raisable_open_files(max(open_files, open_files_hard or open_files))
    return [
        (resource.RLIMIT_AS, address_space, address_space),
        (resource.RLIMIT_FSIZE, file_size, file_size),
        (resource.RLIMIT_NOFILE, open_files, max(open_files, hard)),
        # SIGXCPU at the soft limit, SIGKILL one second later.
        (resource.RLIMIT_CPU, cpu_seconds, cpu_seconds + 1),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_NPROC, processes, processes),
    ]


def _raisable_open_files(wanted: int) -> int:
    """``wanted``, if this process's own RLIMIT_NOFILE hard limit is or can be made that
    high (root, within ``fs.nr_open``), else its own hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or wanted <= hard:
        return wanted
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, wanted))
    except (ValueError, OSError):
        return hard
    return wanted
