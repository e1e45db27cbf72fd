"""A training run of 50 checkpoints on an MMLU slice: run, store, compare, report, watch.

Trains a tiny GPT-2 with transformers' Trainer for 50 steps, saving every step
(``checkpoint-1`` ... ``checkpoint-50``, with optimizer files, as a real run
writes them), then times, each in a fresh interpreter as a person types it:

- ``evalsweep run RUN --tasks mmlu --limit N`` (all 50 checkpoints, scored),
- the store's size on disk,
- ``evalsweep compare RUN --tasks mmlu`` and ``--subjects`` (from the store),
- ``evalsweep report RUN --tasks mmlu --html``,
- the widest line of the terminal trend view on a 100-column console,
- a resumed ``evalsweep watch RUN`` (every checkpoint already stored): the time to
  its first idle poll and the CPU it uses while idle.

    python benchmarks/run_trend.py --workdir /tmp/run-trend --limit 2

The results go to stdout as Markdown, for ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
EVALSWEEP = [sys.executable, "-m", "evalsweep"]


def train(out: Path, steps: int) -> Path:
    """A tiny GPT-2 trained by Trainer on MMLU-ish text, saving every step."""
    import torch
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainingArguments,
        default_data_collator,
    )

    from evalsweep.demo import build_tokenizer, corpus_from_data_dir
    from evalsweep.demo._build import EOS

    tokenizer = build_tokenizer(corpus_from_data_dir(DATA, max_lines=3000), vocab_size=1024)
    torch.manual_seed(0)
    eos = tokenizer.convert_tokens_to_ids(EOS)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=1024, n_embd=32, n_layer=2, n_head=2,
        bos_token_id=eos, eos_token_id=eos,
    )  # fmt: skip
    if tokenizer.pad_token is None:
        tokenizer.pad_token = EOS
    lines = corpus_from_data_dir(DATA, max_lines=400)
    rows = []
    for line in lines:
        ids = tokenizer(line, truncation=True, max_length=64, padding="max_length")["input_ids"]
        rows.append({"input_ids": ids, "labels": ids})
    arguments = TrainingArguments(
        output_dir=str(out), max_steps=steps, save_steps=1, per_device_train_batch_size=8,
        learning_rate=3e-3, report_to=[], use_cpu=True, logging_strategy="no",
        disable_tqdm=True, save_safetensors=True,
    )  # fmt: skip
    Trainer(
        model=GPT2LMHeadModel(config),
        args=arguments,
        train_dataset=rows,
        processing_class=tokenizer,
        data_collator=default_data_collator,
    ).train()
    return out


def timed(args: list[Any], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    began = time.perf_counter()
    done = subprocess.run(
        [*EVALSWEEP, *map(str, args)], env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - began
    if done.returncode not in (0, 3):
        sys.exit(f"evalsweep {' '.join(map(str, args))} failed:\n{done.stderr[-3000:]}")
    return seconds, done


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def watch_idle(
    run: Path, common: list[Any], env: dict[str, str], idle: float
) -> tuple[float, float]:
    """Seconds until a resumed watch is idle, and its CPU seconds over ``idle`` seconds then."""
    began = time.perf_counter()
    process = subprocess.Popen(
        [*EVALSWEEP, "watch", str(run), *map(str, common), "--interval", "1", "--settle", "0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stderr is not None
    for line in process.stderr:
        if "already in the store" in line:
            break
    ready = time.perf_counter() - began
    time.sleep(1.5)  # the sweep's document is written; the loop is polling now
    before = cpu_seconds(process.pid)
    time.sleep(idle)
    used = cpu_seconds(process.pid) - before
    process.terminate()
    process.wait(30)
    return ready, used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--limit", type=int, default=2, help="MMLU questions per subject")
    parser.add_argument("--idle", type=float, default=30.0)
    options = parser.parse_args()
    work = options.workdir
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "100"}
    env["PYTHONPATH"] = str(REPO / "src")
    run = work / "run"
    began = time.perf_counter()
    if not run.is_dir():
        train(run, options.steps)
    trained = time.perf_counter() - began
    store = work / "results.sqlite"
    store.unlink(missing_ok=True)
    common = ["--tasks", "mmlu", "--store", store]
    compute = [*common, "--data-dir", DATA, "--limit", options.limit, "--num-fewshot", 0,
               "--device", "cpu"]  # fmt: skip
    run_s, ran = timed(["run", run, *compute, "--no-color"], env)
    size = store.stat().st_size
    compare_s, compared = timed(["compare", run, *common, "--json"], env)
    subjects_s, _ = timed(["compare", run, *common, "--subjects", "--no-color"], env)
    report_s, _ = timed(["report", run, *common, "--html", work / "trend.html"], env)
    document = json.loads(compared.stdout)

    from rich.console import Console

    from evalsweep.report import parse_document, render_trend

    console = Console(width=100, record=True, color_system=None, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(render_trend(parse_document(compared.stdout, "compare")))
    widest = max(len(line) for line in console.export_text().splitlines())
    ready_s, idle_cpu = watch_idle(run, compute, env, options.idle)

    headline = [c for c in document["comparisons"] + document["previous"] if not c["subject"]]
    moved = sum(c["verdict"] != "no significant change" for c in headline)
    questions = max(r["n"] for r in document["results"] if r["level"] == "task")
    print(f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}")  # fmt: skip
    print(f"- run: {len(document['steps'])} checkpoints (Trainer, {trained:.0f} s to train), "
          f"MMLU {questions} questions (--limit {options.limit}), 0-shot")  # fmt: skip
    print(f"- `evalsweep run RUN --tasks mmlu`: {run_s:.1f} s wall "
          f"({run_s / len(document['steps']):.2f} s per checkpoint)")  # fmt: skip
    print(f"- store: {size / 1e6:.1f} MB")
    print(f"- `compare RUN` (from the store): {compare_s:.1f} s; `--subjects`: {subjects_s:.1f} s; "
          f"{len(document['comparisons'])} rows against the baseline, "
          f"{len(document['previous'])} against the checkpoint before; "
          f"{moved} of {len(headline)} headline rows significant")  # fmt: skip
    html_mb = (work / "trend.html").stat().st_size / 1e6
    print(f"- `report RUN --html`: {report_s:.1f} s ({html_mb:.1f} MB)")
    print(f"- terminal trend view on 100 columns: widest line {widest} characters")
    print(f"- resumed `watch RUN`: idle after {ready_s:.1f} s; {idle_cpu:.2f} CPU s in "
          f"{options.idle:.0f} s idle")  # fmt: skip
    print(ran.stdout[-2500:])


if __name__ == "__main__":
    main()
