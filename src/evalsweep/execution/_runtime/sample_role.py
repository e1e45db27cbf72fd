"""The sample sandbox's zygote work: fork one confined sample, watch it, clean up.

This is the hot path of the whole service, run once per sample:

1. read the program into a reusable buffer and mount a fresh scratch tmpfs;
2. fork; the child arranges its descriptors, confines itself (a plan built
   *before* the fork, so the child does as little as possible: every page it
   touches is copied) and runs the program;
3. the zygote zeroes its copy of the program, watches the child's pidfd and
   output pipes until it exits, overruns its time or floods its output;
4. everything the sample started is killed and reaped, the scratch unmounted,
   and plain facts (exit status, signal, times, output excerpts) go back.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any, NoReturn

from . import confine, control, jail, sample, supervise

if TYPE_CHECKING:
    from .zygote import Zygote

SETUP_FAILED = 125


class SampleRole:
    """Request ``run``: one sample, in function mode or program mode."""

    def __init__(self, zygote: Zygote) -> None:
        self._zygote = zygote
        self._buffer = bytearray()
        self._plans: dict[tuple[Any, ...], confine.Confinement] = {}
        self._scratch_dir: str | None = None

    # -- the hot path -------------------------------------------------------------------

    def run(self, message: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        """Fork, confine and watch one sample; everything it started dies after."""
        limits = message["limits"]
        size = message["program_size"] + message["stdin_size"]
        control.receive_into(self._zygote.ctl, self._buffer, size)
        rpc_fd = fds[0] if fds else None
        scratch = self._new_scratch(limits)
        # Forked from inside the scratch space, the child starts there: one
        # system call less in the child, where every new code path costs
        # page faults, and one more here, where it is warm.
        os.chdir(scratch)
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        plan = self._plan(limits)
        # The second descriptor (function mode) closes when the judge is done.
        judge_done = fds[1] if len(fds) > 1 else None
        streams = {"stdout": out_read, "stderr": err_read}
        watcher = supervise.Watcher(
            streams,
            timeout=message["timeout"],
            output_limit=limits["output_limit"],
            keep=limits["output_keep"],
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
        started = time.monotonic()
        pid = os.fork()
        if pid == 0:
            self._become_sample(message, plan, scratch, rpc_fd is not None)
        self._zygote.restore_stdio()
        pidfd = os.pidfd_open(pid)
        seen = watcher.watch(pid, pidfd, started)
        # The zygote keeps no copy of the program: the next sample is forked
        # from this memory.
        self._buffer[:size] = bytes(size)
        clean = supervise.reap_everything(pid, pid, seen)
        supervise.drain_after(streams, seen, limits["output_limit"])
        for fd in (pidfd, out_read, err_read):
            os.close(fd)
        if judge_done is not None:
            os.close(judge_done)
        self._drop_scratch()
        return facts_of(message["id"], seen, clean)

    def _become_sample(
        self, message: dict[str, Any], plan: confine.Confinement, scratch: str, has_channel: bool
    ) -> NoReturn:
        """In the child: descriptors 0-3 are in place; close the rest, confine, run."""
        try:
            os.setsid()
            program_size, stdin_size = message["program_size"], message["stdin_size"]
            source = bytes(self._buffer[:program_size]).decode("utf-8", "surrogatepass")
            if stdin_size:
                path = os.path.join(scratch, ".stdin")
                with open(path, "wb") as handle:
                    handle.write(self._buffer[program_size : program_size + stdin_size])
                stdin_fd = os.open(path, os.O_RDONLY)
                os.unlink(path)
                os.dup2(stdin_fd, 0)
                os.close(stdin_fd)
            del self._buffer[:]
            argv = None
            if message["language"] != "python":
                path = os.path.join(scratch, message["file_name"])
                with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
                    handle.write(source)
                argv = [*message["interpreter"], path]
            # None of the zygote's own descriptors stays open in the sample.
            os.closerange(4 if has_channel else 3, 1 << 20)
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

    def _new_scratch(self, limits: dict[str, Any]) -> str:
        if self._zygote.namespaces:
            jail.mount_scratch(limits["scratch"], limits["scratch_inodes"])
            return "/tmp"
        import tempfile  # only without namespaces: not worth a place in every fork

        path = tempfile.mkdtemp(prefix="sample-", dir=self._zygote.config["scratch_parent"])
        if self._zygote.switch_to is not None:
            os.chown(path, *self._zygote.switch_to)
        self._scratch_dir = path
        return path

    def _drop_scratch(self) -> None:
        os.chdir("/")
        if self._zygote.namespaces:
            jail.unmount_scratch()
        elif self._scratch_dir is not None:
            import shutil

            shutil.rmtree(self._scratch_dir, ignore_errors=True)
            self._scratch_dir = None


def facts_of(request_id: int, seen: supervise.Watch, clean: bool) -> dict[str, Any]:
    """The plain observations the parent turns into a verdict."""
    status = seen.status
    out, err = seen.streams["stdout"], seen.streams["stderr"]
    exited = status is not None and os.WIFEXITED(status)
    signalled = status is not None and os.WIFSIGNALED(status)
    return {
        "t": "result",
        "id": request_id,
        "exited_by_itself": seen.exited_by_itself,
        "exit_code": os.WEXITSTATUS(status) if exited else None,  # type: ignore[arg-type]
        "signal": os.WTERMSIG(status) if signalled else None,  # type: ignore[arg-type]
        "timed_out": seen.timed_out,
        "stopped": seen.stopped,
        "output_limit": seen.output_limit,
        "wall": round(seen.wall, 6),
        "cpu": round(seen.cpu, 6),
        "max_rss_kb": seen.max_rss_kb,
        "stdout": bytes(out.data).decode("utf-8", "replace"),
        "stderr": bytes(err.data).decode("utf-8", "replace"),
        "stdout_bytes": out.total,
        "stderr_bytes": err.total,
        "unclean": not clean,
    }
