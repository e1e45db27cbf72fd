"""The few Linux system calls the sandbox needs that Python 3.11's ``os`` lacks.

This module runs inside the sandbox (it is loaded by the zygote before the
root is pivoted), so it uses only the standard library and the C library
through ctypes. Every wrapper raises ``OSError`` with the real errno, so the
caller can report exactly which isolation step failed on this machine.
"""

from __future__ import annotations

import ctypes
import mmap
import os

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

# Namespace flags (linux/sched.h).
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWCGROUP = 0x02000000

# Mount flags (linux/mount.h).
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000
MNT_DETACH = 0x2

# prctl options (linux/prctl.h).
PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2

# x86_64 / aarch64 syscall numbers for calls glibc does not wrap or wraps oddly.
_SYSCALLS = {
    "x86_64": {"pivot_root": 155, "capset": 126},
    "aarch64": {"pivot_root": 41, "capset": 91},
}
_MACHINE = os.uname().machine


def _fail(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{what}: {os.strerror(err)}")


def _syscall_number(name: str) -> int:
    try:
        return _SYSCALLS[_MACHINE][name]
    except KeyError:
        raise OSError(38, f"{name}: unsupported machine {_MACHINE}") from None


def unshare(flags: int) -> None:
    """Move the calling process into new namespaces (``unshare(2)``)."""
    if _libc.unshare(ctypes.c_int(flags)) != 0:
        raise _fail(f"unshare({flags:#x})")


def mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None
) -> None:
    """``mount(2)``; ``None`` stands for a NULL pointer."""

    def enc(value: str | None) -> bytes | None:
        return None if value is None else value.encode()

    if _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
        raise _fail(f"mount {target}")


def umount(target: str, flags: int = 0) -> None:
    """``umount2(2)``."""
    if _libc.umount2(target.encode(), ctypes.c_int(flags)) != 0:
        raise _fail(f"umount {target}")


def pivot_root(new_root: str, put_old: str) -> None:
    """``pivot_root(2)``: make ``new_root`` the root of this mount namespace."""
    number = _syscall_number("pivot_root")
    if _libc.syscall(ctypes.c_long(number), new_root.encode(), put_old.encode()) != 0:
        raise _fail("pivot_root")


def sethostname(name: str) -> None:
    raw = name.encode()
    if _libc.sethostname(raw, ctypes.c_size_t(len(raw))) != 0:
        raise _fail("sethostname")


# Every argument after the option is passed as unsigned long: the kernel
# rejects some options (no_new_privs) unless the unused ones are exactly zero.
# Declared once, so that a call (one per sample, in the sample's own process)
# converts its arguments in C instead of building five ctypes objects.
_libc.prctl.argtypes = [ctypes.c_int] + [ctypes.c_ulong] * 4
_libc.prctl.restype = ctypes.c_int


def _raw_prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    return int(_libc.prctl(option, arg2, arg3, 0, 0))


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    result = _raw_prctl(option, arg2, arg3)
    if result < 0:
        raise _fail(f"prctl({option})")
    return result


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


PR_SET_SECUREBITS = 28
# uid 0 gains nothing on execve (NOROOT), setuid changes do not touch the
# capability sets, no ambient capability can be raised; all of it locked.
_SECUREBITS_LOCKED_DOWN = 0b11111111 & ~0b00010000  # every bit and its lock, except KEEP_CAPS


def drop_all_capabilities() -> None:
    """Lose every capability for good, in three calls.

    A process that is root inside its user namespace keeps every capability
    there after ``fork``. Locked securebits stop a later ``execve`` (bash,
    node) from granting them back to uid 0 and forbid raising ambient ones;
    then the sets are emptied. Where securebits cannot be set, the bounding
    and ambient sets are emptied instead.
    """
    if _raw_prctl(PR_SET_SECUREBITS, _SECUREBITS_LOCKED_DOWN) != 0:
        cap = 0
        while _raw_prctl(PR_CAPBSET_DROP, cap) == 0:
            cap += 1  # stops at EINVAL: past the last capability this kernel knows
        _raw_prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    if (
        _libc.syscall(
            ctypes.c_long(_syscall_number("capset")), ctypes.byref(header), ctypes.byref(data)
        )
        != 0
    ):
        raise _fail("capset")


class SeccompProgram:
    """A compiled BPF filter kept in memory, loadable with one ``prctl``.

    The filter is compiled once by the trusted parent (through libseccomp) and
    handed to the zygote as bytes; each sample only pays for the load.
    """

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    def __init__(self, bpf: bytes) -> None:
        if not bpf or len(bpf) % 8:
            raise ValueError("a BPF program is a non-empty sequence of 8-byte instructions")
        self.bpf = bytes(bpf)
        self._buffer = ctypes.create_string_buffer(bpf, len(bpf))
        self._prog = self._Prog(len(bpf) // 8, ctypes.addressof(self._buffer))

    def load(self) -> None:
        """Install the filter on the calling thread; requires no_new_privs."""
        if _raw_prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(self._prog)) != 0:
            raise _fail("seccomp")


_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long,
]  # fmt: skip
_libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def lock_in_memory(fd: int, size: int) -> None:
    """Map the first ``size`` bytes of file ``fd`` read-only and lock them in memory
    (``mmap(2)``, ``mlock(2)``) for the rest of this process's life."""
    address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address in (None, _MAP_FAILED):
        raise _fail("mmap")
    if _libc.mlock(address, size) != 0:
        raise _fail("mlock")


def release_free_memory() -> None:
    """Give the C heap's free pages back to the kernel (``malloc_trim(0)``).

    Pages the zygote freed while importing stay mapped otherwise, and every
    fork copies (and every exit tears down) the page-table entries of all
    mapped memory.
    """
    _libc.malloc_trim(ctypes.c_size_t(0))


def write_file(path: str, text: str) -> None:
    """Write a small /proc or /sys control file in one ``write`` call."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
