"""What the sandbox's root file system, environment and import path contain.

Computed in the parent, which knows where this interpreter and its packages
live, and sent to the zygote as data. The root holds read-only binds of the
system directories and of the interpreter, a handful of generated files, and
the device nodes a program expects. The import path is the interpreter's own
(:func:`sys_path`); a sample whose limits do not allow installed packages gets
only its standard library part (:func:`standard_library_path`). It holds no
home directory, no ``/sys``, no ``/run``, no host ``/tmp`` and none of the
project's files; the interpreter's ``site`` step is skipped, so ``.pth`` hooks
(editable installs) do not run.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from typing import Any

from evalsweep.execution._runtime.jail import SAMPLE_ID

_TOP_LEVEL = ("/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
# The user samples run as has an entry (``pwd.getpwuid(os.getuid())`` works, as it does for
# the user of a plain process); its name is the sandbox's ``USER``.
_FILES = {
    "/etc/passwd": (
        "root:x:0:0:root:/tmp:/bin/sh\n"
        f"sandbox:x:{SAMPLE_ID}:{SAMPLE_ID}:sandbox:/tmp:/bin/sh\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    ),
    "/etc/group": f"root:x:0:\nsandbox:x:{SAMPLE_ID}:\nnogroup:x:65534:\n",
    "/etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "/etc/hostname": "sandbox\n",
    "/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    "/etc/resolv.conf": "",
}
_SYMLINKS = {
    "/dev/fd": "/proc/self/fd",
    "/dev/stdin": "/proc/self/fd/0",
    "/dev/stdout": "/proc/self/fd/1",
    "/dev/stderr": "/proc/self/fd/2",
    "/dev/shm": "/tmp",
}

# The environment a program runs in. No ``PYTHON*`` variable: the interpreter reads some of
# them while a program runs (``PYTHONBREAKPOINT`` at every ``breakpoint()``,
# ``PYTHONASYNCIODEBUG`` when asyncio starts), where the one process the contract names
# (``python -I``) ignores them all. The zygotes' own start-up settings (the hash seed) are
# given to them alone (``_sandbox.zygote_environment``) and cleared before a program runs.
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "USER": "sandbox",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}


def _covered(path: str, roots: Iterable[str]) -> bool:
    return any(os.path.commonpath([path, root]) == root for root in roots)


def interpreter_identity() -> dict[str, list[str]]:
    """``sys.executable``, ``sys.prefix`` and ``sys.exec_prefix`` as a program sees them: with
    installed packages, this interpreter's (its virtual environment's, if any); bare, those of
    the interpreter outside any virtual environment (the venv's ``home``)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    if not os.path.isfile(base):
        base = sys.executable
    return {
        "installed": [sys.executable, sys.prefix, sys.exec_prefix],
        "bare": [base, sys.base_prefix, sys.base_exec_prefix],
    }


def interpreter_dirs() -> list[str]:
    """Directories this interpreter needs: its prefixes and package dirs."""
    paths = sysconfig.get_paths()
    candidates = [sys.base_prefix, sys.prefix, paths["purelib"], paths["platlib"], paths["stdlib"]]
    candidates.append(os.path.dirname(os.path.realpath(sys.executable)))
    dirs: list[str] = []
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if os.path.isdir(real) and not _covered(real, dirs):
            dirs = [d for d in dirs if not _covered(d, [real])] + [real]
    return dirs


def sys_path() -> list[str]:
    """The import path inside the sandbox: what this interpreter imports from.

    Entries of ``sys.path`` inside the interpreter's prefixes (the standard
    library, the virtual environment's and, if it uses them, the system's
    site-packages) in their order; never the project's source or the current
    directory, which ``.pth`` files and the caller's working dir add.
    """
    paths = sysconfig.get_paths()
    prefixes = [os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)]
    chosen: list[str] = []
    for entry in [*sys.path, paths["purelib"], paths["platlib"]]:
        real = os.path.realpath(entry) if entry else ""
        if real and _covered(real, prefixes) and real not in chosen and os.path.isdir(real):
            chosen.append(real)
    return chosen


SCRATCH = "/tmp"  # every run's scratch space: a fresh tmpfs mounted over it


def hidden_by_scratch(path: list[str]) -> list[str]:
    """The entries of ``path`` under :data:`SCRATCH`, which every run's fresh scratch tmpfs
    covers: an environment installed there cannot be imported from inside the sandbox."""
    return [entry for entry in path if _covered(entry, [SCRATCH])]


def standard_library_path(path: list[str]) -> list[str]:
    """The entries of ``path`` (see :func:`sys_path`) that are not package directories.

    What a bare interpreter of this Python imports from: the standard library and its
    extension modules, without any site-packages (the environment's, the system's or the
    user's).
    """
    import site

    paths = sysconfig.get_paths()
    sites = {paths["purelib"], paths["platlib"], *site.getsitepackages()}
    with contextlib.suppress(Exception):
        sites.add(site.getusersitepackages())
    roots = [os.path.realpath(p) for p in sites if p]
    return [entry for entry in path if not _covered(entry, roots)]


def root_spec(extra_read_only: Iterable[str] = ()) -> dict[str, Any]:
    """The sandbox root as binds, symlinks, files and directories."""
    binds: list[dict[str, Any]] = []
    symlinks = dict(_SYMLINKS)
    bound: list[str] = []
    for top in _TOP_LEVEL:
        if os.path.islink(top):
            symlinks[top] = os.readlink(top)
        elif os.path.isdir(top):
            binds.append({"source": top, "target": top, "read_only": True})
            bound.append(top)
    for path in [*interpreter_dirs(), *(os.path.realpath(p) for p in extra_read_only)]:
        if os.path.exists(path) and not _covered(path, bound):
            binds.append({"source": path, "target": path, "read_only": True})
            bound.append(path)
    if os.path.exists("/etc/ld.so.cache"):
        binds.append(
            {"source": "/etc/ld.so.cache", "target": "/etc/ld.so.cache", "read_only": True}
        )
    if os.path.isdir("/etc/alternatives"):
        binds.append(
            {"source": "/etc/alternatives", "target": "/etc/alternatives", "read_only": True}
        )
    if os.path.islink("/etc/localtime"):
        symlinks["/etc/localtime"] = os.readlink("/etc/localtime")
    for device in _DEVICES:
        if os.path.exists(device):
            binds.append({"source": device, "target": device, "read_only": False})
    return {"binds": binds, "symlinks": symlinks, "files": dict(_FILES), "dirs": ["/tmp", "/dev"]}


# Where each worker keeps its resident root (see :func:`resident_root_spec`), inside its root.
RESIDENT_ROOT = "/.resident"
# Parts of the standard library no judged program imports, left out of the resident root
# (they weigh 180 MB here): the regression test suite, IDLE, the turtle demos, ensurepip's
# wheels, the static library and build files, and the site-packages directory.
_RESIDENT_SKIPPED = ("test", "idlelib", "turtledemo", "ensurepip", "site-packages")
_RESIDENT_SKIPPED_PREFIXES = ("config-",)
# Data files of the system a standard-library module reads: time zones and the C.UTF-8 locale.
_RESIDENT_DATA = ("/usr/share/zoneinfo", "/usr/lib/locale/C.utf8", "/usr/lib/locale/C.UTF-8")


class _Tree:
    """Paths to copy, with every symbolic link met on the way kept as a link."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self.dirs: list[str] = []
        self.symlinks: dict[str, str] = {}
        self.bytes = 0
        self._seen: set[str] = set()

    def add(self, path: str, depth: int = 0) -> None:
        """``path`` as a program names it: each link in it (any component) and what it names."""
        path = os.path.normpath(os.path.abspath(path))
        if path in self._seen or depth > 40:
            return
        self._seen.add(path)
        parts = path.split("/")[1:]
        for end in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:end])
            if os.path.islink(prefix):
                target = os.readlink(prefix)
                self.symlinks[prefix] = target
                resolved = os.path.join(os.path.dirname(prefix), target)
                self.add(os.path.join(resolved, *parts[end:]), depth + 1)
                return
        if os.path.isdir(path):
            self.dirs.append(path)
        elif os.path.isfile(path):
            self.files.append(path)
            self.bytes += os.path.getsize(path)

    def add_tree(
        self, top: str, skipped: tuple[str, ...] = (), prefixes: tuple[str, ...] = ()
    ) -> None:
        self.add(top)
        real = os.path.realpath(top)
        tag = f".{sys.implementation.cache_tag}.pyc"
        for directory, subdirs, names in os.walk(real):
            if directory == real:
                subdirs[:] = [d for d in subdirs if d not in skipped and not d.startswith(prefixes)]
            for name in subdirs:
                self.add(os.path.join(directory, name))
            in_cache = os.path.basename(directory) == "__pycache__"
            for name in names:
                if in_cache and not name.endswith(tag):
                    continue  # optimised (-O, -OO) and other interpreters' byte code
                self.add(os.path.join(directory, name))


def _shared_libraries(paths: list[str]) -> list[str]:
    """The shared libraries ``paths`` load (the dynamic loader's own answer, by ``ldd``)."""
    found: list[str] = []
    ldd = shutil.which("ldd", path="/usr/bin:/bin")
    if ldd is None:
        raise OSError(2, "ldd not found (Debian: libc-bin)")
    output = subprocess.run(
        [ldd, *paths], capture_output=True, text=True, check=False, timeout=120
    ).stdout
    for line in output.splitlines():
        line = line.strip()
        if "=>" in line:
            target = line.split("=>", 1)[1].split()
            if target and target[0].startswith("/"):
                found.append(target[0])
        elif line.startswith("/") and "(0x" in line:
            found.append(line.split()[0])
    return sorted(set(found))


@functools.lru_cache(maxsize=1)
def resident_root_spec() -> dict[str, Any] | str:
    """What a split run's root holds (or why there is none): copies, made in memory.

    A judged sample's split run never holds the test, so it must learn nothing a
    plain run left behind; the page cache of the disk is such a place (which
    pages of which files are in memory). A split run therefore sees no file on a
    disk: its root is a tmpfs holding a copy of the bare interpreter (the
    executable, its standard library with byte code, the shared libraries those
    load), time zones and the C.UTF-8 locale, at the paths they have outside.
    Memory-resident pages can be neither added nor evicted, so their state says
    nothing. Computed once per process.
    """
    tree = _Tree()
    identity = interpreter_identity()["bare"]
    tree.add(identity[0])
    path = standard_library_path(sys_path())
    for entry in path:
        tree.add_tree(entry, _RESIDENT_SKIPPED, _RESIDENT_SKIPPED_PREFIXES)
    for data in _RESIDENT_DATA:
        if os.path.exists(data):
            tree.add_tree(data)
    binaries = [file for file in tree.files if file.endswith(".so") or os.access(file, os.X_OK)]
    try:
        for library in _shared_libraries(binaries):
            tree.add(library)
    except (OSError, subprocess.SubprocessError) as error:
        return f"the shared libraries of the interpreter are unknown: {error}"
    for name in ("/etc/ld.so.cache", "/etc/localtime", *_TOP_LEVEL):
        if os.path.islink(name) or os.path.isfile(name):
            tree.add(name)
    # The dynamic loader, by the name executables give it (PT_INTERP).
    for loader in glob.glob("/lib*/ld-linux*.so*"):
        tree.add(loader)
    return {
        "files": tree.files,
        "dirs": tree.dirs,
        "symlinks": tree.symlinks,
        "bytes": tree.bytes,
        "path": RESIDENT_ROOT,
    }


def interpreter_for(language: str) -> list[str] | None:
    """The command that runs a program file in ``language``, if installed."""
    if language == "javascript":
        found = shutil.which("node") or shutil.which("nodejs")
        return [os.path.realpath(found)] if found else None
    if language == "bash":
        found = shutil.which("bash")
        return [os.path.realpath(found)] if found else None
    return None
