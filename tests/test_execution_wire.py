"""The plain-data format that crosses the sandbox boundary (no sandbox needed)."""

from __future__ import annotations

import collections
import math
import os
import sys
import warnings
from typing import Any

import pytest

from evalsweep.execution._runtime import wire


def _no_refs(obj: Any) -> Any:
    raise AssertionError(f"unexpected reference to {obj!r}")


def _roundtrip(value: Any) -> Any:
    tree = wire.encode(value, _no_refs)
    return wire.load_json(wire.dump_json({"v": tree}))["v"]


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -(2**200),
        1.5,
        1e300,
        "text with \udcff a lone surrogate",
        b"\x00\xff",
        bytearray(b"ab"),
        3 + 4j,
        [1, (2, 3), {4: [5.0]}],
        (),
        {"a": {1, 2}, (1, 2): frozenset({"x"})},
    ],
)
def test_plain_values_come_back_with_their_exact_types(value: Any) -> None:
    back = _roundtrip(value)
    assert back == value
    assert repr(back) == repr(value)


def test_nan_and_infinities_survive() -> None:
    back = _roundtrip([math.nan, math.inf, -math.inf])
    assert math.isnan(back[0]) and back[1] == math.inf and back[2] == -math.inf


def test_instances_of_builtin_subclasses_stay_the_programs_objects() -> None:
    # Their class may change how they compare, iterate or print, and type() tells them
    # apart: they travel as references (the receiver never flattens them to the base
    # type, which would answer with the base type's rules instead of the object's).
    class Lie(int):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = int.__hash__

    class Sneaky(list):  # type: ignore[type-arg]
        def __iter__(self) -> Any:
            return iter(["forged"])

    class Texty(str):
        def __str__(self) -> str:
            return "forged"

    class Loud(dict):  # type: ignore[type-arg]
        def __eq__(self, other: object) -> bool:
            return True

    class Plain(list):  # type: ignore[type-arg]
        pass

    values = [Lie(3), Sneaky([1, 2]), Texty("real"), Loud(a=1), Plain([1])]
    kept: list[Any] = []

    def make_ref(obj: Any) -> Any:
        kept.append(obj)
        return wire.reference(len(kept), type(obj).__name__)

    tree = wire.encode(values, make_ref)
    assert kept == values and all(a is b for a, b in zip(kept, values, strict=True))
    assert [node["~"] for node in tree] == ["r"] * len(values)


def test_a_class_that_compares_by_its_own_rules_is_marked_for_the_receiver() -> None:
    class Same:
        def __eq__(self, other: object) -> bool:
            return True

    class Plain:
        pass

    judged = (1 << len(wire.PROXY_METHODS)) * ((1 << len(wire.JUDGING_METHODS)) - 1)
    assert wire.methods_of(Same) & judged  # __eq__ of its own: never answered for it
    assert not wire.methods_of(Plain) & judged  # object's identity rules: answered exactly


def test_objects_that_are_not_plain_data_travel_as_references() -> None:
    kept: list[Any] = []

    def make_ref(obj: Any) -> Any:
        kept.append(obj)
        return wire.reference(len(kept), type(obj).__name__)

    tree = wire.encode({"f": len, "g": (x for x in ())}, make_ref)
    assert tree == {
        "f": {"~": "r", "v": [1, "builtin_function_or_method", 0]},
        "g": {"~": "r", "v": [2, "generator", 0]},
    }
    back = wire.load_json(wire.dump_json(tree), lambda rid, name: (rid, name))
    assert back == {"f": (1, "builtin_function_or_method"), "g": (2, "generator")}


def test_plain_lists_and_string_keyed_dicts_are_sent_as_they_are() -> None:
    numbers = [1, 2, 3]
    assert wire.encode(numbers, _no_refs) is numbers
    assert wire.encode({"a": 1}, _no_refs) == {"a": 1}
    assert wire.encode({"~": 1}, _no_refs) == {"~": "d", "v": ["~", 1]}


def test_values_nested_too_deeply_are_refused() -> None:
    value: list[Any] = [object()]
    for _ in range(wire.MAX_DEPTH + 5):
        value = [value]
    with pytest.raises(ValueError):
        wire.encode(value, lambda obj: wire.reference(1, "x"))


@pytest.mark.parametrize(
    "payload",
    [
        b'{"~": "?", "v": 1}',
        b'{"~": "t"}',
        b'{"~": "t", "v": 1}',
        b'{"~": "d", "v": [1]}',
        b'{"~": "b", "v": "not base64!"}',
        b'{"~": "s", "v": [[1]]}',
        b'{"~": "c", "v": ["x", 1]}',
        b'{"~": "r", "v": [1, "function"]}',
        b"[1,",
    ],
)
def test_malformed_values_from_the_peer_are_protocol_errors(payload: bytes) -> None:
    with pytest.raises(wire.ProtocolError):
        wire.load_json(payload)  # no resolver: references are refused too


def test_a_set_display_keeps_its_iteration_order_across_the_boundary() -> None:
    # CPython iterates this literal as 16, 12, 13, 14, 15; a program returning
    # tuple(s) must see the same order as in one process (MBPP/341).
    original = {12, 13, 14, 15, 16}
    assert list(_roundtrip(original)) == list(original)


def test_oversized_frames_are_refused_and_closed_channels_reported() -> None:
    read_end, write_end = os.pipe()
    try:
        wire.write_frame(write_end, b"x" * 100)
        with pytest.raises(wire.ProtocolError, match="exceeds"):
            wire.read_frame(read_end, 10)
    finally:
        os.close(read_end)
        os.close(write_end)
    read_end, write_end = os.pipe()
    os.close(write_end)
    with pytest.raises(wire.PeerClosed):
        wire.read_frame(read_end, 10)
    os.close(read_end)


def test_the_zygote_rehearsal_runs_the_sample_side_and_leaves_nothing_open() -> None:
    """The rehearsal a sample zygote runs before it freezes: the whole protocol, no leak."""
    from evalsweep.execution._runtime import sample

    fds_before = set(os.listdir("/proc/self/fd"))
    filters, show = list(warnings.filters), warnings._showwarnmsg  # type: ignore[attr-defined]
    replies = sample.rehearse(rounds=3)
    assert set(os.listdir("/proc/self/fd")) == fds_before
    # Nothing a sample's server installs stays in the zygote (every fork would inherit it).
    assert warnings.filters == filters and warnings._showwarnmsg is show  # type: ignore[attr-defined]
    assert type(sys.stdout).__name__ != "_Tee"
    kinds = [reply["t"] for reply in replies]
    assert kinds == ["ready", "ok", "ok", "exc", "ok", "load_error"]
    ready = replies[0]["names"]
    assert sorted(ready) == ["f", "g"] and ready["f"]["v"]["~"] == "r"
    # f(3), g([1, 2]) with its argument changed in place, h() raising, one at a time
    # What the reply returns is labelled: the judge holds copies, which the next reply
    # may say the program can no longer reach (change, or hand back as the same object).
    inner = {"~": "=", "n": 1, "v": {"~": "t", "v": [3]}}
    assert replies[1]["v"] == {"~": "=", "n": 0, "v": [3, 1, inner, 6]}
    assert [label for label, _ in replies[1]["kept"]] == [0, 1]
    assert replies[2]["m"] == [[0, [1, 2, 1]]]
    assert replies[3]["type"] == "ValueError"
    assert replies[5]["type"] == "SyntaxError"


def test_standard_library_values_come_back_as_themselves() -> None:
    import datetime
    import decimal
    import fractions

    point = collections.namedtuple("Point", "x y")
    utc = datetime.timezone(datetime.timedelta(hours=2), "CEST")
    values = [
        collections.OrderedDict([("b", 1), ("a", 2)]),
        collections.Counter("abracadabra"),
        collections.defaultdict(None, {"k": [1]}),  # factories: by name (see the judge)
        collections.deque([1, 2], maxlen=3),
        point(1, (2, 3)),
        fractions.Fraction(-7, 3),
        decimal.Decimal("-1.50E+3"),
        datetime.datetime(2024, 2, 29, 1, 2, 3, 4, tzinfo=utc, fold=1),
        datetime.time(1, 2, tzinfo=datetime.UTC),
        datetime.timedelta(days=-1, microseconds=5),
        range(-3, 10, 4),
        3**40000,
        {-(5**30000)},
    ]
    back = _roundtrip(values)
    assert back == values
    # The receiver's own classes (a namedtuple: its own class of that name and fields).
    assert [type(item).__name__ for item in back] == [type(item).__name__ for item in values]
    assert all(type(a) is type(b) for a, b in zip(back, values, strict=True) if a is not back[4])
    assert list(back[0]) == ["b", "a"] and back[2].default_factory is None
    assert back[3].maxlen == 3 and back[4].y == (2, 3) and type(back[4]).__name__ == "Point"
    assert str(back[6]) == "-1.50E+3" and back[7].tzname() == "CEST" and back[7].fold == 1
    views = _roundtrip({"d": {"a": 1}}["d"].keys())
    assert views == {"a"} and type(views) is type({}.keys())


def test_shared_parts_stay_shared_and_cycles_are_unsupported() -> None:
    row = [0, 0]
    back = _roundtrip([row, row, (row,)])
    assert back[0] is back[1] is back[2][0] and back == [[0, 0]] * 2 + [([0, 0],)]
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(wire.Unsupported):
        wire.encode(cycle, _no_refs)


def test_a_namedtuple_that_overrides_comparison_stays_a_reference() -> None:
    class Loose(collections.namedtuple("Loose", "x")):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = tuple.__hash__

    kept: list[Any] = []
    tree = wire.encode(Loose(1), lambda obj: kept.append(obj) or wire.reference(1, "Loose"))
    assert tree["~"] == "r" and kept == [Loose(1)]


@pytest.mark.parametrize(
    "payload",
    [
        b'{"~": "@", "v": 3}',  # a label never defined
        b'{"~": "=", "n": 0, "v": 1, "x": 2}',
        b'{"~": "i", "v": "xyz"}',
        b'{"~": "fr", "v": [1, 0]}',
        b'{"~": "nt", "v": ["P", ["_x"], [1]]}',
        b'{"~": "dt", "v": [2024, 13, 1, 0, 0, 0, 0, 0, null]}',
        b'{"~": "dd", "v": [1, []]}',
        b'{"~": "dk", "v": [1]}',
        b'{"~": "q", "v": ["os", "system"]}',
        b'{"~": "a", "v": 0}',
    ],
)
def test_malformed_new_values_from_the_peer_are_protocol_errors(payload: bytes) -> None:
    with pytest.raises(wire.ProtocolError):
        wire.load_json(payload)


def test_the_peer_cannot_make_this_side_build_classes_without_bound() -> None:
    frame = ",".join(
        f'{{"~": "nt", "v": ["T{i}", ["a"], [1]]}}' for i in range(wire.MAX_CLASSES + 1)
    )
    saved = dict(wire._record_classes)
    try:
        with pytest.raises(wire.ProtocolError, match="namedtuple types"):
            wire.load_json(f"[{frame}]".encode())
    finally:  # the bound is per process (a judging child judges one sample)
        wire._record_classes.clear()
        wire._record_classes.update(saved)
