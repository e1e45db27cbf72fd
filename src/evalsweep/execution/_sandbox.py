"""The parent's handle on one zygote: start it, talk to it, kill it.

The zygote's replies are parsed as strict JSON and size-checked: even the
trusted runtime inside the sandbox is treated as a peer that could have been
subverted, so nothing it sends can be more than plain data.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import marshal
import os
import py_compile
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._cgroups import WorkerCgroup
from ._runtime import control, wire

RUNTIME = Path(__file__).with_name("_runtime")
_LAUNCH_TIMEOUT = 30.0
_bytecode_lock = threading.Lock()
_bytecode_checked = False
_HEADER = struct.Struct(">II")
_REPLY_LIMIT = 1 << 24
_ids = itertools.count()


class SandboxBroken(Exception):
    """The zygote died, hung, or sent something that is not a valid reply."""


@dataclass
class SandboxInfo:
    """What a zygote reported once it was up."""

    layers: dict[str, tuple[bool, str]] = field(default_factory=dict)
    python: str = ""
    loop: str = ""  # the per-sample loop of a sample sandbox: "C" or "Python"


def zygote_environment(config: dict[str, Any]) -> dict[str, str]:
    """The whole environment a zygote starts with (nothing inherited)."""
    return {
        **config["env"],
        # -S -s -B -P rather than -I: -I's -E would ignore PYTHONHASHSEED,
        # which every sandbox of a service shares (so the judge and the sample
        # agree on set order).
        "PYTHONHASHSEED": str(config["hash_seed"]),
        # Resolve every shared-library symbol at start-up: a lazy binding
        # first made in a forked sample writes a page of the zygote's memory,
        # which then has to be copied.
        "LD_BIND_NOW": "1",
    }


def _start_runtime(
    module: str, fd_flag: str, fd: int, stderr: Any, config: dict[str, Any]
) -> subprocess.Popen[bytes]:
    """``python -c`` running ``_runtime.<module>.main()`` with ``fd`` passed as ``fd_flag``.

    The module is imported rather than run as a script: a script is compiled
    from source at every start, a module's bytecode comes from its cache.
    """
    ensure_bytecode()
    code = (
        "import sys; sys.path.insert(0, sys.argv.pop(1)); "
        f"from _runtime.{module} import main; main()"
    )
    return subprocess.Popen(
        [sys.executable, "-S", "-s", "-B", "-P", "-c", code, str(RUNTIME.parent), fd_flag, str(fd)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        env=zygote_environment(config),
        pass_fds=(fd,),
        start_new_session=True,
        cwd="/",
    )


class Launcher:
    """The service's zygote launcher (``_runtime/launcher.py``): zygotes by fork, not exec.

    Starting a zygote as a new interpreter costs about 35 ms of CPU before it
    does anything of its own (Python's start-up and the runtime's imports);
    forked from this one process, which has done both once, it costs about
    one millisecond. Where the launcher cannot start or has died, sandboxes
    start as their own interpreters, as before.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = _start_runtime(
                "launcher", "--launcher-fd", theirs.fileno(), subprocess.DEVNULL, config
            )
        except OSError:
            ours.close()
            return
        finally:
            theirs.close()
        ours.settimeout(_LAUNCH_TIMEOUT)
        self._sock = ours

    def spawn(self, ctl: socket.socket, log: Any) -> _Forked | None:
        """A new process that becomes a zygote on ``ctl``; None if the launcher is gone."""
        with self._lock:
            if self._sock is None:
                return None
            try:
                socket.send_fds(self._sock, [control.LAUNCH], [ctl.fileno(), log.fileno()])
                data, fds, _flags, _addr = socket.recv_fds(self._sock, control.LAUNCHED.size, 1)
            except OSError:
                self._stop()
                return None
            if len(data) != control.LAUNCHED.size or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                self._stop()
                return None
            return _Forked(control.LAUNCHED.unpack(data)[0], fds[0])

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()  # the launcher exits at end-of-file
            self._sock = None
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=5)
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            self._proc = None


class _Forked:
    """A zygote process the launcher forked: not our child, so watched through a pidfd."""

    def __init__(self, pid: int, pidfd: int) -> None:
        self.pid = pid
        self._pidfd: int | None = pidfd

    def poll(self) -> int | None:
        """None while it runs (its exit status is the launcher's to collect)."""
        if self._pidfd is None:
            return 0
        ready, _, _ = select.select([self._pidfd], [], [], 0)
        return 0 if ready else None

    def wait(self, timeout: float) -> int:
        if self._pidfd is not None:
            ready, _, _ = select.select([self._pidfd], [], [], timeout)
            if not ready:
                raise subprocess.TimeoutExpired("zygote", timeout)
        return 0

    def kill(self) -> None:
        if self._pidfd is not None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def close(self) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


class Sandbox:
    """One isolated zygote process tree (role ``sample`` or ``judge``)."""

    def __init__(
        self,
        role: str,
        config: dict[str, Any],
        cgroup: WorkerCgroup | None,
        launcher: Launcher | None = None,
    ) -> None:
        self.role = role
        self._config = config
        self.cgroup = cgroup
        self._launcher = launcher
        self._proc: subprocess.Popen[bytes] | _Forked | None = None
        self._sock: socket.socket | None = None
        self._zygote_pid: int | None = None
        # Lives as long as the sandbox; closed in close().
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self._pending = b""
        self.info = SandboxInfo()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> SandboxInfo:
        """Start the zygote and wait until it reports its isolation layers."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if self._launcher is not None:
                self._proc = self._launcher.spawn(theirs, self._log)
            if self._proc is None:
                self._proc = _start_runtime(
                    "zygote", "--control-fd", theirs.fileno(), self._log, self._config
                )
        finally:
            theirs.close()
        self._sock = ours
        if self.cgroup is not None:
            self.cgroup.add(self._proc.pid)  # before it forks anything
        if os.geteuid() == 0:
            # The zygote itself must never be the one the OOM killer picks.
            with (
                contextlib.suppress(OSError),
                open(f"/proc/{self._proc.pid}/oom_score_adj", "w") as handle,
            ):
                handle.write("-1000")
        self.send({"op": "config", **self._config})
        deadline = time.monotonic() + timeout
        spawned = self.receive(deadline)
        if spawned.get("t") == "fatal":
            raise SandboxBroken(f"sandbox start-up failed: {spawned.get('error')}")
        self._zygote_pid = int(spawned["pid"])
        ready = self.receive(deadline)
        if ready.get("t") != "ready":
            raise SandboxBroken(f"sandbox start-up failed: {ready.get('error', ready)}")
        layers = ready.get("layers", {})
        self.info = SandboxInfo(
            layers={str(k): (bool(v[0]), str(v[1])) for k, v in layers.items()},
            python=str(ready.get("python", "")),
            loop=str(ready.get("loop", "")),
        )
        return self.info

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._sock is not None

    def kill(self) -> None:
        """SIGKILL the whole tree: the zygote is its pid namespace's init."""
        if self._zygote_pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self._zygote_pid, signal.SIGKILL)
        if self._proc is not None:
            self._proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=10)
            if isinstance(self._proc, _Forked):
                self._proc.close()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._zygote_pid = None

    def close(self) -> None:
        self.kill()
        self._log.close()

    def log_tail(self, size: int = 4000) -> str:
        """The end of the zygote's stderr, for a start-up or crash report."""
        with contextlib.suppress(OSError):
            self._log.seek(0, os.SEEK_END)
            end = self._log.tell()
            self._log.seek(max(0, end - size))
            return self._log.read().decode("utf-8", "replace")
        return ""

    # -- messages --------------------------------------------------------------------------

    def send(self, message: dict[str, Any], fds: tuple[int, ...] = (), raw: bytes = b"") -> None:
        """A marshal'd message (start-up and the judge's requests)."""
        self.send_body(marshal.dumps(message), fds, raw)

    def send_body(self, body: bytes, fds: tuple[int, ...] = (), raw: bytes = b"") -> None:
        """A request's body as is (a sample request: see ``control.run_request``)."""
        if self._sock is None:
            raise SandboxBroken("sandbox is not running")
        try:
            socket.send_fds(self._sock, [_HEADER.pack(len(body), len(fds))], list(fds))
            self._sock.sendall(body + raw if len(raw) < 65536 else body)
            if len(raw) >= 65536:
                self._sock.sendall(raw)
        except OSError as error:
            raise SandboxBroken(f"cannot reach the sandbox: {error}") from None

    def has_reply(self, until: float) -> bool:
        """Whether a reply (or end-of-file) can be read before ``until``, waiting until then."""
        if self._pending or self._sock is None:
            return True
        ready, _, _ = select.select([self._sock], [], [], max(0.0, until - time.monotonic()))
        return bool(ready)

    def receive(self, deadline: float) -> dict[str, Any]:
        """One reply, or :class:`SandboxBroken` on EOF, garbage or deadline."""
        size = struct.unpack(">I", self._read(4, deadline))[0]
        if size > _REPLY_LIMIT:
            raise SandboxBroken(f"reply of {size} bytes")
        payload = self._read(size, deadline)
        try:
            if control.is_result(payload):
                return control.decode_result(payload)
            reply = wire.load_json(payload)
        except wire.ProtocolError as error:
            raise SandboxBroken(str(error)) from None
        if not isinstance(reply, dict):
            raise SandboxBroken("reply is not an object")
        return reply

    def _read(self, size: int, deadline: float) -> bytes:
        while len(self._pending) < size:
            if self._sock is None:
                raise SandboxBroken("sandbox is not running")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxBroken("no reply before the deadline")
            ready, _, _ = select.select([self._sock], [], [], remaining)
            if not ready:
                continue
            try:
                chunk = self._sock.recv(1 << 16)
            except OSError as error:
                raise SandboxBroken(f"the sandbox connection failed: {error}") from None
            if not chunk:
                raise SandboxBroken("the sandbox exited")
            self._pending += chunk
        data, self._pending = self._pending[:size], self._pending[size:]
        return data

    def fileno(self) -> int:
        return self._sock.fileno() if self._sock is not None else -1

    def has_buffered_reply(self) -> bool:
        return len(self._pending) >= 4


def ensure_bytecode() -> None:
    """Cache the sandbox runtime's bytecode, once per process, where its directory is writable.

    Every zygote (two per worker) imports the whole runtime at start-up, with
    ``-B``; without cached bytecode (an editable install, ``pip install
    --no-compile``, ``PYTHONDONTWRITEBYTECODE``) each would compile it from
    source, about 20 ms of CPU apiece. Where the cache cannot be written, the
    zygotes compile as before.
    """
    global _bytecode_checked
    with _bytecode_lock:
        if _bytecode_checked:
            return
        _bytecode_checked = True
        for source in sorted(RUNTIME.glob("*.py")):
            cached = importlib.util.cache_from_source(str(source))
            with contextlib.suppress(OSError, py_compile.PyCompileError):
                if not _bytecode_is_fresh(source, cached):
                    py_compile.compile(str(source), cfile=cached, doraise=True)


def _bytecode_is_fresh(source: Path, cached: str) -> bool:
    """Whether the import system would use ``cached`` for ``source`` (a timestamp pyc)."""
    try:
        with open(cached, "rb") as handle:
            header = handle.read(16)
        stat = source.stat()
    except OSError:
        return False
    return (
        len(header) == 16
        and header[:4] == importlib.util.MAGIC_NUMBER
        and header[4:8] == bytes(4)
        and int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
        and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF
    )


def next_request_id() -> int:
    return next(_ids)
