"""What imports what in evalsweep, and what importing a part of it costs.

The layering of ``docs/architecture.md``, read from the source with ``ast`` (every
``import``, relative or absolute, at the top of a module or inside a function, under
``TYPE_CHECKING`` or not, ``importlib.import_module`` of a written name and the
``"evalsweep.x:Name"`` references of the plugin registries): nothing on the evaluation
line imports ``compute``, ``agent`` or ``cli``; ``compute`` never imports ``agent``;
only the command line imports the MCP server; the ground floor (``secrets``,
``config``, ``text``...) imports no package; and what runs when a module is imported
makes no cycle between packages,
through any import.

``evalsweep.compute`` loads its modules on first use, so a worker judging
code-eval slices (``evalsweep code-eval-slice``, started once per slice) does
not import the sweep engine, the tasks, statistics, NumPy or SciPy; and the
package's public names, the imports type checkers read and ``__all__`` name the
same things.
"""

from __future__ import annotations

import ast
import graphlib
import importlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import evalsweep.compute as compute

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "evalsweep"

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


# -- the layering, read from the source --------------------------------------------------

#: The evaluation line (docs/architecture.md): it knows nothing of where it runs or who
#: drives it.
LINE = ("checkpoints", "requests", "runs", "codeproblems", "tasks", "models", "engine", "store",
        "stats", "comparison", "report", "execution", "importers")  # fmt: skip
#: The packages beside the line and the only parts that may import each.
BESIDE = {"compute": ("agent", "cli", "codeeval"), "agent": ("cli",), "cli": ("__main__",)}
#: Top-level modules everything may use: they import no package of evalsweep.
GROUND = ("_atomic", "_interval", "_numbers", "_records", "config", "datafiles", "dtypes", "errors",
          "jsonl", "plugins", "secrets", "statedir", "text")  # fmt: skip
_REFERENCE = re.compile(r"^(evalsweep(?:\.\w+)+):\w+$")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module's file, relative to the package folder
    line: int
    module: str  # the module imported, absolute
    at_import: bool  # runs when the importing module is imported

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.module}"


def _module_name(root: Path, path: Path) -> tuple[str, list[str]]:
    """A file's module name and the package its relative imports start from."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
        return ".".join(parts), parts
    return ".".join(parts), parts[:-1]


def _resolve(root: Path, module: str, name: str) -> str:
    """``from module import name``: the submodule ``name`` if there is one, else ``module``."""
    candidate = root.parent.joinpath(*f"{module}.{name}".split("."))
    if candidate.is_dir() or candidate.with_suffix(".py").is_file():
        return f"{module}.{name}"
    return module


class _Imports(ast.NodeVisitor):
    def __init__(self, root: Path, path: Path) -> None:
        self.root, self.source = root, str(path.relative_to(root))
        self.package = _module_name(root, path)[1]
        self.found: list[Import] = []
        self.deferred = 0  # inside a function or under TYPE_CHECKING

    def add(self, node: ast.AST, module: str, lazy: bool = False) -> None:
        at_import = not (self.deferred or lazy)
        self.found.append(Import(self.source, getattr(node, "lineno", 0), module, at_import))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.deferred += 1
        self.generic_visit(node)
        self.deferred -= 1

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef  # noqa: N815

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" not in ast.unparse(node.test):
            self.generic_visit(node)
            return
        self.visit(node.test)
        self.deferred += 1
        for statement in node.body:
            self.visit(statement)
        self.deferred -= 1
        for statement in node.orelse:
            self.visit(statement)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(node, alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package[: len(self.package) - node.level + 1]
            module = ".".join([*base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        for alias in node.names:
            self.add(node, _resolve(self.root, module, alias.name))

    def visit_Call(self, node: ast.Call) -> None:
        called = ast.unparse(node.func)
        if called.endswith(("import_module", "__import__")) and node.args:
            first = node.args[0]
            if isinstance(first, ast.JoinedStr) and first.values:
                first = first.values[0]  # f"evalsweep.agent.{name}": its written start
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                self.add(node, first.value.rstrip("."))
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and (found := _REFERENCE.match(node.value)):
            self.add(node, found.group(1), lazy=True)  # a registry loads it on first use


def imports(root: Path = PACKAGE) -> list[Import]:
    """Every import of every module under ``root`` of a module under ``root``."""
    found: list[Import] = []
    for path in sorted(root.rglob("*.py")):
        visitor = _Imports(root, path)
        visitor.visit(ast.parse(path.read_text(), str(path)))
        found += [each for each in visitor.found if each.module.split(".")[0] == root.name]
    return found


def part(root: Path, module_or_source: str) -> str:
    """The package or top-level module of ``root`` that a module (or file) belongs to;
    ``root``'s own name for its ``__init__``."""
    if module_or_source.endswith(".py"):
        pieces = Path(module_or_source).with_suffix("").parts
        return root.name if pieces == ("__init__",) else pieces[0]
    pieces = module_or_source.split(".")
    return pieces[1] if len(pieces) > 1 else root.name


def layering_problems(root: Path = PACKAGE) -> list[str]:
    """Each import that breaks the layering, and each cycle of packages (through any import:
    one inside a function is a dependency all the same)."""
    problems = []
    graph: dict[str, dict[str, Import]] = {}
    for each in imports(root):
        source, target = part(root, each.source), part(root, each.module)
        if source == target:
            continue
        allowed = BESIDE.get(target)
        if source in LINE and target in BESIDE:
            problems.append(f"{each}: the line ({source}) never imports {target}")
        elif allowed is not None and source not in allowed:
            problems.append(f"{each}: only {', '.join(allowed)} may import {target}")
        if source in GROUND and (root / target).is_dir():
            problems.append(f"{each}: the ground floor ({source}) imports no package")
        graph.setdefault(source, {}).setdefault(target, each)
    try:
        graphlib.TopologicalSorter({k: set(v) for k, v in graph.items()}).prepare()
    except graphlib.CycleError as error:
        cycle = error.args[1]
        pairs = zip(cycle, cycle[1:], strict=False)  # graphlib may name it either way round
        steps = [str(graph[a][b] if b in graph.get(a, {}) else graph[b][a]) for a, b in pairs]
        problems.append(f"packages import each other: {'; '.join(steps)}")
    return problems


def test_the_layering_holds() -> None:
    assert {*LINE, *BESIDE, *GROUND} <= {p.stem for p in PACKAGE.iterdir()}, "a name moved"
    assert layering_problems() == []


def test_the_secrets_are_on_the_ground_floor() -> None:
    found = [each for each in imports() if each.module.startswith("evalsweep.agent._secrets")]
    assert found == [] and not (PACKAGE / "agent" / "_secrets.py").exists()
    used = {part(PACKAGE, e.source) for e in imports() if e.module == "evalsweep.secrets"}
    assert {"agent", "compute", "cli", "options"} <= used


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "evalsweep"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        for folder in (root / name).relative_to(root).parents:
            (root / folder / "__init__.py").touch()
        if name.endswith(".py"):
            (root / name).write_text(text)
    return root


def test_the_rules_see_each_kind_of_bad_import(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "agent/_box.py": "X = 1\n",
            "compute/_ssh.py": "def f():\n    from ..agent import _box\n    return _box\n",
            "compute/_ray.py": "import importlib\n"
            "importlib.import_module('evalsweep.agent._box')\n",
            "engine/_sweep.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    import evalsweep.compute._ssh\n",
            "tasks/__init__.py": "T = 'evalsweep.agent._box:X'\n",
            "secrets.py": "from evalsweep.store import Store\n",
            "store/__init__.py": "from evalsweep import secrets\nStore = 1\n",
        },
    )
    problems = layering_problems(root)
    expected = [
        "compute/_ray.py:2 imports evalsweep.agent._box: only cli may import agent",
        "compute/_ssh.py:2 imports evalsweep.agent._box: only cli may import agent",
        "engine/_sweep.py:3 imports evalsweep.compute._ssh: the line (engine) never imports "
        "compute",
        "secrets.py:1 imports evalsweep.store: the ground floor (secrets) imports no package",
        "tasks/__init__.py:1 imports evalsweep.agent._box: the line (tasks) never imports agent",
    ]
    assert sorted(problems[:-1]) == expected
    assert problems[-1].startswith("packages import each other: ")
    assert "secrets.py:1 imports evalsweep.store" in problems[-1]
    assert "store/__init__.py:1 imports evalsweep.secrets" in problems[-1]


def test_a_deferred_import_back_is_a_cycle_too(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "stats/__init__.py": "def f():\n    from evalsweep.report import size\n",
            "report/__init__.py": "from evalsweep.stats import f\nsize = 1\n",
        },
    )
    (problem,) = layering_problems(root)
    assert problem.startswith("packages import each other: ")
    assert "stats/__init__.py:2 imports evalsweep.report" in problem


def test_a_good_tree_has_no_problem(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "stats/__init__.py": "def f():\n    from evalsweep.errors import E\n",
            "report/__init__.py": "from evalsweep.stats import f\nsize = 1\n",
            "cli/__init__.py": "from evalsweep.agent import serve\nfrom . import _x\n",
            "cli/_x.py": "",
            "agent/__init__.py": "from evalsweep.compute import run\nserve = 1\n",
            "compute/__init__.py": "from evalsweep.secrets import box\nrun = 1\n",
            "secrets.py": "from evalsweep.errors import E\nbox = 1\n",
            "errors.py": "E = 1\n",
        },
    )
    assert layering_problems(root) == []
    assert {str(each) for each in imports(root)} >= {
        "cli/__init__.py:2 imports evalsweep.cli._x",
        "stats/__init__.py:2 imports evalsweep.errors",
    }
