"""Where code-eval slices run: an ssh host (``SSHSlices``) or a Ray cluster (``RaySlices``).

Both start the same worker, ``evalsweep code-eval-slice``, feed it the slice
message on stdin and read its event lines as they come; they differ only in
how the worker is reached. Every worker started is recorded in the audit log
through the target's :class:`~evalsweep.compute.CommandRunner`.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from evalsweep.codeeval._distributed import SliceDied
from evalsweep.codeeval._slices import NO_SANDBOX_EXIT, lines_of
from evalsweep.compute._kinds import TARGET_KINDS
from evalsweep.compute._runner import CommandRunner
from evalsweep.compute._ssh import SSH_FAILED, SSHTarget, _ssh_messages
from evalsweep.errors import TargetError

SLICE_COMMAND = ("-m", "evalsweep", "code-eval-slice")


def _die_with_parent() -> None:
    """In the child before exec: be killed when the process that started it dies."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _feed(stream: Any, payload: bytes) -> None:
    try:
        stream.write(payload)
        stream.close()
    except OSError:  # the worker is gone; its exit status says why
        pass


def stream_process(
    argv: Sequence[str],
    payload: bytes,
    on_line: Callable[[str], None],
    register: Callable[[subprocess.Popen[bytes] | None], None] | None = None,
    env: dict[str, str] | None = None,
    die_with_parent: bool = False,
) -> tuple[int, bytes, int]:
    """Run ``argv`` with ``payload`` on stdin, each stdout line to ``on_line``.

    Returns:
        The exit status (negative: killed by that signal), stderr and stdout bytes.
    """
    process = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent if die_with_parent else None,
    )
    if register is not None:
        register(process)
    errors: list[bytes] = []
    feeder = threading.Thread(target=_feed, args=(process.stdin, payload), daemon=True)
    drain = threading.Thread(
        target=lambda: errors.append(process.stderr.read() if process.stderr else b""),
        daemon=True,
    )
    feeder.start()
    drain.start()
    produced = 0
    assert process.stdout is not None

    def chunks() -> Iterator[bytes]:
        nonlocal produced
        while True:
            chunk = process.stdout.read1(65536)  # type: ignore[union-attr]
            if not chunk:
                return
            produced += len(chunk)
            yield chunk

    for line in lines_of(chunks()):
        on_line(line)
    code = process.wait()
    feeder.join()
    drain.join()
    if register is not None:
        register(None)
    return code, b"".join(errors), produced


def _last_line(stderr: bytes) -> str:
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].removeprefix("evalsweep: error: ") if lines else ""


def death_reason(code: int) -> str:
    """How a worker process ended, in words (for the record of retried slices)."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"worker killed ({name})"
    if code > 128:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            name = f"signal {code - 128}"
        return f"worker killed ({name})"
    return f"worker exited with status {code}"


class _Live:
    """The processes a transport has in flight, so a stopping run can end them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._processes: set[subprocess.Popen[bytes]] = set()

    def tracker(self) -> Callable[[subprocess.Popen[bytes] | None], None]:
        mine: list[subprocess.Popen[bytes]] = []

        def register(process: subprocess.Popen[bytes] | None) -> None:
            with self._lock:
                if process is not None:
                    mine.append(process)
                    self._processes.add(process)
                else:
                    for started in mine:
                        self._processes.discard(started)

        return register

    def kill_all(self) -> None:
        with self._lock:
            for process in list(self._processes):
                if process.poll() is None:
                    process.kill()


class SSHSlices:
    """Slices judged on one ssh host: ``ssh HOST -- PYTHON -m evalsweep code-eval-slice``.

    Args:
        target: the configured ssh target (host, key, Python, setup command).
        runner: the audited runner (the target's audit log).
        slices_per_host: slices in flight on the host at once.
    """

    def __init__(self, target: SSHTarget, runner: CommandRunner, slices_per_host: int = 2):
        self.target = target
        self.runner = runner
        self.name = target.name
        self.slices_per_host = slices_per_host
        self._cpus = 0
        self._live = _Live()

    def prepare(self, note: Callable[[str], None]) -> dict[str, Any]:
        from evalsweep.engine import SilentProgress

        class _Notes(SilentProgress):
            def note(self, message: str) -> None:
                note(message)

        return self.target.prepare(self.runner, _Notes())

    def slots(self) -> int:
        return self.slices_per_host  # each slice is a process of its own on the host

    def vcpus_per_slice(self) -> float:
        return float(self.target_cpus) / self.slices_per_host if self.target_cpus else 1.0

    @property
    def target_cpus(self) -> int:
        return self._cpus

    def _argv(self) -> list[str]:
        return self.target.ssh_argv(self.target._evalsweep(["code-eval-slice"]))

    def audit_begin(self, label: str, payload: bytes) -> int:
        return self.runner.begin(
            "command",
            shlex.join(self._argv()),
            detail={"job": "code-eval slice", "slice": label, "bytes": len(payload)},
        )

    def run_slice(
        self, payload: bytes, label: str, on_line: Callable[[str], None], outcome: dict[str, int]
    ) -> None:
        argv = self._argv()

        def seen(line: str) -> None:
            if line.startswith('{"start"') and not self._cpus:
                import json

                with contextlib.suppress(ValueError, KeyError, TypeError):
                    self._cpus = int(json.loads(line)["start"].get("cpus", 0))
            on_line(line)

        code, stderr, produced = stream_process(argv, payload, seen, self._live.tracker())
        outcome.update(exit_code=code, output_bytes=produced + len(stderr))
        if code == 0:
            return
        messages = _ssh_messages_of(stderr)
        if code == SSH_FAILED and messages:
            if "Permission denied" in messages[-1] or "Host key verification" in messages[-1]:
                raise TargetError(
                    f"ssh target {self.name}: {self.target.host} refused the connection "
                    f"({messages[-1]})"
                )
            raise SliceDied(f"ssh connection lost ({messages[-1]})")
        if code == SSH_FAILED:
            raise SliceDied("ssh session ended (remote worker killed)")
        if code == NO_SANDBOX_EXIT:
            raise TargetError(
                f"ssh target {self.name}: {self.target.host} cannot start a sandbox "
                f"({_last_line(stderr)})"
            )
        if code == 2:
            raise TargetError(
                f"ssh target {self.name}: evalsweep code-eval-slice failed on "
                f"{self.target.host} ({_last_line(stderr)})"
            )
        raise SliceDied(death_reason(code))

    def cancel(self) -> None:
        self._live.kill_all()


def _ssh_messages_of(stderr: bytes) -> list[str]:
    from evalsweep.compute._runner import CommandResult

    return _ssh_messages(CommandResult("", SSH_FAILED, b"", stderr, 0.0, 0))


# -- Ray ---------------------------------------------------------------------------------------


def ray_slice_task(payload: bytes) -> Iterator[list[str]]:
    """Runs in a Ray worker: the slice worker as a child process, its lines streamed back.

    Lines are yielded in small batches as they arrive, so a lost node costs only
    the verdicts not yet sent. The last item is ``["@exit", code, stderr]``.
    """
    import queue as queue_module

    lines: queue_module.Queue[str | None] = queue_module.Queue()
    outcome: list[tuple[int, bytes, int]] = []

    def work() -> None:
        try:
            outcome.append(
                stream_process(
                    [sys.executable, *SLICE_COMMAND], payload, lines.put, die_with_parent=True
                )
            )
        finally:
            lines.put(None)

    threading.Thread(target=work, daemon=True).start()
    ended = False
    while not ended:
        batch: list[str] = []
        item = lines.get()
        while True:
            if item is None:
                ended = True
                break
            batch.append(item)
            if len(batch) >= 64:
                break
            try:
                item = lines.get(timeout=0.2)
            except queue_module.Empty:
                break
        if batch:
            yield batch
    code, stderr, _ = outcome[0] if outcome else (-1, b"", 0)
    yield ["@exit", str(code), stderr.decode(errors="replace")[-2000:]]


class RaySlices:
    """Slices judged on a Ray cluster: one Ray task per slice with its CPU request.

    Ray places the tasks. evalsweep keeps in flight only the slices the cluster
    can start at once (on each alive node its CPUs over a slice's, at most
    ``slices_per_host``): a task queued in Ray waits for the node it was placed
    on while another node may free first, and a retried slice would wait behind
    every queued one.
    """

    def __init__(self, target: Any, runner: CommandRunner, slices_per_host: int = 2) -> None:
        self.target = target
        self.runner = runner
        self.name = target.name
        self.slices_per_host = slices_per_host
        self._slots = 1
        self._lock = threading.Lock()
        self._refs: set[Any] = set()

    def prepare(self, note: Callable[[str], None]) -> dict[str, Any]:
        import ray

        setup = self.target._connect(self.runner)
        self._slots = _ray_slots(float(self.target.num_cpus), self.slices_per_host)
        self._remote = ray.remote(ray_slice_task).options(
            num_cpus=self.target.num_cpus, max_retries=0, num_returns="streaming"
        )
        return {**setup, "slices_at_once": self._slots}

    def slots(self) -> int:
        return self._slots

    def vcpus_per_slice(self) -> float:
        return float(self.target.num_cpus)

    def audit_begin(self, label: str, payload: bytes) -> int:
        return self.runner.begin(
            "submit",
            f"ray task code_eval_slice({label}, {len(payload)} bytes)",
            detail={"address": self.target.address, "num_cpus": self.target.num_cpus},
        )

    def run_slice(
        self, payload: bytes, label: str, on_line: Callable[[str], None], outcome: dict[str, int]
    ) -> None:
        import ray
        from ray import exceptions as ray_errors

        code, produced = -1, 0
        stderr = b""
        generator: Any = self._remote.remote(payload)  # a streaming generator of refs
        with self._lock:
            self._refs.add(generator)
        try:
            for ref in generator:
                batch = ray.get(ref)
                if batch and batch[0] == "@exit":
                    code = int(batch[1])
                    stderr = batch[2].encode()
                    break
                for line in batch:
                    produced += len(line) + 1
                    on_line(line)
            else:
                raise SliceDied("ray task ended without its exit status")
        except ray_errors.AuthenticationError as exc:
            raise TargetError(f"ray target {self.name}: the cluster refused us ({exc})") from None
        except (ray_errors.NodeDiedError, ray_errors.ObjectLostError) as exc:
            raise SliceDied(f"ray node lost ({type(exc).__name__})") from None
        except ray_errors.WorkerCrashedError:
            raise SliceDied("ray worker died") from None
        except ray_errors.TaskCancelledError:
            raise SliceDied("ray task cancelled") from None
        except ray_errors.RayError as exc:
            raise SliceDied(f"ray task failed ({type(exc).__name__})") from None
        finally:
            with self._lock:
                self._refs.discard(generator)
            outcome.update(exit_code=code, output_bytes=produced)
        if code == 0:
            return
        if code == NO_SANDBOX_EXIT:
            raise TargetError(
                f"ray target {self.name}: a worker cannot start a sandbox ({_last_line(stderr)})"
            )
        if code == 2:
            raise TargetError(
                f"ray target {self.name}: evalsweep code-eval-slice failed ({_last_line(stderr)})"
            )
        raise SliceDied(death_reason(code))

    def cancel(self) -> None:
        import ray

        with self._lock:
            refs = list(self._refs)
        for ref in refs:
            with contextlib.suppress(Exception):  # best effort while stopping
                ray.cancel(ref, force=True)


def _ray_slots(num_cpus: float, per_node: int) -> int:
    """Slice tasks the cluster starts at once: on each alive node min(its CPUs // a slice's,
    ``per_node``); a head started with no CPUs runs none; at least 1.
    """
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    if num_cpus <= 0:
        return max(1, per_node * len(nodes))
    cpus = [float(n.get("Resources", {}).get("CPU", 0)) for n in nodes]
    return max(1, sum(min(per_node, int(c // num_cpus)) for c in cpus))


#: The slice transport of each built-in target kind that can judge code samples, by the kind's
#: name in ``TARGET_KINDS``; a package's target class gives its own as its class attribute
#: ``slice_transport``.
SLICE_TRANSPORTS: dict[str, Any] = {"ssh": SSHSlices, "ray": RaySlices}


def make_transport(target: Any, runner: CommandRunner, slices_per_host: int) -> Any:
    """The slice transport of a configured target's kind (a built-in's in
    ``SLICE_TRANSPORTS``, a package's class attribute ``slice_transport``)."""
    transport = None
    kind = getattr(target, "kind", None)
    if isinstance(kind, str) and kind in TARGET_KINDS:
        target_class = TARGET_KINDS[kind]
        if isinstance(target, target_class):
            transport = SLICE_TRANSPORTS.get(kind) or getattr(target_class, "slice_transport", None)
    if transport is not None:
        return transport(target, runner, slices_per_host)
    able = list(SLICE_TRANSPORTS)
    named = ", ".join(able[:-1]) + " or " + able[-1] if len(able) > 1 else "".join(able)
    raise TargetError(
        f"target {target.name} ({kind or type(target).__name__}) cannot judge code samples: "
        f"use an {named} target, or local"
    )
