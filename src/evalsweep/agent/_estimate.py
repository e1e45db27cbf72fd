"""How much work a sweep is, and how long it should take on a target.

The work is counted exactly by planning the sweep as ``evalsweep run`` would
(resolved checkpoints, every prompt built, nothing loaded): requests, prompt
tokens (characters / 4) and the most tokens generation may produce. Time is
that, scaled by each checkpoint's parameter count, divided by a throughput in
tokens per second of a 1-billion-parameter model: the one the last finished
jobs on the target measured, else ``[throughput]`` from the configuration,
else the default measured per hardware kind. The result also carries what
the job needs to report its progress from the store.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalsweep.agent._schema import ensure_agent_tables
from evalsweep.agent._settings import DEFAULT_THROUGHPUT, AgentSettings
from evalsweep.store import Store

CHARS_PER_TOKEN = 4
#: Seconds to start the process and load each checkpoint, added to every estimate.
STARTUP_S = 20.0
PER_CHECKPOINT_S = 10.0
#: A finished job refines the throughput only if it computed at least this long.
MIN_MEASURED_S = 60.0
#: Jobs whose median is taken, and how far from the configured figure it may go.
MEASURED_JOBS = 7
CLAMP_FACTOR = 10.0
#: Parameters assumed when a checkpoint's size cannot be read.
UNKNOWN_PARAMETERS = 1_000_000_000
BILLION = 1e9


@dataclass
class Work:
    """A planned sweep: what it will ask, and the keys its rows will have in the store."""

    identities: list[dict[str, str]]
    tasks: list[dict[str, Any]]
    requests: int
    prompt_tokens: int
    max_generated_tokens: int
    work_hash: str
    device_type: str
    plan: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.max_generated_tokens


def plan_work(
    checkpoints: list[str], tasks: list[str], *, data_dir: str | None, **options: Any
) -> Work:
    """Plan the sweep (resolving references, reading data, building prompts).

    ``options``: the agent options' values by option name (``device``, ``limit``,
    ``num_fewshot``; see :func:`evalsweep.options.agent_options`).
    """
    from evalsweep.agent._options import quoted_spec
    from evalsweep.engine import backend_cache_key, plan_sweep, work_digest
    from evalsweep.options import agent_options

    unknown = sorted(set(options) - {each.name for each in agent_options()})
    if unknown:
        raise TypeError(f"plan_work: {unknown} are not options an agent may set")

    spec = quoted_spec(
        {"checkpoints": checkpoints, "tasks": tasks, "data_dir": data_dir, **options}
    )
    resolved, task_runs = plan_sweep(spec)
    cache_key = backend_cache_key(spec)
    backend_key = cache_key.key
    parameters = {}
    for checkpoint in resolved:
        parameters[checkpoint.identity] = parameter_count(
            checkpoint.kind, checkpoint.location, checkpoint.commit
        )
    requests = prompt_chars = generated = 0
    task_rows: list[dict[str, Any]] = []
    plan: list[dict[str, Any]] = []
    for name, run in task_runs.items():
        n_requests = chars = gen = 0
        for prepared in run.prepared:
            for request in prepared.requests:
                n_requests += 1
                chars += len(request.context) + len(getattr(request, "continuation", ""))
                gen += int(getattr(request, "max_gen_toks", 0))
        per_checkpoint = len(resolved)
        requests += n_requests * per_checkpoint
        prompt_chars += chars * per_checkpoint
        generated += gen * per_checkpoint
        task_rows.append(
            {"task": name, "documents": len(run.prepared), "requests_per_checkpoint": n_requests}
        )
        for checkpoint in resolved:
            plan.append(
                {
                    "checkpoint": checkpoint.identity,
                    "backend": backend_key,
                    "task": name,
                    "settings": run.settings_key,
                    "documents": len(run.prepared),
                    "requests": n_requests,
                    "tokens": chars // CHARS_PER_TOKEN + gen,
                    "parameters": parameters[checkpoint.identity],
                }
            )
    return Work(
        identities=[{"reference": c.reference, "identity": c.identity} for c in resolved],
        tasks=task_rows,
        requests=requests,
        prompt_tokens=prompt_chars // CHARS_PER_TOKEN,
        max_generated_tokens=generated,
        work_hash=work_digest(resolved, task_runs),
        device_type=str(cache_key.settings["device_type"]),
        plan=plan,
    )


def parameter_count(kind: str, location: str, commit: str | None) -> int:
    """Parameters of a checkpoint, from safetensors headers (no weights are read)."""
    if kind == "local":
        total = 0
        for file in sorted(Path(location).glob("*.safetensors")):
            try:
                with file.open("rb") as handle:
                    length = int.from_bytes(handle.read(8), "little")
                    header = json.loads(handle.read(length))
            except (OSError, ValueError):
                return UNKNOWN_PARAMETERS
            for name, entry in header.items():
                if name != "__metadata__" and isinstance(entry, dict):
                    count = 1
                    for dim in entry.get("shape", []):
                        count *= int(dim)
                    total += count
        return total or UNKNOWN_PARAMETERS
    try:  # the Hub's own count of a safetensors repository
        from huggingface_hub import HfApi

        info = HfApi().model_info(location, revision=commit)
        return int(info.safetensors.total) if info.safetensors else UNKNOWN_PARAMETERS
    except Exception:  # offline, gated, no safetensors: the estimate says it assumed 1B
        return UNKNOWN_PARAMETERS


#: Words in a target's configured hardware that mean a GPU.
GPU_WORDS = re.compile(
    r"\b(gpu|cuda|h100|h200|b200|a100|a10g?|a40|l4|l40s?|v100|t4|rtx\s*\w+|mi300x?)\b", re.I
)


def hardware_kind(kind: str, hardware: str, device_type: str) -> str:
    """'cuda' or 'cpu' for a target: this machine's planned device, or what a configured
    target's hardware says (a GPU named there is priced as one)."""
    if kind == "local":
        return device_type
    return "cuda" if kind == "skypilot" or GPU_WORDS.search(hardware) else "cpu"


def throughput(
    store: Store, settings: AgentSettings, target: str, hardware_kind: str
) -> tuple[float, str]:
    """Tokens per second for ``target`` and where the figure comes from.

    The base figure is ``[throughput]`` (the target's, else its hardware kind's), else
    the default. Finished jobs on the target refine it, but only jobs that computed for
    at least ``MIN_MEASURED_S`` (and for most of their time: start-up must not dominate)
    count; their median is taken (robust to one odd job) and held within
    ``CLAMP_FACTOR`` of the base (a measurement off by more is not believed).
    """
    ensure_agent_tables(store)
    base, source = base_throughput(settings, target, hardware_kind)
    minimum = settings.throughput.get("min_measured_s", MIN_MEASURED_S)
    rows = store.connection.execute(
        "SELECT work, loads, started, ended FROM agent_jobs WHERE target = ? "
        "AND status = 'finished' AND ended > started AND work > 0 ORDER BY ended DESC LIMIT 50",
        (target,),
    ).fetchall()
    measured = []
    for work, loads, started, ended in rows:
        elapsed = float(ended) - float(started)
        computing = elapsed - overhead_seconds(settings, int(loads))
        if computing >= minimum and computing >= elapsed / 2:
            measured.append(float(work) / computing)
        if len(measured) == MEASURED_JOBS:
            break
    if not measured:
        return base, source
    median = statistics.median(measured)
    low, high = base / CLAMP_FACTOR, base * CLAMP_FACTOR
    held = min(max(median, low), high)
    note = "" if held == median else f", held within {CLAMP_FACTOR:g}x of {base:g}"
    return held, f"measured by the last {len(measured)} jobs on {target} (median{note})"


def base_throughput(settings: AgentSettings, target: str, hardware_kind: str) -> tuple[float, str]:
    for key in (target, hardware_kind):
        if settings.throughput.get(key):
            return settings.throughput[key], f"[throughput] {key} in the configuration"
    return DEFAULT_THROUGHPUT.get(hardware_kind, DEFAULT_THROUGHPUT["cpu"]), (
        f"rough default for {hardware_kind} (no job on {target} long enough to measure yet)"
    )


def remaining_work(store: Store, plan: list[dict[str, Any]]) -> tuple[float, int]:
    """Work the store does not hold yet, in billion-parameter tokens, and checkpoints to load.

    Tokens are weighted by model size because that is what time scales with;
    documents already stored are not computed again, so they cost nothing.
    """
    work = 0.0
    loads: set[str] = set()
    for part in plan:
        done, total = progress(store, [part])
        missing = (total - done) / total if total else 0.0
        if missing > 0:
            work += part["tokens"] * part["parameters"] / BILLION * missing
            loads.add(part["checkpoint"])
    return work, len(loads)


def overhead_seconds(settings: AgentSettings, loads: int) -> float:
    startup = settings.throughput.get("startup_s", STARTUP_S)
    per_checkpoint = settings.throughput.get("per_checkpoint_s", PER_CHECKPOINT_S)
    return startup + per_checkpoint * loads


def estimated_seconds(
    work: float, loads: int, tokens_per_second: float, settings: AgentSettings
) -> float:
    """Start-up, one load per checkpoint with missing work, then the work at the throughput."""
    return overhead_seconds(settings, loads) + work / max(tokens_per_second, 1e-9)


def progress(store: Store, plan: list[dict[str, Any]]) -> tuple[int, int]:
    """Documents of the plan already in the store, and the total."""
    done = total = 0
    for part in plan:
        row = store.connection.execute(
            "SELECT COUNT(*) FROM samples WHERE checkpoint = ? AND backend = ? AND task = ? "
            "AND settings = ?",
            (part["checkpoint"], part["backend"], part["task"], part["settings"]),
        ).fetchone()
        done += min(int(row[0]), int(part["documents"]))
        total += int(part["documents"])
    return done, total
