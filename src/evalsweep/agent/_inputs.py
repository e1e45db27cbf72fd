"""What an agent may send: references, task names and ids checked before anything uses them.

Every check names the argument (``checkpoints[1]``) rather than echoing its
value: an agent's argument could be a guess at a secret, and an error must
not confirm it. Values that are echoed anywhere are shortened by ``shown``.
"""

from __future__ import annotations

import re
from typing import Any

from evalsweep.agent._secrets import MIN_LENGTH
from evalsweep.errors import EvalsweepError

#: Longest reference accepted (bytes, UTF-8) and longest path component (the usual NAME_MAX).
MAX_REFERENCE_BYTES = 4096
MAX_COMPONENT_BYTES = 255
MAX_CHECKPOINTS = 64
MAX_TASKS = 64
#: Most characters of an agent's value repeated in any message.
SHOWN_CHARS = 80
TASK_NAME = re.compile(r"^[a-z0-9][a-z0-9_]{0,127}$")
QUOTE_ID = re.compile(r"^q-[0-9a-f]{10}$")
JOB_ID = re.compile(r"^j-[0-9a-f]{10}$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class InputError(EvalsweepError):
    """An argument no tool accepts (named, never echoed)."""


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``value`` as text, cut to ``limit`` characters with the length said."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def check_reference(reference: str, label: str) -> None:
    encoded = reference.encode("utf-8", errors="surrogatepass")
    if not reference.strip():
        raise InputError(f"{label} is empty")
    if len(encoded) > MAX_REFERENCE_BYTES:
        raise InputError(f"{label} is longer than {MAX_REFERENCE_BYTES} bytes")
    if CONTROL.search(reference):
        raise InputError(f"{label} contains a control character (a newline, tab or NUL)")
    if reference.startswith("-"):
        raise InputError(f"{label} starts with '-'; name a folder that does as ./-...")
    for part in reference.split("/"):
        if len(part.encode("utf-8", errors="surrogatepass")) > MAX_COMPONENT_BYTES:
            raise InputError(
                f"{label} has a path component longer than {MAX_COMPONENT_BYTES} bytes"
            )


def check_sweep(checkpoints: list[str], tasks: list[str]) -> None:
    """Refuse references and task names no sweep should be quoted for (an option's bounds
    are checked by ``_options.check_bounds``, from the option's definition)."""
    if not checkpoints:
        raise InputError("checkpoints is empty: name at least one checkpoint")
    if len(checkpoints) > MAX_CHECKPOINTS:
        raise InputError(f"checkpoints has {len(checkpoints)} entries; at most {MAX_CHECKPOINTS}")
    for index, reference in enumerate(checkpoints):
        check_reference(reference, f"checkpoints[{index}]")
    if len(set(checkpoints)) != len(checkpoints):
        raise InputError("checkpoints names the same checkpoint twice")
    if not tasks:
        raise InputError("tasks is empty: name at least one task (see list_tasks)")
    if len(tasks) > MAX_TASKS:
        raise InputError(f"tasks has {len(tasks)} entries; at most {MAX_TASKS}")
    from evalsweep.tasks import get_task
    from evalsweep.tasks.custom import is_task_file

    for index, name in enumerate(tasks):
        if is_task_file(name):  # a task file, checked as a path is, then loaded
            check_reference(name, f"tasks[{index}]")
            try:
                get_task(name)
            except EvalsweepError:
                raise InputError(
                    f"tasks[{index}] is not a task file evalsweep can load (evalsweep run says why)"
                ) from None
            continue
        if not TASK_NAME.match(name):
            raise InputError(
                f"tasks[{index}] is not a task name (lower-case letters, digits and _; "
                "see list_tasks) or a task file (.yaml, .yml, .toml)"
            )
        try:
            get_task(name)
        except EvalsweepError:
            raise InputError(f"tasks[{index}] is not a known task (see list_tasks)") from None
    if len(set(tasks)) != len(tasks):
        raise InputError("tasks names the same task twice")


def check_id(value: str, pattern: re.Pattern[str], what: str) -> None:
    if not pattern.match(value):
        raise InputError(f"{what} is not a {what.replace('_', ' ')} (as returned by evalsweep)")


def argument_labels(arguments: dict[str, Any]) -> list[tuple[str, str]]:
    """(value, label) of every string an agent sent, longest first: an error shows the
    label in place of the value (or of anything containing it)."""
    found: list[tuple[str, str]] = []

    def walk(value: Any, label: str) -> None:
        if isinstance(value, str):
            # Shorter than any stored secret, or an id of ours: harmless to echo.
            if len(value) >= MIN_LENGTH and not (QUOTE_ID.match(value) or JOB_ID.match(value)):
                found.append((value, label))
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                walk(item, f"{label}[{index}]")
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{label}.{key}")

    for name, value in arguments.items():
        walk(value, name)
    return sorted(found, key=lambda pair: -len(pair[0]))
