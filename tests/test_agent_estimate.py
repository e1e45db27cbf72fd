"""A quote's work and time: exact request counts, model size, work already stored."""

from __future__ import annotations

from pathlib import Path

import pytest

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


def _finished(store: Store, target: str, seconds: float, work: float, loads: int = 1) -> None:
    """A finished job in the store, as the supervisor leaves it: its time and its work."""
    import secrets as random_ids

    from evalsweep.agent._schema import ensure_agent_tables

    ensure_agent_tables(store)
    with store.connection:
        store.connection.execute(
            "INSERT INTO agent_jobs (job_id, quote_id, connection, target, params, plan, argv, "
            "out_dir, log_path, status, started, ended, deadline, work, loads) VALUES "
            "(?, 'q', 'c', ?, '{}', '[]', '', '', '', 'finished', ?, ?, ?, ?, ?)",
            ("j-" + random_ids.token_hex(5), target, 1000.0, 1000.0 + seconds, 1e12, work, loads),
        )


def test_throughput_is_not_skewed_by_short_jobs_and_is_robust_and_held(store_path: Path) -> None:
    from evalsweep.agent._estimate import throughput

    settings = AgentSettings.from_config({"throughput": {"cpu": 60.0}})
    with Store(store_path) as store:
        # Three tiny jobs: 25 s each, mostly start-up. Learning from them gave 25x estimates.
        for _ in range(3):
            _finished(store, "local", 25.0, work=2_000.0)
        assert throughput(store, settings, "local", "cpu") == (
            60.0, "[throughput] cpu in the configuration"
        )  # fmt: skip
        # Long jobs at about 120 tokens/s, and one odd one: the median holds.
        for rate in (110.0, 120.0, 130.0, 5_000.0):
            _finished(store, "local", 630.0, work=rate * 600.0)
        value, source = throughput(store, settings, "local", "cpu")
        assert value == pytest.approx(125.0) and source.startswith("measured by the last 4 jobs")
        # Measurements far from the configured figure are held within 10x of it.
        for _ in range(5):
            _finished(store, "gpu-box", 630.0, work=1e9 * 600.0)
        value, source = throughput(store, settings, "gpu-box", "cpu")
        assert value == 600.0 and "held within 10x of 60" in source
