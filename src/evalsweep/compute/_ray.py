"""A Ray cluster: one Ray task per (checkpoint, task, shard), results gathered here.

Ray schedules; evalsweep does not. The sweep is planned here first (every
reference resolved, every prompt built), then each checkpoint's missing
documents of each task are cut into shards and each shard becomes one Ray
task with ``num_gpus`` (0 on CPU). A worker runs the ordinary engine on its
shard against a private store and sends its rows back in pieces of at most
5 MB; each piece is written to the local store as it arrives, so a cluster
that dies mid-sweep keeps what finished and the same command resumes. The
sweep's result is then rebuilt from the local store by the same engine, with
no model call, so it is identical to a local run's.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

from evalsweep.compute._base import SweepJob, TargetInfo, TargetRun
from evalsweep.compute._cost import SpendMeter
from evalsweep.compute._runner import CommandRunner
from evalsweep.compute._transfer import PieceError, import_piece
from evalsweep.engine import Progress, SweepSpec, backend_cache_key, plan_sweep, run_sweep
from evalsweep.engine import request_hash as _request_hash
from evalsweep.errors import TargetError
from evalsweep.store import Store
from evalsweep.tasks import PreparedDocument, Task


@dataclass
class RayTarget:
    """A Ray cluster at ``address`` (``HEAD:6379``, ``auto``, ``ray://HEAD:10001``, or ``local``).

    Args:
        name: the target's name.
        address: what ``ray.init`` connects to: the head's GCS address, ``auto``, or
            ``ray://`` for Ray Client (needs ``ray[client]``); ``local`` starts a cluster on
            this machine with ``num_cpus`` CPUs. An already initialised Ray is used as is.
        num_gpus: GPUs per Ray task (0 runs on CPU).
        num_cpus: CPUs per Ray task.
        shards: Ray tasks per (checkpoint, task).
        hourly_rate: what the cluster costs per hour.
        runtime_env: Ray runtime environment for the workers (the setup step: e.g.
            ``{"pip": ["evalsweep==0.1.0"]}``).
        auth_token_secret: the evalsweep secret holding the cluster's token, for a
            cluster with token authentication (default: Ray's own conventions,
            ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH``, ``~/.ray/auth_token``).
    """

    name: str
    address: str = "auto"
    num_gpus: float = 0.0
    num_cpus: float = 1.0
    shards: int = 1
    hourly_rate: float = 0.0
    minimum_seconds: int = 0
    currency: str = "USD"
    hardware: str = "Ray cluster"
    runtime_env: dict[str, Any] = field(default_factory=dict)
    auth_token_secret: str | None = None
    kind: str = "ray"

    def info(self) -> TargetInfo:
        return TargetInfo(
            name=self.name,
            kind=self.kind,
            hardware=self.hardware,
            hourly_rate=self.hourly_rate,
            currency=self.currency,
            lifecycle=False,
            details={"address": self.address, "num_gpus": self.num_gpus, "shards": self.shards},
        )

    def run(self, job: SweepJob, store: Store, progress: Progress) -> TargetRun:
        try:
            import ray
            from ray.exceptions import RayError
        except ImportError:
            raise TargetError(
                f"ray target {self.name} needs Ray: pip install 'evalsweep[compute]'"
            ) from None

        spec = self._pinned(job.spec)
        checkpoints, task_runs = plan_sweep(spec)  # typos fail here, before the cluster
        backend_key = backend_cache_key(spec).key
        runner = CommandRunner(store, self.name)
        meter = SpendMeter(self.hourly_rate, self.minimum_seconds, self.currency)
        meter.start()
        setup = self._connect(runner)
        sized: list[tuple[int, str, str, list[str]]] = []
        for checkpoint in checkpoints:
            for run in task_runs.values():
                missing = _missing(store, checkpoint.identity, backend_key, run)
                for shard in _split(missing, self.shards):
                    sized.append((_work(run, shard), checkpoint.reference, run.task.name, shard))
        # Largest first: Ray starts tasks in the order they are submitted, and a big
        # task started last would leave the other workers idle while it finishes.
        sized.sort(key=lambda item: -item[0])
        pieces = [(reference, task_name, shard) for _, reference, task_name, shard in sized]
        evaluate = ray.remote(_evaluate_shard).options(
            num_gpus=self.num_gpus, num_cpus=self.num_cpus, max_retries=0
        )
        tasks = spec_tasks(spec)
        pending: dict[Any, tuple[str, str, int]] = {}
        for reference, task_name, keys in pieces:
            task, shots = tasks[task_name]
            shard_spec = replace(spec, checkpoints=[reference], tasks=[task], num_fewshot=shots)
            text = f"ray task evaluate_shard({reference!r}, {task_name!r}, {len(keys)} documents)"
            entry = runner.begin(
                "submit", text, detail={"address": self.address, "num_gpus": self.num_gpus}
            )
            pending[evaluate.remote(shard_spec, keys)] = (reference, task_name, entry)
        total = len(pending)
        failed: list[str] = []
        task_seconds: list[float] = []
        progress.start(f"{self.name}: {total} Ray tasks", total)
        try:
            while pending:
                try:
                    ready, _ = ray.wait(list(pending), num_returns=1)
                except (RayError, ConnectionError) as exc:
                    raise TargetError(
                        f"ray target {self.name}: lost the cluster at {self.address} "
                        f"({_last_line(exc)}); {total - len(pending)} of {total} Ray tasks "
                        f"are stored, run the same command to resume"
                    ) from None
                reference, task_name, entry = pending.pop(ready[0])
                try:
                    answer = ray.get(ready[0])
                except (RayError, OSError) as exc:  # this task failed: keep gathering the rest
                    runner.end(entry, 1, 0)
                    failed.append(f"{reference} · {task_name}: {_last_line(exc)}")
                    continue
                task_seconds.append(round(float(answer["seconds"]), 3))
                shard_pieces = answer["pieces"]
                for number, (data, sha256, rows) in enumerate(shard_pieces, start=1):
                    name = f"{number} of {len(shard_pieces)} of {reference} · {task_name}"
                    try:
                        import_piece(store, data, sha256, name=name, expected_rows=rows)
                    except PieceError as exc:
                        runner.end(entry, 1, 0)
                        raise TargetError(
                            f"ray target {self.name}: {exc}; the pieces and Ray tasks before it "
                            "are stored, run the same command to resume"
                        ) from None
                runner.end(entry, 0, sum(len(piece[0]) for piece in shard_pieces))
                progress.advance(1)
                if self.hourly_rate:
                    progress.note(f"{self.name}: {meter.describe()}")
        finally:
            progress.finish()
            meter.stop()
        if failed:
            raise TargetError(
                f"ray target {self.name}: {len(failed)} of {total} Ray tasks failed "
                f"(first: {failed[0]}); the other {total - len(failed)} are stored, "
                f"run the same command to resume"
            )
        result = run_sweep(spec, store, progress)  # every row is stored: no model call
        compute = {
            **self.info().as_dict(),
            "setup": setup,
            "ray_tasks": len(pieces),
            "ray_task_seconds": task_seconds,
            "spend": meter.as_dict(),
        }
        return TargetRun(result, compute)

    def _pinned(self, spec: SweepSpec) -> SweepSpec:
        """Name the workers' device, so the backend key is the one the workers store under."""
        if spec.options.device != "auto":
            return spec
        device = "cuda" if self.num_gpus > 0 else "cpu"
        return replace(spec, options=replace(spec.options, device=device))

    def _connect(self, runner: CommandRunner) -> dict[str, Any]:
        import ray

        from evalsweep.compute import _ray_auth

        source = "none"
        if not ray.is_initialized():
            missing = _ray_auth.ray_client_missing(self.address)
            if missing:
                raise TargetError(f"ray target {self.name}: {missing}")
            token, source = (None, "none")
            if self.address not in ("local",):
                token, source = _ray_auth.find_token(self.auth_token_secret)
            text = "ray.init(local)" if self.address == "local" else f"ray.init({self.address!r})"
            detail = {"runtime_env": self.runtime_env, "auth": source}
            try:
                with (
                    runner.call("connect", text, detail=detail),
                    _ray_auth.TokenEnvironment(token),
                ):
                    kwargs: dict[str, Any] = {"runtime_env": self.runtime_env or None}
                    if self.address != "local":
                        kwargs["address"] = self.address
                        kwargs.update(_ray_auth.init_kwargs(self.address, token))
                    ray.init(**kwargs, log_to_driver=False)
            except Exception as exc:  # noqa: BLE001 - Ray raises many kinds; all end here
                answered = None if self.address == "local" else _ray_auth.answers(self.address)
                refused = _ray_auth.refusal(exc, self.address, source, answered)
                raise TargetError(
                    f"ray target {self.name}: "
                    + (refused or f"cannot connect to {self.address} ({_last_line(exc)})")
                ) from None
        resources = ray.cluster_resources()  # type: ignore[no-untyped-call]
        return {
            "ray": ray.__version__,
            "cpus": resources.get("CPU", 0),
            "gpus": resources.get("GPU", 0),
            "nodes": len([n for n in ray.nodes() if n.get("Alive")]),  # type: ignore[no-untyped-call]
            "auth": source,
        }


def spec_tasks(spec: SweepSpec) -> dict[str, tuple[str | Task, int | None]]:
    """Each task of ``spec`` by name, as one shard names it, with its few-shot count: a
    suite (``leaderboard``) stands for its members at the suite's counts."""
    from evalsweep.tasks import SUITES

    tasks: dict[str, tuple[str | Task, int | None]] = {}
    for given in spec.tasks:
        if isinstance(given, str) and given in SUITES:
            for name, shots in SUITES[given].members:
                tasks.setdefault(spec_task_name(name), (name, shots))
        else:
            tasks.setdefault(spec_task_name(given), (given, spec.num_fewshot))
    return tasks


def spec_task_name(task: str | Task) -> str:
    from evalsweep.tasks import get_task

    return get_task(task).name if isinstance(task, str) else task.name


def _missing(store: Store, identity: str, backend_key: str, run: Any) -> list[str]:
    """Document keys of ``run`` this checkpoint has no current row for."""
    keys = [p.document.key for p in run.prepared]
    stored = store.fetch(identity, backend_key, run.task.name, run.settings_key, keys)
    return [
        p.document.key
        for p in run.prepared
        if p.document.key not in stored or stored[p.document.key].request_hash != _request_hash(p)
    ]


def _work(run: Any, keys: list[str]) -> int:
    """A rough size of a shard's model work: characters of its distinct prompts.

    Generation budgets count as four characters per token. Only the order of
    shards depends on it, never a result.
    """
    wanted = set(keys)
    prompts: set[str] = set()
    generated = 0
    for prepared in run.prepared:
        if prepared.document.key not in wanted:
            continue
        for request in prepared.requests:
            prompts.add(request.context + getattr(request, "continuation", ""))
            generated += 4 * getattr(request, "max_gen_toks", 0)
    return sum(len(prompt) for prompt in prompts) + generated


def _split(keys: list[str], shards: int) -> list[list[str]]:
    if not keys:
        return []
    size = math.ceil(len(keys) / max(1, shards))
    return [keys[start : start + size] for start in range(0, len(keys), size)]


def _last_line(exc: BaseException) -> str:
    text = [line for line in str(exc).strip().split("\n") if line.strip()]
    return text[-1].strip() if text else type(exc).__name__


class _Shard:
    """A task narrowed to some of its documents (prompts built from the whole task first).

    Few-shot examples can depend on a document's position (GSM8K draws them in
    order), so the whole task is prepared and the shard keeps its documents.
    """

    def __init__(self, task: Task, keys: list[str]) -> None:
        self._task = task
        self._keys = frozenset(keys)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._task, name)

    def prepare(self, data: Any, num_fewshot: int) -> list[PreparedDocument]:
        return [p for p in self._task.prepare(data, num_fewshot) if p.document.key in self._keys]


def _evaluate_shard(spec: SweepSpec, keys: list[str]) -> dict[str, Any]:
    """Runs on a Ray worker: the engine on one shard, rows back as JSONL pieces.

    Each piece travels as (bytes, sha256, lines), checked where it lands.
    """
    import tempfile
    from pathlib import Path

    from evalsweep.compute._transfer import row_pieces
    from evalsweep.tasks import get_task

    began = time.time()
    (task,) = spec.tasks
    task = get_task(task) if isinstance(task, str) else task
    shard_spec = replace(spec, tasks=[_Shard(task, keys)])
    wanted = set(keys)
    with (
        tempfile.TemporaryDirectory(prefix="evalsweep-ray-") as folder,
        Store(Path(folder) / "shard.sqlite") as shard_store,
    ):
        result = run_sweep(shard_spec, shard_store)
        records = [r for r in shard_store.records() if r.doc_key in wanted]
        pieces = row_pieces(records)
    return {"pieces": pieces, "backends": result.backends, "seconds": time.time() - began}
