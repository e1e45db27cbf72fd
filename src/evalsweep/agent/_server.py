"""The MCP server behind ``evalsweep mcp``: tools for planning, pricing, running and reading sweeps.

Every tool returns within seconds: a sweep runs as a background job and is
followed with ``job_status`` and ``job_logs``. Paid work and every lifecycle
action pass the gate (a quote bound to exact parameters, the person's
approval, the spend limits); every result is redacted of secrets and capped
in size. The limits themselves are read from the configuration and no tool
can change them. (Annotations are evaluated at definition time on purpose:
the SDK reads the resolver of the hidden approval parameter from them.)
"""

import functools
import inspect
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    Resolve,
)
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from evalsweep import __version__
from evalsweep.agent import _ledger as ledger
from evalsweep.agent._approvals import (
    approve_quote,
    check_gate,
    decline_quote,
    describe_quote,
    iso,
    refuse,
)
from evalsweep.agent._estimate import estimated_seconds, plan_work, remaining_work, throughput
from evalsweep.agent._jobs import Jobs
from evalsweep.agent._lifecycle import ACTIONS, AuditedRunner, LifecycleTarget
from evalsweep.agent._models import (
    ActionDone,
    Cancelled,
    JobList,
    JobStarted,
    JobStatus,
    LogPage,
    QuoteOut,
    ResultsTable,
    SecretNames,
    Spend,
    TargetList,
    TargetRow,
    TaskInfo,
    TaskList,
    TaskWork,
)
from evalsweep.agent._quotes import GateError, Quote, create_quote, load_quote, params_hash
from evalsweep.agent._secrets import SecretBox
from evalsweep.agent._settings import AgentSettings
from evalsweep.agent._views import headline, table_text
from evalsweep.compute import Target, load_targets
from evalsweep.config import load_config
from evalsweep.errors import EvalsweepError, TargetError
from evalsweep.store import Store

INSTRUCTIONS = """\
evalsweep scores several checkpoints on the same benchmarks and says, with paired
statistics, whether a checkpoint really improved. To run a sweep: list_tasks and
list_targets; quote_sweep (a price preview with a quote_id); show the person the
preview; start_sweep(quote_id) returns a job_id at once; poll job_status and read
job_logs(offset); then results_table(job_id). Paid work needs the person's
approval: if start_sweep says so, ask them to run `evalsweep approve QUOTE_ID` in
their own terminal. You cannot approve, raise limits or read secrets.
"""

T = TypeVar("T", bound=BaseModel)
READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
SPEND = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=True)
#: Room left in a capped result for the JSON around a log page.
PAGE_OVERHEAD = 2_000


class Consent(BaseModel):
    """The person's answer to an approval question (a flat schema, as elicitation needs)."""

    approve: bool = Field(description="Approve this spend")


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
        self.targets = dict(load_targets(config))
        self.targets.update(targets or {})
        self.data_dir = data_dir or os.environ.get("EVALSWEEP_DATA_DIR") or None
        self.server_id = "s-" + uuid.uuid4().hex[:8]
        self.jobs = Jobs(
            self.store, self.settings, self.secrets, self.store_path.parent / "evalsweep-jobs"
        )
        self.asked: set[str] = set()
        self.watchdog_running = False

    def connection(self, ctx: Context | None) -> str:
        headers = ctx.headers if ctx is not None else None
        session = headers.get("mcp-session-id") if headers else None
        return f"{self.server_id}/{session}" if session else self.server_id

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

    def safe(self, result: T) -> T:
        """The result with secrets redacted, refused when larger than the cap."""
        data = self.redact_value(result.model_dump())
        size = len(json.dumps(data, default=str).encode())
        if size > self.settings.max_result_bytes:
            raise ToolError(
                f"result of {size} bytes exceeds the {self.settings.max_result_bytes}-byte cap; "
                "ask for less (job_logs pages by offset and max_bytes)"
            )
        return type(result).model_validate(data)

    def stop_machine(self, name: str, reason: str) -> None:
        target = self.targets.get(name)
        if isinstance(target, LifecycleTarget):
            runner = AuditedRunner(self.store, name, self.secrets.redact)
            self.store.audit_event("stop", f"watchdog stops {name}: {reason}", target=name)
            target.stop(runner)

    async def watchdog(self) -> None:
        while True:
            for message in self.jobs.watchdog(self.stop_machine):
                self.store.audit_event("watchdog", message)
            await anyio.sleep(self.settings.watchdog_interval_s)


def guarded(state: AgentState, fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Turn user errors into tool errors (redacted) and cap and redact the result."""

    @functools.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            result = await fn(*args, **kwargs)
        except EvalsweepError as exc:
            raise ToolError(state.secrets.redact(str(exc))) from None
        return state.safe(result)

    wrapper.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    return wrapper


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

    server = MCPServer(
        "evalsweep", instructions=INSTRUCTIONS, version=__version__, lifespan=lifespan
    )

    def tool(annotations: ToolAnnotations) -> Callable[[Callable[..., Any]], Any]:
        def register(fn: Callable[..., Any]) -> Any:
            server.tool(annotations=annotations, description=inspect.getdoc(fn))(guarded(state, fn))
            return fn

        return register

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
        state.asked.add(quote_id)
        return Elicit(f"evalsweep asks your approval: {describe_quote(quote)}. Approve?", Consent)

    ConsentParam = Annotated[ElicitationResult[Consent], Resolve(ask_consent)]

    def apply_consent(quote_id: str, consent: ElicitationResult[Consent]) -> str | None:
        if quote_id not in state.asked:
            return None
        state.asked.discard(quote_id)
        if isinstance(consent, AcceptedElicitation) and consent.data.approve:
            approve_quote(state.store, quote_id, "the person, through the MCP client")
            return "the person, through the MCP client"
        decline_quote(state.store, quote_id, "the person, through the MCP client")
        raise refuse(state.store, quote_id, None, f"quote {quote_id} was declined by the person")

    # -- reading ------------------------------------------------------------------------------

    @tool(READ)
    async def list_tasks() -> TaskList:
        """The benchmarks evalsweep can run (any MMLU subject as mmlu_<subject> too)."""
        from evalsweep.tasks import get_task
        from evalsweep.tasks import list_tasks as names

        rows = []
        for name in names():
            task = get_task(name)
            rows.append(
                TaskInfo(
                    name=name,
                    version=task.version,
                    num_fewshot=task.default_num_fewshot,
                    metrics=[m.key for m in task.metrics],
                )
            )
        return TaskList(tasks=rows)

    @tool(READ)
    async def list_targets() -> TargetList:
        """Where work can run: this machine ('local', free) and configured targets, with rates."""
        rows = []
        for name, target in sorted(state.targets.items()):
            info = target.info()
            rate = state.rate(name)
            rows.append(
                TargetRow(
                    name=name,
                    kind=info.kind,
                    hardware=info.hardware,
                    hourly_rate=rate,
                    currency=info.currency,
                    lifecycle=isinstance(target, LifecycleTarget),
                    approval_needed=state.needs_approval(name, rate),
                )
            )
        return TargetList(targets=rows)

    async def sweep_params(
        checkpoints: list[str],
        tasks: list[str],
        target: str,
        gpu: str | None,
        limit: int | None,
        num_fewshot: int | None,
    ) -> tuple[dict[str, Any], Any]:
        info = state.target(target).info()
        if info.kind == "local":
            device = gpu or "auto"
            if not (device in ("auto", "cpu", "cuda") or device.startswith("cuda:")):
                raise TargetError(f"gpu {gpu!r}: on 'local' use cpu, cuda or cuda:N")
        else:
            device = "auto"
        work = await anyio.to_thread.run_sync(
            functools.partial(
                plan_work,
                list(checkpoints),
                list(tasks),
                data_dir=state.data_dir,
                limit=limit,
                num_fewshot=num_fewshot,
                device=device,
            )
        )
        params = {
            "kind": "sweep",
            "checkpoints": list(checkpoints),
            "tasks": list(tasks),
            "target": target,
            "gpu": gpu,
            "limit": limit,
            "num_fewshot": num_fewshot,
            "device": device,
            "data_dir": state.data_dir,
            "identities": [c["identity"] for c in work.identities],
            "work_hash": work.work_hash,
        }
        return params, work

    @tool(READ)
    async def quote_sweep(
        checkpoints: list[str],
        tasks: list[str],
        target: str = "local",
        gpu: str | None = None,
        limit: int | None = None,
        num_fewshot: int | None = None,
    ) -> QuoteOut:
        """Price preview of a sweep: hardware, hourly rate, estimated time and cost, a quote_id.

        checkpoints: folders, org/name or org/name@revision. tasks: e.g. mmlu, gsm8k,
        mmlu_abstract_algebra. limit: first N documents per task (a small trial).
        The quote covers exactly these parameters, is used once and expires.
        """
        params, work = await sweep_params(checkpoints, tasks, target, gpu, limit, num_fewshot)
        info = state.target(target).info()
        rate = state.rate(target)
        kind = work.device_type if info.kind == "local" else ("cuda" if gpu else "cpu")
        tps, source = throughput(state.store, state.settings, target, kind)
        todo, loads = remaining_work(state.store, work.plan)
        seconds = estimated_seconds(todo, loads, tps, state.settings)
        cost = rate * seconds / 3600.0
        max_cost = rate * state.settings.max_job_hours
        needs = state.needs_approval(target, rate)
        quote = create_quote(
            state.store,
            kind="sweep",
            target=target,
            params=params,
            preview={
                "hardware": info.hardware,
                "estimated_seconds": seconds,
                "max_cost": max_cost,
                "currency": info.currency,
                "requests": work.requests,
                "prompt_tokens": work.prompt_tokens,
                "max_generated_tokens": work.max_generated_tokens,
                "tokens": work.tokens,
                "work_to_do": todo,
                "checkpoint_loads": loads,
                "plan": work.plan,
                "tasks": work.tasks,
                "throughput": tps,
                "throughput_source": source,
            },
            hourly_rate=rate,
            estimated_cost=cost,
            needs_approval=needs,
            ttl_s=state.settings.quote_ttl_s,
        )
        return quote_out(quote, info.currency)

    def quote_out(quote: Quote, currency: str) -> QuoteOut:
        p = quote.preview
        how = (
            f"the person runs 'evalsweep approve {quote.quote_id}' in their terminal"
            + (
                " (or approves when asked through this client)"
                if state.settings.trust_elicitation
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
        )

    @tool(SPEND)
    async def start_sweep(
        quote_id: str,
        consent: ConsentParam,
        ctx: Context,
        checkpoints: list[str] | None = None,
        tasks: list[str] | None = None,
        target: str | None = None,
        gpu: str | None = None,
        limit: int | None = None,
        num_fewshot: int | None = None,
    ) -> JobStarted:
        """Start the quoted sweep as a background job; returns a job_id at once.

        Only quote_id is needed. Parameters given here must equal the quote's: a
        changed parameter, an expired or reused quote is refused. Paid work needs
        the person's approval and must fit the spend limits.
        """
        store = state.store
        approved_by = apply_consent(quote_id, consent)
        quote = load_or_refuse(quote_id)
        restated = {
            "checkpoints": checkpoints,
            "tasks": tasks,
            "target": target,
            "gpu": gpu,
            "limit": limit,
            "num_fewshot": num_fewshot,
        }
        for key, value in restated.items():
            if value is not None and value != quote.params.get(key):
                raise refuse(
                    store,
                    quote_id,
                    quote.target,
                    f"start_sweep: {key}={value!r} differs from quote {quote_id} "
                    f"({quote.params.get(key)!r}); quote again for new parameters",
                )
        pre_gate(quote, "sweep", "start_sweep")
        if state.target(quote.target).info().kind != "local":
            raise refuse(
                store,
                quote_id,
                quote.target,
                f"start_sweep: target {quote.target} cannot run sweeps from this server yet",
            )
        q = quote.params
        try:  # planned again: the checkpoints and prompts must be what was quoted
            now_params, work = await sweep_params(
                q["checkpoints"], q["tasks"], q["target"], q["gpu"], q["limit"], q["num_fewshot"]
            )
        except EvalsweepError as exc:
            raise refuse(store, quote_id, quote.target, f"start_sweep: {exc}") from None
        connection = state.connection(ctx)
        try:
            state.jobs.check_budget(connection, quote.estimated_cost, quote.hourly_rate)
        except GateError as exc:
            raise refuse(store, quote_id, quote.target, str(exc)) from None
        quote = check_gate(
            store,
            quote_id,
            kind="sweep",
            current_hash=params_hash(now_params),
            used_by="start_sweep",
        )
        todo, loads = remaining_work(store, work.plan)
        job_id = state.jobs.start(
            quote,
            connection,
            store_path=state.store_path,
            data_dir=q["data_dir"],
            plan=work.plan,
            work=todo,
            loads=loads,
        )
        return JobStarted(
            job_id=job_id,
            quote_id=quote_id,
            status="running",
            approved_by=approved_by or quote.approved_by,
        )

    def load_or_refuse(quote_id: str) -> Quote:
        try:
            return load_quote(state.store, quote_id)
        except GateError as exc:
            raise refuse(state.store, quote_id, None, str(exc)) from None

    def pre_gate(quote: Quote, kind: str, used_by: str) -> None:
        """The cheap refusals, before any planning."""
        where = f"{used_by}: quote {quote.quote_id}"
        if quote.kind != kind:
            raise refuse(state.store, quote.quote_id, quote.target, f"{where} is not for {kind}")
        if quote.used is not None:
            raise refuse(
                state.store, quote.quote_id, quote.target, f"{where} was already used by "
                f"{quote.used_by}",
            )  # fmt: skip
        if time.time() > quote.expires:
            raise refuse(state.store, quote.quote_id, quote.target, f"{where} expired; quote again")
        if quote.needs_approval and quote.approved is None:
            raise refuse(
                state.store,
                quote.quote_id,
                quote.target,
                f"{where} needs the person's approval: ask them to run 'evalsweep approve "
                f"{quote.quote_id}' in their terminal, then call {used_by} again",
            )

    @tool(READ)
    async def job_status(job_id: str) -> JobStatus:
        """A job's state, progress (documents in the store), elapsed time and spend so far."""
        return JobStatus(**state.jobs.status(job_id))

    @tool(READ)
    async def list_jobs() -> JobList:
        """The most recent jobs of this store, newest first."""
        return JobList(jobs=[JobStatus(**j) for j in state.jobs.recent(20)])

    @tool(READ)
    async def job_logs(job_id: str, offset: int = 0, max_bytes: int = 20_000) -> LogPage:
        """A page of a job's full log, from byte ``offset``; pass next_offset to read on."""
        cap = max(state.settings.max_result_bytes - PAGE_OVERHEAD, 1_000) // 2
        text, next_offset, size = state.jobs.logs(job_id, offset, min(max_bytes, cap))
        return LogPage(
            job_id=job_id,
            offset=offset,
            next_offset=next_offset,
            log_bytes=size,
            eof=next_offset >= size,
            text=text,
        )

    @tool(WRITE)
    async def cancel_job(job_id: str) -> Cancelled:
        """Stop a running job (its whole process group); billing stops now."""
        stopped = state.jobs.cancel(job_id)
        return Cancelled(job_id=job_id, stopped=stopped, status=state.jobs.row(job_id)["status"])

    @tool(READ)
    async def results_table(job_id: str, subjects: bool = False) -> ResultsTable:
        """The finished job's side-by-side table with verdicts, as text and as data."""
        job = state.jobs.refresh(job_id)
        path = Path(job["out_dir"]) / "results.json"
        if job["status"] != "finished" or not path.is_file():
            raise TargetError(f"job {job_id} is {job['status']}; results come when it finished")
        document = json.loads(path.read_text())
        results, comparisons = headline(document)
        return ResultsTable(
            text=table_text(document, subjects),
            results=results,
            comparisons=comparisons,
            baseline=comparisons[0]["baseline"] if comparisons else None,
        )

    @tool(READ)
    async def compare(
        checkpoints: list[str],
        tasks: list[str],
        num_fewshot: int | None = None,
        baseline: str | None = None,
        subjects: bool = False,
    ) -> ResultsTable:
        """Compare stored results of checkpoints (from any runs) without calling a model."""
        from evalsweep.comparison import compare_results, pick_baseline
        from evalsweep.engine import stored_sweep
        from evalsweep.report import results_document

        chosen = pick_baseline(list(checkpoints), baseline)
        result = stored_sweep(state.store, list(checkpoints), list(tasks), num_fewshot)
        found = [c.to_dict() for c in compare_results(result, chosen)]
        document = results_document(result, ["mcp:compare"], found)
        results, comparisons = headline(document)
        return ResultsTable(
            text=table_text(document, subjects),
            results=results,
            comparisons=comparisons,
            baseline=chosen,
        )

    @tool(READ)
    async def spend(ctx: Context) -> Spend:
        """Spend so far (this connection and global) and the limits, which are read-only."""
        connection = state.connection(ctx)
        since = time.time() - state.settings.global_window_days * 86400
        return Spend(
            connection=connection,
            connection_spent_usd=round(ledger.spent(state.store, connection=connection), 6),
            global_spent_usd=round(ledger.spent(state.store, since=since), 6),
            running_usd_per_hour=ledger.running_rate(state.store),
            limits=state.settings.limits(),
        )

    @tool(READ)
    async def list_secrets() -> SecretNames:
        """Names of the secrets jobs receive as environment variables (never their values)."""
        return SecretNames(names=state.secrets.names())

    # -- lifecycle ----------------------------------------------------------------------------

    @tool(READ)
    async def quote_action(target: str, action: str) -> QuoteOut:
        """Price preview of deploy, stop, start or terminate on a target that has a lifecycle."""
        chosen = state.target(target)
        if not isinstance(chosen, LifecycleTarget):
            raise TargetError(f"target {target!r} has no lifecycle (deploy/stop/start/terminate)")
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
                "max_cost": rate * state.settings.max_job_hours if bills else 0.0,
            },
            hourly_rate=rate,
            estimated_cost=rate if bills else 0.0,
            needs_approval=True,
            ttl_s=state.settings.quote_ttl_s,
        )
        return quote_out(quote, info.currency)

    async def act(action: str, quote_id: str, consent: Any, ctx: Context) -> ActionDone:
        store = state.store
        apply_consent(quote_id, consent)
        quote = load_or_refuse(quote_id)
        pre_gate(quote, "lifecycle", action)
        chosen = state.target(quote.target)
        if not isinstance(chosen, LifecycleTarget):
            raise refuse(store, quote_id, quote.target, f"{action}: target has no lifecycle")
        connection = state.connection(ctx)
        if action in ("deploy", "start"):
            try:
                state.jobs.check_budget(connection, quote.estimated_cost, quote.hourly_rate)
            except GateError as exc:
                raise refuse(store, quote_id, quote.target, str(exc)) from None
        wanted = {"kind": "lifecycle", "target": quote.target, "action": action}
        check_gate(store, quote_id, kind="lifecycle", current_hash=params_hash(wanted),
                   used_by=action)  # fmt: skip
        outcome = await anyio.to_thread.run_sync(
            functools.partial(run_action, chosen, action, quote.target)
        )
        store.audit_event(
            "lifecycle",
            f"{action} {quote.target}: {outcome}",
            target=quote.target,
            detail={"quote": quote_id, "connection": connection},
        )
        if action in ("deploy", "start"):
            ledger.open_item(
                store,
                f"{quote.target}:{action}:{quote_id}",
                kind="machine",
                connection=connection,
                target=quote.target,
                hourly_rate=quote.hourly_rate,
            )
        else:
            for item in ledger.open_items(store):
                if item[1] == "machine" and item[3] == quote.target:
                    ledger.close_item(store, item[0])
        return ActionDone(target=quote.target, action=action, quote_id=quote_id, result=outcome)

    def run_action(target: LifecycleTarget, action: str, name: str) -> str:
        """In a worker thread, with its own store connection, so the server keeps serving."""
        with Store(state.store_path) as own:
            runner = AuditedRunner(own, name, state.secrets.redact)
            return str(getattr(target, action)(runner))

    @tool(SPEND)
    async def deploy(quote_id: str, consent: ConsentParam, ctx: Context) -> ActionDone:
        """Deploy (create) the quoted target's machine; needs an approved quote_action quote."""
        return await act("deploy", quote_id, consent, ctx)

    @tool(SPEND)
    async def stop(quote_id: str, consent: ConsentParam, ctx: Context) -> ActionDone:
        """Stop the quoted target's machine (disk kept); needs an approved quote_action quote."""
        return await act("stop", quote_id, consent, ctx)

    @tool(SPEND)
    async def start(quote_id: str, consent: ConsentParam, ctx: Context) -> ActionDone:
        """Start the quoted target's stopped machine; needs an approved quote_action quote."""
        return await act("start", quote_id, consent, ctx)

    @tool(SPEND)
    async def terminate(quote_id: str, consent: ConsentParam, ctx: Context) -> ActionDone:
        """Destroy the quoted target's machine; needs an approved quote_action quote."""
        return await act("terminate", quote_id, consent, ctx)

    return server


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
