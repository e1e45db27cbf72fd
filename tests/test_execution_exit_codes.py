"""The sandbox's exit statuses and setup-failure line are defined once (``exit_codes.py``) and the
C sample loop is built from that definition: the built extension agrees, and no loop, Python or
C, writes the values by hand."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from evalsweep.execution._runtime import exit_codes

RUNTIME = Path(exit_codes.__file__).parent
NAMES = exit_codes.C_MACROS


def test_the_built_c_loop_carries_the_values_defined_in_exit_codes() -> None:
    try:
        from evalsweep.execution._runtime import _sampleloop  # type: ignore[attr-defined]
    except ImportError:
        pytest.skip("the C sample loop is not built (needs a C compiler at install)")
    for name in NAMES:
        assert getattr(_sampleloop, name) == getattr(exit_codes, name), name


def test_the_c_loop_writes_no_status_or_setup_line_by_hand() -> None:
    source = (RUNTIME / "_sampleloop.c").read_text()
    for argument in re.findall(r"\b_exit\(([^)]*)\)", source):
        assert argument == "0" or argument in {f"EVALSWEEP_{n}" for n in NAMES}, argument
    assert "sandbox setup failed" not in source


def test_no_python_module_of_the_sandbox_writes_the_values_by_hand() -> None:
    package = RUNTIME.parent
    for path in sorted(package.rglob("*.py")):
        if path == RUNTIME / "exit_codes.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "_exit":
                for argument in node.args:
                    if isinstance(argument, ast.Constant):
                        assert argument.value in (0, 1), f"{path.name}:{node.lineno}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert "sandbox setup failed" not in node.value, f"{path.name}:{node.lineno}"
            if isinstance(node, ast.Compare) and any(
                isinstance(c, ast.Constant) and c.value == exit_codes.SETUP_FAILED
                for c in node.comparators
            ):
                raise AssertionError(f"{path.name}:{node.lineno} compares with a literal status")
