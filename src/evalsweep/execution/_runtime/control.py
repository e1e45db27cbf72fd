"""The zygote's end of its control socket to the parent.

Parent to zygote: an 8-byte header (length of a marshal'd message, number of
file descriptors sent with it, as ``SCM_RIGHTS``), the message, then any raw
bytes it announces (a sample's program and stdin). Zygote to parent: a 4-byte
length and a JSON object, which the parent parses strictly. End-of-file means
the parent is gone: the zygote exits, and with it the whole sandbox.
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


def receive(ctl: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """One message from the parent and the descriptors sent with it."""
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
    return marshal.loads(buffer), fds


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
    payload = wire.dump_json(obj)
    ctl.sendall(struct.pack(">I", len(payload)) + payload)
