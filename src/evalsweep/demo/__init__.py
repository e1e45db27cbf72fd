"""The offline demo and the tiny checkpoints it (and the tests) are built from.

``build_checkpoint`` writes a real transformers checkpoint with random
weights and a byte-level BPE tokenizer trained on local text, so that the
whole pipeline can run without the Hugging Face Hub; ``build_lora_adapter``
adds a small PEFT adapter on top of one (it needs ``peft``).
"""

from evalsweep.demo._build import (
    build_checkpoint,
    build_lora_adapter,
    build_tokenizer,
    corpus_from_data_dir,
)
from evalsweep.demo._run import run_demo, train_checkpoints

__all__ = [
    "build_checkpoint",
    "build_lora_adapter",
    "build_tokenizer",
    "corpus_from_data_dir",
    "run_demo",
    "train_checkpoints",
]
