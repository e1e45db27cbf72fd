"""How long do ``compare``, ``flips`` and ``report`` take on a large store?

Builds three tiny real checkpoints and fills a real store with their full MMLU
(14,042 questions each) and GSM8K (1,319) rows through ``run_sweep`` (real
prompts, real scoring, real store writes: 46,083 rows). The answers are
synthesized by a seeded stand-in backend instead of the models, because what
is measured is the store-to-report path, which never loads a model. Then each
command runs in a fresh interpreter, as a person runs it, and the best of
``--repeat`` wall and CPU times is printed, with whether torch or transformers
were imported and what a stored row holds.

    python benchmarks/compare_speed.py --store /tmp/compare.sqlite --before OLD/src

``--store`` keeps the filled store between runs (it is filled only when
absent); ``--python-path`` times another checkout's code on the same store.
``--before`` also times the code at ``OLD/src`` (a checkout before a change),
the two taking turns run by run so that load drift affects both alike, prints
before / after ratios, and checks that ``compare --json`` gives the same
results and comparisons (every number and verdict) under both.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

from evalsweep.requests import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult
from evalsweep.store import Store

CHECKPOINTS = ("model-a", "model-b", "model-c")
COMMANDS = {
    "compare": ["compare", "{a}", "{b}", "{c}", "--tasks", "mmlu,gsm8k"],
    "compare --subjects": ["compare", "{a}", "{b}", "{c}", "--tasks", "mmlu,gsm8k", "--subjects"],
    "flips": ["flips", "{b}", "--baseline", "{a}", "--tasks", "mmlu,gsm8k"],
    "report": [
        "report",
        "{a}",
        "{b}",
        "{c}",
        "--tasks",
        "mmlu,gsm8k",
        "--html",
        "{out}/report.html",
        "--markdown",
        "{out}/report.md",
    ],  # fmt: skip
}
PROBE = (
    "import runpy, sys\n"
    "sys.argv = ['evalsweep', *sys.argv[1:]]\n"
    "try:\n"
    "    runpy.run_module('evalsweep', run_name='__main__')\n"
    "finally:\n"
    "    heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
    "    sys.stderr.write(f'HEAVY={heavy}\\n')\n"
)


class SeededAnswers:
    """A stand-in backend: answers are a hash of the checkpoint and the request."""

    name = "hf"

    def __init__(self, seed: str) -> None:
        self.seed = seed

    def _unit(self, text: str) -> float:
        digest = hashlib.sha256(f"{self.seed}\0{text}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], progress: object = None
    ) -> list[LoglikelihoodResult]:
        return [
            LoglikelihoodResult(-10 * self._unit(r.key()), self._unit("g" + r.key()) < 0.2)
            for r in requests
        ]

    def generate_until(
        self, requests: Sequence[GenerationRequest], progress: object = None
    ) -> list[str]:
        return [
            f" The steps are short. The answer is {int(self._unit(r.key()) * 100)}."
            for r in requests
        ]

    def settings(self) -> dict[str, object]:
        return {}

    def describe(self) -> dict[str, object]:
        return {"stand_in": "seeded answers"}

    def close(self) -> None:
        return None


def fill_store(store_path: Path, data_dir: Path, root: Path) -> list[str]:
    import evalsweep.engine._sweep as sweep_module
    from evalsweep.demo import build_checkpoint, build_tokenizer, corpus_from_data_dir
    from evalsweep.engine import SweepSpec, run_sweep
    from evalsweep.models import BackendOptions

    tokenizer = build_tokenizer(corpus_from_data_dir(data_dir, max_lines=2000), vocab_size=512)
    references = []
    for seed, name in enumerate(CHECKPOINTS):
        path = build_checkpoint(
            root / name, tokenizer, n_layer=1, width=16, n_head=2, max_positions=64,
            architecture="gpt2", seed=seed,
        )  # fmt: skip
        references.append(str(path))
    sweep_module.load_backend = lambda name, checkpoint, options: SeededAnswers(  # type: ignore[assignment]
        checkpoint.identity
    )
    spec = SweepSpec(
        checkpoints=references,
        tasks=["mmlu", "gsm8k"],
        data_dir=str(data_dir),
        options=BackendOptions(device="cpu", dtype="float32"),
    )
    with Store(store_path) as store:
        run_sweep(spec, store)
    return references


def row_sizes(store_path: Path) -> dict[str, float]:
    columns = ("requests", "responses", "details", "document", "metrics")
    with closing(sqlite3.connect(store_path)) as conn:
        rows = conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0]
        sizes = {
            column: conn.execute(f"SELECT AVG(LENGTH({column})) FROM samples").fetchone()[0]
            for column in columns
        }
    sizes["rows"] = rows
    sizes["file_bytes_per_row"] = store_path.stat().st_size / rows
    return sizes


def time_command(
    argv: list[str], env: dict[str, str], repeat: int
) -> tuple[float, float, str, int]:
    """Best wall time and best CPU time (user + system) of ``repeat`` runs."""
    times = []
    cpu = []
    heavy = "?"
    code = 0
    for _ in range(repeat):
        used = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True
        )
        times.append(time.perf_counter() - began)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - used.ru_utime + after.ru_stime - used.ru_stime)
        code = done.returncode
        for line in done.stderr.splitlines():
            if line.startswith("HEAVY="):
                heavy = line[6:]
    return min(times), min(cpu), heavy, code


def store_for_version_3(store_path: Path) -> Path:
    """A copy of the store as store schema 3 wrote it, for code from before schema 4.

    Schema 4 only added the ``samples_scores`` index (``SCORES_INDEX``), so dropping it
    and setting the version back gives the very file schema 3 code writes and reads.
    """
    copy = store_path.with_name(store_path.stem + ".schema3.sqlite")
    if not copy.exists():
        with closing(sqlite3.connect(store_path)) as source, closing(sqlite3.connect(copy)) as to:
            source.backup(to)
            if to.execute("PRAGMA user_version").fetchone()[0] == 4:
                to.execute("DROP INDEX IF EXISTS samples_scores")
                to.execute("PRAGMA user_version = 3")
                to.commit()
                to.execute("VACUUM")
    return copy


def same_numbers(argv: list[str], env: dict[str, str], old_env: dict[str, str]) -> bool:
    """``compare --json`` under both codes: the same result rows and comparisons."""
    found = []
    for run_env in (env, old_env):
        done = subprocess.run(
            [sys.executable, "-m", "evalsweep", *argv, "--json"],
            env=run_env,
            capture_output=True,
            text=True,
            check=True,
        )
        document = json.loads(done.stdout)
        found.append((document["results"], document["comparisons"]))
    return found[0] == found[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(Path(__file__).parents[2] / "shared" / "data"))
    parser.add_argument("--store", type=Path, help="Keep the filled store here.")
    parser.add_argument("--python-path", help="PYTHONPATH for the timed commands.")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", help="PYTHONPATH of the code to compare with (OLD/src).")
    parser.add_argument(
        "--commands", default=",".join(COMMANDS), help=f"Some of: {', '.join(COMMANDS)}."
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.store.parent if args.store else tmp)
        store_path = args.store or root / "store.sqlite"
        references = [str(root / name) for name in CHECKPOINTS]
        if not store_path.exists():
            began = time.perf_counter()
            references = fill_store(store_path, Path(args.data_dir), root)
            print(f"filled {store_path} in {time.perf_counter() - began:.0f} s")
        sizes = row_sizes(store_path)
        print(
            f"{sizes['rows']} rows, {store_path.stat().st_size / 2**20:.0f} MiB, "
            f"{sizes['file_bytes_per_row'] / 1024:.1f} KiB a row on disk; average bytes: "
            + ", ".join(f"{k} {sizes[k]:.0f}" for k in ("requests", "responses", "details",
                                                       "document", "metrics"))
            , flush=True,
        )  # fmt: skip
        env = dict(os.environ, EVALSWEEP_STORE=str(store_path), COLUMNS="200")
        if args.python_path:
            env["PYTHONPATH"] = args.python_path
        values = {"a": references[0], "b": references[1], "c": references[2], "out": str(root)}
        if args.before:
            with Store(store_path):  # open once: an older store is upgraded here, not timed
                pass
            old_store = store_for_version_3(store_path)
            old_env = dict(env, PYTHONPATH=args.before, EVALSWEEP_STORE=str(old_store))
        print(
            f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
            f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}"
        )
        for label in args.commands.split(","):
            template = COMMANDS[label]
            argv = [part.format(**values) for part in template]
            if not args.before:
                seconds, cpu, heavy, code = time_command(argv, env, args.repeat)
                print(
                    f"{label:20s} wall {seconds:6.2f} s  cpu {cpu:6.2f} s  exit {code}  "
                    f"torch/transformers imported: {heavy}",
                    flush=True,
                )
                continue
            runs: dict[str, list[tuple[float, float, str, int]]] = {"before": [], "after": []}
            for _ in range(args.repeat):  # in turns: load drift affects both alike
                runs["before"].append(time_command(argv, old_env, 1))
                runs["after"].append(time_command(argv, env, 1))
            best = {
                name: (min(r[0] for r in found), min(r[1] for r in found), found[-1][2:])
                for name, found in runs.items()
            }
            (old_wall, old_cpu, (_, old_code)), (wall, cpu, (heavy, code)) = (
                best["before"],
                best["after"],
            )
            print(
                f"{label:20s} before: wall {old_wall:6.2f} s cpu {old_cpu:6.2f} s (exit {old_code})"
                f"  after: wall {wall:6.2f} s cpu {cpu:6.2f} s (exit {code})  "
                f"before/after: wall {old_wall / wall:.2f}x cpu {old_cpu / cpu:.2f}x  "
                f"torch/transformers imported after: {heavy}",
                flush=True,
            )
        if args.before and "compare" in args.commands.split(","):
            argv = [part.format(**values) for part in COMMANDS["compare"]]
            same = same_numbers(argv, env, old_env)
            print(f"compare --json, same results and comparisons before and after: {same}")


if __name__ == "__main__":
    main()
