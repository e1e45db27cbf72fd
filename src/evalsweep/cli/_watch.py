"""``evalsweep watch``: score each checkpoint of a training run as it is saved.

The run is listed every ``--interval`` seconds (a directory listing, or one Hub
request; nothing else runs while idle). A checkpoint is scored once it is complete
and its files have not changed for ``--settle`` seconds, by the same sweep as
``evalsweep run`` over every complete checkpoint so far: the store already holds
the earlier ones, so only the new checkpoint is computed, and a restarted watch
resumes where it stopped. Each new checkpoint's verdicts (against the baseline and
the checkpoint before it, under the multiplicity control of the whole run so far)
are printed as lines; a regression can end the watch with status 3
(``--on-regression fail``) or run a command (an argument list, never a shell line).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from evalsweep.cli import _output
from evalsweep.cli._group import main
from evalsweep.cli._output import no_color_option, note, say, user_errors, warn
from evalsweep.cli._shared import Seconds
from evalsweep.options import OPTIONS, click_options, task_list

#: ``evalsweep run``'s options that a watch takes too (not how one document is shown).
WATCH_OPTIONS = tuple(
    o.name
    for o in OPTIONS
    if o.name not in {"as_json", "out", "progress_lines", "env_stdin", "fail_on_regression"}
)


@main.command()
@click.argument("run_reference", metavar="RUN")
@click_options(WATCH_OPTIONS)
@click.option(
    "--interval",
    type=Seconds(0.1),
    default=30.0,
    show_default=True,
    help="Seconds between looks for new checkpoints.",
)
@click.option(
    "--settle",
    type=Seconds(0.0),
    default=10.0,
    show_default=True,
    help="Seconds a checkpoint's files must stay unchanged before it is scored.",
)
@click.option(
    "--on-regression",
    "on_regression",
    help="When a new checkpoint regresses (against the baseline or the one before): 'fail' "
    "ends the watch with status 3; anything else is a command, split as a shell would split "
    "it but run without one, with EVALSWEEP_CHECKPOINT, EVALSWEEP_STEP and EVALSWEEP_VERDICTS "
    "set.",
)
@click.option(
    "--idle-exit",
    type=Seconds(0.0),
    default=None,
    help="Stop after this many seconds without a new checkpoint (default: watch until "
    "interrupted).",
)
@no_color_option
@user_errors
def watch(
    run_reference: str,
    interval: float,
    settle: float,
    on_regression: str | None,
    idle_exit: float | None,
    **values: Any,
) -> None:
    """Score each new checkpoint of RUN (a folder of checkpoint folders, or org/model@step*)
    as soon as it is complete, and print its verdicts."""
    from evalsweep.errors import ConfigError

    command = None
    if on_regression and on_regression != "fail":
        try:
            command = shlex.split(on_regression)
        except ValueError as exc:
            raise ConfigError(f"--on-regression {on_regression!r}: {exc}") from None
        if not command:
            raise ConfigError("--on-regression is empty: give 'fail' or a command")
    scored: set[str] = set()
    said: set[tuple[str, str]] = set()
    looked = _Looked()
    last_new = time.monotonic()
    try:
        while True:
            ready, steps = looked.again(run_reference) or _ready(
                run_reference, values, settle, said, looked
            )
            new = [r for r in ready if r not in scored]
            if new:
                regressed = _score(ready, steps, new, values, first=not scored)
                scored.update(ready)
                last_new = time.monotonic()
                for reference, step, lines in regressed:
                    _act(on_regression, command, reference, step, lines)
            elif idle_exit is not None and time.monotonic() - last_new >= idle_exit:
                note(f"no new checkpoint for {idle_exit:g} s; stopping")
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        note("stopped; everything scored is in the store")


class _Looked:
    """The last look at a local run folder, kept while nothing in it changes.

    An idle poll then costs one listing of the run folder and a ``stat`` of each
    entry: a new or renamed checkpoint folder, or a file added to one, changes its
    folder's modification time. While a checkpoint is incomplete or settling, every
    poll looks again in full.
    """

    def __init__(self) -> None:
        self.signature: tuple[tuple[str, int], ...] | None = None
        self.found: tuple[list[str], dict[str, int]] | None = None

    @staticmethod
    def sign(reference: str) -> tuple[tuple[str, int], ...] | None:
        path = Path(reference).expanduser()
        if "@" in reference and not path.exists():
            return None  # a Hub pattern: asked each time
        try:
            with os.scandir(path) as entries:
                return tuple(sorted((e.name, e.stat().st_mtime_ns) for e in entries))
        except OSError:
            return None

    def again(self, reference: str) -> tuple[list[str], dict[str, int]] | None:
        """What the last look found, if the folder is as it was then."""
        if self.found is None or self.signature is None:
            return None
        return self.found if self.sign(reference) == self.signature else None

    def keep(self, reference: str, found: tuple[list[str], dict[str, int]], settled: bool) -> None:
        self.signature = self.sign(reference) if settled else None
        self.found = found if settled else None


def _ready(
    reference: str,
    values: dict[str, Any],
    settle: float,
    said: set[tuple[str, str]],
    looked: _Looked,
) -> tuple[list[str], dict[str, int]]:
    """The run's complete checkpoints whose files have been still for ``settle`` seconds,
    in step order, and their steps (an incomplete one is named once)."""
    from evalsweep.errors import CheckpointError
    from evalsweep.runs import Selection, expand_references, run_kind

    path = Path(reference).expanduser()
    if run_kind(reference) is None:
        if path.is_dir():
            return [], {}  # no checkpoint folder yet
        raise CheckpointError(f"run {reference!r}: not a folder and not a Hub pattern")
    selection = Selection.from_options(values.get("steps"), values.get("every"), values.get("last"))
    try:
        expansion = expand_references([reference], selection)
    except CheckpointError as exc:
        if "no complete checkpoints" in str(exc) or "keeps none" in str(exc):
            return [], {}
        raise
    for name, why in expansion.skipped:
        if (name, why) not in said:
            said.add((name, why))
            note(f"{name}: {why}; waiting")
    now = time.time()
    signature = looked.sign(reference)
    ready = [r for r in expansion.references if _still(Path(r), now, settle)]
    found = (ready, {r: expansion.steps[r] for r in ready})
    settled = not expansion.skipped and len(ready) == len(expansion.references)
    looked.keep(reference, found, settled and signature == looked.sign(reference))
    return found


def _still(folder: Path, now: float, settle: float) -> bool:
    """No file of the folder changed in the last ``settle`` seconds (a Hub step: always)."""
    if not folder.is_dir():
        return True
    newest = max((p.stat().st_mtime for p in folder.iterdir() if p.is_file()), default=0.0)
    return now - newest >= settle


def _score(
    ready: list[str],
    steps: dict[str, int],
    new: list[str],
    values: dict[str, Any],
    *,
    first: bool,
) -> list[tuple[str, int | None, list[str]]]:
    """Run the sweep over every ready checkpoint (only the missing rows are computed) and
    print the verdict lines of the new ones; return those that regressed, with their lines."""
    from evalsweep.compute import SweepJob, get_target, run_on_target
    from evalsweep.options import build_spec
    from evalsweep.report import progress_display, trends
    from evalsweep.store import Store, default_store_path

    spec = build_spec(ready, values)
    baseline = values.get("baseline")
    if baseline not in ready:
        baseline = None  # until the named baseline is saved, the first one is
    best_by = tuple(task_list(values["best_by"])) if values.get("best_by") else None
    job = SweepJob(spec, baseline, steps if len(ready) > 1 else None, best_by)
    with Store(values["store"] or default_store_path()) as store:
        where = get_target(values["target"], store=store)
        with progress_display(_output.stderr) as shown:
            document, result = run_on_target(where, job, store, shown, sys.argv)
    computed = {item.checkpoint.reference for item in result.results if item.computed}
    if first:  # a restart: what the store held was shown (and acted on) before
        resumed = [r for r in new if r not in computed]
        if resumed:
            note(f"{len(resumed)} checkpoint(s) already in the store: not computed again")
            new = [r for r in new if r in computed]
    lines_of: dict[str, list[str]] = {r: [] for r in new}
    regressed: dict[str, bool] = {}
    for trend in trends(document) if document.steps else []:
        for point in trend.points:
            if point.reference not in lines_of:
                continue
            lines_of[point.reference].append(_verdict_line(trend, point))
            rows = [point.vs_baseline, point.vs_previous]
            if any(row is not None and row.verdict == "regression" for row in rows):
                regressed[point.reference] = True
    for reference in new:
        step = steps.get(reference)
        head = f"step {step}" if step is not None else reference
        if not lines_of[reference]:
            say(f"{head}: scored (the first checkpoint: the baseline of the comparisons)")
        for line in lines_of[reference]:
            style = "bold red" if "▼" in line else ("green" if "▲" in line else None)
            say(f"{head}: {line}", style=style)
    return [(r, steps.get(r), lines_of[r]) for r in new if regressed.get(r)]


def _verdict_line(trend: Any, point: Any) -> str:
    from evalsweep._numbers import difference, fixed, p_value, score_interval
    from evalsweep.report._table import MARKS

    text = f"{trend.title}: {fixed(point.value)}"
    if point.low is not None and point.high is not None:
        text += f" (95% CI {score_interval(point.low, point.high)})"
    for word, row in (("vs baseline", point.vs_baseline), ("vs previous", point.vs_previous)):
        if row is not None:
            mark = MARKS.get(row.verdict.value, ("?", ""))[0]
            text += (
                f"; {word} {mark} {difference(row.delta)} (adjusted p = {p_value(row.p_adjusted)})"
            )
    return text


def _act(
    on_regression: str | None,
    command: list[str] | None,
    reference: str,
    step: int | None,
    lines: list[str],
) -> None:
    """What ``--on-regression`` asks for, once per regressed checkpoint."""
    if on_regression == "fail":
        _output.fail(f"{reference} regressed; stopping (--on-regression fail)", 3)
    if command is None:
        return
    from evalsweep._quiet import environment_for_others

    environment = environment_for_others()
    environment.update(
        EVALSWEEP_CHECKPOINT=reference,
        EVALSWEEP_STEP="" if step is None else str(step),
        EVALSWEEP_VERDICTS="\n".join(lines),
    )
    try:
        done = subprocess.run(command, env=environment, check=False)  # no shell: a list
    except OSError as exc:
        warn(f"--on-regression: cannot run {command[0]!r} ({exc.strerror or exc})")
        return
    if done.returncode:
        warn(f"--on-regression: {command[0]} exited with status {done.returncode}")
