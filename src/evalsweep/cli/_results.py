"""Commands that move results: export-results, import-results, import-lm-eval, serve, audit."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.text import Text

from evalsweep.cli import _output
from evalsweep.cli._group import main
from evalsweep.cli._output import no_color_option, say, user_errors
from evalsweep.cli._shared import (
    debug_option,
    json_option,
    open_existing_store,
    store_option,
    tasks_option,
)
from evalsweep.options import task_list


@main.command("export-results")
@click.argument("checkpoints", nargs=-1, required=True)
@tasks_option
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the pieces.",
)
@click.option("--max-bytes", type=int, default=5_000_000, show_default=True, help="Largest piece.")
@store_option
@json_option("Print the pieces as JSON.")
@debug_option
@user_errors
def export_results(
    checkpoints: tuple[str, ...],
    tasks: str,
    out: Path,
    max_bytes: int,
    store: Path | None,
    as_json: bool,
    debug: bool,
) -> None:
    """Write the stored rows of CHECKPOINTS on the tasks as JSONL pieces (to move results)."""
    from evalsweep.compute import export_pieces
    from evalsweep.tasks import expand_suites, get_task

    names = [get_task(name).name for name, _ in expand_suites(task_list(tasks), None)]
    with open_existing_store(store) as results_store:
        pieces = export_pieces(results_store, list(checkpoints), names, out, max_bytes)
    if as_json:
        click.echo(json.dumps({"pieces": [p.as_dict() for p in pieces]}))
        return
    rows = sum(p.rows for p in pieces)
    say(f"wrote {len(pieces)} pieces ({rows} lines) to {out}")


@main.command("import-results")
@click.argument("pieces", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@store_option
@debug_option
@user_errors
def import_results(pieces: tuple[Path, ...], store: Path | None, debug: bool) -> None:
    """Add the rows of pieces written by export-results (files, or their folder) to the store.

    A piece listed in the export's manifest.json is checked against its sha256 and
    line count; pieces are imported in order and one bad piece stops the import with
    the rows of the pieces before it kept, so the same command resumes.
    """
    from evalsweep.compute import PieceError, import_piece, pieces_to_import
    from evalsweep.errors import StoreError
    from evalsweep.store import Store, default_store_path

    where = store or default_store_path()
    planned = pieces_to_import(list(pieces))
    rows = done = 0
    with Store(where) as results_store:
        for path, expected in planned:
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise StoreError(f"cannot read results piece {path}: {exc.strerror}") from None
            try:
                rows += import_piece(
                    results_store,
                    data,
                    expected.sha256 if expected else None,
                    name=str(path),
                    expected_rows=expected.rows if expected else None,
                )
            except PieceError as exc:
                kept = (
                    f"the rows of the {done} pieces before it are stored in {where}"
                    if done
                    else f"nothing was imported into {where}"
                )
                raise PieceError(
                    exc.piece,
                    exc.line,
                    f"{exc.problem}; {kept}; export this piece again (or fix it) and run "
                    "the same command to resume",
                ) from None
            done += 1
    say(f"imported {rows} rows from {done} piece{'' if done == 1 else 's'} into {where}")


@main.command()
@click.option("--kind", help="Only entries of this kind (command, approval, refusal...).")
@click.option("--target", help="Only entries for this target.")
@store_option
@json_option("Print the entries as JSON.")
@no_color_option
@debug_option
@user_errors
def audit(
    kind: str | None, target: str | None, store: Path | None, as_json: bool, debug: bool
) -> None:
    """The audit log: every command sent to a target, every approval and refusal."""
    from evalsweep.report import render_audit

    with open_existing_store(store) as results_store:
        entries = results_store.audit_entries(kind=kind, target=target)
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    _output.stdout.print(render_audit(entries))


@main.command("import-lm-eval")
@click.argument("folder", type=click.Path(file_okay=False, exists=True, path_type=Path))
@store_option
@json_option("Print what was imported as JSON.")
@debug_option
@user_errors
def import_lm_eval_command(folder: Path, store: Path | None, as_json: bool, debug: bool) -> None:
    """Store lm-evaluation-harness's --log_samples output found under FOLDER.

    Afterwards `evalsweep compare`, `flips` and `report` pair its per-question
    scores: name the model as lm-eval did (its pretrained= value) and the task
    as lm-eval called it.
    """
    from dataclasses import asdict

    from evalsweep.importers import import_lm_eval
    from evalsweep.store import Store, default_store_path

    with Store(store or default_store_path()) as results_store:
        runs = import_lm_eval(folder, results_store)
    if as_json:
        click.echo(json.dumps([asdict(run) for run in runs], indent=2))
        return
    for run in runs:
        tasks = ", ".join(f"{task} ({n} documents)" for task, n in run.tasks.items()) or "nothing"
        reference, identity = run.checkpoint["reference"], run.checkpoint["identity"]
        say(Text.assemble((reference, "bold"), f" ({identity}): {tasks}"))
        if run.skipped:
            say(f"  no samples for: {', '.join(run.skipped)}", style="dim")


@main.command()
@store_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address.")
@click.option("--port", type=int, default=8000, show_default=True, help="Port (0: any free).")
@debug_option
@user_errors
def serve(store: Path | None, host: str, port: int, debug: bool) -> None:
    """Browse the stored runs as HTML reports, on this machine only."""
    from evalsweep.report._serve import serve as serve_store
    from evalsweep.store import default_store_path

    serve_store(store or default_store_path(), host, port)
