"""Without vLLM installed, ``--backend vllm`` is a one-line error, not an ImportError."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from evalsweep.checkpoints import resolve_checkpoint
from evalsweep.errors import BackendError
from evalsweep.models import BackendOptions, load_backend


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is not None, reason="vLLM is installed in this environment"
)
def test_vllm_backend_without_vllm_says_how_to_install_it(gpt2_a: Path) -> None:
    with pytest.raises(BackendError, match="vLLM is not installed") as caught:
        load_backend("vllm", resolve_checkpoint(str(gpt2_a)), BackendOptions())
    assert "\n" not in str(caught.value)


def test_unknown_backend_lists_the_known_ones(gpt2_a: Path) -> None:
    with pytest.raises(BackendError, match="known backends: hf, vllm, openai"):
        load_backend("tgi", resolve_checkpoint(str(gpt2_a)), BackendOptions())
