"""What the MCP tools share: the store, the rules, the jobs, the targets, the gate helpers.

The tools themselves live in ``_tools_sweep`` and ``_tools_lifecycle``; this
module holds the state they close over, the hidden approval parameter that
the SDK fills by elicitation, and ``guarded``, which redacts secrets from
every result and error and refuses results over the size cap. (Annotations
are evaluated at definition time on purpose: the SDK reads the resolver of
the hidden approval parameter from them.)
"""

import contextlib
import functools
import inspect
import json
import math
import os
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    Resolve,
)
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from evalsweep.agent import _ledger as ledger
from evalsweep.agent._approvals import (
    approve_quote,
    audit_refusal,
    decline_quote,
    describe_quote,
    iso,
    refuse,
)
from evalsweep.agent._inputs import QUOTE_ID, InputError, check_id, unechoed
from evalsweep.agent._jobs import Jobs
from evalsweep.agent._quotes import GateError, Quote, load_quote
from evalsweep.agent._settings import AgentSettings
from evalsweep.agent._tool_results import (
    LeftOut,
    QuoteOut,
    ResultsTable,
    RunCheckpoint,
    RunQuote,
    TaskWork,
)
from evalsweep.compute import LifecycleTarget, Target, load_targets
from evalsweep.config import load_config
from evalsweep.errors import ConfigError, EvalsweepError, TargetError
from evalsweep.options import agent_options, option
from evalsweep.secrets import SecretBox
from evalsweep.store import Store
from evalsweep.text import visible

T = TypeVar("T", bound=BaseModel)
#: Room kept beside a result for the JSON-RPC envelope around it.
ENVELOPE_BYTES = 256
MIN_RESULT_BYTES = 512
MAX_ERROR_CHARS = 4000
#: ``evalsweep run`` flags an error may name, as the agent knows them (its parameters).
FLAG_NAMES = {
    **{each.flag: str(each.agent) for each in agent_options()},
    option("tasks").flag: "tasks",
    option("target").flag: "target",
    option("data_dir").flag: "the server's benchmark data directory (EVALSWEEP_DATA_DIR)",
    option("store").flag: "the server's results store",
}
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
SPEND = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True)
#: Registers a tool function with its annotations (see ``build_server``).
ToolRegistrar = Callable[[ToolAnnotations], Callable[[Callable[..., Any]], Any]]


class Consent(BaseModel):
    """The person's answer to an approval question (a flat schema, as elicitation needs)."""

    approve: bool = Field(description="Approve this spend")


def run_quote(quote: Quote) -> RunQuote | None:
    """A quoted run as the agent is told it: its checkpoints in step order with their
    pinned identities, and those left out (their names as a person is shown them)."""
    run = quote.params.get("run")
    if not run:
        return None
    identity = {pair["reference"]: pair["identity"] for pair in quote.preview["identities"]}
    return RunQuote(
        references=list(run["references"]),
        selection=dict(run["selection"]),
        checkpoints=[
            RunCheckpoint(reference=ref, step=run["steps"].get(ref), identity=identity[ref])
            for ref in quote.params["checkpoints"]
        ],
        left_out=[LeftOut(checkpoint=name, why=why) for name, why in run["left_out"]],
    )


class AgentState:
    """What the tools share: the store, the rules, the jobs, the targets."""

    def __init__(
        self,
        store_path: Path,
        config: dict[str, Any] | None,
        targets: dict[str, Target] | None,
        data_dir: str | None,
    ) -> None:
        config = load_config() if config is None else config
        self.store_path = store_path.resolve()
        self.store = Store(self.store_path)
        self.settings = AgentSettings.from_config(config)
        self.secrets = SecretBox()
        self.targets = dict(load_targets(config, store=self.store))
        self.targets.update(targets or {})
        for target in self.targets.values():  # targets given ready-made audit here too
            if isinstance(target, LifecycleTarget) and target.store is None:
                target.store = self.store
        self.lifecycle_locks = {name: threading.Lock() for name in self.targets}
        self.data_dir = data_dir or os.environ.get("EVALSWEEP_DATA_DIR") or None
        self.server_id = "s-" + uuid.uuid4().hex[:8]
        self.jobs = Jobs(
            self.store, self.settings, self.secrets, self.store_path.parent / "evalsweep-jobs"
        )
        #: (the asking connection's session, quote id) of approval questions put to a person:
        #: only the call that asked applies the answer (another connection's call on the same
        #: quote finds no question of its own).
        self.asked: set[tuple[int, str]] = set()
        self.watchdog_running = False

    def connection(self, ctx: Context | None) -> str:
        """The connection a call's spend counts against: this server process, or the HTTP
        session the transport itself tracks (never a header the client merely sends: a
        stateless client's ``mcp-session-id`` routes nothing, so it names nothing here)."""
        if ctx is None:
            return self.server_id
        try:  # the transport's own id of the connection: None on stdio and stateless HTTP
            connection = getattr(ctx.request_context.session, "_connection", None)
        except ValueError:  # outside a request
            connection = None
        session = getattr(connection, "session_id", None)
        return f"{self.server_id}/{session}" if isinstance(session, str) else self.server_id

    def target(self, name: str) -> Target:
        if name not in self.targets:
            known = ", ".join(sorted(self.targets))
            raise TargetError(f"unknown target {name!r}; known targets: {known}")
        return self.targets[name]

    def rate(self, name: str) -> float:
        info = self.target(name).info()
        return float(self.settings.rates.get(name, info.hourly_rate))

    def needs_approval(self, name: str, rate: float) -> bool:
        if rate > 0:
            return True
        return self.target(name).info().kind == "local" and self.settings.approve_local

    def redact_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.secrets.redact(value)
        if isinstance(value, list):
            return [self.redact_value(v) for v in value]
        if isinstance(value, dict):
            return {k: self.redact_value(v) for k, v in value.items()}
        return value

    def sent(self, result: BaseModel) -> CallToolResult:
        """The result as it goes on the wire: redacted data, structured and as JSON text."""
        data = self.redact_value(result.model_dump(mode="json"))
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=data
        )

    def fits(self, result: BaseModel) -> bool:
        return sent_bytes(self.sent(result)) <= self.result_cap

    @property
    def result_cap(self) -> int:
        """Bytes a whole tool result may take (the JSON-RPC envelope has room beside it)."""
        return max(self.settings.max_result_bytes - ENVELOPE_BYTES, MIN_RESULT_BYTES)

    def error(self, tool: str, message: str, arguments: dict[str, Any]) -> CallToolResult:
        """One line for the agent: one prefix, its arguments named not echoed, secrets
        redacted, CLI flags named as tool arguments, within the cap."""
        message = unechoed(message, arguments)
        message = self.secrets.redact(" ".join(message.split()))
        for flag, name in FLAG_NAMES.items():
            message = re.sub(rf"{flag}(?![a-z-])", name, message)
        while message.startswith(f"{tool}: "):
            message = message[len(tool) + 2 :]
        line = f"{tool}: {message}"
        room = min(self.result_cap // 2, MAX_ERROR_CHARS)
        if len(line.encode()) > room:
            line = line.encode()[: room - 40].decode(errors="ignore") + "... (error shortened)"
        return CallToolResult(content=[TextContent(type="text", text=line)], is_error=True)

    def audit_call(
        self, name: Any, params: Mapping[str, Any], message: str, tools: set[str]
    ) -> None:
        """The audit entry of a refused tool call (the server's one choke point calls this):
        the line the agent was told, the call's arguments exactly as received
        (ASCII-escaped JSON, stored secrets masked), and the quote and target it was about,
        where they are known. A name that is no tool of ours is kept only inside
        ``received`` (as ASCII-escaped JSON), never as the entry's tool."""
        arguments = params.get("arguments")
        known = isinstance(name, str) and name in tools
        sent = arguments if known else {"name": name, "arguments": arguments}
        # Every argument kept (keys too), then each secret masked in whatever form the JSON
        # wrote it; text that merely looks like a mask is written with its '[' escaped
        # (still the same JSON), so a real mask and a sent one read differently.
        raw = json.dumps(sent, ensure_ascii=True, sort_keys=True, default=repr)
        try:
            received = self.secrets.redact(raw.replace("[secret ", "\\u005bsecret "))
            message = visible(self.secrets.redact(" ".join(message.split())))
        except ConfigError as exc:  # the secrets cannot be read: nothing unmasked is kept
            received = json.dumps(f"(not recorded: {exc})")
            message = f"(not recorded: {exc})"
        fields = arguments if isinstance(arguments, Mapping) else {}
        quote_id = fields.get("quote_id")
        quote_id = quote_id if isinstance(quote_id, str) and QUOTE_ID.match(quote_id) else None
        target = fields.get("target")
        target = target if isinstance(target, str) and target in self.targets else None
        if quote_id is not None:
            with contextlib.suppress(GateError):
                target = load_quote(self.store, quote_id).target
        audit_refusal(
            self.store,
            message[:MAX_ERROR_CHARS],
            received=received,
            tool=name if known else "(no such tool)",
            quote_id=quote_id,
            target=target,
        )

    def worst_case(self, rate: float, connection: str) -> float:
        """What starting work at ``rate`` now would reserve: rate x its deadline, rounded down
        to the 1/10,000 of a dollar a person is shown, so what they approve binds exactly."""
        hours = self.settings.max_job_hours
        if rate <= 0:
            return 0.0
        free = ledger.left(self.store, self.settings.ledger_limits(), connection)
        return math.floor(max(min(rate * hours, free), 0.0) * 10_000) / 10_000

    def check_quote_id(self, quote_id: str) -> None:
        """Refuse (audited, never echoed) what is not a quote id at all."""
        try:
            check_id(quote_id, QUOTE_ID, "quote_id")
        except InputError as exc:
            raise refuse(self.store, None, None, str(exc)) from None

    def table_page(
        self,
        text: str,
        results: list[dict[str, Any]],
        comparisons: list[dict[str, Any]],
        baseline: str | None,
        offset: int,
    ) -> ResultsTable:
        """The page of the table from item ``offset`` (its text lines, then result rows, then
        comparisons) that fits the result cap, with the offset of the rest."""
        items: list[tuple[str, Any]] = [("line", line) for line in text.splitlines()]
        items += [("result", r) for r in results] + [("comparison", c) for c in comparisons]
        if offset < 0 or offset > len(items):
            raise InputError(f"offset must be between 0 and {len(items)}")

        def page(count: int) -> ResultsTable:
            chosen = items[offset : offset + count]
            end = offset + count
            return ResultsTable(
                text="".join(f"{v}\n" for k, v in chosen if k == "line"),
                results=[v for k, v in chosen if k == "result"],
                comparisons=[v for k, v in chosen if k == "comparison"],
                baseline=baseline,
                offset=offset,
                next_offset=end if end < len(items) else None,
                items_total=len(items),
            )

        rest = len(items) - offset
        if self.fits(page(rest)):
            return page(rest)
        low, high = 0, rest  # page(low) fits, page(high) does not
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self.fits(page(middle)) else (low, middle)
        if low == 0:
            raise InputError("the result cap is too small for one line of the table")
        return page(low)

    def lifecycle_target(self, name: str) -> LifecycleTarget:
        target = self.target(name)
        if not isinstance(target, LifecycleTarget):
            raise TargetError(f"target {name!r} has no lifecycle (deploy/stop/start/terminate)")
        return target

    def run_lifecycle(self, name: str, action: str) -> str:
        """Do ``action`` on the target, in this thread; returns what happened in one line.

        The target's commands go through its own audited runner, on a store
        connection opened in this thread (the server's stays in the event loop's).
        One action at a time per target.
        """
        target = self.lifecycle_target(name)
        with self.lifecycle_locks[name], Store(self.store_path) as own:
            previous = target.store
            target.store = own
            try:
                outcome = getattr(target, action)()
            finally:
                target.store = previous
        return self.secrets.redact(describe_action(name, action, target, outcome))

    def stop_machine(self, name: str, reason: str) -> None:
        if isinstance(self.targets.get(name), LifecycleTarget):
            self.store.audit_event("stop", f"watchdog stops {name}: {reason}", target=name)
            self.run_lifecycle(name, "stop")

    def close(self) -> None:
        """Stop anything a lifecycle call started on this machine for the server (such as
        SkyPilot's local API server): targets that can say so, when the server ends."""
        for name, target in self.targets.items():
            close = getattr(target, "close", None)
            if callable(close):
                with self.lifecycle_locks[name], Store(self.store_path) as own:
                    previous = getattr(target, "store", None)
                    if isinstance(target, LifecycleTarget):
                        target.store = own
                    try:
                        close()
                    except EvalsweepError as exc:
                        self.store.audit_event("lifecycle", f"close {name} failed: {exc}")
                    finally:
                        if isinstance(target, LifecycleTarget):
                            target.store = previous

    async def watchdog(self) -> None:
        while True:
            for message in self.jobs.watchdog(self.stop_machine):
                self.store.audit_event("watchdog", message)
            await anyio.sleep(self.settings.watchdog_interval_s)

    def apply_consent(
        self, quote_id: str, consent: ElicitationResult[Consent], ctx: Context
    ) -> str | None:
        key = (asker(ctx), quote_id)
        if key not in self.asked:
            return None
        self.asked.discard(key)
        if isinstance(consent, AcceptedElicitation) and consent.data.approve:
            approve_quote(self.store, quote_id, "the person, through the MCP client")
            return "the person, through the MCP client"
        decline_quote(self.store, quote_id, "the person, through the MCP client")
        raise refuse(self.store, quote_id, None, f"quote {quote_id} was declined by the person")

    # -- for the tools: quotes as shown, and the cheap refusals ------------------------------

    def quote_out(self, quote: Quote, currency: str) -> QuoteOut:
        p = quote.preview
        how = (
            f"the person runs 'evalsweep approve {quote.quote_id}' in their terminal"
            + (
                " (or approves when asked through this client)"
                if self.settings.trust_elicitation
                else ""
            )
            if quote.needs_approval
            else "no approval needed (free work on this machine)"
        )
        return QuoteOut(
            quote_id=quote.quote_id,
            kind=quote.kind,
            target=quote.target,
            hardware=str(p.get("hardware", "")),
            hourly_rate=quote.hourly_rate,
            currency=currency,
            estimated_seconds=round(float(p.get("estimated_seconds", 0.0)), 1),
            estimated_cost=round(quote.estimated_cost, 4),
            max_cost=round(float(p.get("max_cost", 0.0)), 4),
            needs_approval=quote.needs_approval,
            expires_at=iso(quote.expires) or "",
            summary=describe_quote(quote),
            how_to_approve=how,
            params={k: v for k, v in quote.params.items() if k not in ("work_hash",)},
            work=[TaskWork(**t) for t in p.get("tasks", [])],
            requests=int(p.get("requests", 0)),
            prompt_tokens=int(p.get("prompt_tokens", 0)),
            max_generated_tokens=int(p.get("max_generated_tokens", 0)),
            work_to_do=round(float(p.get("work_to_do", 0.0)), 6),
            checkpoint_loads=int(p.get("checkpoint_loads", 0)),
            throughput_tokens_per_s=round(float(p.get("throughput", 0.0)), 1),
            throughput_source=str(p.get("throughput_source", "")),
            run=run_quote(quote),
        )

    def load_or_refuse(self, quote_id: str) -> Quote:
        try:
            return load_quote(self.store, quote_id)
        except GateError as exc:
            raise refuse(self.store, quote_id, None, str(exc)) from None

    def pre_gate(self, quote: Quote, kind: str, used_by: str) -> None:
        """The cheap refusals, before any planning."""
        where = f"{used_by}: quote {quote.quote_id}"
        if quote.kind != kind:
            raise refuse(self.store, quote.quote_id, quote.target, f"{where} is not for {kind}")
        if quote.used is not None:
            raise refuse(
                self.store, quote.quote_id, quote.target, f"{where} was already used by "
                f"{quote.used_by}",
            )  # fmt: skip
        if time.time() > quote.expires:
            raise refuse(self.store, quote.quote_id, quote.target, f"{where} expired; quote again")
        if quote.needs_approval and quote.approved is None:
            raise refuse(
                self.store,
                quote.quote_id,
                quote.target,
                f"{where} needs the person's approval: ask them to run 'evalsweep approve "
                f"{quote.quote_id}' in their terminal, then call {used_by} again",
            )


def describe_action(name: str, action: str, target: LifecycleTarget, outcome: Any) -> str:
    """One line for a lifecycle action's result (``deploy`` returns what was launched)."""
    done = {"deploy": "deployed", "stop": "stopped", "start": "started"}
    line = f"{done.get(action, 'terminated')} {name}"
    if action != "deploy" or not isinstance(outcome, dict):
        return line
    line += f" ({target.info().hardware})"
    price = outcome.get("provisioned_hourly_price")
    if isinstance(price, int | float):
        line += f", provisioned at {price:.2f}/h"
    facts = ", ".join(
        f"{key} {value}"
        for key, value in outcome.items()
        if key not in ("provisioned_hourly_price", "dryrun")
        and isinstance(value, str | int | float)
    )
    return f"{line}, {facts}" if facts else line


def guarded(state: AgentState, fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[Any]]:
    """Run a tool: user errors become one-line tool errors; results are redacted and capped.

    The cap counts the whole result as sent (structured content and its text
    copy, encoded): a result over it is an error, and the tools that can page
    (logs, tables) make their pages fit.
    """
    tool = fn.__name__

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            return await masked(*args, **kwargs)
        except ConfigError as exc:
            # Raised by the masking itself: the secrets cannot be read, so no text that might
            # hold one is sent; the line names the file and the reason, never a value.
            line = f"{tool}: nothing is shown while the secrets cannot be read: {exc}"
            return CallToolResult(content=[TextContent(type="text", text=line)], is_error=True)

    async def masked(*args: Any, **kwargs: Any) -> CallToolResult:
        arguments = {k: v for k, v in kwargs.items() if k not in ("ctx", "consent")}
        try:
            result = await fn(*args, **kwargs)
        except EvalsweepError as exc:
            return state.error(tool, str(exc), arguments)
        except OSError as exc:  # e.g. a name too long for the file system
            what = exc.strerror or type(exc).__name__
            return state.error(tool, f"{what} ({exc.filename or 'a path'})", arguments)
        sent = state.sent(result)
        size = sent_bytes(sent)
        if size > state.result_cap:
            return state.error(
                tool,
                f"result of {size} bytes exceeds the {state.settings.max_result_bytes}-byte cap; "
                "ask for less "
                "(job_logs and results_table page by offset)",
                {},
            )
        return sent

    wrapper.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    return wrapper


def sent_bytes(result: CallToolResult) -> int:
    """Bytes of ``result`` encoded as the server sends it (UTF-8 JSON, escapes included)."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def asker(ctx: Context) -> int:
    """Which connection a call came on: its session object, one per client connection."""
    return id(ctx.request_context.session)


def consent_parameter(state: AgentState) -> Any:
    """The hidden tool parameter through which the client may ask the person to approve."""

    async def ask_consent(quote_id: str, ctx: Context) -> Consent | Elicit[Consent]:
        """Ask the person through the client, when it can ask and the config trusts it."""
        try:
            quote = load_quote(state.store, quote_id)
        except GateError:
            return Consent(approve=False)
        if not quote.needs_approval or quote.approved or quote.used or time.time() > quote.expires:
            return Consent(approve=False)
        caps = ctx.client_capabilities
        if not state.settings.trust_elicitation or caps is None or caps.elicitation is None:
            return Consent(approve=False)
        state.asked.add((asker(ctx), quote_id))
        return Elicit(f"evalsweep asks your approval: {describe_quote(quote)}. Approve?", Consent)

    return Annotated[ElicitationResult[Consent], Resolve(ask_consent)]
