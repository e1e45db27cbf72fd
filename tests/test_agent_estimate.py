"""A quote's work and time: exact request counts, model size, work already stored."""

from __future__ import annotations

from pathlib import Path

from evalsweep.agent._estimate import estimated_seconds, parameter_count, plan_work, remaining_work
from evalsweep.agent._settings import AgentSettings
from evalsweep.engine import SweepSpec, run_sweep
from evalsweep.models import BackendOptions
from evalsweep.store import Store

TASK = "mmlu_abstract_algebra"


def test_parameter_count_reads_safetensors_headers(gpt2_a: Path, llama_checkpoint: Path) -> None:
    from transformers import AutoModelForCausalLM

    for folder in (gpt2_a, llama_checkpoint):
        model = AutoModelForCausalLM.from_pretrained(folder)
        assert parameter_count("local", str(folder), None) == model.num_parameters()


def test_work_counts_requests_and_stored_documents_cost_nothing(
    store_path: Path, gpt2_a: Path, gpt2_b: Path, data_dir: Path
) -> None:
    work = plan_work(
        [str(gpt2_a), str(gpt2_b)], [TASK], data_dir=str(data_dir), limit=2, num_fewshot=None,
        device="cpu",
    )  # fmt: skip
    assert work.requests == 2 * 2 * 4  # checkpoints x documents x answer choices
    assert [p["documents"] for p in work.plan] == [2, 2] and work.prompt_tokens > 0
    settings = AgentSettings()
    with Store(store_path) as store:
        before, loads = remaining_work(store, work.plan)
        assert loads == 2 and before > 0
        spec = SweepSpec(
            [str(gpt2_a)], [TASK], data_dir=str(data_dir), limit=2,
            options=BackendOptions(device="cpu"),
        )  # fmt: skip
        run_sweep(spec, store)
        after, loads_after = remaining_work(store, work.plan)
    assert loads_after == 1 and after == before / 2  # same-shaped models, half the work left
    slow = estimated_seconds(before, loads, 1.0, settings)
    assert estimated_seconds(after, loads_after, 1.0, settings) < slow
