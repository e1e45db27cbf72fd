"""What a code problem itself defines, for the judge: its prelude and the names a sample writes.

The rule (docs/sandbox.md): a name a test uses is the test's own, the
problem's, or a builtin; only the functions and classes the sample is asked
to write come from the sample. This module reads the problem's trusted code
(in the parent, never in a sandbox) and says which is which:

* the *prelude* the judge runs before the test: a HumanEval prompt (with its
  helpers, such as HumanEval/32's ``poly``), completed if it does not compile
  alone; for MBPP, the imports, constants and definitions of the reference
  code (MBPP/596's test uses the ``sys`` its reference solution imports);
* the *sample names*: the entry point, and the functions and classes the
  reference code defines (an MBPP test calls them by name).
"""

from __future__ import annotations

import ast
import threading
import warnings

# ast.parse is not safe to call from several threads at once while warnings
# are being caught (the filter list is process-wide).
_PARSE_LOCK = threading.Lock()


def parse_python(source: str) -> ast.Module | None:
    """``source``'s syntax tree, or None if it cannot be had (no warnings shown)."""
    with _PARSE_LOCK:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return ast.parse(source)
        except (SyntaxError, ValueError, MemoryError, RecursionError, SystemError):
            return None


def compiles(source: str) -> bool:
    """Whether ``source`` compiles as a module (old escape sequences only warn)."""
    with _PARSE_LOCK:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                compile(source, "<problem>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError, MemoryError, RecursionError, SystemError):
            return False
    return True


def defined_names(code: object) -> tuple[str, ...]:
    """Top-level function and class names of a reference solution (the sample writes these)."""
    if not isinstance(code, str):
        return ()
    tree = parse_python(code)
    if tree is None:
        return ()
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return tuple(dict.fromkeys(node.name for node in tree.body if isinstance(node, kinds)))


def reference_prelude(code: object) -> str | None:
    """What a reference solution defines at top level, as the judge runs it (None: nothing).

    Its imports (MBPP/596's test uses the ``sys`` its reference imports), its
    top-level assignments (``MOD = 10 ** 9 + 7``, and ``LIMIT = int('100')``:
    run in order, with the reference's own functions in place; one that calls
    something is kept only if it succeeds, so a failing one leaves its name
    unbound rather than failing every sample) and its functions and classes
    (the judge replaces those by the sample's before the test runs). Other
    top-level statements (bare expressions such as prints and calls, loops,
    ``__main__`` blocks) are left out: the judge runs only what defines names.
    """
    if not isinstance(code, str):
        return None
    tree = parse_python(code)
    if tree is None:
        return None
    kept = [_guarded(node) for node in tree.body if _defines_only(node)]
    if not kept:
        return None
    return "".join(ast.unparse(node) + "\n" for node in kept)


_NAME_TARGETS = (ast.Name, ast.Tuple, ast.List, ast.Starred, ast.Load, ast.Store)


def _defines_only(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return True
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and node.module != "__future__"
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return True
    if isinstance(node, ast.Assign | ast.AnnAssign):
        value = node.value
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = all(
            isinstance(inner, _NAME_TARGETS) for target in targets for inner in ast.walk(target)
        )
        return (
            names
            and value is not None
            and not any(
                isinstance(inner, ast.Await | ast.Yield | ast.YieldFrom | ast.NamedExpr)
                for inner in ast.walk(value)
            )
        )
    return False


def _guarded(node: ast.stmt) -> ast.stmt:
    """An assignment that calls something, inside ``try: ... except Exception: pass``."""
    if not isinstance(node, ast.Assign | ast.AnnAssign):
        return node
    if not any(isinstance(inner, ast.Call) for inner in ast.walk(node)):
        return node
    handler = ast.ExceptHandler(
        type=ast.Name("Exception", ast.Load()), name=None, body=[ast.Pass()]
    )
    return ast.Try(body=[node], handlers=[handler], orelse=[], finalbody=[])


def complete_prompt(prompt: str, reference_body: object) -> str | None:
    """A prompt the judge can run alone: as it is, or completed; None if it cannot be.

    A HumanEval-style prompt that ends in a ``def`` line with no docstring does
    not compile alone. It is completed with the reference solution's body if
    that compiles, else with a ``pass`` body at the indentation its last block
    needs; either way its helpers still come from the problem (the judge
    removes the completed entry point: the sample's is the real one).
    """
    if compiles(prompt):
        return prompt
    base = prompt if prompt.endswith("\n") else prompt + "\n"
    if isinstance(reference_body, str) and compiles(base + reference_body):
        return base + reference_body
    lines = [line for line in base.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    indent = len(last) - len(last.lstrip())
    for width in dict.fromkeys((indent + 4, indent, 4, 8, 0)):
        candidate = base + " " * width + "pass\n"
        if compiles(candidate):
            return candidate
    return None
