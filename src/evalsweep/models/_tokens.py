"""lm-eval's tokenization rules, shared by every backend that tokenizes locally.

The HF, vLLM and OpenAI-compatible backends must split a request into the
same context and continuation tokens, or their log-likelihoods would differ
for reasons that have nothing to do with the model. The rules are lm-eval's
(``TemplateLM._encode_pair``): trailing context spaces move into the
continuation, ``context + continuation`` is encoded once and split at the
length of the encoded context, and an empty context scores against the
prefix token (BOS, else EOS).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.errors import CheckpointError
from evalsweep.models._sentencepiece import (
    check_sentencepiece_tokenizer,
    require_packages,
    sentencepiece_only_source,
    unreadable_error,
)

DEFAULT_MAX_LENGTH = 2048
TOKENIZER_INFINITY = 1000000000000000019884624838656
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


class PairEncoder:
    """Encodes requests exactly as lm-eval's HF model does, with a context cache."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.prefix_token_id = _prefix_token_id(tokenizer)
        self._bos_string = tokenizer.decode(self.prefix_token_id)
        self._context_cache: dict[str, list[int]] = {}

    def encode(self, text: str) -> list[int]:
        # lm-eval keeps the tokenizer's own special-token default, except that a
        # string already starting with the BOS text gets no second BOS.
        if self._bos_string and text.startswith(self._bos_string):
            return list(self.tokenizer.encode(text, add_special_tokens=False))
        return list(self.tokenizer.encode(text))

    def encode_context(self, context: str) -> list[int]:
        cached = self._context_cache.get(context)
        if cached is None:
            if len(self._context_cache) > 4096:
                self._context_cache.clear()
            cached = self._context_cache[context] = self.encode(context)
        return cached

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval's ``_encode_pair`` (plus its empty-context rule)."""
        if not context:
            return [self.prefix_token_id], self.encode(continuation)
        context, continuation = _move_trailing_spaces(context, continuation)
        whole = self.encode(context + continuation)
        context_tokens = self.encode_context(context)
        return context_tokens, whole[len(context_tokens) :]

    def encode_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
        """``encode_pair`` for many requests at once, equal to it request by request.

        Every text goes to the tokenizer in one batch, which the fast tokenizers
        split over all cores; request by request, tokenizing MMLU's prompts took
        as long as a fifth of its forward passes on a small model.
        """
        split = [_move_trailing_spaces(context, continuation) for context, continuation in pairs]
        contexts = list(dict.fromkeys(context for context, _ in split if context))
        wholes = [context + continuation for context, continuation in split if context]
        encoded = self.encode_many(contexts + wholes)
        context_tokens = dict(zip(contexts, encoded[: len(contexts)], strict=True))
        whole_tokens = iter(encoded[len(contexts) :])
        out = []
        for context, continuation in split:
            if not context:
                out.append(([self.prefix_token_id], self.encode(continuation)))
                continue
            head = context_tokens[context]
            out.append((head, next(whole_tokens)[len(head) :]))
        return out

    def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
        """``encode`` for each text, in batches the tokenizer parallelises."""
        with_bos = [bool(self._bos_string) and text.startswith(self._bos_string) for text in texts]
        out: list[list[int]] = [[] for _ in texts]
        for has_bos in (False, True):
            chosen = [i for i, flag in enumerate(with_bos) if flag is has_bos]
            if not chosen:
                continue
            ids = self.tokenizer(
                [texts[i] for i in chosen], add_special_tokens=not has_bos, verbose=False
            )["input_ids"]
            for i, tokens in zip(chosen, ids, strict=True):
                out[i] = list(tokens)
        return out

    def clear(self) -> None:
        self._context_cache.clear()

    def eos_string(self) -> str:
        """The EOS token as text: generation stops on it as on the request's own stops."""
        eos_id = self.tokenizer.eos_token_id
        return str(self.tokenizer.decode([eos_id], skip_special_tokens=False))


def _move_trailing_spaces(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval moves a context's trailing whitespace to the front of the continuation."""
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        return context[:-n_spaces], context[-n_spaces:] + continuation
    return context, continuation


def _prefix_token_id(tokenizer: Any) -> int:
    if tokenizer.bos_token_id is not None:
        return int(tokenizer.bos_token_id)
    return int(tokenizer.eos_token_id)


def tokenizer_source(checkpoint: ResolvedCheckpoint) -> tuple[str, str | None]:
    """Where the tokenizer loads from: an adapter's own if it has one, else its base's."""
    if checkpoint.base is not None:
        if checkpoint.kind == "local":
            from pathlib import Path

            if any((Path(checkpoint.location) / name).is_file() for name in TOKENIZER_FILES):
                return checkpoint.location, None
        return checkpoint.base.load_path, checkpoint.base.load_revision
    return checkpoint.load_path, checkpoint.load_revision


def load_tokenizer(checkpoint: ResolvedCheckpoint, trust_remote_code: bool) -> Any:
    """The checkpoint's fast tokenizer, with lm-eval's padding fallbacks."""
    from transformers import AutoTokenizer

    path, revision = tokenizer_source(checkpoint)
    if sentencepiece_only_source(path, revision):
        require_packages(checkpoint.reference)  # else transformers 5 reads it as tiktoken
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            path, revision=revision, trust_remote_code=trust_remote_code, use_fast=True
        )
    except Exception as exc:
        # Asked again: a Hub tokenizer's files are in the cache only once the load fetched them.
        if sentencepiece_only_source(path, revision):
            require_packages(checkpoint.reference)
            raise unreadable_error(checkpoint.reference, first_line(exc)) from exc
        raise CheckpointError(
            f"checkpoint {checkpoint.reference!r}: cannot load its tokenizer ({first_line(exc)})"
        ) from exc
    tokenizer = check_sentencepiece_tokenizer(tokenizer, checkpoint.reference)
    if tokenizer.pad_token is None:
        # As lm-eval: fall back to unk, then eos, so batches can be padded.
        if tokenizer.unk_token is not None:
            tokenizer.pad_token_id = tokenizer.unk_token_id
        elif tokenizer.eos_token is not None:
            tokenizer.pad_token_id = tokenizer.eos_token_id
    if tokenizer.eos_token_id is None:
        raise CheckpointError(f"checkpoint {checkpoint.reference!r}: tokenizer has no EOS token")
    return tokenizer


def resolve_max_length(config: Any, tokenizer: Any) -> int:
    """lm-eval's ``resolve_max_length``: config first, then the tokenizer, then 2048."""
    config = getattr(config, "text_config", None) or config
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(config, attr, None)
        if value is not None:
            return int(value)
    model_max = getattr(tokenizer, "model_max_length", None)
    if model_max is not None and model_max != TOKENIZER_INFINITY:
        return int(model_max)
    return DEFAULT_MAX_LENGTH


def cut_at_stops(text: str, stops: list[str]) -> str:
    """Keep what comes before the first occurrence of each stop string, as lm-eval does."""
    for stop in stops:
        if stop:
            text = text.split(stop)[0]
    return text


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.split("\n")[0].strip() if text else type(exc).__name__


def sampling_seed(sample_index: int, context: str) -> int:
    """A sampling seed fixed by the prompt and the sample's index, whatever the batch."""
    import hashlib

    digest = hashlib.sha256(f"{sample_index}\0{context}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)
