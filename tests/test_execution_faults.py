"""Fault tolerance: broken workers are replaced and cost only their own sample."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from evalsweep.execution import (
    ExecutionRequest,
    ExecutionResult,
    ExecutionService,
    FunctionTest,
    Limits,
)
from evalsweep.execution._sandbox import _Forked
from evalsweep.execution._service import _JobQueue, group_by_test, make_slices
from evalsweep.execution._types import MAX_TRANSFER_BYTES
from evalsweep.execution._worker import _Flight, _send_ahead

ADD = "def add(a, b):\n    return a + b\n"
ADD_TEST = FunctionTest("def check(candidate):\n    assert candidate(2, 3) == 5\n", "add")


def test_a_worker_whose_zygote_dies_is_replaced_and_only_its_sample_is_lost() -> None:
    with ExecutionService(workers=1, limits=Limits(timeout=5.0)) as service:
        worker = service._pool[0]
        victim = ExecutionRequest("import time\ntime.sleep(3)\n" + ADD, test=ADD_TEST, key="victim")
        others = [ExecutionRequest(ADD, test=ADD_TEST, key=f"after-{i}") for i in range(4)]

        def kill_the_zygote() -> None:
            time.sleep(1.0)
            assert worker.sample_box is not None
            os.kill(worker.sample_box._zygote_pid, signal.SIGKILL)  # type: ignore[arg-type]

        killer = threading.Thread(target=kill_the_zygote)
        killer.start()
        results = service.run_many([victim, *others], slice_items=5)
        killer.join()
        assert (results[0].verdict.status, results[0].verdict.reason) == ("error", "worker lost")
        assert [result.verdict.status for result in results[1:]] == ["passed"] * 4
        assert worker.restarts == 1
        assert service.run(ExecutionRequest(ADD, test=ADD_TEST)).verdict.passed


def _parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[1])


def test_zygotes_are_forked_by_the_launcher_and_start_afresh_once_it_is_gone() -> None:
    with ExecutionService(workers=1, limits=Limits(timeout=5.0)) as service:
        worker = service._pool[0]
        launcher = service._settings.launcher
        assert launcher is not None and launcher._proc is not None
        for box in (worker.sample_box, worker.judge_box):
            assert box is not None and isinstance(box._proc, _Forked)
            assert _parent_of(box._proc.pid) == launcher._proc.pid
        launcher._proc.kill()
        launcher._proc.wait()
        assert worker.sample_box is not None
        os.kill(worker.sample_box._zygote_pid, signal.SIGKILL)  # type: ignore[arg-type]
        results = service.run_many([ExecutionRequest(ADD, test=ADD_TEST) for _ in range(3)])
        # The first sample met the dead zygote; the worker's new sandboxes are
        # interpreters of their own, children of this process.
        assert [result.verdict.status for result in results[1:]] == ["passed"] * 2
        assert worker.restarts == 1
        for box in (worker.sample_box, worker.judge_box):
            assert box is not None and isinstance(box._proc, subprocess.Popen)
            assert _parent_of(box._proc.pid) == os.getpid()
        assert service.run(ExecutionRequest(ADD, test=ADD_TEST)).verdict.passed


def test_in_unsafe_mode_a_sample_that_kills_its_worker_costs_only_itself() -> None:
    service = ExecutionService(workers=1, unsafe_no_sandbox=True)
    with service:
        killer = ExecutionRequest(
            "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n", key="killer"
        )
        requests = [killer] + [
            ExecutionRequest("print(1)", expected_stdout="1\n") for _ in range(3)
        ]
        results = service.run_many(requests, slice_items=4)
        assert results[0].verdict.reason == "worker lost"
        assert all(result.verdict.passed for result in results[1:])
        assert service._pool[0].restarts == 1
    # The dead worker's scratch directory went with the service's.
    assert not os.path.exists(service._scratch_parent)


def test_a_sample_larger_than_one_transfer_is_unsupported_without_running() -> None:
    """One process would run it; the sandbox cannot carry it, and says so."""
    with ExecutionService(workers=1) as service:
        huge = "x = 1\n" + "#" * MAX_TRANSFER_BYTES
        result = service.run(ExecutionRequest(huge))
        assert (result.verdict.status, result.verdict.reason) == ("unsupported", "too large")
        assert service._pool[0].restarts == 0


def test_slices_keep_order_and_stay_under_the_transfer_limit() -> None:
    requests = [(i, ExecutionRequest("#" * (1 << 20), key=str(i))) for i in range(12)]
    slices = make_slices(requests, max_items=32)
    assert [index for piece in slices for index, _ in piece] == list(range(12))
    for piece in slices:
        assert sum(len(request.program) for _, request in piece) <= MAX_TRANSFER_BYTES
    assert len(make_slices(requests, max_items=5)) == 3


def test_requests_sharing_a_test_are_gathered_in_first_seen_order() -> None:
    other = FunctionTest("def check(candidate):\n    assert candidate(1, 1) == 2\n", "add")
    tests = [ADD_TEST, other, ADD_TEST, None, other, ADD_TEST]
    items = [(i, ExecutionRequest(ADD, test=test, key=str(i))) for i, test in enumerate(tests)]
    assert [index for index, _ in group_by_test(items)] == [0, 2, 5, 1, 4, 3]


def test_problems_found_slow_go_first_each_in_a_slice_of_its_own() -> None:
    slow_test = FunctionTest(
        "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\n",
        "add",
    )
    slow = "import time\ndef add(a, b):\n    time.sleep(0.3)\n    return a + b\n"
    with ExecutionService(workers=2, limits=Limits(timeout=5.0)) as service:
        first = [ExecutionRequest(ADD, test=ADD_TEST) for _ in range(6)]
        first += [ExecutionRequest(slow, test=slow_test) for _ in range(2)]
        assert all(result.verdict.passed for result in service.run_many(first))
        batch = [ExecutionRequest(ADD, test=ADD_TEST, key=f"q{i}") for i in range(6)]
        batch += [ExecutionRequest(slow, test=slow_test, key=f"s{i}") for i in range(3)]
        slices = service._longest_first(make_slices(list(enumerate(batch)), max_items=4))
        results = service.run_many(batch)
    assert [[batch[i].key for i, _ in piece] for piece in slices] == [
        ["s0"],
        ["s1"],
        ["s2"],
        ["q0", "q1", "q2", "q3"],
        ["q4", "q5"],
    ]
    assert [result.key for result in results] == [request.key for request in batch]
    assert all(result.verdict.passed for result in results)


def test_a_worker_hands_the_unsent_back_of_its_slice_to_an_idle_one() -> None:
    with ExecutionService(workers=1, limits=Limits(timeout=5.0)) as service:
        worker = service._pool[0]
        items = [(i, ExecutionRequest(ADD, test=ADD_TEST, key=str(i))) for i in range(6)]
        done: list[int] = []
        offered: list[list[int]] = []

        def share(rest: list[tuple[int, ExecutionRequest]]) -> bool:
            offered.append([index for index, _ in rest])
            return len(offered) == 1  # an idle worker takes the first offer only

        worker.run_slice(items, lambda index, result: done.append(index), share=share)
    # Two samples were in flight and four unsent: the back two went to the idle worker.
    assert offered[0] == [4, 5]
    assert done == [0, 1, 2, 3]


SLEEPY_TEST = FunctionTest(
    "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(1, 1) == 2\n",
    "add",
)


def _sleepy_add(seconds: float) -> str:
    return f"import time\ndef add(a, b):\n    time.sleep({seconds / 2})\n    return a + b\n"


def test_a_worker_keeps_one_more_sample_of_a_test_found_long_and_hands_off_the_rest() -> None:
    with ExecutionService(workers=1, limits=Limits(timeout=5.0)) as service:
        worker = service._pool[0]
        long = [ExecutionRequest(_sleepy_add(0.2), test=SLEEPY_TEST, key=f"L{i}") for i in range(3)]
        quick = [ExecutionRequest(ADD, test=ADD_TEST, key=f"Q{i}") for i in range(2)]
        items = list(enumerate([*long, *quick]))
        costs: dict[object, float] = {}
        done: list[int] = []
        handed: list[list[int]] = []

        def emit(index: int, result: ExecutionResult) -> None:
            done.append(index)
            costs[items[index][1].test] = result.wall_seconds

        def hand_off(rest: list[tuple[int, ExecutionRequest]]) -> bool:
            handed.append([index for index, _ in rest])
            return True

        worker.run_slice(items, emit, expected_cost=lambda r: costs.get(r.test), hand_off=hand_off)
    # The first long sample told its cost; the worker ran the second itself
    # and handed the third to whichever worker is free first.
    assert handed == [[2]]
    assert done == [0, 1, 3, 4]


def test_while_a_long_sample_runs_its_worker_offers_the_unsent_ones_to_idle_workers() -> None:
    with ExecutionService(workers=1, limits=Limits(timeout=5.0)) as service:
        worker = service._pool[0]
        requests = [ExecutionRequest(_sleepy_add(0.6), test=SLEEPY_TEST, key="long")]
        requests += [ExecutionRequest(ADD, test=ADD_TEST, key=f"Q{i}") for i in range(4)]
        events: list[tuple[str, list[int]]] = []

        def share(rest: list[tuple[int, ExecutionRequest]]) -> bool:
            events.append(("offered", [index for index, _ in rest]))
            return len(events) == 1  # an idle worker takes the first offer only

        worker.run_slice(
            list(enumerate(requests)),
            lambda index, result: events.append(("done", [index])),
            share=share,
        )
    # Offered while the long sample still ran, not once it had finished.
    assert events[0] == ("offered", [3, 4])
    assert [index for what, indexes in events if what == "done" for index in indexes] == [0, 1, 2]


def test_requests_go_ahead_of_a_running_one_only_when_it_is_known_to_be_short() -> None:
    other = FunctionTest("def check(candidate):\n    assert candidate(1, 1) == 2\n", "add")
    running = _Flight(0, ExecutionRequest(ADD, test=ADD_TEST), 1, Limits(), True, 0.0)
    same, different = (
        (1, ExecutionRequest(ADD, test=ADD_TEST)),
        (1, ExecutionRequest(ADD, test=other)),
    )
    assert _send_ahead(running, same, None)  # nothing known: as before, always
    assert not _send_ahead(running, same, lambda _: None)  # its cost is about to be known
    assert _send_ahead(running, different, lambda _: None)
    assert _send_ahead(running, same, lambda _: 0.005)
    assert not _send_ahead(running, different, lambda _: 0.5)


def test_a_slice_handed_off_goes_ahead_of_every_queued_one() -> None:
    jobs = _JobQueue()
    jobs.put("first queued")  # type: ignore[arg-type]
    jobs.put_first("handed off")  # type: ignore[arg-type]
    jobs.put(None)
    assert [jobs.get(), jobs.get(), jobs.get()] == ["handed off", "first queued", None]


def test_a_failing_callback_stops_the_batch_instead_of_running_it_all() -> None:
    with ExecutionService(workers=2, limits=Limits(timeout=5.0)) as service:
        slow = [ExecutionRequest("import time\ntime.sleep(0.2)\n") for _ in range(40)]
        seen: list[int] = []

        def stop_at_the_first(index: int, _result: object) -> None:
            seen.append(index)
            raise RuntimeError("the caller gave up")

        started = time.monotonic()
        try:
            service.run_many(slow, on_result=stop_at_the_first)
        except RuntimeError as error:
            assert str(error) == "the caller gave up"
        else:
            raise AssertionError("the callback's error was swallowed")
        assert len(seen) == 1
        assert time.monotonic() - started < 2.0  # not 40 x 0.2 s / 2 workers
        assert service.run(ExecutionRequest("print(1)", expected_stdout="1\n")).verdict.passed


def test_a_sample_past_its_timeout_hands_its_slice_on_and_a_stand_in_serves_it() -> None:
    # Everything shares one CPU with a busy process, so the looping sample's own
    # time (wall-clock time minus time spent waiting for the CPU) reaches its
    # 3 s timeout only after 6 s or more: for that long it holds its worker.
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})  # the sandboxes and the busy process inherit it
    hog = subprocess.Popen([sys.executable, "-c", "while True:\n    pass\n"])
    try:
        with ExecutionService(workers=1, limits=Limits(timeout=1.0)) as service:
            loop = ExecutionRequest(
                "while True:\n    pass\n", limits=Limits(timeout=3.0), key="loop"
            )
            # Programs without a function test: a judged sample's verdict also waits for
            # every split run of its test, and the one sent ahead behind the loop would
            # hold them all (see test_plain_runs_of_a_test_start_after_all_its_split_runs).
            quick = [
                ExecutionRequest("print(2 + 3)\n", expected_stdout="5\n", key=f"quick-{i}")
                for i in range(12)
            ]
            seen: list[str] = []
            # One slice: without a hand-over every quick sample would wait for the loop.
            results = service.run_many(
                [loop, *quick],
                on_result=lambda _i, result: seen.append(result.key),
                slice_items=13,
            )
            stand_ins = [worker.index for worker in service._pool[1:]]
            again = []
            for _ in range(3):  # the stand-in retires at its next slice, the loop being over
                again += service.run_many(quick, slice_items=1)
                if len(service._pool) == 1:
                    break
            after = len(service._pool)
    finally:
        hog.kill()
        hog.wait()
        os.sched_setaffinity(0, cpus)
    assert results[0].verdict.status == "timeout"
    assert results[0].wall_seconds > 3.25  # it did hold its worker past its timeout
    assert all(result.verdict.passed for result in results[1:])
    assert stand_ins == [1]
    # The stand-in ran quick samples while the loop held the worker (without it,
    # every quick sample's verdict would come after the loop's).
    assert seen.index("loop") >= 1
    assert all(result.verdict.passed for result in again) and after == 1


def test_a_sample_queued_behind_a_slow_one_still_gets_its_whole_time() -> None:
    # The quick sample's request reaches its judge at once (requests are sent
    # ahead), but its process starts only when the slow one is done, 7.5 s
    # later: longer than the judge's own limit for it (5 x 1 s, plus grace).
    # The judge's clock starts when the sample has loaded.
    with ExecutionService(workers=1) as service:
        slow = ExecutionRequest(
            "import time\ntime.sleep(7.5)\nprint('done')\n", limits=Limits(timeout=10.0)
        )
        quick = ExecutionRequest(ADD, test=ADD_TEST, limits=Limits(timeout=1.0))
        results = service.run_many([slow, quick], slice_items=2)
    assert results[0].stdout == "done\n" and results[0].verdict.status != "timeout"
    assert results[1].verdict.passed, results[1].verdict
