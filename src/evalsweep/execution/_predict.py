"""The calls a test's ``check`` will make first, read from its source before it runs.

Every call the test makes of the sample's function is a round trip between the
judge and the sample, and on a small machine those round trips (two process
wake-ups each) cost more than most HumanEval functions. Most tests start with
a run of ``assert candidate(<literal>) == ...`` statements, whose calls are
known before the test runs: the judge sends them to the sample in one message,
before the sample has even loaded its program, and the sample answers each as
it finishes (see ``_runtime.judge``). When the test then makes exactly those
calls, in that order, their answers are already there; when it makes any
other request first, the judge collects the rest of the batch and goes on one
call at a time, so the outcome never depends on this prediction being right.
Calls after a failed assert may still be made; they cannot change a verdict
that is already decided (at most a pass/fail becomes an output-limit error),
and a sample stuck in one is stopped once its judge is done.

Only plain statements qualify: the prefix of ``check``'s body made of
``assert`` and expression statements whose calls of the sample (the parameter
of ``check`` or one of the sample's function names) take literal arguments
and sit where Python always evaluates them, left to right (no ``and``/``or``,
conditional expressions, comprehensions or lambdas). This runs in the parent,
on the dataset's trusted test code, so ``ast`` never enters a sandbox.
"""

from __future__ import annotations

import ast
import builtins
import functools
import threading
import warnings
from typing import Any

MAX_CALLS = 256
_BUILTIN_NAMES = frozenset(vars(builtins))
# Builtins that never call a function handed to them as an argument here
# (the sample's functions may not appear as arguments anyway, see _Reader).
_SAFE_CALLS = frozenset(
    {
        "abs",
        "all",
        "any",
        "bool",
        "complex",
        "dict",
        "float",
        "frozenset",
        "int",
        "isinstance",
        "len",
        "list",
        "max",
        "min",
        "repr",
        "round",
        "set",
        "sorted",
        "str",
        "sum",
        "tuple",
        "type",
    }
)

# One predicted call: the sample's global called (check's parameter stands for
# the entry point), the positional arguments and the keyword arguments.
PredictedCall = tuple[str, tuple[Any, ...], dict[str, Any]]


class _Unpredictable(Exception):
    """This statement's calls cannot be known before it runs."""


class _Reader:
    """Collects the sample calls of one expression in Python's evaluation order."""

    def __init__(self, parameter: str, entry_point: str | None, names: frozenset[str]) -> None:
        self.parameter = parameter
        self.entry_point = entry_point  # None: the parameter is not the sample's
        self.names = names
        self.calls: list[PredictedCall] = []
        self.constants: list[Any] = []  # literals outside the calls: expected values

    def _is_sample(self, node: ast.expr) -> bool:
        return isinstance(node, ast.Name) and (node.id == self.parameter or node.id in self.names)

    def visit(self, node: ast.expr | None) -> None:
        if node is None:
            return
        if isinstance(node, ast.Constant):
            self.constants.append(node.value)
            return
        if isinstance(node, ast.List | ast.Tuple | ast.Set | ast.Dict):
            try:
                self.constants.append(ast.literal_eval(node))
                return
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                pass  # a display with calls inside: read item by item
        if isinstance(node, ast.Name):
            if self._is_sample(node):  # handed somewhere that might call it
                raise _Unpredictable
            return
        if isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.Attribute):
            self.visit(node.value)
        elif isinstance(node, ast.Subscript):
            self.visit(node.value)
            self.visit(node.slice)
        elif isinstance(node, ast.Slice):
            for part in (node.lower, node.upper, node.step):
                self.visit(part)
        elif isinstance(node, ast.Compare):
            for part in (node.left, *node.comparators):
                self.visit(part)
        elif isinstance(node, ast.BinOp):
            self.visit(node.left)
            self.visit(node.right)
        elif isinstance(node, ast.UnaryOp):
            self.visit(node.operand)
        elif isinstance(node, ast.List | ast.Tuple | ast.Set):
            for item in node.elts:
                if isinstance(item, ast.Starred):
                    raise _Unpredictable
                self.visit(item)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:
                    raise _Unpredictable
                self.visit(key)
                self.visit(value)
        else:
            raise _Unpredictable

    def _call(self, node: ast.Call) -> None:
        if self._is_sample(node.func):
            assert isinstance(node.func, ast.Name)
            try:
                args = tuple(ast.literal_eval(arg) for arg in node.args)
                kwargs = {}
                for keyword in node.keywords:
                    if keyword.arg is None:
                        raise _Unpredictable
                    kwargs[keyword.arg] = ast.literal_eval(keyword.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                raise _Unpredictable from None
            name = self.entry_point if node.func.id == self.parameter else node.func.id
            if name is None:
                raise _Unpredictable
            self.calls.append((name, args, kwargs))
            return
        if isinstance(node.func, ast.Name):
            if node.func.id not in _SAFE_CALLS:
                raise _Unpredictable  # a helper of the test may call the sample itself
        elif isinstance(node.func, ast.Attribute):
            self.visit(node.func.value)
        else:
            raise _Unpredictable
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise _Unpredictable
            self.visit(arg)
        for keyword in node.keywords:
            if keyword.arg is None:
                raise _Unpredictable
            self.visit(keyword.value)


def _check_function(module: ast.Module) -> ast.FunctionDef | None:
    """The ``check`` the test module leaves defined, if it binds the name only by ``def``."""
    found = None
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            found = node
        elif getattr(node, "name", None) == "check" or any(
            isinstance(target, ast.Name) and target.id == "check"
            for target in ast.walk(node)
            if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store)
        ):
            return None
    if found is None or found.decorator_list:
        return None
    args = found.args
    if args.posonlyargs or args.vararg or args.kwonlyargs or args.kwarg or len(args.args) != 1:
        return None
    return found


# CPython 3.11 keeps the AST constructor's recursion count per interpreter, not
# per thread: when two threads build AST objects at once (a garbage collection
# in one can hand the GIL to the other mid-tree), one of them may fail with
# "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905).
# The service's worker threads predict calls concurrently, so parsing is
# serialised here; the SystemError is still caught for parses elsewhere in the
# process (another library's thread), since a prediction is only a saving.
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


def _bound_names(module: ast.Module) -> set[str]:
    """Every name the module's own code may bind as a global (generously)."""
    names: set[str] = set()
    pending: list[ast.AST] = list(module.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            pending.extend(n for n in ast.walk(node) if isinstance(n, ast.Global))
            continue
        if isinstance(node, ast.Global):
            names.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        pending.extend(ast.iter_child_nodes(node))
    return names


def _pieces(values: list[Any]) -> list[Any]:
    """The values and, one level down, their items (None and booleans reveal nothing)."""
    pieces: list[Any] = []
    for value in values:
        pieces.append(value)
        if isinstance(value, list | tuple | set | frozenset):
            pieces.extend(value)
        elif isinstance(value, dict):
            pieces.extend(value)
            pieces.extend(value.values())
    return [piece for piece in pieces if piece is not None and type(piece) is not bool]


def _reveals(call: PredictedCall, answers: list[Any]) -> bool:
    """Whether the call's arguments contain a value an earlier assert expects.

    Calls sent ahead show the sample later inputs before it has answered the
    earlier calls; a test whose later input is an earlier expected output
    (``candidate("abc") == "cba"``, then ``candidate("cba")``) would hand the
    answer over. The batch stops before such a call.
    """
    _, args, kwargs = call
    for piece in _pieces([*args, *kwargs.values()]):
        for answer in answers:
            try:
                if type(piece) is type(answer) and piece == answer:
                    return True
            except Exception:  # noqa: BLE001 - literals compare; be safe anyway
                return True
    return False


@functools.lru_cache(maxsize=4096)
def predicted_calls(
    test: str, sample_names: tuple[str, ...], entry_point: str, prelude: str | None = None
) -> tuple[PredictedCall, ...]:
    """The calls ``check`` makes of the sample before anything could change their order.

    ``check``'s parameter is the entry point (the judge looks it up in the
    sample); other names count as the sample's only if neither the test nor
    the prelude (which the judge runs first) binds them.
    """
    module = parse_python(test)
    check = _check_function(module) if module is not None else None
    if module is None or check is None:
        return ()
    outside = {
        node.id
        for statement in module.body
        if statement is not check
        for node in ast.walk(statement)
        if isinstance(node, ast.Name)
    }
    if outside & {entry_point, *sample_names}:
        return ()  # the test may call the sample before check does
    theirs = _bound_names(module)
    if prelude is not None:
        prelude_module = parse_python(prelude)
        if prelude_module is None:
            return ()
        theirs |= _bound_names(prelude_module) - {entry_point}
    parameter = check.args.args[0].arg
    usable = entry_point.isidentifier() and entry_point != "None"
    if entry_point in theirs or (entry_point in _BUILTIN_NAMES and entry_point not in sample_names):
        usable = False  # the judge would not find it in the sample
    names = frozenset(sample_names) - theirs - {parameter}
    calls: list[PredictedCall] = []
    answers: list[Any] = []
    for statement in check.body:
        if isinstance(statement, ast.Pass):
            continue
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring or a bare constant
        if isinstance(statement, ast.Assert):
            expression = statement.test  # the message is evaluated only on failure
        elif isinstance(statement, ast.Expr):
            expression = statement.value
        else:
            break
        reader = _Reader(parameter, entry_point if usable else None, names)
        try:
            reader.visit(expression)
        except (_Unpredictable, RecursionError):
            break
        if any(_reveals(call, answers) for call in reader.calls):
            break
        answers.extend(_pieces(reader.constants))
        calls.extend(reader.calls)
        if len(calls) >= MAX_CALLS:
            break
    return tuple(calls[:MAX_CALLS])
