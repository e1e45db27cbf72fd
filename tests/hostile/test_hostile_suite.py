"""Every hostile sample of ``cases.py``, run in the real sandbox, one batch per session.

For each case the suite asserts the verdict, that the run went on (the
worker was never replaced), that the very next sample on the same worker
found nothing left behind (no file in its scratch space, no other process in
its pid namespace) and still passed, and that no planted secret appears in
any output or verdict. After the whole batch it checks the host: no process
of the sandbox's users besides the zygotes, nothing written where the samples
tried to write.

The batch runs twice: once under the C per-sample loop of the sample zygote
and once under the Python one (the same protocol and the same duties, and
each the only line of defence where it serves).
"""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsweep.execution import (
    ExecutionRequest,
    ExecutionResult,
    ExecutionService,
    FunctionTest,
    Limits,
)

from .cases import CASES, DEFAULT_TEST, Case

pytestmark = pytest.mark.hostile

CANARY = f"evalsweep-canary-{secrets.token_hex(12)}"
SENTINEL = f"EVALSWEEP-EXPECTED-{secrets.token_hex(12)}"

# Runs right after each hostile sample, on the same worker: it passes only if
# the hostile sample left no file in /tmp and no process in the namespace.
NEXT_SAMPLE = """
import os
LEFT_FILES = sorted(os.listdir('/tmp'))
LEFT_PROCESSES = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())
def f(x):
    assert LEFT_FILES == [], f"files left behind: {LEFT_FILES}"
    assert LEFT_PROCESSES == [os.getpid()], f"processes left behind: {LEFT_PROCESSES}"
    return x + 1
"""

LIMITS = Limits(timeout=1.0, memory_mb=256)


def _fill(text: str, places: dict[str, str]) -> str:
    for key, value in places.items():
        text = text.replace("{" + key + "}", value)
    return text


def _request(case: Case, places: dict[str, str]) -> ExecutionRequest:
    program = _fill(case.program, places)
    test = None
    if case.test is not None:
        test = FunctionTest(_fill(case.test, places), "f")
    limits = LIMITS if case.timeout is None else LIMITS.with_timeout(case.timeout)
    return ExecutionRequest(
        program,
        language=case.language,  # type: ignore[arg-type]
        test=test,
        limits=limits,
        key=case.name,
    )


def _sandbox_users_processes(uids: set[int]) -> dict[int, tuple[str, int, list[str]]]:
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) in uids:
            found[int(entry)] = (
                fields["Name"].strip(),
                int(fields["PPid"]),
                fields["NSpid"].split(),
            )
    return found


def _zygote_processes(
    zygotes: set[int], processes: dict[int, tuple[str, int, list[str]]]
) -> set[int]:
    """The zygotes and, below each, the zygote proper: init (pid 1) of the nested pid
    namespace it serves from (``jail.nest_pid_namespace``)."""
    return zygotes | {
        pid
        for pid, (_, parent, nspid) in processes.items()
        if parent in zygotes and len(nspid) >= 3 and nspid[-1] == "1"
    }


class Batch:
    """The results of running every case once, with its follow-up sample."""

    def __init__(self, loop: str) -> None:
        self.loop = loop
        self.loop_served = ""
        # Host files live under the home directory, not /tmp: inside the
        # sandbox /tmp is the sample's own scratch space, where writing is fine.
        home = Path(os.path.expanduser("~"))
        self.host_dir = home / f".evalsweep-hostile-{os.getpid()}-{secrets.token_hex(4)}"
        self.home_canary = self.host_dir / "canary"
        self.cwd_canary = self.host_dir / "cwd-canary"
        self.host_marker = self.host_dir / "marker"
        self.results_file = self.host_dir / "results.jsonl"
        self.places = {
            "home_canary": str(self.home_canary),
            "cwd_canary": str(self.cwd_canary),
            "host_marker": str(self.host_marker),
            "results_file": str(self.results_file),
            "sentinel": SENTINEL,
            "host_home": str(home),
        }
        self.results: dict[str, tuple[ExecutionResult, ExecutionResult]] = {}
        self.restarts = 0
        self.leftover_processes: dict[int, str] = {}

    def run(self) -> None:
        self.host_dir.mkdir()
        self.results_file.write_text('{"passed": true}\n')
        self.home_canary.write_text(CANARY)
        self.cwd_canary.write_text(CANARY)
        os.environ["EVALSWEEP_HOSTILE_CANARY"] = CANARY
        try:
            with ExecutionService(
                workers=2, limits=LIMITS, native_loop=self.loop == "C"
            ) as service:
                self.loop_served = service.report.sample_loop
                follow_up = ExecutionRequest(
                    NEXT_SAMPLE, test=FunctionTest(DEFAULT_TEST, "f"), key="next"
                )
                requests = []
                for case in CASES:
                    requests += [_request(case, self.places), follow_up]
                # Slices of two: each case and its follow-up run in order on one worker.
                results = service.run_many(requests, slice_items=2)
                for index, case in enumerate(CASES):
                    self.results[case.name] = (results[2 * index], results[2 * index + 1])
                self.restarts = sum(worker.restarts for worker in service._pool)
                zygotes = {
                    box._zygote_pid
                    for worker in service._pool
                    for box in (worker.sample_box, worker.judge_box)
                    if box is not None
                }
                uid_base = service._pool[0].settings.uid_base
                uids = set(range(uid_base, uid_base + 4 * service.workers))
                processes = _sandbox_users_processes(uids)
                ours = _zygote_processes({p for p in zygotes if p is not None}, processes)
                self.leftover_processes = {
                    pid: name for pid, (name, _, _) in processes.items() if pid not in ours
                }
        finally:
            os.environ.pop("EVALSWEEP_HOSTILE_CANARY", None)

    def remove_host_files(self) -> None:
        shutil.rmtree(self.host_dir, ignore_errors=True)


@pytest.fixture(scope="module", params=["C", "Python"], ids=["C-loop", "Python-loop"])
def batch(request: pytest.FixtureRequest) -> Iterator[Batch]:
    result = Batch(request.param)
    try:
        result.run()
        yield result
    finally:
        result.remove_host_files()


def test_the_suite_covers_at_least_thirty_hostile_samples() -> None:
    assert len(CASES) >= 30
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_hostile_sample_gets_its_verdict_and_harms_nothing(batch: Batch, case: Case) -> None:
    result, follow_up = batch.results[case.name]
    verdict = result.verdict
    assert verdict.status in case.statuses(), f"{verdict} stdout={result.stdout[:300]!r}"
    if case.reason is not None:
        assert case.reason in verdict.reason, verdict
    assert verdict.reason != "worker lost"
    if case.max_wall is not None:
        assert result.wall_seconds < case.max_wall, result
    for text in (result.stdout, result.stderr, verdict.detail, verdict.reason, follow_up.stdout):
        assert CANARY not in text
        assert SENTINEL not in text
        for marker in case.must_not_print:
            assert marker not in text
    # The next sample on the same worker ran, found no leftovers and passed.
    assert follow_up.verdict.status == "passed", follow_up.verdict


def test_the_batch_ran_under_the_loop_it_names(batch: Batch) -> None:
    # The C loop is built with the package (``setup.py``); without it every
    # sample would silently take the Python loop and this half would be a copy.
    assert batch.loop_served == batch.loop


def test_no_worker_was_replaced(batch: Batch) -> None:
    assert batch.restarts == 0


def test_no_sandbox_process_outlives_its_sample(batch: Batch) -> None:
    assert batch.leftover_processes == {}


def test_nothing_was_written_on_the_host(batch: Batch) -> None:
    assert not batch.host_marker.exists()
    assert batch.results_file.read_text() == '{"passed": true}\n'
    assert batch.cwd_canary.read_text() == CANARY


def test_timeouts_are_enforced_at_the_deadline(batch: Batch) -> None:
    # Time a sample spends waiting for a CPU is not held against it, up to
    # five times its timeout in all.
    for case in CASES:
        result, _ = batch.results[case.name]
        limit = case.timeout or LIMITS.timeout
        if result.verdict.status == "timeout":
            assert limit <= result.wall_seconds < 5 * limit + 0.5, (case.name, result.wall_seconds)
