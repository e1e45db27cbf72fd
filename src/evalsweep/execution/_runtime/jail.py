"""One-time isolation of a worker: namespaces, a fresh read-only root, no identity.

A worker is set up once, when its zygote starts, so the expensive parts cost
nothing per sample:

* pid, network, IPC, UTS and mount namespaces (the network namespace has no
  interface up, so there is no network at all);
* a new root built on a small tmpfs from read-only bind mounts of the system
  and interpreter directories only: no home directory, no project files, no
  ``/sys``, no host ``/tmp``; then ``pivot_root`` so the host tree is gone;
* when started as root: the zygote drops to an unprivileged host uid and only
  then creates a user namespace, so "root" inside maps to nobody outside and
  every mount made above is locked read-only.

Each step is attempted separately and its outcome recorded, so the parent can
report exactly which layers hold on this machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from typing import Any

from . import linux

WORKER_NAMESPACES = (
    linux.CLONE_NEWNS
    | linux.CLONE_NEWPID
    | linux.CLONE_NEWNET
    | linux.CLONE_NEWIPC
    | linux.CLONE_NEWUTS
)
_STAGING_CANDIDATES = ("/mnt", "/media", "/srv", "/opt", "/run", "/tmp", "/var/tmp")


def probe_user_namespace(uid: int, gid: int, privileged: bool) -> str | None:
    """Try, in a throwaway child, what the zygote will do; return the error or None."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 0
        try:
            if privileged:
                os.setgroups([])
                os.setresgid(gid, gid, gid)
                os.setresuid(uid, uid, uid)
            linux.unshare(linux.CLONE_NEWUSER)
        except OSError as error:
            code = 100 + min(error.errno or 0, 100)
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else f"user namespace unavailable: {os.strerror(code - 100)}"


def unshare_worker(privileged: bool) -> None:
    """Enter the worker's namespaces; unprivileged callers need a user namespace first."""
    if privileged:
        linux.unshare(WORKER_NAMESPACES)
        return
    outer_uid, outer_gid = os.getuid(), os.getgid()
    linux.unshare(linux.CLONE_NEWUSER | WORKER_NAMESPACES)
    write_id_maps(outer_uid, outer_gid)


def write_id_maps(outer_uid: int, outer_gid: int) -> None:
    """Map uid/gid 0 inside the new user namespace to one id outside."""
    linux.write_file("/proc/self/setgroups", "deny")
    linux.write_file("/proc/self/uid_map", f"0 {outer_uid} 1")
    linux.write_file("/proc/self/gid_map", f"0 {outer_gid} 1")


def _staging_dir(spec: dict[str, Any]) -> str:
    sources = [bind["source"] for bind in spec["binds"]]
    for candidate in _STAGING_CANDIDATES:
        if not os.path.isdir(candidate) or os.path.islink(candidate):
            continue
        if any(os.path.commonpath([candidate, source]) == candidate for source in sources):
            continue
        return candidate
    raise OSError(2, "no directory to stage the sandbox root on")


def _preserved_flags(path: str) -> int:
    """Mount flags a remount must keep (the kernel refuses to clear locked ones)."""
    flags = os.statvfs(path).f_flag
    kept = 0
    for st_flag, ms_flag in (
        (os.ST_NOSUID, linux.MS_NOSUID),
        (os.ST_NODEV, linux.MS_NODEV),
        (os.ST_NOEXEC, linux.MS_NOEXEC),
        (os.ST_NOATIME, linux.MS_NOATIME),
        (os.ST_NODIRATIME, linux.MS_NODIRATIME),
        (os.ST_RELATIME, linux.MS_RELATIME),
    ):
        if flags & st_flag:
            kept |= ms_flag
    return kept


def _bind(source: str, target: str, read_only: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    linux.mount(source, target, None, linux.MS_BIND, None)
    if read_only:
        flags = linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | linux.MS_NOSUID
        linux.mount(None, target, None, flags | _preserved_flags(target), None)


# A run sees its own processes in /proc, never the zygote's: the zygote's
# /proc/1/stat counts what every reaped run did (their CPU time and page faults),
# which a run could otherwise read as a number an earlier run left there. The
# zygote is not dumpable (and, with two ids, another user), so it is invisible.
PROC_OPTIONS = "hidepid=invisible"


def mount_proc(target: str) -> None:
    """A proc instance of the calling process's pid namespace on ``target``."""
    flags = linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC
    linux.mount("proc", target, "proc", flags, PROC_OPTIONS)


def _lay_out(top: str, spec: dict[str, Any], devices_only: bool = False) -> None:
    """Under ``top``: ``spec``'s binds and links (with ``devices_only``, those under /dev
    alone, and its generated files only where nothing was copied), its directories, a
    world-writable /tmp and a proc instance of *this* pid namespace (the sample sees
    only its own worker's processes)."""
    for bind in spec["binds"]:
        if not devices_only or bind["source"].startswith("/dev/"):
            _bind(bind["source"], top + bind["target"], read_only=bind["read_only"])
    for path, target in spec["symlinks"].items():
        if not devices_only or path.startswith("/dev/"):
            os.makedirs(os.path.dirname(top + path), exist_ok=True)
            os.symlink(target, top + path)
    for path, text in spec["files"].items():
        if devices_only and os.path.lexists(top + path):
            continue  # copied there already (the resident root)
        os.makedirs(os.path.dirname(top + path), exist_ok=True)
        with open(top + path, "w") as handle:
            handle.write(text)
    for path in spec["dirs"]:
        os.makedirs(top + path, exist_ok=True)
    os.chmod(top + "/tmp", 0o1777)
    os.makedirs(top + "/proc", exist_ok=True)
    mount_proc(top + "/proc")


def build_resident_root(root: str, spec: dict[str, Any], resident: dict[str, Any]) -> None:
    """The split runs' root at ``root + resident["path"]``: a tmpfs holding copies.

    ``resident`` (``_rootfs.resident_root_spec``) lists the files, directories
    and links to copy, at the paths they have outside; the device binds, links
    and generated files of ``spec`` are added, as in the main root. The tmpfs
    is then made read-only. Nothing in it is on a disk, so its pages are always
    in memory: no run can tell which of them another run read.
    """
    import shutil

    top = root + resident["path"]
    os.makedirs(top)
    size = int(resident["bytes"]) + (16 << 20)
    inodes = len(resident["files"]) + len(resident["dirs"]) + len(resident["symlinks"]) + 4096
    options = f"size={size},nr_inodes={inodes},mode=0755"
    linux.mount("tmpfs", top, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, options)
    for path in resident["dirs"]:
        os.makedirs(top + path, exist_ok=True)
        os.chmod(top + path, os.stat(path).st_mode & 0o7777)
    for path, target in resident["symlinks"].items():
        os.makedirs(os.path.dirname(top + path), exist_ok=True)
        os.symlink(target, top + path)
    for path in resident["files"]:
        os.makedirs(os.path.dirname(top + path), exist_ok=True)
        shutil.copyfile(path, top + path)
        facts = os.stat(path)
        os.chmod(top + path, facts.st_mode & 0o7777)
        # Byte code is checked against its source's modification time.
        os.utime(top + path, ns=(facts.st_atime_ns, facts.st_mtime_ns))
    _lay_out(top, spec, devices_only=True)
    flags = linux.MS_REMOUNT | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV
    linux.mount(None, top, None, flags, None)


def build_root(spec: dict[str, Any], resident: bool = False) -> str | None:
    """Build the sandbox root described by ``spec`` and pivot into it.

    ``spec`` (computed by the parent) lists read-only binds, device binds,
    symlinks and small generated files. Must run inside the new mount and pid
    namespaces, as the process that will be the namespace's init. With
    ``resident``, the split runs' root is built too (:func:`build_resident_root`);
    returns why it could not be, or None.
    """
    linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE, None)
    root = _staging_dir(spec)
    linux.mount("tmpfs", root, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "size=4m,mode=0755")
    _lay_out(root, spec)
    missing: str | None = None
    plan = spec.get("resident")
    if resident and isinstance(plan, dict):
        try:
            build_resident_root(root, spec, plan)
        except OSError as error:
            missing = f"the resident root could not be built: {error}"
            with contextlib.suppress(OSError):
                linux.umount(root + plan["path"], linux.MNT_DETACH)
    elif resident:
        missing = str(plan)
    os.makedirs(root + "/.old-root")
    linux.pivot_root(root, root + "/.old-root")
    os.chdir("/")
    linux.umount("/.old-root", linux.MNT_DETACH)
    os.rmdir("/.old-root")
    flags = linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV
    linux.mount(None, "/", None, flags, None)
    return missing


SAMPLE_ID = 1  # the uid and gid samples run as, inside a two-id user namespace


def drop_to_user_namespace(uid: int, gid: int, ask_for_map: Callable[[], bool]) -> bool:
    """As root: become ``uid``/``gid`` on the host, then root of a new user namespace.

    The new mount namespace created with it is owned by that user namespace,
    which is what lets the zygote mount each sample's scratch tmpfs while every
    mount inherited from the build step stays locked. ``ask_for_map`` has the
    still-privileged bootstrap map two ids: 0 (the zygote) to ``uid`` and
    :data:`SAMPLE_ID` (every sample) to ``uid + 1``, so that a sample drops
    all capabilities just by changing uid and can neither signal nor trace
    its zygote. Returns False if only the one-id map could be written.
    """
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    # Changing uid made us non-dumpable, which would make /proc/self/uid_map
    # root-owned and unwritable by us.
    linux.prctl(linux.PR_SET_DUMPABLE, 1)
    linux.unshare(linux.CLONE_NEWUSER | linux.CLONE_NEWNS)
    if ask_for_map():
        return True
    write_id_maps(uid, gid)
    return False


def nest_pid_namespace(resident_root: str | None = None) -> None:
    """Become init of a pid namespace owned by our own user namespace, with its own /proc.

    After :func:`drop_to_user_namespace` the worker's pid namespace (made by host
    root) belongs to the host's user namespace, so this process may not set the
    number the next fork gets (``ns_last_pid``). Here the process forks once
    more into a pid namespace our user namespace owns; the child carries on as
    the zygote, and this process only waits for it and exits with its status
    (as the worker namespace's init, its end kills everything below it). The
    child mounts a proc of its own namespace over /proc, so that no pid of the
    outer namespace, whose counter every run would share, shows there.
    """
    linux.unshare(linux.CLONE_NEWPID)
    pid = os.fork()
    if pid:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        linux.prctl(linux.PR_SET_DUMPABLE, 0)
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        os.closerange(0, 1 << 20)
        try:
            while True:
                got, status = os.waitpid(-1, 0)
                if got == pid:
                    os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        except BaseException:
            os._exit(1)
    mount_proc("/proc")
    if resident_root is not None:
        mount_proc(resident_root + "/proc")


PID_AFTER = 1  # every run of a worker is forked as pid PID_AFTER + 1 of its namespace
PID_AFTER_TEXT = str(PID_AFTER).encode()  # what is written to ns_last_pid before each fork


def set_next_pid(counter: int) -> None:
    """Make the next fork of this pid namespace pid ``PID_AFTER + 1`` (``counter``:
    :func:`open_pid_counter`'s descriptor)."""
    os.pwrite(counter, PID_AFTER_TEXT, 0)


def open_pid_counter() -> int | None:
    """A descriptor of this pid namespace's ``ns_last_pid``, written before every fork.

    Then every run of a worker gets the same pid, and its threads and children
    the same numbers as in any other run: a run cannot leave a number behind
    for the next one to read. None where this process may not set it.
    """
    try:
        fd = os.open("/proc/sys/kernel/ns_last_pid", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        set_next_pid(fd)
    except OSError:
        os.close(fd)
        return None
    return fd


def write_two_id_maps(proc: int, pid: int, uid: int, gid: int) -> None:
    """From the bootstrap (host root): map ids 0 and 1 of ``pid``'s new user namespace.

    ``proc`` is a descriptor of the host's /proc, opened before the pivot.
    """
    for name, base in (("uid_map", uid), ("gid_map", gid)):
        fd = os.open(f"{pid}/{name}", os.O_WRONLY, dir_fd=proc)
        try:
            os.write(fd, f"0 {base} 1\n{SAMPLE_ID} {base + 1} 1\n".encode())
        finally:
            os.close(fd)


def mount_scratch(size_bytes: int, inodes: int, root: str = "") -> None:
    """A fresh, empty tmpfs on /tmp of ``root``: the only writable place a sample gets."""
    data = f"size={size_bytes},nr_inodes={inodes},mode=1777"
    linux.mount("tmpfs", root + "/tmp", "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, data)


def unmount_scratch(root: str = "") -> None:
    with contextlib.suppress(OSError):
        linux.umount(root + "/tmp", linux.MNT_DETACH)
