"""The MCP tools for targets with a lifecycle: quote, deploy, stop, start, terminate.

The targets are the compute package's (``evalsweep.compute.LifecycleTarget``,
loaded with the server's store). Each action needs its own approved quote (a
deploy quote does not terminate), calls the target's ``deploy``, ``stop``,
``start`` or ``terminate`` in a worker thread, whose commands go through the
target's audited runner, and opens or closes the target's item in the spend
ledger. (Annotations are evaluated at definition time on purpose; see ``_state``.)
"""

import functools
from typing import Annotated, Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context
from pydantic import Field

from evalsweep.agent import _ledger as ledger
from evalsweep.agent._approvals import check_gate, refuse
from evalsweep.agent._quotes import GateError, create_quote, params_hash
from evalsweep.agent._state import SPEND, WRITE, AgentState, ToolRegistrar
from evalsweep.agent._tool_results import ActionDone, QuoteOut
from evalsweep.errors import EvalsweepError, TargetError

ACTIONS = ("deploy", "stop", "start", "terminate")
QuoteId = Annotated[str, Field(description="The quote_id quote_action returned for this action")]


def register_lifecycle_tools(state: AgentState, tool: ToolRegistrar, consent_type: Any) -> None:
    """Add quote_action, deploy, stop, start and terminate to the server ``tool`` registers with."""

    @tool(WRITE)  # records a quote; changes no machine
    async def quote_action(
        ctx: Context,
        target: Annotated[str, Field(description="A target whose list_targets row has lifecycle")],
        action: Annotated[str, Field(description="deploy, stop, start or terminate")],
    ) -> QuoteOut:
        """Price preview of deploy, stop, start or terminate on a target that has a lifecycle."""
        chosen = state.lifecycle_target(target)
        if action not in ACTIONS:
            raise TargetError(f"action {action!r}: use one of {', '.join(ACTIONS)}")
        info = chosen.info()
        rate = state.rate(target)
        effect = {
            "deploy": f"billing starts at ${rate:.2f}/h until stop or terminate",
            "start": f"billing resumes at ${rate:.2f}/h until stop or terminate",
            "stop": "compute billing stops; the disk is kept",
            "terminate": "the machine and its disk are destroyed; billing ends",
        }[action]
        bills = action in ("deploy", "start")
        quote = create_quote(
            state.store,
            kind="lifecycle",
            target=target,
            params={"kind": "lifecycle", "target": target, "action": action},
            preview={
                "hardware": info.hardware,
                "effect": effect,
                "estimated_seconds": 3600.0 if bills else 0.0,
                "max_cost": state.worst_case(rate, state.connection(ctx)) if bills else 0.0,
            },
            hourly_rate=rate,
            estimated_cost=rate if bills else 0.0,
            needs_approval=True,
            ttl_s=state.settings.quote_ttl_s,
        )
        return state.quote_out(quote, info.currency)

    async def act(action: str, quote_id: str, consent: Any, ctx: Context) -> ActionDone:
        store = state.store
        state.check_quote_id(quote_id)
        state.apply_consent(quote_id, consent, ctx)
        quote = state.load_or_refuse(quote_id)
        state.pre_gate(quote, "lifecycle", action)
        try:
            state.lifecycle_target(quote.target)
        except TargetError:
            raise refuse(
                store, quote_id, quote.target, f"{action}: target has no lifecycle"
            ) from None
        connection = state.connection(ctx)
        item = f"{quote.target}:{action}:{quote_id}"
        bills = action in ("deploy", "start")
        if bills:  # the machine's worst case is reserved before it is asked for
            try:
                state.jobs.reserve(item, connection, quote, "machine")
            except GateError as exc:
                raise refuse(store, quote_id, quote.target, str(exc)) from None
        wanted = {"kind": "lifecycle", "target": quote.target, "action": action}
        try:
            check_gate(store, quote_id, kind="lifecycle", current_hash=params_hash(wanted),
                       used_by=action)  # fmt: skip
            outcome = await anyio.to_thread.run_sync(
                functools.partial(state.run_lifecycle, quote.target, action)
            )
        except BaseException as exc:
            if bills:
                ledger.release(store, item)
            if isinstance(exc, EvalsweepError) and not isinstance(exc, GateError):
                store.audit_event(
                    "lifecycle",
                    state.secrets.redact(f"{action} {quote.target} failed: {exc}"),
                    target=quote.target,
                    detail={"quote": quote_id, "connection": connection, "error": True},
                )
            raise
        store.audit_event(
            "lifecycle",
            f"{action} {quote.target}: {outcome}",
            target=quote.target,
            detail={"quote": quote_id, "connection": connection},
        )
        if not bills:
            for open_item in ledger.open_items(store):
                if open_item[1] == "machine" and open_item[3] == quote.target:
                    ledger.close_item(store, open_item[0])
        return ActionDone(target=quote.target, action=action, quote_id=quote_id, result=outcome)

    @tool(SPEND)
    async def deploy(quote_id: QuoteId, consent: consent_type, ctx: Context) -> ActionDone:
        """Deploy (create) the quoted target's machine; needs an approved quote_action quote."""
        return await act("deploy", quote_id, consent, ctx)

    @tool(SPEND)
    async def stop(quote_id: QuoteId, consent: consent_type, ctx: Context) -> ActionDone:
        """Stop the quoted target's machine (disk kept); needs an approved quote_action quote."""
        return await act("stop", quote_id, consent, ctx)

    @tool(SPEND)
    async def start(quote_id: QuoteId, consent: consent_type, ctx: Context) -> ActionDone:
        """Start the quoted target's stopped machine; needs an approved quote_action quote."""
        return await act("start", quote_id, consent, ctx)

    @tool(SPEND)
    async def terminate(quote_id: QuoteId, consent: consent_type, ctx: Context) -> ActionDone:
        """Destroy the quoted target's machine; needs an approved quote_action quote."""
        return await act("terminate", quote_id, consent, ctx)
