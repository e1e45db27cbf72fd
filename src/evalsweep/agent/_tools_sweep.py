"""The MCP tools for sweeps: plan and price, start, follow, read, compare.

Every tool returns within seconds: ``start_sweep`` starts a background job and
returns its id; ``job_status`` and ``job_logs`` follow it. (Annotations are
evaluated at definition time on purpose; see ``_state``.)
"""

import functools
import json
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context

from evalsweep.agent import _ledger as ledger
from evalsweep.agent._approvals import check_gate, refuse
from evalsweep.agent._estimate import estimated_seconds, plan_work, remaining_work, throughput
from evalsweep.agent._models import (
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
)
from evalsweep.agent._quotes import GateError, create_quote, params_hash
from evalsweep.agent._state import READ, SPEND, WRITE, AgentState, ToolRegistrar
from evalsweep.agent._views import headline, table_text
from evalsweep.compute import LifecycleTarget
from evalsweep.errors import EvalsweepError, TargetError

#: Room left in a capped result for the JSON around a log page.
PAGE_OVERHEAD = 2_000


def register_sweep_tools(state: AgentState, tool: ToolRegistrar, consent_type: Any) -> None:
    """Add the sweep tools to the server ``tool`` registers with."""

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

    @tool(WRITE)  # records a quote; starts nothing
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
        return state.quote_out(quote, info.currency)

    @tool(SPEND)
    async def start_sweep(
        quote_id: str,
        consent: consent_type,
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
        approved_by = state.apply_consent(quote_id, consent)
        quote = state.load_or_refuse(quote_id)
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
        state.pre_gate(quote, "sweep", "start_sweep")
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
