"""A worker's zygote: isolate once, then fork one confined child per request.

Started by the parent as ``python -S -s -B -P zygote.py --control-fd N`` with
an environment it wrote entirely. The first message on the control socket is the
configuration; then this process (the "bootstrap") creates the worker's
namespaces and forks the zygote proper, which becomes pid 1 of its own pid
namespace, pivots into a read-only root, gives up its host identity, preloads
modules and reports which isolation layers hold. From then on it handles one
request at a time:

* role ``sample``: fork the sample's process (program mode or function mode),
  watch it, kill everything it left, report exit status, timing and output;
* role ``judge``: fork a judge for one sample, which runs the test code against
  the sample's process over a socket the parent created, and report its result.

The two roles run in *different* sandboxes. The sample's zygote never holds a
test, an expected output or another sample's program, because a forked child
inherits its parent's whole memory.

Wire format, parent to zygote: an 8-byte header (marshal length, number of
file descriptors passed with it), the marshal'd message, then the raw bytes
the message announces. Zygote to parent: a 4-byte length and a JSON object.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import marshal
import os
import resource
import signal
import socket
import struct
import sys
import time
from typing import Any, NoReturn

if __name__ == "__main__":  # loaded by path: make the sibling modules importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from _runtime import confine, jail, judge, linux, sample, supervise, wire  # type: ignore[import-not-found]

    del sys.path[0]
else:
    from . import confine, jail, judge, linux, sample, supervise, wire

_HEADER = struct.Struct(">II")
SETUP_FAILED = 125
_MAX_FDS = 16


# --------------------------------------------------------------------------- control channel


def receive(ctl: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One message from the parent and the descriptors sent with it (EOF: exit)."""
    raw, fds, _flags, _addr = socket.recv_fds(ctl, _HEADER.size, _MAX_FDS)
    if not raw:
        os._exit(0)  # the parent is gone or done
    while len(raw) < _HEADER.size:
        more = ctl.recv(_HEADER.size - len(raw))
        if not more:
            os._exit(0)
        raw += more
    size, _count = _HEADER.unpack(raw)
    message = marshal.loads(_recv_exact(ctl, size))
    return message, fds


def _recv_exact(ctl: socket.socket, size: int) -> bytes:
    data = bytearray(size)
    view = memoryview(data)
    while view:
        got = ctl.recv_into(view)
        if not got:
            os._exit(0)
        view = view[got:]
    return bytes(data)


def _recv_into(ctl: socket.socket, buffer: bytearray, size: int) -> None:
    """Read ``size`` raw bytes into the reusable buffer (no other copy is made)."""
    if len(buffer) < size:
        buffer.extend(bytes(size - len(buffer)))
    view = memoryview(buffer)[:size]
    while view:
        got = ctl.recv_into(view)
        if not got:
            os._exit(0)
        view = view[got:]


def send(ctl: socket.socket, obj: dict[str, Any]) -> None:
    ctl.sendall(_frame(obj))


def _frame(obj: dict[str, Any]) -> bytes:
    payload = wire.dump_json(obj)
    return struct.pack(">I", len(payload)) + payload


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
        self.switch_to: tuple[int, int] | None = None
        self.seccomp: linux.SeccompProgram | None = None
        self.sample_seccomp: linux.SeccompProgram | None = None
        self.plans: dict[tuple[Any, ...], confine.Confinement] = {}
        self.two_ids = False  # samples get their own uid inside the user namespace
        self._ask_for_map: Any = lambda: False
        self.tests: dict[str, dict[str, Any]] = {}
        self.buffer = bytearray()
        self.scratch_dir: str | None = None
        self.devnull = os.open(os.devnull, os.O_RDWR)

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
        host_proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY)  # before the pivot
        pid = os.fork()
        if pid:  # the bootstrap: report the zygote's host pid, then just wait
            for fd in (release_read, ask_write, answer_read):
                os.close(fd)
            send(self.ctl, {"t": "spawned", "pid": pid})
            self.ctl.close()
            os.close(release_write)
            self._serve_map_request(host_proc, pid, ask_read, answer_write)
            _, status = os.waitpid(pid, 0)
            os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
        for fd in (release_write, ask_read, answer_write, host_proc):
            os.close(fd)
        os.read(release_read, 1)  # until the bootstrap has spoken
        os.close(release_read)
        self._ask_for_map = lambda: _ask(ask_write, answer_read)
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
        jail.build_root(self.config["root"])
        self.note(
            "read-only root", True, "tmpfs root, read-only binds of system and interpreter dirs"
        )
        linux.sethostname("sandbox")
        if self.privileged and self.userns:
            uid, gid = self.config["uid"], self.config["gid"]
            self.two_ids = jail.drop_to_user_namespace(uid, gid, self._ask_for_map)
            detail = f"root inside is host uid {uid}"
            if self.two_ids:
                detail += f"; samples run as uid {jail.SAMPLE_ID} inside, host uid {uid + 1}"
            self.note("user namespace", True, detail)
        elif self.privileged:
            self.switch_to = (self.config["uid"], self.config["gid"])
        else:
            self.note("user namespace", True, f"root inside is host uid {os.getuid()}")
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
        preload = list(config["preload"])
        if self.switch_to is not None:
            # Samples run as another host uid, which may not be able to read
            # the interpreter's directory (a home dir): load what our own
            # error path needs while we still can.
            preload.append("traceback")
        for name in preload:
            with contextlib.suppress(BaseException):
                importlib.import_module(name)
        # Everything loaded so far is shared with every forked child. Freezing
        # it keeps the children's garbage collector from walking (and so
        # copying) those pages; this is most of what makes a fork cheap.
        gc.collect()
        gc.freeze()
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
        send(self.ctl, {"t": "ready", "layers": self.layers, "python": sys.version.split()[0]})

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
        while True:
            message, fds = receive(self.ctl)
            op = message["op"]
            if op == "run":
                reply = self.run_sample(message, fds)
            elif op == "judge":
                reply = self.run_judge(message, fds)
            elif op == "test":
                reply = self.add_test(message)
            elif op == "ping":
                reply = {"t": "pong"}
            else:
                os._exit(0)
            send(self.ctl, reply)
            if reply.get("unclean"):
                os._exit(3)  # something survived SIGKILL: let the parent replace us

    def _plan(self, limits: dict[str, Any], cwd: str) -> confine.Confinement:
        """The child's confinement, built before the fork (cached per limits)."""
        if not self.namespaces:  # a new scratch directory every time: nothing to reuse
            return self._new_plan(limits, cwd)
        key = (cwd, *sorted(limits.items()))
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = self._new_plan(limits, cwd)
        return plan

    def _new_plan(self, limits: dict[str, Any], cwd: str) -> confine.Confinement:
        if self.config["unsafe"]:
            return confine.Confinement(no_new_privs=False, oom_score_adj=None, cwd=cwd)
        # The sample zygote already runs with no_new_privs and the main filter.
        inherited = self.seccomp is not None and self.config.get("role") == "sample"
        if self.two_ids and self.config.get("role") == "sample":
            # Changing to the sample uid drops every capability (and with them
            # any use for the small mount filter); the zygote's SIGINT handler
            # is harmless because this uid cannot signal it.
            return confine.Confinement(
                rlimits=confine.rlimits_for(
                    address_space=limits["address_space"],
                    file_size=limits["file_size"],
                    open_files=limits["open_files"],
                    cpu_seconds=limits["cpu_seconds"],
                    processes=limits["processes"],
                ),
                switch_to=(jail.SAMPLE_ID, jail.SAMPLE_ID),
                seccomp=None if inherited else self.seccomp,
                no_new_privs=not inherited,
                oom_score_adj=None if inherited else 1000,
                restore_sigint=False,
                cwd=cwd,
            )
        return confine.Confinement(
            rlimits=confine.rlimits_for(
                address_space=limits["address_space"],
                file_size=limits["file_size"],
                open_files=limits["open_files"],
                cpu_seconds=limits["cpu_seconds"],
                processes=limits["processes"],
            ),
            drop_capabilities=self.userns or (self.namespaces and not self.privileged),
            switch_to=self.switch_to,
            seccomp=self.sample_seccomp if inherited else self.seccomp,
            no_new_privs=not inherited,
            oom_score_adj=None if inherited else 1000,
            cwd=cwd,
        )

    def _new_scratch(self, limits: dict[str, Any]) -> str:
        if self.namespaces:
            jail.mount_scratch(limits["scratch"], limits["scratch_inodes"])
            return "/tmp"
        import tempfile  # only without namespaces: not worth a slot in every fork

        path = tempfile.mkdtemp(prefix="evalsweep-scratch-")
        if self.switch_to is not None:
            os.chown(path, *self.switch_to)
        self.scratch_dir = path
        return path

    def _drop_scratch(self) -> None:
        if self.namespaces:
            jail.unmount_scratch()
        elif self.scratch_dir is not None:
            import shutil

            shutil.rmtree(self.scratch_dir, ignore_errors=True)
            self.scratch_dir = None

    def run_sample(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Fork, confine and watch one sample; everything it started dies after."""
        limits = message["limits"]
        program_size, stdin_size = message["program_size"], message["stdin_size"]
        _recv_into(self.ctl, self.buffer, program_size + stdin_size)
        rpc_fd = fds[0] if fds else None
        scratch = self._new_scratch(limits)
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        plan = self._plan(limits, scratch)  # built here: the child should do little
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            self._become_sample(message, plan, rpc_fd, out_write, err_write)
        # Hot path from here: keep no copy of the program, watch, kill, reap.
        self.buffer[: program_size + stdin_size] = bytes(program_size + stdin_size)
        for fd in (out_write, err_write, *fds):
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        streams = {"stdout": out_read, "stderr": err_read}
        seen = supervise.watch(
            pid,
            pidfd,
            streams,
            started=started,
            timeout=message["timeout"],
            output_limit=limits["output_limit"],
            keep=limits["output_keep"],
        )
        clean = supervise.reap_everything(pid, pid, seen)
        supervise.drain_after(streams, seen, limits["output_limit"])
        for fd in (pidfd, out_read, err_read):
            os.close(fd)
        self._drop_scratch()
        return _facts_of(message["id"], seen, clean)

    def _become_sample(
        self,
        message: dict[str, Any],
        plan: confine.Confinement,
        rpc_fd: int | None,
        out_write: int,
        err_write: int,
    ) -> NoReturn:
        scratch = plan.cwd
        try:
            os.setsid()
            program_size, stdin_size = message["program_size"], message["stdin_size"]
            source = bytes(self.buffer[:program_size]).decode("utf-8", "surrogatepass")
            stdin_fd = self.devnull
            if stdin_size:
                path = os.path.join(scratch, ".stdin")
                with open(path, "wb") as handle:
                    handle.write(self.buffer[program_size : program_size + stdin_size])
                stdin_fd = os.open(path, os.O_RDONLY)
                os.unlink(path)
            del self.buffer[:]
            argv = None
            if message["language"] != "python":
                path = os.path.join(scratch, message["file_name"])
                with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
                    handle.write(source)
                argv = [*message["interpreter"], path]
            layout = {0: stdin_fd, 1: out_write, 2: err_write}
            if rpc_fd is not None:
                layout[3] = rpc_fd
            confine.arrange_fds(layout)
            confine.apply(plan)
        except BaseException as error:
            with contextlib.suppress(BaseException):
                os.write(2, f"evalsweep: sandbox setup failed: {error!r}\n".encode())
            os._exit(SETUP_FAILED)
        if argv is not None:
            sample.exec_interpreter(argv, dict(os.environ))
        if message["mode"] == "function":
            sample.serve_functions(source, 3, message["limits"]["max_frame"], message["announce"])
        sample.run_script(source)

    def add_test(self, message: dict[str, Any]) -> dict[str, Any]:
        """Compile a test once; every judge forked later inherits the code objects."""
        try:
            prelude = message["prelude"]
            spec = {
                "prelude": None
                if prelude is None
                else compile(prelude, "<prompt>", "exec", dont_inherit=True),
                "test": compile(message["test"], "<test>", "exec", dont_inherit=True),
                "entry_point": message["entry_point"],
                "sample_names": tuple(message.get("sample_names", ())),
            }
        except (SyntaxError, ValueError) as error:
            return {"t": "test_error", "key": message["key"], "msg": str(error)[:500]}
        self.tests[message["key"]] = spec
        return {"t": "test_ok", "key": message["key"]}

    def run_judge(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Judge one sample in this process, under a wall-clock alarm.

        The judge runs only the benchmark's own test code on plain data, so it
        is not forked per sample (a fork costs more than most HumanEval tests);
        a fresh namespace per sample keeps tests apart, and the parent replaces
        this sandbox if it ever stops answering.
        """
        reply: dict[str, Any] = {"t": "result", "id": message["id"], "timed_out": False}
        spec = self.tests.get(message["key"])
        if spec is None:
            for fd in fds:
                os.close(fd)
            reply["report"] = {
                "outcome": "error",
                "origin": "test",
                "msg": "the test code does not compile",
            }
            return reply
        channel = judge.SampleChannel(fds[0], message["limits"]["max_frame"])
        started = time.monotonic()
        try:
            with judge.deadline(message["timeout"]):
                reply["report"] = judge.judge(spec, channel)
        except judge.JudgeTimeout:
            reply["timed_out"] = True
            reply["report"] = None
        finally:
            os.close(fds[0])  # the sample sees end-of-file and exits
        reply["wall"] = round(time.monotonic() - started, 6)
        return reply

    def confine_judge(self) -> None:
        """The judge zygote needs no privilege after start-up: drop it for good."""
        if self.config["unsafe"]:
            return
        plan = self._new_plan(self.config["judge_limits"], "/")
        plan.oom_score_adj = None
        plan.dumpable = False
        plan.rlimits = [limit for limit in plan.rlimits if limit[0] != resource.RLIMIT_CPU]
        confine.apply(plan)
        if self.sample_seccomp is not None:
            self.sample_seccomp.load()  # the judge mounts nothing either
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def _ask(ask: int, answer: int) -> bool:
    """Zygote side: ask the bootstrap for the two-id map; True if it wrote it."""
    os.write(ask, b"m")
    granted = os.read(answer, 1) == b"y"
    os.close(ask)
    os.close(answer)
    return granted


def _parse_report(raw: bytes) -> dict[str, Any] | None:
    if len(raw) < 4:
        return None
    try:
        report = wire.load_json(raw[4 : 4 + struct.unpack(">I", raw[:4])[0]])
    except wire.ProtocolError:
        return None
    return report if isinstance(report, dict) else None


def _facts_of(request_id: int, seen: supervise.Watch, clean: bool) -> dict[str, Any]:
    """The plain observations the parent turns into a verdict."""
    status = seen.status
    streams = seen.streams
    return {
        "t": "result",
        "id": request_id,
        "exited_by_itself": seen.exited_by_itself,
        "exit_code": os.WEXITSTATUS(status)
        if status is not None and os.WIFEXITED(status)
        else None,
        "signal": os.WTERMSIG(status) if status is not None and os.WIFSIGNALED(status) else None,
        "timed_out": seen.timed_out,
        "output_limit": seen.output_limit,
        "wall": round(seen.wall, 6),
        "cpu": round(seen.cpu, 6),
        "max_rss_kb": seen.max_rss_kb,
        "stdout": bytes(streams["stdout"].data).decode("utf-8", "replace")
        if "stdout" in streams
        else "",
        "stderr": bytes(streams["stderr"].data).decode("utf-8", "replace")
        if "stderr" in streams
        else "",
        "stdout_bytes": streams["stdout"].total if "stdout" in streams else 0,
        "stderr_bytes": streams["stderr"].total if "stderr" in streams else 0,
        "unclean": not clean,
    }


def main() -> NoReturn:
    args = sys.argv[1:]
    control_fd = int(args[args.index("--control-fd") + 1])
    # No parent-death signal here: the parent is a thread of the caller's
    # process, and Linux sends it when that *thread* exits. The zygote notices
    # the caller's death as end-of-file on the control socket instead.
    ctl = socket.socket(fileno=control_fd)
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
    if config.get("role") == "judge":
        zygote.confine_judge()
    zygote.serve()


if __name__ == "__main__":
    main()
