"""The Open LLM Leaderboard (v1) suite: evalsweep against lm-evaluation-harness, speed and scores.

Both harnesses score the same locally built GPT-2-architecture checkpoint (random
weights, float32, CPU) on the same local data, each in one process: evalsweep with
``--tasks leaderboard``; lm-eval with its own six task YAMLs (only the dataset source
changed, see ``_lm_eval_tasks.py``), each with the suite's few-shot count written into
it (ARC-Challenge 25, HellaSwag 10, MMLU 5, TruthfulQA MC2 0, Winogrande 5, GSM8K 5).
``--limit N`` is each side's: the first N documents of every task (of every MMLU subject).

Printed, and appended to benchmarks/RESULTS.md: each side's wall clock and CPU time
(process start to exit, model load included), the ratio, and both harnesses' aggregate
scores side by side (they must be the same numbers).

Example (about 10 minutes on 2 CPU cores)::

    python benchmarks/leaderboard_lm_eval.py --limit 10
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import re
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _lm_eval_tasks import (  # noqa: E402
    DEFAULT_DATA_DIR,
    PREFIX,
    append_results_md,
    build_local_checkpoint,
    evalsweep_command,
    lm_eval_command,
    machine_and_versions,
    read_evalsweep_output,
    read_lm_eval_output,
    run_measured,
    warm_datasets_cache,
    write_task_dir,
)
from evalsweep.tasks import SUITES  # noqa: E402
from parity_lm_eval import aggregate_tolerance, lm_eval_aggregates  # noqa: E402

MEMBERS = SUITES["leaderboard"].members


def set_fewshot(task_dir: Path) -> None:
    """Write each member's few-shot count into its local lm-eval YAML(s)."""
    shots = dict(MEMBERS)
    for path in sorted(task_dir.rglob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        match = re.search(r"^task: (\S+)$", text, re.MULTILINE)
        if match is None:
            continue  # a group file
        name = match.group(1).removeprefix(PREFIX)
        name = "mmlu" if name.startswith("mmlu_") else name
        if name not in shots:
            continue
        line = f"num_fewshot: {shots[name]}\n"
        if re.search(r"^num_fewshot: .*$", text, re.MULTILINE):
            text = re.sub(r"^num_fewshot: .*\n", line, text, flags=re.MULTILINE)
        else:
            text += ("" if text.endswith("\n") else "\n") + line
        path.write_text(text, encoding="utf-8")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=10, help="first N documents of each task")
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--lm-eval-batch-size", default="1")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--no-results-md", action="store_true", help="don't append RESULTS.md")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="evalsweep-leaderboard-"))
    work.mkdir(parents=True, exist_ok=True)
    data_dir = args.data_dir.resolve()
    print(f"work dir: {work}")
    ckpt = build_local_checkpoint(
        work / "ckpt", data_dir=data_dir, n_layer=args.n_layer, width=args.width
    )
    include = write_task_dir(work / "lm_eval_tasks", data_dir)
    set_fewshot(include)
    warm_datasets_cache(include)

    names = ",".join(PREFIX + name for name, _ in MEMBERS)
    cmd = lm_eval_command(
        ckpt, names, include, work / "lm_eval", limit=args.limit,
        batch_size=args.lm_eval_batch_size,
    )  # fmt: skip
    at = cmd.index("--num_fewshot")
    del cmd[at : at + 2]  # each YAML carries its own count
    lm = run_measured(cmd, work / "lm_eval.log")
    print(f"lm-eval   {lm.wall_s:7.1f} s wall, {lm.cpu_s:7.1f} s CPU, rc={lm.returncode}")
    if lm.returncode:
        raise SystemExit(f"lm-eval failed, see {work / 'lm_eval.log'}")
    es_out = work / "evalsweep"
    cmd = evalsweep_command(
        [ckpt], "leaderboard", data_dir, es_out, store=work / "store.db", limit=args.limit,
        num_fewshot=None,
    )  # fmt: skip
    es = run_measured(cmd, work / "evalsweep.log")
    print(f"evalsweep {es.wall_s:7.1f} s wall, {es.cpu_s:7.1f} s CPU, rc={es.returncode}")
    if es.returncode:
        raise SystemExit(f"evalsweep failed, see {work / 'evalsweep.log'}")

    results, _ = read_lm_eval_output(work / "lm_eval")
    theirs = lm_eval_aggregates(results)
    _, mine = read_evalsweep_output(es_out)
    rows = [
        "| aggregate | lm-eval | evalsweep | same |",
        "| --- | --- | --- | --- |",
    ]
    differ = 0
    wanted = [
        "arc_challenge acc", "arc_challenge acc_norm", "hellaswag acc", "hellaswag acc_norm",
        "mmlu", "truthfulqa_mc2 acc", "winogrande acc", "gsm8k exact_match,strict-match",
        "gsm8k exact_match,flexible-extract",
    ]  # fmt: skip
    for name in wanted:
        lv, ls, _ = theirs.get(name, (math.nan, math.nan, 0))
        ev, estd, _ = mine.get(name, (math.nan, math.nan, 0))
        tol = aggregate_tolerance(name)  # MC2's mean of continuous masses: 1e-6
        same = math.isclose(lv, ev, abs_tol=tol) and math.isclose(ls, estd, abs_tol=tol)
        differ += not same
        rows.append(
            f"| {name} | {lv:.4f} ± {ls:.4f} | {ev:.4f} ± {estd:.4f} | {'yes' if same else 'NO'} |"
        )
    ratio = es.wall_s / lm.wall_s
    summary = [
        f"lm-eval (batch size {args.lm_eval_batch_size}): {lm.wall_s:.1f} s wall, "
        f"{lm.cpu_s:.1f} s CPU, peak RSS {lm.peak_rss_mib:.0f} MiB, "
        f"load before {lm.load_before:.1f}",
        f"evalsweep: {es.wall_s:.1f} s wall, {es.cpu_s:.1f} s CPU, peak RSS "
        f"{es.peak_rss_mib:.0f} MiB, load before {es.load_before:.1f}",
        f"evalsweep / lm-eval: {ratio:.2f} wall, {es.cpu_s / lm.cpu_s:.2f} CPU",
    ]
    print("\n".join(["", *summary, "", *rows]))
    if not args.no_results_md:
        append_results_md(section(args, summary, rows))
        print("appended to benchmarks/RESULTS.md")
    return 1 if differ else 0


def section(args: argparse.Namespace, summary: Sequence[str], rows: Sequence[str]) -> str:
    info: dict[str, Any] = machine_and_versions()
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = shlex.join(["python", "benchmarks/leaderboard_lm_eval.py", *sys.argv[1:]])
    counts = ", ".join(f"{name} {shots}-shot" for name, shots in MEMBERS)
    return "\n".join(
        [
            "",
            f"## evalsweep vs lm-eval: the leaderboard suite, {when}",
            "",
            "; ".join(f"{k}: {v}" for k, v in info.items()),
            "",
            f"GPT-2 architecture, {args.n_layer} layers, width {args.width}, random weights, "
            f"float32, CPU; {counts}; first {args.limit} documents of each task (of each MMLU "
            "subject); one process per harness (`evalsweep run --tasks leaderboard`; lm-eval "
            "with the six local YAMLs, each carrying its count).",
            "",
            *[f"- {line}" for line in summary],
            "",
            *rows,
            "",
            f"Command: `{command}`",
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
