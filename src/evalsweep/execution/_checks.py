"""Which tests can tell each other's expected values: the keys of the service's run order.

A judged sample's plain run is the one process that holds its test, and a
program running there can read every value written in that test and spend
kernel-wide counters or the clock to pass them on. What must not receive them
is a split run of a test that checks the same values, in the same batch: the
service therefore holds the plain runs of a test until every split run of every
test that shares a check with it has ended (``ExecutionService._ended``).

Two tests share a check when one statement of each holds the same values.
Every statement of a test (at any depth: the asserts of ``check``, a helper's
body, a table of cases a loop walks) is keyed by the set of constants in its
own expressions as the compiler folds them (``3 * 3`` is 9, ``-2`` is -2,
``[1, 2]`` is 1 and 2), an assert's condition apart from its message. Names,
layout, comments, operators and order do not count. So a copy of a test with
other formatting, a renamed parameter, its asserts reordered, some removed or
some added, other messages, or ``==`` written ``is``, shares a key with the
original. A test's own source is one more key, so a test with no constant at
all is still ordered against itself.

Left out, so that unrelated tests do not wait for each other: ``None``,
``True``, ``False`` and ``...`` (a key holds a statement's other constants, so
``f(5) == True`` and ``f(5) is not False`` share one), statements with no other
constant; on the side that waits to *learn* (:func:`needed_keys`), docstrings,
asserts of a constant (HumanEval's ``assert True, "This prints if this assert
fails"``) and assignments at the top of the test to names the test never reads
(HumanEval's ``METADATA``), which no check depends on. What this does not link,
said plainly: a value one test writes and another computes (``9`` and
``int('9')``), and values one test writes in one statement and the other
spreads over several or gathers in one.
"""

from __future__ import annotations

import ast
import math
import types
from collections.abc import Iterator

#: A key: the constants of one statement (or a test's own source, for itself).
Key = frozenset[tuple[str, object]] | tuple[str, str]

# Constants that hold no value of a test's by themselves.
_BARE = frozenset({("NoneType", None), ("bool", True), ("bool", False), ("ellipsis", ...)})


def held_keys(test: str) -> frozenset[Key]:
    """Every key of ``test``: what its plain run can pass on."""
    return _keys(test, needed=False)


def needed_keys(test: str) -> frozenset[Key]:
    """The keys of ``test``'s checks: what its split run could use."""
    return _keys(test, needed=True)


def _keys(test: str, *, needed: bool) -> frozenset[Key]:
    own: Key = ("test", test)
    try:
        tree = ast.parse(test)
        keys = {key - _BARE for key in _statement_keys(tree, needed)} - {frozenset()}
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return frozenset({own})  # the judge reports what is wrong with it
    return frozenset({own, *keys})


def _statement_keys(tree: ast.Module, needed: bool) -> Iterator[frozenset[tuple[str, object]]]:
    read = {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store)
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt):
            continue
        if needed and _checks_nothing(node, tree, read):
            continue
        constants: set[tuple[str, object]] = set()
        if isinstance(node, ast.Assert):  # its message is evaluated only once it has failed
            _folded(node.test, constants)
            if node.msg is not None and not needed:
                message: set[tuple[str, object]] = set()
                _folded(node.msg, message)
                yield frozenset(message)
        else:
            _own_constants(node, constants)
        yield frozenset(constants)


def _checks_nothing(node: ast.stmt, tree: ast.Module, read: set[str]) -> bool:
    """A docstring, an ``assert`` of a constant, or a top-level assignment to names the
    test never reads."""
    if isinstance(node, (ast.Expr, ast.Assert)) and isinstance(
        node.value if isinstance(node, ast.Expr) else node.test, ast.Constant
    ):
        return True
    if node in tree.body and isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = {
            name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)
        }
        simple = all(isinstance(target, ast.Name) for target in targets)
        return simple and not names & read
    return False


def _own_constants(node: ast.AST, out: set[tuple[str, object]]) -> None:
    """The constants of ``node``'s own expressions (not of the statements inside it)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            continue
        if isinstance(child, ast.expr):
            _folded(child, out)
        else:  # arguments, keywords, handlers, items, comprehensions, patterns
            _own_constants(child, out)


def _folded(expression: ast.expr, out: set[tuple[str, object]]) -> None:
    try:
        code = compile(ast.Expression(expression), "<test>", "eval", dont_inherit=True)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, OverflowError):
        # Not an expression on its own (``await``, ``yield``): its written constants.
        for node in ast.walk(expression):
            if isinstance(node, ast.Constant):
                _atoms(node.value, out)
        return
    _atoms(code, out)


def _atoms(value: object, out: set[tuple[str, object]]) -> None:
    if isinstance(value, types.CodeType):  # a lambda or comprehension inside
        for constant in value.co_consts:
            _atoms(constant, out)
    elif isinstance(value, (tuple, frozenset)):
        for item in value:
            _atoms(item, out)
    elif isinstance(value, float):
        out.add(("float", _atom_float(value)))
    elif isinstance(value, complex):
        out.add(("complex", (_atom_float(value.real), _atom_float(value.imag))))
    else:  # str, bytes, int, bool, None, Ellipsis
        out.add((type(value).__name__, value))


def _atom_float(value: float) -> str:
    return "nan" if math.isnan(value) else value.hex()
