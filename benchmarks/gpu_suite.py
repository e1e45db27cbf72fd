"""GPU suite: a Llama-3-8B-shaped checkpoint, full MMLU 5-shot and GSM8K, evalsweep vs lm-eval.

What it does, in order:
1. builds a random-weight checkpoint of Llama-3-8B's shape (32 layers, width 4096,
   32 heads / 8 key-value heads, MLP 14336, vocabulary 128256, rope theta 500000) in
   bfloat16, directly on the device, with a tokenizer trained on the local data
   (random weights: speed and agreement depend on shape, not on what was learned);
2. times evalsweep on full MMLU 5-shot (14,042 questions) and full GSM8K (1,319
   problems, 5-shot) with each of ``--backends`` (hf, vllm);
3. times lm-eval (``--model hf`` and ``--model vllm``) on a slice of each (``--slice``)
   and prints its per-question rate next to evalsweep's;
4. checks bfloat16 parity on ``--parity`` questions: evalsweep hf vs lm-eval hf, MMLU
   letter by letter (and GSM8K response by response on the slice).

``--tiny`` runs the same steps end to end with a tiny shape (2 layers, width 64) and
small slices, on CPU when there is no GPU: the check that the script is ready.
Backends that are not installed (vLLM on a CPU machine) are reported as skipped.

    python benchmarks/gpu_suite.py --tiny
    python benchmarks/gpu_suite.py --results-md          # on a GPU machine
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
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
    evalsweep_command,
    lm_eval_command,
    machine_and_versions,
    read_evalsweep_output,
    read_lm_eval_output,
    run_measured,
    write_task_dir,
)
from parity_lm_eval import compare_gsm8k, compare_mmlu  # noqa: E402

LLAMA3_8B = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "rope_theta": 500000.0,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}
TINY = {**LLAMA3_8B, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": None}  # fmt: skip
MMLU_QUESTIONS = 14042
GSM8K_PROBLEMS = 1319


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shape, small slices (CPU ok)")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--backends", default="hf,vllm", help="evalsweep backends to time")
    parser.add_argument("--slice", type=int, default=None, help="lm-eval slice: rows per task")
    parser.add_argument("--parity", type=int, default=500, help="bf16 parity: MMLU questions")
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--results-md", action="store_true")
    return parser.parse_args(argv)


def build_checkpoint(out: Path, data_dir: Path, tiny: bool, device: str) -> Path:
    """A random-weight Llama of Llama-3-8B's shape (or the tiny one), bfloat16, on disk."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from evalsweep.demo import build_tokenizer, corpus_from_data_dir

    if (out / "config.json").is_file():
        return out
    tokenizer = build_tokenizer(corpus_from_data_dir(data_dir, 20000), 1024 if tiny else 32000)
    shape = dict(TINY if tiny else LLAMA3_8B)
    if shape["vocab_size"] is None:
        shape["vocab_size"] = len(tokenizer)
    eos = tokenizer.eos_token_id
    config = LlamaConfig(**shape, bos_token_id=eos, eos_token_id=eos, initializer_range=0.02)
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(out)
    del model
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="evalsweep-gpu-suite-"))
    work.mkdir(parents=True, exist_ok=True)
    data_dir = args.data_dir.resolve()
    tiny = args.tiny
    mmlu_limit = 1 if tiny else None  # rows per subject: full MMLU is every row
    gsm8k_limit = 3 if tiny else None
    slice_rows = args.slice or (1 if tiny else 20)
    parity_rows = max(1, -(-args.parity // 57)) if not tiny else 1
    print(f"work dir: {work}; device {device}")
    ckpt = build_checkpoint(work / ("ckpt-tiny" if tiny else "ckpt-llama3-8b-shape"), data_dir,
                            tiny, device)  # fmt: skip
    include = write_task_dir(work / "lm_eval_tasks", data_dir)
    lines: list[str] = []

    def say(line: str) -> None:
        print(line)
        lines.append(line)

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    # 1. evalsweep, full tasks (or the tiny slice), each backend.
    es_rows: dict[str, list[dict[str, Any]]] = {}
    for backend in backends:
        if backend == "vllm" and importlib.util.find_spec("vllm") is None:
            say(f"evalsweep {backend}: skipped (vllm is not installed here)")
            continue
        for task, limit, total in (("mmlu", mmlu_limit, MMLU_QUESTIONS),
                                   ("gsm8k", gsm8k_limit, GSM8K_PROBLEMS)):  # fmt: skip
            out = work / f"evalsweep-{backend}-{task}"
            cmd = evalsweep_command(
                [ckpt], task, data_dir, out, store=work / f"store-{backend}-{task}.db",
                limit=limit, num_fewshot=5, dtype="bfloat16", backend=backend, device=device,
            )  # fmt: skip
            measured = run_measured(cmd, work / f"evalsweep-{backend}-{task}.log")
            if measured.returncode:
                say(f"evalsweep {backend} {task}: FAILED (see {out}.log)")
                continue
            rows, _ = read_evalsweep_output(out)
            es_rows[f"{backend}-{task}"] = rows
            n = len(rows)
            scope = "full" if limit is None else f"slice of {n}"
            say(
                f"evalsweep {backend:<5} {task:<6} {scope:<14} {measured.wall_s:8.1f} s  "
                f"{n / measured.wall_s:8.2f} q/s  (full task: {total})"
            )
    # 2. lm-eval on a slice, each model type; its samples serve the parity check.
    lm_samples: dict[str, Any] = {}
    for model in backends:
        if model == "vllm" and importlib.util.find_spec("vllm") is None:
            say(f"lm-eval {model}: skipped (vllm is not installed here)")
            continue
        for task, rows in (("mmlu", max(slice_rows, parity_rows)), ("gsm8k", slice_rows)):
            out = work / f"lm_eval-{model}-{task}"
            cmd = lm_eval_command(
                ckpt, PREFIX + task, include, out, limit=rows, num_fewshot=5,
                batch_size="auto" if device != "cpu" else "1", dtype="bfloat16",
                model=model, device=device,
            )  # fmt: skip
            measured = run_measured(cmd, work / f"lm_eval-{model}-{task}.log")
            if measured.returncode:
                say(f"lm-eval {model} {task}: FAILED (see {out}.log)")
                continue
            _results, samples = read_lm_eval_output(out)
            n = sum(len(v) for v in samples.values())
            if task == "gsm8k":
                n //= 2  # one line per (problem, filter)
            say(
                f"lm-eval   {model:<5} {task:<6} slice of {n:<5} {measured.wall_s:8.1f} s  "
                f"{n / measured.wall_s:8.2f} q/s"
            )
            if model == "hf":
                lm_samples.update(samples)
    # 3. bf16 parity, evalsweep hf vs lm-eval hf, on the questions both answered.
    if lm_samples and "hf-mmlu" in es_rows:
        mmlu = compare_mmlu(lm_samples, es_rows["hf-mmlu"])
        say(
            f"bf16 parity MMLU: letter identical {mmlu.agree}/{mmlu.compared} "
            f"(exact ties {mmlu.ties}; max |d loglik| {mmlu.max_abs_ll_diff:.3g})"
        )
    if lm_samples and "hf-gsm8k" in es_rows:
        gsm = compare_gsm8k(lm_samples, es_rows["hf-gsm8k"])
        say(f"bf16 parity GSM8K: response identical {gsm.same_response}/{gsm.compared}")
    if args.results_md:
        info = machine_and_versions()
        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        command = shlex.join(["python", "benchmarks/gpu_suite.py", *sys.argv[1:]])
        shape = "tiny Llama (2 layers, width 64)" if tiny else "Llama-3-8B shape, random weights"
        append_results_md(
            "\n".join(
                [
                    "",
                    f"## GPU suite ({shape}, bfloat16, {device}), {when}",
                    "",
                    "; ".join(f"{k}: {v}" for k, v in info.items()),
                    "",
                    "```",
                    *lines,
                    "```",
                    "",
                    f"Command: `{command}`",
                    "",
                ]
            )  # fmt: skip
        )
    return 0 if not any("FAILED" in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
