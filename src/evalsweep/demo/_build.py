"""Build small local checkpoints: a trained BPE tokenizer plus random weights.

Speed and correctness of an evaluator depend on the model's shape and on its
tokenizer, not on what the weights learned, so random weights of a real
architecture (GPT-2 or Llama) are enough for tests, benchmarks and the demo.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from pathlib import Path

from evalsweep.jsonl import read_values

EOS = "<|endoftext|>"


def corpus_from_data_dir(data_dir: Path, max_lines: int = 20000) -> Iterator[str]:
    """Yield lines of benchmark text (MMLU and GSM8K) to train a tokenizer on."""
    count = 0
    for csv_path in sorted((data_dir / "mmlu").glob("*/*.csv")):
        with csv_path.open(newline="", encoding="utf-8") as handle:
            for row in csv.reader(handle):
                yield " ".join(row)
                count += 1
                if count >= max_lines:
                    return
    for name in ("train.jsonl", "test.jsonl"):
        path = data_dir / "gsm8k" / name
        if not path.exists():
            continue
        for _, doc in read_values(path):
            yield doc["question"] + "\n" + doc["answer"]
            count += 1
            if count >= 2 * max_lines:
                return


def build_tokenizer(texts: Iterable[str], vocab_size: int = 2048):  # type: ignore[no-untyped-def]
    """Train a GPT-2-style byte-level BPE tokenizer and wrap it for transformers."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=EOS,
        bos_token=EOS,
        unk_token=EOS,
        model_max_length=2048,
    )


def build_checkpoint(
    out_dir: Path,
    tokenizer,  # type: ignore[no-untyped-def]
    *,
    architecture: str = "gpt2",
    n_layer: int = 2,
    width: int = 64,
    n_head: int = 4,
    max_positions: int = 2048,
    seed: int = 0,
) -> Path:
    """Write a random-weight causal LM of the given shape (safetensors) with its tokenizer."""
    import torch
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        LlamaConfig,
        LlamaForCausalLM,
        PretrainedConfig,
        PreTrainedModel,
    )

    torch.manual_seed(seed)
    vocab = len(tokenizer)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    config: PretrainedConfig
    model: PreTrainedModel
    if architecture == "gpt2":
        config = GPT2Config(
            vocab_size=vocab,
            n_positions=max_positions,
            n_embd=width,
            n_layer=n_layer,
            n_head=n_head,
            bos_token_id=eos_id,
            eos_token_id=eos_id,
        )
        model = GPT2LMHeadModel(config)
    elif architecture == "llama":
        config = LlamaConfig(
            vocab_size=vocab,
            hidden_size=width,
            intermediate_size=width * 4,
            num_hidden_layers=n_layer,
            num_attention_heads=n_head,
            num_key_value_heads=n_head,
            max_position_embeddings=max_positions,
            bos_token_id=eos_id,
            eos_token_id=eos_id,
            tie_word_embeddings=False,
        )
        model = LlamaForCausalLM(config)
    else:
        raise ValueError(f"unknown architecture {architecture!r}")
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


LORA_TARGETS = {"gpt2": ["c_attn"], "llama": ["q_proj", "v_proj"]}


def build_lora_adapter(base_dir: Path, out_dir: Path, *, rank: int = 4, seed: int = 0) -> Path:
    """Write a PEFT LoRA adapter with random (non-zero) weights for the checkpoint in ``base_dir``.

    Both LoRA matrices are random (``init_lora_weights=False``), so the adapter
    really changes the model's answers; ``adapter_config.json`` names the base
    folder by its absolute path, as PEFT does for a model loaded from a folder.
    """
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_dir.resolve(), dtype=torch.float32)
    targets = LORA_TARGETS.get(base.config.model_type)
    if targets is None:
        raise ValueError(f"no LoRA targets known for {base.config.model_type!r}")
    torch.manual_seed(seed)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=targets,
        init_lora_weights=False,
        fan_in_fan_out=base.config.model_type == "gpt2",  # GPT-2's Conv1D stores W transposed
    )
    model = get_peft_model(base, config)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    return out_dir
