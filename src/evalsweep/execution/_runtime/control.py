"""The zygote's end of its control socket to the parent, and the sample protocol.

Parent to zygote: an 8-byte header (length of a body, number of file
descriptors sent with it, as ``SCM_RIGHTS``), the body, then any raw bytes it
announces (a sample's program and stdin). Zygote to parent: a 4-byte length
and a payload. End-of-file means the parent is gone: the zygote exits, and
with it the whole sandbox.

The judge's requests are marshal'd dicts and its replies JSON objects, which
the parent parses strictly. A sample request is binary (:data:`RUN`: what
the per-sample loop itself needs, in fixed fields, then the marshal'd limits
and the marshal'd rest, which only Python reads), and so is its reply
(:data:`RESULT`, then the output excerpts): the loop that serves them exists
twice, in C (``_sampleloop.c``) and in Python (``sample_role``), and a fixed
layout is what both can write without running Python per sample.
"""

from __future__ import annotations

import marshal
import os
import socket
import struct
from typing import Any

from . import wire

_HEADER = struct.Struct(">II")
_MAX_FDS = 16
# A sample request: magic b"RUN1", request id, timeout (s), output limit,
# output bytes kept per stream, scratch bytes, scratch inodes, program size,
# stdin size, size of the marshal'd limits that follow, and whether the run is
# a split run in the worker's resident root (1) or not (0).
RUN = struct.Struct("<4sQdQQQQIIII")
# A sample's facts: magic b"RES1", request id, exited by itself, timed out,
# stopped, output limit, unclean (one byte each), wait status (-1: none),
# wall and CPU seconds, max RSS (KiB), stdout and stderr byte counts, then the
# lengths of the stdout and stderr excerpts that follow.
RESULT = struct.Struct("<4sQBBBBBxxxiddqQQII")
# The launcher's socket (``launcher``, ``_sandbox.Launcher``): the parent sends
# LAUNCH with a zygote's control socket and log file as SCM_RIGHTS; the reply
# is the new process's pid (LAUNCHED) with its pidfd.
LAUNCH = b"z"
LAUNCHED = struct.Struct("<i")


def receive(ctl: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One marshal'd message from the parent and the descriptors sent with it."""
    body, fds = receive_body(ctl)
    return marshal.loads(body), fds


def receive_body(ctl: socket.socket) -> tuple[bytearray, list[int]]:
    """One request's body and the descriptors sent with it."""
    raw, fds, _flags, _addr = socket.recv_fds(ctl, _HEADER.size, _MAX_FDS)
    if not raw:
        os._exit(0)  # the parent is gone or done
    while len(raw) < _HEADER.size:
        more = ctl.recv(_HEADER.size - len(raw))
        if not more:
            os._exit(0)
        raw += more
    size, _count = _HEADER.unpack(raw)
    buffer = bytearray()
    receive_into(ctl, buffer, size)
    return buffer, fds


def receive_into(ctl: socket.socket, buffer: bytearray, size: int) -> None:
    """Read ``size`` raw bytes into the reusable ``buffer`` (no other copy is made)."""
    if len(buffer) < size:
        buffer.extend(bytes(size - len(buffer)))
    view = memoryview(buffer)[:size]
    while view:
        got = ctl.recv_into(view)
        if not got:
            os._exit(0)
        view = view[got:]


def send(ctl: socket.socket, obj: dict[str, Any]) -> None:
    send_payload(ctl, wire.dump_json(obj))


def run_request(
    request_id: int,
    timeout: float,
    limits: dict[str, Any],
    prep: bytes,
    message: dict[str, Any],
    program_size: int,
    stdin_size: int,
    resident: bool = False,
) -> bytes:
    """The body of a sample request (the parent's side); see :data:`RUN`.

    ``prep`` is ``limits`` marshal'd, made once per limits by the caller: the
    loop compares it byte for byte to the last request's to know when the
    child's confinement plan must be rebuilt.
    """
    return (
        RUN.pack(
            b"RUN1",
            request_id,
            timeout,
            limits["output_limit"],
            limits["output_keep"],
            limits["scratch"],
            limits["scratch_inodes"],
            program_size,
            stdin_size,
            len(prep),
            int(resident),
        )
        + prep
        + marshal.dumps(message)
    )


def result_payload(
    request_id: int,
    flags: tuple[bool, bool, bool, bool, bool],
    status: int | None,
    wall: float,
    cpu: float,
    max_rss_kb: int,
    stdout: tuple[bytes, int],
    stderr: tuple[bytes, int],
) -> bytes:
    """A sample's facts as the loop sends them; see :data:`RESULT`.

    ``flags``: exited by itself, timed out, stopped, output limit, unclean.
    ``stdout``/``stderr``: the excerpt kept and the total byte count.
    """
    return (
        RESULT.pack(
            b"RES1",
            request_id,
            *(int(flag) for flag in flags),
            -1 if status is None else status,
            wall,
            cpu,
            max_rss_kb,
            stdout[1],
            stderr[1],
            len(stdout[0]),
            len(stderr[0]),
        )
        + stdout[0]
        + stderr[0]
    )


def send_payload(ctl: socket.socket, payload: bytes) -> None:
    ctl.sendall(struct.pack(">I", len(payload)) + payload)


def is_result(payload: bytes) -> bool:
    return payload[:4] == b"RES1"


def decode_result(payload: bytes) -> dict[str, Any]:
    """The parent's reading of a :data:`RESULT` payload, as a plain dict."""
    if len(payload) < RESULT.size:
        raise wire.ProtocolError("short sample result")
    (
        magic,
        request_id,
        exited_by_itself,
        timed_out,
        stopped,
        output_limit,
        unclean,
        status,
        wall,
        cpu,
        max_rss_kb,
        stdout_bytes,
        stderr_bytes,
        stdout_kept,
        stderr_kept,
    ) = RESULT.unpack_from(payload)
    if magic != b"RES1" or RESULT.size + stdout_kept + stderr_kept != len(payload):
        raise wire.ProtocolError("malformed sample result")
    stdout = payload[RESULT.size : RESULT.size + stdout_kept]
    stderr = payload[RESULT.size + stdout_kept :]
    exited = status >= 0 and os.WIFEXITED(status)
    signalled = status >= 0 and os.WIFSIGNALED(status)
    return {
        "t": "result",
        "id": request_id,
        "exited_by_itself": bool(exited_by_itself),
        "exit_code": os.WEXITSTATUS(status) if exited else None,
        "signal": os.WTERMSIG(status) if signalled else None,
        "timed_out": bool(timed_out),
        "stopped": bool(stopped),
        "output_limit": bool(output_limit),
        "wall": round(wall, 6),
        "cpu": round(cpu, 6),
        "max_rss_kb": max_rss_kb,
        "stdout": stdout.decode("utf-8", "replace"),
        "stderr": stderr.decode("utf-8", "replace"),
        "stdout_bytes": stdout_bytes,
        "stderr_bytes": stderr_bytes,
        "unclean": bool(unclean),
    }
