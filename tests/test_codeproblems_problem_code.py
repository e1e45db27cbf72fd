"""What a problem defines for its judge: the prelude, and the names the sample writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalsweep.codeproblems._problem_code import (
    complete_prompt,
    defined_names,
    reference_prelude,
)
from evalsweep.codeproblems._problems import CodeSample, build_request, load_problems
from evalsweep.errors import DataError
from evalsweep.execution import ExecutionRequest, FunctionTest
from evalsweep.execution._runtime import wire

DATA = Path(__file__).resolve().parent / "data" / "sandbox"


def test_the_sample_writes_the_reference_codes_functions_and_classes() -> None:
    code = "import sys\nclass Node:\n    pass\ndef build(x):\n    return x\nLIMIT = 3\n"
    assert defined_names(code) == ("Node", "build")
    assert defined_names("def (:") == () and defined_names(None) == ()


def test_the_reference_codes_imports_constants_and_definitions_are_the_judges() -> None:
    code = (
        "import sys \nfrom math import gcd as g\nfrom . import x\nMOD = 10 ** 9 + 7\n"
        "R: float = 2.5\nseen = set()\nprint('hi')\na, b = 1, 2\n"
        "def f():\n    import re\nif __name__ == '__main__':\n    f()\n"
    )
    # Assignments that call something run guarded: one that fails leaves its name unbound.
    assert reference_prelude(code) == (
        "import sys\nfrom math import gcd as g\nMOD = 10 ** 9 + 7\nR: float = 2.5\n"
        "try:\n    seen = set()\nexcept Exception:\n    pass\na, b = (1, 2)\n"
        "def f():\n    import re\n"
    )
    assert reference_prelude("d = {}\nd['k'] = 1\nx.y = 2\n") == "d = {}\n"
    assert reference_prelude("print(1)\n") is None
    assert reference_prelude("def (:") is None and reference_prelude(None) is None


@pytest.mark.parametrize("name", ["mbpp-596.jsonl", "sanitized-mbpp-596.json"])
def test_mbpp_596_gets_sys_from_its_reference_solution(name: str) -> None:
    problem = load_problems(DATA / name)["MBPP/596"]
    assert (
        problem.prelude
        == "import sys\ndef tuple_size(tuple_list):\n    return sys.getsizeof(tuple_list)\n"
    )
    assert problem.functions == ("tuple_size",)
    request = build_request(CodeSample(0, "MBPP/596", "x = 1\n", True, {}), problem)
    assert request.test is not None and request.test.prelude == problem.prelude
    assert request.test.sample_names == ("tuple_size",)


@pytest.mark.parametrize("code", [None, "", "def (:", "import sys\nX = 1\n"])
def test_an_mbpp_problem_without_a_reference_definition_is_refused(
    tmp_path: Path, code: str | None
) -> None:
    row = json.loads((DATA / "mbpp-596.jsonl").read_text())
    row["code"] = code
    path = tmp_path / "mbpp.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError) as raised:
        load_problems(path)
    message = str(raised.value)
    assert f"{path}:1:" in message and "MBPP/596" in message and "\n" not in message


def _cut(tmp_path: Path, reference: bool) -> Path:
    row = json.loads((DATA / "humaneval-32-50.jsonl").read_text().splitlines()[0])
    head, _, _ = row["prompt"].partition("def find_zero(xs: list):\n")
    row["prompt"] = head + "def find_zero(xs: list):\n"
    if not reference:
        row.pop("canonical_solution")
    path = tmp_path / "cut.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


def test_a_prompt_cut_before_its_docstring_is_completed_with_the_reference(
    tmp_path: Path,
) -> None:
    problem = load_problems(_cut(tmp_path, True))["HumanEval/32"]
    assert problem.prelude is not None
    assert problem.prelude == problem.prompt + (problem.canonical_solution or "")
    assert "def poly(" in problem.prelude


def test_without_a_reference_the_prompt_gets_a_pass_body(tmp_path: Path) -> None:
    problem = load_problems(_cut(tmp_path, False))["HumanEval/32"]
    assert problem.prelude == problem.prompt + "    pass\n"


def test_a_compiling_prompt_is_its_own_prelude() -> None:
    problems = load_problems(DATA / "humaneval-32-50.jsonl")
    assert all(problem.prelude == problem.prompt for problem in problems.values())


@pytest.mark.parametrize(
    ("prompt", "ends"),
    [
        ("def f(x):\n", "def f(x):\n    pass\n"),
        ("class A:\n    def f(self):\n", "        pass\n"),
        ("def f(x):", "def f(x):\n    pass\n"),
    ],
)
def test_pass_bodies_take_the_indentation_the_block_needs(prompt: str, ends: str) -> None:
    completed = complete_prompt(prompt, None)
    assert completed is not None and completed.endswith(ends)


def test_a_prompt_no_body_can_complete_is_none() -> None:
    assert complete_prompt("def f(:\n", "    return 1\n") is None


def test_a_reference_body_that_does_not_compile_falls_back_to_pass() -> None:
    assert complete_prompt("def f(x):\n", "  return (\n") == "def f(x):\n    pass\n"


def test_requests_carry_the_prelude_and_names_unchanged() -> None:
    test = FunctionTest("def check(c):\n    pass\n", "f", "import re\n", sample_names=("g",))
    assert ExecutionRequest("", test=test).test == test


# -- decoding stays linear ------------------------------------------------------------------

M = (1 << 61) - 1


@pytest.mark.parametrize(
    "payload",
    [
        {"~": "s", "v": [k * M for k in range(100)]},
        {"~": "f", "v": [k * M for k in range(100)]},
        {"~": "s", "v": [{"~": "t", "v": [k * M, 0]} for k in range(100)]},
        {"~": "d", "v": [x for k in range(100) for x in (k * M, 1)]},
    ],
)
def test_values_whose_items_share_a_hash_are_refused(payload: object) -> None:
    with pytest.raises(wire.ProtocolError, match="share one hash value"):
        wire.load_json(wire.dump_json({"t": "ok", "v": payload}))


def test_honest_sets_and_dicts_with_a_few_equal_hashes_are_rebuilt() -> None:
    # hash(-1) == hash(-2) in CPython; a few collisions are normal.
    values = {-1, -2, *range(100)}
    frame = wire.dump_json({"t": "ok", "v": wire.encode(values, wire.not_plain)})
    assert wire.load_json(frame)["v"] == values
    keyed = {(-1, 0): 1, (-2, 0): 2, **{(k, k): k for k in range(50)}}
    frame = wire.dump_json({"t": "ok", "v": wire.encode(keyed, wire.not_plain)})
    assert wire.load_json(frame)["v"] == keyed
