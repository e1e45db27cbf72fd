"""Every architecture of the matrix answers as a plain transformers computation does.

For each model type (tiny random weights, built here) in float32 and bfloat16:
- evalsweep's log-likelihoods for real 5-shot MMLU requests (two questions of
  one subject share a few-shot prefix, so prefix reuse is exercised) equal a
  plain full forward of each whole prompt (no cache, no prefix reuse, batch of
  one) within a tight tolerance, with the same greedy flags;
- greedy generations for real GSM8K prompts equal ``model.generate``, one
  prompt at a time, cut at the same stop strings;
- the result's provenance names the paths that served the checkpoint.

The sliding windows of mistral, mixtral, starcoder2, gemma2 and gemma3_text
are shorter than every prompt here, so a fast path that ignored them could not
pass. Benchmark rows come from the test slices (``tests/data``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import TEST_DATA
from evalsweep.checkpoints import resolve_checkpoint
from evalsweep.demo._matrix import (
    MODEL_TYPES,
    WINDOW,
    build_matrix_checkpoint,
    sentencepiece_only,
    train_sentencepiece,
    with_bos,
)
from evalsweep.demo._matrix import VARIANTS as MATRIX_VARIANTS
from evalsweep.models import BackendOptions, load_backend
from evalsweep.models._arch import (
    PLAIN_DECODE,
    PREFIX_REUSE,
    RESERVED_DECODE,
    RESERVED_DECODE_MASKED,
)
from evalsweep.models._sentencepiece import loaded_sentencepiece_file
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest
from evalsweep.tasks import DataSource
from evalsweep.tasks.gsm8k import GSM8K
from evalsweep.tasks.mmlu import MMLU

pytestmark = pytest.mark.archmatrix

DEMO_DATA = TEST_DATA
DTYPES = ["float32", "bfloat16"]
#: Log-likelihood tolerance: float32 sums agree to rounding; bfloat16 keeps 8 bits.
TOLERANCE = {"float32": 1e-4, "bfloat16": 0.08}
GEN_TOKENS = 24
BOS_LLAMA = "llama_bos"
SPM_LLAMA = "llama_spm"


@pytest.fixture(scope="session")
def matrix_tokenizer() -> Any:
    """A byte-level BPE tokenizer trained on the test slices."""
    from evalsweep.demo import build_tokenizer, corpus_from_data_dir

    return build_tokenizer(corpus_from_data_dir(DEMO_DATA, max_lines=2000), vocab_size=768)


@pytest.fixture(scope="session")
def bos_tokenizer(matrix_tokenizer: Any) -> Any:
    """The same vocabulary with a distinct BOS token the tokenizer adds to every input."""
    tokenizer = with_bos(matrix_tokenizer)
    assert tokenizer("a b").input_ids[0] == tokenizer.bos_token_id
    return tokenizer


@pytest.fixture(scope="session")
def spm_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A SentencePiece BPE model (``tokenizer.model`` only), trained on the test slices."""
    pytest.importorskip("sentencepiece", reason="sentencepiece is not installed")
    from transformers import AutoTokenizer

    from evalsweep.demo import corpus_from_data_dir

    folder = train_sentencepiece(
        corpus_from_data_dir(DEMO_DATA, max_lines=2000), tmp_path_factory.mktemp("spm")
    )
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer("a b").input_ids[0] == tokenizer.bos_token_id == 1
    return tokenizer


@pytest.fixture(scope="session")
def matrix_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("matrix")


_built: dict[tuple[str, str], Path] = {}


def checkpoint_path(name: str, dtype: str, root: Path, request: pytest.FixtureRequest) -> Path:
    key = (name, dtype)
    if key not in _built:
        model_type, fixture = VARIANTS.get(name, (name, "matrix_tokenizer"))
        tokenizer = request.getfixturevalue(fixture)
        seed = MODEL_TYPES.index(name) if name in MODEL_TYPES else len(MODEL_TYPES)
        path = build_matrix_checkpoint(
            root / f"{name}-{dtype}", model_type, tokenizer, dtype=dtype, seed=seed
        )
        if name == SPM_LLAMA:  # SentencePiece only: the trained files, no tokenizer.json
            sentencepiece_only(path, Path(tokenizer.vocab_file).parent)
        _built[key] = path
    return _built[key]


#: Tokenizer variants (``evalsweep.demo._matrix.VARIANTS``): name -> (model type, fixture).
_FIXTURES = {BOS_LLAMA: "bos_tokenizer", SPM_LLAMA: "spm_tokenizer"}
VARIANTS = {
    name: (model_type, _FIXTURES[name]) for name, (model_type, _) in MATRIX_VARIANTS.items()
}


@pytest.fixture(scope="module")
def mmlu_requests() -> list[LoglikelihoodRequest]:
    """5-shot MMLU: two questions of each of two subjects (each pair shares its shots)."""
    task = MMLU(subjects=["high_school_mathematics", "high_school_geography"])
    prepared = task.prepare(task.load(DataSource(str(DEMO_DATA)), 2), 5)
    return [r for p in prepared for r in p.requests if isinstance(r, LoglikelihoodRequest)]


@pytest.fixture(scope="module")
def gsm8k_requests() -> list[GenerationRequest]:
    """2-shot GSM8K prompts with the task's own stop strings, cut to a few tokens."""
    task = GSM8K()
    prepared = task.prepare(task.load(DataSource(str(DEMO_DATA)), 3), 2)
    out = []
    for p in prepared:
        for r in p.requests:
            assert isinstance(r, GenerationRequest)
            out.append(GenerationRequest(r.context, r.until, GEN_TOKENS))
    return out


class PlainForward:
    """The checkpoint loaded as anyone would, answering one request at a time."""

    def __init__(self, path: Path, dtype: str, encoder: Any) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
        self.encoder = encoder  # evalsweep's tokenization is tested on its own elsewhere
        self._rows: dict[tuple[int, ...], torch.Tensor] = {}

    @torch.inference_mode()
    def loglikelihood(self, request: LoglikelihoodRequest) -> tuple[float, bool, int]:
        context, continuation = self.encoder.encode_pair(request.context, request.continuation)
        inputs = tuple(context + continuation)[:-1]
        if inputs not in self._rows:  # MMLU's four letters share one input
            logits = self.model(torch.tensor([inputs]), use_cache=False).logits[0].float()
            self._rows[inputs] = torch.log_softmax(logits, dim=-1)
        rows = self._rows[inputs][-len(continuation) :]
        target = torch.tensor(continuation)
        picked = float(rows.gather(1, target[:, None]).sum())
        return picked, bool((rows.argmax(-1) == target).all()), len(inputs)

    @torch.inference_mode()
    def generate(self, request: GenerationRequest, eos_text: str) -> str:
        ids = torch.tensor([self.encoder.encode(request.context)])
        out = self.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=request.max_gen_toks,
            do_sample=False,
            pad_token_id=self.encoder.tokenizer.pad_token_id,
        )
        text = self.encoder.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        for stop in [*request.until, eos_text]:
            if stop:
                text = text.split(stop)[0]
        return str(text)


NAMES = [*MODEL_TYPES, *VARIANTS]
WINDOWED = {"mistral", "mixtral", "gemma2", "gemma3_text", "phi3", "starcoder2"}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", NAMES)
def test_architecture_answers_as_plain_transformers(
    name: str,
    dtype: str,
    matrix_root: Path,
    request: pytest.FixtureRequest,
    mmlu_requests: list[LoglikelihoodRequest],
    gsm8k_requests: list[GenerationRequest],
) -> None:
    path = checkpoint_path(name, dtype, matrix_root, request)
    options = BackendOptions(device="cpu", dtype=dtype)
    backend: Any = load_backend("hf", resolve_checkpoint(str(path)), options)
    try:
        if name == SPM_LLAMA:  # read from tokenizer.model and checked against SentencePiece
            assert loaded_sentencepiece_file(backend.tokenizer) == path / "tokenizer.model"
        plain = PlainForward(path, dtype, backend.encoder)
        results = backend.loglikelihood(mmlu_requests)
        texts = backend.generate_until(gsm8k_requests)
        described = backend.describe()
    finally:
        backend.close()
    tolerance = TOLERANCE[dtype]
    longest = 0
    theirs = []
    for asked, result in zip(mmlu_requests, results, strict=True):
        logprob, greedy, length = plain.loglikelihood(asked)
        theirs.append(logprob)
        longest = max(longest, length)
        assert result.logprob == pytest.approx(logprob, abs=tolerance), (name, dtype, asked)
        assert result.is_greedy is greedy, (name, dtype, asked)
    # Same argmax over each question's four choices.
    for start in range(0, len(mmlu_requests), 4):
        ours = [r.logprob for r in results[start : start + 4]]
        plain_four = theirs[start : start + 4]
        assert ours.index(max(ours)) == plain_four.index(max(plain_four)), (name, dtype, start)
    assert longest > 4 * WINDOW
    eos_text = backend.encoder.eos_string()
    expected = [plain.generate(r, eos_text) for r in gsm8k_requests]
    assert texts == expected, (name, dtype)
    assert any(texts)
    # Every matrix architecture takes the fast paths, so the checks above are theirs.
    paths = described["paths"]
    windowed = "sliding-window" in paths["attention"]["features"]
    assert paths["loglikelihood"] == PREFIX_REUSE
    assert paths["served"][PREFIX_REUSE] > 0
    if dtype == "float32":
        assert paths["generation"] == (RESERVED_DECODE_MASKED if windowed else RESERVED_DECODE)
    else:  # batched decoding rounds differently in half precision: one prompt at a time
        assert paths["generation"] == PLAIN_DECODE
    assert paths["served"][paths["generation"]] == len(gsm8k_requests)
    assert windowed == (name in WINDOWED)
