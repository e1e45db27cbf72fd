"""Per-worker cgroups: a memory ceiling, a process-count ceiling, an OOM counter.

One cgroup per sandbox (a worker runs one sample at a time, so the sample's
limits are the sandbox's limits plus the zygote's small overhead). Created as
a child of the cgroup this process already belongs to, so the samples stay
inside whatever the caller's own limits are. cgroup v2 is used where its
memory and pids controllers can be enabled; otherwise the v1 ``memory`` and
``pids`` hierarchies (on the reference machine the v2 mount carries only
``hugetlb``). A controller that cannot be written is reported missing.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
from dataclasses import dataclass, field

_ROOT = "/sys/fs/cgroup"
_counter = itertools.count()


@dataclass(frozen=True)
class CgroupSupport:
    """Which controllers this machine lets us use, and where."""

    memory: str | None  # "v1" / "v2" / None
    pids: str | None
    detail: dict[str, str] = field(default_factory=dict)


def _own_path(controller: str) -> str | None:
    """This process's cgroup path in a v1 controller ('' for v2 lines)."""
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            _, names, path = line.rstrip("\n").split(":", 2)
            if controller in names.split(","):
                return path
    return None


def _v2_mount() -> str | None:
    with open("/proc/self/mounts") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) > 2 and parts[2] == "cgroup2":
                return parts[1]
    return None


def _v2_parent() -> str | None:
    mount = _v2_mount()
    if mount is None:
        return None
    with open("/proc/self/cgroup") as handle:
        for line in handle:
            if line.startswith("0::"):
                return os.path.join(mount, line.rstrip("\n")[3:].lstrip("/"))
    return None


def _writable_dir(path: str) -> bool:
    probe = os.path.join(path, f"evalsweep-probe-{os.getpid()}-{next(_counter)}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    with contextlib.suppress(OSError):
        os.rmdir(probe)
    return True


def _v1_parent(controller: str) -> str | None:
    path = _own_path(controller)
    base = os.path.join(_ROOT, controller)
    if path is None or not os.path.isdir(base):
        return None
    parent = os.path.join(base, path.lstrip("/"))
    return parent if os.path.isdir(parent) and _writable_dir(parent) else None


def _v2_controllers(parent: str) -> set[str]:
    try:
        with open(os.path.join(parent, "cgroup.subtree_control")) as handle:
            enabled = set(handle.read().split())
        if {"memory", "pids"} <= enabled:
            return enabled
        # Try to delegate them to our children; this fails (EBUSY) when the
        # parent itself holds processes, the "no internal processes" rule.
        with open(os.path.join(parent, "cgroup.controllers")) as handle:
            available = set(handle.read().split())
        wanted = {"memory", "pids"} & available
        if wanted:
            with open(os.path.join(parent, "cgroup.subtree_control"), "w") as handle:
                handle.write(" ".join(f"+{name}" for name in sorted(wanted)))
        with open(os.path.join(parent, "cgroup.subtree_control")) as handle:
            return set(handle.read().split())
    except OSError:
        return set()


def detect() -> CgroupSupport:
    """Find writable memory and pids controllers (v2 first, then v1)."""
    detail: dict[str, str] = {}
    memory = pids = None
    v2 = _v2_parent()
    enabled = _v2_controllers(v2) if v2 and _writable_dir(v2) else set()
    if "memory" in enabled:
        memory = "v2"
    if "pids" in enabled:
        pids = "v2"
    if memory is None and _v1_parent("memory"):
        memory = "v1"
    if pids is None and _v1_parent("pids"):
        pids = "v1"
    for name, found in (("memory", memory), ("pids", pids)):
        detail[name] = f"cgroup {found}" if found else "no writable controller"
    return CgroupSupport(memory, pids, detail)


class WorkerCgroup:
    """The cgroup(s) one sandbox runs in; removed when the sandbox is gone."""

    def __init__(self, support: CgroupSupport, name: str, memory_bytes: int, max_pids: int) -> None:
        self._dirs: dict[str, str] = {}
        self._oom_file: str | None = None
        self._oom_fd: int | None = None
        for controller, version in (("memory", support.memory), ("pids", support.pids)):
            if version is None:
                continue
            parent = _v2_parent() if version == "v2" else _v1_parent(controller)
            if parent is None:
                continue
            path = os.path.join(parent, name)
            if path not in self._dirs.values():
                os.makedirs(path, exist_ok=True)
            self._dirs[controller] = path
            if controller == "memory":
                if version == "v2":
                    _write(path, "memory.max", str(memory_bytes))
                    _write(path, "memory.swap.max", "0", missing_ok=True)
                    _write(path, "memory.oom.group", "0", missing_ok=True)
                    self._oom_file = os.path.join(path, "memory.events")
                else:
                    _write(path, "memory.limit_in_bytes", str(memory_bytes))
                    _write(path, "memory.memsw.limit_in_bytes", str(memory_bytes), missing_ok=True)
                    self._oom_file = os.path.join(path, "memory.oom_control")
            else:
                _write(path, "pids.max", str(max_pids))

    def add(self, pid: int) -> None:
        for path in set(self._dirs.values()):
            _write(path, "cgroup.procs", str(pid))

    def oom_kills(self) -> int:
        """How many processes the kernel has OOM-killed in this cgroup so far.

        Read after every sample, so the file stays open and is re-read in place.
        """
        if self._oom_file is None:
            return 0
        try:
            if self._oom_fd is None:
                self._oom_fd = os.open(self._oom_file, os.O_RDONLY)
            text = os.pread(self._oom_fd, 4096, 0)
        except OSError:
            return 0
        match = re.search(rb"^oom_kill (\d+)$", text, re.MULTILINE)
        return int(match.group(1)) if match else 0

    def remove(self) -> None:
        if self._oom_fd is not None:
            os.close(self._oom_fd)
            self._oom_fd = None
        for path in set(self._dirs.values()):
            _remove(path)
        self._dirs.clear()


def _remove(path: str, patience: float = 5.0) -> None:
    """Remove a cgroup once its last process has gone (a sandbox's bootstrap exits only
    after its zygote, unlocking the files it held in memory): a cgroup left behind would
    be found, with other limits, by a later service of this process under the same name."""
    import time

    deadline = time.monotonic() + patience
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() >= deadline:
                return
            time.sleep(0.02)


def remove_stale() -> None:
    """Remove empty cgroups left by evalsweep processes that no longer exist."""
    for controller in ("memory", "pids"):
        parent = _v1_parent(controller)
        for base in filter(None, (parent, _v2_parent())):
            with contextlib.suppress(OSError):
                for entry in os.listdir(base):
                    match = re.match(r"evalsweep-(\d+)-", entry)
                    if match and not os.path.exists(f"/proc/{match.group(1)}"):
                        with contextlib.suppress(OSError):
                            os.rmdir(os.path.join(base, entry))


def _write(directory: str, name: str, value: str, *, missing_ok: bool = False) -> None:
    try:
        with open(os.path.join(directory, name), "w") as handle:
            handle.write(value)
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError:
        if not missing_ok:
            raise
