"""The OpenAI-compatible backend's failures are one line; transient ones are retried.

These tests run small real HTTP servers on loopback, each behaving like a
kind of server met in practice: one that ignores ``echo``/``logprobs`` (so it
cannot score log-likelihood), one that is briefly overloaded (503 twice, then
fine). Agreement with a real ``vllm serve`` is tested in ``test_models_vllm.py``.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import Ran, run_cli
from evalsweep.checkpoints import resolve_checkpoint
from evalsweep.errors import BackendError
from evalsweep.models import BackendOptions, load_backend
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """A loopback completions server; ``answer(body)`` returns (status, JSON payload)."""

    def __init__(self, answer: Any) -> None:
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def reply(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self.reply(200, {"object": "list", "data": [{"id": "tiny", "root": "tiny"}]})
                else:
                    self.reply(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                self.reply(*answer(body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def echo_without_logprobs(body: dict[str, Any]) -> tuple[int, Any]:
    """What a server that ignores echo/logprobs answers: text, no log-probabilities."""
    prompts = body["prompt"] if isinstance(body["prompt"][0], list) else [body["prompt"]]
    choices = [{"index": i, "text": " 4", "logprobs": None} for i in range(len(prompts))]
    return 200, {"object": "text_completion", "model": "tiny", "choices": choices}


@pytest.fixture
def overloaded_twice() -> Iterator[Server]:
    calls = {"n": 0}

    def answer(body: dict[str, Any]) -> tuple[int, Any]:
        calls["n"] += 1
        if calls["n"] <= 2:
            return 503, {"error": {"message": "server overloaded"}}
        return 200, {"choices": [{"index": 0, "text": " 42\n\nQuestion: next", "logprobs": None}]}

    with Server(answer) as server:
        yield server


def test_server_without_prompt_logprobs_is_one_line_error(gpt2_a: Path) -> None:
    with Server(echo_without_logprobs) as server:
        backend = load_backend(
            "openai", resolve_checkpoint(str(gpt2_a)), BackendOptions(base_url=server.url)
        )
        with pytest.raises(BackendError, match="returned no prompt log-probabilities") as caught:
            backend.loglikelihood([LoglikelihoodRequest("Question: 2+2?\nAnswer:", " 4")])
        backend.close()
    assert "\n" not in str(caught.value)
    (body,) = server.bodies
    assert body["echo"] is True and body["logprobs"] == 1 and body["max_tokens"] == 1


def test_transient_503_is_retried_and_generation_cut_at_stop(
    gpt2_a: Path, overloaded_twice: Server
) -> None:
    options = BackendOptions(base_url=overloaded_twice.url, concurrency=1)
    backend = load_backend("openai", resolve_checkpoint(str(gpt2_a)), options)
    request = GenerationRequest("Question: 6*7?\nAnswer:", until=("Question:",), max_gen_toks=16)
    assert backend.generate_until([request]) == [" 42\n\n"]
    assert backend.describe()["retries"] == 2
    assert len(overloaded_twice.bodies) == 3
    # Stop strings (plus the tokenizer's EOS) go to the server; tokens, not text, are sent.
    assert overloaded_twice.bodies[-1]["stop"] == ["Question:", "<|endoftext|>"]
    assert all(isinstance(t, int) for t in overloaded_twice.bodies[-1]["prompt"])
    backend.close()


def run_command(args: list[str], env: dict[str, str]) -> Ran:
    return run_cli(["run", *args], env=env)


def test_unreachable_base_url_is_one_line_error(
    gpt2_a: Path, data_dir: Path, store_path: Path, cli_env: dict[str, str], sample_rows: Any
) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    done = run_command(
        [str(gpt2_a), "--tasks", "mmlu_abstract_algebra", "--limit", "2", "--backend", "openai",
         "--base-url", url, "--data-dir", str(data_dir), "--store", str(store_path), "--json"],
        cli_env,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "cannot reach an OpenAI-compatible server" in lines[0] and url in lines[0]
    assert sample_rows(store_path) == 0


def test_openai_backend_without_base_url_is_one_line_error(
    gpt2_a: Path, data_dir: Path, store_path: Path, cli_env: dict[str, str]
) -> None:
    done = run_command(
        [str(gpt2_a), "--tasks", "mmlu_abstract_algebra", "--limit", "2", "--backend", "openai",
         "--data-dir", str(data_dir), "--store", str(store_path), "--json"],
        cli_env,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "evalsweep: error: --backend openai needs --base-url (e.g. http://127.0.0.1:8000/v1)"
    ]


@pytest.mark.parametrize(
    ("given", "root"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/v1/", "http://127.0.0.1:8000/v1"),
        ("http://host/v1/completions", "http://host/v1"),
    ],
)
def test_base_url_forms_reach_the_same_api_root(given: str, root: str) -> None:
    from evalsweep.models.openai import _api_root

    assert _api_root(given) == root


def test_base_url_that_is_not_http_is_refused() -> None:
    from evalsweep.models.openai import _api_root

    with pytest.raises(BackendError, match="not an http"):
        _api_root("127.0.0.1:8000")
