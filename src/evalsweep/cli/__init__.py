"""The ``evalsweep`` command line: commands only, no logic.

Each command parses its options, calls into the library, and prints. The commands
live by what they work on (``_run``: run and read results; ``_watch``: score a
training run as it saves; ``_results``: move them; ``_code``: the sandbox;
``_agent``: targets, the MCP server, approvals, secrets); what they print goes
through ``_output``, and options several commands share are declared once
(``_shared``, from :mod:`evalsweep.options`).
"""

from evalsweep.cli import _agent, _code, _results, _run, _watch  # noqa: F401  (registers the commands)
from evalsweep.cli._group import main

__all__ = ["main"]
