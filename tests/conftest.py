"""Shared fixtures: real benchmark data, a trained tokenizer and tiny real checkpoints.

Nothing here is a mock. The tokenizer is trained with evalsweep's own
``build_tokenizer`` on local benchmark text, and every checkpoint is a real
transformers model (random weights, safetensors on disk) built once per test
session. The Hub is never contacted: offline mode is set before anything that
could import ``huggingface_hub`` is loaded.
"""

from __future__ import annotations

import os

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    # The test process uses tokenizers before forking CLI subprocesses; without
    # this the child prints a fork warning on stderr.
    "TOKENIZERS_PARALLELISM": "false",
}
os.environ.update(OFFLINE_ENV)

import contextlib  # noqa: E402
import sqlite3  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

TOKENIZER_LINES = 3000
VOCAB_SIZE = 1024


def _data_dir() -> Path:
    override = os.environ.get("EVALSWEEP_TEST_DATA")
    if override:
        return Path(override).expanduser().resolve()
    return Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Real MMLU and GSM8K files (``../shared/data``, or ``$EVALSWEEP_TEST_DATA``)."""
    path = _data_dir()
    needed = [
        path / "mmlu" / "test" / "abstract_algebra_test.csv",
        path / "mmlu" / "dev" / "abstract_algebra_dev.csv",
        path / "gsm8k" / "test.jsonl",
        path / "gsm8k" / "train.jsonl",
    ]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        pytest.fail(
            f"benchmark data not found ({', '.join(missing)}); "
            "put shared/data beside the repository or set EVALSWEEP_TEST_DATA"
        )
    return path


@pytest.fixture(scope="session")
def tokenizer(data_dir: Path):  # type: ignore[no-untyped-def]
    """A byte-level BPE tokenizer trained on local MMLU and GSM8K text."""
    from evalsweep.demo import build_tokenizer, corpus_from_data_dir

    return build_tokenizer(
        corpus_from_data_dir(data_dir, max_lines=TOKENIZER_LINES), vocab_size=VOCAB_SIZE
    )


@pytest.fixture(scope="session")
def checkpoint_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("checkpoints")


def _build(root: Path, name: str, tokenizer, **kwargs: object) -> Path:  # type: ignore[no-untyped-def]
    from evalsweep.demo import build_checkpoint

    return build_checkpoint(
        root / name, tokenizer, n_layer=2, width=32, n_head=2, max_positions=2048, **kwargs
    )


@pytest.fixture(scope="session")
def gpt2_a(checkpoint_root: Path, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """Tiny GPT-2, seed 0."""
    return _build(checkpoint_root, "gpt2-a", tokenizer, architecture="gpt2", seed=0)


@pytest.fixture(scope="session")
def gpt2_b(checkpoint_root: Path, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """Tiny GPT-2 of the same shape as ``gpt2_a``, seed 1 (different weights)."""
    return _build(checkpoint_root, "gpt2-b", tokenizer, architecture="gpt2", seed=1)


@pytest.fixture(scope="session")
def gpt2_c(checkpoint_root: Path, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """Tiny GPT-2 of the same shape, seed 2."""
    return _build(checkpoint_root, "gpt2-c", tokenizer, architecture="gpt2", seed=2)


@pytest.fixture(scope="session")
def llama_checkpoint(checkpoint_root: Path, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """Tiny Llama-architecture model (rotary positions, RMSNorm, untied head), seed 3."""
    return _build(checkpoint_root, "llama", tokenizer, architecture="llama", seed=3)


@pytest.fixture(scope="session")
def gpt_neo_checkpoint(checkpoint_root: Path, tokenizer) -> Path:  # type: ignore[no-untyped-def]
    """Tiny GPT-Neo: a real architecture whose forward has no ``logits_to_keep``."""
    import torch
    from transformers import GPTNeoConfig, GPTNeoForCausalLM

    from evalsweep.demo._build import EOS

    torch.manual_seed(4)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    config = GPTNeoConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        attention_types=[[["global", "local"], 1]],
        window_size=256,
        max_position_embeddings=2048,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
    )
    out = checkpoint_root / "gpt-neo"
    GPTNeoForCausalLM(config).eval().save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A fresh SQLite results file for one test (not created until a Store opens it)."""
    return tmp_path / "results.sqlite"


@pytest.fixture(scope="session")
def cli_env() -> dict[str, str]:
    """Environment for CLI subprocesses: this one, offline, with a wide terminal."""
    env = dict(os.environ)
    env.update(OFFLINE_ENV)
    env["COLUMNS"] = "200"
    env.pop("EVALSWEEP_STORE", None)
    env.pop("EVALSWEEP_DATA_DIR", None)
    env.pop("EVALSWEEP_DEBUG", None)
    return env


def count_sample_rows(path: Path) -> int:
    """Rows in a store's ``samples`` table; 0 when the file or table was never created."""
    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(path)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "samples" not in tables:
            return 0
        return int(conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0])


@pytest.fixture
def sample_rows():  # type: ignore[no-untyped-def]
    """``sample_rows(path)``: number of stored sample rows in a results file."""
    return count_sample_rows
