"""Checkpoints as they are found on disk load and answer as the plain model does.

Each layout is written here from one tiny Llama (random weights): sharded
safetensors with an index, ``pytorch_model.bin`` only, float16 and bfloat16
weights, a ``generation_config.json`` with several EOS ids, a tokenizer with
no pad token, and a checkpoint that ships its own modelling code (served only
with ``trust_remote_code``). Nothing is mocked: the backend loads each folder
with transformers, and its answers are compared with a plain forward.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import TEST_DATA
from evalsweep.checkpoints import resolve_checkpoint
from evalsweep.demo._matrix import build_matrix_checkpoint
from evalsweep.errors import CheckpointError
from evalsweep.models import BackendOptions, load_backend
from evalsweep.models._arch import FULL_FORWARD, PLAIN_DECODE
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest

DEMO_DATA = TEST_DATA
REQUESTS = [
    LoglikelihoodRequest("Question: What is 2 + 2?\nAnswer:", " 4"),
    LoglikelihoodRequest("Question: What is 2 + 2?\nAnswer:", " The answer is 4.\n#### 4"),
    LoglikelihoodRequest("The capital of France is", " Paris, a city on the Seine"),
]
PROMPTS = ["Question: Janet has 3 apples and buys 2 more. How many?\nAnswer:", "The capital of"]


@pytest.fixture(scope="module")
def layout_tokenizer() -> Any:
    """A byte-level BPE tokenizer with EOS only: no pad, no separate BOS or UNK token."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    from evalsweep.demo import build_tokenizer, corpus_from_data_dir

    trained = build_tokenizer(corpus_from_data_dir(DEMO_DATA, max_lines=600), vocab_size=400)
    inner = Tokenizer.from_str(trained.backend_tokenizer.to_str())
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=inner, eos_token=trained.eos_token)
    assert tokenizer.pad_token is None and tokenizer.unk_token is None
    return tokenizer


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, layout_tokenizer: Any) -> Path:
    root = tmp_path_factory.mktemp("layouts")
    return build_matrix_checkpoint(root / "base", "llama", layout_tokenizer, seed=5)


def _backend(path: Path, **options: Any) -> Any:
    settings = {"device": "cpu", "dtype": "auto", **options}
    return load_backend("hf", resolve_checkpoint(str(path)), BackendOptions(**settings))


def _copy_with(base: Path, out: Path, model: Any, **save: Any) -> Path:
    """``base``'s tokenizer files beside ``model`` saved with ``save`` options."""
    out.mkdir(parents=True)
    for file in base.iterdir():
        if file.name.startswith("tokenizer") or file.name == "special_tokens_map.json":
            shutil.copy(file, out / file.name)
    model.save_pretrained(str(out), **save)
    return out


@torch.inference_mode()
def _plain(path: Path, dtype: Any, request: LoglikelihoodRequest, backend: Any) -> float:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    context, continuation = backend.encode_pair(request.context, request.continuation)
    inputs = torch.tensor([(context + continuation)[:-1]])
    rows = torch.log_softmax(model(inputs).logits[0].float(), -1)[-len(continuation) :]
    return float(rows.gather(1, torch.tensor(continuation)[:, None]).sum())


def _answers(path: Path, **options: Any) -> tuple[list[float], list[str], Any]:
    """Log-likelihoods, generations and the backend (its description kept before closing)."""
    backend = _backend(path, **options)
    try:
        results = backend.loglikelihood(REQUESTS)
        texts = backend.generate_until([GenerationRequest(p, ("\n\n",), 12) for p in PROMPTS])
        backend.described = backend.describe()
        return [r.logprob for r in results], texts, backend
    finally:
        backend.close()


def test_sharded_safetensors_with_index_answer_as_one_file(base: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    sharded = _copy_with(base, tmp_path / "sharded", model, max_shard_size="100KB")
    shards = sorted(p.name for p in sharded.glob("*.safetensors"))
    assert len(shards) > 1 and (sharded / "model.safetensors.index.json").is_file()
    assert _answers(sharded)[:2] == _answers(base)[:2]


def test_pytorch_model_bin_only_answers_as_safetensors(base: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    pickled = _copy_with(base, tmp_path / "bin", model, safe_serialization=False)
    assert (pickled / "pytorch_model.bin").is_file()
    assert not list(pickled.glob("*.safetensors"))
    assert _answers(pickled)[:2] == _answers(base)[:2]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_checkpoint_loads_in_its_own_dtype(
    dtype: str, base: Path, tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=getattr(torch, dtype))
    half = _copy_with(base, tmp_path / dtype, model)
    config = json.loads((half / "config.json").read_text())
    assert dtype in (config.get("dtype"), config.get("torch_dtype"))
    logprobs, texts, backend = _answers(half)
    assert backend.settings()["dtype"] == dtype
    for request, logprob in zip(REQUESTS, logprobs, strict=True):
        expected = _plain(half, getattr(torch, dtype), request, backend)
        assert logprob == pytest.approx(expected, abs=0.08)
    assert all(isinstance(t, str) for t in texts)


def test_generation_stops_at_every_eos_id_of_generation_config(base: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(base).eval()
    eos = model.config.eos_token_id
    backend = _backend(base)
    try:
        # A prompt whose free greedy generation has a token first seen after the start.
        for prompt in [*PROMPTS, "Question:", "The", "Answer: 4\n"]:
            ids = torch.tensor([backend.encoder.encode(prompt)])
            free = model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=eos)[0]
            new = free[ids.shape[1] :].tolist()
            later = [j for j in range(1, len(new)) if new[j] not in new[:j] and new[j] != eos]
            if later:
                break
    finally:
        backend.close()
    assert later, "no prompt generated two distinct tokens"
    # That token becomes a second EOS id: generation must stop right after it.
    cut = later[0]
    stop_id = new[cut]
    model.generation_config = GenerationConfig(eos_token_id=[eos, stop_id], pad_token_id=eos)
    folder = _copy_with(base, tmp_path / "eos", model)
    saved = json.loads((folder / "generation_config.json").read_text())
    assert saved["eos_token_id"] == [eos, stop_id]
    backend = _backend(folder)
    try:
        text = backend.generate_until([GenerationRequest(prompt, (), 12)])[0]
        reloaded = AutoModelForCausalLM.from_pretrained(folder).eval()
        out = reloaded.generate(ids, max_new_tokens=12, do_sample=False)[0, ids.shape[1] :]
        expected = backend.tokenizer.decode(out, skip_special_tokens=True)
    finally:
        backend.close()
    assert out.tolist() == new[: cut + 1]
    assert text == expected


def test_tokenizer_without_pad_token_pads_with_eos(base: Path) -> None:
    backend = _backend(base)
    try:
        assert backend.tokenizer.pad_token_id == backend.tokenizer.eos_token_id
        requests = [GenerationRequest(p, (), 8) for p in PROMPTS]
        batched = backend.generate_until(requests)
        single = [backend.generate_until([r])[0] for r in requests]
    finally:
        backend.close()
    assert batched == single


CUSTOM_CODE = """
from transformers import LlamaConfig, LlamaForCausalLM


class TinyCustomConfig(LlamaConfig):
    model_type = "tiny_custom"


class TinyCustomForCausalLM(LlamaForCausalLM):
    config_class = TinyCustomConfig
"""


@pytest.fixture
def custom_code(base: Path, tmp_path: Path) -> Path:
    """The base weights under a model type only the folder's own code defines."""
    folder = tmp_path / "custom"
    shutil.copytree(base, folder)
    (folder / "modeling_tiny.py").write_text(CUSTOM_CODE)
    config = json.loads((folder / "config.json").read_text())
    config["model_type"] = "tiny_custom"
    config["architectures"] = ["TinyCustomForCausalLM"]
    config["auto_map"] = {
        "AutoConfig": "modeling_tiny.TinyCustomConfig",
        "AutoModelForCausalLM": "modeling_tiny.TinyCustomForCausalLM",
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_custom_code_is_refused_without_trust_remote_code(custom_code: Path) -> None:
    with pytest.raises(CheckpointError) as caught:
        _backend(custom_code)
    message = str(caught.value)
    assert "--trust-remote-code" in message and str(custom_code) in message
    assert "\n" not in message


def test_custom_code_with_trust_remote_code_takes_the_plain_paths(
    custom_code: Path, base: Path
) -> None:
    # A model type the architecture matrix never checked: no fast path is assumed exact.
    logprobs, texts, backend = _answers(custom_code, trust_remote_code=True)
    paths = backend.described["paths"]
    assert (paths["loglikelihood"], paths["generation"]) == (FULL_FORWARD, PLAIN_DECODE)
    assert paths["served"] == {FULL_FORWARD: len(REQUESTS), PLAIN_DECODE: len(PROMPTS)}
    base_logprobs, base_texts, _ = _answers(base)
    assert logprobs == pytest.approx(base_logprobs, abs=1e-4)
    assert texts == base_texts


def test_custom_code_changes_the_identity(custom_code: Path) -> None:
    before = resolve_checkpoint(str(custom_code)).identity
    (custom_code / "modeling_tiny.py").write_text(CUSTOM_CODE + "\n# changed\n")
    assert resolve_checkpoint(str(custom_code)).identity != before


def test_not_a_causal_lm_is_refused_by_model_type(tmp_path: Path, layout_tokenizer: Any) -> None:
    from transformers import T5Config, T5ForConditionalGeneration

    folder = tmp_path / "t5"
    model = T5ForConditionalGeneration(
        T5Config(vocab_size=len(layout_tokenizer), d_model=16, d_ff=32, num_layers=1, num_heads=2)
    )
    model.save_pretrained(str(folder))
    layout_tokenizer.save_pretrained(folder)
    with pytest.raises(CheckpointError) as caught:
        _backend(folder)
    message = str(caught.value)
    assert "'t5'" in message and "causal" in message and "\n" not in message
