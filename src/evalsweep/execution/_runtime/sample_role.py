"""The sample sandbox's zygote work: fork one confined sample, watch it, clean up.

This is the hot path of the whole service, run once per sample:

1. read the request and the program into reusable buffers and mount a fresh
   scratch tmpfs;
2. fork; the child arranges its descriptors, confines itself (a plan built
   *before* the fork, so the child does as little as possible: every page it
   touches is copied) and runs the program;
3. the zygote zeroes its copy of the program, watches the child's pidfd and
   output pipes until it exits, overruns its time or floods its output;
4. everything the sample started is killed and reaped, the scratch unmounted,
   and plain facts (exit status, signal, times, output excerpts) go back.

In a worker with its own pid namespace (the normal case) the loop is the C
one in ``_sampleloop.c``: after each fork, every page the zygote writes costs
a fault, and the Python loop below writes a few hundred. The Python loop
serves where that module is not built, and is the only one without a pid
namespace (a degraded machine, or the explicit unsafe mode). Both speak the
binary protocol of ``control.RUN`` and ``control.RESULT``, and both hand the
child to :meth:`SampleRole.become_sample`.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, NoReturn

from . import confine, control, jail, plain, sample, supervise
from .exit_codes import SETUP_FAILED, SETUP_FAILED_LINE, UNCLEAN

try:
    from . import _sampleloop  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler where evalsweep was installed)
    _sampleloop = None

if TYPE_CHECKING:
    from .zygote import Zygote


def uses_native_loop(zygote: Zygote) -> bool:
    """Whether the C loop serves: built, wanted, and this zygote its pid namespace's init."""
    return (
        _sampleloop is not None
        and zygote.config.get("native_loop", True)
        and zygote.namespaces
        and os.getpid() == 1
    )


class SampleRole:
    """Serves sample requests, in function mode or program mode, until the parent hangs up."""

    def __init__(self, zygote: Zygote) -> None:
        self._zygote = zygote
        self._buffer = bytearray()
        self._plans: dict[tuple[Any, ...], confine.Confinement] = {}
        self._prep = b""
        self._limits: dict[str, Any] = {}
        self._plan_now: confine.Confinement | None = None
        self._scratch_dir: str | None = None
        self._scratch_now = "/tmp"

    def serve(self) -> NoReturn:
        z = self._zygote
        if uses_native_loop(z):
            # Returns only by raising (a failed mount, fork or read), which
            # ends this sandbox; the parent then starts another.
            _sampleloop.serve(
                z.ctl.fileno(),
                z.devnull,
                z.stderr,
                self.prepare,
                self.become_sample,
                (
                    control.RUN.size,
                    control.RESULT.size,
                    float(supervise.WALL_FACTOR),
                    supervise.STOP_GRACE,
                    supervise.STOP_WATCH_AFTER,
                    supervise.REAP_BUDGET,
                    float(supervise.JUDGE_WAIT_FACTOR),
                    supervise.JUDGE_WAIT_GRACE,
                ),
                -1 if z.pid_counter is None else z.pid_counter,
                jail.PID_AFTER_TEXT,
                (z.resident_root or "").encode(),
            )
        while True:
            body, fds = control.receive_body(z.ctl)
            payload, clean = self.run(body, fds)
            control.send_payload(z.ctl, payload)
            if not clean:  # something survived SIGKILL: let the parent replace us
                os._exit(UNCLEAN)

    def prepare(self, prep: bytes | bytearray) -> tuple[Any, ...]:
        """New limits (marshal'd): the child's confinement plan, built before any fork.

        Returns the plan as the C loop applies it (``confine.native_form``).
        """
        self._limits = marshal.loads(prep)
        self._plan_now = self._plan(self._limits)
        self._prep = bytes(prep)
        return confine.native_form(self._plan_now)

    # -- the Python loop ------------------------------------------------------------------

    def run(self, body: bytearray, fds: list[int]) -> tuple[bytes, bool]:
        """Fork, confine and watch one sample; everything it started dies after.

        Returns the reply (``control.RESULT``) and whether nothing survived.
        """
        if len(body) < control.RUN.size or body[:4] != b"RUN1":
            os._exit(0)  # anything else from the parent means: stop
        (
            _magic,
            request_id,
            timeout,
            output_limit,
            keep,
            scratch_bytes,
            scratch_inodes,
            program_size,
            stdin_size,
            prep_size,
            resident,
        ) = control.RUN.unpack_from(body)
        prep = body[control.RUN.size : control.RUN.size + prep_size]
        message = bytes(body[control.RUN.size + prep_size :])
        if prep != self._prep:
            self.prepare(prep)
        size = program_size + stdin_size
        control.receive_into(self._zygote.ctl, self._buffer, size)
        rpc_fd = fds[0] if fds else None
        new_root = self._zygote.resident_root if resident else None
        scratch = self._new_scratch(scratch_bytes, scratch_inodes, new_root or "")
        self._scratch_now = "/tmp" if new_root else scratch
        # Forked from inside the scratch space, the child starts there: one
        # system call less in the child, where every new code path costs
        # page faults, and one more here, where it is warm.
        os.chdir(scratch)
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        # The second descriptor (function mode) closes when the judge is done.
        judge_done = fds[1] if len(fds) > 1 else None
        streams = {"stdout": out_read, "stderr": err_read}
        watcher = supervise.Watcher(
            streams,
            timeout=timeout,
            output_limit=output_limit,
            keep=keep,
            judge_done=judge_done,
        )
        # The child's descriptors are put in place here, before the fork: 0 is
        # always /dev/null in this process, 1 and 2 become the output pipes and
        # 3 the judge's channel (this process keeps its own above them, see
        # Zygote). The child then only closes everything above; done there,
        # the same work would cost it page faults on a path it has never run.
        os.dup2(out_write, 1)
        os.dup2(err_write, 2)
        if rpc_fd is not None:
            os.dup2(rpc_fd, 3)
        for fd in (out_write, err_write, *fds[:1], *fds[2:]):
            os.close(fd)
        if self._zygote.pid_counter is not None:  # every run the same pid
            jail.set_next_pid(self._zygote.pid_counter)
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                # None of the zygote's own descriptors stays open in the sample.
                os.closerange(4 if rpc_fd is not None else 3, 1 << 20)
                if new_root is not None:  # a split run: files in memory only
                    os.chroot(new_root)
                    os.chdir("/tmp")
                program = bytes(self._buffer[:program_size])
                stdin = bytes(self._buffer[program_size:size])
                del self._buffer[:]
            except BaseException:
                os._exit(SETUP_FAILED)
            self.become_sample(message, program, stdin, rpc_fd is not None, False)
        self._zygote.restore_stdio()
        pidfd = os.pidfd_open(pid)
        seen = watcher.watch(pid, pidfd, started)
        # The zygote keeps no copy of the program: the next sample is forked
        # from this memory.
        self._buffer[:size] = bytes(size)
        clean = supervise.reap_everything(pid, pid, seen)
        supervise.drain_after(streams, seen, output_limit)
        if judge_done is not None:
            supervise.wait_for_hangup(judge_done, supervise.judge_wait(timeout))
        for fd in (pidfd, out_read, err_read):
            os.close(fd)
        if judge_done is not None:
            os.close(judge_done)
        self._drop_scratch(new_root or "")
        out, err = seen.streams["stdout"], seen.streams["stderr"]
        payload = control.result_payload(
            request_id,
            (seen.exited_by_itself, seen.timed_out, seen.stopped, seen.output_limit, not clean),
            seen.status,
            seen.wall,
            seen.cpu,
            seen.max_rss_kb,
            (bytes(out.data), out.total),
            (bytes(err.data), err.total),
        )
        return payload, clean

    # -- the child (either loop) ----------------------------------------------------------

    def become_sample(
        self, message: bytes, program: bytes, stdin: bytes, has_channel: bool, confined: bool
    ) -> NoReturn:
        """In the child: a new session, descriptors 0-3 only; confine, then run the program.

        ``confined``: the C loop has applied the plan already, all but the
        Python-level SIGINT handler.
        """
        try:
            request = marshal.loads(message)
            if request["mode"] in ("function", "plain"):
                # ``python -c``'s: not the zygote's own command line (argparse reads it).
                sys.argv[:] = ["-c"]
            sys.path[:] = self._zygote.import_path(self._limits)
            sys.executable, sys.prefix, sys.exec_prefix = self._zygote.interpreter(self._limits)
            source = program.decode("utf-8", "surrogatepass")
            if stdin:
                path = os.path.join(self._scratch_now, ".stdin")
                with open(path, "wb") as handle:
                    handle.write(stdin)
                stdin_fd = os.open(path, os.O_RDONLY)
                os.unlink(path)
                os.dup2(stdin_fd, 0)
                os.close(stdin_fd)
            argv = None
            if request["language"] != "python":
                path = os.path.join(self._scratch_now, request["file_name"])
                with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
                    handle.write(source)
                argv = [*request["interpreter"], path]
            plan = self._plan_now
            assert plan is not None
            if not confined:
                confine.apply(plan)
            elif plan.restore_sigint:
                signal.signal(signal.SIGINT, signal.default_int_handler)
        except BaseException as error:
            with contextlib.suppress(BaseException):
                os.write(2, f"{SETUP_FAILED_LINE}: {error!r}\n".encode())
            os._exit(SETUP_FAILED)
        try:
            if argv is not None:
                sample.exec_interpreter(argv, dict(os.environ))
            if request["mode"] == "function":
                sample.serve_functions(
                    source,
                    3,
                    self._limits["max_frame"],
                    request["announce"],
                    self._limits["output_keep"],
                )
            if request["mode"] == "plain":
                plain.run_plain(source, 3, request["test_from_line"])
            sample.run_script(source)
        except BaseException as error:  # the runtime's own failure, never the program's
            with contextlib.suppress(BaseException):
                os.write(2, f"evalsweep: the sample's runtime failed: {error!r}\n".encode())
            os._exit(1)

    # -- confinement plans and scratch space ----------------------------------------------

    def _plan(self, limits: dict[str, Any]) -> confine.Confinement:
        """The child's confinement, built before the fork (cached per limits).

        It holds no working directory: the child starts in its scratch space
        because the zygote forks it from there.
        """
        key = tuple(sorted(limits.items()))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._new_plan(limits)
        return plan

    def _new_plan(self, limits: dict[str, Any]) -> confine.Confinement:
        z = self._zygote
        if z.config["unsafe"]:
            return confine.Confinement(no_new_privs=False, oom_score_adj=None, cwd=None)
        rlimits = confine.rlimits_for(
            address_space=limits["address_space"],
            file_size=limits["file_size"],
            open_files=limits["open_files"],
            open_files_hard=limits["open_files_hard"],
            cpu_seconds=limits["cpu_seconds"],
            processes=limits["processes"],
        )
        # The zygote already runs with no_new_privs, the main filter and an
        # OOM score of 1000; every fork inherits them.
        inherited = z.seccomp is not None
        if z.two_ids:
            # Changing to the sample uid drops every capability (and with them
            # any use for the small mount filter); the zygote's SIGINT handler
            # is harmless because this uid cannot signal it.
            return confine.Confinement(
                rlimits=rlimits,
                switch_to=(jail.SAMPLE_ID, jail.SAMPLE_ID),
                seccomp=None if inherited else z.seccomp,
                no_new_privs=not inherited,
                oom_score_adj=None if inherited else 1000,
                restore_sigint=False,
                cwd=None,
            )
        return confine.Confinement(
            rlimits=rlimits,
            drop_capabilities=z.userns or (z.namespaces and not z.privileged),
            switch_to=z.switch_to,
            seccomp=z.sample_seccomp if inherited else z.seccomp,
            no_new_privs=not inherited,
            oom_score_adj=None if inherited else 1000,
            cwd=None,
        )

    def _new_scratch(self, size_bytes: int, inodes: int, root: str = "") -> str:
        if self._zygote.namespaces:
            jail.mount_scratch(size_bytes, inodes, root)
            return root + "/tmp"
        import tempfile  # only without namespaces: not worth a place in every fork

        path = tempfile.mkdtemp(prefix="sample-", dir=self._zygote.config["scratch_parent"])
        if self._zygote.switch_to is not None:
            os.chown(path, *self._zygote.switch_to)
        self._scratch_dir = path
        return path

    def _drop_scratch(self, root: str = "") -> None:
        os.chdir("/")
        if self._zygote.namespaces:
            jail.unmount_scratch(root)
        elif self._scratch_dir is not None:
            import shutil

            shutil.rmtree(self._scratch_dir, ignore_errors=True)
            self._scratch_dir = None
