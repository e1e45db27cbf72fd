"""What importing a part of evalsweep costs: each process imports only what it runs.

``evalsweep.compute`` loads its modules on first use, so a worker judging
code-eval slices (``evalsweep code-eval-slice``, started once per slice) does
not import the sweep engine, the tasks, statistics, NumPy or SciPy; and the
package's public names, the imports type checkers read and ``__all__`` name the
same things.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import evalsweep.compute as compute

HEAVY = ("numpy", "scipy", "torch", "transformers", "ray", "evalsweep.engine",
         "evalsweep.stats", "evalsweep.tasks", "evalsweep.store", "evalsweep.models")  # fmt: skip


def _type_checking_imports(path: Path) -> dict[str, str]:
    """Name -> module of the imports under ``if TYPE_CHECKING:`` in a module's source."""
    found: dict[str, str] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.dump(statement)
                for alias in statement.names:
                    found[alias.asname or alias.name] = str(statement.module)
    return found


def test_public_names_type_checking_imports_and_all_agree() -> None:
    typed = _type_checking_imports(Path(compute.__file__))
    assert typed == compute._EXPORTS
    assert sorted(compute.__all__) == sorted(compute._EXPORTS)
    assert len(compute.__all__) == len(set(compute.__all__))


def test_every_public_name_is_its_modules_object() -> None:
    for name, module in compute._EXPORTS.items():
        assert getattr(compute, name) is getattr(importlib.import_module(module), name), name
    assert set(compute.__all__) <= set(dir(compute))


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        compute.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("evalsweep.compute.no_such_name resolved")
    assert not hasattr(compute, "_base_")


def test_the_slice_worker_imports_nothing_it_does_not_run() -> None:
    script = (
        "import json, sys\n"
        "import evalsweep.cli._code, evalsweep.codeeval._slice_worker, evalsweep.execution\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == []


def test_importing_the_package_then_a_target_still_works_in_a_fresh_interpreter() -> None:
    script = (
        "from evalsweep.compute import LocalTarget, get_target\n"
        "from evalsweep.codeeval import code_eval\n"
        "import evalsweep.compute as c\n"
        "assert c.LocalTarget is LocalTarget and callable(code_eval) and callable(get_target)\n"
        "print(type(get_target('local', {})).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "LocalTarget"
