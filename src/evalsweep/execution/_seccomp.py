"""The seccomp filter every sample and judge process runs under.

Built once in the trusted parent with the system's libseccomp (Debian package
``libseccomp2``, used through ctypes: no compiler, no PyPI package), exported
as raw BPF, and loaded in each child with a single ``prctl``. The policy is a
deny list on top of the namespaces: calls that reach kernel surface a sample
never needs (mounting, new namespaces, ptrace, BPF, keyrings, io_uring,
kernel modules, SysV IPC that would outlive the sample) fail with ``EPERM``;
sockets other than ``AF_UNIX`` fail; non-native system call ABIs kill the
process. The page cache outlives every run and is the machine's: the calls
that read which file pages it holds without a clock (``mincore``,
``cachestat``, ``preadv2`` with ``RWF_NOWAIT``) and those that evict pages
(``posix_fadvise`` ``DONTNEED``, ``madvise`` ``COLD``/``PAGEOUT``) fail with
``EPERM`` too (docs/sandbox.md, "State the whole machine shares").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import threading
from dataclasses import dataclass

_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_FILTER_ATTR_BAD_ARCH = 2  # SCMP_FLTATR_ACT_BADARCH
_CMP_NE = 1
_CMP_EQ = 4
_CMP_MASKED_EQ = 7
_AF_UNIX = 1

DENIED = (
    # new namespaces, mounts, root changes
    *("unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree"),
    *("fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr"),
    # other processes' memory, kernel objects and kernel attack surface
    *("ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp"),
    *("bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter"),
    *("io_uring_register", "keyctl", "add_key", "request_key"),
    # the machine itself
    *("kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot"),
    *("swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "syslog", "settimeofday"),
    *("clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname", "iopl"),
    *("ioperm", "vhangup", "name_to_handle_at", "open_by_handle_at", "fanotify_init"),
    *("lookup_dcookie", "uselib", "nfsservctl"),
    # SysV IPC and POSIX message queues: objects that would outlive the sample
    *("shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semctl"),
    *("msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend"),
    *("mq_timedreceive", "mq_notify", "mq_getsetattr"),
)
_NAMESPACE_FLAGS = (
    0x00020000,
    0x04000000,
    0x08000000,
    0x10000000,
    0x20000000,
    0x40000000,
    0x02000000,
)
_TIOCSTI = 0x5412
# The page cache (see the module docstring): readers without a clock, and evictors.
PAGE_CACHE_DENIED = ("mincore", "cachestat")
_RWF_NOWAIT = 0x00000008
_POSIX_FADV_DONTNEED = 4
_MADV_COLD, _MADV_PAGEOUT = 20, 21
# System calls newer than some libseccomp releases know by name; the same number on x86-64
# and arm64 (the shared table of new system calls).
_NUMBERS = {"cachestat": 451}


@dataclass(frozen=True)
class SeccompFilter:
    """A compiled filter, or why there is none on this machine."""

    bpf: bytes | None  # loaded once by the zygote
    detail: str
    sample_bpf: bytes | None = None  # added by every sample on top


class _ArgCmp(ctypes.Structure):
    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def _errno_action(number: int) -> int:
    return 0x00050000 | (number & 0xFFFF)


_cache: SeccompFilter | None = None
_lock = threading.Lock()
# The zygote mounts each sample's scratch tmpfs, so it runs under the main
# filter without these; each sample adds a second, tiny filter denying them.
SAMPLE_ONLY = ("mount", "umount2", "chroot")  # chroot: into the resident root of a split run


def build_filter() -> SeccompFilter:
    """Compile both filters (once per process); never raises."""
    global _cache
    with _lock:
        if _cache is None:
            try:
                main = _compile([name for name in DENIED if name not in SAMPLE_ONLY], policy=True)
                mounts = _compile(list(SAMPLE_ONLY), policy=False)
                detail = (
                    f"libseccomp deny list: {len(main) // 8} BPF instructions loaded once in the "
                    f"zygote, {len(mounts) // 8} more per sample"
                )
                _cache = SeccompFilter(main, detail, mounts)
            except OSError as error:
                _cache = SeccompFilter(None, str(error))
        return _cache


def _compile(denied: list[str], *, policy: bool) -> bytes:
    """One filter: ``denied`` fail with EPERM; with ``policy``, the argument rules too."""
    name = ctypes.util.find_library("seccomp")
    if name is None:
        raise OSError(2, "libseccomp not found (Debian: apt-get install libseccomp2)")
    lib = ctypes.CDLL(name, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    ]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]

    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        raise OSError(12, "seccomp_init failed")
    try:

        def rule(action: int, syscall: str, *cmps: tuple[int, int, int, int]) -> None:
            number = lib.seccomp_syscall_resolve_name(syscall.encode())
            if number < 0 and syscall in _NUMBERS and os.uname().machine in ("x86_64", "aarch64"):
                number = _NUMBERS[syscall]
            if number < 0:
                return  # not a system call on this architecture
            array = (_ArgCmp * max(1, len(cmps)))(*(_ArgCmp(*cmp) for cmp in cmps))
            result = lib.seccomp_rule_add_array(ctx, action, number, len(cmps), array)
            if result != 0:
                raise OSError(-result, f"seccomp rule for {syscall}: {os.strerror(-result)}")

        eperm = _errno_action(1)
        lib.seccomp_attr_set(ctx, _FILTER_ATTR_BAD_ARCH, _KILL_PROCESS)
        for syscall in denied:
            rule(eperm, syscall)
        if not policy:
            return _export(lib, ctx)
        # glibc's fork() is clone(): refuse only the namespace flags. clone3
        # takes its flags in memory the filter cannot read, so it reports
        # "not implemented" and glibc falls back to clone.
        for flag in _NAMESPACE_FLAGS:
            rule(eperm, "clone", (0, _CMP_MASKED_EQ, flag, flag))
        rule(_errno_action(38), "clone3")
        no_family = _errno_action(errno.EAFNOSUPPORT)  # read back by _sample_verdict as "network"
        rule(no_family, "socket", (0, _CMP_NE, _AF_UNIX, 0))
        rule(no_family, "socketpair", (0, _CMP_NE, _AF_UNIX, 0))
        rule(eperm, "ioctl", (1, _CMP_MASKED_EQ, 0xFFFFFFFF, _TIOCSTI))
        rule(eperm, "personality", (0, _CMP_NE, 0xFFFFFFFF, 0))
        for syscall in PAGE_CACHE_DENIED:
            rule(eperm, syscall)
        for syscall in ("preadv2", "pwritev2"):  # flags are the sixth argument
            rule(eperm, syscall, (5, _CMP_MASKED_EQ, _RWF_NOWAIT, _RWF_NOWAIT))
        rule(eperm, "fadvise64", (3, _CMP_EQ, _POSIX_FADV_DONTNEED, 0))
        for advice in (_MADV_COLD, _MADV_PAGEOUT):
            rule(eperm, "madvise", (2, _CMP_EQ, advice, 0))
        return _export(lib, ctx)
    finally:
        lib.seccomp_release(ctx)


def _export(lib: ctypes.CDLL, ctx: int) -> bytes:
    """The filter as raw BPF (libseccomp writes it to a file descriptor)."""
    read_end, write_end = os.pipe()
    try:
        result = lib.seccomp_export_bpf(ctx, write_end)
        os.close(write_end)
        write_end = -1
        if result != 0:
            raise OSError(-result, f"seccomp_export_bpf: {os.strerror(-result)}")
        chunks = []
        while chunk := os.read(read_end, 1 << 16):
            chunks.append(chunk)
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
    return b"".join(chunks)
