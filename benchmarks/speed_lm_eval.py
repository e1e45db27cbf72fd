"""Speed of evalsweep against lm-evaluation-harness, and against the physical floor.

Both harnesses score the same locally built GPT-2-architecture checkpoint (4 layers,
width 256, random weights) on the same local data in separate subprocesses:

* MMLU, 5-shot, first 18 rows of each of the 57 subjects (1,026 questions);
* GSM8K, 5-shot, first 100 test problems, greedy, 256 new tokens.

Each side's wall clock (process start to exit, model load included) and peak RSS of
its process tree are measured. lm-eval runs at its default batch size 1 and at 16; the
faster is the anchor for the ratios (targets: MMLU <= 0.33, GSM8K <= 0.5).

The MMLU "physical floor" is what no harness can beat on this machine: one bare batched
forward pass (torch, inference mode, longest first) over the deduplicated input token
sequences of the same 1,026 prompts, built from lm-eval's own logged prompts with its
tokenization rule, computing the LM head only where a token is scored. Target: evalsweep
MMLU time / floor <= 1.3.

Figures are printed as a table and appended to benchmarks/RESULTS.md with the machine
and versions.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _lm_eval_tasks import (  # noqa: E402
    DEFAULT_DATA_DIR,
    PREFIX,
    LmEvalSamples,
    Measured,
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

TARGETS = {"mmlu": 0.33, "gsm8k": 0.5}
FLOOR_TARGET = 1.3


@dataclass(frozen=True)
class Floor:
    """The bare forward pass at the batch size that calibrated fastest."""

    seconds: float
    batch_size: int
    sequences: int
    tokens: int
    calibration: dict[int, float]
    load_before: float
    cpu_s: float


def mmlu_input_sequences(
    samples: LmEvalSamples, tokenizer: Any, max_length: int
) -> set[tuple[int, ...]]:
    """Deduplicated model inputs of lm-eval's MMLU requests, built as lm-eval builds them.

    ``TemplateLM._encode_pair`` moves trailing context spaces into the continuation,
    encodes context+continuation once and splits at len(encode(context)); the HF model
    then feeds ``(context + continuation)[-(max_length + 1):][:-1]``. The four choices
    of a question share that input, so they dedupe to one sequence per question.
    """
    inputs: set[tuple[int, ...]] = set()
    for task, rows in samples.items():
        if not task.startswith(f"{PREFIX}mmlu_"):
            continue
        for row in rows:
            for request in row["arguments"].values():
                context, continuation = request["arg_0"], request["arg_1"]
                spaces = len(context) - len(context.rstrip())
                if spaces:
                    continuation = context[-spaces:] + continuation
                    context = context[:-spaces]
                whole = tokenizer.encode(context + continuation, add_special_tokens=False)
                context_enc = tokenizer.encode(context, add_special_tokens=False)
                tokens = context_enc + whole[len(context_enc) :]
                inputs.add(tuple(tokens[-(max_length + 1) :][:-1]))
    return inputs


def physical_floor(checkpoint: Path, samples: LmEvalSamples, batch_sizes: Sequence[int]) -> Floor:
    """Time one bare forward pass over the MMLU inputs, longest first.

    Batches are right-padded without an attention mask: attention is causal, so padding
    after a sequence cannot change its real positions, and torch keeps its fast causal
    SDPA path (an explicit mask forces the slower masked one). Only the last real
    position of each row goes through the LM head: with one-token answers that is the
    only position scored. Each candidate batch size is first timed on every 8th
    sequence; the full pass runs once, at the fastest.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    max_length = model.config.max_position_embeddings
    sequences = sorted(mmlu_input_sequences(samples, tokenizer, max_length), key=len, reverse=True)
    base, head = model.base_model, model.get_output_embeddings()

    def one_pass(seqs: Sequence[tuple[int, ...]], batch_size: int) -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for i in range(0, len(seqs), batch_size):
                batch = seqs[i : i + batch_size]
                ids = torch.zeros((len(batch), len(batch[0])), dtype=torch.long)
                for row, seq in enumerate(batch):
                    ids[row, : len(seq)] = torch.tensor(seq)
                hidden = base(input_ids=ids).last_hidden_state
                last = hidden[torch.arange(len(batch)), torch.tensor([len(q) - 1 for q in batch])]
                torch.log_softmax(head(last).float(), dim=-1)
        return time.perf_counter() - start

    one_pass(sequences[-16:], 4)  # warm up kernels and the allocator
    calibration = {bs: one_pass(sequences[::8], bs) for bs in batch_sizes}
    best = min(calibration, key=calibration.__getitem__)
    load_before = os.getloadavg()[0]
    cpu_before = time.process_time()
    seconds = one_pass(sequences, best)
    cpu = time.process_time() - cpu_before
    tokens = sum(map(len, sequences))
    return Floor(seconds, best, len(sequences), tokens, calibration, load_before, cpu)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mmlu-limit", type=int, default=18, help="rows per subject")
    parser.add_argument("--gsm8k-limit", type=int, default=100, help="first N test problems")
    parser.add_argument("--num-fewshot", type=int, default=5)
    parser.add_argument("--tasks", default="mmlu,gsm8k", help="comma list of mmlu, gsm8k")
    parser.add_argument(
        "--lm-eval-batch-sizes", default="1,16", help="lm-eval batch sizes to try (or auto)"
    )
    parser.add_argument("--evalsweep-batch-size", default=None, help="default: evalsweep's own")
    parser.add_argument("--floor-batch-sizes", default="1,4,16")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a temp dir")
    parser.add_argument("--no-results-md", action="store_true", help="don't append RESULTS.md")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse the successful runs an interrupted invocation measured in --work-dir",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="evalsweep-speed-"))
    work.mkdir(parents=True, exist_ok=True)
    data_dir = args.data_dir.resolve()
    print(f"work dir: {work}")
    ckpt = build_local_checkpoint(
        work / "ckpt-gpt2-4x256", data_dir=data_dir, n_layer=4, width=256, n_head=4
    )
    include = write_task_dir(work / "lm_eval_tasks", data_dir)
    # Arrow-convert lm-eval's datasets once, untimed: a one-off cache fill is not speed.
    warm_datasets_cache(include)
    limits = {"mmlu": args.mmlu_limit, "gsm8k": args.gsm8k_limit}

    lm: dict[str, dict[str, Measured]] = {}
    es: dict[str, Measured] = {}
    mmlu_samples: LmEvalSamples = {}
    for task in tasks:
        lm[task] = {}
        for bs in args.lm_eval_batch_sizes.split(","):
            out = work / f"lm_eval-{task}-bs{bs}"
            cmd = lm_eval_command(
                ckpt, PREFIX + task, include, out, limit=limits[task],
                num_fewshot=args.num_fewshot, batch_size=bs,
            )  # fmt: skip
            measured = measure(cmd, work, f"lm_eval-{task}-bs{bs}", [out], args.resume)
            _report(f"lm-eval {task} batch {bs}", measured)
            lm[task][bs] = measured
            if task == "mmlu" and not mmlu_samples and measured.returncode == 0:
                mmlu_samples = read_lm_eval_output(out)[1]
        cmd = evalsweep_command(
            [ckpt], task, data_dir, work / f"evalsweep-{task}", store=work / f"store-{task}.db",
            limit=limits[task], num_fewshot=args.num_fewshot, batch_size=args.evalsweep_batch_size,
        )  # fmt: skip
        fresh = [work / f"evalsweep-{task}", work / f"store-{task}.db"]
        es[task] = measure(cmd, work, f"evalsweep-{task}", fresh, args.resume)
        _report(f"evalsweep {task}", es[task])

    floor = None
    if "mmlu" in tasks and mmlu_samples:
        sizes = [int(b) for b in args.floor_batch_sizes.split(",")]
        floor = physical_floor(ckpt, mmlu_samples, sizes)
        print(
            f"floor: {floor.sequences} sequences, {floor.tokens} tokens; "
            + "calibration on 1/8: "
            + ", ".join(f"batch {b} {s:.1f} s" for b, s in floor.calibration.items())
        )

    table = render_table(tasks, limits, lm, es, floor)
    table += "\n\n" + same_predictions(tasks, work, lm)
    print("\n" + table)
    if not args.no_results_md:
        append_results(table, args, limits)
        print("appended to benchmarks/RESULTS.md")
    failed = any(m.returncode for m in es.values()) or any(
        m.returncode for runs in lm.values() for m in runs.values()
    )
    return 1 if failed else 0


def measure(
    cmd: Sequence[str], work: Path, name: str, outputs: Sequence[Path], resume: bool
) -> Measured:
    """Run and time ``cmd``, or with ``resume`` reuse a successful earlier measurement.

    Outputs of an earlier attempt (result folders, the evalsweep store) are deleted
    before running, so neither harness can reuse work and logged samples don't mix.
    """
    saved = work / f"{name}.measured.json"
    if resume and saved.exists():
        measured = Measured(**json.loads(saved.read_text()))
        if measured.returncode == 0:
            print(f"(reusing {saved.name})")
            return measured
    for path in outputs:
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    measured = run_measured(cmd, work / f"{name}.log")
    saved.write_text(json.dumps(dataclasses.asdict(measured)))
    return measured


def _report(label: str, measured: Measured) -> None:
    print(
        f"{label:<28} {measured.wall_s:8.1f} s wall {measured.cpu_s:8.1f} s CPU"
        f"  peak RSS {measured.peak_rss_mib:7.0f} MiB"
        f"  rc={measured.returncode}  (load avg before {measured.load_before:.2f})"
    )


def same_predictions(tasks: Sequence[str], work: Path, lm: dict[str, dict[str, Measured]]) -> str:
    """Do the timed runs answer alike? Each lm-eval run against evalsweep's, question by question.

    Speed must never change a prediction: this checks the very runs that were
    timed, with every optimisation on (``parity_lm_eval.py`` does it in depth).
    """
    from parity_lm_eval import compare_gsm8k, compare_mmlu

    lines = []
    for task in tasks:
        es_dir = work / f"evalsweep-{task}"
        if not (es_dir / "samples.jsonl").is_file():
            continue
        es_rows, _ = read_evalsweep_output(es_dir)
        for bs, measured in lm[task].items():
            out = work / f"lm_eval-{task}-bs{bs}"
            if measured.returncode or not out.exists():
                continue
            _, samples = read_lm_eval_output(out)
            if task == "mmlu":
                m = compare_mmlu(samples, es_rows)
                lines.append(
                    f"Same predictions, {task}, lm-eval batch {bs} vs evalsweep: predicted letter "
                    f"{m.agree}/{m.compared} (exact ties left out: {m.ties}), max |delta "
                    f"log-likelihood| {m.max_abs_ll_diff:.1e}, missing {len(m.missing)}."
                )
            else:
                g = compare_gsm8k(samples, es_rows)
                lines.append(
                    f"Same predictions, {task}, lm-eval batch {bs} vs evalsweep: response text "
                    f"{g.same_response}/{g.compared}, exact_match per filter "
                    + ", ".join(f"{k} {v}/{g.compared}" for k, v in g.same_score.items())
                    + f", missing {len(g.missing)}."
                )
    return "\n".join(lines)


def render_table(
    tasks: Sequence[str],
    limits: dict[str, int],
    lm: dict[str, dict[str, Measured]],
    es: dict[str, Measured],
    floor: Floor | None,
) -> str:
    """Markdown table: every lm-eval setting, evalsweep, and the ratios to the faster one."""
    lines = [
        "| benchmark | run | wall s | CPU s | peak RSS MiB | evalsweep / this: wall (CPU) "
        "| target | load |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for task in tasks:
        ok = {bs: m for bs, m in lm[task].items() if m.returncode == 0}
        best = min(ok, key=lambda bs: ok[bs].wall_s) if ok else None
        mine = es[task]
        label = f"{task} ({_size(task, limits[task])})"
        for bs, measured in lm[task].items():
            tag = " (faster, anchor)" if bs == best else ""
            ratio = f"{mine.wall_s / measured.wall_s:.3f} ({mine.cpu_s / measured.cpu_s:.3f})"
            target = f"<= {TARGETS[task]}" if bs == best else ""
            failed = "" if measured.returncode == 0 else " FAILED"
            lines.append(
                f"| {label} | lm-eval hf, batch {bs}{tag}{failed} | {measured.wall_s:.1f} | "
                f"{measured.cpu_s:.1f} | {measured.peak_rss_mib:.0f} | {ratio} | {target} | "
                f"{measured.load_before:.2f} |"
            )
        failed = "" if mine.returncode == 0 else " FAILED"
        mem = ""
        if best is not None:
            mem = f" (memory {mine.peak_rss_mib / lm[task][best].peak_rss_mib:.2f}x)"
        lines.append(
            f"| {label} | evalsweep{failed}{mem} | {mine.wall_s:.1f} | {mine.cpu_s:.1f} | "
            f"{mine.peak_rss_mib:.0f} | 1.000 | | {mine.load_before:.2f} |"
        )
        if task == "mmlu" and floor is not None:
            lines.append(
                f"| {label} | physical floor (bare forward, batch {floor.batch_size}, "
                f"{floor.sequences} seqs, {floor.tokens} tokens) | {floor.seconds:.1f} | "
                f"{floor.cpu_s:.1f} | | {mine.wall_s / floor.seconds:.3f} "
                f"({mine.cpu_s / floor.cpu_s:.3f}) | <= {FLOOR_TARGET} | {floor.load_before:.2f} |"
            )
    return "\n".join(lines)


def _size(task: str, limit: int) -> str:
    return f"57 x {limit} = {57 * limit} questions" if task == "mmlu" else f"{limit} problems"


def append_results(table: str, args: argparse.Namespace, limits: dict[str, int]) -> None:
    """Append (never rewrite: other benchmarks share the file) a dated section."""
    info = machine_and_versions()
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    setup = (
        f"Model: GPT-2 architecture, 4 layers, width 256, 4 heads, vocab 2048, random weights "
        f"(evalsweep.demo builder), float32, CPU. {args.num_fewshot}-shot; MMLU --limit "
        f"{limits['mmlu']} per subject; GSM8K first {limits['gsm8k']} problems, greedy, 256 new "
        "tokens. Wall clock of the whole subprocess (imports and model load included); peak "
        "RSS summed over the process tree (psutil, 50 ms polling). The floor is a bare "
        "forward pass only (no load, no tokenization). CPU s: user + system CPU time of the "
        "process tree, less sensitive than wall time to other work on a shared machine. "
        "`load`: the 1-minute load average when the run started (2 cores; well above 0 "
        "means something else was running)."
    )
    body = "\n".join(
        [
            "",
            f"## evalsweep vs lm-eval: speed (benchmarks/speed_lm_eval.py), {when}",
            "",
            "; ".join(f"{k}: {v}" for k, v in info.items()),
            "",
            setup,
            "",
            table,
            "",
            f"Command: `{shlex.join(['python', 'benchmarks/speed_lm_eval.py', *sys.argv[1:]])}`",
            "",
        ]
    )
    append_results_md(body)


if __name__ == "__main__":
    sys.exit(main())
