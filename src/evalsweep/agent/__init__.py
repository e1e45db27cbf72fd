"""Driving evalsweep from a chat agent, safely: the MCP server and what guards it.

An agent may plan a sweep, but only the person may spend money. This package
holds the server (``evalsweep mcp``) and the machinery that makes that true
whatever the agent sends: quotes bound to exact parameters, approvals given
outside the agent's reach, a spend ledger with hard limits from the person's
configuration, background jobs whose state lives in the results store,
encrypted secrets that are redacted wherever they could leak, and an audit
entry for every command, approval and refusal. It sits beside the evaluation
line and calls into it; nothing on the line imports it.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Imported on first use: a job's supervisor runs ``python -m evalsweep.agent._supervise``
# and must start in a fraction of a second, without the MCP SDK.
_EXPORTS = {
    "AgentSettings": "_settings",
    "approve_quote": "_approvals",
    "build_server": "_server",
    "describe_quote": "_approvals",
    "serve": "_server",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'evalsweep.agent' has no attribute {name!r}")
    return getattr(import_module(f"evalsweep.agent.{_EXPORTS[name]}"), name)
