"""``evalsweep demo``: one small training run whose later checkpoint quietly regresses.

The story is the one evalsweep exists for, and every score in it is earned. A
tiny GPT-2 is fine-tuned in three lessons on two shipped benchmark slices (an
MMLU slice and an ARC-Easy slice), and a checkpoint is saved after each:

1. the first half of the MMLU slice's questions, with their answers;
2. the whole MMLU slice: this checkpoint improves on MMLU;
3. the ARC-Easy slice only: it improves on ARC-Easy and forgets MMLU, falling
   below the first checkpoint there.

The lessons are exactly the prompts the evaluation shows (built by the tasks
themselves), with the loss on the answer only, as supervised fine-tuning does:
the model learns by heart the questions it is later asked, on purpose, so that
what it knows can change quickly and for real. Then the real pipeline (backend,
store, tasks, paired statistics, table, summary) compares the checkpoints with
the first as baseline, exactly as ``evalsweep run`` would. Nothing is
hard-coded: with another ``--seed`` the numbers differ, and if a seed showed no
significant regression the demo would say so.
"""

from __future__ import annotations

import dataclasses
import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from evalsweep.demo._build import build_checkpoint, build_tokenizer
from evalsweep.jsonl import read_values
from evalsweep.text import visible_console

if TYPE_CHECKING:
    from evalsweep.report import ResultDocument

DATA = Path(__file__).parent / "data"
MMLU_SUBJECTS = ("elementary_mathematics", "high_school_geography", "marketing", "world_religions")
BATCH = 16
LEARNING_RATE = 3e-3
WIDTH = 64


@dataclass(frozen=True)
class Lesson:
    """One phase of the demo's training run; a checkpoint is saved at its end."""

    what: str
    """What the model is shown, in words (the demo prints it)."""
    slice: str
    """Which examples: "mmlu-first-half", "mmlu" or "arc_easy"."""
    steps: int


LESSONS = (
    Lesson("the first half of the MMLU slice's questions, with their answers", "mmlu-half", 40),
    Lesson("the whole MMLU slice, with answers", "mmlu", 50),
    Lesson("the ARC-Easy slice only, with answers (no MMLU)", "arc_easy", 100),
)


def demo_tasks() -> list[Any]:
    """The two benchmark slices the demo trains on and evaluates, 0-shot."""
    from evalsweep.tasks.arc import ARC
    from evalsweep.tasks.mmlu import MMLU

    return [MMLU(subjects=MMLU_SUBJECTS), ARC("ARC-Easy")]


def demo_spec(checkpoints: Sequence[Path]) -> Any:
    """The sweep the demo runs: what ``evalsweep run`` would run on these checkpoints."""
    from evalsweep.engine import SweepSpec
    from evalsweep.models import BackendOptions

    return SweepSpec(
        checkpoints=[str(p) for p in checkpoints],
        tasks=demo_tasks(),
        data_dir=str(DATA),
        num_fewshot=0,
        options=BackendOptions(device="cpu", dtype="float32"),
    )


def lesson_examples() -> dict[str, list[tuple[str, str]]]:
    """(prompt, answer) pairs per slice: the evaluation's own 0-shot prompts and gold answers."""
    from evalsweep.tasks import DataSource

    examples: dict[str, list[tuple[str, str]]] = {}
    for task in demo_tasks():
        data = task.load(DataSource(str(DATA)), None)
        pairs = []
        for prepared in task.prepare(data, 0):
            fields = prepared.document.fields
            gold = task.gold(fields) if hasattr(task, "gold") else int(fields["answer"])
            request = prepared.requests[gold]
            pairs.append((request.context, request.continuation))
        examples[task.name] = pairs
    examples["mmlu-half"] = examples["mmlu"][::2]
    return examples


def demo_corpus(examples: dict[str, list[tuple[str, str]]]) -> list[str]:
    """Text the tokenizer is trained on: the slices and shipped GSM8K training problems."""
    texts = [prompt + answer for name in ("mmlu", "arc_easy") for prompt, answer in examples[name]]
    for _, doc in read_values(DATA / "gsm8k" / "train.jsonl"):
        texts.append(f"Question: {doc['question']}\nAnswer: {doc['answer']}\n\n")
    return texts


def train_checkpoints(
    workdir: Path, seed: int = 0, lessons: Sequence[Lesson] = LESSONS
) -> list[Path]:
    """Train one tiny model through ``lessons``, saving a checkpoint after each."""
    import torch
    from transformers import AutoModelForCausalLM

    examples = lesson_examples()
    tokenizer = build_tokenizer(demo_corpus(examples), vocab_size=1024)
    start = build_checkpoint(workdir / "init", tokenizer, n_layer=2, width=WIDTH, seed=seed)
    model = AutoModelForCausalLM.from_pretrained(start)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 64-wide model: one thread is as fast, and no spinning on 2 cores
    try:
        return _train(model, tokenizer, examples, workdir, seed, lessons)
    finally:
        torch.set_num_threads(threads)


def _train(
    model: Any,
    tokenizer: Any,
    examples: dict[str, list[tuple[str, str]]],
    workdir: Path,
    seed: int,
    lessons: Sequence[Lesson],
) -> list[Path]:
    import torch

    torch.manual_seed(seed)
    draw = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    model.train()
    saved = []
    step = 0
    for lesson in lessons:
        encoded = [_encode(tokenizer, prompt, answer) for prompt, answer in examples[lesson.slice]]
        for _ in range(lesson.steps):
            batch = draw.sample(encoded, min(BATCH, len(encoded)))
            ids, labels, mask = _pad(batch, tokenizer.eos_token_id)
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
        path = workdir / f"step-{step}"
        model.save_pretrained(path, safe_serialization=True)
        tokenizer.save_pretrained(path)
        saved.append(path)
    return saved


def _encode(tokenizer: Any, prompt: str, answer: str) -> tuple[list[int], list[int]]:
    """Prompt tokens and answer tokens, split as the backend splits context and continuation."""
    context = tokenizer.encode(prompt)
    whole = tokenizer.encode(prompt + answer)
    return context, whole[len(context) :]


def _pad(batch: Sequence[tuple[list[int], list[int]]], pad: int) -> tuple[Any, Any, Any]:
    """Right-padded ids, labels on the answer tokens only (-100 elsewhere), attention mask."""
    import torch

    width = max(len(c) + len(a) for c, a in batch)
    ids = torch.full((len(batch), width), pad)
    labels = torch.full((len(batch), width), -100)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (context, answer) in enumerate(batch):
        tokens = context + answer
        ids[row, : len(tokens)] = torch.tensor(tokens)
        labels[row, len(context) : len(tokens)] = torch.tensor(answer)
        mask[row, : len(tokens)] = 1
    return ids, labels, mask


def story(paths: Sequence[Path], lessons: Sequence[Lesson] = LESSONS) -> list[str]:
    """What the training did, one line per checkpoint (the demo prints it before the table)."""
    examples = lesson_examples()
    lines = []
    first = 1
    for path, lesson in zip(paths, lessons, strict=True):
        last = first + lesson.steps - 1
        count = len(examples[lesson.slice])
        lines.append(
            f"{path.name}: steps {first}-{last} on {lesson.what} ({count} questions)"
            + (" [baseline]" if path == paths[0] else "")
        )
        first = last + 1
    return lines


def verdict_line(document: ResultDocument) -> str:
    """The demo's last word: the regression it caught, or plainly that this seed showed none."""
    from evalsweep._numbers import difference
    from evalsweep.report._summary import format_p

    regressions = [c for c in document.comparisons if c.verdict == "regression"]
    if not regressions:
        return (
            "This seed showed no significant regression: the last checkpoint did not forget "
            "enough of the MMLU slice for the paired test to tell it from noise."
        )
    worst = min(regressions, key=lambda c: (c.subject is not None, c.p_adjusted))
    gains = [
        c.task + (f" / {c.subject}" if c.subject else "")
        for c in document.comparisons
        if c.verdict == "improvement" and c.candidate == worst.candidate and c.subject is None
    ]
    where = worst.task + (f" / {worst.subject}" if worst.subject else "")
    better = f" improved on {', '.join(dict.fromkeys(gains))} but" if gains else ""
    return (
        f"Caught: {Path(worst.candidate).name}{better} regressed on {where} "
        f"(Δ {difference(worst.delta)}, adjusted p = {format_p(worst.p_adjusted)})."
    )


def run_demo(
    workdir: Path | None = None,
    console: Console | None = None,
    quiet: bool = False,
    seed: int = 0,
) -> ResultDocument:
    """Train the checkpoints, run the MMLU and ARC-Easy slices, and return the result document."""
    from evalsweep.comparison import compare_results
    from evalsweep.engine import run_sweep
    from evalsweep.report import Demo, document_json, progress_display, results_document
    from evalsweep.store import Store

    console = console or visible_console(stderr=True)
    holder = None
    if workdir is None:
        holder = tempfile.TemporaryDirectory(prefix="evalsweep-demo-")
        workdir = Path(holder.name)
    workdir.mkdir(parents=True, exist_ok=True)

    def say(text: str) -> None:
        if not quiet:
            console.print(text, markup=False, highlight=False, soft_wrap=True)

    try:
        say(f"training a tiny GPT-2 (seed {seed}) in {workdir}; data: {DATA}")
        paths = train_checkpoints(workdir, seed=seed)
        for line in story(paths):
            say("  " + line)
        with Store(workdir / "results.sqlite") as store:
            with progress_display(console, enabled=not quiet) as progress:
                result = run_sweep(demo_spec(paths), store, progress)
            comparisons = compare_results(result)
            document = results_document(result, ["evalsweep", "demo"], comparisons)
            demo = Demo(seed=seed, story=story(paths), verdict=verdict_line(document))
            document = dataclasses.replace(document, demo=demo)
            store.save_run(result.run_id, document_json(document, indent=None))
        return document
    finally:
        if holder is not None:
            holder.cleanup()
