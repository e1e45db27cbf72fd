"""Code evaluation beyond one machine: slices of samples judged on ssh hosts or Ray workers.

:class:`DistributedJudge` stands where :func:`evalsweep.execution.evaluate_samples_file`
would start its local :class:`~evalsweep.execution.ExecutionService` (it has the
same ``start`` / ``run_many`` / ``workers`` / ``close``), so reading and
checking the input files, streaming every verdict to ``<results>.partial``,
resuming, the results file's order and pass@k are the local run's own code.
Only where a verdict is computed changes:

* the pending samples are cut into slices (at most 5 MB and a configurable
  number of samples each, smaller toward the end of the run so that the last
  slices the targets run at once end together; see
  :mod:`evalsweep.codeeval._slices`), the slices expected to take longest first
  (learned per test as verdicts come back);
* each slice is judged by ``evalsweep code-eval-slice`` (evalsweep's own
  sandbox) on a worker: over ssh on a host, or in one Ray task per slice with
  its CPU request; at most ``slices_per_host`` slices are in flight per host;
* each verdict is handed on the moment its line comes back;
* a slice whose worker dies (killed process, ssh drop, lost Ray node) keeps
  the verdicts that came back and its other samples are retried on a fresh
  worker (another host where there is one). A slice that dies twice is split
  in halves, so a sample that keeps killing its worker ends up alone and is
  judged ``error`` by itself after ``retries`` more deaths, never its slice.
  A run whose workers keep dying stops with an error (the verdicts back are
  kept in the partial file; the same command resumes).
"""

from __future__ import annotations

import collections
import contextlib
import queue
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from evalsweep.codeeval._slices import (
    DEFAULT_SLICE_SAMPLES,
    MAX_SLICE_BYTES,
    MIN_TAIL_SAMPLES,
    Slice,
    cut_slices,
    encode_slice,
    parse_line,
)
from evalsweep.codeeval._usage import BillingUnit, RunCost, Tariff
from evalsweep.errors import TargetError
from evalsweep.execution import (
    MAX_HASH_SEED,
    ExecutionRequest,
    ExecutionResult,
    Layer,
    SampleVerdict,
    SandboxReport,
)

OnLine = Callable[[str], None]
Note = Callable[[str], None]

#: SampleVerdict of a sample that ended its worker on every try.
KILLER_REASON = "worker killed"


class SliceDied(Exception):
    """The worker judging a slice ended before the slice did (retry the rest)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SliceTransport(Protocol):
    """A place slices run: an ssh host or a Ray cluster."""

    name: str

    def prepare(self, note: Note) -> dict[str, Any]:
        """Reach the workers and find evalsweep there; return the setup facts."""
        ...

    def slots(self) -> int:
        """Slices in flight here at once: as many as the workers start at once, no more."""
        ...

    def vcpus_per_slice(self) -> float:
        """CPUs one slice's worker holds (for the cost)."""
        ...

    def audit_begin(self, label: str, payload: bytes) -> int:
        """Record in the audit log that a slice is sent (called from the run's own thread)."""
        ...

    def run_slice(
        self, payload: bytes, label: str, on_line: OnLine, outcome: dict[str, int]
    ) -> None:
        """Judge one slice message, passing each stdout line of the worker to ``on_line``.

        Runs in a thread of its own; ``outcome`` gets ``exit_code`` and ``output_bytes``.

        Raises:
            SliceDied: the worker ended early (the caller retries what is left).
            TargetError: the target refused the work (no sandbox, not reachable).
        """
        ...

    def cancel(self) -> None:
        """Stop every slice in flight (the run is ending)."""
        ...


@dataclass
class _Attempt:
    slice: Slice
    transport: int
    label: str
    started: float = field(default_factory=time.monotonic)
    facts: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    audit: int | None = None
    outcome: dict[str, int] = field(default_factory=dict)


class DistributedJudge:
    """Judges samples on remote workers; a drop-in for ``ExecutionService`` in code-eval.

    Args:
        transports: where slices run (one or more targets).
        slice_samples: most samples per slice.
        slices_per_host: slices in flight per host (passed to the worker, which sizes
            its own sandbox pool to its share of the host).
        retries: how often a slice (or a lone sample) is retried after its worker died.
        workers: sandboxed workers per slice (default: the host's CPUs x 2 / slices_per_host).
        unsafe_no_sandbox: the workers run samples without isolation (trusted code only).
        note: where progress notes go (retries, setup).
        max_slice_bytes: the largest slice message.
        hash_seed: the ``PYTHONHASHSEED`` of every slice's sandboxes (default: one random
            seed for the whole run), so the run is judged as one local service would judge it.
    """

    def __init__(
        self,
        transports: Sequence[SliceTransport],
        *,
        slice_samples: int = DEFAULT_SLICE_SAMPLES,
        slices_per_host: int = 2,
        retries: int = 2,
        workers: int | None = None,
        unsafe_no_sandbox: bool = False,
        note: Note | None = None,
        max_slice_bytes: int = MAX_SLICE_BYTES,
        hash_seed: int | None = None,
    ) -> None:
        if not transports:
            raise ValueError("a distributed judge needs at least one target")
        if slice_samples < 1 or slices_per_host < 1 or retries < 0:
            raise ValueError("slice_samples and slices_per_host must be >= 1, retries >= 0")
        self.transports = list(transports)
        self.slice_samples = slice_samples
        self.slices_per_host = slices_per_host
        self.retries = retries
        self.slice_workers = workers
        self.unsafe = unsafe_no_sandbox
        self.note = note or (lambda message: None)
        self.max_slice_bytes = max_slice_bytes
        if hash_seed is not None and not 0 <= hash_seed <= MAX_HASH_SEED:
            raise ValueError(f"hash_seed must be between 0 and {MAX_HASH_SEED}, got {hash_seed}")
        self.hash_seed = random.randrange(MAX_HASH_SEED + 1) if hash_seed is None else hash_seed
        self._report: SandboxReport | None = None
        self.setups: list[dict[str, Any]] = []
        self.workers_seen: dict[str, dict[str, Any]] = {}
        self.units: list[BillingUnit] = []
        self.retried: collections.Counter[str] = collections.Counter()
        self.isolated: list[int] = []
        self.slices = 0
        self.attempts = 0
        self.wall_seconds = 0.0
        self._costs: dict[object, tuple[float, int]] = {}

    # -- the Judge surface (codeeval._judge) -------------------------------------------------

    @property
    def workers(self) -> int:
        return sum(transport.slots() for transport in self.transports)

    def start(self) -> SandboxReport:
        """Reach every target and judge an empty slice there: its sandbox layers are the report.

        A target that cannot start a sandbox fails here, before any sample runs.
        """
        if self._report is not None:
            return self._report
        reports = []
        for index, transport in enumerate(self.transports):
            setup = transport.prepare(self.note)
            self.setups.append({"target": transport.name, **setup})
            attempt = _Attempt(Slice(-1, []), index, f"{transport.name} probe")
            events: list[str] = []
            payload = encode_slice([], self._options())
            entry = transport.audit_begin(attempt.label, payload)
            try:
                transport.run_slice(payload, attempt.label, events.append, attempt.outcome)
            except SliceDied as died:
                raise TargetError(
                    f"target {transport.name}: the sandbox probe ended early ({died.reason})"
                ) from None
            finally:
                outcome = attempt.outcome
                self._audit_end(transport, entry, outcome)
            for line in events:
                kind, value = parse_line(line)
                if kind == "start":
                    self._saw_worker(transport.name, value, probe=True)
                    reports.append(value["sandbox"])
        if not reports:
            raise TargetError("no target reported its sandbox")
        active = set.intersection(*(set(report["active"]) for report in reports))
        names = [*reports[0]["active"], *reports[0]["missing"]]
        layers = tuple(Layer(name, name in active) for name in names)
        self._report = SandboxReport(layers, unsafe=any(r["unsafe"] for r in reports))
        return self._report

    def close(self) -> None:
        for transport in self.transports:
            with contextlib.suppress(Exception):
                transport.cancel()

    def _options(self) -> dict[str, Any]:
        return {
            "workers": self.slice_workers,
            "slices_per_host": self.slices_per_host,
            "unsafe_no_sandbox": self.unsafe,
            "hash_seed": self.hash_seed,
        }

    @staticmethod
    def _audit_end(transport: SliceTransport, entry: int, outcome: dict[str, int]) -> None:
        runner = getattr(transport, "runner", None)
        if runner is not None:
            runner.end(entry, outcome.get("exit_code", -1), outcome.get("output_bytes", 0))

    # -- judging ------------------------------------------------------------------------------

    def run_many(
        self,
        requests: Sequence[ExecutionRequest],
        on_result: Callable[[int, ExecutionResult], None] | None = None,
    ) -> list[ExecutionResult]:
        """Judge ``requests`` on the targets; ``on_result(i, result)`` as each verdict returns.

        Callbacks are never called concurrently; results come back in the order of
        ``requests``.
        """
        from evalsweep.execution._service import group_by_test

        self.start()
        began = time.monotonic()
        results: list[ExecutionResult | None] = [None] * len(requests)
        if not requests:
            return []
        try:
            pieces = cut_slices(
                group_by_test(list(enumerate(requests))),
                self.slice_samples,
                self.max_slice_bytes,
                spread=self.workers,
            )
        except ValueError as exc:
            raise TargetError(f"cannot cut the samples into slices: {exc}") from None
        waiting = [Slice(number, piece) for number, piece in enumerate(pieces)]
        self.slices += len(waiting)
        events: queue.Queue[tuple[str, int, Any]] = queue.Queue()
        running: dict[int, _Attempt] = {}
        busy = [0] * len(self.transports)
        failed_on: dict[int, set[int]] = collections.defaultdict(set)
        deaths = 0
        budget = max(10, 2 * len(pieces)) + self.retries * 4
        next_id = 0

        def deliver(position: int, result: ExecutionResult, piece: Slice) -> None:
            if results[position] is not None:
                return
            results[position] = result
            piece.done.add(position)
            self._learn(requests[position], result)
            if on_result is not None:
                on_result(position, result)

        def launch(piece: Slice) -> bool:
            nonlocal next_id
            free = [i for i, t in enumerate(self.transports) if busy[i] < t.slots()]
            if not free:
                return False
            fresh = [i for i in free if i not in failed_on[piece.number]] or free
            index = min(fresh, key=lambda i: busy[i] / self.transports[i].slots())
            transport = self.transports[index]
            items = piece.remaining()
            payload = encode_slice(items, self._options())
            attempt_id = next_id
            next_id += 1
            label = f"slice {piece.number + 1} ({len(items)} samples, try {piece.deaths + 1})"
            attempt = _Attempt(piece, index, label)
            attempt.audit = transport.audit_begin(label, payload)
            running[attempt_id] = attempt
            busy[index] += 1
            self.attempts += 1

            def work() -> None:
                try:
                    transport.run_slice(
                        payload,
                        label,
                        lambda line: events.put(("line", attempt_id, line)),
                        attempt.outcome,
                    )
                except SliceDied as died:
                    events.put(("died", attempt_id, died.reason))
                except BaseException as error:  # refused, unreachable: the run stops
                    events.put(("fatal", attempt_id, error))
                else:
                    events.put(("ended", attempt_id, None))

            threading.Thread(target=work, name=f"evalsweep-{label}", daemon=True).start()
            return True

        try:
            while waiting or running:
                if waiting and any(busy[i] < t.slots() for i, t in enumerate(self.transports)):
                    waiting.sort(key=lambda piece: -self._expected(piece))
                    while waiting and launch(waiting[0]):
                        waiting.pop(0)
                kind, attempt_id, value = events.get()
                attempt = running[attempt_id]
                piece = attempt.slice
                if kind == "line":
                    what, data = parse_line(value)
                    if what == "verdict":
                        position, result = data
                        if position in piece.positions():
                            deliver(position, result, piece)
                    elif what == "start":
                        attempt.facts = data
                        self._saw_worker(self.transports[attempt.transport].name, data)
                    elif what == "end":
                        attempt.usage = data
                    continue
                del running[attempt_id]
                busy[attempt.transport] -= 1
                if attempt.audit is not None:
                    self._audit_end(self.transports[attempt.transport], attempt.audit,
                                    attempt.outcome)  # fmt: skip
                self._bill(attempt)
                if kind == "fatal":
                    raise value
                if kind == "ended" and not piece.remaining():
                    continue
                reason = value if kind == "died" else "the worker ended before its last verdict"
                if not piece.remaining():  # it died after its last verdict: nothing to redo
                    continue
                deaths += 1
                self.retried[reason] += 1
                failed_on[piece.number].add(attempt.transport)
                if deaths > budget:
                    raise TargetError(
                        f"workers died {deaths} times (last: {reason}); the verdicts that "
                        f"came back are kept, run the same command to resume"
                    )
                waiting.extend(self._after_death(piece, reason, deliver))
        except BaseException:
            for transport in self.transports:
                with contextlib.suppress(Exception):
                    transport.cancel()
            raise
        finally:
            self.wall_seconds += time.monotonic() - began
        return [result for result in results if result is not None]

    def _after_death(
        self, piece: Slice, reason: str, deliver: Callable[[int, ExecutionResult, Slice], None]
    ) -> list[Slice]:
        """What to run next for a slice whose worker died: itself, its halves, or nothing."""
        left = piece.remaining()
        if not left:
            return []
        piece.deaths += 1
        piece.items = left
        piece.done = set()
        self.note(f"{piece.lineage or 'slice ' + str(piece.number + 1)}: {reason}; retrying")
        if len(left) == 1:
            if piece.deaths > self.retries:
                position, request = left[0]
                detail = f"the sample's worker ended {piece.deaths} times ({reason})"
                self.isolated.append(position)
                deliver(position, ExecutionResult(SampleVerdict("error", KILLER_REASON, detail),
                                                  key=request.key), piece)  # fmt: skip
                return []
            return [piece]
        if piece.deaths < 2:
            return [piece]
        half = len(left) // 2
        return [
            Slice(piece.number, left[:half], deaths=1, lineage=f"slice {piece.number + 1}a"),
            Slice(piece.number, left[half:], deaths=1, lineage=f"slice {piece.number + 1}b"),
        ]

    # -- longest expected first -----------------------------------------------------------------

    def _learn(self, request: ExecutionRequest, result: ExecutionResult) -> None:
        key = request.test if request.test is not None else request.program
        mean, count = self._costs.get(key, (0.0, 0))
        count = min(count + 1, 16)
        self._costs[key] = (mean + (result.wall_seconds - mean) / count, count)

    def _expected(self, piece: Slice) -> float:
        """Expected seconds of a slice: its tests' mean costs so far (unknown ones: the median)."""
        known = [mean for mean, _ in self._costs.values()]
        default = statistics.median(known) if known else 1.0
        total = 0.0
        for _, request in piece.items:
            key = request.test if request.test is not None else request.program
            cost = self._costs.get(key)
            total += default if cost is None else cost[0]
        return total

    # -- the record -----------------------------------------------------------------------------

    def _saw_worker(self, target: str, facts: dict[str, Any], probe: bool = False) -> None:
        key = f"{target} · {facts.get('host', '?')}"
        seen = self.workers_seen.setdefault(key, {"target": target, **facts, "slices": 0})
        seen["slices"] += 0 if probe else 1

    def _bill(self, attempt: _Attempt) -> None:
        usage = attempt.usage or {}
        wall = float(usage.get("wall_seconds", time.monotonic() - attempt.started))
        self.units.append(
            BillingUnit(
                label=f"{self.transports[attempt.transport].name} {attempt.label}",
                vcpus=self.transports[attempt.transport].vcpus_per_slice(),
                wall_seconds=wall,
                peak_memory_mb=float(usage.get("peak_memory_mb", 0.0)),
                cpu_seconds=float(usage.get("cpu_seconds", 0.0)),
            )
        )

    def cost(self, samples: int, wall_seconds: float, tariff: Tariff | None) -> RunCost:
        return RunCost(samples, wall_seconds, list(self.units), tariff)

    def record(self) -> dict[str, Any]:
        """How the run was distributed: targets, slices, retries and each worker's setup."""
        report = self._report
        differs = [
            key
            for key, facts in self.workers_seen.items()
            if report is not None and set(facts["sandbox"]["active"]) != set(report.active)
        ]
        return {
            "path": "distributed",
            "targets": [t.name for t in self.transports],
            "slice_samples": self.slice_samples,
            "tail_slice_samples": min(self.slice_samples, MIN_TAIL_SAMPLES),
            "slices_at_once": self.workers if self._report is not None else None,
            "max_slice_bytes": self.max_slice_bytes,
            "slices_per_host": self.slices_per_host,
            "hash_seed": self.hash_seed,
            "slices": self.slices,
            "slice_attempts": self.attempts,
            "slices_retried": sum(self.retried.values()),
            "retried_because": dict(self.retried),
            "samples_judged_alone_as_error": len(self.isolated),
            "setup": self.setups,
            "workers": list(self.workers_seen.values()),
            "sandbox_differs_on": differs,
        }
