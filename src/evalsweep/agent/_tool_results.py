"""Typed tool results: what the agent gets back, with an output schema for each tool."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class TaskInfo(BaseModel):
    name: str
    version: str
    num_fewshot: int
    metrics: list[str]
    file: str | None = None  # a task file of an allowed folder: its real path


class TaskList(BaseModel):
    tasks: list[TaskInfo]
    note: str = "mmlu_<subject> names one MMLU subject (e.g. mmlu_abstract_algebra)"


class TargetRow(BaseModel):
    name: str
    kind: str
    hardware: str
    hourly_rate: float
    currency: str
    lifecycle: bool
    approval_needed: bool


class TargetList(BaseModel):
    targets: list[TargetRow]


class TaskWork(BaseModel):
    task: str
    documents: int
    requests_per_checkpoint: int


class RunCheckpoint(BaseModel):
    reference: str
    step: int | None
    identity: str = Field(description="What the job must find there (folder digest or commit)")


class LeftOut(BaseModel):
    checkpoint: str = Field(description="The checkpoint's name as a person is shown it")
    why: str


class RunQuote(BaseModel):
    references: list[str] = Field(description="The checkpoints as named: the run itself")
    selection: dict[str, Any] = Field(description="steps, every and last as quoted")
    checkpoints: list[RunCheckpoint] = Field(
        description="The checkpoints the job runs, in step order, each pinned to its identity"
    )
    left_out: list[LeftOut] = []


class RunTrend(BaseModel):
    job_id: str
    text: str = Field(description="The run's trend in words, as a person may be shown it")
    lines: list[str]
    best: str | None = Field(description="The best checkpoint by the chosen tasks")
    best_by: list[str]
    best_comparisons: list[dict[str, Any]] = Field(
        description="The best against each other checkpoint (baseline = the other one)"
    )


class QuoteOut(BaseModel):
    quote_id: str = Field(description="Pass to start_sweep (or the lifecycle action); single use")
    kind: str
    target: str
    hardware: str
    hourly_rate: float
    currency: str
    estimated_seconds: float
    estimated_cost: float
    max_cost: float = Field(description="Cost if the job ran to its deadline")
    needs_approval: bool
    expires_at: str
    summary: str
    how_to_approve: str
    params: dict[str, Any]
    work: list[TaskWork] = []
    requests: int = 0
    prompt_tokens: int = 0
    max_generated_tokens: int = 0
    work_to_do: float = Field(
        0.0, description="Work the store does not hold yet, in billion-parameter tokens"
    )
    checkpoint_loads: int = 0
    throughput_tokens_per_s: float = Field(
        0.0, description="Tokens per second of a 1-billion-parameter model on this hardware"
    )
    throughput_source: str = ""
    run: RunQuote | None = Field(
        None, description="A training run named: its checkpoints in step order, pinned"
    )


class JobStarted(BaseModel):
    job_id: str
    quote_id: str
    status: str
    approved_by: str | None
    reserved_usd: float = Field(
        description="Worst case held against the spend limits: hourly rate x time to deadline"
    )
    deadline: float = Field(description="When the job is stopped if still running (Unix time)")
    next: str = "poll job_status(job_id); read job_logs(job_id, offset) for the log"


class PartProgress(BaseModel):
    checkpoint: str
    task: str
    documents_done: int
    documents_total: int
    requests_done: int | None = None
    requests_total: int | None = None


class JobStatus(BaseModel):
    job_id: str
    status: str = Field(description="running, finished, failed, cancelled, stopped or lost")
    reason: str | None
    exit_code: int | None
    target: str
    quote_id: str
    started: float
    ended: float | None
    elapsed_s: float
    deadline: float
    estimated_s: float | None = Field(description="The quote's estimated run time")
    actual_s: float | None = Field(description="The real run time, once the job ended")
    documents_done: int
    documents_total: int
    progress: list[PartProgress] = Field(
        description="Per (checkpoint, task): documents done (updated every few seconds)"
    )
    hourly_rate: float
    reserved_usd: float = Field(description="Worst case reserved against the limits")
    spend_usd: float
    last_log_line: str
    log_bytes: int


class JobList(BaseModel):
    jobs: list[JobStatus]


class LogPage(BaseModel):
    job_id: str
    offset: int
    next_offset: int
    log_bytes: int
    eof: bool
    text: str


class Cancelled(BaseModel):
    job_id: str
    stopped: bool
    status: str


class ResultsTable(BaseModel):
    text: str = Field(description="The side-by-side table with verdicts, as in the terminal")
    results: list[dict[str, Any]]
    comparisons: list[dict[str, Any]]
    baseline: str | None
    offset: int = Field(0, description="First item of this page (table lines, then rows)")
    next_offset: int | None = Field(
        None, description="Pass as offset for the rest; null when this is the last page"
    )
    items_total: int = 0


class Spend(BaseModel):
    connection: str
    connection_spent_usd: float
    connection_reserved_usd: float = Field(
        description="What running work of this connection may still cost, at most"
    )
    global_spent_usd: float
    global_reserved_usd: float
    left_usd: float = Field(description="What the limits leave for new work on this connection")
    running_usd_per_hour: float
    limits: dict[str, float] = Field(description="Read-only: set by the person in their config")


class SecretNames(BaseModel):
    names: list[str]


class ActionDone(BaseModel):
    target: str
    action: str
    quote_id: str
    result: str
