"""A PEFT adapter is a checkpoint: base model plus adapter, both identities recorded, unmerged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import run_cli
from evalsweep.checkpoints import ResolvedCheckpoint, resolve_checkpoint
from evalsweep.errors import CheckpointError
from evalsweep.models import BackendOptions, load_backend
from evalsweep.requests import LoglikelihoodRequest

pytest.importorskip("peft", reason="peft is not installed (pip install -e '.[peft]')")

REQUESTS = [
    LoglikelihoodRequest("Question: what is the capital of France?\nAnswer:", " Paris"),
    LoglikelihoodRequest("The derivative of x squared is", " 2x"),
    LoglikelihoodRequest("A B C D E F G", " H I J"),
]


@pytest.fixture(scope="module")
def adapters(gpt2_a: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two LoRA adapters of the same tiny GPT-2, with different random weights."""
    from evalsweep.demo import build_lora_adapter

    root = tmp_path_factory.mktemp("adapters")
    return (
        build_lora_adapter(gpt2_a, root / "adapter-a", seed=10),
        build_lora_adapter(gpt2_a, root / "adapter-b", seed=11),
    )


def test_adapter_folder_resolves_to_its_base_and_itself(
    gpt2_a: Path, adapters: tuple[Path, Path]
) -> None:
    adapter = resolve_checkpoint(str(adapters[0]))
    base = resolve_checkpoint(str(gpt2_a))
    assert adapter.base is not None and adapter.is_adapter
    assert adapter.base.identity == base.identity
    assert adapter.identity.startswith("local:sha256:")
    assert adapter.identity.endswith(f"+base={base.identity}")
    assert adapter.load_path == str(gpt2_a.resolve())  # weights load from the base
    assert adapter.location == str(adapters[0].resolve())


def test_two_adapters_of_one_base_have_different_identities(
    adapters: tuple[Path, Path],
) -> None:
    first, second = (resolve_checkpoint(str(a)) for a in adapters)
    assert first.identity != second.identity
    assert first.base == second.base


def test_adapter_identity_survives_the_store_round_trip(adapters: tuple[Path, Path]) -> None:
    adapter = resolve_checkpoint(str(adapters[0]))
    restored = ResolvedCheckpoint.from_dict(json.loads(json.dumps(adapter.to_dict())))
    assert restored == adapter


def test_adapter_whose_base_is_missing_is_refused_naming_it(
    adapters: tuple[Path, Path], tmp_path: Path
) -> None:
    broken = Path(shutil.copytree(adapters[0], tmp_path / "orphan"))
    config = json.loads((broken / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "no-such-base")
    (broken / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="its base model") as caught:
        resolve_checkpoint(str(broken))
    assert repr(str(broken)) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_adapter_without_weights_is_refused(adapters: tuple[Path, Path], tmp_path: Path) -> None:
    broken = Path(shutil.copytree(adapters[0], tmp_path / "empty"))
    (broken / "adapter_model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="adapter without weights"):
        resolve_checkpoint(str(broken))


def test_hf_backend_scores_the_adapter_as_its_merged_weights_would(
    adapters: tuple[Path, Path], tmp_path: Path
) -> None:
    """Unmerged adapter == the same adapter merged into a copy of the base (and != the base)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter = resolve_checkpoint(str(adapters[0]))
    assert adapter.base is not None
    base_path = Path(adapter.base.location)
    merged_dir = tmp_path / "merged"
    model = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    PeftModel.from_pretrained(model, adapters[0]).merge_and_unload().save_pretrained(merged_dir)
    AutoTokenizer.from_pretrained(base_path).save_pretrained(merged_dir)

    options = BackendOptions(device="cpu", dtype="float32")
    scores = {}
    for name, ref in (("adapter", adapter), ("merged", resolve_checkpoint(str(merged_dir)))):
        backend = load_backend("hf", ref, options)
        scores[name] = backend.loglikelihood(REQUESTS)
        if name == "adapter":
            assert backend.describe()["adapter"] == "peft, not merged"
        backend.close()
    base = load_backend("hf", adapter.base, options)
    scores["base"] = base.loglikelihood(REQUESTS)
    base.close()
    for got, merged, plain in zip(scores["adapter"], scores["merged"], scores["base"], strict=True):
        assert got.logprob == pytest.approx(merged.logprob, abs=1e-4)
        assert got.is_greedy == merged.is_greedy
        assert abs(got.logprob - plain.logprob) > 1e-3


@pytest.mark.slow
def test_run_compares_a_base_and_two_adapters(
    gpt2_a: Path,
    adapters: tuple[Path, Path],
    data_dir: Path,
    store_path: Path,
    cli_env: dict[str, str],
) -> None:
    refs = [str(gpt2_a), str(adapters[0]), str(adapters[1])]
    command = ["run", *refs, "--tasks",
               "mmlu_abstract_algebra", "--limit", "8", "--num-fewshot", "1",
               "--data-dir", str(data_dir), "--store", str(store_path), "--json"]  # fmt: skip
    done = run_cli(command, env=cli_env)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    checkpoints = {c["reference"]: c for c in document["checkpoints"]}
    base_identity = checkpoints[refs[0]]["identity"]
    for ref in refs[1:]:
        assert checkpoints[ref]["base"]["identity"] == base_identity
        assert checkpoints[ref]["identity"].endswith(f"+base={base_identity}")
        assert checkpoints[ref]["runtime"]["adapter"] == "peft, not merged"
    compared = {(c["candidate"], c["baseline"]) for c in document["comparisons"]}
    assert {(refs[1], refs[0]), (refs[2], refs[0])} <= compared
    accuracies = {
        r["checkpoint"]: r["value"]
        for r in document["results"]
        if r["metric"] == "acc" and r["level"] == "task"
    }
    assert set(accuracies) == set(refs)
