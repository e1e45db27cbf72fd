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

from evalsweep.agent._approvals import approve_quote, describe_quote
from evalsweep.agent._lifecycle import AuditedRunner, CommandResult, LifecycleTarget
from evalsweep.agent._secrets import SecretBox
from evalsweep.agent._server import build_server, serve
from evalsweep.agent._settings import AgentSettings

__all__ = [
    "AgentSettings",
    "AuditedRunner",
    "CommandResult",
    "LifecycleTarget",
    "SecretBox",
    "approve_quote",
    "build_server",
    "describe_quote",
    "serve",
]
