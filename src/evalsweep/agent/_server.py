"""The MCP server behind ``evalsweep mcp``: tools for planning, pricing, running and reading sweeps.

Every tool returns within seconds: a sweep runs as a background job and is
followed with ``job_status`` and ``job_logs``. Paid work and every lifecycle
action pass the gate (a quote bound to exact parameters, the person's
approval, the spend limits); every result is redacted of secrets and capped
in size. The limits themselves are read from the configuration and no tool
can change them. A watchdog runs beside the tools for as long as the server
serves.
"""

import inspect
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import ConfigDict, ValidationError

from evalsweep import __version__
from evalsweep.agent._inputs import boundary_problem
from evalsweep.agent._state import AgentState, consent_parameter, guarded
from evalsweep.agent._tools_lifecycle import register_lifecycle_tools
from evalsweep.agent._tools_sweep import register_sweep_tools
from evalsweep.compute import Target
from evalsweep.errors import TargetError

INSTRUCTIONS = """\
evalsweep scores several checkpoints on the same benchmarks and says, with paired
statistics, whether a checkpoint really improved. To run a sweep: list_tasks and
list_targets; quote_sweep (a price preview with a quote_id); show the person the
preview; start_sweep(quote_id) returns a job_id at once; poll job_status and read
job_logs(offset); then results_table(job_id). Paid work needs the person's
approval: if start_sweep says so, ask them to run `evalsweep approve QUOTE_ID` in
their own terminal. You cannot approve, raise limits or read secrets.
"""


def build_server(
    store_path: Path,
    *,
    config: dict[str, Any] | None = None,
    targets: dict[str, Target] | None = None,
    data_dir: str | None = None,
) -> MCPServer:
    """The evalsweep MCP server over the results store at ``store_path``."""
    state = AgentState(store_path, config, targets, data_dir)

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[dict[str, Any]]:
        if state.watchdog_running:
            yield {}
            return
        state.watchdog_running = True
        async with anyio.create_task_group() as group:
            group.start_soon(state.watchdog)
            try:
                yield {}
            finally:
                group.cancel_scope.cancel()
                state.watchdog_running = False
                state.close()

    read_only: set[str] = set()
    registered: set[str] = set()

    class Server(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            """Every call that reaches a tool passes here: a tool of that name, then the text
            rule over every string it carries, then the tool's schema, then the tool. Each
            refusal is one line; none repeats the tool's name or an argument's name unless
            it is one evalsweep defines."""
            if name not in registered:
                return state.error("evalsweep", "no tool of that name (see the tool list)", {})
            arguments = arguments or {}
            try:
                problem = boundary_problem(arguments)
                if problem is not None:
                    return state.error(name, problem, {})
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                    raise
                every = {a for tool in registered for a in arguments_of(self, tool)}
                return refused_arguments(state, name, cause, set(arguments_of(self, name)), every)

    async def audit_tool_calls(ctx: Any, call_next: Any) -> Any:
        """The one choke point of refusals: every ``tools/call`` of a tool that is not
        read-only (or of no tool at all) that is refused, by whichever layer (the protocol's
        own check of the request, the text rule, the schema, the gate, the limits), is
        audited here with the request's arguments exactly as received."""
        if ctx.method != "tools/call":
            return await call_next(ctx)
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        name = params.get("name")
        audited = not (isinstance(name, str) and name in read_only)
        try:
            outcome = await call_next(ctx)
        except Exception as exc:
            if audited:
                who = name if isinstance(name, str) and name in registered else "evalsweep"
                said = f"{who}: refused by the protocol layer: {told(exc)}"
                state.audit_call(name, params, said, registered)
            raise
        if audited and isinstance(outcome, Mapping) and outcome.get("isError"):
            content = outcome.get("content") or []
            said = " ".join(str(c.get("text", "")) for c in content if isinstance(c, Mapping))
            state.audit_call(name, params, said, registered)
        return outcome

    server = Server(
        "evalsweep",
        instructions=INSTRUCTIONS,
        version=__version__,
        lifespan=lifespan,
        middleware=[audit_tool_calls],
    )

    def tool(annotations: ToolAnnotations) -> Callable[[Callable[..., Any]], Any]:
        def register(fn: Callable[..., Any]) -> Any:
            registered.add(fn.__name__)
            if annotations.read_only_hint:
                read_only.add(fn.__name__)
            server.tool(annotations=annotations, description=inspect.getdoc(fn))(guarded(state, fn))
            refuse_unknown_arguments(server, fn.__name__)
            return fn

        return register

    consent = consent_parameter(state)
    register_sweep_tools(state, tool, consent)
    register_lifecycle_tools(state, tool, consent)
    return server


def refuse_unknown_arguments(server: MCPServer, name: str) -> None:
    """An argument tool ``name`` does not take is refused, not dropped: a quote asked with
    ``apply_chat_template`` or ``temperature`` must not price (and start) a sweep without
    them. The tool's schema says so too (``additionalProperties: false``)."""
    registered = server._tool_manager.get_tool(name)  # noqa: SLF001 - no public handle
    if registered is None:  # pragma: no cover - registered just above
        raise RuntimeError(f"tool {name} is not registered")
    base = registered.fn_metadata.arg_model
    config = ConfigDict(**{**base.model_config, "extra": "forbid"})
    closed: Any = type(
        base.__name__, (base,), {"model_config": config, "__module__": base.__module__}
    )
    registered.fn_metadata.arg_model = closed
    registered.parameters = closed.model_json_schema(by_alias=True)


def told(exc: Exception) -> str:
    """The JSON-RPC error message the client receives for ``exc`` (as the SDK's runner
    turns it into one): an ``MCPError``'s own, ``Invalid request parameters`` for a request
    that fails validation, ``Internal error`` otherwise."""
    error = getattr(exc, "error", None)
    if isinstance(getattr(error, "message", None), str):
        return str(error.message)  # type: ignore[union-attr]
    return "Invalid request parameters" if isinstance(exc, ValidationError) else "Internal error"


def arguments_of(server: MCPServer, name: str) -> list[str]:
    """The names of the arguments tool ``name`` takes (its schema's properties)."""
    registered = server._tool_manager.get_tool(name)  # noqa: SLF001 - no public handle
    return list((registered.parameters.get("properties") or {}) if registered else {})


def refused_arguments(
    state: AgentState, tool: str, error: ValidationError, known: set[str], vocabulary: set[str]
) -> CallToolResult:
    """Arguments the tool's schema refuses, as the one-line error every other refusal is:
    each argument named with what is wrong with it, never its value (which may be huge, or a
    guess at a secret); an argument the tool does not take is not named at all (its name is
    the caller's text, so it could be a guess at a secret too) unless it is a word of
    evalsweep's own (``vocabulary``: every tool's argument names; and every run option's);
    the names it takes are listed."""
    from evalsweep.options import OPTIONS

    # Words of evalsweep's own (its run options, its tools' arguments) are public, so an
    # argument so named is named back; any other name could be a guess at a secret.
    public = {each.name for each in OPTIONS} | vocabulary | {"consent"}  # and the hidden one
    problems = []
    for item in error.errors(include_url=False, include_input=False):
        loc = [part for part in item["loc"] if part in known or isinstance(part, int)]
        name = ".".join(str(part) for part in loc) or "arguments"
        if item["type"] == "extra_forbidden":
            takes = ", ".join(sorted(known)) or "none"
            sent = item["loc"][-1] if item["loc"] else None
            what = f"unknown argument {sent!r}" if sent in public else "an unknown argument"
            problems.append(f"{what}: the tool does not take it (it takes: {takes})")
        elif item["type"] == "missing":
            problems.append(f"{name} is required")
        else:
            problems.append(f"{name}: {item['msg'][:120]}")
    return state.error(tool, "; ".join(dict.fromkeys(problems)), {})


def serve(
    store_path: Path,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    data_dir: str | None = None,
) -> None:
    """Run the server on stdio, or on streamable HTTP bound to a loopback address."""
    server = build_server(store_path, data_dir=data_dir)
    if transport == "stdio":
        server.run("stdio")
        return
    if host not in ("127.0.0.1", "::1", "localhost"):
        raise TargetError(f"--host {host}: the MCP server only listens on loopback (127.0.0.1)")
    server.run("streamable-http", host=host, port=port)
