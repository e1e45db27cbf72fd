"""SentencePiece-only tokenizers (``tokenizer.model``, no ``tokenizer.json``) on both majors.

transformers converts such a tokenizer at load time, and its two majors do it
differently (transformers 5 reads the file as tiktoken without protobuf, drops
Llama's BOS default, ignores ``legacy``, reads unigram models as BPE). Here
SentencePiece models are trained on the test slices in the tokenizer_config
styles of the families that ship them (Llama with and without ``legacy`` and
``add_bos_token``, Mistral, Gemma, T5, a unigram Llama), and every one either
tokenizes real MMLU and GSM8K requests exactly as SentencePiece itself does
(with BOS/EOS as its config says) or is refused with a one-line error. The
probes evalsweep checks at load time are not these texts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import transformers

from conftest import TEST_DATA
from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.errors import CheckpointError
from evalsweep.models._tokens import PairEncoder, load_tokenizer
from evalsweep.requests import LoglikelihoodRequest
from evalsweep.tasks import DataSource
from evalsweep.tasks.gsm8k import GSM8K
from evalsweep.tasks.mmlu import MMLU

pytestmark = pytest.mark.archmatrix
spm = pytest.importorskip("sentencepiece", reason="sentencepiece is not installed")

MAJOR = int(transformers.__version__.split(".")[0])
#: How Llama-family SentencePiece models are trained: no normaliser, spaces kept.
LLAMA_LIKE = {
    "normalization_rule_name": "identity",
    "remove_extra_whitespaces": False,
    "split_digits": True,
    "allow_whitespace_only_pieces": True,
}
LLAMA_IDS = {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": -1}
LLAMA_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
GEMMA_IDS = {
    "pad_id": 0,
    "eos_id": 1,
    "bos_id": 2,
    "unk_id": 3,
    "pad_piece": "<pad>",
    "eos_piece": "<eos>",
    "bos_piece": "<bos>",
}
GEMMA_TOKENS = {
    "bos_token": "<bos>",
    "eos_token": "<eos>",
    "pad_token": "<pad>",
    "unk_token": "<unk>",
}

#: style -> (SentencePiece trainer settings, tokenizer_config.json, accepted under this major).
STYLES: dict[str, tuple[dict[str, Any], dict[str, Any], bool]] = {
    "llama-nonlegacy": (
        {"model_type": "bpe", **LLAMA_LIKE, **LLAMA_IDS},
        {
            "tokenizer_class": "LlamaTokenizer",
            **LLAMA_TOKENS,
            "add_bos_token": True,
            "add_eos_token": False,
            "legacy": False,
        },
        True,
    ),
    "llama-legacy": (
        {"model_type": "bpe", **LLAMA_LIKE, **LLAMA_IDS},
        {
            "tokenizer_class": "LlamaTokenizer",
            **LLAMA_TOKENS,
            "add_bos_token": True,
            "legacy": True,
        },
        True,
    ),
    # No add_bos_token, no legacy: Llama's defaults (BOS, legacy), which transformers 5 drops.
    "llama-bare": (
        {"model_type": "bpe", **LLAMA_LIKE, **LLAMA_IDS},
        {"tokenizer_class": "LlamaTokenizer", **LLAMA_TOKENS},
        True,
    ),
    "mistral": (
        {"model_type": "bpe", **LLAMA_LIKE, **LLAMA_IDS},
        {
            "tokenizer_class": "LlamaTokenizer",
            **LLAMA_TOKENS,
            "add_bos_token": True,
            "add_eos_token": False,
            "legacy": True,
            "pad_token": None,
            "clean_up_tokenization_spaces": False,
        },
        True,
    ),
    "gemma": (
        {"model_type": "bpe", **LLAMA_LIKE, "add_dummy_prefix": False, **GEMMA_IDS},
        {
            "tokenizer_class": "GemmaTokenizer",
            **GEMMA_TOKENS,
            "add_bos_token": True,
            "add_eos_token": False,
        },
        True,
    ),
    # transformers 5's Llama tokenizer is BPE whatever the model file holds.
    "llama-unigram": (
        {"model_type": "unigram", **LLAMA_LIKE, **LLAMA_IDS},
        {"tokenizer_class": "LlamaTokenizer", **LLAMA_TOKENS, "legacy": False},
        MAJOR < 5,
    ),
    # A SentencePiece normaliser that collapses whitespace: no fast tokenizer carries it over.
    "llama-collapsing-spaces": (
        {"model_type": "bpe", **LLAMA_IDS},
        {"tokenizer_class": "LlamaTokenizer", **LLAMA_TOKENS, "legacy": False},
        False,
    ),
    "t5": (
        {
            "model_type": "unigram",
            **LLAMA_LIKE,
            "pad_id": 0,
            "eos_id": 1,
            "unk_id": 2,
            "bos_id": -1,
        },
        {
            "tokenizer_class": "T5Tokenizer",
            "eos_token": "</s>",
            "pad_token": "<pad>",
            "unk_token": "<unk>",
            "extra_ids": 0,
        },
        None,  # either way: T5 is not a causal model evalsweep scores; the rule still holds
    ),
}


def _corpus() -> list[str]:
    from evalsweep.demo import corpus_from_data_dir

    return list(corpus_from_data_dir(TEST_DATA, max_lines=800))


def build_sentencepiece_only(folder: Path, style: str, corpus: list[str]) -> Path:
    trainer, config, _ = STYLES[style]
    folder.mkdir(parents=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus),
        model_prefix=str(folder / "tokenizer"),
        vocab_size=700,
        byte_fallback=True,
        character_coverage=1.0,
        minloglevel=2,
        **trainer,
    )
    (folder / "tokenizer.vocab").unlink()
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 2048}))
    return folder


@pytest.fixture(scope="module")
def spm_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    corpus = _corpus()
    root = tmp_path_factory.mktemp("spm-styles")
    for style in STYLES:
        build_sentencepiece_only(root / style, style, corpus)
    return root


def local(folder: Path) -> ResolvedCheckpoint:
    return ResolvedCheckpoint(
        reference=folder.name,
        kind="local",
        location=str(folder),
        revision=None,
        identity=f"local:{folder.name}",
    )


@pytest.fixture(scope="module")
def requests() -> tuple[list[LoglikelihoodRequest], list[str]]:
    """Real 5-shot MMLU requests and 8-shot GSM8K prompts from the test slices."""
    source = DataSource(str(TEST_DATA))
    mmlu = MMLU(subjects=["high_school_geography", "world_religions", "abstract_algebra"])
    pairs = [
        r
        for p in mmlu.prepare(mmlu.load(source, 4), 5)
        for r in p.requests
        if isinstance(r, LoglikelihoodRequest)
    ]
    gsm8k = GSM8K()
    prompts = [r.context for p in gsm8k.prepare(gsm8k.load(source, 12), 8) for r in p.requests]
    return pairs, prompts


def sentencepiece_says(folder: Path, text: str) -> list[int]:
    """What the checkpoint's own SentencePiece model makes of a text, with its config's BOS/EOS."""
    processor = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    llama_like = config["tokenizer_class"] != "T5Tokenizer"
    ids = list(processor.encode(text))
    if config.get("add_bos_token", llama_like):
        ids = [processor.bos_id(), *ids]
    if config.get("add_eos_token", not llama_like):
        ids = [*ids, processor.eos_id()]
    return ids


@pytest.mark.parametrize("style", list(STYLES))
def test_sentencepiece_only_tokenizes_as_sentencepiece_or_is_refused(
    style: str, spm_root: Path, requests: tuple[list[LoglikelihoodRequest], list[str]]
) -> None:
    folder = spm_root / style
    accepted = STYLES[style][2]
    try:
        tokenizer = load_tokenizer(local(folder), trust_remote_code=False)
    except CheckpointError as exc:
        message = str(exc)
        assert accepted is not True, (style, message)
        assert "\n" not in message
        assert message.startswith(f"checkpoint {style!r}: its SentencePiece-only tokenizer")
        assert "save a tokenizer.json" in message
        return
    assert accepted is not False, style
    encoder = PairEncoder(tokenizer)
    pairs, prompts = requests
    processor = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    bos = sentencepiece_says(folder, "")[:1] if processor.bos_id() >= 0 else []
    for prompt in prompts:  # GSM8K prompts whole, as generation sends them
        assert encoder.encode(prompt) == sentencepiece_says(folder, prompt), (style, prompt)
    encoded = encoder.encode_pairs([(r.context, r.continuation) for r in pairs])
    for request, (context, continuation) in zip(pairs, encoded, strict=True):
        whole = sentencepiece_says(folder, request.context + request.continuation)
        head = sentencepiece_says(folder, request.context)
        assert context + continuation == whole, (style, request.continuation)
        assert context == head and continuation == whole[len(head) :]
    if style != "t5":
        assert bos and all(ids[: len(bos)] == bos for ids, _ in encoded)


def test_missing_protobuf_is_refused_by_name(spm_root: Path, tmp_path: Path) -> None:
    """Without protobuf transformers 5 parses tokenizer.model as tiktoken: refused first."""
    folder = spm_root / "llama-bare"
    script = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "google.protobuf" or name.startswith("google.protobuf."):
            raise ImportError("blocked: " + name)
        return None
sys.meta_path.insert(0, Block())
from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.errors import CheckpointError
from evalsweep.models._tokens import load_tokenizer
checkpoint = ResolvedCheckpoint("spm", "local", {str(folder)!r}, None, "local:spm")
try:
    load_tokenizer(checkpoint, False)
except CheckpointError as exc:
    print("REFUSED", exc)
else:
    print("LOADED")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith(("REFUSED", "LOADED"))]
    assert lines == [
        "REFUSED checkpoint 'spm': its tokenizer is SentencePiece-only (tokenizer.model, no "
        "tokenizer.json) and reading it needs protobuf (pip install protobuf); without it "
        "transformers misreads the file as tiktoken"
    ]


def test_a_tokenizer_json_beside_it_is_not_second_guessed(spm_root: Path, tmp_path: Path) -> None:
    """With tokenizer.json the checkpoint pins its own tokenization: no SentencePiece check."""
    import shutil

    from evalsweep.models._sentencepiece import loaded_sentencepiece_file

    folder = tmp_path / "pinned"
    shutil.copytree(spm_root / "llama-collapsing-spaces", folder)
    spm_model = folder / "tokenizer.model"
    with pytest.raises(CheckpointError):
        load_tokenizer(local(folder), trust_remote_code=False)
    # Pin it as a tokenizer.json, saved from the converted fast tokenizer without the check.
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(folder).backend_tokenizer.save(str(folder / "tokenizer.json"))
    tokenizer = load_tokenizer(local(folder), trust_remote_code=False)
    assert spm_model.is_file() and loaded_sentencepiece_file(tokenizer) is None
