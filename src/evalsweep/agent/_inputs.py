"""What an agent may send: references, task names and ids checked before anything uses them.

Every check names the argument (``checkpoints[1]``) rather than echoing its
value: an agent's argument could be a guess at a secret, and an error must
not confirm it. Values that are echoed anywhere are shortened by ``shown``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalsweep import text
from evalsweep.errors import EvalsweepError
from evalsweep.secrets import MIN_LENGTH

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
#: Most strings (and most nested values) one tool call may carry.
MAX_STRINGS = 1024
MAX_DEPTH = 8


class InputError(EvalsweepError):
    """An argument no tool accepts (named, never echoed)."""


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``value`` as text, cut to ``limit`` characters with the length said."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


def boundary_problem(arguments: dict[str, Any]) -> str | None:
    """The first string of a tool call (at any depth) that the text rule
    (:mod:`evalsweep.text`) refuses, as ``label problem``; ``None`` when every one passes.
    The MCP server asks this once for every call, before the tool or its schema sees it."""
    count = 0

    def walk(value: Any, label: str, depth: int) -> str | None:
        nonlocal count
        if depth > MAX_DEPTH:
            return f"{label} nests deeper than {MAX_DEPTH} levels"
        if isinstance(value, str):
            count += 1
            if count > MAX_STRINGS:
                return f"the call carries more than {MAX_STRINGS} strings"
            found = text.problem(value)
            return None if found is None else f"{label} {found}"
        items: list[tuple[Any, str]] = []
        if isinstance(value, list | tuple):
            items = [(item, f"{label}[{index}]") for index, item in enumerate(value)]
        elif isinstance(value, dict):
            # A name no tool takes is refused by the tool's schema (shortened and escaped
            # there); the names a tool takes are its own.
            for key, item in value.items():
                name = str(key)
                items.append((item, f"{label}.{name[:40]}" if label else name[:40]))
        for item, where in items:
            found = walk(item, where, depth + 1)
            if found is not None:
                return found
        return None

    return walk(arguments, "", 0)


def check_reference(reference: str, label: str) -> None:
    text.check(reference, label, max_chars=MAX_REFERENCE_BYTES)
    encoded = reference.encode("utf-8", errors="surrogatepass")
    if not reference.strip():
        raise InputError(f"{label} is empty")
    if len(encoded) > MAX_REFERENCE_BYTES:
        raise InputError(f"{label} is longer than {MAX_REFERENCE_BYTES} bytes")
    if reference.startswith("-"):
        raise InputError(f"{label} starts with '-'; name a folder that does as ./-...")
    for part in reference.split("/"):
        if len(part.encode("utf-8", errors="surrogatepass")) > MAX_COMPONENT_BYTES:
            raise InputError(
                f"{label} has a path component longer than {MAX_COMPONENT_BYTES} bytes"
            )


def check_sweep(
    checkpoints: list[str], tasks: list[str], task_dirs: Sequence[Path] = ()
) -> list[str]:
    """Refuse references and task names no sweep should be quoted for (an option's bounds
    are checked by ``_options.check_bounds``, from the option's definition). Returns the
    tasks as the job names them: a built-in task's name, or the real path of a task file
    in one of ``task_dirs`` (the folders the person's ``[agent] task_dirs`` names)."""
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
    resolved = [agent_task(name, f"tasks[{index}]", task_dirs) for index, name in enumerate(tasks)]
    if len(set(resolved)) != len(resolved):
        raise InputError("tasks names the same task twice")
    return resolved


def allowed_task_files(task_dirs: Sequence[Path]) -> list[str]:
    """The real paths of the task files directly in ``task_dirs``, sorted (none elsewhere)."""
    from evalsweep.tasks.custom import is_task_file

    found = set()
    for folder in task_dirs:
        for path in folder.iterdir():
            real = path.resolve()
            if is_task_file(path.name) and real.is_file() and real.is_relative_to(folder):
                found.add(str(real))
    return sorted(found)


def agent_task(name: str, label: str, task_dirs: Sequence[Path]) -> str:
    """The task an agent named, as the job names it: a built-in task's name, or the real
    path of a task file inside one of ``task_dirs`` (named by its task name, or by its
    absolute path). Anything else, a task file anywhere else included, is refused: a task
    file is the person's, never the agent's."""
    from evalsweep.tasks import builtin_task, get_task
    from evalsweep.tasks.custom import TASK_FILE_SUFFIXES, is_task_file

    text.check(name, label, max_chars=MAX_REFERENCE_BYTES)
    if TASK_NAME.match(name) and builtin_task(name):
        return name
    where = (
        "task files are taken only from the folders the person's configuration names in "
        "[agent] task_dirs"
        + (f" ({', '.join(str(d) for d in task_dirs)})" if task_dirs else "; it names none")
    )
    candidates: list[Path] = []
    if is_task_file(name):
        if not Path(name).is_absolute():
            raise InputError(
                f"{label} is not a built-in task; a task file is named by its "
                f"absolute path or its task name, and {where}"
            )
        candidates = [Path(name)]
    elif TASK_NAME.match(name):
        candidates = [d / f"{name}{suffix}" for d in task_dirs for suffix in TASK_FILE_SUFFIXES]
    else:
        raise InputError(
            f"{label} is not a task name (lower-case letters, digits and _; see list_tasks)"
        )
    for candidate in candidates:
        real = candidate.resolve()
        if not real.is_file():
            continue
        if not any(real.is_relative_to(folder) for folder in task_dirs):
            raise InputError(f"{label} is a task file outside the allowed folders: {where}")
        try:
            get_task(str(real))
        except EvalsweepError:
            raise InputError(
                f"{label} is not a task file evalsweep can load (evalsweep run says why)"
            ) from None
        return str(real)
    raise InputError(f"{label} is not a known task (see list_tasks); {where}")


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


def unechoed(message: str, arguments: dict[str, Any]) -> str:
    """``message`` with every piece of an agent's argument taken out: first each value in
    every form a message may write it (as it is, ``repr``, JSON, escaped, white space
    folded) is replaced by its label (``checkpoints[1]``); then any run of ``MIN_LENGTH``
    characters or more that is still an argument's text is replaced by ``...``. What an
    error says then depends on the arguments only, never on whether one of them is a stored
    secret (whose values are at least ``MIN_LENGTH`` characters), so masking secrets after
    this cannot confirm a guess."""
    from evalsweep.secrets import encoded_forms

    pairs = [(form, label) for value, label in argument_labels(arguments)
             for form in encoded_forms(value)]  # fmt: skip
    for form, label in sorted(pairs, key=lambda pair: -len(pair[0])):
        message = message.replace(form, label)
    covered = [False] * len(message)
    for form, _ in pairs:
        for start in range(len(form) - MIN_LENGTH + 1):
            piece = form[start : start + MIN_LENGTH]
            at = message.find(piece)
            while at >= 0:
                covered[at : at + MIN_LENGTH] = [True] * MIN_LENGTH
                at = message.find(piece, at + 1)
    if not any(covered):
        return message
    out, inside = [], False
    for char, hidden in zip(message, covered, strict=True):
        if hidden and not inside:
            out.append("...")
        if not hidden:
            out.append(char)
        inside = hidden
    return "".join(out)
