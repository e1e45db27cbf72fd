"""Options several commands take, declared once (from :mod:`evalsweep.options` where
``evalsweep run`` has them too), and the store they read.

A command that reads stored results takes ``--tasks``, ``--num-fewshot``, ``--store``
and the output options as ``evalsweep run`` does; only their help says what they
mean there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from evalsweep.options import click_option, click_options

if TYPE_CHECKING:
    from evalsweep.runs import Expansion

#: ``--debug``: tracebacks instead of one-line errors.
debug_option = click_option("debug")
#: ``--store``: the SQLite results store (env EVALSWEEP_STORE).
store_option = click_option("store")
#: ``--tasks`` of a command that reads stored results.
tasks_option = click_option("tasks", help="Comma-separated tasks, e.g. mmlu,gsm8k.")
#: ``--num-fewshot`` of a command that reads stored results.
stored_fewshot_option = click_option(
    "num_fewshot", help="Use results stored with this few-shot count."
)
#: ``--baseline``: the checkpoint the others are compared with.
baseline_option = click_option("baseline")
#: ``--subjects``: the per-subject MMLU table too.
subjects_option = click_option("subjects")
#: ``--fail-on-regression``: exit status 3 on a regression verdict.
fail_on_regression_option = click_option("fail_on_regression")
#: ``--steps``, ``--every``, ``--last``: which checkpoints of a run; ``--best-by``: which
#: of them is best.
selection_options = click_options(("steps", "every", "last", "best_by"))
#: ``--data-dir`` of `evalsweep mcp` (env EVALSWEEP_DATA_DIR).
data_dir_option = click_option(
    "data_dir", help="Local benchmark data for sweeps the agent starts. Env: EVALSWEEP_DATA_DIR."
)


def json_option(help: str) -> Any:
    """``--json``, with what this command prints as JSON."""
    return click_option("as_json", help=help)


def open_existing_store(store: Path | None) -> Any:
    """The results store at ``store`` (or the default), which must exist already."""
    from evalsweep.errors import StoreError
    from evalsweep.store import Store, default_store_path

    path = store or default_store_path()
    if not path.is_file():
        raise StoreError(f"no results store at {path}; run 'evalsweep run' first or pass --store")
    return Store(path)


def expand_checkpoints(references: Sequence[str], values: Mapping[str, Any]) -> Expansion:
    """Runs expanded into their checkpoints in step order (``--steps``, ``--every``,
    ``--last`` applied); incomplete checkpoints are named on stderr once, as is an
    order that was changed."""
    from evalsweep.cli._output import note, warn
    from evalsweep.errors import ConfigError
    from evalsweep.runs import Selection, expand_references, pinned_expansion

    selection = Selection.from_options(values.get("steps"), values.get("every"), values.get("last"))
    if values.get("pinned") is not None:  # an approved job's: exactly what was approved
        if selection.chosen:
            raise ConfigError("--pinned takes no --steps, --every or --last")
        return pinned_expansion(list(references), values["pinned"])
    expansion = expand_references(list(references), selection)
    for name, why in expansion.skipped:
        warn(f"{name} is incomplete ({why}); left out")
    for line in expansion.notes:
        note(line)
    return expansion


def show_extensions(registry: Any, as_json: bool) -> None:
    """The names of one kind of extension (``evalsweep backends``, ``targets --kinds``):
    each with where it comes from, what it is, or why a package's does not load."""
    import json

    import click
    from rich.text import Text

    from evalsweep.cli._output import say
    from evalsweep.plugins import listing

    rows = listing(registry)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        what = row["error"] or row["description"]
        say(Text.assemble((row["name"], "bold"), f"  {what} ({row['source']})"))


#: The most seconds any command's waiting option takes (a year): beyond it the clocks overflow.
MAX_SECONDS = 365 * 24 * 3600.0


class Seconds(click.ParamType):
    """A finite number of seconds, at least ``minimum`` (above it, with ``above``) and at
    most ``maximum`` (None: a caller's callback bounds it): ``nan``, ``inf`` and numbers
    past the clocks are a usage error."""

    name = "seconds"

    def __init__(
        self, minimum: float = 0.0, *, above: bool = False, maximum: float | None = MAX_SECONDS
    ):
        self.minimum, self.above, self.maximum = minimum, above, maximum

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        low = number <= self.minimum if self.above else number < self.minimum
        high = self.maximum is not None and number > self.maximum
        if not math.isfinite(number) or low or high:
            bound = f"{'above' if self.above else 'at least'} {self.minimum:g}"
            if self.maximum is not None:
                bound += f" and at most {self.maximum:,.0f}"
            self.fail(f"must be a finite number of seconds, {bound}, got {value}", param, ctx)
        return number
