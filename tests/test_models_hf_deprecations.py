"""The HF backend calls no transformers API announced for removal.

transformers warns with a ``FutureWarning`` (a keyword argument it renamed, e.g.
``past_key_values`` to ``cache`` in transformers 5) or a log line (an output field read
by its old name). A sweep runs here as its own process with ``FutureWarning`` and the
``DeprecationWarning`` of transformers and torch turned into errors and transformers'
log lines let through (``--debug``), over every path that hands the model a cache:
multiple choice with a shared few-shot prefix (prefix reuse), and generation with the
batched decode loop and, for a checkpoint the batched loop does not serve, the plain one.

A warning raised inside a fast path would be caught and the plain path would answer
instead, so the test also checks that each fast path served its requests. It is part of the
architecture matrix's lane, so it runs under both transformers majors (the vLLM venv has
transformers 5, which is the one that announces the removals).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.archmatrix]

#: Runs ``evalsweep`` with the warnings a removal announces turned into errors.
STRICT_EVALSWEEP = """
import sys, warnings
warnings.filterwarnings("error", category=FutureWarning)
warnings.filterwarnings(
    "error", category=DeprecationWarning, module=r"(evalsweep|transformers|torch)(\\.|$)"
)
from evalsweep.cli import main
sys.argv[0] = "evalsweep"
main()
"""


def _sweep(
    checkpoint: Path, data_dir: Path, tmp_path: Path, env: dict[str, str], *options: str
) -> dict[str, Any]:
    """Run mmlu (5-shot: a shared prefix) and gsm8k (generation) strictly; the runtime
    description of the checkpoint's backend (which path served what)."""
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-c", STRICT_EVALSWEEP, "run", str(checkpoint),
         "--tasks", "mmlu,gsm8k", "--limit", "3", "--data-dir", str(data_dir),
         "--device", "cpu", "--store", str(tmp_path / "s.db"), "--out", str(out),
         "--debug", *options],
        env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    said = done.stdout + done.stderr
    assert "deprecated" not in said.lower(), said[-4000:]
    assert "will be removed" not in said.lower(), said[-4000:]
    document = json.loads((out / "results.json").read_text())
    (entry,) = document["checkpoints"]
    runtime: dict[str, Any] = entry["runtime"]
    return runtime["paths"]


def test_prefix_reuse_and_batched_decoding_use_no_deprecated_api(
    gpt2_a: Path, data_dir: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    paths = _sweep(gpt2_a, data_dir, tmp_path, cli_env)
    assert "plain_because" not in paths, paths
    assert paths["served"].get("prefix-reuse", 0) > 0, paths
    assert paths["served"].get("reserved-decode", 0) > 0, paths


def test_plain_decoding_uses_no_deprecated_api(
    gpt2_a: Path, data_dir: Path, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    # In bfloat16 the batched loops are not exact, so one prompt at a time decodes.
    paths = _sweep(gpt2_a, data_dir, tmp_path, cli_env, "--dtype", "bfloat16")
    assert paths["served"].get("plain-decode", 0) > 0, paths
    assert paths["served"].get("prefix-reuse", 0) > 0, paths
    assert not any("failed" in note for note in paths.get("plain_because", [])), paths
