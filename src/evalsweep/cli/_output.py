"""What every command prints through: the two consoles, one-line errors, tables, the verdict.

User errors (:class:`evalsweep.errors.EvalsweepError`) are shown as one line with a
non-zero exit; ``--debug`` shows the traceback (and third-party progress bars, logs and
warnings, which are otherwise kept off the output). ``--no-color`` replaces both
consoles, so commands read them as ``_output.stdout`` at the time they print.

Everything either console prints passes :func:`evalsweep.text.visible` on its way to
the screen (a render hook on each console, so no command can forget it): a checkpoint
name, a task file's text or an audit entry that holds an escape sequence, a C1 control
or an invisible character is shown escaped, never acted on by the terminal.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.text import Text

from evalsweep.errors import EvalsweepError
from evalsweep.text import visible_console

if TYPE_CHECKING:
    from evalsweep.report import ResultDocument

F = TypeVar("F", bound=Callable[..., Any])


def _console(*, to_stderr: bool, color: bool) -> Console:
    """A console for stdout or stderr; without colour it writes no escape codes at all, and
    no text it prints can write one either (see the module's docstring)."""
    # Messages carry ids and paths: no colour guessed from their digits.
    return visible_console(
        stderr=to_stderr, highlight=False, color_system="auto" if color else None
    )


def _color_allowed() -> bool:
    """Colour unless NO_COLOR is set to a non-empty value (https://no-color.org)."""
    return not os.environ.get("NO_COLOR")


stdout = _console(to_stderr=False, color=_color_allowed())
stderr = _console(to_stderr=True, color=_color_allowed())


def _no_color(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--no-color``: both consoles stop writing escape codes, from here on."""
    global stdout, stderr
    if value:
        stdout = _console(to_stderr=False, color=False)
        stderr = _console(to_stderr=True, color=False)


no_color_option = click.option(
    "--no-color",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_no_color,
    help="No colours or other escape codes in the output (as NO_COLOR=1 does).",
)


def fail(message: str, code: int) -> None:
    stderr.print(
        Text.assemble(("evalsweep: error:", "bold red"), " ", message),
        highlight=False,
        soft_wrap=True,
    )
    sys.exit(code)


def warn(message: str) -> None:
    """One warning line on stderr, the message as written (never markup)."""
    stderr.print(
        Text.assemble(("evalsweep: warning:", "bold yellow"), " ", message),
        highlight=False,
        soft_wrap=True,
    )


def note(message: str) -> None:
    """One line on stderr that a person should read once (not a problem)."""
    stderr.print(Text.assemble(("evalsweep: note:", "bold"), " ", message), soft_wrap=True)


def say(message: str | Text, style: str | None = None) -> None:
    """One line of output, whole and as written: paths, ids and names in it are not markup."""
    stdout.print(message, style=style, markup=False, soft_wrap=True)


def user_errors(func: F) -> F:
    """Turn library errors into one line and an exit status; keep third-party progress bars,
    logs and warnings off the output (:mod:`evalsweep._quiet`) unless debugging."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from evalsweep._quiet import third_party_quiet

        debug = bool(kwargs.get("debug")) or os.environ.get("EVALSWEEP_DEBUG") == "1"
        try:
            with third_party_quiet(enabled=not debug):
                return func(*args, **kwargs)
        except EvalsweepError as exc:
            if debug:
                traceback.print_exc()
            fail(str(exc), exc.exit_code)
        except KeyboardInterrupt:
            fail("interrupted; finished work is stored, run the same command to resume", 130)
        except MemoryError:
            if debug:
                traceback.print_exc()
            fail("out of memory; try a smaller --batch-size or --limit", 2)

    return wrapper  # type: ignore[return-value]


def show(document: ResultDocument, as_json: bool, subjects: bool) -> None:
    """The table (and per-subject table), then the verdict in words under them."""
    from evalsweep.report import (
        document_json,
        render_subject_table,
        render_summary,
        render_table,
        render_trend,
    )

    if as_json:
        click.echo(document_json(document))
        return
    shots = {name: task.num_fewshot for name, task in document.settings.tasks.items()}
    if document.steps:  # one training run: the score against the step
        print_whole(render_trend(document))
    else:
        print_whole(render_table(document.results, document.comparisons, shots=shots))
    if subjects:
        print_whole(render_subject_table(document.results, document.comparisons))
    summary = render_summary(document)
    if summary.plain:
        stdout.print(summary, soft_wrap=True)


def print_whole(renderable: Any) -> None:
    """Print a table; into a file or pipe at the width it needs, so no name is ever cut.

    A terminal has a real width (and the tables fold, not cut, what does not fit);
    a CI log or a captured stdout has none, and squeezing to rich's default 80
    columns would shorten checkpoint paths and task names.
    """
    if stdout.is_terminal:
        stdout.print(renderable)
        return
    wide = stdout.options.update_width(100_000)
    needed = stdout.measure(renderable, options=wide).maximum
    previous = stdout.width
    stdout.width = max(needed, 1)
    try:
        stdout.print(renderable)
    finally:
        stdout.width = previous
