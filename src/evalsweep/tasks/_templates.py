"""The one Jinja environment task files' templates are rendered in: data, never code.

A task file is data a person (or a checkpoint, or an agent) hands evalsweep, so
its templates (``doc_to_text``, ``doc_to_choice``...) are rendered in Jinja's
immutable sandbox, narrowed further:

- a template sees the row's fields and nothing else: no globals but ``range``
  (Jinja's sandbox bounds it), ``dict`` and ``namespace``; ``cycler``, ``joiner``
  and ``lipsum`` are gone;
- attributes are read only on the plain values a row holds (strings, numbers,
  lists, dicts, booleans, None) and on Jinja's own loop and namespace objects, and
  never one that starts with ``_``; methods that change a value are refused;
- what a template may build is bounded before it is built, so a template cannot take
  the process's memory or its time either: ``**`` and ``*`` refuse results past
  ``MAX_POWER`` digits or ``MAX_ITEMS`` items; every call and filter refuses a number
  argument past ``MAX_ITEMS`` (a width such as ``center(300000000)``) and a result past
  ``MAX_RENDERED`` characters; ``%`` refuses a width or precision past ``MAX_ITEMS``;
  ``range`` counts against ``MAX_STEPS`` iterations per rendering (nested loops
  included); and a rendering stops once it has produced ``MAX_RENDERED`` characters.

What a template may not do fails with :class:`TemplateRefused`, which the task
file turns into one line naming the file and the key.
"""

from __future__ import annotations

import contextvars
import functools
import operator
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

from jinja2 import StrictUndefined, Undefined, nodes
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import Namespace

#: Most digits ``**`` may produce, items ``*`` may repeat into, characters a rendering holds,
#: and ``range`` iterations one rendering may ask for in all.
MAX_POWER = 10_000
MAX_ITEMS = 1_000_000
MAX_RENDERED = 1_000_000
MAX_STEPS = 100_000
MAX_SECONDS = 2.0
_STEPS: contextvars.ContextVar[list[float]] = contextvars.ContextVar("template_steps")
_WIDTH = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
PLAIN = (str, int, float, bool, list, tuple, dict, type(None))
JINJA_OWN = (LoopContext, Namespace)
KEPT_GLOBALS = ("range", "dict", "namespace")


class TemplateRefused(SecurityError):
    """A template reached for something a task template may not use."""


class TaskTemplates(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with the narrowing the module's docstring lists."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        """The template's tree, with every loop counted and every ``~`` bounded: each
        ``{% for %}``'s iterable goes through :func:`counted_steps` and each concatenation
        through :func:`bounded_concat` (names no template can reach or shadow)."""
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):
            loop.iter = nodes.Call(
                nodes.ImportedName(f"{__name__}.counted_steps"), [loop.iter], [], None, None
            )
        for concat in list(tree.find_all(nodes.Concat)):
            concat.nodes = [
                nodes.Call(
                    nodes.ImportedName(f"{__name__}.bounded_concat"),
                    list(concat.nodes),
                    [],
                    None,
                    None,
                )
            ]
        return tree

    def __init__(self) -> None:
        super().__init__(undefined=StrictUndefined, keep_trailing_newline=True)
        self.globals = {name: self.globals[name] for name in KEPT_GLOBALS}
        self.globals["range"] = counted_range
        self.filters = {
            name: _bounded(fn, patterned=name == "format") for name, fn in self.filters.items()
        }

    def call(self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _check_numbers(args, kwargs)
        _tick()
        _predict(getattr(__obj, "__name__", ""), getattr(__obj, "__self__", None), args)
        return _checked_result(super().call(__context, __obj, *args, **kwargs))

    def getattr(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, str) and attribute in ("format", "format_map"):
            _predict("format", obj, ())  # Jinja hands out its own wrapper for these
        return super().getattr(obj, attribute)

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if attr.startswith("_") or not isinstance(obj, PLAIN + JINJA_OWN):
            return False
        return bool(super().is_safe_attribute(obj, attr, value))

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        if isinstance(obj, Undefined):  # a name the row lacks: say so, as Jinja would
            obj._fail_with_undefined_error()  # noqa: SLF001 - Jinja's own way to raise it
        raise TemplateRefused(
            f"reads {attribute!r} of a {type(obj).__name__}: templates see the row's fields "
            "and Jinja's filters only"
        )

    def call_binop(self, context: Any, operator_name: str, left: Any, right: Any) -> Any:
        _tick()
        if operator_name == "+":
            if isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple):
                _check_size(len(left) + len(right))
            return operator.add(left, right)
        if operator_name == "%":
            _check_widths(left)
            return _checked_result(operator.mod(left, right))
        if operator_name == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0:
                digits = right * max(abs(left), 2).bit_length() * 0.302
                if digits > MAX_POWER:
                    raise TemplateRefused(f"'**' would make a number of {digits:.0f} digits")
            return operator.pow(left, right)
        count = right if isinstance(right, int) else left if isinstance(left, int) else None
        other = left if count is right else right
        if (
            count is not None
            and isinstance(other, str | list | tuple)
            and (count * len(other) > MAX_ITEMS)
        ):
            raise TemplateRefused(f"'*' would make {count * len(other)} items")
        return operator.mul(left, right)


def _budget() -> list[float]:
    """This rendering's [steps taken, deadline]."""
    return _STEPS.get([0, time.monotonic() + MAX_SECONDS])


def _tick(steps: int = 1) -> None:
    budget = _budget()
    budget[0] += steps
    if budget[0] > MAX_STEPS:
        raise TemplateRefused(f"loops of more than {MAX_STEPS} steps in all")
    if int(budget[0]) % 1024 < steps and time.monotonic() > budget[1]:
        raise TemplateRefused(f"renders for more than {MAX_SECONDS} s")


def counted_steps(iterable: Any) -> Iterator[Any]:
    """A loop's iterable, each item counted against the rendering's ``MAX_STEPS`` (and its
    ``MAX_SECONDS``): every ``{% for %}`` of a task template iterates through this."""
    for item in iterable:
        _tick()
        yield item


def bounded_concat(*parts: Any) -> str:
    """``a ~ b ~ ...``, refused before it is built when it would pass ``MAX_RENDERED``."""
    texts = [str(part) for part in parts]
    _check_size(sum(len(text) for text in texts))
    _tick()
    return "".join(texts)


def _check_size(size: int) -> None:
    if size > MAX_RENDERED:
        raise TemplateRefused(f"a value of {size} items, more than {MAX_RENDERED}")


def _predict(name: str, value: Any, args: tuple[Any, ...]) -> None:
    """Refuse, before it runs, a string operation whose result would pass ``MAX_RENDERED``
    (those whose result can be far larger than what they are given)."""
    if not isinstance(value, str):
        return
    if name in ("replace", "do_replace") and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        count = value.count(old) if old else len(value) + 1
        _check_size(len(value) + count * max(len(new) - len(old), 0))
    elif name in ("indent", "do_indent"):
        width = args[0] if args else 4
        step = len(width) if isinstance(width, str) else int(width or 0)
        _check_size(len(value) + (value.count("\n") + 1) * max(step, 0))
    elif name == "expandtabs":
        _check_size(len(value) + value.count("\t") * int(args[0] if args else 8))
    elif name in ("format", "format_map"):
        for field in re.findall(r"\{([^{}]*)\}", value):
            spec = field.partition(":")[2]
            for width in re.findall(r"\d+", spec):
                _check_size(int(width))
    elif name == "join" and args and isinstance(args[0], list | tuple):
        _check_size(sum(len(str(item)) for item in args[0]) + len(value) * len(args[0]))


def counted_range(*args: int) -> range:
    """Jinja's ``range``, counted against the rendering's ``MAX_STEPS``."""
    for value in args:
        if not isinstance(value, int) or abs(value) > MAX_ITEMS:
            raise TemplateRefused("range over a number that large")
    return range(*args)  # its loop counts each step (counted_steps)


def _check_numbers(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    for value in (*args, *kwargs.values()):
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and abs(value) > MAX_ITEMS:
            raise TemplateRefused("a call with a number argument that large")


def _check_widths(pattern: Any) -> None:
    """A ``%`` pattern (the ``%`` operator's, the ``format`` filter's) with no width or
    precision past ``MAX_ITEMS``: what it would make is refused before it is made."""
    if isinstance(pattern, str):
        for width in (w for pair in _WIDTH.findall(pattern) for w in pair if w):
            if width == "*" or int(width) > MAX_ITEMS:
                raise TemplateRefused("'%' with a width or precision that large")


def _checked_result(value: Any) -> Any:
    if isinstance(value, str | list | tuple) and len(value) > MAX_RENDERED:
        raise TemplateRefused(f"a value of {len(value)} items, more than {MAX_RENDERED}")
    return value


def _bounded(fn: Any, patterned: bool = False) -> Any:
    """A filter with its number arguments and its result bounded (see the module);
    ``patterned``: its value is a ``%`` pattern (the ``format`` filter)."""

    @functools.wraps(fn)
    def filtered(*args: Any, **kwargs: Any) -> Any:
        _check_numbers(args[1:], kwargs)  # the first is the value (or the context)
        _tick()
        if patterned and args:  # ``format`` takes its pattern as the value
            _check_widths(args[0])
        values = [a for a in args if not hasattr(a, "environment")]  # past the context
        if values:
            if fn.__name__ == "do_join" and isinstance(values[0], list | tuple):
                joiner = str(values[1]) if len(values) > 1 else ""
                _predict("join", joiner, (list(values[0]),))
            else:
                _predict(fn.__name__, values[0], tuple(values[1:]))
        return _checked_result(fn(*args, **kwargs))

    return filtered


def render(template: Any, row: Mapping[str, Any]) -> str:
    """``template`` (compiled by :class:`TaskTemplates`) rendered over ``row``, bounded: it
    stops as soon as it has produced ``MAX_RENDERED`` characters."""
    token = _STEPS.set([0, time.monotonic() + MAX_SECONDS])
    try:
        parts: list[str] = []
        size = 0
        for chunk in template.generate(**row):
            size += len(chunk)
            if size > MAX_RENDERED:
                raise TemplateRefused(f"renders more than {MAX_RENDERED} characters")
            parts.append(chunk)
        return "".join(parts)
    finally:
        _STEPS.reset(token)
