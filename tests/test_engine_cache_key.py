"""The cache key: every setting that can change an answer is in it, every speed-only one is not.

The lists come from the options' own definitions (``BackendOptions``,
``SweepSpec``, ``ChatOptions``), so a new option that nobody classified fails
here instead of silently sharing (or splitting) stored answers.
"""

from __future__ import annotations

import types
import typing
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from evalsweep.engine import (
    OPTION_ROLES,
    ChatOptions,
    SweepSpec,
    backend_cache_key,
    run_sweep,
    task_cache_key,
)
from evalsweep.engine._cache_key import SPEC_ROLES
from evalsweep.models import BACKENDS, BackendOptions
from evalsweep.store import Store
from evalsweep.tasks import GSM8K, MMLU, HumanEval

OPTION_FIELDS = [f.name for f in fields(BackendOptions)]
ANSWER_OPTIONS = [name for name in OPTION_FIELDS if OPTION_ROLES.get(name) == "answer"]
OTHER_OPTIONS = [name for name in OPTION_FIELDS if OPTION_ROLES.get(name) in ("speed", "source")]
#: A second value for the string options whose values are names, not free text.
NAMED_VALUES = {"device": ("cpu", "cuda"), "dtype": ("float32", "bfloat16")}


def spec(backend: str = "hf", **options: Any) -> SweepSpec:
    base = {"device": "cpu", "dtype": "float32", **options}
    return SweepSpec(["ref"], ["mmlu"], backend=backend, options=BackendOptions(**base))


def two_values(name: str) -> tuple[Any, Any]:
    """Two different valid values for an option, chosen from its declared type."""
    if name in NAMED_VALUES:
        return NAMED_VALUES[name]
    hint = typing.get_type_hints(BackendOptions)[name]
    kinds = set(typing.get_args(hint)) if isinstance(hint, types.UnionType) else {hint}
    kinds.discard(type(None))
    (kind,) = kinds
    if kind is bool:
        return False, True
    if kind is int:
        return 2, 4096
    if kind is float:
        return 0.5, 12.0
    if kind is str:
        return "first", "second"
    raise AssertionError(f"BackendOptions.{name}: no test values for type {hint}")


def test_every_backend_option_is_classified() -> None:
    unclassified = sorted(set(OPTION_FIELDS) - set(OPTION_ROLES))
    assert not unclassified, f"classify in engine/_cache_key.py OPTION_ROLES: {unclassified}"
    assert set(OPTION_ROLES) == set(OPTION_FIELDS), "OPTION_ROLES names a field that is gone"
    assert set(OPTION_ROLES.values()) <= {"answer", "speed", "source"}


def test_every_sweep_spec_field_is_classified() -> None:
    assert set(SPEC_ROLES) == {f.name for f in fields(SweepSpec)}


@pytest.mark.parametrize("name", ANSWER_OPTIONS)
@pytest.mark.parametrize("backend", ["hf", "vllm"])
def test_answer_changing_option_changes_the_key(name: str, backend: str) -> None:
    first, second = two_values(name)
    one = backend_cache_key(spec(backend, **{name: first}))
    other = backend_cache_key(spec(backend, **{name: second}))
    assert one.key != other.key


@pytest.mark.parametrize("name", OTHER_OPTIONS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_speed_only_option_leaves_the_key_unchanged(name: str, backend: str) -> None:
    first, second = two_values(name)
    one = backend_cache_key(spec(backend, **{name: first}))
    other = backend_cache_key(spec(backend, **{name: second}))
    assert one == other and one.key == other.key


@pytest.mark.parametrize(
    ("name", "same"),
    [
        ("device", ("cuda:0", "cuda:1", "cuda")),
        ("dtype", ("bf16", "bfloat16")),
        ("dtype", ("half", "fp16", "float16")),
        ("dtype", ("fp32", "float32")),
    ],
)
def test_names_for_the_same_setting_give_the_same_key(name: str, same: tuple[str, ...]) -> None:
    keys = {backend_cache_key(spec(**{name: value})).key for value in same}
    assert len(keys) == 1


def test_backend_name_is_in_the_key() -> None:
    keys = {backend_cache_key(spec(backend)).key for backend in BACKENDS}
    assert len(keys) == len(BACKENDS)


def test_an_openai_server_is_keyed_as_remote_whatever_the_local_device() -> None:
    keys = {backend_cache_key(spec("openai", device=d)).key for d in ("cpu", "cuda", "auto")}
    assert len(keys) == 1


def test_automatic_device_is_keyed_as_the_device_it_picks() -> None:
    import torch

    picked = "cuda" if torch.cuda.is_available() else "cpu"
    assert backend_cache_key(spec(device="auto")) == backend_cache_key(spec(device=picked))


@pytest.mark.parametrize(
    ("backend", "options", "key"),
    [
        ("hf", {"device": "cpu"}, "backend:22db22661e7be283"),
        (
            "hf",
            {"device": "cuda:1", "dtype": "bf16", "max_length": 2048},
            "backend:eb1be41442e54551",
        ),
        (
            "openai",
            {"base_url": "http://x", "trust_remote_code": True},
            "backend:571e0102305d992f",
        ),
        ("vllm", {"device": "cuda", "dtype": "half"}, "backend:427890e24d2ae753"),
    ],
)
def test_backend_keys_of_existing_stores_are_unchanged(
    backend: str, options: dict[str, Any], key: str
) -> None:
    """Keys written by earlier versions (computed with them): stored rows are found again."""
    full = SweepSpec(["ref"], ["mmlu"], backend=backend, options=BackendOptions(**options))
    assert backend_cache_key(full).key == key


@pytest.mark.parametrize(
    ("task", "shots", "chat", "key"),
    [
        (MMLU(), 0, ChatOptions(), "task:aba9553453531fe5"),
        (GSM8K(), 0, ChatOptions(), "task:c97135bd2d275e4a"),
        (GSM8K(), 5, ChatOptions(False, False, "Be brief."), "task:869fc552ea11d4e7"),
        # Changed on purpose once: code verdicts now import the standard library only (the
        # task key names it), so verdicts stored under the old rule are computed again.
        (HumanEval(samples=4, temperature=0.8, ks=(1,)), 0, ChatOptions(), "task:3796ab1d34603e34"),
    ],
)
def test_task_keys_of_existing_stores_are_unchanged(
    task: Any, shots: int, chat: ChatOptions, key: str
) -> None:
    assert task_cache_key(task, shots, chat).key == key


def test_task_key_holds_version_shots_and_the_task_settings() -> None:
    base = task_cache_key(GSM8K(), 5, ChatOptions()).key
    assert task_cache_key(GSM8K(), 4, ChatOptions()).key != base
    renamed = GSM8K()
    renamed.version = "a later version"
    assert task_cache_key(renamed, 5, ChatOptions()).key != base
    code = task_cache_key(HumanEval(samples=2, temperature=0.5), 0, ChatOptions()).key
    assert task_cache_key(HumanEval(samples=3, temperature=0.5), 0, ChatOptions()).key != code
    assert task_cache_key(HumanEval(samples=2, temperature=0.6), 0, ChatOptions()).key != code


@pytest.mark.parametrize("name", [f.name for f in fields(ChatOptions)])
def test_every_chat_option_is_in_the_task_key(name: str) -> None:
    active = ChatOptions(True, True, "Be brief.")
    changed = {
        "apply_chat_template": replace(active, apply_chat_template=False),
        "fewshot_as_multiturn": replace(active, fewshot_as_multiturn=False),
        "system_instruction": replace(active, system_instruction="Be thorough."),
    }
    assert name in changed, f"ChatOptions.{name}: add it to ChatOptions.settings() and here"
    one = task_cache_key(GSM8K(), 5, active).key
    assert task_cache_key(GSM8K(), 5, changed[name]).key != one


def test_speed_only_options_reuse_stored_answers_and_answer_options_do_not(
    gpt2_a: Path, data_dir: Path, store_path: Path
) -> None:
    """A real sweep: results stored under one batch size are served to another."""
    first = SweepSpec(
        [str(gpt2_a)],
        [MMLU(subjects=["anatomy"])],
        data_dir=str(data_dir),
        limit=3,
        options=BackendOptions(device="cpu", dtype="float32", batch_size=1, prefix_reuse=False),
    )
    speedier = replace(first, options=replace(first.options, batch_size=8, prefix_reuse=True))
    shorter = replace(first, options=replace(first.options, max_length=64))
    with Store(store_path) as store:
        made = run_sweep(first, store)
        reused = run_sweep(speedier, store)
        recomputed = run_sweep(shorter, store)
    assert [r.computed for r in made.results] == [3]
    assert [r.computed for r in reused.results] == [0]
    assert [r.computed for r in recomputed.results] == [3]
    assert reused.backend_key == made.backend_key != recomputed.backend_key


@pytest.mark.parametrize("dtype", ["float32", "bf16"])
def test_a_loaded_backend_records_what_its_cache_key_names(gpt2_a: Path, dtype: str) -> None:
    from evalsweep.checkpoints import resolve_checkpoint
    from evalsweep.models import load_backend

    keyed = spec(dtype=dtype, max_length=64)
    backend = load_backend("hf", resolve_checkpoint(str(gpt2_a)), keyed.options)
    try:
        assert dict(backend.settings()) == dict(backend_cache_key(keyed).settings)
    finally:
        backend.close()
