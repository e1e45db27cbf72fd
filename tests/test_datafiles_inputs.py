"""Every malformed problems or samples file is one line naming the file and line; nothing runs.

The cases are hostile files of every kind the one reader (``evalsweep.datafiles``) refuses:
JSON nested 200,000 deep, integers past Python's int-str limit, NUL and other non-printing
characters in a task_id, invalid UTF-8, values that are not objects, wrong field types, missing
fields, duplicate task_ids and keys, empty files, paths that are a directory, a FIFO, a device or
a symlink loop, and lines past the size cap. Each goes through ``evaluate_samples_file`` (with a
service that must never start), several through the real CLI in-process, and the nastiest through
a real ``evalsweep code-eval`` subprocess for its exit status and stderr.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalsweep.cli import main
from evalsweep.codeeval import evaluate_samples_file
from evalsweep.datafiles import MAX_DEPTH, MAX_INT_DIGITS, MAX_LINE_BYTES, read_records
from evalsweep.errors import DataError
from evalsweep.execution import ExecutionService

PROBLEM = {
    "task_id": "T/0",
    "prompt": "def inc(x):\n",
    "entry_point": "inc",
    "canonical_solution": "    return x + 1\n",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n",
}
MBPP_ROW = {
    "task_id": 7,
    "text": "Add one.",
    "code": "def inc(x):\n    return x + 1\n",
    "test_list": ["assert inc(1) == 2", "assert inc(2) == 3", "assert inc(0) == 1"],
    "test_setup_code": "",
}
GOOD_SAMPLE = {"task_id": "T/0", "completion": "    return x + 1\n"}


def _line(value: object) -> str:
    return json.dumps(value)


def _write(path: Path, text: str | bytes) -> Path:
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _deep(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


# (name, text of line 2 of a samples file, what the message says). Line 1 is a good sample.
BAD_SAMPLE_LINES: list[tuple[str, str | bytes, str]] = [
    ("deep-array", _deep(200_000), f"nested deeper than {MAX_DEPTH} levels"),
    ("deep-object", '{"a":' * 200_000 + "1" + "}" * 200_000, "nested deeper than"),
    ("deep-inside-sample", _line(GOOD_SAMPLE)[:-1] + ', "meta": ' + _deep(70) + "}", "nested"),
    ("deep-mixed", '{"task_id": ' + "[{" * 100 + '"x": 1' + "}]" * 100 + "}", "nested deeper"),
    ("big-int", '{"task_id": "T/0", "completion": "", "n": ' + "9" * 5000 + "}", "4300 digits"),
    ("big-negative-int", '{"n": -' + "1" * (MAX_INT_DIGITS + 1) + "}", "more than 4300 digits"),
    ("big-int-task-id", '{"task_id": ' + "7" * 4301 + ', "completion": ""}', "4300 digits"),
    ("nul-task-id", _line({"task_id": "T/0\x00", "completion": ""}), "printable characters"),
    ("newline-task-id", _line({"task_id": "T/0\nX", "completion": ""}), "printable"),
    ("escape-task-id", _line({"task_id": "T/\x1b[31m0", "completion": ""}), "printable"),
    ("bidi-task-id", _line({"task_id": "T/\u202e0", "completion": ""}), "printable"),
    ("empty-task-id", _line({"task_id": "", "completion": ""}), "printable"),
    ("long-task-id", _line({"task_id": "T" * 1001, "completion": ""}), "1 to 1000"),
    # Lone surrogates elsewhere in a samples file are judged (test_cli_code_eval), not refused.
    ("surrogate-task-id", '{"task_id": "T/\\ud800", "completion": ""}', "printable"),
    ("invalid-utf8", b'{"task_id": "T/0", "completion": "\xff\xfe"}', "not valid UTF-8"),
    ("overlong-utf8", b'{"task_id": "T/0", "completion": "\xc0\xaf"}', "not valid UTF-8"),
    ("array", "[1, 2]", "expected a JSON object, found an array"),
    ("string", '"T/0"', "expected a JSON object, found a string"),
    ("number", "3", "expected a JSON object, found a number"),
    ("null", "null", "expected a JSON object, found null"),
    ("not-json", "{task_id: T/0}", "not valid JSON"),
    ("cut-short", '{"task_id": "T/0", "completion": ', "not valid JSON"),
    ("trailing-data", _line(GOOD_SAMPLE) + " {}", "extra data"),
    ("nan", '{"task_id": "T/0", "completion": "", "score": NaN}', "NaN is not a JSON value"),
    ("infinity", '{"task_id": "T/0", "completion": "", "s": -Infinity}', "-Infinity is not"),
    ("huge-float", '{"task_id": "T/0", "completion": "", "s": 1e999}', "too large for a float"),
    ("bom", "\ufeff" + _line(GOOD_SAMPLE), "not valid JSON"),
    ("control-char-in-string", '{"task_id": "T/0", "completion": "a\tb"}', "not valid JSON"),
    ("duplicate-key", '{"task_id": "T/0", "task_id": "T/1", "completion": ""}', "appears twice"),
    ("long-duplicate-key", '{"' + "k" * 100_000 + '": 1, "' + "k" * 100_000 + '": 2}', "twice"),
    ("long-unknown-task", _line({"task_id": "T/" + "9" * 900, "completion": ""}), "unknown"),
    ("task-id-number", _line({"task_id": 0, "completion": ""}), "'task_id' is missing or not"),
    ("task-id-null", _line({"task_id": None, "completion": ""}), "'task_id' is missing or not"),
    ("completion-number", _line({"task_id": "T/0", "completion": 3}), "'completion' is missing"),
    ("completion-list", _line({"task_id": "T/0", "completion": ["x"]}), "'completion' is missing"),
    ("solution-null", _line({"task_id": "T/0", "solution": None}), "'solution' is missing"),
    ("no-task-id", _line({"completion": ""}), "'task_id' is missing"),
    ("no-code", _line({"task_id": "T/0"}), "needs exactly one of"),
    ("both-codes", _line({"task_id": "T/0", "completion": "", "solution": ""}), "exactly one"),
    ("unknown-task", _line({"task_id": "T/9", "completion": ""}), "unknown task_id 'T/9'"),
]


def _samples_file(tmp_path: Path, bad: str | bytes) -> Path:
    good = (_line(GOOD_SAMPLE) + "\n").encode()
    tail = bad if isinstance(bad, bytes) else bad.encode("utf-8", "surrogatepass")
    return _write(tmp_path / "samples.jsonl", good + tail + b"\n")


def _problems_file(tmp_path: Path, rows: list[str], name: str = "problems.jsonl") -> Path:
    return _write(tmp_path / name, "".join(row + "\n" for row in rows))


def _assert_refused(
    tmp_path: Path,
    problems: Path,
    samples: Path,
    pattern: str,
    *,
    before: set[str] | None = None,
) -> str:
    """evaluate_samples_file refuses the files with one line matching ``pattern``; no trace."""
    before = before if before is not None else set(os.listdir(tmp_path))
    never_started = ExecutionService(workers=1)
    with pytest.raises(DataError) as raised:
        evaluate_samples_file(problems, samples, ks=(1,), service=never_started)
    message = str(raised.value)
    assert "\n" not in message and "\r" not in message, message
    assert len(message) < 2 * len(str(tmp_path)) + 400, message  # a line, not a dump
    assert re.search(pattern, message), message
    assert not never_started._started
    assert set(os.listdir(tmp_path)) == before  # nothing written, not even a .partial
    return message


@pytest.mark.parametrize(
    ("bad", "says"), [case[1:] for case in BAD_SAMPLE_LINES], ids=[c[0] for c in BAD_SAMPLE_LINES]
)
def test_a_malformed_samples_line_is_one_line_naming_file_and_line(
    tmp_path: Path, bad: str | bytes, says: str
) -> None:
    problems = _problems_file(tmp_path, [_line(PROBLEM)])
    samples = _samples_file(tmp_path, bad)
    _assert_refused(
        tmp_path, problems, samples, re.escape(f"{samples}:2: ") + ".*" + re.escape(says)
    )


def test_a_line_longer_than_the_cap_is_refused_without_being_parsed(tmp_path: Path) -> None:
    problems = _problems_file(tmp_path, [_line(PROBLEM)])
    huge = '{"task_id": "T/0", "completion": "' + "#" * MAX_LINE_BYTES + '"}'
    samples = _samples_file(tmp_path, huge)
    _assert_refused(tmp_path, problems, samples, re.escape(f"{samples}:2: line longer than 16 MiB"))


def test_a_gzip_samples_file_cut_short_is_refused(tmp_path: Path) -> None:
    problems = _problems_file(tmp_path, [_line(PROBLEM)])
    whole = gzip.compress(("".join(_line(GOOD_SAMPLE) + "\n" for _ in range(50))).encode())
    samples = _write(tmp_path / "samples.jsonl.gz", whole[: len(whole) // 2])
    _assert_refused(tmp_path, problems, samples, re.escape(f"{samples}: not whole gzip data"))
    good = _write(tmp_path / "whole.jsonl.gz", whole)
    assert len(read_records(good).records) == 50


# (name, problem lines, message); the samples file holds one good sample of T/0 (or MBPP/7).
BAD_PROBLEM_FILES: list[tuple[str, list[str], str]] = [
    ("duplicate", [_line(PROBLEM), _line(PROBLEM)], ":2: duplicate task_id 'T/0'"),
    ("duplicate-mbpp", [_line(MBPP_ROW), _line(MBPP_ROW)], ":2: duplicate task_id 'MBPP/7'"),
    (
        "duplicate-across-formats",
        [_line(MBPP_ROW), _line({**PROBLEM, "task_id": "MBPP/7"})],
        ":2: duplicate task_id 'MBPP/7'",
    ),
    ("mbpp-id-bool", [_line({**MBPP_ROW, "task_id": True})], ":1: MBPP field 'task_id'"),
    ("mbpp-id-float", [_line({**MBPP_ROW, "task_id": 7.0})], ":1: MBPP field 'task_id'"),
    ("mbpp-id-string", [_line({**MBPP_ROW, "task_id": "7"})], ":1: MBPP field 'task_id'"),
    ("mbpp-id-negative", [_line({**MBPP_ROW, "task_id": -7})], ":1: MBPP field 'task_id'"),
    ("mbpp-id-huge", ['{"task_id": ' + "7" * 5000 + ', "test_list": []}'], ":1: .*4300 digits"),
    ("tests-not-list", [_line({**MBPP_ROW, "test_list": "assert 1"})], ":1: field 'test_list'"),
    ("tests-empty", [_line({**MBPP_ROW, "test_list": []})], ":1: field 'test_list' is empty"),
    ("tests-number", [_line({**MBPP_ROW, "test_list": ["assert 1", 2]})], ":1: field 'test_l"),
    ("tests-nul", [_line({**MBPP_ROW, "test_list": ["assert 1\x00"]})], ":1: .*NUL character"),
    ("setup-number", [_line({**MBPP_ROW, "test_setup_code": 3})], ":1: field 'test_setup_code'"),
    ("code-number", [_line({**MBPP_ROW, "code": 3})], ":1: field 'code' is missing or not"),
    ("prompt-nul", [_line({**PROBLEM, "prompt": "def inc(x):\x00\n"})], ":1: field 'prompt' hol"),
    ("test-nul", [_line({**PROBLEM, "test": "def check(c):\x00 pass\n"})], ":1: field 'test' hol"),
    ("prompt-list", [_line({**PROBLEM, "prompt": ["def inc(x):"]})], ":1: field 'prompt' is"),
    ("solution-number", [_line({**PROBLEM, "canonical_solution": 1})], ":1: field 'canonical_"),
    ("no-test", [_line({k: v for k, v in PROBLEM.items() if k != "test"})], ":1: field 'test'"),
    ("entry-not-name", [_line({**PROBLEM, "entry_point": "inc()"})], r":1: entry_point 'inc\(\)'"),
    ("entry-nul", [_line({**PROBLEM, "entry_point": "inc\x00"})], ":1: entry_point 'inc\\\\x00'"),
    ("test-syntax", [_line({**PROBLEM, "test": "def check(:\n"})], ":1: the test of T/0 does not"),
    ("language-list", [_line({**PROBLEM, "language": ["js"]})], ":1: unknown language of type"),
    ("language-unknown", [_line({**PROBLEM, "language": "cobol"})], ":1: unknown language 'cobol'"),
    ("nul-task-id", [_line({**PROBLEM, "task_id": "T/0\x00"})], ":1: field 'task_id' must be"),
    ("deep", [_line(PROBLEM), _deep(200_000, "{", "}")], ":2: .*nested deeper"),
    ("not-object", [_line(PROBLEM), '"T/1"'], ":2: expected a JSON object, found a string"),
]


@pytest.mark.parametrize(
    ("rows", "says"),
    [case[1:] for case in BAD_PROBLEM_FILES],
    ids=[c[0] for c in BAD_PROBLEM_FILES],
)
def test_a_malformed_problems_file_is_one_line_naming_file_and_line(
    tmp_path: Path, rows: list[str], says: str
) -> None:
    problems = _problems_file(tmp_path, rows)
    task = "MBPP/7" if "MBPP" in rows[0] or '"test_list"' in rows[0] else "T/0"
    samples = _write(tmp_path / "samples.jsonl", _line({"task_id": task, "solution": ""}) + "\n")
    _assert_refused(tmp_path, problems, samples, re.escape(str(problems)) + says)


# A sanitized-MBPP-style file: one JSON array, items spread over lines.
ARRAY_ITEMS = [dict(MBPP_ROW, test_imports=[], task_id=i) for i in (1, 2, 3)]


def _array_text(items: list[str]) -> str:
    return "[\n" + ",\n".join("  " + item for item in items) + "\n]\n"


BAD_ARRAY_FILES: list[tuple[str, str, str]] = [
    ("not-array", _line(ARRAY_ITEMS[0]), ":1: expected a JSON array of objects"),
    (
        "item-not-object",
        _array_text([_line(ARRAY_ITEMS[0]), "[1]", _line(ARRAY_ITEMS[2])]),
        r":3 \(item 1\): expected a JSON object, found an array",
    ),
    (
        "deep-item",
        _array_text([_line(ARRAY_ITEMS[0]), _deep(200_000)]),
        r":3: arrays and objects nested deeper than 64",
    ),
    (
        "big-int-item",
        _array_text([_line(ARRAY_ITEMS[0]), '{"task_id": ' + "1" * 4400 + "}"]),
        r":3 \(item 1\): an integer has more than 4300 digits",
    ),
    (
        "duplicate-item",
        _array_text([_line(ARRAY_ITEMS[0]), _line(ARRAY_ITEMS[0])]),
        r":3 \(item 1\): duplicate task_id 'MBPP/1'",
    ),
    (
        "trailing-data",
        _array_text([_line(ARRAY_ITEMS[0])]) + "[]",
        r":4: not valid JSON \(extra data after the array\)",
    ),
    ("missing-comma", "[\n" + _line(ARRAY_ITEMS[0]) + "\n" + _line(ARRAY_ITEMS[1]) + "]", r":3: "),
    ("empty-array", "[ ]\n", r": empty file \(no problems\)"),
    ("empty", "", r": empty file \(no problems\)"),
    ("invalid-utf8", '[\n{"task_id": 1,\n "text": "\udcff"}]', r":3: not valid UTF-8"),
]


@pytest.mark.parametrize(
    ("text", "says"), [case[1:] for case in BAD_ARRAY_FILES], ids=[c[0] for c in BAD_ARRAY_FILES]
)
def test_a_malformed_json_array_of_problems_names_the_line_and_item(
    tmp_path: Path, text: str, says: str
) -> None:
    problems = _write(tmp_path / "problems.json", text.encode("utf-8", "surrogateescape"))
    samples = _write(tmp_path / "samples.jsonl", _line({"task_id": "MBPP/1", "solution": ""}))
    _assert_refused(tmp_path, problems, samples, re.escape(str(problems)) + says)


def test_a_good_json_array_gives_each_item_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "p.json", _array_text([_line(item) for item in ARRAY_ITEMS]))
    records = read_records(path).records
    assert [(r.line, r.item) for r in records] == [(2, 0), (3, 1), (4, 2)]
    assert [r.value["task_id"] for r in records] == [1, 2, 3]


def _plant(kind: str, path: Path, elsewhere: Path) -> None:
    """Put something that is not a data file at ``path``."""
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink-loop":
        path.symlink_to(path.name)
    elif kind == "symlink-cycle":
        path.symlink_to(elsewhere.name)
        elsewhere.symlink_to(path.name)
    elif kind == "dangling-symlink":
        path.symlink_to(elsewhere.name)
    elif kind == "symlink-to-directory":
        elsewhere.mkdir()
        path.symlink_to(elsewhere.name)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    elif kind == "empty":
        path.write_text("")
    elif kind == "blank-lines":
        path.write_text("\n  \n\t\r\n")
    else:
        raise AssertionError(kind)


PLANTED = {
    "directory": r": is a directory, not a data file",
    "fifo": r": is a FIFO \(named pipe\), not a data file",
    "symlink-loop": r": a symlink loop",
    "symlink-cycle": r": a symlink loop",
    "dangling-symlink": r"^data file not found: ",
    "symlink-to-directory": r": is a directory, not a data file",
    "device": r": is a device, not a data file",
    "empty": r": empty file \(no (samples|problems)\)",
    "blank-lines": r": empty file \(no (samples|problems)\)",
}


@pytest.mark.parametrize("which", ["samples", "problems"])
@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_a_path_that_is_not_a_data_file_is_refused_without_blocking(
    tmp_path: Path, kind: str, which: str
) -> None:
    problems = _problems_file(tmp_path, [_line(PROBLEM)])
    samples = _write(tmp_path / "samples.jsonl", _line(GOOD_SAMPLE) + "\n")
    target = tmp_path / f"planted-{which}.jsonl"
    _plant(kind, target, tmp_path / "elsewhere")
    before = set(os.listdir(tmp_path))
    args = (target, samples) if which == "problems" else (problems, target)
    message = _assert_refused(tmp_path, *args, PLANTED[kind], before=before)
    assert str(target) in message


# --- the real CLI --------------------------------------------------------------------------------

CLI_CASES = ["deep-array", "big-int", "nul-task-id", "invalid-utf8", "array", "duplicate-key"]


def _cli(*args: object) -> tuple[int, str, str, BaseException | None]:
    result = CliRunner(mix_stderr=False).invoke(main, ["code-eval", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr, result.exception


def _assert_one_line_exit_2(exit_code: int, stderr: str, error: BaseException | None) -> str:
    assert exit_code == 2, stderr
    assert isinstance(error, SystemExit), error  # not an exception the CLI let through
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("evalsweep: error: ") and "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize("case", CLI_CASES)
def test_the_cli_refuses_a_malformed_samples_file_in_one_line(tmp_path: Path, case: str) -> None:
    bad, says = next((c[1], c[2]) for c in BAD_SAMPLE_LINES if c[0] == case)
    problems = _problems_file(tmp_path, [_line(PROBLEM)])
    samples = _samples_file(tmp_path, bad)
    results = tmp_path / "out" / "results.jsonl"
    exit_code, _, stderr, error = _cli(
        "--problems", problems, "--samples", samples, "--results", results, "--unsafe-no-sandbox"
    )
    line = _assert_one_line_exit_2(exit_code, stderr, error)
    assert f"{samples}:2: " in line and says in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["directory", "fifo", "symlink-loop", "dangling-symlink"])
def test_the_cli_refuses_a_problems_path_that_is_not_a_file_in_one_line(
    tmp_path: Path, kind: str
) -> None:
    problems = tmp_path / "problems.jsonl"
    _plant(kind, problems, tmp_path / "elsewhere")
    samples = _write(tmp_path / "samples.jsonl", _line(GOOD_SAMPLE) + "\n")
    exit_code, _, stderr, error = _cli("--problems", problems, "--samples", samples)
    line = _assert_one_line_exit_2(exit_code, stderr, error)
    assert str(problems) in line
    assert not Path(f"{samples}_results.jsonl").exists()


def test_a_path_with_a_newline_in_its_name_stays_one_line(tmp_path: Path) -> None:
    problems = _problems_file(tmp_path, [_line(PROBLEM), "[]"], name="two\nlines.jsonl")
    samples = _write(tmp_path / "samples.jsonl", _line(GOOD_SAMPLE) + "\n")
    exit_code, _, stderr, error = _cli("--problems", problems, "--samples", samples)
    line = _assert_one_line_exit_2(exit_code, stderr, error)
    assert "two\\nlines.jsonl" in line and ":2: expected a JSON object" in line


SUBPROCESS_CASES: list[tuple[str, Callable[[Path], Path]]] = [
    ("deep", lambda d: _samples_file(d, '{"a":' * 200_000 + "1" + "}" * 200_000)),
    ("big-int", lambda d: _samples_file(d, '{"n": ' + "1" * 100_000 + "}")),
    ("nul", lambda d: _samples_file(d, _line({"task_id": "T/\x000", "completion": ""}))),
]


@pytest.mark.parametrize(
    "make", [c[1] for c in SUBPROCESS_CASES], ids=[c[0] for c in SUBPROCESS_CASES]
)
def test_a_real_code_eval_process_exits_2_with_one_line_and_no_traceback(
    tmp_path: Path, cli_env: dict[str, str], make: Callable[[Path], Path]
) -> None:
    problems = _problems_file(tmp_path, [_line(PROBLEM)])
    samples = make(tmp_path)
    results = tmp_path / "results.jsonl"
    ran = subprocess.run(
        [sys.executable, "-m", "evalsweep", "code-eval", "--problems", str(problems),
         "--samples", str(samples), "--results", str(results)],
        env=cli_env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 2, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{samples}:2: " in lines[0], ran.stderr
    assert "Traceback" not in ran.stderr and ran.stdout == ""
    assert sorted(os.listdir(tmp_path)) == sorted(["problems.jsonl", samples.name])


def test_a_fifo_given_to_a_real_process_is_refused_not_waited_on(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    problems = _problems_file(tmp_path, [_line(PROBLEM)])
    samples = tmp_path / "samples.jsonl"
    os.mkfifo(samples)  # nobody ever writes to it: a reader that opened it would wait forever
    ran = subprocess.run(
        [sys.executable, "-m", "evalsweep", "code-eval", "--problems", str(problems),
         "--samples", str(samples)],
        env=cli_env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 2 and "Traceback" not in ran.stderr
    assert (
        ran.stderr.strip()
        == f"evalsweep: error: {samples}: is a FIFO (named pipe), not a data file"
    )


# --- the code tasks' own data readers ------------------------------------------------------------


def _mbpp_rows() -> list[dict[str, object]]:
    return [dict(MBPP_ROW, task_id=i) for i in (2, 3, 4, 11)]


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        ({"task_id": 11.5}, ":4: MBPP field 'task_id'"),
        ({"task_id": "11"}, ":4: MBPP field 'task_id'"),
        ({"test_list": ["assert inc(1) == 2"]}, ":4: field 'test_list' must hold at least 3"),
        ({"text": None}, ":4: field 'text' is missing or not a string"),
        ({"code": ["def inc(x): ..."]}, ":4: field 'code' is missing or not a string"),
        ({"task_id": 3}, ":4: duplicate task_id 'MBPP/3'"),
    ],
)
def test_the_mbpp_task_names_the_line_of_a_malformed_row(
    tmp_path: Path, edit: dict[str, object], says: str
) -> None:
    from evalsweep.tasks._base import DataSource
    from evalsweep.tasks.mbpp import MBPP

    rows = _mbpp_rows()
    rows[3].update(edit)
    data = tmp_path / "mbpp" / "mbpp.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(DataError) as raised:
        MBPP().load(DataSource(str(tmp_path)), None)
    assert str(raised.value).startswith(str(data) + says), raised.value
    rows[3] = dict(MBPP_ROW, task_id=11)
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert [doc.key for doc in MBPP().load(DataSource(str(tmp_path)), None).documents] == [
        "MBPP/11"
    ]


@pytest.mark.parametrize("task", ["humaneval", "gsm8k"])
def test_the_tasks_read_their_data_by_the_same_strict_rules(tmp_path: Path, task: str) -> None:
    from evalsweep.tasks import get_task
    from evalsweep.tasks._base import DataSource

    if task == "humaneval":
        data = tmp_path / "humaneval" / "HumanEval.jsonl.gz"
        data.parent.mkdir()
        data.write_bytes(gzip.compress((_line(PROBLEM) + "\n" + _deep(200_000) + "\n").encode()))
    else:
        data = tmp_path / "gsm8k" / "test.jsonl"
        data.parent.mkdir()
        good = _line({"question": "1+1?", "answer": "#### 2"})
        data.write_text(good + "\n" + '{"question": "x", "answer": ' + "9" * 5000 + "}\n")
        (tmp_path / "gsm8k" / "train.jsonl").write_text(good + "\n")
    with pytest.raises(DataError) as raised:
        get_task(task).load(DataSource(str(tmp_path)), None)
    message = str(raised.value)
    assert message.startswith(f"{data}:2: ") and "\n" not in message


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"results": ' + _deep(200_000) + "}", ":1: arrays and objects nested deeper than 64"),
        ('{\n"results": {},\n"n": ' + "1" * 5000 + "}", ": an integer has more than 4300"),
        ('{\n"results": {},\n"n": [1,\n2,,]}', ":4: not valid JSON"),
        ('{"results": {}, "results": {}}', ": key 'results' appears twice"),
        ("[]", ": expected a JSON object, found an array"),
    ],
)
def test_an_lm_eval_results_file_is_read_by_the_same_rules(
    tmp_path: Path, store_path: Path, text: str, says: str
) -> None:
    from evalsweep.importers import import_lm_eval
    from evalsweep.store import Store

    folder = tmp_path / "run"
    folder.mkdir()
    results = _write(folder / "results_2024-01-01.json", text)
    with Store(store_path) as store, pytest.raises(DataError) as raised:
        import_lm_eval(folder, store)
    assert str(raised.value).startswith(str(results) + says), raised.value
