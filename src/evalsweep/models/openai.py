"""OpenAI-compatible HTTP backend (vLLM, SGLang, TGI... serving ``/v1/completions``).

Many people already serve their checkpoints behind such an endpoint. The
checkpoint reference still names what is evaluated (its identity goes into
the store key); the server answers for it.

Requests are tokenized here with the checkpoint's own tokenizer and lm-eval's
rules (``models/_tokens.py``), and sent as token ids, so the split between
context and continuation is exactly the HF backend's:

- log-likelihood: ``echo=True, logprobs=1, max_tokens=1`` returns the
  log-probability of every prompt token and the top alternative at each
  position; the continuation's positions are summed, and it is greedy when
  each of its tokens is at least as likely as the top alternative. A server
  that cannot return prompt log-probabilities is a one-line error.
- generation: ``/v1/completions`` with the request's stop strings (plus EOS),
  cut again at the first stop string as lm-eval does.

Calls run ``--concurrency`` at a time; connection errors, 429 and 5xx answers
are retried with exponential backoff.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from evalsweep.checkpoints import ResolvedCheckpoint
from evalsweep.errors import BackendError
from evalsweep.models._base import BackendOptions, ProgressCallback, backend_settings
from evalsweep.models._tokens import (
    DEFAULT_MAX_LENGTH,
    PairEncoder,
    cut_at_stops,
    first_line,
    load_tokenizer,
    sampling_seed,
)
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest, LoglikelihoodResult

PROMPTS_PER_CALL = 16  # prompts batched into one /v1/completions call
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
MAX_BACKOFF = 30.0


class OpenAIBackend:
    """One checkpoint as served by an OpenAI-compatible completions server."""

    name = "openai"

    def __init__(self, checkpoint: ResolvedCheckpoint, options: BackendOptions) -> None:
        import httpx

        if not options.base_url:
            raise BackendError("--backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)")
        if options.concurrency < 1:
            raise BackendError(f"--concurrency must be at least 1, got {options.concurrency}")
        self.checkpoint = checkpoint
        self.options = options
        self.base_url = _api_root(options.base_url)
        self.client = httpx.Client(
            base_url=self.base_url,
            headers=_headers(options.api_key_env),
            timeout=httpx.Timeout(options.timeout, connect=10.0),
            limits=httpx.Limits(max_connections=options.concurrency),
        )
        self._httpx = httpx
        self._calls = 0
        self._retries = 0
        self._lock = threading.Lock()
        served = self._served_models()
        self.model = options.model_name or _pick_model(checkpoint, served, self.base_url)
        if self.model not in served:
            raise BackendError(
                f"server at {self.base_url} does not serve model {self.model!r} "
                f"(it serves: {', '.join(sorted(served)) or 'nothing'})"
            )
        self.server_info = served[self.model]
        self.tokenizer = load_tokenizer(checkpoint, options.trust_remote_code)
        self.encoder = PairEncoder(self.tokenizer)
        self.max_length = options.max_length or int(
            self.server_info.get("max_model_len") or DEFAULT_MAX_LENGTH
        )

    # -- identity -----------------------------------------------------------------

    def settings(self) -> Mapping[str, object]:
        return backend_settings(
            "openai",
            dtype=self.options.dtype,
            device_type="remote",
            max_length=self.options.max_length,
            trust_remote_code=self.options.trust_remote_code,
        )

    def describe(self) -> Mapping[str, object]:
        info: dict[str, object] = dict(self.settings())
        info["base_url"] = self.base_url
        info["served_model"] = self.model
        info["served_root"] = self.server_info.get("root")
        info["server_max_model_len"] = self.server_info.get("max_model_len")
        info["concurrency"] = self.options.concurrency
        info["calls"] = self._calls
        info["retries"] = self._retries
        return info

    def close(self) -> None:
        self.client.close()
        self.encoder.clear()

    # -- log-likelihood ---------------------------------------------------------------

    def loglikelihood(
        self, requests: Sequence[LoglikelihoodRequest], progress: ProgressCallback | None = None
    ) -> list[LoglikelihoodResult]:
        # One prompt per distinct token sequence; each request reads its own
        # continuation's positions from the end of it.
        prompts: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for index, request in enumerate(requests):
            context, continuation = self.encoder.encode_pair(request.context, request.continuation)
            if not continuation:
                raise BackendError(f"continuation {request.continuation!r} encodes to no tokens")
            # Left-truncated like the HF backend, but leaving room for the one token
            # the server generates (a prompt of the full context length is refused).
            whole = (context + continuation)[-(self.max_length - 1) :]
            width = min(len(continuation), len(whole) - 1)
            prompts.setdefault(tuple(whole), []).append((index, width))
        ordered = list(prompts)
        per_call = self.options.batch_size or PROMPTS_PER_CALL  # --batch-size: prompts per call
        chunks = [ordered[i : i + per_call] for i in range(0, len(ordered), per_call)]
        results: list[LoglikelihoodResult | None] = [None] * len(requests)

        def score(chunk: list[tuple[int, ...]]) -> None:
            body = {
                "model": self.model,
                "prompt": [list(tokens) for tokens in chunk],
                "max_tokens": 1,
                "temperature": 0.0,
                "echo": True,
                "logprobs": 1,
            }
            choices = self._choices(self._post("/completions", body), len(chunk))
            for tokens, choice in zip(chunk, choices, strict=True):
                token_logprobs, top = self._prompt_logprobs(choice, len(tokens))
                for index, width in prompts[tokens]:
                    picked = token_logprobs[len(tokens) - width : len(tokens)]
                    alternatives = top[len(tokens) - width : len(tokens)]
                    greedy = all(
                        value >= max(alt.values(), default=value) - 1e-6
                        for value, alt in zip(picked, alternatives, strict=True)
                    )
                    results[index] = LoglikelihoodResult(float(sum(picked)), greedy)
            if progress:
                progress(sum(len(prompts[tokens]) for tokens in chunk))

        self._run_all(score, chunks)
        return [r for r in results if r is not None]

    def _prompt_logprobs(
        self, choice: Mapping[str, Any], length: int
    ) -> tuple[list[float], list[dict[str, float]]]:
        """The prompt's per-token log-probabilities and top alternatives, or a clear error."""
        logprobs = choice.get("logprobs") or {}
        values = logprobs.get("token_logprobs") or []
        top = logprobs.get("top_logprobs") or []
        if len(values) < length or len(top) < length or values[length - 1] is None:
            raise BackendError(
                f"server at {self.base_url} (model {self.model!r}) returned no prompt "
                "log-probabilities for echo=True, logprobs=1: it cannot score log-likelihood "
                "tasks (use it for generation tasks, or serve the model with vLLM)"
            )
        return [float(v) if v is not None else 0.0 for v in values[:length]], [
            {str(k): float(v) for k, v in (alt or {}).items()} for alt in top[:length]
        ]

    # -- generation --------------------------------------------------------------------

    def generate_until(
        self, requests: Sequence[GenerationRequest], progress: ProgressCallback | None = None
    ) -> list[str]:
        eos = self.encoder.eos_string()
        results: list[str] = [""] * len(requests)

        def generate(index: int) -> None:
            request = requests[index]
            stops = list(request.until) + ([eos] if eos and eos not in request.until else [])
            max_context = self.max_length - request.max_gen_toks
            if max_context <= 0:
                raise BackendError(
                    f"max_gen_toks {request.max_gen_toks} leaves no room in max length "
                    f"{self.max_length}"
                )
            body: dict[str, Any] = {
                "model": self.model,
                "prompt": self.encoder.encode(request.context)[-max_context:],
                "max_tokens": request.max_gen_toks,
                "temperature": request.temperature if request.do_sample else 0.0,
                "stop": [s for s in stops if s],
            }
            if request.do_sample:
                body["seed"] = sampling_seed(request.sample_index, request.context) % 2**31
            (choice,) = self._choices(self._post("/completions", body), 1)
            results[index] = cut_at_stops(str(choice.get("text") or ""), stops)
            if progress:
                progress(1)

        self._run_all(generate, list(range(len(requests))))
        return results

    # -- HTTP -------------------------------------------------------------------------

    def _run_all(self, work: Any, items: Sequence[Any]) -> None:
        """Run ``work`` on every item, ``--concurrency`` at a time; the first error wins."""
        if not items:
            return
        workers = min(self.options.concurrency, len(items))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(work, item) for item in items]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                for future in futures:
                    future.cancel()
                raise

    def _served_models(self) -> dict[str, dict[str, Any]]:
        """What ``GET /models`` lists, by id; a server that is not there is a one-line error."""
        answer = self._request("GET", "/models", None, retries=1)
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise BackendError(
                f"{self.base_url}/models did not answer like an OpenAI-compatible server"
            )
        return {str(m.get("id")): dict(m) for m in data if isinstance(m, dict)}

    def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        with self._lock:
            self._calls += 1
        return self._request("POST", path, body, retries=self.options.max_retries)

    def _request(self, method: str, path: str, body: Any, retries: int) -> Any:
        """One call with retries and exponential backoff on transient failures."""
        httpx = self._httpx
        where = f"{self.base_url}{path}"
        for attempt in range(retries + 1):
            last = attempt == retries
            try:
                response = self.client.request(method, path, json=body)
            except httpx.UnsupportedProtocol as exc:
                raise BackendError(f"--base-url {self.base_url!r} is not an http(s) URL") from exc
            except httpx.TransportError as exc:
                if last:
                    raise BackendError(
                        f"cannot reach an OpenAI-compatible server at {where} "
                        f"({type(exc).__name__}: {first_line(exc)})"
                    ) from exc
                self._backoff(attempt)
                continue
            if response.status_code in RETRY_STATUS and not last:
                self._backoff(attempt)
                continue
            if response.status_code >= 400:
                raise BackendError(self._http_error(where, response))
            try:
                return response.json()
            except ValueError as exc:
                raise BackendError(f"{where} answered with something that is not JSON") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _backoff(self, attempt: int) -> None:
        with self._lock:
            self._retries += 1
        delay = min(MAX_BACKOFF, 0.5 * 2**attempt)
        time.sleep(delay * (0.5 + random.random() / 2))

    def _http_error(self, where: str, response: Any) -> str:
        message = ""
        try:
            payload = response.json()
            error = payload.get("error", payload) if isinstance(payload, dict) else payload
            message = str(error.get("message") if isinstance(error, dict) else error)
        except ValueError:
            message = response.text
        message = " ".join(message.split())[:300]
        if response.status_code in (401, 403):
            hint = "; set the key's variable with --api-key-env"
            return f"{where}: HTTP {response.status_code}, not authorised ({message}){hint}"
        if "logprob" in message.lower() or "echo" in message.lower():
            return (
                f"server at {self.base_url} (model {self.model!r}) cannot return prompt "
                f"log-probabilities (HTTP {response.status_code}: {message})"
            )
        return f"{where}: HTTP {response.status_code} ({message})"

    @staticmethod
    def _choices(answer: Any, expected: int) -> list[Mapping[str, Any]]:
        choices = answer.get("choices") if isinstance(answer, dict) else None
        if not isinstance(choices, list) or len(choices) != expected:
            raise BackendError(
                f"server answered {len(choices) if isinstance(choices, list) else 'no'} "
                f"choices for {expected} prompt(s)"
            )
        # Servers answer a list of prompts in order, each choice carrying its index.
        return sorted(choices, key=lambda c: int(c.get("index", 0)))


def _api_root(url: str) -> str:
    """``http://host:8000`` or ``http://host:8000/v1`` (or ``.../v1/completions``) → ``.../v1``."""
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BackendError(f"--base-url {url!r} is not an http(s) URL (http://host:port/v1)")
    for suffix in ("/completions", "/chat/completions"):
        if url.endswith(suffix):
            url = url[: -len(suffix)]
    return url if url.endswith("/v1") else f"{url}/v1"


def _headers(api_key_env: str | None) -> dict[str, str]:
    if api_key_env:
        key = os.environ.get(api_key_env)
        if not key:
            raise BackendError(f"--api-key-env {api_key_env}: that environment variable is unset")
    else:
        key = os.environ.get("OPENAI_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def _pick_model(checkpoint: ResolvedCheckpoint, served: Mapping[str, Any], base_url: str) -> str:
    """The served model that is this checkpoint: same reference, path or folder name."""
    names = [checkpoint.reference, checkpoint.location, Path(checkpoint.location).name]
    for name in names:
        if name in served:
            return name
    if len(served) == 1:
        return next(iter(served))
    raise BackendError(
        f"server at {base_url} serves {', '.join(sorted(served)) or 'no model'}; none is "
        f"checkpoint {checkpoint.reference!r}: name it with --model"
    )


__all__ = ["OpenAIBackend"]
