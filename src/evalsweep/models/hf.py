"""Hugging Face transformers backend (``AutoModelForCausalLM``).

Answers must match lm-evaluation-harness's ``hf`` model exactly, so the
tokenization rules are lm-eval's: trailing context spaces move into the
continuation, ``context + continuation`` is encoded once and split at the
length of the encoded context, inputs are left-truncated to the model's
maximum length, and generation decodes with special tokens skipped and cuts
at the first stop string (the EOS string included).

What differs is speed, never the answer:
- requests that share the same input tokens (MMLU's " A".." D") share one
  forward pass, whatever their continuation length;
- batches are filled to a token budget, longest first, rather than a fixed count;
  on a CPU, where a padded position costs as much as a real one, a batch also
  ends before padding would pass a tenth of it;
- logits are computed only at the positions that are scored.

A PEFT adapter checkpoint loads its base model and attaches the adapter with
``peft`` without merging it, so the base's weights stay as they are on disk.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.dtypes import DTYPE_CHOICES, DTYPES
from evalsweep.errors import BackendError, CheckpointError
from evalsweep.models._arch import (
    FULL_FORWARD,
    PLAIN_DECODE,
    PREFIX_REUSE,
    RESERVED_DECODE,
    Attention,
    plan,
)
from evalsweep.models._base import (
    BackendOptions,
    ProgressCallback,
    backend_settings,
)
from evalsweep.models._tokens import (
    PairEncoder,
    cut_at_stops,
    first_line,
    load_tokenizer,
    resolve_max_length,
    sampling_seed,
)
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult

CPU_TOKEN_BUDGET = 8192
CPU_GENERATION_BATCH = 32
MAX_GENERATION_BATCH = 256
CPU_CACHE_BUDGET = 256 * 2**20
MIN_PREFIX = 32  # shorter shared prefixes are not worth a separate forward pass
CPU_MAX_PADDING = 0.1  # share of a CPU batch's positions that may be padding


class HFBackend:
    """One checkpoint loaded with transformers, on CPU or CUDA."""

    name = "hf"

    def __init__(self, checkpoint: ResolvedCheckpoint, options: BackendOptions) -> None:
        import torch

        self.checkpoint = checkpoint
        self.options = options
        self.torch = torch
        self.device = _pick_device(options.device)
        self.tokenizer = load_tokenizer(checkpoint, options.trust_remote_code)
        self.encoder = PairEncoder(self.tokenizer)
        self.model = _load_model(checkpoint, options, self.device)
        self.dtype = next(self.model.parameters()).dtype
        self.max_length = options.max_length or resolve_max_length(
            self.model.config, self.tokenizer
        )
        # A PeftModel's forward passes extra arguments through to its base model's.
        inner = self.model.get_base_model() if checkpoint.is_adapter else self.model
        parameters = inspect.signature(inner.forward).parameters
        self._keeps_logits = "logits_to_keep" in parameters
        # transformers 5 renamed forward's ``past_key_values`` (and the output's field) to
        # ``cache``; the old name still works there but warns that it will be removed.
        self._cache_name = "cache" if "cache" in parameters else "past_key_values"
        self._token_budget = self._initial_token_budget()
        # Which fast paths are exact for this checkpoint's attention (models/_arch.py).
        self.plan = plan(
            Attention.from_model(inner),
            options.prefix_reuse,
            str(self.dtype).removeprefix("torch."),
        )
        self._served: dict[str, int] = {}

    # -- identity -----------------------------------------------------------------

    def settings(self) -> Mapping[str, object]:
        return backend_settings(
            "hf",
            dtype=str(self.dtype).removeprefix("torch."),
            device_type=self.device.type,
            max_length=self.max_length,
            trust_remote_code=self.options.trust_remote_code,
        )

    def describe(self) -> Mapping[str, object]:
        info: dict[str, object] = dict(self.settings())
        info["device"] = str(self.device)
        info["batch_size"] = self.options.batch_size or "auto"
        info["token_budget"] = self._token_budget
        info["model_class"] = type(self.model).__name__
        info["num_parameters"] = sum(p.numel() for p in self.model.parameters())
        if self.checkpoint.is_adapter:
            info["adapter"] = "peft, not merged"
        info["paths"] = {**self.plan.describe(), "served": dict(self._served)}
        return info

    def _count(self, path: str, n: int) -> None:
        self._served[path] = self._served.get(path, 0) + n

    def _fall_back(self, kind: str, path: str, exc: BaseException) -> None:
        """A fast path failed: the plain path serves this and every later request of ``kind``."""
        failed = getattr(self.plan, kind)
        note = f"{failed} failed ({type(exc).__name__}: {first_line(exc)}); {path} took over"
        notes = (*self.plan.notes, note)
        if kind == "loglikelihood":
            self.plan = replace(self.plan, loglikelihood=path, notes=notes)
        else:
            self.plan = replace(self.plan, generation=path, notes=notes)

    def close(self) -> None:
        del self.model
        self.encoder.clear()
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()

    # -- tokenization, as lm-eval does it (models/_tokens.py) -------------------------

    def encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval's ``_encode_pair`` (plus its empty-context rule)."""
        return self.encoder.encode_pair(context, continuation)

    # -- log-likelihood ---------------------------------------------------------------

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], progress: ProgressCallback | None = None
    ) -> list[LoglikelihoodResult]:
        torch = self.torch
        # Requests whose model input is the same token sequence share one forward
        # pass: the input is context + continuation minus its last token, and each
        # request reads its own continuation's positions from the end of it.
        inputs: dict[tuple[int, ...], list[tuple[int, list[int]]]] = {}
        pairs = self.encoder.encode_pairs([(r.context, r.continuation) for r in requests])
        for index, (request, (context_tokens, continuation)) in enumerate(
            zip(requests, pairs, strict=True)
        ):
            if not continuation:
                raise BackendError(f"continuation {request.continuation!r} encodes to no tokens")
            whole = (context_tokens + continuation)[-(self.max_length + 1) :]
            inputs.setdefault(tuple(whole[:-1]), []).append((index, continuation))
        widths = {
            toks: min(len(toks), max(len(c) for _, c in members))
            for toks, members in inputs.items()
        }
        results: list[LoglikelihoodResult | None] = [None] * len(requests)

        def deliver(tokens: tuple[int, ...], logprobs: Any) -> None:
            members = inputs[tokens]
            new = sum(results[index] is None for index, _ in members)
            for index, continuation in members:
                rows = logprobs[-len(continuation) :]
                target = torch.tensor(continuation[-rows.shape[0] :], dtype=torch.long)
                picked = rows.gather(1, target.unsqueeze(1)).squeeze(1)
                greedy = bool((rows.argmax(dim=-1) == target).all())
                results[index] = LoglikelihoodResult(float(picked.sum()), greedy)
            if progress and new:
                progress(new)

        plain: list[tuple[int, ...]] = []
        for prefix_length, group in self._prefix_groups(list(inputs), widths):
            if prefix_length:
                try:
                    self._score_with_prefix(prefix_length, group, widths, deliver)
                except (BackendError, _OutOfMemory):
                    raise
                except Exception as exc:  # never a crash: the plain path answers instead
                    self._fall_back("loglikelihood", FULL_FORWARD, exc)
                    plain.extend(group)
                    continue
                self._count(PREFIX_REUSE, sum(len(inputs[t]) for t in group))
            else:
                plain.extend(group)
        self._count(FULL_FORWARD, sum(len(inputs[t]) for t in plain))
        ordered = sorted(plain, key=lambda toks: (-len(toks), toks))
        lengths = [len(toks) for toks in ordered]
        start = 0
        while start < len(ordered):
            batch = ordered[start : start + self._rows(lengths, start, len(ordered))]
            try:
                scored = self._score_batch(batch, widths)
            except _OutOfMemory:
                self._shrink_budget(len(batch), len(batch[0]))
                continue
            for tokens, logprobs in zip(batch, scored, strict=True):
                deliver(tokens, logprobs)
            start += len(batch)
        return [r for r in results if r is not None]

    # -- few-shot prefix reuse ------------------------------------------------------------

    def _prefix_groups(
        self, inputs: list[tuple[int, ...]], widths: Mapping[tuple[int, ...], int]
    ) -> list[tuple[int, list[tuple[int, ...]]]]:
        """Group inputs that start with the same long token prefix (an MMLU subject's shots).

        Returns (prefix length, inputs) pairs; length 0 means "no shared prefix worth
        reusing". The prefix never reaches into positions that are scored.
        """
        if self.plan.loglikelihood != PREFIX_REUSE:
            return [(0, inputs)]
        # In lexicographic order, inputs that share a long prefix sit next to each
        # other; a group grows while its common prefix stays long (at least 80% of
        # what its first two members share), so subjects that share only their
        # description line are not merged.
        groups: list[tuple[int, list[tuple[int, ...]]]] = []
        members: list[tuple[int, ...]] = []
        common = 0
        for tokens in sorted(inputs):
            if members:
                shared = _common_prefix(members[0], tokens, common or len(tokens))
                if shared >= MIN_PREFIX and (len(members) < 2 or shared >= 0.8 * common):
                    members.append(tokens)
                    common = shared
                    continue
                groups.append(self._finish_group(members, common, widths))
            members, common = [tokens], 0
        if members:
            groups.append(self._finish_group(members, common, widths))
        return groups

    @staticmethod
    def _finish_group(
        members: list[tuple[int, ...]], common: int, widths: Mapping[tuple[int, ...], int]
    ) -> tuple[int, list[tuple[int, ...]]]:
        if len(members) < 2:
            return (0, members)
        # The prefix must stop before the first position any member scores.
        prefix = min(common, *(len(t) - widths[t] for t in members))
        return (prefix if prefix >= MIN_PREFIX else 0, members)

    def _score_with_prefix(
        self,
        prefix_length: int,
        group: list[tuple[int, ...]],
        widths: Mapping[tuple[int, ...], int],
        deliver: Any,
    ) -> None:
        """Run the shared prefix once, then only each input's suffix against its cache.

        The prefix's keys and values are expanded (not copied) across the batch;
        each forward appends the suffixes' own keys and values behind them.
        """
        torch = self.torch
        prefix = torch.tensor([group[0][:prefix_length]], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            extra = {"logits_to_keep": 1} if self._keeps_logits else {}
            cached = self._cache_of(
                self.model(input_ids=prefix, use_cache=True, **self._with(_full_cache()), **extra)
            )
        layers = _cache_tensors(cached)
        per_row_bytes = sum(k.numel() + v.numel() for k, v in layers) * layers[0][0].element_size()
        max_rows = max(1, int(self._cache_budget() // max(1, per_row_bytes)))
        ordered = sorted(group, key=lambda toks: (-len(toks), toks))
        lengths = [len(toks) - prefix_length for toks in ordered]
        start = 0
        while start < len(ordered):
            batch = ordered[start : start + self._rows(lengths, start, max_rows)]
            longest = lengths[start]
            try:
                scored = self._score_suffixes(batch, prefix_length, layers, widths)
            except _OutOfMemory:
                self._shrink_budget(len(batch), longest)
                max_rows = max(1, len(batch) // 2)
                continue
            for tokens, logprobs in zip(batch, scored, strict=True):
                deliver(tokens, logprobs)
            start += len(batch)

    def _score_suffixes(
        self,
        batch: list[tuple[int, ...]],
        prefix_length: int,
        layers: list[tuple[Any, Any]],
        widths: Mapping[tuple[int, ...], int],
    ) -> list[Any]:
        torch = self.torch
        longest = len(batch[0]) - prefix_length
        ids = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, tokens in enumerate(batch):
            suffix = tokens[prefix_length:]
            ids[row, : len(suffix)] = torch.tensor(suffix, dtype=torch.long)
        cache = _full_cache()
        for layer, (keys, values) in enumerate(layers):
            shape = (len(batch), *keys.shape[1:])
            cache.update(keys.expand(shape), values.expand(shape), layer)
        first = 0
        kwargs: dict[str, Any] = {}
        if self._keeps_logits:
            first = min(len(t) - prefix_length - widths[t] for t in batch)
            kwargs["logits_to_keep"] = torch.arange(first, longest, device=self.device)
        with torch.inference_mode():
            logits = self._forward(
                ids.to(self.device), use_cache=True, **self._with(cache), **kwargs
            )
        out = []
        for row, tokens in enumerate(batch):
            end = len(tokens) - prefix_length - first
            sliced = logits[row, end - widths[tokens] : end].float()
            out.append(torch.log_softmax(sliced, dim=-1).cpu())
        return out

    def _cache_budget(self) -> float:
        """Bytes the expanded prefix cache may take: a share of free device memory."""
        if self.device.type == "cuda":
            free, _total = self.torch.cuda.mem_get_info(self.device)
            return 0.25 * free
        return CPU_CACHE_BUDGET

    def _rows(self, lengths: Sequence[int], start: int, limit: int) -> int:
        """Rows of the next batch from ``lengths`` (longest first) at ``start``.

        At most ``limit`` and what the token budget holds; on a CPU the batch also
        stops before its padding passes ``CPU_MAX_PADDING`` of its positions, since
        there a padded position costs as much compute as a real one (a GPU runs a
        wide batch for little more than a narrow one, so it keeps the full batch).
        """
        longest = lengths[start]
        rows = min(limit, self._batch_rows(longest), len(lengths) - start)
        if self.device.type == "cuda" or self.options.batch_size:
            return max(1, rows)
        real = 0
        for taken in range(rows):
            real += lengths[start + taken]
            if real < (1 - CPU_MAX_PADDING) * longest * (taken + 1):
                return max(1, taken)
        return max(1, rows)

    def _batch_rows(self, longest: int) -> int:
        """Rows in the next batch: ``--batch-size``, or as many as the token budget holds."""
        if self.options.batch_size:
            return self.options.batch_size
        return max(1, self._token_budget // max(1, longest))

    def _shrink_budget(self, rows: int, longest: int) -> None:
        if self.options.batch_size or rows == 1:
            raise BackendError(
                f"out of memory on {self.device} scoring {rows} sequence(s) of {longest} tokens; "
                "try a smaller --batch-size or --dtype bfloat16"
            )
        self._token_budget = max(longest, self._token_budget // 2)

    def _score_batch(
        self, batch: list[tuple[int, ...]], widths: Mapping[tuple[int, ...], int]
    ) -> list[Any]:
        """Log-softmax rows (float32) of the scored last positions of each input.

        Right padding needs no attention mask in a causal model: real positions
        never attend to the padding after them (lm-eval pads the same way). Only
        the positions some continuation reads go through the output layer.
        """
        torch = self.torch
        longest = len(batch[0])
        ids = torch.zeros((len(batch), longest), dtype=torch.long)
        for row, tokens in enumerate(batch):
            ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        first = 0
        kwargs: dict[str, Any] = {}
        if self._keeps_logits:
            first = min(len(tokens) - widths[tokens] for tokens in batch)
            kwargs["logits_to_keep"] = torch.arange(first, longest, device=self.device)
        with torch.inference_mode():
            logits = self._forward(ids.to(self.device), **kwargs)
        out = []
        for row, tokens in enumerate(batch):
            lo = len(tokens) - widths[tokens] - first
            sliced = logits[row, lo : len(tokens) - first].float()
            out.append(torch.log_softmax(sliced, dim=-1).cpu())
        return out

    def _with(self, cache: Any) -> dict[str, Any]:
        """The keyword argument that hands ``cache`` to the model's forward."""
        return {self._cache_name: cache}

    def _cache_of(self, out: Any) -> Any:
        """The key/value cache a forward returned."""
        return getattr(out, self._cache_name)

    def _forward(self, ids: Any, use_cache: bool = False, **kwargs: Any) -> Any:
        try:
            return self.model(input_ids=ids, use_cache=use_cache, **kwargs).logits
        except self.torch.cuda.OutOfMemoryError as exc:
            raise _OutOfMemory() from exc
        except RuntimeError as exc:
            if "out of memory" in str(exc).lower() or "can't allocate memory" in str(exc):
                raise _OutOfMemory() from exc
            raise

    def _initial_token_budget(self) -> int:
        if self.device.type != "cuda":
            return CPU_TOKEN_BUDGET
        free, _total = self.torch.cuda.mem_get_info(self.device)
        config = self.model.config
        hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None) or 1024
        layers = (
            getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None) or 24
        )
        per_token = hidden * self.dtype.itemsize * (layers + 16) * 2
        return int(max(2048, min(1 << 19, 0.5 * free / per_token)))

    # -- generation --------------------------------------------------------------------

    def generate_until(
        self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None
    ) -> list[str]:
        results: list[str | None] = [None] * len(requests)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for index, request in enumerate(requests):
            key = (request.until, request.max_gen_toks, request.do_sample, request.temperature)
            groups.setdefault(key, []).append(index)
        eos = self.encoder.eos_string()
        for (until, max_gen_toks, sample, temperature), indices in groups.items():
            stops = list(until) + ([eos] if eos and eos not in until else [])
            max_context = self.max_length - max_gen_toks
            if max_context <= 0:
                raise BackendError(
                    f"max_gen_toks {max_gen_toks} leaves no room in max length {self.max_length}"
                )
            encoded = {i: self.encoder.encode(requests[i].context)[-max_context:] for i in indices}
            order = sorted(indices, key=lambda i: (-len(encoded[i]), requests[i].context))
            size = self.options.batch_size or self._generation_batch_size()
            for start in range(0, len(order), size):
                chunk = order[start : start + size]
                seeds = [_seed(requests[i]) for i in chunk] if sample else None
                contexts = [encoded[i] for i in chunk]
                texts = None
                if self.plan.generation != PLAIN_DECODE:
                    try:
                        texts = self._generate_batch(
                            contexts, stops, max_gen_toks, temperature, seeds
                        )
                    except BackendError:
                        raise
                    except Exception as exc:  # never a crash: the plain path answers instead
                        self._fall_back("generation", PLAIN_DECODE, exc)
                if texts is None:
                    texts = self._generate_plain(contexts, stops, max_gen_toks, temperature, seeds)
                self._count(self.plan.generation, len(chunk))
                for i, text in zip(chunk, texts, strict=True):
                    results[i] = text
                if progress:
                    progress(len(chunk))
        return [r if r is not None else "" for r in results]

    def _generation_batch_size(self) -> int:
        if self.device.type != "cuda":
            return CPU_GENERATION_BATCH
        return MAX_GENERATION_BATCH

    def _generate_batch(
        self,
        contexts: list[list[int]],
        stops: list[str],
        max_new: int,
        temperature: float = 0.0,
        seeds: list[int] | None = None,
    ) -> list[str]:
        """Greedy decoding of a left-padded batch; each row stops at its own stop string.

        A hand-written loop rather than ``model.generate``: prompts are prefilled
        one by one into a cache with room reserved for the answer, rows that finish
        leave the batch at once (their cache rows are dropped), and the attention
        mask is kept as a ready 4-D additive mask so no step rebuilds it.
        """
        torch = self.torch
        device = self.device
        rows = len(contexts)
        longest = max(len(c) for c in contexts)
        mask = torch.zeros((rows, longest), dtype=torch.long)
        for row, tokens in enumerate(contexts):
            mask[row, longest - len(tokens) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        tail = max(len(self.tokenizer.encode(s, add_special_tokens=False)) for s in stops) + 2
        eos_ids = self._eos_ids()
        generated: list[list[int]] = [[] for _ in range(rows)]
        alive = list(range(rows))
        try:
            with torch.inference_mode():
                cache, first_logits = self._prefill(contexts, longest, max_new)
                generators = None
                if seeds is not None:
                    generators = [torch.Generator().manual_seed(seed) for seed in seeds]
                next_tokens = self._pick(first_logits, temperature, generators, alive)
                if self.plan.generation == RESERVED_DECODE:
                    # Additive mask over (pad, context, generated) keys for one query
                    # position, allocated once at full length; each step passes a view.
                    # One mask serves every layer: only full causal attention takes it.
                    blocked = torch.finfo(self.dtype).min
                    additive = torch.zeros(
                        (rows, 1, 1, longest + max_new), dtype=self.dtype, device=device
                    )
                    additive[:, :, :, :longest][mask.to(device)[:, None, None, :] == 0] = blocked
                else:
                    # A 2-D padding mask: transformers builds each layer's own mask
                    # (sliding window or full) over the cache, which keeps every position.
                    additive = torch.ones(
                        (rows, longest + max_new), dtype=torch.long, device=device
                    )
                    additive[:, :longest] = mask.to(device)
                width = longest
                last = positions[:, -1].to(device)
                for step in range(max_new):
                    done = []
                    for j, (row, token) in enumerate(zip(alive, next_tokens.tolist(), strict=True)):
                        generated[row].append(token)
                        if token in eos_ids or self._stopped(generated[row], stops, tail):
                            done.append(j)
                    if step == max_new - 1 or len(done) == len(alive):
                        break
                    if done:
                        keep = [j for j in range(len(alive)) if j not in set(done)]
                        index = torch.tensor(keep, device=device)
                        cache.batch_select_indices(index)
                        additive, last, next_tokens = (
                            additive[index],
                            last[index],
                            next_tokens[index],
                        )
                        alive = [alive[j] for j in keep]
                    width += 1
                    last = last + 1
                    out = self.model(
                        input_ids=next_tokens[:, None],
                        attention_mask=additive[..., :width],
                        position_ids=last[:, None],
                        use_cache=True,
                        **self._with(cache),
                    )
                    next_tokens = self._pick(out.logits[:, -1], temperature, generators, alive)
        except self.torch.cuda.OutOfMemoryError as exc:
            raise BackendError(
                f"out of memory generating a batch of {rows}; try a smaller --batch-size"
            ) from exc
        decode = self.tokenizer.decode
        return [cut_at_stops(decode(t, skip_special_tokens=True), stops) for t in generated]

    def _prefill(self, contexts: list[list[int]], longest: int, max_new: int) -> Any:
        """Run each prompt alone, then lay the caches out as one left-padded batch.

        A prompt alone needs no padding and no attention mask, so attention takes
        torch's causal fast path and never builds a (rows x length x length) score
        matrix or mask: the batched prefill's memory peak is gone and no compute is
        spent on padding. Each row's keys and values go right-aligned into the
        reserved batch cache, where decoding's additive mask hides the padding.
        """
        torch = self.torch
        cache = _reserved_cache(max_new)
        logits = []
        extra = {"logits_to_keep": 1} if self._keeps_logits else {}
        for row, tokens in enumerate(contexts):
            ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
            # A cache of full layers: a sliding layer's own cache keeps only its
            # window, and every row's keys must line up position by position.
            out = self.model(input_ids=ids, use_cache=True, **self._with(_full_cache()), **extra)
            logits.append(out.logits[0, -1])
            for layer, (keys, values) in enumerate(_cache_tensors(self._cache_of(out))):
                cache.place(layer, row, len(contexts), longest, keys, values)
        return cache, torch.stack(logits)

    def _generate_plain(
        self,
        contexts: list[list[int]],
        stops: list[str],
        max_new: int,
        temperature: float = 0.0,
        seeds: list[int] | None = None,
    ) -> list[str]:
        """One prompt at a time with the model's own cache: what ``model.generate`` runs.

        The path for architectures no fast decode loop is proven exact for.
        """
        torch = self.torch
        tail = max(len(self.tokenizer.encode(s, add_special_tokens=False)) for s in stops) + 2
        eos_ids = self._eos_ids()
        extra = {"logits_to_keep": 1} if self._keeps_logits else {}
        texts = []
        for row, tokens in enumerate(contexts):
            generators = None
            if seeds is not None:
                generators = [torch.Generator().manual_seed(seeds[row])]
            generated: list[int] = []
            try:
                with torch.inference_mode():
                    ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
                    out = self.model(input_ids=ids, use_cache=True, **extra)
                    for step in range(max_new):
                        token = self._pick(out.logits[:, -1], temperature, generators, [0])
                        generated.append(int(token[0]))
                        if (
                            generated[-1] in eos_ids
                            or self._stopped(generated, stops, tail)
                            or step == max_new - 1
                        ):
                            break
                        out = self.model(
                            input_ids=token[:, None],
                            use_cache=True,
                            **self._with(self._cache_of(out)),
                        )
            except self.torch.cuda.OutOfMemoryError as exc:
                raise BackendError(
                    f"out of memory generating from a prompt of {len(tokens)} tokens"
                ) from exc
            text = self.tokenizer.decode(generated, skip_special_tokens=True)
            texts.append(cut_at_stops(text, stops))
        return texts

    def _pick(self, logits: Any, temperature: float, generators: Any, alive: list[int]) -> Any:
        """Greedy, or one draw per row from its own seeded generator (batch-independent)."""
        torch = self.torch
        if generators is None:
            return logits.argmax(dim=-1)
        probs = torch.softmax(logits.float() / temperature, dim=-1).cpu()
        picks = [
            torch.multinomial(probs[j], 1, generator=generators[row]) for j, row in enumerate(alive)
        ]
        return torch.cat(picks).to(logits.device)

    def _stopped(self, tokens: list[int], stops: list[str], tail: int) -> bool:
        text = self.tokenizer.decode(tokens[-tail:])
        return any(stop and stop in text for stop in stops)

    def _eos_ids(self) -> set[int]:
        """The ids ``generate`` would stop on: the generation config's, else the tokenizer's."""
        configured = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        if configured is None:
            configured = self.tokenizer.eos_token_id
        return set(configured) if isinstance(configured, list) else {int(configured)}


def _full_cache() -> Any:
    """An empty ``DynamicCache`` whose every layer keeps every position.

    Built without the model's config on purpose: with it, transformers gives a
    sliding-window layer a cache that drops positions older than its window,
    which cannot be shared across rows or laid out position by position.
    Attention masks still apply each layer's window (transformers builds them
    from absolute positions), so the answers are the full forward's.
    """
    from transformers import DynamicCache

    return DynamicCache()


def _reserved_cache(reserve: int) -> Any:
    """A key/value cache that reserves room for ``reserve`` more positions per layer.

    transformers' ``DynamicCache`` grows with ``torch.cat``, copying every layer's
    whole cache at each decoding step: on CPU that copy cost more than the model.
    This one writes each step into preallocated room and hands attention a view.
    """
    from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

    class ReservedLayer(DynamicLayer):
        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            # transformers 4.x passes cache_kwargs positionally, 5.x by keyword: neither is used.
            if not self.is_initialized:
                _initialize(self, key_states, value_states)
                self.filled = 0
                self.key_room = _room(key_states, key_states.shape[-2] + reserve)
                self.value_room = _room(value_states, value_states.shape[-2] + reserve)
            end = self.filled + key_states.shape[-2]
            if end > self.key_room.shape[-2]:
                self.key_room = _grown(self.key_room, self.filled, end + reserve)
                self.value_room = _grown(self.value_room, self.filled, end + reserve)
            self.key_room[..., self.filled : end, :] = key_states
            self.value_room[..., self.filled : end, :] = value_states
            self.filled = end
            self.keys = self.key_room[..., :end, :]
            self.values = self.value_room[..., :end, :]
            return self.keys, self.values

        def batch_select_indices(self, indices: Any) -> None:
            if self.is_initialized:
                self.key_room = self.key_room[indices, ...]
                self.value_room = self.value_room[indices, ...]
                self.keys = self.key_room[..., : self.filled, :]
                self.values = self.value_room[..., : self.filled, :]

        def place(self, row: int, rows: int, longest: int, keys: Any, values: Any) -> None:
            """Put one prompt's keys and values right-aligned into row ``row``."""
            if not self.is_initialized:
                _initialize(self, keys, values)
                self.filled = longest
                shape = (rows, keys.shape[1], longest + reserve, keys.shape[-1])
                # Zeros, not empty: padded positions are masked, but a NaN there
                # would still turn the weighted sum into NaN.
                self.key_room = keys.new_zeros(shape)
                self.value_room = values.new_zeros((*shape[:-1], values.shape[-1]))
                self.keys = self.key_room[..., :longest, :]
                self.values = self.value_room[..., :longest, :]
            length = keys.shape[-2]
            self.key_room[row, :, longest - length : longest] = keys[0]
            self.value_room[row, :, longest - length : longest] = values[0]

    class ReservedCache(DynamicCache):
        def __init__(self) -> None:
            Cache.__init__(self, layer_class_to_replicate=ReservedLayer)

        def place(
            self, layer: int, row: int, rows: int, longest: int, keys: Any, values: Any
        ) -> None:
            while len(self.layers) <= layer:
                self.layers.append(ReservedLayer())
            reserved = self.layers[layer]
            assert isinstance(reserved, ReservedLayer)  # the only kind this cache appends
            reserved.place(row, rows, longest, keys, values)

    return ReservedCache()


def _initialize(layer: Any, keys: Any, values: Any) -> None:
    """``DynamicLayer.lazy_initialization``: transformers 5 also takes the values, 4.x not."""
    try:
        layer.lazy_initialization(keys, values)
    except TypeError:
        layer.lazy_initialization(keys)


def _room(states: Any, length: int) -> Any:
    return states.new_empty((*states.shape[:-2], length, states.shape[-1]))


def _grown(room: Any, filled: int, length: int) -> Any:
    bigger = _room(room, length)
    bigger[..., :filled, :] = room[..., :filled, :]
    return bigger


class _OutOfMemory(Exception):
    """Raised inside a batch so the caller can retry with a smaller budget."""


def _seed(request: GenerationRequest) -> int:
    return sampling_seed(request.sample_index, request.context)


def _common_prefix(a: tuple[int, ...], b: tuple[int, ...], limit: int) -> int:
    """Length of the shared start of two token sequences, counted up to ``limit``."""
    limit = min(limit, len(a), len(b))
    i = 0
    while i < limit and a[i] == b[i]:
        i += 1
    return i


def _cache_tensors(cache: Any) -> list[tuple[Any, Any]]:
    """(keys, values) per layer from a transformers cache, across cache API versions."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    if hasattr(cache, "key_cache"):
        return list(zip(cache.key_cache, cache.value_cache, strict=True))
    return [(k, v) for k, v in cache]


def _pick_device(requested: str) -> Any:
    import torch

    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except RuntimeError as exc:
        raise BackendError(
            f"--device {requested!r}: not a device name (cpu, cuda, cuda:1)"
        ) from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BackendError(f"--device {requested}: CUDA is not available on this machine")
    return device


def _torch_dtype(name: str, config_dtype: Any) -> Any:
    import torch

    if name == "auto":
        if isinstance(config_dtype, torch.dtype):
            return config_dtype
        if isinstance(config_dtype, str) and config_dtype in DTYPES:
            return getattr(torch, DTYPES[config_dtype])
        return torch.float32
    if name not in DTYPES:
        raise BackendError(f"--dtype {name!r}: choose {DTYPE_CHOICES}")
    return getattr(torch, DTYPES[name])


def _load_model(checkpoint: ResolvedCheckpoint, options: BackendOptions, device: Any) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    where = f"checkpoint {checkpoint.reference!r}"
    config = None
    try:
        config = AutoConfig.from_pretrained(
            checkpoint.load_path,
            revision=checkpoint.load_revision,
            trust_remote_code=options.trust_remote_code,
        )
        dtype = _torch_dtype(options.dtype, getattr(config, "dtype", None))
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint.load_path,
            revision=checkpoint.load_revision,
            trust_remote_code=options.trust_remote_code,
            dtype=dtype,
        )
    except BackendError:
        raise
    except MemoryError as exc:
        raise BackendError(f"{where}: out of memory while loading the weights") from exc
    except Exception as exc:
        raise CheckpointError(f"{where}: {_load_failure(exc, config)}") from exc
    if checkpoint.is_adapter:
        model = _attach_adapter(checkpoint, model)
    model.eval()
    _swap_in_place_activations(model)
    try:
        model.to(device)
    except RuntimeError as exc:
        raise BackendError(
            f"{where}: cannot move the model to {device} ({first_line(exc)})"
        ) from exc
    return model


def _load_failure(exc: BaseException, config: Any) -> str:
    """One line saying why a checkpoint cannot be served, naming its model type."""
    import transformers

    message = first_line(exc)
    if "trust_remote_code" in message or "contains custom code" in message:
        return "it needs custom code: pass --trust-remote-code if you trust it"
    model_type = getattr(config, "model_type", None)
    if "does not recognize this architecture" in message or (
        config is None and "model type" in message
    ):
        named = re.search(r"model type `([^`]+)`", message)
        kind = named.group(1) if named else "this"
        return (
            f"model type {kind!r} is unknown to transformers {transformers.__version__}; "
            "a newer transformers may know it"
        )
    if "Unrecognized configuration class" in message:
        return (
            f"model type {model_type!r} is not a causal language model "
            "(AutoModelForCausalLM cannot load it); evalsweep scores causal LMs only"
        )
    return f"cannot load the model ({message})"


def _swap_in_place_activations(model: Any) -> None:
    """Replace transformers' ``NewGELUActivation`` by an in-place twin with equal values.

    GPT-2's "gelu_new" is written as six tensor expressions, each allocating a
    tensor as large as the MLP's hidden layer; on CPU it took a quarter of an
    MMLU forward pass. The twin runs the same operations in the same order on
    one buffer, so every value is bit for bit the same (multiplying by 0.5
    first or last is exact) and predictions cannot change.
    """
    import math

    import torch
    from transformers.activations import NewGELUActivation

    scale = math.sqrt(2.0 / math.pi)

    class InPlaceNewGELU(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            if torch.is_grad_enabled() and x.requires_grad:
                return 0.5 * x * (1.0 + torch.tanh(scale * (x + 0.044715 * torch.pow(x, 3.0))))
            y = torch.pow(x, 3.0)
            y.mul_(0.044715).add_(x).mul_(scale).tanh_().add_(1.0)
            return y.mul_(x).mul_(0.5)

    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is NewGELUActivation:
                setattr(module, name, InPlaceNewGELU())


def _attach_adapter(checkpoint: ResolvedCheckpoint, model: Any) -> Any:
    """Wrap the base model with the checkpoint's PEFT adapter, unmerged."""
    where = f"checkpoint {checkpoint.reference!r}"
    try:
        from peft import PeftModel
    except ImportError as exc:
        raise BackendError(
            f"{where} is a PEFT adapter: install peft (pip install 'evalsweep[peft]')"
        ) from exc
    try:
        return PeftModel.from_pretrained(
            model, checkpoint.location, revision=checkpoint.adapter_revision, is_trainable=False
        )
    except Exception as exc:
        raise CheckpointError(f"{where}: cannot load the adapter ({first_line(exc)})") from exc


__all__ = ["HFBackend"]
