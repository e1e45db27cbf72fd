"""A worker's zygote: isolate once, then handle one request at a time.

Started by the parent (``Sandbox.start``): forked by the service's launcher
(``launcher``), or as ``python -S -s -B -P -c ...``, which imports this module
and calls :func:`main` with ``--control-fd N``; either way in an environment
the parent wrote entirely. The first message on the control socket is
the configuration; then this process (the "bootstrap") creates the worker's
namespaces and forks the zygote proper, which becomes pid 1 of its own pid
namespace, pivots into a read-only root, gives up its host identity, preloads
modules and reports which isolation layers hold. From then on it serves its
role (see ``sample_role`` and ``judge_role``):

* ``sample``: fork each sample's process, watch it, kill everything it left,
  report exit status, timing and output;
* ``judge``: run each sample's test code, talking to the sample's process over
  a socket the parent created, and report the outcome.

The two roles run in *different* sandboxes. The sample's zygote never holds a
test, an expected output or another sample's program, because a forked child
inherits its parent's whole memory.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import importlib
import os
import signal
import socket
import sys
from typing import Any, NoReturn

from . import jail, linux, sample
from .control import receive, send
from .exit_codes import SETUP_FAILED
from .judge_role import JudgeRole
from .sample_role import SampleRole, uses_native_loop

# --------------------------------------------------------------------------- start-up


class Zygote:
    """State of one isolated worker after start-up."""

    def __init__(self, ctl: socket.socket, config: dict[str, Any]) -> None:
        self.ctl = ctl
        self.config = config
        self.layers: dict[str, list[Any]] = {}
        self.namespaces = False
        self.userns = False
        self.privileged = os.geteuid() == 0
        self.host_uid = os.getuid()  # before any user namespace renames it
        self.switch_to: tuple[int, int] | None = None
        self.seccomp: linux.SeccompProgram | None = None
        self.sample_seccomp: linux.SeccompProgram | None = None
        self.two_ids = False  # samples get their own uid inside the user namespace
        self.pid_counter: int | None = None  # ns_last_pid, set before every fork
        # Where split runs find their root of memory-resident files (jail.build_resident_root).
        self.resident_root: str | None = None
        # Pipes to the bootstrap, which locks in memory the files this process maps.
        self._lock_channel: tuple[int, int] | None = None
        self._map_pipes: list[int] = []
        self._ask_for_map: Any = lambda: False
        # Descriptors 0-3 are the samples' (see SampleRole.run); this
        # process's own live above them. Between samples 0, 1 and 3 hold
        # /dev/null (so that no new descriptor lands there) and 2 the log the
        # parent gave us, kept in ``stderr`` to be put back after each fork.
        self.devnull = _above_stdio(os.open(os.devnull, os.O_RDWR))
        self.stderr = _above_stdio(os.dup(2))
        for fd in (0, 1, 3):
            os.dup2(self.devnull, fd)

    def import_path(self, limits: dict[str, Any]) -> list[str]:
        """What a sample, and the test judging it, import from (``Limits.installed_packages``):
        the interpreter's whole path, or a bare interpreter's (the standard library alone)."""
        return self.config["sys_path" if limits.get("installed_packages") else "stdlib_path"]

    def interpreter(self, limits: dict[str, Any]) -> tuple[str, str, str]:
        """``sys.executable``, ``sys.prefix`` and ``sys.exec_prefix`` of a sample and its test:
        this interpreter's (its virtual environment's) where installed packages are allowed,
        else the base interpreter's, whose children a program starts with ``sys.executable``
        as a bare Python's would."""
        key = "installed" if limits.get("installed_packages") else "bare"
        executable, prefix, exec_prefix = self.config["interpreter"][key]
        return executable, prefix, exec_prefix

    def restore_stdio(self) -> None:
        """After a fork: our own 1 and 2 again, and no copy of the sample's channel."""
        os.dup2(self.devnull, 1)
        os.dup2(self.stderr, 2)
        os.dup2(self.devnull, 3)

    def note(self, layer: str, active: bool, detail: str = "") -> None:
        self.layers[layer] = [active, detail]

    # -- bootstrap: namespaces, then fork the zygote as their init ------------------

    def bootstrap(self) -> None:
        config = self.config
        if config["unsafe"]:
            self._start_in_place("unsafe mode: no isolation requested")
            return
        if "namespaces" in config.get("disable", ()):
            self.note("user namespace", False, "disabled by the caller")
            self._start_in_place("disabled by the caller")
            return
        uid, gid = config["uid"], config["gid"]
        userns_error = jail.probe_user_namespace(uid, gid, self.privileged)
        self.userns = userns_error is None
        self.note("user namespace", self.userns, userns_error or "")
        try:
            if not self.privileged and not self.userns:
                raise OSError(1, "unprivileged and no user namespace")
            jail.unshare_worker(self.privileged)
            self.namespaces = True
        except OSError as error:
            self._start_in_place(f"namespaces unavailable: {error}")
            return
        release_read, release_write = os.pipe()
        ask_read, ask_write = os.pipe()
        answer_read, answer_write = os.pipe()
        files_read, files_write = os.pipe()  # the files the zygote maps, to lock
        locked_read, locked_write = os.pipe()  # what was locked
        host_proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY)  # before the pivot
        pid = os.fork()
        if pid:  # the bootstrap: report the zygote's host pid, then just wait
            for fd in (release_read, ask_write, answer_read, files_write, locked_read):
                os.close(fd)
            send(self.ctl, {"t": "spawned", "pid": pid})
            self.ctl.close()
            os.close(release_write)
            self._serve_map_request(host_proc, pid, ask_read, answer_write)
            _serve_lock_request(files_read, locked_write)
            _, status = os.waitpid(pid, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        for fd in (release_write, ask_read, answer_write, host_proc, files_read, locked_write):
            os.close(fd)
        self._lock_channel = (files_write, locked_read)
        os.read(release_read, 1)  # until the bootstrap has spoken
        os.close(release_read)
        self._ask_for_map = lambda: _ask(ask_write, answer_read)
        self._map_pipes = [ask_write, answer_read]  # closed by _ask, or before the lock request
        self._isolate()

    def _serve_map_request(self, host_proc: int, pid: int, ask: int, answer: int) -> None:
        """Bootstrap side: write the zygote's two-id map if it asks (we are still root)."""
        if os.read(ask, 1) != b"m" or not self.privileged:
            os.close(answer)
            return
        try:
            jail.write_two_id_maps(host_proc, pid, self.config["uid"], self.config["gid"])
            os.write(answer, b"y")
        except OSError:
            os.write(answer, b"n")
        for fd in (ask, answer, host_proc):
            os.close(fd)

    def _start_in_place(self, why: str) -> None:
        for layer in (
            "pid namespace",
            "network namespace",
            "mount namespace",
            "ipc namespace",
            "uts namespace",
        ):
            self.note(layer, False, why)
        self.note("read-only root", False, why)
        send(self.ctl, {"t": "spawned", "pid": os.getpid()})
        # Orphans of a sample reparent here, so they can be found and killed.
        linux.prctl(36, 1)  # PR_SET_CHILD_SUBREAPER
        if not self.config["unsafe"] and self.privileged:
            self.switch_to = (self.config["uid"], self.config["gid"])
        self._finish_setup()

    def _isolate(self) -> None:
        for layer in (
            "pid namespace",
            "network namespace",
            "mount namespace",
            "ipc namespace",
            "uts namespace",
        ):
            self.note(layer, True)
        sample_role = self.config.get("role") == "sample"
        missing = jail.build_root(self.config["root"], resident=sample_role)
        self.note(
            "read-only root", True, "tmpfs root, read-only binds of system and interpreter dirs"
        )
        if sample_role:
            plan = self.config["root"].get("resident")
            if missing is None and isinstance(plan, dict):
                self.resident_root = plan["path"]
                self.note(
                    "resident split root",
                    True,
                    f"split runs see only files in memory ({int(plan['bytes']) >> 20} MiB "
                    "tmpfs copy of the bare interpreter)",
                )
            else:
                self.note("resident split root", False, missing or "not built")
        linux.sethostname("sandbox")
        if self.privileged and self.userns:
            uid, gid = self.config["uid"], self.config["gid"]
            self.two_ids = jail.drop_to_user_namespace(uid, gid, self._ask_for_map)
            # The worker's pid namespace is host root's: one of our own, so
            # that the pid counter can be set before every run (open_pid_counter).
            jail.nest_pid_namespace(self.resident_root)
            detail = f"root inside is host uid {uid}"
            if self.two_ids:
                detail += f"; samples run as uid {jail.SAMPLE_ID} inside, host uid {uid + 1}"
            self.note("user namespace", True, detail)
        elif self.privileged:
            self.switch_to = (self.config["uid"], self.config["gid"])
        else:
            self.note("user namespace", True, f"root inside is host uid {self.host_uid}")
        self._finish_setup()

    def _finish_setup(self) -> None:
        config = self.config
        linux.prctl(linux.PR_SET_DUMPABLE, 0)  # nothing may read this process's memory
        if self.namespaces:  # our parent is the single-threaded bootstrap
            linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        if not (self.two_ids and config.get("role") == "sample"):
            # As a namespace's init, any handler would let the samples (same
            # uid) interrupt us; with two ids they cannot signal us at all.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(config["env"])
        sys.path[:] = config["sys_path"]
        if config.get("seccomp"):
            self.seccomp = linux.SeccompProgram(config["seccomp"])
            self.sample_seccomp = linux.SeccompProgram(config["seccomp_sample"])
        _site_builtins()
        preload = list(config["preload"])
        if self.switch_to is not None:
            # Samples run as another host uid, which may not be able to read
            # the interpreter's directory (a home dir): load what our own
            # error path needs while we still can.
            preload.append("traceback")
        for name in preload:
            with contextlib.suppress(BaseException):
                importlib.import_module(name)
        if config.get("role") == "sample" and self.namespaces:
            self.pid_counter = jail.open_pid_counter()
        if config.get("role") == "sample":
            # Only saves copied pages per sample: a failure here is no reason
            # to refuse samples.
            with contextlib.suppress(Exception):
                sample.rehearse()
                for _ in range(64):  # and the one system call through ctypes a sample makes
                    linux.prctl(linux.PR_GET_DUMPABLE)
        self._lock_mapped_files()
        # Everything loaded so far is shared with every forked child. Freezing
        # it keeps the children's garbage collector from walking (and so
        # copying) those pages; this is most of what makes a fork cheap.
        gc.collect()
        gc.freeze()
        linux.release_free_memory()
        self.note(
            "unprivileged identity",
            not config["unsafe"]
            and (self.userns or self.switch_to is not None or not self.privileged),
            self._identity(),
        )
        self.note(
            "scratch tmpfs",
            self.namespaces,
            "fresh tmpfs on /tmp per sample"
            if self.namespaces
            else "per-sample directory on the host disk",
        )
        self.note(
            "process-tree kill",
            os.getpid() == 1,
            "kill(-1) as the pid namespace's init"
            if os.getpid() == 1
            else "process groups of a child subreaper",
        )
        self.note(
            "same pid every run",
            self.pid_counter is not None,
            f"each run is forked as pid {jail.PID_AFTER + 1} of the worker's pid namespace"
            if self.pid_counter is not None
            else "pids are handed out in order: a run can read how many an earlier one spent",
        )
        self.note("seccomp", self.seccomp is not None and not config["unsafe"], "")
        if config.get("role") == "sample" and not config["unsafe"]:
            # Samples inherit this: the OOM killer of the worker's cgroup picks
            # the biggest process, which is the sample, never the bootstrap
            # (kept at -1000 by the parent).
            with contextlib.suppress(OSError):
                linux.write_file("/proc/self/oom_score_adj", "1000")
        if self.seccomp is not None and config.get("role") == "sample":
            # Inherited by every fork, so a sample only adds the small filter
            # for the mount calls this zygote itself still needs.
            linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
            self.seccomp.load()
        send(
            self.ctl,
            {
                "t": "ready",
                "layers": self.layers,
                "python": sys.version.split()[0],
                "loop": "C" if uses_native_loop(self) else "Python",
            },
        )

    def _lock_mapped_files(self) -> None:
        """Have the bootstrap lock in memory every file this process maps (see
        :func:`_serve_lock_request`); note what it did. Done once, before any sample."""
        channel, self._lock_channel = self._lock_channel, None
        if channel is None:
            return
        files_write, locked_read = channel
        # The bootstrap serves the map request first: where it was never asked, the end of
        # its pipe says so.
        for fd in self._map_pipes:
            with contextlib.suppress(OSError):
                os.close(fd)
        wanted = self.config.get("role") == "sample" and self.resident_root is not None
        try:
            with os.fdopen(files_write, "wb") as names:
                if wanted:  # the end of the names: the bootstrap's cue to lock them
                    names.write("\n".join(sorted(_mapped_files())).encode())
            answer = b""
            while chunk := os.read(locked_read, 4096):
                answer += chunk
        finally:
            os.close(locked_read)
        if wanted:
            text = answer.decode("utf-8", "replace")
            self.note("mapped files locked", text.startswith("locked"), text)

    def _identity(self) -> str:
        if self.config["unsafe"]:
            return "unsafe mode"
        if self.userns:
            return "root of a user namespace, no capabilities after fork"
        if self.switch_to is not None:
            return f"host uid {self.switch_to[0]}"
        return f"the caller's uid {os.getuid()}"

    # -- per request ----------------------------------------------------------------

    def serve(self) -> NoReturn:
        if self.config.get("role") == "sample":
            SampleRole(self).serve()
        judge = JudgeRole(self)
        judge.confine_self()
        while True:
            message, fds = receive(self.ctl)
            op = message["op"]
            if op == "judge":
                reply = judge.judge(message, fds)
            elif op == "test":
                reply = judge.add_test(message)
            else:
                os._exit(0)
            send(self.ctl, reply)


def _mapped_files() -> set[str]:
    """The files this process maps (the interpreter, its libraries, extension modules)."""
    paths: set[str] = set()
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].startswith("/"):
                paths.add(fields[5].rstrip("\n"))
    return paths


def _serve_lock_request(files: int, locked: int) -> None:
    """Bootstrap side: lock in memory every page of the files the zygote maps.

    A split run runs the zygote's code and faults in pages of the files it maps.
    Were one of them not in memory, a run could tell (by its major-fault count or a
    clock) whether an earlier run had read it, and pressure on memory (a run
    filling its cgroup) can evict any page merely cached. The bootstrap, still
    host root with ``CAP_IPC_LOCK``, maps each file and locks it (``mlock``) for
    the worker's life: every page is in memory and stays there. The zygote (in
    its user namespace) could not lock more than ``RLIMIT_MEMLOCK``.
    """
    data = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(files, 1 << 16):
            data += chunk
    os.close(files)
    total, failed = 0, ""
    for path in filter(None, data.decode("utf-8", "surrogateescape").split("\n")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue  # not a file of this tree (the zygote's own root): nothing to lock
        try:
            size = os.fstat(fd).st_size
            if size:
                linux.lock_in_memory(fd, size)
                total += size
        except OSError as error:
            failed = f"{path}: {error.strerror}"
            break
        finally:
            os.close(fd)
    answer = (
        f"not locked in memory: {failed}" if failed else f"locked {total >> 20} MiB of mapped files"
    )
    with contextlib.suppress(OSError):
        os.write(locked, answer.encode())
    os.close(locked)


def _above_stdio(fd: int) -> int:
    """``fd`` moved to the lowest free descriptor from 10 up."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def _ask(ask: int, answer: int) -> bool:
    """Zygote side: ask the bootstrap for the two-id map; True if it wrote it."""
    os.write(ask, b"m")
    granted = os.read(answer, 1) == b"y"
    return granted  # both pipes are closed before the lock request (_lock_mapped_files)


def main() -> NoReturn:
    """A zygote started as its own interpreter (``--control-fd N``)."""
    args = sys.argv[1:]
    serve_control(int(args[args.index("--control-fd") + 1]))


def serve_control(control_fd: int) -> NoReturn:
    """Be a zygote on ``control_fd``: started afresh, or forked by the launcher."""
    # No parent-death signal here: the parent is a thread of the caller's
    # process, and Linux sends it when that *thread* exits. The zygote notices
    # the caller's death as end-of-file on the control socket instead.
    ctl = socket.socket(fileno=_above_stdio(control_fd))
    config, _ = receive(ctl)
    zygote = Zygote(ctl, config)
    try:
        zygote.bootstrap()
    except BaseException as error:
        with contextlib.suppress(BaseException):
            send(
                ctl,
                {
                    "t": "fatal",
                    "error": f"{type(error).__name__}: {error}",
                    "layers": zygote.layers,
                },
            )
        os._exit(SETUP_FAILED)
    zygote.serve()


def _site_builtins() -> None:
    """What the ``site`` module adds to builtins in a plain ``python``: ``exit``, ``quit``,
    ``help``, ``copyright``, ``credits``, ``license``.

    Zygotes start with ``-S`` (no ``site``: it would put the user's directories on the
    import path), but programs and tests use these names as they would in any
    interpreter. Importing ``site`` explicitly under ``-S`` changes nothing else.
    """
    import site

    site.setquit()
    site.setcopyright()
    site.sethelper()
