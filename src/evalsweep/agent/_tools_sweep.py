"""The MCP tools for sweeps: plan and price, start, follow, read, compare.

Every tool returns within seconds: ``start_sweep`` starts a background job and
returns its id; ``job_status`` and ``job_logs`` follow it. (Annotations are
evaluated at definition time on purpose; see ``_state``.)
"""

import dataclasses
import functools
import time
from pathlib import Path
from typing import Annotated, Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context
from pydantic import Field

from evalsweep.agent import _ledger as ledger
from evalsweep.agent._approvals import check_gate, refuse
from evalsweep.agent._estimate import (
    estimated_seconds,
    hardware_kind,
    plan_work,
    remaining_work,
    throughput,
)
from evalsweep.agent._inputs import (
    JOB_ID,
    InputError,
    allowed_task_files,
    check_id,
    check_sweep,
)
from evalsweep.agent._options import check_bounds, with_agent_options
from evalsweep.agent._quotes import GateError, create_quote, params_hash
from evalsweep.agent._runs import expand_run
from evalsweep.agent._state import READ, SPEND, WRITE, AgentState, ToolRegistrar
from evalsweep.agent._tool_results import (
    Cancelled,
    JobList,
    JobStarted,
    JobStatus,
    LogPage,
    QuoteOut,
    ResultsTable,
    RunTrend,
    SecretNames,
    Spend,
    TargetList,
    TargetRow,
    TaskInfo,
    TaskList,
)
from evalsweep.agent._views import headline, table_text
from evalsweep.compute import LifecycleTarget
from evalsweep.errors import EvalsweepError, TargetError
from evalsweep.options import agent_options, option, text_problem
from evalsweep.text import visible

Checkpoints = Annotated[
    list[str],
    Field(
        description="Checkpoints to compare: folders, org/name or org/name@revision; or a "
        "training run: a run folder the person allows ([agent] run_dirs) or org/model@step*, "
        "expanded to its checkpoints in step order (choose them with steps, every, last)"
    ),
]
Tasks = Annotated[
    list[str], Field(description="Task names from list_tasks, e.g. mmlu, gsm8k, mmlu_anatomy")
]
TargetName = Annotated[str, Field(description="Where to run: a name from list_targets")]
Fewshot = Annotated[int | None, Field(description=option("num_fewshot").agent_help)]
QuoteId = Annotated[str, Field(description="The quote_id a quote returned")]
JobId = Annotated[str, Field(description="The job_id start_sweep returned")]
Offset = Annotated[
    int, Field(description="Where to start: 0, then the next_offset of the previous page")
]
Subjects = Annotated[bool, Field(description="Also show the per-subject table (MMLU)")]


def _restated(description: str) -> Any:
    return Field(description=f"Optional: must equal the quote's {description}, else refused")


def _local_device(target: str, kind: str, hardware: str, gpu: str | None) -> str:
    """The device of a quoted sweep: ``gpu`` on 'local' only; elsewhere the target's own."""
    if kind == "local":
        device = gpu or "auto"
        problem = text_problem(option("device"), device)
        if problem:
            raise InputError(f"gpu {problem}")
        return device
    if gpu is not None:
        raise InputError(
            f"gpu applies to 'local' only: target {target} runs on its configured hardware "
            f"({hardware}); leave gpu out"
        )
    return "auto"


@dataclasses.dataclass(frozen=True)
class _RunRead:
    document: Any
    result: Any


def _run_document(state: AgentState, params: dict[str, Any], job_id: str) -> _RunRead:
    """A finished run job's results as the trend reads them: its stored scores, each
    checkpoint against the first and the one before it (one Holm family), the steps the
    quote pinned."""
    from evalsweep.comparison import compare_run
    from evalsweep.engine import stored_sweep
    from evalsweep.report import results_document

    checkpoints = list(params["checkpoints"])
    # The identities the job pinned and ran, never the folders' contents now.
    result = stored_sweep(
        state.store, checkpoints, list(params["tasks"]), params.get("num_fewshot"),
        scores_only=True, identities=list(params["identities"]),
    )  # fmt: skip
    against_first, previous = compare_run(result, None)
    document = results_document(
        result, ["mcp:run_trend", job_id], against_first,
        steps=dict(params["run"]["steps"]), previous=previous,
    )  # fmt: skip
    return _RunRead(document, result)


def _given(params: dict[str, Any]) -> list[str]:
    """The checkpoints as the agent named them in the quote (a run as its reference)."""
    run = params.get("run")
    return list(run["references"]) if run else list(params["checkpoints"])


def register_sweep_tools(state: AgentState, tool: ToolRegistrar, consent_type: Any) -> None:
    """Add the sweep tools to the server ``tool`` registers with."""

    @tool(READ)
    async def list_tasks() -> TaskList:
        """The benchmarks evalsweep can run (any MMLU subject as mmlu_<subject> too), and the
        task files of the folders the person's configuration allows ([agent] task_dirs)."""
        from evalsweep.tasks import get_task
        from evalsweep.tasks import list_tasks as names

        rows = []
        for name in [*names(), *allowed_task_files(state.settings.task_dirs)]:
            try:
                task = get_task(name)
            except EvalsweepError:  # a task file in an allowed folder that does not load
                continue
            rows.append(
                TaskInfo(
                    name=Path(name).stem if name.startswith("/") else name,
                    version=task.version,
                    num_fewshot=task.default_num_fewshot,
                    metrics=[m.key for m in task.metrics],
                    file=name if name.startswith("/") else None,
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
        options: dict[str, Any],
        pinned: dict[str, Any] | None = None,
    ) -> tuple[dict[str, Any], Any]:
        """The quote's parameters: each one changes the job, and the price follows the job.

        ``options``: the agent options as sent, by MCP parameter name (``gpu``, ``limit``...).
        A run among ``checkpoints`` is expanded to its selected checkpoints in step order
        (``pinned``: a quote's run, whose ``checkpoints`` are that expansion already).
        """
        tasks = check_sweep(checkpoints, tasks, state.settings.task_dirs)
        check_bounds(options)
        info = state.target(target).info()
        sent = {str(each.agent): options.get(str(each.agent)) for each in agent_options()}
        values = {each.name: sent[str(each.agent)] for each in agent_options()}
        values["device"] = _local_device(target, info.kind, info.hardware, sent["gpu"])
        run = pinned
        if run is None:
            checkpoints, run = await anyio.to_thread.run_sync(
                expand_run, list(checkpoints), values, state.settings.run_dirs
            )
            if run is not None:
                tasks = check_sweep(checkpoints, tasks, state.settings.task_dirs)
        work = await anyio.to_thread.run_sync(
            functools.partial(
                plan_work, list(checkpoints), list(tasks), data_dir=state.data_dir, **values
            )
        )
        params: dict[str, Any] = {
            "kind": "sweep",
            "checkpoints": list(checkpoints),
            "tasks": list(tasks),
            "target": target,
            **sent,
            **values,
            "data_dir": state.data_dir,
            "identities": [c["identity"] for c in work.identities],
            "work_hash": work.work_hash,
        }
        if run is not None:
            params["run"] = run
        return params, work

    @tool(WRITE)  # records a quote; starts nothing
    @with_agent_options
    async def quote_sweep(
        ctx: Context,
        checkpoints: Checkpoints,
        tasks: Tasks,
        target: TargetName = "local",
        **options: Any,
    ) -> QuoteOut:
        """Price preview of a sweep: hardware, hourly rate, estimated time and cost, a quote_id.

        The price is for exactly the job that will run (same command, same hardware,
        the checkpoints' real sizes). The quote covers exactly these parameters, is
        used once and expires.
        """
        params, work = await sweep_params(checkpoints, tasks, target, options)
        info = state.target(target).info()
        rate = state.rate(target)
        kind = hardware_kind(info.kind, info.hardware, work.device_type)
        tps, source = throughput(state.store, state.settings, target, kind)
        todo, loads = remaining_work(state.store, work.plan)
        seconds = estimated_seconds(todo, loads, tps, state.settings)
        cost = rate * seconds / 3600.0
        needs = state.needs_approval(target, rate)
        quote = create_quote(
            state.store,
            kind="sweep",
            target=target,
            params=params,
            preview={
                "hardware": info.hardware,
                "hardware_kind": kind,
                "estimated_seconds": seconds,
                "max_cost": state.worst_case(rate, state.connection(ctx)),
                "currency": info.currency,
                "requests": work.requests,
                "prompt_tokens": work.prompt_tokens,
                "max_generated_tokens": work.max_generated_tokens,
                "tokens": work.tokens,
                "work_to_do": todo,
                "checkpoint_loads": loads,
                "plan": work.plan,
                "tasks": work.tasks,
                "identities": work.identities,
                "connection": state.connection(ctx),
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
    @functools.partial(with_agent_options, restate=True)
    async def start_sweep(
        quote_id: QuoteId,
        consent: consent_type,
        ctx: Context,
        checkpoints: Annotated[list[str] | None, _restated("checkpoints")] = None,
        tasks: Annotated[list[str] | None, _restated("tasks")] = None,
        target: Annotated[str | None, _restated("target")] = None,
        **options: Any,
    ) -> JobStarted:
        """Start the quoted sweep as a background job; returns a job_id at once.

        Only quote_id is needed. Parameters given here must equal the quote's: a
        changed parameter, an expired or reused quote is refused. Paid work needs
        the person's approval, and reserves its worst case within the spend limits.
        """
        store = state.store
        state.check_quote_id(quote_id)
        approved_by = state.apply_consent(quote_id, consent, ctx)
        quote = state.load_or_refuse(quote_id)
        if tasks is not None:  # compared as the quote holds them: as the job names them
            try:
                tasks = check_sweep(quote.params["checkpoints"], tasks, state.settings.task_dirs)
            except EvalsweepError:
                tasks = [f"refused: {name}" for name in tasks]  # differs, so refused below
        restated = {"checkpoints": checkpoints, "tasks": tasks, "target": target, **options}
        given = {**quote.params, "checkpoints": _given(quote.params)}
        for key, value in restated.items():
            if value is not None and value != given.get(key):
                raise refuse(
                    store,
                    quote_id,
                    quote.target,
                    f"{key} differs from quote {quote_id}; quote again for new parameters",
                )
        state.pre_gate(quote, "sweep", "start_sweep")
        q = quote.params
        try:  # planned again: the checkpoints and prompts must be what was quoted
            quoted = {each.agent: q[each.agent] for each in agent_options() if each.agent}
            now_params, work = await sweep_params(
                q["checkpoints"], q["tasks"], q["target"], quoted, q.get("run")
            )
        except EvalsweepError as exc:
            raise refuse(store, quote_id, quote.target, str(exc)) from None
        connection = state.connection(ctx)
        todo, loads = remaining_work(store, work.plan)
        job_id = state.jobs.new_id()
        try:
            reservation = state.jobs.reserve(job_id, connection, quote, "job")
        except GateError as exc:
            raise refuse(store, quote_id, quote.target, str(exc)) from None
        try:
            quote = check_gate(
                store,
                quote_id,
                kind="sweep",
                current_hash=params_hash(now_params),
                used_by="start_sweep",
            )
        except BaseException:
            ledger.release(store, job_id)
            raise
        state.jobs.start(
            quote,
            connection,
            reservation,
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
            reserved_usd=round(reservation.reserved_usd, 6),
            deadline=reservation.deadline,
        )

    @tool(READ)
    async def job_status(job_id: JobId) -> JobStatus:
        """A job's state, documents done per (checkpoint, task), elapsed time, spend so far."""
        check_id(job_id, JOB_ID, "job_id")
        return JobStatus(**state.jobs.status(job_id))

    @tool(READ)
    async def list_jobs() -> JobList:
        """The most recent jobs of this store, newest first (as many as fit the cap)."""
        jobs = [JobStatus(**j) for j in state.jobs.recent(20)]
        while jobs and not state.fits(JobList(jobs=jobs)):
            jobs.pop()
        return JobList(jobs=jobs)

    @tool(READ)
    async def job_logs(
        job_id: JobId,
        offset: Offset = 0,
        max_bytes: Annotated[
            int, Field(description="Most bytes of log in this page (1+)")
        ] = 20_000,
    ) -> LogPage:
        """A page of a job's full log, from byte ``offset``; pass next_offset to read on.

        A page is shortened until the whole result fits the result cap.
        """
        check_id(job_id, JOB_ID, "job_id")
        if max_bytes < 1:
            raise InputError("max_bytes must be 1 or more")
        want = min(max_bytes, state.result_cap)
        while True:
            text, next_offset, size = state.jobs.logs(job_id, offset, want)
            page = LogPage(
                job_id=job_id,
                offset=offset,
                next_offset=next_offset,
                log_bytes=size,
                eof=next_offset >= size,
                text=visible(text, newlines=True),  # as a person may be shown it
            )
            if state.fits(page):
                return page
            if want == 1:
                raise InputError("the result cap is too small for one byte of log")
            want = max(want // 2, 1)

    @tool(WRITE)
    async def cancel_job(job_id: JobId) -> Cancelled:
        """Stop a running job (its whole process group); billing stops now."""
        check_id(job_id, JOB_ID, "job_id")
        stopped = state.jobs.cancel(job_id)
        return Cancelled(job_id=job_id, stopped=stopped, status=state.jobs.row(job_id)["status"])

    @tool(READ)
    async def results_table(
        job_id: JobId, subjects: Subjects = False, offset: Offset = 0
    ) -> ResultsTable:
        """The finished job's side-by-side table with verdicts, as text and as data.

        A table larger than the result cap comes in pages: pass next_offset.
        """
        from evalsweep.report import read_document

        check_id(job_id, JOB_ID, "job_id")
        job = state.jobs.refresh(job_id)
        path = Path(job["out_dir"]) / "results.json"
        if job["status"] != "finished" or not path.is_file():
            raise TargetError(f"job {job_id} is {job['status']}; results come when it finished")
        document = read_document(path)
        results, comparisons = headline(document)
        baseline = comparisons[0]["baseline"] if comparisons else None
        return state.table_page(
            table_text(document, subjects), results, comparisons, baseline, offset
        )

    @tool(READ)
    async def run_trend(
        job_id: JobId,
        best_by: Annotated[
            list[str] | None,
            Field(description="Tasks the best checkpoint is chosen by (default: every task)"),
        ] = None,
    ) -> RunTrend:
        """A finished sweep of a training run, in words: per task the baseline against the
        last checkpoint and each significant change since the checkpoint before; the best
        checkpoint by best_by and whether a paired test finds it better than each other
        checkpoint (Holm-adjusted), as the terminal trend view says it."""
        check_id(job_id, JOB_ID, "job_id")
        job = state.jobs.refresh(job_id)
        params = job["params"]
        if job["status"] != "finished":
            raise TargetError(f"job {job_id} is {job['status']}; its trend comes when it finished")
        from evalsweep.runs import in_step_order

        run = params.get("run")
        if not run or len(params["checkpoints"]) < 2:
            raise InputError(f"job {job_id} is not a sweep of a training run (quote a run)")
        if not in_step_order(params["checkpoints"], run["steps"]):
            raise InputError(f"job {job_id} ran checkpoints that are not one run in step order; "
                             "compare them with results_table")  # fmt: skip
        from evalsweep.report import trend_summary, with_best

        read = _run_document(state, params, job_id)  # the store is this thread's
        names = list(dict.fromkeys(r.task for r in read.document.results))
        for index, name in enumerate(best_by or []):
            if name not in names:
                raise InputError(f"best_by[{index}] is not a task of job {job_id}: "
                                 f"{', '.join(names)}")  # fmt: skip
        shown = with_best(read.document, read.result, best_by)
        lines = [visible(line) for line in trend_summary(shown)]
        rows = [c.to_dict() for c in shown.best or []]
        out = RunTrend(
            job_id=job_id,
            text="\n".join(lines) + "\n",
            lines=lines,
            best=shown.best[0].candidate if shown.best else None,
            best_by=list(dict.fromkeys(str(r["task"]) for r in rows)),
            best_comparisons=rows,
        )
        if not state.fits(out):
            raise InputError("the run's trend is larger than the result cap")
        return out

    @tool(READ)
    async def compare(
        checkpoints: Checkpoints,
        tasks: Tasks,
        num_fewshot: Fewshot = None,
        baseline: Annotated[
            str | None, Field(description="The checkpoint the others are compared with")
        ] = None,
        subjects: Subjects = False,
        offset: Offset = 0,
    ) -> ResultsTable:
        """Compare stored results of checkpoints (from any runs) without calling a model."""
        from evalsweep.comparison import compare_results, pick_baseline
        from evalsweep.engine import stored_sweep
        from evalsweep.report import results_document

        tasks = check_sweep(checkpoints, tasks, state.settings.task_dirs)
        check_bounds({"num_fewshot": num_fewshot})
        chosen = pick_baseline(list(checkpoints), baseline)
        result = stored_sweep(
            state.store, list(checkpoints), list(tasks), num_fewshot, scores_only=True
        )
        found = compare_results(result, chosen)
        document = results_document(result, ["mcp:compare"], found)
        results, comparisons = headline(document)
        return state.table_page(
            table_text(document, subjects), results, comparisons, chosen, offset
        )

    @tool(READ)
    async def spend(ctx: Context) -> Spend:
        """Spend so far and reserved by running work (this connection and global), what the
        limits leave, and the limits, which are read-only."""
        connection = state.connection(ctx)
        since = time.time() - state.settings.global_window_days * 86400
        limits = state.settings.ledger_limits()
        return Spend(
            connection=connection,
            connection_spent_usd=round(ledger.spent(state.store, connection=connection), 6),
            connection_reserved_usd=round(
                ledger.outstanding(state.store, connection=connection), 6
            ),
            global_spent_usd=round(ledger.spent(state.store, since=since), 6),
            global_reserved_usd=round(ledger.outstanding(state.store), 6),
            left_usd=round(max(ledger.left(state.store, limits, connection), 0.0), 6),
            running_usd_per_hour=ledger.running_rate(state.store),
            limits=state.settings.limits(),
        )

    @tool(READ)
    async def list_secrets() -> SecretNames:
        """Names of the secrets jobs receive as environment variables (never their values)."""
        return SecretNames(names=state.secrets.names())
