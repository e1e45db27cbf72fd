"""A two-checkpoint sweep on a Ray cluster of one worker, then of two: the speed-up.

Both runs use the same ``RayTarget`` on a local Ray cluster started by this
script: first ``ray.init(num_cpus=1)`` (one worker at a time), then
``ray.init(num_cpus=2)`` (two). Each Ray task asks for one CPU, so Ray runs
one or two of them at once and each uses one thread. Workers are started and
have imported evalsweep and torch before the clock starts, as on a running
cluster. Each run starts from an empty store, so every question is computed;
the script checks that both runs stored the same per-question results, then
prints both times and the ratio (target: two workers at least 1.7x faster).

Usage: ``python benchmarks/ray_scaling.py [--limit N] [--write]`` (``--write``
appends the figures to ``benchmarks/RESULTS.md``). Run it on a quiet machine:
the ratio measures spare cores as much as Ray.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from evalsweep.compute import RayTarget, SweepJob
from evalsweep.engine import SilentProgress, SweepSpec
from evalsweep.store import Store

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
TASKS = ["mmlu_abstract_algebra", "mmlu_anatomy"]
LAYERS = 4
WIDTH = 256


def _data_dir() -> Path:
    return Path(os.environ.get("EVALSWEEP_DATA_DIR") or ROOT.parent / "shared" / "data")


def _checkpoints(folder: Path, data_dir: Path) -> list[str]:
    """Two small GPT-2 checkpoints (random weights, different seeds), built here."""
    from evalsweep.demo import build_checkpoint, build_tokenizer, corpus_from_data_dir

    tokenizer = build_tokenizer(corpus_from_data_dir(data_dir, max_lines=3000), vocab_size=1024)
    return [
        str(
            build_checkpoint(
                folder / f"ckpt-{seed}",
                tokenizer,
                n_layer=LAYERS,
                width=WIDTH,
                n_head=4,
                max_positions=2048,
                architecture="gpt2",
                seed=seed,
            )  # fmt: skip
        )
        for seed in (0, 1)
    ]


def _warm_workers(count: int) -> None:
    """Start ``count`` workers and import the engine in each before timing."""
    import ray

    @ray.remote(num_cpus=1)
    def warm() -> int:
        import torch  # noqa: F401
        from transformers import AutoTokenizer, GPT2LMHeadModel  # noqa: F401

        import evalsweep.engine  # noqa: F401
        import evalsweep.models.hf  # noqa: F401
        import evalsweep.tasks.mmlu  # noqa: F401

        time.sleep(1.0)  # hold the worker so the next warm-up lands on another one
        return os.getpid()

    ray.get([warm.remote() for _ in range(count)])


def _timed_run(workers: int, spec: SweepSpec, folder: Path) -> tuple[float, dict[tuple, tuple]]:
    import ray

    ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    try:
        _warm_workers(workers)
        with Store(folder / f"ray-{workers}.sqlite") as store:
            began = time.perf_counter()
            ran = RayTarget(name=f"ray-{workers}").run(SweepJob(spec), store, SilentProgress())
            seconds = time.perf_counter() - began
            tasks = ran.compute["ray_task_seconds"]
            print(f"{workers} worker(s): {seconds:.1f} s wall; Ray tasks took {sum(tasks):.1f} s "
                  f"in all ({', '.join(f'{t:.1f}' for t in tasks)})")  # fmt: skip
            rows = {
                (r.checkpoint, r.task, r.doc_key): (r.prediction, r.correct, r.metrics)
                for r in store.records()
            }
    finally:
        ray.shutdown()
    return seconds, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=100, help="questions per MMLU subject")
    parser.add_argument("--write", action="store_true", help="append the figures to RESULTS.md")
    args = parser.parse_args()
    data_dir = _data_dir()
    with tempfile.TemporaryDirectory(prefix="evalsweep-ray-bench-") as tmp:
        folder = Path(tmp)
        checkpoints = _checkpoints(folder, data_dir)
        spec = SweepSpec(checkpoints, TASKS, str(data_dir), limit=args.limit)
        one, rows_one = _timed_run(1, spec, folder)
        two, rows_two = _timed_run(2, spec, folder)
    same = rows_one == rows_two
    ratio = one / two
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"one worker:  {one:.1f} s")
    print(f"two workers: {two:.1f} s")
    print(f"speed-up: {ratio:.2f}x (target >= 1.7x); same per-question results: {same}")
    print(f"{len(rows_one)} rows; load average {load}; {os.cpu_count()} CPUs")
    if args.write:
        with RESULTS.open("a") as handle:
            handle.write(
                f"\n## Ray scaling: two-checkpoint sweep on one and two workers "
                f"({datetime.now(UTC).date()})\n\n"
                f"`python benchmarks/ray_scaling.py --limit {args.limit}`: 2 GPT-2 checkpoints "
                f"({LAYERS} layers, width {WIDTH}), {', '.join(TASKS)}, "
                f"{len(rows_one)} rows per run.\n\n"
                f"- machine: {platform.processor() or platform.machine()}, "
                f"{os.cpu_count()} CPUs, load average {load}\n"
                f"- ray: {metadata.version('ray')}, torch: {metadata.version('torch')}\n\n"
                f"| one worker | two workers | speed-up | same results |\n|---|---|---|---|\n"
                f"| {one:.1f} s | {two:.1f} s | **{ratio:.2f}x** | {same} |\n"
            )


if __name__ == "__main__":
    main()
