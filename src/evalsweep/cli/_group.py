"""The ``evalsweep`` command group every command is registered on."""

from __future__ import annotations

import click

from evalsweep import __version__
from evalsweep.cli._output import no_color_option


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="evalsweep")
@no_color_option
def main() -> None:
    """Did this checkpoint really get better?

    Score several checkpoints on the same benchmarks and compare them side by side.
    """
