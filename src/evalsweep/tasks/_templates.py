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
- ``**`` and ``*`` refuse results past ``MAX_POWER`` digits or ``MAX_ITEMS`` items,
  and a rendering past ``MAX_RENDERED`` characters fails, so a template cannot take
  the process's memory either.

What a template may not do fails with :class:`TemplateRefused`, which the task
file turns into one line naming the file and the key.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

from jinja2 import StrictUndefined, Undefined
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.utils import Namespace

#: Most digits ``**`` may produce, items ``*`` may repeat into, characters a rendering holds.
MAX_POWER = 10_000
MAX_ITEMS = 1_000_000
MAX_RENDERED = 1_000_000
PLAIN = (str, int, float, bool, list, tuple, dict, type(None))
JINJA_OWN = (LoopContext, Namespace)
KEPT_GLOBALS = ("range", "dict", "namespace")


class TemplateRefused(SecurityError):
    """A template reached for something a task template may not use."""


class TaskTemplates(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with the narrowing the module's docstring lists."""

    intercepted_binops = frozenset({"*", "**"})

    def __init__(self) -> None:
        super().__init__(undefined=StrictUndefined, keep_trailing_newline=True)
        self.globals = {name: self.globals[name] for name in KEPT_GLOBALS}

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


def render(template: Any, row: Mapping[str, Any]) -> str:
    """``template`` (compiled by :class:`TaskTemplates`) rendered over ``row``, bounded."""
    out = template.render(**row)
    if len(out) > MAX_RENDERED:
        raise TemplateRefused(f"renders {len(out)} characters, more than {MAX_RENDERED}")
    return str(out)
