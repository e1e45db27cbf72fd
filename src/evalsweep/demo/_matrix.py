"""Tiny random-weight checkpoints of the causal-LM architectures people evaluate.

One entry per model type, each small (a few layers, width 64) but with the
features that make the architecture different: grouped-query attention,
partial rotary, parallel residuals, sliding windows shorter than a few-shot
prompt, alternating local/global layers, soft-capping, mixtures of experts.
The architecture-matrix tests and ``benchmarks/parity_lm_eval.py --matrix``
build their checkpoints from this one table.

Random weights are drawn with a wide initialiser so that next-token
distributions are peaked: near-uniform logits would make every argmax a
coin toss between values that differ in the last bit, which says nothing
about whether two computations agree.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

#: A window shorter than every few-shot prompt of the tests and benchmarks.
WINDOW = 48
WIDTH = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = WIDTH // HEADS
LAYERS = 2
INIT_RANGE = 0.2


def _common(vocab: int, eos: int, bos: int) -> dict[str, Any]:
    return {
        "vocab_size": vocab,
        "hidden_size": WIDTH,
        "intermediate_size": 2 * WIDTH,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "max_position_embeddings": 2048,
        "bos_token_id": bos,
        "eos_token_id": eos,
        "pad_token_id": None,
        "initializer_range": INIT_RANGE,
        "tie_word_embeddings": False,
    }


def _windowed(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, "sliding_window": WINDOW}


def _specs() -> dict[str, Callable[[int, int, int], tuple[str, dict[str, Any]]]]:
    """model type -> (vocab, eos, bos) -> (config class name, config keyword arguments)."""

    def gpt2(v: int, e: int, b: int) -> tuple[str, dict[str, Any]]:
        return "GPT2Config", {
            "vocab_size": v, "n_embd": WIDTH, "n_layer": LAYERS, "n_head": HEADS,
            "n_positions": 2048, "bos_token_id": b, "eos_token_id": e,
            "initializer_range": INIT_RANGE,
        }  # fmt: skip

    def gpt_neox(v: int, e: int, b: int) -> tuple[str, dict[str, Any]]:
        config = _common(v, e, b)
        del config["num_key_value_heads"]
        return "GPTNeoXConfig", {**config, "rotary_pct": 0.25, "use_parallel_residual": True}

    def gptj(v: int, e: int, b: int) -> tuple[str, dict[str, Any]]:
        return "GPTJConfig", {
            "vocab_size": v, "n_embd": WIDTH, "n_layer": LAYERS, "n_head": HEADS,
            "rotary_dim": 8, "n_positions": 2048, "bos_token_id": b, "eos_token_id": e,
            "initializer_range": INIT_RANGE,
        }  # fmt: skip

    def simple(name: str, **extra: Any) -> Callable[[int, int, int], tuple[str, dict[str, Any]]]:
        def spec(v: int, e: int, b: int) -> tuple[str, dict[str, Any]]:
            return name, {**_common(v, e, b), **extra}

        return spec

    def windowed(name: str, **extra: Any) -> Callable[[int, int, int], tuple[str, dict[str, Any]]]:
        def spec(v: int, e: int, b: int) -> tuple[str, dict[str, Any]]:
            return name, {**_windowed(_common(v, e, b)), **extra}

        return spec

    def falcon(v: int, e: int, b: int) -> tuple[str, dict[str, Any]]:
        return "FalconConfig", {
            "vocab_size": v, "hidden_size": WIDTH, "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS, "num_kv_heads": KV_HEADS,
            "new_decoder_architecture": True, "bos_token_id": b, "eos_token_id": e,
            "initializer_range": INIT_RANGE, "max_position_embeddings": 2048,
        }  # fmt: skip

    def phi(v: int, e: int, b: int) -> tuple[str, dict[str, Any]]:
        return "PhiConfig", {**_common(v, e, b), "partial_rotary_factor": 0.5}

    alternating = ["sliding_attention", "full_attention"]
    return {
        "gpt2": gpt2,
        "gpt_neox": gpt_neox,
        "gptj": gptj,
        "llama": simple("LlamaConfig"),
        "mistral": windowed("MistralConfig"),
        "mixtral": windowed("MixtralConfig", num_local_experts=4, num_experts_per_tok=2),
        "qwen2": simple("Qwen2Config"),
        "qwen2_moe": simple(
            "Qwen2MoeConfig",
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=WIDTH,
            shared_expert_intermediate_size=WIDTH,
        ),
        "qwen3": simple("Qwen3Config", head_dim=HEAD_DIM),
        "qwen3_moe": simple(
            "Qwen3MoeConfig",
            head_dim=HEAD_DIM,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=WIDTH,
        ),
        "gemma": simple("GemmaConfig", head_dim=HEAD_DIM),
        "gemma2": windowed(
            "Gemma2Config",
            head_dim=HEAD_DIM,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
            layer_types=alternating,
            tie_word_embeddings=True,
        ),
        "gemma3_text": windowed(
            "Gemma3TextConfig",
            head_dim=HEAD_DIM,
            layer_types=alternating,
            tie_word_embeddings=True,
        ),
        "phi": phi,
        "phi3": windowed("Phi3Config"),
        "olmo2": simple("Olmo2Config"),
        "falcon": falcon,
        "starcoder2": windowed("Starcoder2Config"),
        "granite": simple("GraniteConfig"),
        "cohere": simple("CohereConfig", tie_word_embeddings=True),
        "stablelm": simple("StableLmConfig", partial_rotary_factor=0.25),
    }


SPECS = _specs()
#: Every model type of the matrix, in a stable order.
MODEL_TYPES = tuple(SPECS)


def matrix_config(model_type: str, vocab: int, eos: int, bos: int) -> Any:
    """The transformers config of ``model_type``'s tiny checkpoint."""
    import transformers

    if model_type not in SPECS:
        raise ValueError(f"unknown model type {model_type!r} (known: {', '.join(MODEL_TYPES)})")
    class_name, kwargs = SPECS[model_type](vocab, eos, bos)
    config_class = getattr(transformers, class_name)
    return config_class(**kwargs)


def build_matrix_checkpoint(
    out_dir: Path,
    model_type: str,
    tokenizer: Any,
    *,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Write a tiny random-weight ``model_type`` checkpoint (safetensors) with ``tokenizer``.

    ``dtype`` is the dtype the weights are stored in and ``config.json`` names.
    """
    import torch
    from transformers import AutoModelForCausalLM

    eos = tokenizer.eos_token_id
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else eos
    config = matrix_config(model_type, len(tokenizer), eos, bos)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2:
                param.normal_(0.0, INIT_RANGE)
            elif "norm" in name or "ln" in name:
                continue
    model = model.to(getattr(torch, dtype)).eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


# -- tokenizer variants ------------------------------------------------------------------------

#: Tokenizer variants of the matrix: name -> (model type, what differs from the byte-level BPE).
VARIANTS = {
    "llama_bos": ("llama", "a tokenizer that adds a BOS token to every input"),
    "llama_spm": ("llama", "a SentencePiece-only tokenizer (tokenizer.model, no tokenizer.json)"),
}


def with_bos(tokenizer: Any) -> Any:
    """The same vocabulary plus a distinct ``<s>`` the tokenizer adds before every input."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    inner = tokenizer.backend_tokenizer.__class__.from_str(tokenizer.backend_tokenizer.to_str())
    inner.add_special_tokens(["<s>"])
    bos_id = inner.token_to_id("<s>")
    inner.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=inner,
        bos_token="<s>",
        eos_token=tokenizer.eos_token,
        unk_token=tokenizer.eos_token,
        model_max_length=2048,
    )


def train_sentencepiece(corpus: Any, folder: Path, vocab_size: int = 700) -> Path:
    """Train a Llama-style SentencePiece BPE model into ``folder`` (``tokenizer.model`` only).

    As Llama's: byte fallback, no normaliser, whitespace kept, digits split, BOS added.
    Writes ``tokenizer.model`` and a ``tokenizer_config.json`` naming ``LlamaTokenizer``;
    needs the ``sentencepiece`` package.
    """
    import sentencepiece

    folder.mkdir(parents=True, exist_ok=True)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_prefix=str(folder / "tokenizer"),
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=1.0,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    (folder / "tokenizer.vocab").unlink()
    (folder / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", '
        '"unk_token": "<unk>", "add_bos_token": true, "add_eos_token": false, '
        '"legacy": false, "model_max_length": 2048}'
    )
    return folder


def sentencepiece_only(checkpoint: Path, spm_folder: Path) -> Path:
    """Make ``checkpoint``'s tokenizer SentencePiece-only: the trained files, no tokenizer.json."""
    import shutil

    (checkpoint / "tokenizer.json").unlink(missing_ok=True)
    for file in ("tokenizer.model", "tokenizer_config.json"):
        shutil.copyfile(spm_folder / file, checkpoint / file)
    return checkpoint


__all__ = [
    "MODEL_TYPES",
    "VARIANTS",
    "WINDOW",
    "build_matrix_checkpoint",
    "matrix_config",
    "sentencepiece_only",
    "train_sentencepiece",
    "with_bos",
]
