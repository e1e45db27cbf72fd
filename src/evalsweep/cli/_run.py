"""Commands that run sweeps and read their results: run, compare, flips, report, tasks, demo."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from evalsweep.cli import _output
from evalsweep.cli._group import main
from evalsweep.cli._output import no_color_option, say, show, user_errors
from evalsweep.cli._shared import (
    baseline_option,
    debug_option,
    expand_checkpoints,
    fail_on_regression_option,
    json_option,
    open_existing_store,
    selection_options,
    show_extensions,
    store_option,
    stored_fewshot_option,
    subjects_option,
    tasks_option,
)
from evalsweep.options import click_option, click_options, task_list


@main.command()
@click.argument("checkpoints", nargs=-1, required=True)
@click_options()
@no_color_option
@user_errors
def run(checkpoints: tuple[str, ...], **values: Any) -> None:
    """Score CHECKPOINTS (folders, org/name or org/name@revision) on the tasks, side by side.

    A folder of checkpoint folders (checkpoint-N, step-N, global_stepN, iter_N...) or a
    Hub pattern (org/model@step*) is a training run: its checkpoints in step order, each
    compared with the first and with the one before it.
    """
    from evalsweep.comparison import pick_baseline
    from evalsweep.compute import LineProgress, SweepJob, get_target, run_on_target
    from evalsweep.options import build_spec
    from evalsweep.report import progress_display, write_outputs
    from evalsweep.store import Store, default_store_path

    received = _environment_from_stdin() if values["env_stdin"] else []
    expansion = expand_checkpoints(checkpoints, values)
    checkpoints = tuple(expansion.references)
    spec = build_spec(checkpoints, values)
    baseline, as_json, out = values["baseline"], values["as_json"], values["out"]
    pick_baseline(list(checkpoints), baseline)  # a wrong --baseline fails before any compute
    best_by = tuple(task_list(values["best_by"])) if values["best_by"] else None
    job = SweepJob(spec, baseline, expansion.steps if expansion.one_run else None, best_by)
    with Store(values["store"] or default_store_path()) as results_store:
        where = get_target(values["target"], store=results_store)
        bars = progress_display(_output.stderr, enabled=not as_json or sys.stderr.isatty())
        with bars as shown:
            progress = LineProgress() if values["progress_lines"] else shown
            document, result = run_on_target(where, job, results_store, progress, sys.argv)
    if received:
        document = dataclasses.replace(document, secrets_received=received)  # names only
    if out:
        write_outputs(out, document, result)
    show(document, as_json, values["subjects"])
    if out and not as_json:
        say(f"wrote {out}/results.json and {out}/samples.jsonl", style="dim")
    if values["fail_on_regression"] and _regressed(document):
        sys.exit(3)


def _regressed(document: Any) -> bool:
    """Any regression verdict, against the baseline or (a run) since the checkpoint before."""
    rows = [*document.comparisons, *(document.previous or [])]
    return any(c.verdict == "regression" for c in rows)


def _stored_document(
    store: Path | None,
    checkpoints: tuple[str, ...],
    values: dict[str, Any],
    *,
    scores_only: bool,
) -> tuple[Any, Any, list[str]]:
    """Stored results of CHECKPOINTS (runs expanded) and their document, as ``compare``
    and ``report`` show them; also the references in order."""
    from evalsweep.comparison import compare_results, compare_run, pick_baseline
    from evalsweep.engine import stored_sweep
    from evalsweep.report import results_document, with_best

    expansion = expand_checkpoints(checkpoints, values)
    references = expansion.references
    baseline = values.get("baseline")
    pick_baseline(references, baseline)
    with open_existing_store(store) as results_store:
        result = stored_sweep(
            results_store,
            references,
            task_list(values["tasks"]),
            values.get("num_fewshot"),
            scores_only=scores_only,
        )
    if expansion.one_run:
        comparisons, previous = compare_run(result, baseline)
        document = results_document(
            result, sys.argv, comparisons, steps=expansion.steps, previous=previous
        )
        best_by = task_list(values["best_by"]) if values.get("best_by") else None
        document = with_best(document, result, best_by)
    else:
        document = results_document(result, sys.argv, compare_results(result, baseline))
    return document, result, references


def _environment_from_stdin() -> list[str]:
    """Secrets sent by the machine that started this run: a JSON object on stdin, into the
    environment of this process (model downloads, API calls); returns their names. Each
    name and value is held to the rule of a stored secret (``evalsweep.secrets``)."""
    from evalsweep.errors import ConfigError
    from evalsweep.secrets import check_name, check_value

    bad = "--env-stdin: stdin is not a JSON object of names and values"
    try:
        values = json.loads(sys.stdin.readline() or "{}")
    except (ValueError, RecursionError):
        raise ConfigError(bad) from None
    if not isinstance(values, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in values.items()
    ):
        raise ConfigError(bad)
    for name, value in values.items():
        try:
            check_name(name)
            check_value(name, value)
        except ConfigError as exc:
            raise ConfigError(f"--env-stdin: {exc}") from None
    os.environ.update(values)
    return sorted(values)


@main.command()
@click.argument("checkpoints", nargs=-1, required=True)
@tasks_option
@stored_fewshot_option
@baseline_option
@selection_options
@subjects_option
@fail_on_regression_option
@store_option
@json_option("Print the result document as JSON.")
@no_color_option
@debug_option
@user_errors
def compare(
    checkpoints: tuple[str, ...],
    subjects: bool,
    fail_on_regression: bool,
    store: Path | None,
    as_json: bool,
    debug: bool,
    **values: Any,
) -> None:
    """Compare stored results of CHECKPOINTS, from any runs, without calling a model."""
    document, _, _ = _stored_document(store, checkpoints, values, scores_only=True)
    show(document, as_json, subjects)
    if fail_on_regression and _regressed(document):
        sys.exit(3)


@main.command()
@click.argument("candidate")
@click_option("baseline", required=True, help="The checkpoint to compare against.")
@tasks_option
@stored_fewshot_option
@click.option(
    "--direction",
    type=click.Choice(["both", "regressed", "fixed"]),
    default="both",
    show_default=True,
    help="regressed: baseline right, candidate wrong; fixed: the reverse.",
)
@click.option("--max", "max_rows", type=int, default=50, show_default=True, help="Rows to show.")
@store_option
@json_option("Print all flips as JSON.")
@no_color_option
@debug_option
@user_errors
def flips(
    candidate: str,
    baseline: str,
    tasks: str,
    num_fewshot: int | None,
    direction: str,
    max_rows: int,
    store: Path | None,
    as_json: bool,
    debug: bool,
) -> None:
    """List the questions CANDIDATE got wrong that --baseline got right, and the reverse."""
    from evalsweep.comparison import find_flips
    from evalsweep.engine import stored_sweep
    from evalsweep.report import render_flips

    with open_existing_store(store) as results_store:
        result = stored_sweep(results_store, [baseline, candidate], task_list(tasks), num_fewshot)
    rows = [f.to_dict() for f in find_flips(result, baseline, candidate)]
    if direction != "both":
        rows = [r for r in rows if r["direction"] == direction]
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    _output.stdout.print(render_flips(rows[:max_rows], baseline, candidate))
    if len(rows) > max_rows:
        say(f"{len(rows) - max_rows} more; use --max or --json", style="dim")


@main.command()
@click.argument("checkpoints", nargs=-1, required=True)
@tasks_option
@stored_fewshot_option
@baseline_option
@selection_options
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a self-contained HTML report (works offline).",
)
@click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a compact Markdown summary (for pull requests and chat).",
)
@store_option
@debug_option
@user_errors
def report(
    checkpoints: tuple[str, ...],
    html_path: Path | None,
    markdown_path: Path | None,
    store: Path | None,
    debug: bool,
    **values: Any,
) -> None:
    """Write an HTML and/or Markdown report for stored results of CHECKPOINTS."""
    from evalsweep.comparison import find_flips, pick_baseline
    from evalsweep.errors import EvalsweepError
    from evalsweep.report import render_markdown, write_html, write_text

    if not html_path and not markdown_path:
        raise EvalsweepError("nothing to write: pass --html FILE and/or --markdown FILE")
    document, result, references = _stored_document(store, checkpoints, values, scores_only=False)
    chosen = pick_baseline(references, values.get("baseline"))
    flips = {
        ref: [f.to_dict() for f in find_flips(result, chosen, ref)]
        for ref in references
        if ref != chosen
    }
    if html_path:
        write_html(html_path, document, flips)
        say(f"wrote {html_path}")
    if markdown_path:
        write_text(markdown_path, render_markdown(document, flips))
        say(f"wrote {markdown_path}")


@main.command("tasks")
@json_option("Print as JSON.")
def list_tasks_command(as_json: bool) -> None:
    """List the benchmarks evalsweep can run (its own and installed packages'), and the
    suites that name several at once."""
    from evalsweep.errors import EvalsweepError
    from evalsweep.tasks import TASKS, get_task, list_suites

    rows: list[dict[str, Any]] = []
    for entry in sorted(TASKS.entries(), key=lambda e: e.name):
        row: dict[str, Any] = {"name": entry.name, "kind": "task"}
        try:
            task = get_task(entry.name)
        except EvalsweepError as exc:
            if entry.builtin:
                raise
            row["error"] = str(exc)  # a package's task that does not load: listed, and why
        else:
            row.update(
                version=task.version,
                num_fewshot=task.default_num_fewshot,
                metrics=[m.key for m in task.metrics],
            )
        row.update(source=entry.source, entry_point=entry.entry_point)
        rows.append(row)
    suites: list[dict[str, Any]] = [
        {
            "name": suite.name,
            "kind": "suite",
            "description": suite.description,
            "tasks": [{"name": task, "num_fewshot": shots} for task, shots in suite.members],
        }
        for suite in list_suites()
    ]
    if as_json:
        click.echo(json.dumps(rows + suites, indent=2))
        return
    for row in rows:
        if "error" in row:
            say(Text.assemble((row["name"], "bold"), f"  ({row['source']}) {row['error']}"))
            continue
        details = f"  {row['version']}, {row['num_fewshot']}-shot, metrics: "
        details += ", ".join(row["metrics"]) + f" ({row['source']})"
        say(Text.assemble((row["name"], "bold"), details))
    if suites:
        say("")
        say("suites (--tasks NAME runs these tasks at these few-shot counts):")
    for suite in suites:
        members = ", ".join(f"{t['name']} {t['num_fewshot']}-shot" for t in suite["tasks"])
        say(Text.assemble((suite["name"], "bold"), f"  {suite['description']}: {members}"))


@main.command("backends")
@json_option("Print as JSON.")
def list_backends_command(as_json: bool) -> None:
    """List the model backends (--backend NAME): evalsweep's own and installed packages'."""
    from evalsweep.models import BACKENDS

    show_extensions(BACKENDS, as_json)


@main.command()
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where to build the demo checkpoints (default: a temporary folder).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the training run.")
@json_option("Print the result document as JSON.")
@no_color_option
@debug_option
@user_errors
def demo(workdir: Path | None, seed: int, as_json: bool, debug: bool) -> None:
    """Offline demo: train a tiny model in three lessons and catch the checkpoint that regressed.

    Lesson 1 teaches half of an MMLU slice, lesson 2 all of it, lesson 3 only an
    ARC-Easy slice (so the model forgets MMLU). The three checkpoints are then
    compared on both slices by the same pipeline and statistics as `evalsweep run`.
    """
    from evalsweep.demo import run_demo

    document = run_demo(workdir, console=_output.stderr, quiet=as_json, seed=seed)
    show(document, as_json, subjects=True)
    if not as_json:
        say(document.demo.verdict if document.demo else "", style="bold")
