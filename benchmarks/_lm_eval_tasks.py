"""Shared plumbing for the benchmarks that compare evalsweep with lm-evaluation-harness.

lm-eval's own ``mmlu`` and ``gsm8k`` tasks download from the Hugging Face Hub, which
these benchmarks may not touch. So we write task YAMLs that are lm-eval's own, field for
field (read from the installed package, not retyped), with only the dataset source
changed to the local files under ``shared/data``. Everything else (prompt templates,
few-shot split and sampler, filters, metrics, group aggregation) stays lm-eval's, so a
difference between the two harnesses cannot come from a hand-copied template.

Task and group names get a ``local_`` prefix so nothing collides with built-in tasks.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evalsweep.jsonl import read_values, split_lines
from evalsweep.tasks.arc import ai2_rows_in_hub_schema

PREFIX = "local_"
LETTERS = "ABCD"
# Keys of lm-eval's MMLU group YAMLs that we know how to rename; anything new fails loudly.
GROUP_KEYS = {"group", "group_alias", "task", "aggregate_metric_list", "metadata"}
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA_DIR = (REPO_ROOT / ".." / "shared" / "data").resolve()
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
os.environ.update(OFFLINE_ENV)  # this process too: warm_datasets_cache and the builder


def lm_eval_tasks_dir() -> Path:
    """Locate the installed lm-eval's task YAMLs (the source of truth we copy from)."""
    import lm_eval

    return Path(lm_eval.__file__).parent / "tasks"


def offline_env() -> dict[str, str]:
    """Environment for subprocesses: the Hub must never be contacted."""
    return {**os.environ, **OFFLINE_ENV}


# ---------------------------------------------------------------------------------------
# Data conversion
# ---------------------------------------------------------------------------------------


def mmlu_subjects(data_dir: Path) -> list[str]:
    """The 57 subjects, from the test CSV file names (sorted, as lm-eval lists them)."""
    return sorted(
        p.name.removesuffix("_test.csv") for p in (data_dir / "mmlu" / "test").glob("*.csv")
    )


def read_mmlu_csv(path: Path, subject: str) -> list[dict[str, Any]]:
    """Rows of a headerless MMLU CSV in cais/mmlu's schema, in file order."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    return [
        {
            "question": row[0],
            "subject": subject,
            "choices": row[1:5],
            "answer": LETTERS.index(row[5].strip()),
        }
        for row in rows
    ]


def _write_jsonl(path: Path, docs: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(doc, ensure_ascii=False) + "\n" for doc in docs)
    # Rewrite only on change: the datasets cache keys on file mtime, so stable files
    # let repeated benchmark runs reuse lm-eval's preprocessed dataset.
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------------------------------
# Task YAMLs
# ---------------------------------------------------------------------------------------


def _load_with_includes(path: Path) -> dict[str, Any]:
    """Load an lm-eval YAML and merge its ``include`` the way lm-eval does (local keys win)."""
    cfg: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    include = cfg.pop("include", None)
    if include is None:
        return cfg
    merged: dict[str, Any] = {}
    for inc in include if isinstance(include, list) else [include]:
        merged.update(_load_with_includes(path.parent / inc))
    merged.update(cfg)
    return merged


def _prefixed(names: str | list[str]) -> str | list[str]:
    if isinstance(names, str):
        return PREFIX + names
    return [PREFIX + name for name in names]


def _dump(path: Path, cfg: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True, width=1000))


def write_mmlu_tasks(data_dir: Path, out_dir: Path) -> list[str]:
    """Write ``local_mmlu`` (57 subtasks, 4 category groups) reading the local CSVs.

    Returns the subtask names. Every field comes from lm-eval's ``tasks/mmlu/default``
    YAMLs; only ``dataset_path``/``dataset_name`` are replaced by local JSONL files and
    names/tags are prefixed.
    """
    src = lm_eval_tasks_dir() / "mmlu" / "default"
    task_dir = out_dir / "mmlu"
    task_dir.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    for yaml_path in sorted(src.glob("mmlu_*.yaml")):
        cfg = _load_with_includes(yaml_path)
        subject = cfg.pop("dataset_name")
        files = {}
        for split, folder in ((cfg["test_split"], "test"), (cfg["fewshot_split"], "dev")):
            csv_path = data_dir / "mmlu" / folder / f"{subject}_{folder}.csv"
            jsonl = out_dir / "data" / "mmlu" / f"{subject}_{folder}.jsonl"
            _write_jsonl(jsonl, read_mmlu_csv(csv_path, subject))
            files[split] = str(jsonl)
        assert cfg.pop("dataset_path") == "cais/mmlu", yaml_path
        cfg = {
            **cfg,
            "task": PREFIX + cfg["task"],
            "tag": _prefixed(cfg["tag"]),
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": files},
        }
        _dump(task_dir / f"{cfg['task']}.yaml", cfg)
        names.append(cfg["task"])
    for yaml_path in sorted(src.glob("_mmlu*.yaml")):
        cfg = _load_with_includes(yaml_path)
        unexpected = set(cfg) - {
            "group",
            "group_alias",
            "task",
            "aggregate_metric_list",
            "metadata",
        }
        assert not unexpected, f"{yaml_path}: unhandled group keys {unexpected}"
        cfg["group"] = PREFIX + cfg["group"]
        cfg["task"] = _prefixed(cfg["task"])
        _dump(task_dir / f"_{cfg['group']}.yaml", cfg)
    expected = len(mmlu_subjects(data_dir))
    assert len(names) == expected == 57, (len(names), expected)
    return names


def write_gsm8k_task(data_dir: Path, out_dir: Path) -> str:
    """Write ``local_gsm8k``: lm-eval's ``gsm8k.yaml`` reading the local train/test JSONL.

    The local files are openai/grade-school-math's originals, whose schema
    (``question``, ``answer``) is the one the Hub's ``openai/gsm8k`` ``main`` uses.
    """
    cfg = _load_with_includes(lm_eval_tasks_dir() / "gsm8k" / "gsm8k.yaml")
    assert cfg.pop("dataset_path") == "openai/gsm8k"
    assert cfg.pop("dataset_name") == "main"
    splits = {cfg["training_split"], cfg["fewshot_split"], cfg["test_split"]}
    cfg = {
        **cfg,
        "task": PREFIX + cfg["task"],
        "dataset_path": "json",
        "dataset_kwargs": {
            "data_files": {split: str(data_dir / "gsm8k" / f"{split}.jsonl") for split in splits}
        },
    }
    if "tag" in cfg:
        cfg["tag"] = _prefixed(cfg["tag"])
    task_dir = out_dir / "gsm8k"
    task_dir.mkdir(parents=True, exist_ok=True)
    _dump(task_dir / f"{cfg['task']}.yaml", cfg)
    return str(cfg["task"])


def write_arc_tasks(data_dir: Path, out_dir: Path) -> list[str]:
    """Write ``local_arc_easy`` and ``local_arc_challenge`` reading AI2's local JSONL.

    lm-eval's own YAMLs, with the Hub dataset replaced by the converted Test and Dev
    files. The local data has no train split, so ``training_split`` is unset and
    lm-eval takes few-shot examples from validation (Dev), as evalsweep does locally.
    """
    names = []
    task_dir = out_dir / "arc"
    task_dir.mkdir(parents=True, exist_ok=True)
    for name, subset in (("arc_easy", "ARC-Easy"), ("arc_challenge", "ARC-Challenge")):
        cfg = _load_with_includes(lm_eval_tasks_dir() / "arc" / f"{name}.yaml")
        assert cfg.pop("dataset_path") == "allenai/ai2_arc"
        assert cfg.pop("dataset_name") == subset
        files = {}
        for split, local in (("test", "Test"), ("validation", "Dev")):
            jsonl = out_dir / "data" / "arc" / f"{subset}-{local}.jsonl"
            _write_jsonl(
                jsonl, ai2_rows_in_hub_schema(data_dir / "arc" / subset / f"{subset}-{local}.jsonl")
            )
            files[split] = str(jsonl)
        cfg = {
            **cfg,
            "task": PREFIX + name,
            "tag": _prefixed(cfg["tag"]),
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": files},
            "training_split": None,
        }
        _dump(task_dir / f"{cfg['task']}.yaml", cfg)
        names.append(cfg["task"])
    return names


def read_hellaswag_text(path: Path) -> list[dict[str, Any]]:
    """The six-lines-per-item text format as Hub-shaped rows lm-eval's ``process_docs`` reads.

    The first line is ``activity_label + ": " + ctx`` already joined; it is split at the
    first ": " and the rest kept whole as ``ctx_a`` with an empty ``ctx_b``, so lm-eval
    rebuilds exactly that line (``ctx_a + " " + ""`` then ``strip``).
    """
    import bz2

    with bz2.open(path, "rb") as handle:  # lines end at "\n" only, as evalsweep reads them
        lines = [raw.removesuffix(b"\r").decode("utf-8") for _, raw in split_lines(handle)]
    rows = []
    for start in range(0, len(lines), 6):
        context, label, *endings = lines[start : start + 6]
        activity, _, ctx = context.partition(": ")
        rows.append(
            {"activity_label": activity, "ctx_a": ctx, "ctx_b": "", "endings": endings,
             "label": label.strip()}
        )  # fmt: skip
    return rows


def write_hellaswag_task(data_dir: Path, out_dir: Path) -> str:
    """Write ``local_hellaswag``: lm-eval's YAML and ``utils.py`` reading the local text file.

    The YAML has a ``!function`` tag, so it is edited as text: only the task name and the
    dataset source change (validation only; no training split, as evalsweep locally).
    """
    import shutil

    src = lm_eval_tasks_dir() / "hellaswag"
    task_dir = out_dir / "hellaswag"
    task_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "utils.py", task_dir / "utils.py")
    jsonl = out_dir / "data" / "hellaswag" / "validation.jsonl"
    _write_jsonl(jsonl, read_hellaswag_text(data_dir / "hellaswag" / "hellaswag_val_full.txt.bz2"))
    text = (src / "hellaswag.yaml").read_text(encoding="utf-8")
    replacements = {
        "task: hellaswag\n": f"task: {PREFIX}hellaswag\n",
        "dataset_path: Rowan/hellaswag\n": "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    validation: {json.dumps(str(jsonl))}\n",
        "training_split: train\n": "training_split: null\n",
    }
    for old, new in replacements.items():
        assert text.count(old) == 1, f"lm-eval's hellaswag.yaml changed: {old!r}"
        text = text.replace(old, new)
    (task_dir / f"{PREFIX}hellaswag.yaml").write_text(text, encoding="utf-8")
    return f"{PREFIX}hellaswag"


def _edit_yaml_text(text: str, replacements: dict[str, str], source: Path) -> str:
    """Apply exact one-time replacements to an lm-eval YAML kept as text (it has tags
    such as ``!function`` that a round trip through a YAML library would lose)."""
    for old, new in replacements.items():
        assert text.count(old) == 1, f"lm-eval's {source} changed: {old!r}"
        text = text.replace(old, new)
    return text


def _data_files_yaml(files: dict[str, Path]) -> str:
    lines = "".join(f"    {split}: {json.dumps(str(path))}\n" for split, path in files.items())
    return f"dataset_path: json\ndataset_kwargs:\n  data_files:\n{lines}"


def write_truthfulqa_tasks(data_dir: Path, out_dir: Path) -> list[str]:
    """Write ``local_truthfulqa_mc1`` and ``local_truthfulqa_mc2`` reading ``mc_task.json``.

    lm-eval's YAMLs and ``utils.py`` (``process_results_mc2``), with the Hub dataset
    replaced by the local questions in the Hub's schema (evalsweep's own reader).
    """
    import shutil

    from evalsweep.tasks.truthfulqa import read_mc_task

    src = lm_eval_tasks_dir() / "truthfulqa"
    task_dir = out_dir / "truthfulqa"
    task_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "utils.py", task_dir / "utils.py")
    jsonl = out_dir / "data" / "truthfulqa" / "validation.jsonl"
    _write_jsonl(jsonl, read_mc_task(data_dir / "truthfulqa" / "mc_task.json"))
    mc1 = _edit_yaml_text(
        (src / "truthfulqa_mc1.yaml").read_text(encoding="utf-8"),
        {
            "  - truthfulqa\n": f"  - {PREFIX}truthfulqa\n",
            "task: truthfulqa_mc1\n": f"task: {PREFIX}truthfulqa_mc1\n",
            "dataset_path: truthfulqa/truthful_qa\n": _data_files_yaml({"validation": jsonl}),
            "dataset_name: multiple_choice\n": "",
        },
        src / "truthfulqa_mc1.yaml",
    )
    (task_dir / f"{PREFIX}truthfulqa_mc1.yaml").write_text(mc1, encoding="utf-8")
    mc2 = _edit_yaml_text(
        (src / "truthfulqa_mc2.yaml").read_text(encoding="utf-8"),
        {
            "include: truthfulqa_mc1.yaml\n": f"include: {PREFIX}truthfulqa_mc1.yaml\n",
            "task: truthfulqa_mc2\n": f"task: {PREFIX}truthfulqa_mc2\n",
        },
        src / "truthfulqa_mc2.yaml",
    )
    (task_dir / f"{PREFIX}truthfulqa_mc2.yaml").write_text(mc2, encoding="utf-8")
    return [f"{PREFIX}truthfulqa_mc1", f"{PREFIX}truthfulqa_mc2"]


def write_winogrande_task(data_dir: Path, out_dir: Path) -> str:
    """Write ``local_winogrande``: lm-eval's YAML and functions reading ``dev.jsonl``.

    The local data has no train split, so ``training_split`` is unset and lm-eval
    draws few-shot examples from validation, leaving the document out, as evalsweep
    does locally.
    """
    import shutil

    src = lm_eval_tasks_dir() / "winogrande"
    task_dir = out_dir / "winogrande"
    task_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src / "preprocess_winogrande.py", task_dir / "preprocess_winogrande.py")
    jsonl = out_dir / "data" / "winogrande" / "validation.jsonl"
    rows = [value for _, value in read_values(data_dir / "winogrande" / "dev.jsonl")]
    _write_jsonl(jsonl, rows)
    text = _edit_yaml_text(
        (src / "default.yaml").read_text(encoding="utf-8"),
        {
            "task: winogrande\n": f"task: {PREFIX}winogrande\n",
            "dataset_path: allenai/winogrande\n": _data_files_yaml({"validation": jsonl}),
            "dataset_name: winogrande_xl\n": "",
            "training_split: train\n": "training_split: null\n",
        },
        src / "default.yaml",
    )
    (task_dir / f"{PREFIX}winogrande.yaml").write_text(text, encoding="utf-8")
    return f"{PREFIX}winogrande"


def write_piqa_task(data_dir: Path, out_dir: Path) -> str:
    """Write ``local_piqa``: lm-eval's YAML reading ``valid.jsonl`` with its labels file
    (rows ``{goal, sol1, sol2, label}``, the Hub's schema); no train split locally."""
    cfg = _load_with_includes(lm_eval_tasks_dir() / "piqa" / "piqa.yaml")
    assert cfg.pop("dataset_path") == "baber/piqa"
    assert cfg.pop("dataset_name") is None
    folder = data_dir / "piqa"
    labels = (folder / "valid-labels.lst").read_text(encoding="utf-8").split()
    rows = [
        {"goal": row["goal"], "sol1": row["sol1"], "sol2": row["sol2"], "label": int(label)}
        for (_, row), label in zip(read_values(folder / "valid.jsonl"), labels, strict=True)
    ]
    jsonl = out_dir / "data" / "piqa" / "validation.jsonl"
    _write_jsonl(jsonl, rows)
    cfg = {
        **cfg,
        "task": PREFIX + cfg["task"],
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"validation": str(jsonl)}},
        "training_split": None,
    }
    task_dir = out_dir / "piqa"
    task_dir.mkdir(parents=True, exist_ok=True)
    _dump(task_dir / f"{cfg['task']}.yaml", cfg)
    return str(cfg["task"])


def write_boolq_task(data_dir: Path, out_dir: Path) -> str:
    """Write ``local_boolq``: lm-eval's ``super_glue/boolq`` YAML reading Google's
    ``dev.jsonl`` as SuperGLUE's rows (``passage = title + " -- " + passage``)."""
    cfg = _load_with_includes(lm_eval_tasks_dir() / "super_glue" / "boolq" / "default.yaml")
    assert cfg.pop("dataset_path") == "aps/super_glue"
    assert cfg.pop("dataset_name") == "boolq"
    rows = [
        {"question": row["question"], "passage": f"{row['title']} -- {row['passage']}",
         "idx": index, "label": int(row["answer"])}
        for index, (_, row) in enumerate(read_values(data_dir / "boolq" / "dev.jsonl"))
    ]  # fmt: skip
    jsonl = out_dir / "data" / "boolq" / "validation.jsonl"
    _write_jsonl(jsonl, rows)
    cfg = {
        **cfg,
        "task": PREFIX + cfg["task"],
        "tag": _prefixed(cfg["tag"]),
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"validation": str(jsonl)}},
        "training_split": None,
    }
    task_dir = out_dir / "boolq"
    task_dir.mkdir(parents=True, exist_ok=True)
    _dump(task_dir / f"{cfg['task']}.yaml", cfg)
    return str(cfg["task"])


def write_bbh_tasks(data_dir: Path, out_dir: Path, form: str = "cot_fewshot") -> list[str]:
    """Write ``local_bbh_<form>_<subtask>`` (27) and their group reading ``bbh/bbh/*.json``.

    lm-eval's own YAMLs (few-shot samples, generation settings, filters), with the Hub
    dataset replaced by each subtask's examples as JSON Lines. ``form`` is lm-eval's
    folder: ``cot_fewshot`` (the ``bbh`` group) or ``fewshot``.
    """
    src = lm_eval_tasks_dir() / "bbh" / form
    task_dir = out_dir / f"bbh_{form}"
    task_dir.mkdir(parents=True, exist_ok=True)
    names = []
    for yaml_path in sorted(src.glob("[a-z]*.yaml")):
        cfg = _load_with_includes(yaml_path)
        subtask = cfg.pop("dataset_name")
        assert cfg.pop("dataset_path") == "SaylorTwift/bbh", yaml_path
        examples = json.loads((data_dir / "bbh" / "bbh" / f"{subtask}.json").read_text())
        jsonl = out_dir / "data" / "bbh" / f"{subtask}.jsonl"
        _write_jsonl(
            jsonl, [{"input": e["input"], "target": e["target"]} for e in examples["examples"]]
        )
        cfg = {
            **cfg,
            "task": PREFIX + cfg["task"],
            "dataset_path": "json",
            "dataset_kwargs": {"data_files": {cfg["test_split"]: str(jsonl)}},
        }
        _dump(task_dir / f"{cfg['task']}.yaml", cfg)
        names.append(cfg["task"])
    group_file = "_bbh_cot_fewshot.yaml" if form == "cot_fewshot" else "_bbh_fewshot.yaml"
    group = _load_with_includes(src / group_file)
    assert set(group) <= GROUP_KEYS, group.keys()
    group["group"] = PREFIX + group["group"]
    group["task"] = _prefixed(group["task"])
    _dump(task_dir / f"_{group['group']}.yaml", group)
    assert len(names) == 27, len(names)
    return names


def write_task_dir(out_dir: Path, data_dir: Path = DEFAULT_DATA_DIR) -> Path:
    """Write all local task YAMLs and converted data under ``out_dir`` (the --include_path)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    write_mmlu_tasks(data_dir.resolve(), out_dir)
    write_gsm8k_task(data_dir.resolve(), out_dir)
    write_arc_tasks(data_dir.resolve(), out_dir)
    write_hellaswag_task(data_dir.resolve(), out_dir)
    write_truthfulqa_tasks(data_dir.resolve(), out_dir)
    write_winogrande_task(data_dir.resolve(), out_dir)
    write_piqa_task(data_dir.resolve(), out_dir)
    write_boolq_task(data_dir.resolve(), out_dir)
    write_bbh_tasks(data_dir.resolve(), out_dir, "cot_fewshot")
    write_bbh_tasks(data_dir.resolve(), out_dir, "fewshot")
    return out_dir


# ---------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------


def build_local_checkpoint(
    out_dir: Path,
    *,
    data_dir: Path = DEFAULT_DATA_DIR,
    architecture: str = "gpt2",
    n_layer: int = 2,
    width: int = 64,
    n_head: int = 4,
    seed: int = 0,
    dtype: str = "float32",
) -> Path:
    """Build a random-weight checkpoint with evalsweep's own builder (no Hub download).

    Speed and agreement depend on architecture, shape and tokenizer, not on trained
    weights, so a random model of a real architecture is a fair test subject. A
    model type of the architecture matrix (``evalsweep.demo._matrix``) gets that
    matrix's tiny shape; ``gpt2`` and ``llama`` take the shape arguments.
    """
    from evalsweep.demo import build_checkpoint, build_tokenizer, corpus_from_data_dir
    from evalsweep.demo._matrix import (
        MODEL_TYPES,
        VARIANTS,
        build_matrix_checkpoint,
        sentencepiece_only,
        train_sentencepiece,
        with_bos,
    )

    tokenizer = build_tokenizer(corpus_from_data_dir(data_dir, 5000), 2048)
    if architecture in VARIANTS:  # a tokenizer variant: BOS-adding, SentencePiece-only
        from transformers import AutoTokenizer

        model_type, _ = VARIANTS[architecture]
        spm_folder = out_dir.with_name(out_dir.name + "-spm")
        if architecture == "llama_bos":
            tokenizer = with_bos(tokenizer)
        else:
            train_sentencepiece(corpus_from_data_dir(data_dir, 5000), spm_folder, 2048)
            tokenizer = AutoTokenizer.from_pretrained(spm_folder)
        path = build_matrix_checkpoint(out_dir, model_type, tokenizer, dtype=dtype, seed=seed)
        return sentencepiece_only(path, spm_folder) if architecture == "llama_spm" else path
    if architecture not in ("gpt2", "llama") or dtype != "float32":
        if architecture not in MODEL_TYPES:
            raise ValueError(f"unknown architecture {architecture!r}")
        return build_matrix_checkpoint(out_dir, architecture, tokenizer, dtype=dtype, seed=seed)
    return build_checkpoint(
        out_dir,
        tokenizer,
        architecture=architecture,
        n_layer=n_layer,
        width=width,
        n_head=n_head,
        seed=seed,
    )


def tilt_toward_stops(
    checkpoint: Path, stops: Sequence[str], *, alpha: float, weight_scale: float = 1.0
) -> list[int]:
    """Make a random GPT-2 checkpoint stop its greedy generations early, in place.

    A random model never emits a stop sequence, so every generation runs to the maximum
    length. With tied embeddings the logits are ``ln_f(h) @ wte.T``; adding
    ``alpha * mean(wte[t] / |wte[t]|^2)`` over the stop tokens ``t`` (end of text and
    every vocabulary entry whose text contains one of ``stops``) to ``ln_f``'s bias
    raises each stop token's logit by about ``alpha / len(t)`` and the others' by far
    less, so a stop token wins where the model's own margin is small. ``weight_scale``
    first multiplies every matrix (embeddings, attention, MLP) so the hidden state
    depends more on the prompt (with the default init every document would stop at the
    same place). Float32, deterministic; returns the stop token ids.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    if model.config.model_type != "gpt2":
        raise ValueError("tilt_toward_stops needs a GPT-2 checkpoint (tied embeddings, ln_f)")
    ids = sorted(
        {tokenizer.eos_token_id}
        | {i for i in range(len(tokenizer)) if any(s in tokenizer.decode([i]) for s in stops)}
    )
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("weight") and param.dim() == 2:
                param.mul_(weight_scale)
        wte = model.transformer.wte.weight
        direction = torch.stack([wte[i] / wte[i].norm() ** 2 for i in ids]).mean(0)
        model.transformer.ln_f.bias.add_(alpha * direction)
    model.save_pretrained(str(checkpoint), safe_serialization=True)
    return ids


# ---------------------------------------------------------------------------------------
# Running and measuring subprocesses
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    """Wall clock and peak resident memory of one subprocess (and its children)."""

    wall_s: float
    peak_rss_mib: float
    returncode: int
    load_before: float  # 1-minute load average at start: the machine may be shared
    cpu_s: float  # user + system CPU seconds: far less sensitive than wall time to sharing


def run_measured(cmd: Sequence[str], log_path: Path, cwd: Path | None = None) -> Measured:
    """Run ``cmd`` offline, logging its output, and measure wall time and peak RSS.

    Peak RSS is the sum over the process tree, polled with psutil every 50 ms, so
    worker children count too. (ru_maxrss of RUSAGE_CHILDREN would be a max over every
    child this process ever waited for, not a per-run figure.) CPU time is the
    RUSAGE_CHILDREN delta, which covers the child and the descendants it waited for.
    """
    import psutil

    log_path.parent.mkdir(parents=True, exist_ok=True)
    peak = 0
    load_before = os.getloadavg()[0]
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            list(cmd), stdout=log, stderr=subprocess.STDOUT, env=offline_env(), cwd=cwd
        )
        done = threading.Event()

        def poll() -> None:
            nonlocal peak
            try:
                root = psutil.Process(proc.pid)
            except psutil.NoSuchProcess:
                return
            while not done.is_set():
                try:
                    tree = [root, *root.children(recursive=True)]
                    peak = max(peak, sum(p.memory_info().rss for p in tree))
                except psutil.Error:
                    pass
                done.wait(0.05)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        returncode = proc.wait()
        wall = time.perf_counter() - start
        done.set()
        poller.join()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (usage.ru_utime - usage_before.ru_utime) + (usage.ru_stime - usage_before.ru_stime)
    return Measured(wall, peak / 2**20, returncode, load_before, cpu)


def lm_eval_command(
    checkpoint: Path,
    tasks: str,
    include_path: Path,
    output_path: Path,
    *,
    limit: int | None,
    num_fewshot: int = 5,
    batch_size: str = "1",
    dtype: str = "float32",
    model: str = "hf",
    device: str = "cpu",
    softmax_dtype: str | None = None,
) -> list[str]:
    """The lm-eval invocation the benchmarks use (HF backend, CPU, float32 by default).

    ``softmax_dtype`` is lm-eval's model argument of that name: the dtype of its
    log-softmax (default: the model's, so bfloat16 sums log-probabilities in bfloat16).
    """
    model_args = f"pretrained={checkpoint},dtype={dtype}"
    if softmax_dtype:
        model_args += f",softmax_dtype={softmax_dtype}"
    cmd = [
        sys.executable,
        "-m",
        "lm_eval",
        "--model",
        model,
        "--model_args",
        model_args,
        "--device",
        device,
        "--tasks",
        tasks,
        "--num_fewshot",
        str(num_fewshot),
        "--batch_size",
        batch_size,
        "--log_samples",
        "--output_path",
        str(output_path),
        "--include_path",
        str(include_path),
    ]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    return cmd


LmEvalSamples = dict[str, list[dict[str, Any]]]


def read_lm_eval_output(output_path: Path) -> tuple[dict[str, Any], LmEvalSamples]:
    """Return lm-eval's results JSON and its logged samples keyed by task name."""
    results_files = sorted(output_path.rglob("results_*.json"))
    assert results_files, f"no lm-eval results under {output_path}"
    results = json.loads(results_files[-1].read_text())
    samples: LmEvalSamples = {}
    for path in sorted(output_path.rglob("samples_*.jsonl")):
        task = path.name.removeprefix("samples_").rsplit("_", 1)[0]
        samples.setdefault(task, []).extend(value for _, value in read_values(path))
    return results, samples


def evalsweep_command(
    checkpoints: Sequence[Path],
    tasks: str,
    data_dir: Path,
    out_dir: Path,
    *,
    store: Path,
    limit: int | None,
    num_fewshot: int | None = 5,
    batch_size: str | None = None,
    dtype: str = "float32",
    backend: str = "hf",
    device: str = "cpu",
) -> list[str]:
    """The evalsweep invocation the benchmarks use (CPU, float32 by default, a fresh store)."""
    cmd = [sys.executable, "-m", "evalsweep", "run", *map(str, checkpoints)]
    cmd += ["--tasks", tasks, "--data-dir", str(data_dir), "--device", device]
    if backend != "hf":
        cmd += ["--backend", backend]
    cmd += ["--dtype", dtype, "--store", str(store), "--out", str(out_dir)]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    if num_fewshot is not None:
        cmd += ["--num-fewshot", str(num_fewshot)]
    if batch_size is not None:
        cmd += ["--batch-size", batch_size]
    return cmd


def read_evalsweep_output(out_dir: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """evalsweep's per-document rows and its aggregates as {name: (value, stderr, n)}.

    Aggregate names follow ``lm_eval_aggregates`` in the parity script: a subject by bare
    name, ``mmlu`` and ``mmlu/<category>``, ``gsm8k <metric>``.
    """
    rows = [value for _, value in read_values(out_dir / "samples.jsonl")]
    results = json.loads((out_dir / "results.json").read_text())
    return rows, flatten_evalsweep_results(results)


def flatten_evalsweep_results(results: Any) -> dict[str, tuple[float, float, int]]:
    """Find aggregate records (dicts with metric/value/stderr) anywhere in results.json."""
    out: dict[str, tuple[float, float, int]] = {}

    def visit(node: Any, task: str | None) -> None:
        if isinstance(node, dict):
            task = node.get("task", task) if isinstance(node.get("task"), str) else task
            if {"metric", "value", "stderr"} <= node.keys():
                out[_aggregate_name(node, task)] = (
                    _num(node["value"]),
                    _num(node["stderr"]),
                    int(node.get("n", 0)),
                )
                return
            for key, value in node.items():
                visit(value, key if key in ("mmlu", "gsm8k") else task)
        elif isinstance(node, list):
            for item in node:
                visit(item, task)

    visit(results, None)
    return out


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def _aggregate_name(record: dict[str, Any], task: str | None) -> str:
    level, group, metric = record.get("level"), record.get("group"), record["metric"]
    if task in (
        "arc_easy", "arc_challenge", "hellaswag", "truthfulqa_mc1", "truthfulqa_mc2", "winogrande",
        "piqa", "boolq",
    ):  # fmt: skip
        return f"{task} {metric}"
    if task in ("bbh", "bbh_fewshot"):
        return f"{task}/{group} exact_match" if level == "subject" else f"{task} exact_match"
    if task == "gsm8k" or str(metric).startswith("exact_match"):
        return f"gsm8k {metric}"
    if level == "subject":
        return str(group)
    if level == "category":
        return f"mmlu/{group}"
    return "mmlu"


def warm_datasets_cache(task_dir: Path) -> None:
    """Load every local task's data files once so lm-eval's timed runs hit a warm cache.

    ``datasets`` converts JSON to Arrow on first use and caches by file path and mtime;
    that one-off conversion would otherwise be billed to whichever lm-eval run came first.
    """
    import datasets

    class TaskLoader(yaml.SafeLoader):
        """Reads task files that name lm-eval functions (``!function utils.process_docs``)."""

    TaskLoader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    datasets.disable_progress_bars()
    for path in sorted(task_dir.rglob("*.yaml")):
        cfg = yaml.load(path.read_text(encoding="utf-8"), Loader=TaskLoader)  # noqa: S506
        if cfg.get("dataset_path") == "json":
            datasets.load_dataset("json", **cfg["dataset_kwargs"])


def machine_and_versions() -> dict[str, str]:
    """What a reader needs to reproduce or discount the figures."""
    import lm_eval
    import torch
    import transformers

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    commit = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    return {
        "machine": f"{cpu}, {os.cpu_count()} CPU cores, {mem_gib:.0f} GiB RAM, no GPU",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch threads": str(torch.get_num_threads()),
        "transformers": transformers.__version__,
        "lm-eval": lm_eval.__version__,
        "evalsweep commit": commit or "unknown",
    }


def append_results_md(section: str) -> Path:
    """Append a section to benchmarks/RESULTS.md (never rewrite: other benchmarks share it)."""
    path = Path(__file__).resolve().parent / "RESULTS.md"
    with path.open("a", encoding="utf-8") as handle:
        handle.write(section)
    return path
