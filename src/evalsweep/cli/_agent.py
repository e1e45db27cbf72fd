"""Commands around the line: targets, prices, the MCP server, approvals, secrets."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from evalsweep.cli import _output
from evalsweep.cli._group import main
from evalsweep.cli._output import no_color_option, say, user_errors
from evalsweep.cli._shared import (
    data_dir_option,
    debug_option,
    json_option,
    open_existing_store,
    show_extensions,
    store_option,
)


@main.command("targets")
@click.option(
    "--kinds",
    is_flag=True,
    help="List the kinds a [targets.NAME] table may name instead: evalsweep's own and "
    "installed packages'.",
)
@json_option("Print the targets as JSON.")
@no_color_option
@debug_option
@user_errors
def targets_command(kinds: bool, as_json: bool, debug: bool) -> None:
    """List where sweeps can run (--target NAME): kind, hardware and hourly rate."""
    if kinds:
        from evalsweep.compute._kinds import TARGET_KINDS

        show_extensions(TARGET_KINDS, as_json)
        return
    from evalsweep.compute import load_targets
    from evalsweep.report import render_targets

    rows = [t.info().as_dict() for t in load_targets().values()]
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    _output.stdout.print(render_targets(rows))


@main.command("quote")
@click.argument("gpu", default="H100")
@click.option("--count", type=int, default=1, show_default=True, help="GPUs on the machine.")
@json_option("Print the quote as JSON.")
@debug_option
@user_errors
def quote_command(gpu: str, count: int, as_json: bool, debug: bool) -> None:
    """Price of a cloud GPU from the shipped catalog snapshot (offline)."""
    from evalsweep.compute import quote

    found = quote(gpu, count).as_dict()
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    say(
        f"{found['count']} x {found['gpu']}: {found['hourly_price']:.2f} USD/h on "
        f"{found['offer_cloud']} {found['offer_instance_type']} (catalog {found['catalog']})"
    )


@main.command("mcp")
@store_option
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address (--http).")
@click.option("--port", type=int, default=8765, show_default=True, help="Port (--http).")
@data_dir_option
@debug_option
@user_errors
def mcp_command(
    store: Path | None, use_http: bool, host: str, port: int, data_dir: Path | None, debug: bool
) -> None:
    """Serve evalsweep to a chat agent over MCP (stdio, or --http on loopback).

    Limits and approval rules come from your configuration ([limits], [approval]);
    no tool can change them. See docs/agent.md.
    """
    from evalsweep.agent import serve
    from evalsweep.store import default_store_path

    serve(
        store or default_store_path(),
        transport="streamable-http" if use_http else "stdio",
        host=host,
        port=port,
        data_dir=str(data_dir.resolve()) if data_dir else None,
    )


@main.command()
@click.argument("quote_id")
@store_option
@debug_option
@user_errors
def approve(quote_id: str, store: Path | None, debug: bool) -> None:
    """Approve QUOTE_ID (a price preview an agent asked for), in your own terminal.

    Shows what the quote covers and asks you to confirm; it needs a terminal, so
    an agent cannot approve in your place by piping an answer.
    """
    import getpass

    from evalsweep.agent import approve_quote as record_approval
    from evalsweep.agent._approvals import approval_rows, audit_refusal, refusable
    from evalsweep.agent._quotes import GateError

    with open_existing_store(store) as results_store:
        try:
            if not sys.stdin.isatty():
                raise GateError(
                    "approve: needs a terminal: run evalsweep approve yourself, not through a pipe"
                )
            # Unknown, used or expired: said (and audited) before anything is asked.
            quote = refusable(results_store, quote_id)
            for row in approval_rows(results_store, quote, _terminal_width()):
                say(row)  # folded to the terminal: it wraps nothing itself
            if not click.confirm(f"Approve {quote_id}?", default=False):
                results_store.audit_event(
                    "refusal",
                    f"declined {quote_id} in the terminal",
                    target=quote.target,
                    detail={"quote": quote_id},
                )
                say("not approved")
                sys.exit(1)
            record_approval(results_store, quote_id, f"{getpass.getuser()} in a terminal")
        except GateError as exc:  # every refusal of this command is audited, here
            audit_refusal(
                results_store,
                str(exc),
                received=json.dumps(sys.argv[1:]),
                tool="evalsweep approve",
                quote_id=exc.quote_id,
                target=exc.target,
            )
            raise
    say(f"approved {quote_id}")


def _terminal_width() -> int:
    """The columns of the terminal ``approve`` prints to (less one: a row that fills the
    last column wraps on some terminals), or ``COLUMNS``, or 80."""
    import os
    import shutil

    try:
        columns = os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError):
        columns = 0
    if columns <= 0:
        columns = shutil.get_terminal_size((80, 24)).columns
    return max(columns - 1, 1)


@main.group()
def secrets() -> None:
    """Secrets for jobs (HF_TOKEN, API keys): encrypted at rest, shown by name only."""


@secrets.command("set")
@click.argument("name")
@debug_option
@user_errors
def secrets_set(name: str, debug: bool) -> None:
    """Store secret NAME; the value is read from the terminal (hidden) or stdin."""
    from evalsweep.secrets import SecretBox

    if sys.stdin.isatty():
        value = click.prompt(f"value of {name}", hide_input=True)
    else:
        value = sys.stdin.readline().rstrip("\n")
    SecretBox().set(name, value)
    say(f"stored {name}")


@secrets.command("list")
@json_option("Print the names as JSON.")
@debug_option
@user_errors
def secrets_list(as_json: bool, debug: bool) -> None:
    """List the names of stored secrets (never their values)."""
    from evalsweep.secrets import SecretBox

    names = SecretBox().names()
    if as_json:
        click.echo(json.dumps(names))
        return
    for name in names:
        say(name)


@secrets.command("remove")
@click.argument("name")
@debug_option
@user_errors
def secrets_remove(name: str, debug: bool) -> None:
    """Delete secret NAME."""
    from evalsweep.secrets import SecretBox

    SecretBox().remove(name)
    say(f"removed {name}")
