"""Each checkpoint's attention features are read from its config, and only fast paths
declared exact for all of them are chosen (the matrix, ``test_models_arch_matrix.py``, proves
the declarations; this checks the choice on real transformers configs)."""

from __future__ import annotations

from typing import Any

import pytest

from evalsweep.models._arch import (
    FULL_FORWARD,
    PLAIN_DECODE,
    PREFIX_REUSE,
    RESERVED_DECODE,
    RESERVED_DECODE_MASKED,
    Attention,
    plan,
)


def _config(class_name: str, **kwargs: Any) -> Any:
    import transformers

    return getattr(transformers, class_name)(**kwargs)


@pytest.mark.parametrize(
    ("class_name", "kwargs", "features", "generation"),
    [
        ("LlamaConfig", {}, {"full"}, RESERVED_DECODE),
        ("Qwen2Config", {"use_sliding_window": False}, {"full"}, RESERVED_DECODE),
        ("MistralConfig", {"sliding_window": 4096}, {"sliding-window"}, RESERVED_DECODE_MASKED),
        (
            "MixtralConfig",
            {"sliding_window": 512},
            {"sliding-window", "mixture-of-experts"},
            RESERVED_DECODE_MASKED,
        ),
        (
            "Gemma2Config",
            {"num_hidden_layers": 4, "sliding_window": 4096},
            {"sliding-window", "mixed-layers", "soft-capping"},
            RESERVED_DECODE_MASKED,
        ),
        (
            "Gemma3TextConfig",
            {"num_hidden_layers": 12, "sliding_window": 512},
            {"sliding-window", "mixed-layers"},
            RESERVED_DECODE_MASKED,
        ),
        (
            "Qwen3MoeConfig",
            {"num_experts": 8},
            {"full", "mixture-of-experts"},
            RESERVED_DECODE,
        ),
        (
            "GPTNeoConfig",
            {"attention_types": [[["global", "local"], 1]], "num_layers": 2},
            {"sliding-window", "mixed-layers"},
            RESERVED_DECODE_MASKED,
        ),
    ],
)
def test_features_come_from_the_config_and_choose_the_paths(
    class_name: str, kwargs: dict[str, Any], features: set[str], generation: str
) -> None:
    attention = Attention.from_config(_config(class_name, **kwargs))
    assert attention.features == features
    chosen = plan(attention)
    assert (chosen.loglikelihood, chosen.generation) == (PREFIX_REUSE, generation)
    assert plan(attention, prefix_reuse=False).loglikelihood == FULL_FORWARD


def test_a_window_reaches_the_description() -> None:
    attention = Attention.from_config(
        _config("Gemma3TextConfig", num_hidden_layers=6, sliding_window=512)
    )
    summary = plan(attention).describe()["attention"]
    assert isinstance(summary, dict) and summary["sliding_window"] == 512


@pytest.mark.parametrize(
    ("class_name", "kwargs"),
    [
        ("MambaConfig", {}),  # a state-space model: its cache is not keys and values
        ("FalconMambaConfig", {}),
        ("BloomConfig", {}),  # ALiBi: never checked by the matrix
        ("OPTConfig", {}),
    ],
)
def test_model_types_outside_the_matrix_take_the_plain_paths(
    class_name: str, kwargs: dict[str, Any]
) -> None:
    chosen = plan(Attention.from_config(_config(class_name, **kwargs)))
    assert (chosen.loglikelihood, chosen.generation) == (FULL_FORWARD, PLAIN_DECODE)
    notes = chosen.describe()["plain_because"]
    assert isinstance(notes, list) and len(notes) == 2
    assert all("not in the verified matrix" in note for note in notes)


def test_recurrent_blocks_are_a_feature_no_fast_path_supports() -> None:
    attention = Attention.from_config(_config("MambaConfig"))
    assert "recurrent" in attention.features and "full" not in attention.features


def test_code_shipped_with_a_checkpoint_takes_the_plain_paths() -> None:
    from dataclasses import replace

    attention = replace(Attention.from_config(_config("LlamaConfig")), native=False)
    chosen = plan(attention)
    assert (chosen.loglikelihood, chosen.generation) == (FULL_FORWARD, PLAIN_DECODE)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_generates_one_prompt_at_a_time(dtype: str) -> None:
    chosen = plan(Attention.from_config(_config("LlamaConfig")), dtype=dtype)
    assert (chosen.loglikelihood, chosen.generation) == (PREFIX_REUSE, PLAIN_DECODE)
    notes = chosen.describe()["plain_because"]
    assert isinstance(notes, list) and any(dtype in note for note in notes)
