"""``evalsweep demo``: three training steps of one small run, compared offline.

The demo trains a tiny GPT-2 for a few hundred steps on shipped GSM8K and
MMLU text, saving checkpoints along the way, then runs the real pipeline
(store, backend, tasks, statistics, table) on slices of real benchmark data.
Nothing is hard-coded: the scores are whatever these checkpoints earn.
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console

from evalsweep.demo._build import build_checkpoint, build_tokenizer
from evalsweep.jsonl import read_values

DATA = Path(__file__).parent / "data"
STEPS = (0, 50, 150)


def demo_corpus() -> list[str]:
    """Text of the shipped slices: GSM8K training solutions and MMLU dev questions."""
    texts = []
    for _, doc in read_values(DATA / "gsm8k" / "train.jsonl"):
        texts.append(f"Question: {doc['question']}\nAnswer: {doc['answer']}\n\n")
    for path in sorted((DATA / "mmlu").glob("dev/*.csv")):
        with path.open(newline="", encoding="utf-8") as handle:
            for row in csv.reader(handle):
                choices = "".join(
                    f"\n{letter}. {text}" for letter, text in zip("ABCD", row[1:5], strict=True)
                )
                texts.append(f"{row[0]}{choices}\nAnswer: {row[5]}\n\n")
    return texts


def train_checkpoints(workdir: Path, steps: tuple[int, ...] = STEPS, seed: int = 0) -> list[Path]:
    """Train one tiny model, saving a checkpoint at each of ``steps``."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.logging.set_verbosity_error()
    texts = demo_corpus()
    tokenizer = build_tokenizer(texts, vocab_size=1024)
    first = build_checkpoint(
        workdir / f"step-{steps[0]}", tokenizer, n_layer=2, width=128, seed=seed
    )
    model = AutoModelForCausalLM.from_pretrained(first)
    stream = torch.tensor(
        [t for text in texts for t in tokenizer.encode(text) + [tokenizer.eos_token_id]]
    )
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    saved = [first]
    block, batch = 128, 8
    for step in range(1, steps[-1] + 1):
        starts = torch.randint(0, len(stream) - block - 1, (batch,))
        x = torch.stack([stream[s : s + block] for s in starts.tolist()])
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step in steps:
            path = workdir / f"step-{step}"
            model.save_pretrained(path, safe_serialization=True)
            tokenizer.save_pretrained(path)
            saved.append(path)
    return saved


def run_demo(
    workdir: Path | None = None, console: Console | None = None, quiet: bool = False
) -> dict[str, Any]:
    """Build the checkpoints, run MMLU and GSM8K slices, and return the result document."""
    from evalsweep.engine import SweepSpec, run_sweep
    from evalsweep.models import BackendOptions
    from evalsweep.report import RichProgress, results_document
    from evalsweep.store import Store
    from evalsweep.tasks.mmlu import MMLU

    console = console or Console(stderr=True)
    holder = None
    if workdir is None:
        holder = tempfile.TemporaryDirectory(prefix="evalsweep-demo-")
        workdir = Path(holder.name)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if not quiet:
            console.print(
                f"training a tiny GPT-2 and saving steps {STEPS} in {workdir}",
                style="dim",
                markup=False,
            )
        paths = train_checkpoints(workdir)
        subjects = sorted(
            p.name.removesuffix("_test.csv") for p in (DATA / "mmlu" / "test").glob("*.csv")
        )
        spec = SweepSpec(
            checkpoints=[str(p) for p in paths],
            tasks=[MMLU(subjects=subjects), "gsm8k"],
            data_dir=str(DATA),
            options=BackendOptions(device="cpu", dtype="float32"),
        )
        with Store(workdir / "results.sqlite") as store:
            with RichProgress(console, enabled=not quiet) as progress:
                result = run_sweep(spec, store, progress)
            comparisons = _comparisons(result)
            document = results_document(result, ["evalsweep", "demo"], comparisons)
            store.save_run(result.run_id, document)
        return document
    finally:
        if holder is not None:
            holder.cleanup()


def _comparisons(result: Any) -> list[dict[str, Any]]:
    from evalsweep.comparison import compare_results

    return [c.to_dict() for c in compare_results(result)]
