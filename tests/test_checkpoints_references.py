"""Checkpoint references resolve to identities before any compute, or fail naming the reference."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from evalsweep.checkpoints import resolve_checkpoint, resolve_checkpoints
from evalsweep.errors import CheckpointError

LOCAL_IDENTITY = re.compile(r"^local:sha256:[0-9a-f]{64}$")


@pytest.fixture
def folder_copy(gpt2_a: Path, tmp_path: Path) -> Path:
    """A private copy of a real checkpoint folder that a test may break."""
    return Path(shutil.copytree(gpt2_a, tmp_path / "copy"))


def test_local_folder_resolves_to_sha256_identity(gpt2_a: Path) -> None:
    resolved = resolve_checkpoint(str(gpt2_a))
    assert LOCAL_IDENTITY.match(resolved.identity), resolved.identity
    assert resolved.kind == "local"
    assert resolved.location == str(gpt2_a.resolve())
    assert resolved.reference == str(gpt2_a)
    assert resolved.commit is None


def test_same_bytes_in_two_folders_share_an_identity(gpt2_a: Path, folder_copy: Path) -> None:
    original = resolve_checkpoint(str(gpt2_a))
    copy = resolve_checkpoint(str(folder_copy))
    assert copy.location != original.location
    assert copy.identity == original.identity


def test_changed_weights_change_the_identity(folder_copy: Path, gpt2_b: Path) -> None:
    before = resolve_checkpoint(str(folder_copy)).identity
    # Retrained weights written over the same folder, config and tokenizer unchanged.
    shutil.copyfile(gpt2_b / "model.safetensors", folder_copy / "model.safetensors")
    after = resolve_checkpoint(str(folder_copy)).identity
    assert LOCAL_IDENTITY.match(after)
    assert after != before


def test_different_seeds_have_different_identities(gpt2_a: Path, gpt2_b: Path) -> None:
    identities = {r.identity for r in resolve_checkpoints([str(gpt2_a), str(gpt2_b)])}
    assert len(identities) == 2


def test_folder_without_weights_is_refused_naming_the_reference(folder_copy: Path) -> None:
    (folder_copy / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no weight files") as caught:
        resolve_checkpoint(str(folder_copy))
    assert repr(str(folder_copy)) in str(caught.value)


def test_folder_without_config_is_refused_naming_the_reference(folder_copy: Path) -> None:
    (folder_copy / "config.json").unlink()
    with pytest.raises(CheckpointError, match="no config.json") as caught:
        resolve_checkpoint(str(folder_copy))
    assert repr(str(folder_copy)) in str(caught.value)


def test_invalid_config_json_is_refused_naming_the_reference(folder_copy: Path) -> None:
    (folder_copy / "config.json").write_text('{"model_type": "gpt2",', encoding="utf-8")
    with pytest.raises(CheckpointError, match="not valid JSON") as caught:
        resolve_checkpoint(str(folder_copy))
    assert repr(str(folder_copy)) in str(caught.value)


def test_nonexistent_path_is_refused_naming_the_reference(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-checkpoint")
    with pytest.raises(CheckpointError, match="does not exist") as caught:
        resolve_checkpoint(missing)
    assert repr(missing) in str(caught.value)


@pytest.mark.parametrize(
    "reference", ["not a hub id", "org/name/extra", "org/", "-org/name", "org/na me@main"]
)
def test_malformed_hub_id_is_refused_naming_the_reference(reference: str) -> None:
    with pytest.raises(CheckpointError) as caught:
        resolve_checkpoint(reference)
    assert repr(reference) in str(caught.value)


def test_hub_reference_offline_says_it_cannot_reach_the_hub() -> None:
    reference = "EleutherAI/pythia-70m@step1000"
    with pytest.raises(CheckpointError) as caught:
        resolve_checkpoint(reference)
    message = str(caught.value)
    assert repr(reference) in message
    assert "cannot reach the Hub" in message
    assert "\n" not in message


def test_every_reference_is_resolved_before_any_is_used(gpt2_a: Path, tmp_path: Path) -> None:
    missing = str(tmp_path / "typo")
    with pytest.raises(CheckpointError) as caught:
        resolve_checkpoints([str(gpt2_a), missing])
    assert repr(missing) in str(caught.value)


def test_same_reference_twice_is_refused(gpt2_a: Path) -> None:
    with pytest.raises(CheckpointError, match="given twice"):
        resolve_checkpoints([str(gpt2_a), str(gpt2_a)])


@pytest.mark.parametrize(
    "name",
    [
        "model.safetensors.index.json", "special_tokens_map.json", "added_tokens.json",
        "vocab.json", "merges.txt", "spiece.model", "tokenizer.json", "tokenizer_config.json",
        "generation_config.json", "config.json", "chat_template.jinja", "chat_template.json",
    ],
)  # fmt: skip
def test_every_file_loading_reads_is_part_of_the_identity(folder_copy: Path, name: str) -> None:
    before = resolve_checkpoint(str(folder_copy)).identity
    file = folder_copy / name
    if name == "config.json":  # still valid JSON, one value changed
        file.write_text(file.read_text().replace("}", ', "evalsweep_test": 1}', 1))
    else:
        file.write_bytes((file.read_bytes() if file.exists() else b"") + b"\n{}")
    assert resolve_checkpoint(str(folder_copy)).identity != before


@pytest.mark.parametrize(
    "name",
    ["optimizer.pt", "scheduler.pt", "scaler.pt", "rng_state.pth", "rng_state_3.pth",
     "trainer_state.json", "training_args.bin", "latest", "zero_to_fp32.py"],
)  # fmt: skip
def test_training_state_beside_a_checkpoint_is_not_part_of_its_identity(
    folder_copy: Path, name: str
) -> None:
    before = resolve_checkpoint(str(folder_copy)).identity
    (folder_copy / name).write_bytes(b"training state")
    (folder_copy / "global_step10").mkdir()  # DeepSpeed's folder of states
    assert resolve_checkpoint(str(folder_copy)).identity == before


def test_a_file_name_that_is_not_utf8_is_hashed_by_its_bytes(folder_copy: Path) -> None:
    before = resolve_checkpoint(str(folder_copy)).identity
    odd = bytes(folder_copy) + b"/extra\xfe.safetensors"
    shutil.copyfile(folder_copy / "model.safetensors", odd)
    with_odd = resolve_checkpoint(str(folder_copy)).identity
    assert LOCAL_IDENTITY.match(with_odd) and with_odd != before
    Path(odd.decode("utf-8", "surrogateescape")).unlink()
    shutil.copyfile(
        folder_copy / "model.safetensors", bytes(folder_copy) + b"/extra\xff.safetensors"
    )
    assert resolve_checkpoint(str(folder_copy)).identity not in (before, with_odd)


_RESOLVE = """
import sys
from evalsweep.checkpoints import resolve_checkpoint
from evalsweep.errors import CheckpointError
try:
    resolve_checkpoint(sys.argv[1])
except CheckpointError as error:
    print(error)
    sys.exit(3)
"""


def test_an_unreadable_file_is_one_line_naming_the_checkpoint(folder_copy: Path) -> None:
    import os
    import subprocess
    import sys

    (folder_copy / "tokenizer_config.json").chmod(0)
    # Run without capabilities (root reads any file with them): the file's mode decides.
    command = [sys.executable, "-c", _RESOLVE, str(folder_copy)]
    if os.geteuid() == 0:
        drop = ["--bounding-set", "-all", "--inh-caps", "-all"]
        command = ["setpriv", *drop, "--securebits", "+noroot,+noroot_locked", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr[-2000:]
    message = done.stdout.strip()
    assert repr(str(folder_copy)) in message and "tokenizer_config.json" in message
    assert "\n" not in message


def test_a_folder_named_like_a_hub_pattern_resolves_as_the_folder(
    gpt2_a: Path, tmp_path: Path
) -> None:
    folder = Path(shutil.copytree(gpt2_a, tmp_path / "exp@[lr=3e-4]"))
    assert resolve_checkpoint(str(folder)).identity == resolve_checkpoint(str(gpt2_a)).identity
