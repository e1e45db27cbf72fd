"""Verdicts no sample can forge and no sample or test can carry over to another.

Each hostile case runs in a slice of its own on one worker, between honest
samples: an honest solution of the same problem (where it has one) and a
probe problem whose test checks that the judge starts clean (no patched
module, builtin or interpreter setting, no module imported because someone
named it) and whose wrong solution must fail. The batch runs with one worker
and with the default number (C per-sample loop), and with one worker under
the Python loop.

A pass needs the plain run (the whole program in one process) and the judge
alike, so a forgery that fools one process is refuted by the judge and gets
``unsupported``, with the judge's finding as its reason.

The rules each case exercises are in docs/sandbox.md: names a test uses are
the problem's or builtins (only what the sample is asked to write is the
sample's); prompts that do not compile alone are completed; calls are made
one at a time, as the test makes them; every sample is judged in a fresh
judge with its own limits; decoding is linear; the next sample starts only
once the judge is done with the one before.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalsweep.codeproblems._problem_code import complete_prompt
from evalsweep.codeproblems._problems import CodeSample, build_request, load_problems
from evalsweep.errors import DataError
from evalsweep.execution import (
    ExecutionRequest,
    ExecutionResult,
    ExecutionService,
    FunctionTest,
    Limits,
)

pytestmark = pytest.mark.hostile

DATA = Path(__file__).resolve().parent.parent / "data" / "sandbox"
LIMITS = Limits(timeout=1.0, memory_mb=256)
M = (1 << 61) - 1  # ints differing by a multiple of this share a hash value

# The probe: passes for the right solution only in a judge that starts clean.
PROBE = FunctionTest(
    "import builtins, decimal, json, math, sys\n"
    "def check(candidate):\n"
    "    assert 500 <= sys.getrecursionlimit() <= 10000, sys.getrecursionlimit()\n"
    "    assert sys.get_int_max_str_digits() == 4300\n"
    "    assert decimal.getcontext().prec == 28\n"
    "    assert json.loads('[1]') == [1]\n"
    "    assert abs(-2) == 2 and len([1, 2]) == 2 and isinstance(1, int)\n"
    "    assert 'xml.dom.minidom' not in sys.modules\n"
    "    assert not hasattr(builtins, 'EVALSWEEP_PLANTED')\n"
    "    assert math.isclose(candidate(1.0), 2.0)\n",
    "f",
)
PROBE_RIGHT = "def f(x):\n    return x + 1\n"
PROBE_WRONG = "def f(x):\n    return x\n"
DEFAULT = FunctionTest("def check(candidate):\n    assert candidate(1) == 2\n", "f")


def _from_file(name: str, task_id: str, code: str, whole: bool = True) -> ExecutionRequest:
    problem = load_problems(DATA / name)[task_id]
    return build_request(CodeSample(0, task_id, code, whole, {}), problem)


def _humaneval_32_without_docstring(tmp: Path, keep_reference: bool) -> Path:
    """HumanEval/32 with its find_zero docstring cut: the prompt ends in the def line."""
    row = json.loads((DATA / "humaneval-32-50.jsonl").read_text().splitlines()[0])
    head, _, _ = row["prompt"].partition("def find_zero(xs: list):\n")
    row["prompt"] = head + "def find_zero(xs: list):\n"
    if not keep_reference:
        del row["canonical_solution"]
    path = tmp / f"he32-cut-{keep_reference}.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


@dataclass(frozen=True)
class Rule:
    """One hostile case: the request it makes, the verdict it must get, an honest neighbour."""

    name: str
    build: Callable[[Path], ExecutionRequest]
    status: str | tuple[str, ...]
    reason: str | None = None
    honest: Callable[[Path], ExecutionRequest] | None = None  # same problem, must pass

    def statuses(self) -> tuple[str, ...]:
        return self.status if isinstance(self.status, tuple) else (self.status,)


def _req(program: str, test: FunctionTest = DEFAULT, limits: Limits = LIMITS) -> Callable:
    return lambda _tmp: ExecutionRequest(program, test=test, limits=limits)


def _mbpp_test(body: str, prelude: str | None, *names: str) -> FunctionTest:
    return FunctionTest(f"def check(candidate):\n{body}", "None", prelude, sample_names=names)


FORGED_596 = (
    "class _Sys:\n    def getsizeof(self, x):\n        return 1\nsys = _Sys()\n"
    "def tuple_size(t):\n    return 1\n"
)
HONEST_596 = "import sys\ndef tuple_size(t):\n    return sys.getsizeof(t)\n"
ISCLOSE_BODY = "    assert math.isclose(area(2), 12.566, rel_tol=1e-3)\n"
ISCLOSE_TEST = _mbpp_test(ISCLOSE_BODY, None, "area")
ISCLOSE_IMPORTED = _mbpp_test(ISCLOSE_BODY, "import math\n", "area")
FAKE_MATH = (
    "class _Math:\n    @staticmethod\n    def isclose(*args, **kwargs):\n        return True\n"
    "math = _Math()\ndef area(r):\n    return 0\n"
)
HONEST_AREA = "import math\ndef area(r):\n    return math.pi * r * r\n"
RE_TEST = _mbpp_test("    assert re.fullmatch('[0-9]+', digits(3))\n", "import re\n", "digits")
POLY_FORGED = "    return 0.0\n\n\ndef poly(xs, x):\n    return 0.0\n"
POLY_HONEST = (
    "    begin, end = -1.0, 1.0\n"
    "    while poly(xs, begin) * poly(xs, end) > 0:\n"
    "        begin *= 2.0\n        end *= 2.0\n"
    "    while end - begin > 1e-10:\n"
    "        center = (begin + end) / 2.0\n"
    "        if poly(xs, center) * poly(xs, begin) > 0:\n            begin = center\n"
    "        else:\n            end = center\n"
    "    return begin\n"
)
COUNTER = (
    "count = 0\nclass Box:\n    def __init__(self, value):\n        self.value = value\n"
    "def f(x):\n    global count\n    count += 1\n    return Box(count)\n"
)
COUNTER_TEST = FunctionTest(
    "def check(candidate):\n    for i in range(1, 6):\n        assert candidate(i).value == i\n",
    "f",
)
FILE_COUNTER = (
    "def f(x):\n    with open('/tmp/calls', 'a') as h:\n        h.write('x')\n"
    "    with open('/tmp/calls') as h:\n        return len(h.read())\n"
)
FILE_COUNTER_TEST = FunctionTest(
    "def check(candidate):\n    for i in range(1, 6):\n        assert candidate(i * 10) == i\n", "f"
)
EXITS_ON_SECOND = "import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return x\n"
TWO_CALLS = FunctionTest(
    "def check(candidate):\n    assert candidate(1) == 0\n    assert candidate(2) == 2\n", "f"
)


def _hostile_test(setup: str) -> FunctionTest:
    """A problem whose own test changes the judge, then checks an honest sample."""
    return FunctionTest(
        f"def check(candidate):\n{setup}    assert candidate(1) == 2\n", "f", sample_names=()
    )


def _raw_frame(payload: str) -> str:
    """A program that writes ``payload`` (Python expression of bytes) on the channel at load."""
    return (
        "import os, struct, time\n"
        f"payload = {payload}\n"
        "os.write(3, struct.pack('>I', len(payload)) + payload)\n"
        "time.sleep(0.5)\n" + PROBE_RIGHT
    )


COLLIDING = f"[k * {M} for k in range(2000)]"  # small: the sample builds it in quadratic time
COLLIDING_FRAME = (
    '(\'{"t":"ready","names":{},"x":{"~":"s","v":[\' + \',\'.join('
    f"str(k * {M}) for k in range(20000)) + ']}}}}').encode()"
)
# A test one process passes for any value: the judge's own defences decide.
# The split run is chrooted into a copy of the bare interpreter: it finds no other program.
SPLIT_ONLY = (
    "import shutil\n"
    "{name} = type({name!r}, (Exception,), {{}})\n"
    "def f(x):\n"
    "    if shutil.which('expr') is None:\n"
    "        raise {name}('raised in the split run only')\n"
    "    return x + 1\n"
)
RAISES_NAMED = "def f(x):\n    raise type({name!r}, (Exception,), {{}})('its own')\n"
ACCEPTS_ANY = FunctionTest("def check(candidate):\n    assert candidate(1) is not None\n", "f")
QUADRATIC_IN_TEST = FunctionTest(
    "def check(candidate):\n    assert len(set(candidate(1))) == 1\n", "f", sample_names=()
)


# Tests that call the candidate inside an iteration of their own: an exception that ends
# iterations, raised out of the call, would end the test's checks as if the values had run out.
_MAPPED = FunctionTest(
    "def check(candidate):\n    assert all(map(lambda x: candidate(x) == x + 1, [1, 2, 3]))\n",
    "f",
)
_FILTERED = FunctionTest(
    "def check(candidate):\n"
    "    assert not any(True for _ in filter(lambda x: candidate(x) != x + 1, [1, 2, 3]))\n"
    "    for ok in map(lambda x: candidate(x) == x + 1, [4, 5]):\n"
    "        assert ok\n",
    "f",
)
_SENTINEL = FunctionTest(
    "def check(candidate):\n"
    "    for value in iter(lambda: candidate(1), None):\n"
    "        assert value == 2\n"
    "        break\n",
    "f",
)
_STOPS = "def f(x):\n    raise StopIteration\n"
# An object of the program's whose every answer raises StopIteration, and its honest twin.
_STOPPING_OBJECT = (
    "class R:\n"
    "    def __init__(self, x):\n        self.x = x\n"
    "    @property\n    def value(self):\n        raise StopIteration\n"
    "    def __len__(self):\n        raise StopIteration\n"
    "    def __str__(self):\n        raise StopIteration\n"
    "    def __repr__(self):\n        raise StopIteration\n"
    "    def __bool__(self):\n        raise StopIteration\n"
    "    def __getitem__(self, i):\n        raise StopIteration\n"
    "    def __iter__(self):\n        raise StopIteration\n"
    "def f(x):\n    return R(x)\n"
)
_HONEST_OBJECT = (
    "class R:\n"
    "    def __init__(self, x):\n        self.x = x\n"
    "    @property\n    def value(self):\n        return self.x + 1\n"
    "    def __len__(self):\n        return self.x + 1\n"
    "    def __str__(self):\n        return str(self.x + 1)\n"
    "    def __repr__(self):\n        return str(self.x + 1)\n"
    "    def __bool__(self):\n        return True\n"
    "    def __getitem__(self, i):\n        return self.x + 1\n"
    "    def __iter__(self):\n        return iter([self.x + 1])\n"
    "def f(x):\n    return R(x)\n"
)


def _mapped(check: str) -> FunctionTest:
    """A test that checks ``check`` (of ``r = candidate(x)``) for x in 1..3 inside a map."""
    return FunctionTest(
        "def check(candidate):\n"
        f"    assert all(map(lambda x: (lambda r: {check})(candidate(x)), [1, 2, 3]))\n",
        "f",
    )


_OBJECT_TESTS = {
    "an_attribute": _mapped("r.value == x + 1"),
    "len": _mapped("len(r) == x + 1"),
    "str": _mapped("str(r) == str(x + 1)"),
    "repr": _mapped("repr(r) == str(x + 1)"),
    "truth": _mapped("bool(r)"),
    "an_item": _mapped("r[0] == x + 1"),
    "iter": _mapped("next(iter(r)) == x + 1"),
    "len_through_c_alone": FunctionTest(
        "def check(candidate):\n"
        "    got = map(len, [candidate(x) for x in [1, 2, 3]])\n"
        "    assert all(a == b for a, b in zip(got, [2, 3, 4]))\n",
        "f",
    ),
}
_EMPTY_GENERATOR = "def f(x):\n    return\n    yield\n"
_ONE_VALUE_GENERATOR = "def f(x):\n    yield x + 1\n"
_GENERATOR_TESTS = {
    "next_of_an_empty_generator": _mapped("next(r) == x + 1"),
    "next_through_c_alone": FunctionTest(
        "def check(candidate):\n"
        "    got = map(next, [candidate(x) for x in [1, 2, 3]])\n"
        "    assert all(a == b for a, b in zip(got, [2, 3, 4]))\n",
        "f",
    ),
}
_MBPP_STOPPED = FunctionTest(
    "def check(candidate):\n    assert all(map(lambda x: sq(x).value == x + 1, [1, 2, 3]))\n",
    "None",
    sample_names=("sq",),
)
_LISTED = FunctionTest("def check(candidate):\n    assert list(candidate(3)) == [0, 1, 2]\n", "f")

RULES: tuple[Rule, ...] = (
    # -- 0. an exception that ends iterations, raised out of a call, is never a pass ---------
    Rule(
        "stop_iteration_in_map",
        _req(_STOPS, _MAPPED),
        "unsupported",
        "not confirmed",
        _req(PROBE_RIGHT, _MAPPED),
    ),
    Rule(
        "stop_iteration_in_filter",
        _req(_STOPS, _FILTERED),
        "unsupported",
        "not confirmed",
        _req(PROBE_RIGHT, _FILTERED),
    ),
    Rule(
        "stop_iteration_in_a_callable_iterator",
        _req(_STOPS, _SENTINEL),
        "unsupported",
        "not confirmed",
        _req(PROBE_RIGHT, _SENTINEL),
    ),
    Rule(
        "stop_iteration_later_in_map",
        _req(
            "n = []\ndef f(x):\n    n.append(x)\n    if len(n) > 1:\n"
            "        raise StopIteration\n    return x + 1\n",
            _MAPPED,
        ),
        "unsupported",
        "not confirmed",
        _req(PROBE_RIGHT, _MAPPED),
    ),
    # StopIteration out of any other request than a call: an attribute, len, str, truth, an
    # item, iter(), the next step of a generator of the program's (one that is empty), and
    # through C alone (map(len, ...), map(next, ...): no frame of the test's sees it).
    *(
        Rule(
            f"stop_iteration_from_{name}",
            _req(_STOPPING_OBJECT, test),
            "unsupported",
            "not confirmed",
            _req(_HONEST_OBJECT, test),
        )  # fmt: skip
        for name, test in _OBJECT_TESTS.items()
    ),
    *(
        Rule(
            f"stop_iteration_from_{name}",
            _req(_EMPTY_GENERATOR, test),
            "unsupported",
            "not confirmed",
            _req(_ONE_VALUE_GENERATOR, test),
        )  # fmt: skip
        for name, test in _GENERATOR_TESTS.items()
    ),
    Rule(
        "stop_iteration_from_an_attribute_mbpp_asserts",
        _req(_STOPPING_OBJECT.replace("def f(", "def sq("), _MBPP_STOPPED),
        "unsupported",
        "not confirmed",
        _req(_HONEST_OBJECT.replace("def f(", "def sq("), _MBPP_STOPPED),
    ),
    # A generator of the program's that the test runs to its end: its StopIteration cannot be
    # told from one that ends another iteration of the test's, so the pass is not confirmed.
    Rule(
        "a_generator_of_the_program_s_run_to_its_end",
        _req("def f(x):\n    yield from range(x)\n", _LISTED),
        "unsupported",
        "not confirmed",
    ),
    # -- 1. names the test uses are the problem's or builtins ------------------------------
    Rule(
        "mbpp_596_forged_sys_full_mbpp",
        lambda _t: _from_file("mbpp-596.jsonl", "MBPP/596", FORGED_596),
        "unsupported",
        "AssertionError",
        lambda _t: _from_file("mbpp-596.jsonl", "MBPP/596", HONEST_596),
    ),
    Rule(
        "mbpp_596_forged_sys_sanitized_mbpp",
        lambda _t: _from_file("sanitized-mbpp-596.json", "MBPP/596", FORGED_596),
        "unsupported",
        "AssertionError",
        lambda _t: _from_file("sanitized-mbpp-596.json", "MBPP/596", HONEST_596),
    ),
    Rule(
        "mbpp_596_sys_as_a_namespace_object",
        lambda _t: _from_file(
            "mbpp-596.jsonl",
            "MBPP/596",
            "import types\nsys = types.SimpleNamespace(getsizeof=lambda x: 7)\n"
            "def tuple_size(t):\n    return 7\n",
        ),
        "unsupported",
        "AssertionError",
    ),
    Rule(
        "fake_math_isclose_where_the_reference_imports_math",
        _req(FAKE_MATH, ISCLOSE_IMPORTED),
        "unsupported",
        "AssertionError",
        _req(HONEST_AREA, ISCLOSE_IMPORTED),
    ),
    Rule(
        "fake_math_where_the_problem_defines_no_math",
        _req(FAKE_MATH, ISCLOSE_TEST),
        "unsupported",
        "unresolved name",
    ),
    Rule(
        "constant_the_reference_defines_redefined_by_the_sample",
        _req(
            "MOD = 7\ndef wrap(x):\n    return x % 7\n",
            _mbpp_test(
                "    assert wrap(10 ** 12) == 10 ** 12 % MOD\n",
                "MOD = 10 ** 9 + 7\ndef wrap(x):\n    return x % MOD\n",
                "wrap",
            ),
        ),
        "unsupported",
        "not confirmed",
        _req(
            "MOD = 10 ** 9 + 7\ndef wrap(x):\n    return x % MOD\n",
            _mbpp_test(
                "    assert wrap(10 ** 12) == 10 ** 12 % MOD\n",
                "MOD = 10 ** 9 + 7\ndef wrap(x):\n    return x % MOD\n",
                "wrap",
            ),
        ),
    ),
    Rule(
        "fake_re_module",
        _req(
            "class _Re:\n    @staticmethod\n    def fullmatch(*args):\n        return True\n"
            "re = _Re()\ndef digits(n):\n    return 'abc'\n",
            RE_TEST,
        ),
        "unsupported",
        "AssertionError",
        _req("import re\ndef digits(n):\n    return '7' * n\n", RE_TEST),
    ),
    Rule(
        "humaneval_32_forged_poly_helper",
        lambda _t: _from_file("humaneval-32-50.jsonl", "HumanEval/32", POLY_FORGED, False),
        "unsupported",
        "not confirmed",
        lambda _t: _from_file("humaneval-32-50.jsonl", "HumanEval/32", POLY_HONEST, False),
    ),
    Rule(
        "humaneval_32_prompt_without_docstring_completed_by_reference",
        lambda t: build_request(
            CodeSample(0, "HumanEval/32", POLY_FORGED, False, {}),
            load_problems(_humaneval_32_without_docstring(t, True))["HumanEval/32"],
        ),
        "unsupported",
        "not confirmed",
        lambda t: build_request(
            CodeSample(0, "HumanEval/32", POLY_HONEST, False, {}),
            load_problems(_humaneval_32_without_docstring(t, True))["HumanEval/32"],
        ),
    ),
    Rule(
        "humaneval_32_prompt_without_docstring_completed_by_pass",
        lambda t: build_request(
            CodeSample(0, "HumanEval/32", POLY_FORGED, False, {}),
            load_problems(_humaneval_32_without_docstring(t, False))["HumanEval/32"],
        ),
        "unsupported",
        "not confirmed",
    ),
    Rule(
        "humaneval_50_forged_encode_shift_helper",
        lambda _t: _from_file(
            "humaneval-32-50.jsonl",
            "HumanEval/50",
            "    return s\n\n\ndef encode_shift(s):\n    return s\n",
            False,
        ),
        "unsupported",
        "not confirmed",
    ),
    Rule(
        "test_global_only_the_sample_defines",
        _req(
            "EXPECTED = 1\ndef f(x):\n    return 1\n",
            FunctionTest("def check(candidate):\n    assert candidate(1) == EXPECTED\n", "f"),
        ),
        "unsupported",
        "unresolved name",
    ),
    Rule(
        "unresolved_name_caught_by_the_test",
        _req(
            "SECRET = 2\n" + PROBE_RIGHT,
            FunctionTest(
                "def check(candidate):\n    try:\n        SECRET\n    except BaseException:\n"
                "        pass\n    assert candidate(1) == 2\n",
                "f",
            ),
        ),
        "unsupported",
        "unresolved name",
    ),
    Rule(
        "entry_point_bound_to_a_module_is_not_imported_by_the_judge",
        _req(
            "import xml.dom.minidom as f\n",
            FunctionTest(
                "import sys\ndef check(candidate):\n    assert candidate is not None\n"
                "    assert 'xml.dom.minidom' not in sys.modules\n",
                "f",
            ),
        ),
        "failed",
    ),
    Rule(
        "sample_shadows_builtins",
        _req(
            "abs = lambda x: 2\nlen = lambda x: 2\nisinstance = lambda *a: True\n"
            "def f(x):\n    return -3\n",
            FunctionTest(
                "def check(candidate):\n    assert isinstance(candidate(1), int)\n"
                "    assert abs(candidate(1)) == 2\n",
                "f",
            ),
        ),
        "unsupported",
        "AssertionError",
    ),
    Rule(
        "sample_defines_its_own_check",
        _req("def check(candidate):\n    pass\n" + PROBE_WRONG),
        "failed",
        "AssertionError",
    ),
    Rule(
        "sample_returns_a_module",
        _req("import sys\ndef f(x):\n    return sys\n"),
        "failed",
        "AssertionError",
    ),
    # -- 3. calls exactly as the test makes them -------------------------------------------
    Rule("counter_read_between_calls", _req(COUNTER, COUNTER_TEST), "passed"),
    # One process passes it; files a program writes would be the test's too in one
    # process, which the judge (elsewhere) cannot be: said, never a pass.
    Rule(
        "file_counter_side_effect",
        _req(FILE_COUNTER, FILE_COUNTER_TEST),
        "unsupported",
        "not confirmed",
    ),
    Rule(
        "exits_on_an_input_the_test_never_reaches",
        _req(EXITS_ON_SECOND, TWO_CALLS),
        "failed",
        "AssertionError",
    ),
    # -- 4. every sample judged in a clean judge (hostile problems: their tests patch it) --
    Rule(
        "test_patches_math_isclose",
        _req(PROBE_RIGHT, _hostile_test("    import math\n    math.isclose = lambda *a, **k: 1\n")),
        "passed",
    ),
    Rule(
        "test_patches_builtins_abs",
        _req(PROBE_RIGHT, _hostile_test("    import builtins\n    builtins.abs = lambda x: 0\n")),
        "passed",
    ),
    Rule(
        "test_plants_a_builtin",
        _req(
            PROBE_RIGHT,
            _hostile_test("    import builtins\n    builtins.EVALSWEEP_PLANTED = 1\n"),
        ),
        "passed",
    ),
    Rule(
        "test_raises_the_recursion_limit",
        _req(PROBE_RIGHT, _hostile_test("    import sys\n    sys.setrecursionlimit(50000)\n")),
        "passed",
    ),
    Rule(
        "test_lowers_int_digits",
        _req(PROBE_RIGHT, _hostile_test("    import sys\n    sys.set_int_max_str_digits(640)\n")),
        "passed",
    ),
    Rule(
        "test_patches_json_loads",
        _req(PROBE_RIGHT, _hostile_test("    import json\n    json.loads = lambda s: None\n")),
        "passed",
    ),
    Rule(
        "test_sets_decimal_precision",
        _req(PROBE_RIGHT, _hostile_test("    import decimal\n    decimal.getcontext().prec = 3\n")),
        "passed",
    ),
    Rule(
        "test_replaces_a_module_in_sys_modules",
        _req(
            PROBE_RIGHT,
            _hostile_test(
                "    import sys, types\n    fake = types.ModuleType('math')\n"
                "    fake.isclose = lambda *a, **k: True\n    sys.modules['math'] = fake\n"
            ),
        ),
        "passed",
    ),
    Rule(
        "test_imports_a_module_with_side_effects",
        _req(PROBE_RIGHT, _hostile_test("    import xml.dom.minidom\n")),
        "passed",
    ),
    # -- 5. bounded judge work, charged to the sample that caused it ----------------------
    Rule(
        "returns_a_set_of_colliding_ints",
        _req(f"def f(x):\n    return set({COLLIDING})\n", ACCEPTS_ANY),
        "unsupported",
        "protocol",
    ),
    Rule(
        "returns_a_frozenset_of_colliding_tuples",
        _req(f"def f(x):\n    return frozenset((v, 0) for v in {COLLIDING})\n", ACCEPTS_ANY),
        "unsupported",
        "protocol",
    ),
    Rule(
        "returns_a_dict_with_colliding_keys",
        _req(f"def f(x):\n    return dict.fromkeys({COLLIDING}, 1)\n", ACCEPTS_ANY),
        "unsupported",
        "protocol",
    ),
    Rule(
        "colliding_set_frame_written_at_load",
        _req(_raw_frame(COLLIDING_FRAME)),
        ("error", "timeout", "unsupported"),
    ),
    Rule(
        "deeply_nested_frame",
        _req(_raw_frame("b'[' * 1000000 + b']' * 1000000")),
        ("error", "timeout", "unsupported"),
    ),
    Rule(
        "huge_int_literal_frame",
        _req(_raw_frame('b\'{"t":"ready","names":{},"x":\' + b\'9\' * 200000 + b\'}\'')),
        ("error", "timeout", "unsupported"),
    ),
    Rule(
        "frame_larger_than_the_cap",
        _req("import os, time\nos.write(3, b'\\x7f\\xff\\xff\\xff')\ntime.sleep(0.5)\n"),
        ("error", "timeout", "unsupported"),
    ),
    # An exception class the program names after one of the harness's own findings: a
    # verdict's reason can be that name, and nothing is decided by reading it back.
    Rule(
        "an_exception_named_test_raised_in_the_split_run_only",
        _req(SPLIT_ONLY.format(name="test")),
        "unsupported",
        "not confirmed: test",
    ),
    Rule(
        "an_exception_named_worker_lost",
        _req(RAISES_NAMED.format(name="worker lost")),
        "error",
        "worker lost",
    ),
    Rule(
        "an_exception_named_memory_error",
        _req(RAISES_NAMED.format(name="MemoryError")),
        "error",
        "MemoryError",
    ),
    Rule(
        "an_exception_named_memory_error_in_the_split_run_only",
        _req(SPLIT_ONLY.format(name="MemoryError")),
        "unsupported",
        "not confirmed: MemoryError",
    ),
    Rule(
        "test_work_quadratic_in_the_samples_value",
        _req(
            f"def f(x):\n    return [k * {M} for k in range(100000)]\n",
            QUADRATIC_IN_TEST,
        ),
        ("error", "timeout"),
    ),
    Rule(
        "quadratic_test_work_after_the_sample_exited",
        _req(
            "import os, threading, time\n"
            "def _leave():\n    time.sleep(0.4)\n    os._exit(0)\n"
            "def f(x):\n    threading.Thread(target=_leave).start()\n"
            f"    return [k * {M} for k in range(100000)]\n",
            QUADRATIC_IN_TEST,
        ),
        ("error", "timeout"),
    ),
)


@dataclass
class Outcome:
    hostile: ExecutionResult
    honest: list[ExecutionResult]
    probe_right: list[ExecutionResult]
    probe_wrong: ExecutionResult


def _run_all(workers: int | None, tmp: Path, native_loop: bool = True) -> dict[str, Outcome]:
    right = ExecutionRequest(PROBE_RIGHT, test=PROBE, limits=LIMITS)
    wrong = ExecutionRequest(PROBE_WRONG, test=PROBE, limits=LIMITS)
    requests: list[ExecutionRequest] = []
    shapes: list[tuple[str, bool]] = []
    per_slice = 6
    for rule in RULES:
        honest = rule.honest(tmp) if rule.honest is not None else right
        hostile = rule.build(tmp)
        # Honest before, the hostile sample, honest after, then the probe's wrong solution.
        requests += [honest, right, hostile, honest, right, wrong]
        shapes.append((rule.name, rule.honest is not None))
    with ExecutionService(workers=workers, limits=LIMITS, native_loop=native_loop) as service:
        assert service.report.sample_loop == ("C" if native_loop else "Python")
        results = service.run_many(requests, slice_items=per_slice)
        restarts = sum(worker.restarts for worker in service._pool)
    assert restarts == 0
    outcomes = {}
    for index, (name, _) in enumerate(shapes):
        got = results[per_slice * index : per_slice * (index + 1)]
        outcomes[name] = Outcome(got[2], [got[0], got[3]], [got[1], got[4]], got[5])
    return outcomes


@pytest.fixture(
    scope="module",
    params=[(1, True), (None, True), (1, False)],
    ids=["workers-1", "workers-default", "workers-1-Python-loop"],
)
def outcomes(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Outcome]]:
    workers, native_loop = request.param
    yield _run_all(workers, tmp_path_factory.mktemp("rules"), native_loop)


def test_the_rules_suite_has_at_least_thirty_hostile_samples() -> None:
    assert len(RULES) >= 30
    assert len({rule.name for rule in RULES}) == len(RULES)


@pytest.mark.parametrize("rule", RULES, ids=[rule.name for rule in RULES])
def test_hostile_sample_gets_its_verdict_and_its_neighbours_theirs(
    outcomes: dict[str, Outcome], rule: Rule
) -> None:
    outcome = outcomes[rule.name]
    verdict = outcome.hostile.verdict
    assert verdict.status in rule.statuses(), verdict
    if rule.reason is not None:
        assert rule.reason in verdict.reason, verdict
    assert not outcome.hostile.worker_lost
    for honest in outcome.honest + outcome.probe_right:
        assert honest.verdict.status == "passed", (honest.verdict, honest.stdout[:200])
    assert outcome.probe_wrong.verdict.status == "failed", outcome.probe_wrong.verdict


def test_a_prompt_that_cannot_be_completed_is_refused_with_one_line(tmp_path: Path) -> None:
    row = json.loads((DATA / "humaneval-32-50.jsonl").read_text().splitlines()[0])
    row["prompt"] += "def broken(:\n"
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError) as raised:
        load_problems(path)
    message = str(raised.value)
    assert "HumanEval/32" in message and str(path) in message and "\n" not in message


@pytest.mark.parametrize(
    "prompt",
    [
        "def helper(x):\n    return x\n\n\ndef f(x):\n",
        "import math\n\nclass Shape:\n    def area(self):\n",
        "def f(x):\n    # no docstring, a comment\n",
    ],
)
def test_prompts_without_a_body_are_completed_and_keep_their_helpers(prompt: str) -> None:
    completed = complete_prompt(prompt, None)
    assert completed is not None and completed.startswith(prompt)
    namespace: dict[str, object] = {}
    exec(compile(completed, "<prompt>", "exec"), namespace)
    assert "helper" in namespace or "Shape" in namespace or "f" in namespace
