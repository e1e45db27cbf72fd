"""The HF backend answers as an independent, unbatched transformers computation does.

The reference here follows lm-eval's documented rules one request at a time:
trailing context spaces move into the continuation, ``context + continuation`` is
encoded once and split at the length of the encoded context, the model sees
everything but the last token, and the continuation's log-probabilities are
summed. Generation is one greedy ``model.generate`` per prompt, cut at the first
stop string.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from evalsweep.checkpoints import resolve_checkpoint
from evalsweep.models import BackendOptions, load_backend
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest
from evalsweep.tasks import DataSource
from evalsweep.tasks.mmlu import MMLU

TOLERANCE = 1e-4
ARCHITECTURES = ["gpt2_a", "llama_checkpoint"]


class Reference:
    """One checkpoint loaded directly with transformers, answering one request at a time."""

    def __init__(self, path: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        self._log_softmax: dict[tuple[int, ...], torch.Tensor] = {}

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text))

    def split(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        if not context:
            return [self.tokenizer.bos_token_id], self.encode(continuation)
        stripped = context.rstrip()
        moved = context[len(stripped) :] + continuation
        context_tokens = self.encode(stripped)
        return context_tokens, self.encode(stripped + moved)[len(context_tokens) :]

    @torch.inference_mode()
    def loglikelihood(self, context: str, continuation: str) -> tuple[float, bool]:
        context_tokens, continuation_tokens = self.split(context, continuation)
        inputs = tuple(context_tokens + continuation_tokens)[:-1]
        if inputs not in self._log_softmax:  # MMLU's four letters share one input
            logits = self.model(torch.tensor([inputs])).logits[0].float()
            self._log_softmax[inputs] = torch.log_softmax(logits, dim=-1)
        rows = self._log_softmax[inputs][-len(continuation_tokens) :]
        target = torch.tensor(continuation_tokens)
        logprob = rows.gather(1, target[:, None]).sum().item()
        return logprob, bool((rows.argmax(-1) == target).all())

    @torch.inference_mode()
    def next_token(self, context: str) -> int:
        return int(self.model(torch.tensor([self.encode(context)])).logits[0, -1].argmax())

    @torch.inference_mode()
    def generate(self, context: str, max_new_tokens: int) -> str:
        ids = torch.tensor([self.encode(context)])
        out = self.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=self.tokenizer.eos_token_id,
        )
        return str(self.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def cut(text: str, stops: list[str]) -> str:
    """Text before the earliest occurrence of any stop string."""
    end = min((text.index(s) for s in stops if s in text), default=len(text))
    return text[:end]


_cache: dict[tuple[str, Any], Any] = {}


def backend_for(path: Path, batch_size: int | None = None) -> Any:
    key = (str(path), batch_size)
    if key not in _cache:
        options = BackendOptions(device="cpu", dtype="float32", batch_size=batch_size)
        _cache[key] = load_backend("hf", resolve_checkpoint(str(path)), options)
    return _cache[key]


def reference_for(path: Path) -> Reference:
    key = (str(path), "reference")
    if key not in _cache:
        _cache[key] = Reference(path)
    return _cache[key]  # type: ignore[no-any-return]


@pytest.fixture(scope="module", autouse=True)
def _release_models() -> Any:
    yield
    _cache.clear()


@pytest.fixture(params=ARCHITECTURES)
def checkpoint(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(request.param)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def mmlu_requests(data_dir: Path) -> list[LoglikelihoodRequest]:
    """Real 1-shot MMLU requests from two subjects (prompts of different lengths)."""
    task = MMLU(subjects=["abstract_algebra", "marketing"])
    prepared = task.prepare(task.load(DataSource(str(data_dir)), 2), 1)
    return [r for p in prepared for r in p.requests if isinstance(r, LoglikelihoodRequest)]


@pytest.fixture(scope="module")
def one_subject_requests(data_dir: Path) -> list[LoglikelihoodRequest]:
    """Real 5-shot MMLU requests for three questions of one subject."""
    task = MMLU(subjects=["abstract_algebra"])
    prepared = task.prepare(task.load(DataSource(str(data_dir)), 3), 5)
    return [r for p in prepared for r in p.requests if isinstance(r, LoglikelihoodRequest)]


MULTI_TOKEN = [
    LoglikelihoodRequest("Question: What is 2 + 2?\nAnswer:", " The answer is 4.\n#### 4"),
    LoglikelihoodRequest("Question: What is 2 + 2?\nAnswer:", " four"),
    LoglikelihoodRequest("The capital of France is", " Paris, a city on the Seine"),
    LoglikelihoodRequest("The capital of France is ", "Paris, a city on the Seine"),
    LoglikelihoodRequest("Janet sells eggs.  \n", "She makes $18 every day."),
    LoglikelihoodRequest("", "Statement 1 | Every group is abelian."),
]


def assert_matches_reference(
    results: list[Any], requests: list[LoglikelihoodRequest], reference: Reference
) -> None:
    assert len(results) == len(requests)
    for request, result in zip(requests, results, strict=True):
        logprob, greedy = reference.loglikelihood(request.context, request.continuation)
        assert result.logprob == pytest.approx(logprob, abs=TOLERANCE), request
        assert result.is_greedy is greedy, request


def test_mmlu_loglikelihoods_equal_unbatched_reference(
    checkpoint: Path, mmlu_requests: list[LoglikelihoodRequest]
) -> None:
    results = backend_for(checkpoint).loglikelihood(mmlu_requests)
    assert_matches_reference(results, mmlu_requests, reference_for(checkpoint))
    assert len({round(r.logprob, 6) for r in results}) > 1


@pytest.mark.parametrize("name", [*ARCHITECTURES, "gpt_neo_checkpoint"])
def test_few_shot_questions_sharing_a_prefix_equal_unbatched_reference(
    name: str, request: pytest.FixtureRequest, one_subject_requests: list[LoglikelihoodRequest]
) -> None:
    # One subject's 5-shot questions share a long prefix (description and shots),
    # which the backend may compute once. GPT-Neo is included because its forward
    # takes **kwargs and silently ignores ``logits_to_keep``.
    path = request.getfixturevalue(name)
    results = backend_for(path).loglikelihood(one_subject_requests)
    assert_matches_reference(results, one_subject_requests, reference_for(path))


def test_multi_token_loglikelihoods_equal_unbatched_reference(checkpoint: Path) -> None:
    results = backend_for(checkpoint).loglikelihood(MULTI_TOKEN)
    assert_matches_reference(results, MULTI_TOKEN, reference_for(checkpoint))
    assert all(r.logprob < 0 for r in results)


def test_batch_tokenization_equals_request_by_request(
    checkpoint: Path, mmlu_requests: list[LoglikelihoodRequest]
) -> None:
    backend = backend_for(checkpoint)
    bos = backend.tokenizer.decode(backend.encoder.prefix_token_id)
    pairs = [(r.context, r.continuation) for r in mmlu_requests] + [
        ("The capital of France is ", "Paris"),
        ("The capital of France is", " Paris"),
        ("", "An empty context scores against the prefix token"),
        (bos + "A context that starts with the BOS text", " and no second BOS"),
        ("Trailing newlines\n\n", "move too"),
    ]
    batched = backend.encoder.encode_pairs(pairs)
    one_by_one = [backend.encode_pair(context, continuation) for context, continuation in pairs]
    assert batched == one_by_one
    assert batched[-5] == batched[-4]  # the trailing space moved into the continuation


def test_trailing_context_space_moves_into_continuation(checkpoint: Path) -> None:
    backend = backend_for(checkpoint)
    spaced, moved = backend.loglikelihood(
        [
            LoglikelihoodRequest("The capital of France is ", "Paris"),
            LoglikelihoodRequest("The capital of France is", " Paris"),
        ]
    )
    assert spaced.logprob == pytest.approx(moved.logprob, abs=TOLERANCE)
    assert backend.encode_pair("The capital of France is ", "Paris") == backend.encode_pair(
        "The capital of France is", " Paris"
    )


def test_is_greedy_is_true_exactly_for_the_argmax_continuation(checkpoint: Path) -> None:
    reference = reference_for(checkpoint)
    contexts = ["Question: What is 2 + 2?\nAnswer", "The capital of France", "Find all c in Z_3"]
    requests = []
    for context in contexts:
        token = reference.next_token(context)
        greedy_text = reference.tokenizer.decode([token])
        if reference.split(context, greedy_text)[1] != [token]:
            continue  # the decoded token re-encodes differently after this context
        other = (token + 1) % len(reference.tokenizer)
        other_text = reference.tokenizer.decode([other])
        requests.append((LoglikelihoodRequest(context, greedy_text), True))
        if reference.split(context, other_text)[1] == [other]:
            requests.append((LoglikelihoodRequest(context, other_text), False))
    assert any(greedy for _, greedy in requests) and not all(greedy for _, greedy in requests)
    results = backend_for(checkpoint).loglikelihood([r for r, _ in requests])
    assert [r.is_greedy for r in results] == [greedy for _, greedy in requests]


def test_loglikelihoods_do_not_depend_on_batch_size(
    checkpoint: Path, mmlu_requests: list[LoglikelihoodRequest]
) -> None:
    requests = mmlu_requests + MULTI_TOKEN
    one = backend_for(checkpoint, batch_size=1).loglikelihood(requests)
    auto = backend_for(checkpoint).loglikelihood(requests)
    assert [r.logprob for r in one] == pytest.approx([r.logprob for r in auto], abs=TOLERANCE)
    assert [r.is_greedy for r in one] == [r.is_greedy for r in auto]


def test_prefix_reuse_does_not_change_loglikelihoods(
    checkpoint: Path, one_subject_requests: list[LoglikelihoodRequest]
) -> None:
    options = BackendOptions(device="cpu", dtype="float32", prefix_reuse=False)
    plain = load_backend("hf", resolve_checkpoint(str(checkpoint)), options)
    try:
        without = plain.loglikelihood(one_subject_requests)
    finally:
        plain.close()
    reused = backend_for(checkpoint).loglikelihood(one_subject_requests)
    assert [r.logprob for r in reused] == pytest.approx([r.logprob for r in without], abs=TOLERANCE)
    assert [r.is_greedy for r in reused] == [r.is_greedy for r in without]


def test_loglikelihood_results_keep_request_order(checkpoint: Path) -> None:
    backend = backend_for(checkpoint)
    forward = backend.loglikelihood(MULTI_TOKEN)
    backward = backend.loglikelihood(MULTI_TOKEN[::-1])
    assert [r.logprob for r in backward[::-1]] == pytest.approx(
        [r.logprob for r in forward], abs=TOLERANCE
    )


GENERATION_CONTEXTS = [
    "Question: Janet has 3 apples and buys 2 more. How many apples does she have?\nAnswer:",
    "Question: What is 2 + 2?\nAnswer:",
    "The following are multiple choice questions (with answers) about marketing.\n\n"
    "Which of the following is a form of direct marketing?\nA. TV\nB. Mail\nC. Radio\n"
    "D. Billboards\nAnswer:",
]
GEN_TOKENS = 16


def test_batched_greedy_generation_equals_single_prompt_generate(checkpoint: Path) -> None:
    reference = reference_for(checkpoint)
    requests = [GenerationRequest(c, (), GEN_TOKENS) for c in GENERATION_CONTEXTS]
    texts = backend_for(checkpoint).generate_until(requests)
    expected = [reference.generate(c, GEN_TOKENS) for c in GENERATION_CONTEXTS]
    assert texts == expected
    assert any(texts)


def test_generation_stops_at_first_stop_string(checkpoint: Path) -> None:
    reference = reference_for(checkpoint)
    full = [reference.generate(c, GEN_TOKENS) for c in GENERATION_CONTEXTS]
    # One stop string for the whole batch, taken from a third of the way into the
    # first prompt's own greedy continuation: that row stops early, others may not.
    stop = full[0][len(full[0]) // 3 :][:2]
    assert len(stop) == 2, full
    until = (stop, "Question:")
    requests = [GenerationRequest(c, until, GEN_TOKENS) for c in GENERATION_CONTEXTS]
    texts = backend_for(checkpoint).generate_until(requests)
    assert texts == [cut(whole, list(until)) for whole in full]
    assert all(stop not in text for text in texts)
    assert len(texts[0]) < len(full[0])


def test_generation_groups_different_stop_strings_and_keeps_order(checkpoint: Path) -> None:
    reference = reference_for(checkpoint)
    requests = [
        GenerationRequest(GENERATION_CONTEXTS[0], ("\n",), 12),
        GenerationRequest(GENERATION_CONTEXTS[1], (), 12),
        GenerationRequest(GENERATION_CONTEXTS[2], ("\n",), 12),
    ]
    texts = backend_for(checkpoint).generate_until(requests)
    expected = [cut(reference.generate(r.context, 12), list(r.until)) for r in requests]
    assert texts == expected
