"""The Ray target on a local Ray cluster started by the test (two CPUs, two workers).

A small sweep is cut into one Ray task per (checkpoint, task, shard); its rows
come back into the local store and must equal, question by question, those of
the same sweep run locally. Ray starts slowly on two cores, so the cluster is
started once for the module and the tests are few.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from evalsweep.compute import RayTarget, SweepJob, run_on_target
from evalsweep.engine import SilentProgress, SweepSpec, run_sweep
from evalsweep.errors import TargetError
from evalsweep.report import document_json, parse_document
from evalsweep.store import Store

TASKS = ["mmlu_abstract_algebra", "gsm8k"]


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def _rows(store: Store) -> dict[tuple[str, str, str], tuple[object, ...]]:
    """Per-question results; raw log-probabilities are compared separately (see below)."""
    return {
        (r.checkpoint, r.task, r.doc_key): (
            r.backend,
            r.settings,
            r.request_hash,
            r.prediction,
            r.correct,
            r.metrics,
            r.response,
        )  # fmt: skip
        for r in store.records()
    }


def _logprobs(store: Store) -> dict[tuple[str, str, str], list[float]]:
    return {
        (r.checkpoint, r.task, r.doc_key): [x[0] for x in r.responses]
        for r in store.records()
        if r.responses and isinstance(r.responses[0], list)
    }


@pytest.mark.slow
def test_sweep_split_over_two_workers_equals_local_run(
    ray_cluster: None, tmp_path: Path, gpt2_a: Path, gpt2_b: Path, data_dir: Path
) -> None:
    spec = SweepSpec([str(gpt2_a), str(gpt2_b)], TASKS, str(data_dir), limit=2)
    with Store(tmp_path / "local.sqlite") as local:
        expected = run_sweep(spec, local)
        local_rows, local_logprobs = _rows(local), _logprobs(local)
    target = RayTarget(name="cluster", shards=2, hourly_rate=1.0)
    with Store(tmp_path / "ray.sqlite") as store:
        document, result = run_on_target(target, SweepJob(spec), store, SilentProgress())
        assert _rows(store) == local_rows and local_rows
        # A shard is batched differently from the whole task and a Ray worker uses one
        # thread, so log-probabilities may differ in the last bits, never more.
        ray_logprobs = _logprobs(store)
        assert ray_logprobs.keys() == local_logprobs.keys() and ray_logprobs
        for key, values in ray_logprobs.items():
            assert values == pytest.approx(local_logprobs[key], rel=1e-5, abs=1e-5)
        submits = store.audit_entries(kind="submit", target="cluster")
        again = target.run(SweepJob(spec), store, SilentProgress())
    # One Ray task per (checkpoint, task, shard): 2 x 2 x 2, each audited from submission to result.
    assert document.compute is not None
    assert document.compute["ray_tasks"] == 8 and len(submits) == 8
    assert all(e["exit_code"] == 0 and e["output_bytes"] > 0 for e in submits)
    assert {e["text"].split("(")[0] for e in submits} == {"ray task evaluate_shard"}
    # Largest shards are submitted first, by the target's own estimate of a shard's work.
    from evalsweep.compute._ray import _split, _work
    from evalsweep.engine import plan_sweep

    _, runs = plan_sweep(spec)
    planned = [
        (_work(run, shard), run.task.name)
        for _checkpoint in spec.checkpoints
        for run in runs.values()
        for shard in _split([p.document.key for p in run.prepared], 2)
    ]
    planned.sort(key=lambda item: -item[0])
    assert [e["text"].split(", ")[1] for e in submits] == [repr(name) for _, name in planned]
    assert planned[0][0] > planned[-1][0]
    # The same per-question scores and aggregates as the local run.
    for got, want in zip(result.results, expected.results, strict=True):
        assert got.checkpoint.identity == want.checkpoint.identity and got.task == want.task
        assert [s.metrics for s in got.scored] == [s.metrics for s in want.scored]
        assert [a.value for a in got.aggregates] == [a.value for a in want.aggregates]
    assert document.compute["spend"]["hourly_rate"] == 1.0
    assert (
        parse_document(document_json(document), "the document") == document
    )  # it travels as it is
    # Everything is stored now: a second run submits nothing.
    assert again.compute["ray_tasks"] == 0


@pytest.mark.slow
def test_failing_worker_keeps_finished_work_and_resumes(
    ray_cluster: None, tmp_path: Path, gpt2_a: Path, data_dir: Path
) -> None:
    # A checkpoint that resolves (config and weights are there) but cannot load on a worker.
    broken = tmp_path / "broken"
    shutil.copytree(gpt2_a, broken)
    config = json.loads((broken / "config.json").read_text())
    config["n_embd"] = config["n_embd"] * 2
    (broken / "config.json").write_text(json.dumps(config))
    spec = SweepSpec([str(gpt2_a), str(broken)], ["mmlu_abstract_algebra"], str(data_dir), limit=2)
    target = RayTarget(name="cluster")
    with Store(tmp_path / "ray.sqlite") as store:
        with pytest.raises(TargetError) as raised:
            target.run(SweepJob(spec), store, SilentProgress())
        message = str(raised.value)
        assert "1 of 2 Ray tasks failed" in message and "resume" in message
        assert "\n" not in message
        kept = list(store.records())
        # The good checkpoint's rows are stored; the same sweep without the broken one
        # resumes from them without submitting anything.
        assert len(kept) == 2
        fine = SweepSpec([str(gpt2_a)], ["mmlu_abstract_algebra"], str(data_dir), limit=2)
        resumed = target.run(SweepJob(fine), store, SilentProgress())
        assert resumed.compute["ray_tasks"] == 0
        failed = [e for e in store.audit_entries(kind="submit") if e["exit_code"] == 1]
        assert len(failed) == 1 and "broken" in failed[0]["text"]
